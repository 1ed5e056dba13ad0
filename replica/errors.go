package replica

import (
	"errors"
	"fmt"

	"github.com/strandlog/strand/idempotence"
)

// Code is an error code on the wire. The values are Kafka's
// (org.apache.kafka.common.protocol.Errors), so that an application that
// speaks Kafka's protocol can pass them through.
type Code int16

// The codes the replication protocol uses.
const (
	CodeNone                         Code = 0
	CodeOffsetOutOfRange             Code = 1
	CodeCorruptMessage               Code = 2
	CodeUnknownTopicOrPartition      Code = 3
	CodeNotLeaderOrFollower          Code = 6
	CodeRequestTimedOut              Code = 7
	CodeMessageTooLarge              Code = 10
	CodeStaleControllerEpoch         Code = 11
	CodeNotEnoughReplicas            Code = 19
	CodeNotEnoughReplicasAfterAppend Code = 20
	CodeInvalidRequiredAcks          Code = 21
	CodeTopicAlreadyExists           Code = 36
	CodeInvalidReplicaAssignment     Code = 39
	CodeInvalidConfig                Code = 40
	CodeNotController                Code = 41
	CodeInvalidRequest               Code = 42
	CodeOutOfOrderSequence           Code = 45
	CodeInvalidProducerEpoch         Code = 47
	CodeInvalidTxnState              Code = 48
	CodeTransactionCoordinatorFenced Code = 52
	CodeOperationNotAttempted        Code = 55
	CodeStorageError                 Code = 56
	CodeFencedLeaderEpoch            Code = 74
	CodeUnknownLeaderEpoch           Code = 75
	CodeStaleBrokerEpoch             Code = 77
	CodePreferredLeaderNotAvailable  Code = 80
	CodeEligibleLeadersNotAvailable  Code = 83
	CodeElectionNotNeeded            Code = 84
	CodeNoReassignmentInProgress     Code = 85
	CodeInvalidUpdateVersion         Code = 95
	CodeBrokerIDNotRegistered        Code = 102
	CodeInvalidRecord                Code = 87
	CodeIneligibleReplica            Code = 107
	CodeNewLeaderElected             Code = 108
)

// Error is a protocol error: one with a wire Code. The package's sentinel
// errors of this type are matched with errors.Is; wrapped ones carry detail.
type Error struct {
	Code Code
	name string
}

func (e *Error) Error() string { return "replica: " + e.name }

// Protocol errors, one per Code.
var (
	ErrOffsetOutOfRange             = &Error{CodeOffsetOutOfRange, "offset out of range"}
	ErrCorruptMessage               = &Error{CodeCorruptMessage, "corrupt message"}
	ErrUnknownPartition             = &Error{CodeUnknownTopicOrPartition, "unknown topic or partition"}
	ErrNotLeader                    = &Error{CodeNotLeaderOrFollower, "not leader or follower"}
	ErrTimeout                      = &Error{CodeRequestTimedOut, "request timed out"}
	ErrMessageTooLarge              = &Error{CodeMessageTooLarge, "message too large"}
	ErrStaleControllerEpoch         = &Error{CodeStaleControllerEpoch, "stale controller epoch"}
	ErrNotEnoughReplicas            = &Error{CodeNotEnoughReplicas, "not enough in-sync replicas"}
	ErrNotEnoughReplicasAfterAppend = &Error{CodeNotEnoughReplicasAfterAppend, "not enough in-sync replicas after append"}
	ErrInvalidAcks                  = &Error{CodeInvalidRequiredAcks, "invalid required acks"}
	ErrNotController                = &Error{CodeNotController, "not controller"}
	ErrInvalidRequest               = &Error{CodeInvalidRequest, "invalid request"}
	ErrOperationNotAttempted        = &Error{CodeOperationNotAttempted, "operation not attempted"}
	ErrStorage                      = &Error{CodeStorageError, "storage error"}
	ErrFencedLeaderEpoch            = &Error{CodeFencedLeaderEpoch, "fenced leader epoch"}
	ErrUnknownLeaderEpoch           = &Error{CodeUnknownLeaderEpoch, "unknown leader epoch"}
	ErrInvalidUpdateVersion         = &Error{CodeInvalidUpdateVersion, "invalid update version"}
	ErrIneligibleReplica            = &Error{CodeIneligibleReplica, "ineligible replica"}

	// The controller's (package replica/controller).
	ErrTopicAlreadyExists          = &Error{CodeTopicAlreadyExists, "topic already exists"}
	ErrInvalidReplicaAssignment    = &Error{CodeInvalidReplicaAssignment, "invalid replica assignment"}
	ErrInvalidTopicConfig          = &Error{CodeInvalidConfig, "invalid topic config"}
	ErrStaleBrokerEpoch            = &Error{CodeStaleBrokerEpoch, "stale broker epoch"}
	ErrPreferredLeaderNotAvailable = &Error{CodePreferredLeaderNotAvailable, "preferred leader not available"}
	ErrEligibleLeadersNotAvailable = &Error{CodeEligibleLeadersNotAvailable, "eligible leaders not available"}
	ErrElectionNotNeeded           = &Error{CodeElectionNotNeeded, "election not needed"}
	ErrBrokerNotRegistered         = &Error{CodeBrokerIDNotRegistered, "broker id not registered"}
	ErrNoReassignmentInProgress    = &Error{CodeNoReassignmentInProgress, "no reassignment in progress"}
	// ErrNewLeaderElected answers an AlterPartition that was applied but
	// moved the lead off its sender (a reassignment it completed removed
	// it): the sender must wait for the new state.
	ErrNewLeaderElected = &Error{CodeNewLeaderElected, "new leader elected"}
)

