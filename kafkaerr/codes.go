package kafkaerr

// The codes of Kafka's Errors enum (org.apache.kafka.common.protocol.Errors),
// by the names Kafka gives them.
const (
	None                                      Code = 0
	ErrUnknownServerError                     Code = -1
	ErrOffsetOutOfRange                       Code = 1
	ErrCorruptMessage                         Code = 2
	ErrUnknownTopicOrPartition                Code = 3
	ErrInvalidFetchSize                       Code = 4
	ErrLeaderNotAvailable                     Code = 5
	ErrNotLeaderOrFollower                    Code = 6
	ErrRequestTimedOut                        Code = 7
	ErrBrokerNotAvailable                     Code = 8
	ErrReplicaNotAvailable                    Code = 9
	ErrMessageTooLarge                        Code = 10
	ErrStaleControllerEpoch                   Code = 11
	ErrOffsetMetadataTooLarge                 Code = 12
	ErrNetworkException                       Code = 13
	ErrCoordinatorLoadInProgress              Code = 14
	ErrCoordinatorNotAvailable                Code = 15
	ErrNotCoordinator                         Code = 16
	ErrInvalidTopicException                  Code = 17
	ErrRecordListTooLarge                     Code = 18
	ErrNotEnoughReplicas                      Code = 19
	ErrNotEnoughReplicasAfterAppend           Code = 20
	ErrInvalidRequiredAcks                    Code = 21
	ErrIllegalGeneration                      Code = 22
	ErrInconsistentGroupProtocol              Code = 23
	ErrInvalidGroupID                         Code = 24
	ErrUnknownMemberID                        Code = 25
	ErrInvalidSessionTimeout                  Code = 26
	ErrRebalanceInProgress                    Code = 27
	ErrInvalidCommitOffsetSize                Code = 28
	ErrTopicAuthorizationFailed               Code = 29
	ErrGroupAuthorizationFailed               Code = 30
	ErrClusterAuthorizationFailed             Code = 31
	ErrInvalidTimestamp                       Code = 32
	ErrUnsupportedSASLMechanism               Code = 33
	ErrIllegalSASLState                       Code = 34
	ErrUnsupportedVersion                     Code = 35
	ErrTopicAlreadyExists                     Code = 36
	ErrInvalidPartitions                      Code = 37
	ErrInvalidReplicationFactor               Code = 38
	ErrInvalidReplicaAssignment               Code = 39
	ErrInvalidConfig                          Code = 40
	ErrNotController                          Code = 41
	ErrInvalidRequest                         Code = 42
	ErrUnsupportedForMessageFormat            Code = 43
	ErrPolicyViolation                        Code = 44
	ErrOutOfOrderSequenceNumber               Code = 45
	ErrDuplicateSequenceNumber                Code = 46
	ErrInvalidProducerEpoch                   Code = 47
	ErrInvalidTxnState                        Code = 48
	ErrInvalidProducerIDMapping               Code = 49
	ErrInvalidTransactionTimeout              Code = 50
	ErrConcurrentTransactions                 Code = 51
	ErrTransactionCoordinatorFenced           Code = 52
	ErrTransactionalIDAuthorizationFailed     Code = 53
	ErrSecurityDisabled                       Code = 54
	ErrOperationNotAttempted                  Code = 55
	ErrKafkaStorageError                      Code = 56
	ErrLogDirNotFound                         Code = 57
	ErrSASLAuthenticationFailed               Code = 58
	ErrUnknownProducerID                      Code = 59
	ErrReassignmentInProgress                 Code = 60
	ErrDelegationTokenAuthDisabled            Code = 61
	ErrDelegationTokenNotFound                Code = 62
	ErrDelegationTokenOwnerMismatch           Code = 63
	ErrDelegationTokenRequestNotAllowed       Code = 64
	ErrDelegationTokenAuthorizationFailed     Code = 65
	ErrDelegationTokenExpired                 Code = 66
	ErrInvalidPrincipalType                   Code = 67
	ErrNonEmptyGroup                          Code = 68
	ErrGroupIDNotFound                        Code = 69
	ErrFetchSessionIDNotFound                 Code = 70
	ErrInvalidFetchSessionEpoch               Code = 71
	ErrListenerNotFound                       Code = 72
	ErrTopicDeletionDisabled                  Code = 73
	ErrFencedLeaderEpoch                      Code = 74
	ErrUnknownLeaderEpoch                     Code = 75
	ErrUnsupportedCompressionType             Code = 76
	ErrStaleBrokerEpoch                       Code = 77
	ErrOffsetNotAvailable                     Code = 78
	ErrMemberIDRequired                       Code = 79
	ErrPreferredLeaderNotAvailable            Code = 80
	ErrGroupMaxSizeReached                    Code = 81
	ErrFencedInstanceID                       Code = 82
	ErrEligibleLeadersNotAvailable            Code = 83
	ErrElectionNotNeeded                      Code = 84
	ErrNoReassignmentInProgress               Code = 85
	ErrGroupSubscribedToTopic                 Code = 86
	ErrInvalidRecord                          Code = 87
	ErrUnstableOffsetCommit                   Code = 88
	ErrThrottlingQuotaExceeded                Code = 89
	ErrProducerFenced                         Code = 90
	ErrResourceNotFound                       Code = 91
	ErrDuplicateResource                      Code = 92
	ErrUnacceptableCredential                 Code = 93
	ErrInconsistentVoterSet                   Code = 94
	ErrInvalidUpdateVersion                   Code = 95
	ErrFeatureUpdateFailed                    Code = 96
	ErrPrincipalDeserializationFailure        Code = 97
	ErrSnapshotNotFound                       Code = 98
	ErrPositionOutOfRange                     Code = 99
	ErrUnknownTopicID                         Code = 100
	ErrDuplicateBrokerRegistration            Code = 101
	ErrBrokerIDNotRegistered                  Code = 102
	ErrInconsistentTopicID                    Code = 103
	ErrInconsistentClusterID                  Code = 104
	ErrTransactionalIDNotFound                Code = 105
	ErrFetchSessionTopicIDError               Code = 106
	ErrIneligibleReplica                      Code = 107
	ErrNewLeaderElected                       Code = 108
	ErrOffsetMovedToTieredStorage             Code = 109
	ErrFencedMemberEpoch                      Code = 110
	ErrUnreleasedInstanceID                   Code = 111
	ErrUnsupportedAssignor                    Code = 112
	ErrStaleMemberEpoch                       Code = 113
	ErrMismatchedEndpointType                 Code = 114
	ErrUnsupportedEndpointType                Code = 115
	ErrUnknownControllerID                    Code = 116
	ErrUnknownSubscriptionID                  Code = 117
	ErrTelemetryTooLarge                      Code = 118
	ErrInvalidRegistration                    Code = 119
	ErrTransactionAbortable                   Code = 120
	ErrInvalidRecordState                     Code = 121
	ErrShareSessionNotFound                   Code = 122
	ErrInvalidShareSessionEpoch               Code = 123
	ErrFencedStateEpoch                       Code = 124
	ErrInvalidVoterKey                        Code = 125
	ErrDuplicateVoter                         Code = 126
	ErrVoterNotFound                          Code = 127
	ErrInvalidRegularExpression               Code = 128
	ErrRebootstrapRequired                    Code = 129
	ErrStreamsInvalidTopology                 Code = 130
	ErrStreamsInvalidTopologyEpoch            Code = 131
	ErrStreamsTopologyFenced                  Code = 132
	ErrShareSessionLimitReached               Code = 133
	ErrGroupDeletionFailed                    Code = 134
	ErrStreamsTopologyDescriptionUpdateFailed Code = 135
	ErrControllerIDNotRegistered              Code = 136
)

// names holds each code's name and whether Kafka's exception for it is
// retriable (extends RetriableException).
var names = map[Code]struct {
	name      string
	retriable bool
}{
	None:                                      {"NONE", false},
	ErrUnknownServerError:                     {"UNKNOWN_SERVER_ERROR", false},
	ErrOffsetOutOfRange:                       {"OFFSET_OUT_OF_RANGE", false},
	ErrCorruptMessage:                         {"CORRUPT_MESSAGE", true},
	ErrUnknownTopicOrPartition:                {"UNKNOWN_TOPIC_OR_PARTITION", true},
	ErrInvalidFetchSize:                       {"INVALID_FETCH_SIZE", false},
	ErrLeaderNotAvailable:                     {"LEADER_NOT_AVAILABLE", true},
	ErrNotLeaderOrFollower:                    {"NOT_LEADER_OR_FOLLOWER", true},
	ErrRequestTimedOut:                        {"REQUEST_TIMED_OUT", true},
	ErrBrokerNotAvailable:                     {"BROKER_NOT_AVAILABLE", true},
	ErrReplicaNotAvailable:                    {"REPLICA_NOT_AVAILABLE", true},
	ErrMessageTooLarge:                        {"MESSAGE_TOO_LARGE", false},
	ErrStaleControllerEpoch:                   {"STALE_CONTROLLER_EPOCH", false},
	ErrOffsetMetadataTooLarge:                 {"OFFSET_METADATA_TOO_LARGE", false},
	ErrNetworkException:                       {"NETWORK_EXCEPTION", true},
	ErrCoordinatorLoadInProgress:              {"COORDINATOR_LOAD_IN_PROGRESS", true},
	ErrCoordinatorNotAvailable:                {"COORDINATOR_NOT_AVAILABLE", true},
	ErrNotCoordinator:                         {"NOT_COORDINATOR", true},
	ErrInvalidTopicException:                  {"INVALID_TOPIC_EXCEPTION", false},
	ErrRecordListTooLarge:                     {"RECORD_LIST_TOO_LARGE", false},
	ErrNotEnoughReplicas:                      {"NOT_ENOUGH_REPLICAS", true},
	ErrNotEnoughReplicasAfterAppend:           {"NOT_ENOUGH_REPLICAS_AFTER_APPEND", true},
	ErrInvalidRequiredAcks:                    {"INVALID_REQUIRED_ACKS", false},
	ErrIllegalGeneration:                      {"ILLEGAL_GENERATION", false},
	ErrInconsistentGroupProtocol:              {"INCONSISTENT_GROUP_PROTOCOL", false},
	ErrInvalidGroupID:                         {"INVALID_GROUP_ID", false},
	ErrUnknownMemberID:                        {"UNKNOWN_MEMBER_ID", false},
	ErrInvalidSessionTimeout:                  {"INVALID_SESSION_TIMEOUT", false},
	ErrRebalanceInProgress:                    {"REBALANCE_IN_PROGRESS", false},
	ErrInvalidCommitOffsetSize:                {"INVALID_COMMIT_OFFSET_SIZE", false},
	ErrTopicAuthorizationFailed:               {"TOPIC_AUTHORIZATION_FAILED", false},
	ErrGroupAuthorizationFailed:               {"GROUP_AUTHORIZATION_FAILED", false},
	ErrClusterAuthorizationFailed:             {"CLUSTER_AUTHORIZATION_FAILED", false},
	ErrInvalidTimestamp:                       {"INVALID_TIMESTAMP", false},
	ErrUnsupportedSASLMechanism:               {"UNSUPPORTED_SASL_MECHANISM", false},
	ErrIllegalSASLState:                       {"ILLEGAL_SASL_STATE", false},
	ErrUnsupportedVersion:                     {"UNSUPPORTED_VERSION", false},
	ErrTopicAlreadyExists:                     {"TOPIC_ALREADY_EXISTS", false},
	ErrInvalidPartitions:                      {"INVALID_PARTITIONS", false},
	ErrInvalidReplicationFactor:               {"INVALID_REPLICATION_FACTOR", false},
	ErrInvalidReplicaAssignment:               {"INVALID_REPLICA_ASSIGNMENT", false},
	ErrInvalidConfig:                          {"INVALID_CONFIG", false},
	ErrNotController:                          {"NOT_CONTROLLER", true},
	ErrInvalidRequest:                         {"INVALID_REQUEST", false},
	ErrUnsupportedForMessageFormat:            {"UNSUPPORTED_FOR_MESSAGE_FORMAT", false},
	ErrPolicyViolation:                        {"POLICY_VIOLATION", false},
	ErrOutOfOrderSequenceNumber:               {"OUT_OF_ORDER_SEQUENCE_NUMBER", false},
	ErrDuplicateSequenceNumber:                {"DUPLICATE_SEQUENCE_NUMBER", false},
	ErrInvalidProducerEpoch:                   {"INVALID_PRODUCER_EPOCH", false},
	ErrInvalidTxnState:                        {"INVALID_TXN_STATE", false},
	ErrInvalidProducerIDMapping:               {"INVALID_PRODUCER_ID_MAPPING", false},
	ErrInvalidTransactionTimeout:              {"INVALID_TRANSACTION_TIMEOUT", false},
	ErrConcurrentTransactions:                 {"CONCURRENT_TRANSACTIONS", false},
	ErrTransactionCoordinatorFenced:           {"TRANSACTION_COORDINATOR_FENCED", false},
	ErrTransactionalIDAuthorizationFailed:     {"TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false},
	ErrSecurityDisabled:                       {"SECURITY_DISABLED", false},
	ErrOperationNotAttempted:                  {"OPERATION_NOT_ATTEMPTED", false},
	ErrKafkaStorageError:                      {"KAFKA_STORAGE_ERROR", true},
	ErrLogDirNotFound:                         {"LOG_DIR_NOT_FOUND", false},
	ErrSASLAuthenticationFailed:               {"SASL_AUTHENTICATION_FAILED", false},
	ErrUnknownProducerID:                      {"UNKNOWN_PRODUCER_ID", false},
	ErrReassignmentInProgress:                 {"REASSIGNMENT_IN_PROGRESS", false},
	ErrDelegationTokenAuthDisabled:            {"DELEGATION_TOKEN_AUTH_DISABLED", false},
	ErrDelegationTokenNotFound:                {"DELEGATION_TOKEN_NOT_FOUND", false},
	ErrDelegationTokenOwnerMismatch:           {"DELEGATION_TOKEN_OWNER_MISMATCH", false},
	ErrDelegationTokenRequestNotAllowed:       {"DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", false},
	ErrDelegationTokenAuthorizationFailed:     {"DELEGATION_TOKEN_AUTHORIZATION_FAILED", false},
	ErrDelegationTokenExpired:                 {"DELEGATION_TOKEN_EXPIRED", false},
	ErrInvalidPrincipalType:                   {"INVALID_PRINCIPAL_TYPE", false},
	ErrNonEmptyGroup:                          {"NON_EMPTY_GROUP", false},
	ErrGroupIDNotFound:                        {"GROUP_ID_NOT_FOUND", false},
	ErrFetchSessionIDNotFound:                 {"FETCH_SESSION_ID_NOT_FOUND", true},
	ErrInvalidFetchSessionEpoch:               {"INVALID_FETCH_SESSION_EPOCH", true},
	ErrListenerNotFound:                       {"LISTENER_NOT_FOUND", true},
	ErrTopicDeletionDisabled:                  {"TOPIC_DELETION_DISABLED", false},
	ErrFencedLeaderEpoch:                      {"FENCED_LEADER_EPOCH", true},
	ErrUnknownLeaderEpoch:                     {"UNKNOWN_LEADER_EPOCH", true},
	ErrUnsupportedCompressionType:             {"UNSUPPORTED_COMPRESSION_TYPE", false},
	ErrStaleBrokerEpoch:                       {"STALE_BROKER_EPOCH", false},
	ErrOffsetNotAvailable:                     {"OFFSET_NOT_AVAILABLE", true},
	ErrMemberIDRequired:                       {"MEMBER_ID_REQUIRED", false},
	ErrPreferredLeaderNotAvailable:            {"PREFERRED_LEADER_NOT_AVAILABLE", true},
	ErrGroupMaxSizeReached:                    {"GROUP_MAX_SIZE_REACHED", false},
	ErrFencedInstanceID:                       {"FENCED_INSTANCE_ID", false},
	ErrEligibleLeadersNotAvailable:            {"ELIGIBLE_LEADERS_NOT_AVAILABLE", true},
	ErrElectionNotNeeded:                      {"ELECTION_NOT_NEEDED", true},
	ErrNoReassignmentInProgress:               {"NO_REASSIGNMENT_IN_PROGRESS", false},
	ErrGroupSubscribedToTopic:                 {"GROUP_SUBSCRIBED_TO_TOPIC", false},
	ErrInvalidRecord:                          {"INVALID_RECORD", false},
	ErrUnstableOffsetCommit:                   {"UNSTABLE_OFFSET_COMMIT", true},
	ErrThrottlingQuotaExceeded:                {"THROTTLING_QUOTA_EXCEEDED", true},
	ErrProducerFenced:                         {"PRODUCER_FENCED", false},
	ErrResourceNotFound:                       {"RESOURCE_NOT_FOUND", false},
	ErrDuplicateResource:                      {"DUPLICATE_RESOURCE", false},
	ErrUnacceptableCredential:                 {"UNACCEPTABLE_CREDENTIAL", false},
	ErrInconsistentVoterSet:                   {"INCONSISTENT_VOTER_SET", false},
	ErrInvalidUpdateVersion:                   {"INVALID_UPDATE_VERSION", false},
	ErrFeatureUpdateFailed:                    {"FEATURE_UPDATE_FAILED", false},
	ErrPrincipalDeserializationFailure:        {"PRINCIPAL_DESERIALIZATION_FAILURE", false},
	ErrSnapshotNotFound:                       {"SNAPSHOT_NOT_FOUND", false},
	ErrPositionOutOfRange:                     {"POSITION_OUT_OF_RANGE", false},
	ErrUnknownTopicID:                         {"UNKNOWN_TOPIC_ID", true},
	ErrDuplicateBrokerRegistration:            {"DUPLICATE_BROKER_REGISTRATION", false},
	ErrBrokerIDNotRegistered:                  {"BROKER_ID_NOT_REGISTERED", false},
	ErrInconsistentTopicID:                    {"INCONSISTENT_TOPIC_ID", true},
	ErrInconsistentClusterID:                  {"INCONSISTENT_CLUSTER_ID", false},
	ErrTransactionalIDNotFound:                {"TRANSACTIONAL_ID_NOT_FOUND", false},
	ErrFetchSessionTopicIDError:               {"FETCH_SESSION_TOPIC_ID_ERROR", true},
	ErrIneligibleReplica:                      {"INELIGIBLE_REPLICA", false},
	ErrNewLeaderElected:                       {"NEW_LEADER_ELECTED", false},
	ErrOffsetMovedToTieredStorage:             {"OFFSET_MOVED_TO_TIERED_STORAGE", false},
	ErrFencedMemberEpoch:                      {"FENCED_MEMBER_EPOCH", false},
	ErrUnreleasedInstanceID:                   {"UNRELEASED_INSTANCE_ID", false},
	ErrUnsupportedAssignor:                    {"UNSUPPORTED_ASSIGNOR", false},
	ErrStaleMemberEpoch:                       {"STALE_MEMBER_EPOCH", false},
	ErrMismatchedEndpointType:                 {"MISMATCHED_ENDPOINT_TYPE", false},
	ErrUnsupportedEndpointType:                {"UNSUPPORTED_ENDPOINT_TYPE", false},
	ErrUnknownControllerID:                    {"UNKNOWN_CONTROLLER_ID", false},
	ErrUnknownSubscriptionID:                  {"UNKNOWN_SUBSCRIPTION_ID", false},
	ErrTelemetryTooLarge:                      {"TELEMETRY_TOO_LARGE", false},
	ErrInvalidRegistration:                    {"INVALID_REGISTRATION", false},
	ErrTransactionAbortable:                   {"TRANSACTION_ABORTABLE", false},
	ErrInvalidRecordState:                     {"INVALID_RECORD_STATE", false},
	ErrShareSessionNotFound:                   {"SHARE_SESSION_NOT_FOUND", false},
	ErrInvalidShareSessionEpoch:               {"INVALID_SHARE_SESSION_EPOCH", false},
	ErrFencedStateEpoch:                       {"FENCED_STATE_EPOCH", false},
	ErrInvalidVoterKey:                        {"INVALID_VOTER_KEY", false},
	ErrDuplicateVoter:                         {"DUPLICATE_VOTER", false},
	ErrVoterNotFound:                          {"VOTER_NOT_FOUND", false},
	ErrInvalidRegularExpression:               {"INVALID_REGULAR_EXPRESSION", false},
	ErrRebootstrapRequired:                    {"REBOOTSTRAP_REQUIRED", false},
	ErrStreamsInvalidTopology:                 {"STREAMS_INVALID_TOPOLOGY", false},
	ErrStreamsInvalidTopologyEpoch:            {"STREAMS_INVALID_TOPOLOGY_EPOCH", false},
	ErrStreamsTopologyFenced:                  {"STREAMS_TOPOLOGY_FENCED", false},
	ErrShareSessionLimitReached:               {"SHARE_SESSION_LIMIT_REACHED", true},
	ErrGroupDeletionFailed:                    {"GROUP_DELETION_FAILED", false},
	ErrStreamsTopologyDescriptionUpdateFailed: {"STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", false},
	ErrControllerIDNotRegistered:              {"CONTROLLER_ID_NOT_REGISTERED", false},
}
