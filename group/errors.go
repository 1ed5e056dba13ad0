package group

import (
	"fmt"

	"github.com/strandlog/strand/kafkaerr"
)

// The errors of the group coordinator, and those of an append to the
// offsets log that the coordinator answers with one of its own (see
// AppendFunc), as kafkaerr codes: responses carry one of them or an error
// wrapping one, so errors.Is matches the kind, also against another
// package's error of the same code, and kafkaerr.CodeOf recovers the code.
const (
	ErrUnknownServerError           = kafkaerr.ErrUnknownServerError
	ErrUnknownTopicOrPartition      = kafkaerr.ErrUnknownTopicOrPartition
	ErrInvalidFetchSize             = kafkaerr.ErrInvalidFetchSize
	ErrNotLeaderOrFollower          = kafkaerr.ErrNotLeaderOrFollower
	ErrRequestTimedOut              = kafkaerr.ErrRequestTimedOut
	ErrMessageTooLarge              = kafkaerr.ErrMessageTooLarge
	ErrOffsetMetadataTooLarge       = kafkaerr.ErrOffsetMetadataTooLarge
	ErrCoordinatorLoadInProgress    = kafkaerr.ErrCoordinatorLoadInProgress
	ErrCoordinatorNotAvailable      = kafkaerr.ErrCoordinatorNotAvailable
	ErrNotCoordinator               = kafkaerr.ErrNotCoordinator
	ErrRecordListTooLarge           = kafkaerr.ErrRecordListTooLarge
	ErrNotEnoughReplicas            = kafkaerr.ErrNotEnoughReplicas
	ErrNotEnoughReplicasAfterAppend = kafkaerr.ErrNotEnoughReplicasAfterAppend
	ErrIllegalGeneration            = kafkaerr.ErrIllegalGeneration
	ErrInconsistentGroupProtocol    = kafkaerr.ErrInconsistentGroupProtocol
	ErrInvalidGroupID               = kafkaerr.ErrInvalidGroupID
	ErrUnknownMemberID              = kafkaerr.ErrUnknownMemberID
	ErrInvalidSessionTimeout        = kafkaerr.ErrInvalidSessionTimeout
	ErrRebalanceInProgress          = kafkaerr.ErrRebalanceInProgress
	ErrUnsupportedVersion           = kafkaerr.ErrUnsupportedVersion
	ErrInvalidRequest               = kafkaerr.ErrInvalidRequest
	ErrKafkaStorageError            = kafkaerr.ErrKafkaStorageError
	ErrNonEmptyGroup                = kafkaerr.ErrNonEmptyGroup
	ErrGroupIDNotFound              = kafkaerr.ErrGroupIDNotFound
	ErrMemberIDRequired             = kafkaerr.ErrMemberIDRequired
	ErrGroupMaxSizeReached          = kafkaerr.ErrGroupMaxSizeReached
	ErrFencedInstanceID             = kafkaerr.ErrFencedInstanceID
	ErrGroupSubscribedToTopic       = kafkaerr.ErrGroupSubscribedToTopic
	ErrUnstableOffsetCommit         = kafkaerr.ErrUnstableOffsetCommit
	ErrProducerFenced               = kafkaerr.ErrProducerFenced
	ErrFencedMemberEpoch            = kafkaerr.ErrFencedMemberEpoch
	ErrUnreleasedInstanceID         = kafkaerr.ErrUnreleasedInstanceID
	ErrUnsupportedAssignor          = kafkaerr.ErrUnsupportedAssignor
	ErrStaleMemberEpoch             = kafkaerr.ErrStaleMemberEpoch
	ErrInvalidRegularExpression     = kafkaerr.ErrInvalidRegularExpression
)

// errorf wraps kind with a message saying where the request went wrong.
func errorf(kind kafkaerr.Code, format string, args ...any) error {
	return fmt.Errorf("group: %s: %w", fmt.Sprintf(format, args...), kind)
}