var byCode = map[Code]*Error{}

func init() {
	for _, e := range []*Error{
		ErrOffsetOutOfRange, ErrCorruptMessage, ErrUnknownPartition, ErrNotLeader, ErrTimeout,
		ErrMessageTooLarge, ErrStaleControllerEpoch, ErrNotEnoughReplicas,
		ErrNotEnoughReplicasAfterAppend, ErrInvalidAcks, ErrNotController, ErrInvalidRequest,
		ErrOperationNotAttempted, ErrStorage, ErrFencedLeaderEpoch, ErrUnknownLeaderEpoch,
		ErrInvalidUpdateVersion, ErrIneligibleReplica, ErrTopicAlreadyExists,
		ErrInvalidReplicaAssignment, ErrStaleBrokerEpoch, ErrPreferredLeaderNotAvailable,
		ErrEligibleLeadersNotAvailable, ErrElectionNotNeeded, ErrBrokerNotRegistered, ErrNoReassignmentInProgress,
		ErrNewLeaderElected, ErrInvalidTopicConfig,
	} {
		byCode[e.Code] = e
	}
}

// producerErrors are the refusals of a leader's producer-state check
// (idempotence.State.Validate): they travel as idempotence's own errors,
// which a broker already maps to Kafka's codes.
var producerErrors = map[Code]error{}

func init() {
	for _, e := range []*idempotence.Error{
		idempotence.ErrOutOfOrderSequence, idempotence.ErrInvalidProducerEpoch, idempotence.ErrInvalidTxnState,
		idempotence.ErrTransactionCoordinatorFenced, idempotence.ErrInvalidRecord,
	} {
		producerErrors[Code(e.Code)] = e
	}
}

// Err returns the error of a code: nil for CodeNone, the sentinel for a
// known code (idempotence's for the producer-state codes), and an *Error
// naming the number for any other.
func (c Code) Err() error {
	if c == CodeNone {
		return nil
	}
	if e, ok := byCode[c]; ok {
		return e
	}
	if e, ok := producerErrors[c]; ok {
		return e
	}
	return &Error{Code: c, name: fmt.Sprintf("error code %d", c)}
}

// CodeOf returns the wire code of err: CodeNone for nil, the Code of the
// *Error or *idempotence.Error it wraps, or CodeStorageError for an error
// this package does not know (most likely from the log).
func CodeOf(err error) Code {
	if err == nil {
		return CodeNone
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	if e, ok := errors.AsType[*idempotence.Error](err); ok {
		return Code(e.Code)
	}
	return CodeStorageError
}

// Errors that never go on the wire.
var (
	// ErrInvalidConfig means a Config field is out of range; the message
	// names it.
	ErrInvalidConfig = errors.New("replica: invalid config")

	// ErrInvalidMessage means bytes that do not decode as a message, or a
	// message whose fields contradict each other; nothing was changed.
	ErrInvalidMessage = errors.New("replica: invalid message")

	// ErrStale means a message that no longer matters and was ignored: a
	// response to a request the partition no longer waits for, or state
	// older than what it knows.
	ErrStale = errors.New("replica: stale message")

	// ErrLeaderEpochReused means the partition was told to lead an epoch
	// its log already holds: a restarted leader must take a new epoch, or
	// two different records could share an (epoch, offset) (KAFKA-10527).
	ErrLeaderEpochReused = errors.New("replica: leader epoch reused")

	// ErrFailed means a write to the log failed: the partition refuses
	// everything until it is recreated over a reopened log.
	ErrFailed = errors.New("replica: failed")
)

// NotLeaderError is ErrNotLeader with the leader the partition knows, so
// that a producer can go there. Leader is NoNode if it knows none.
type NotLeaderError struct {
	Leader      NodeID
	LeaderEpoch int32
}

func (e *NotLeaderError) Error() string {
	if e.Leader == NoNode {
		return fmt.Sprintf("replica: not leader (no leader known, epoch %d)", e.LeaderEpoch)
	}
	return fmt.Sprintf("replica: not leader (leader is node %d in epoch %d)", e.Leader, e.LeaderEpoch)
}

// Unwrap makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }
