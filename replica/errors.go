package replica

import (
	"errors"
	"fmt"

	"github.com/strandlog/strand/kafkaerr"
)

// Code is an error code on the wire: Kafka's (kafkaerr), so that an
// application that speaks Kafka's protocol passes it through, and an
// error itself, so that a message's code is matched with errors.Is.
type Code = kafkaerr.Code

// The protocol errors of replication and of the controller (package
// replica/controller), by Kafka's names.
const (
	ErrOffsetOutOfRange             = kafkaerr.ErrOffsetOutOfRange
	ErrCorruptMessage               = kafkaerr.ErrCorruptMessage
	ErrUnknownTopicOrPartition      = kafkaerr.ErrUnknownTopicOrPartition
	ErrNotLeaderOrFollower          = kafkaerr.ErrNotLeaderOrFollower
	ErrRequestTimedOut              = kafkaerr.ErrRequestTimedOut
	ErrMessageTooLarge              = kafkaerr.ErrMessageTooLarge
	ErrStaleControllerEpoch         = kafkaerr.ErrStaleControllerEpoch
	ErrNotEnoughReplicas            = kafkaerr.ErrNotEnoughReplicas
	ErrNotEnoughReplicasAfterAppend = kafkaerr.ErrNotEnoughReplicasAfterAppend
	ErrInvalidRequiredAcks          = kafkaerr.ErrInvalidRequiredAcks
	ErrNotController                = kafkaerr.ErrNotController
	ErrInvalidRequest               = kafkaerr.ErrInvalidRequest
	ErrOperationNotAttempted        = kafkaerr.ErrOperationNotAttempted
	ErrKafkaStorageError            = kafkaerr.ErrKafkaStorageError
	ErrFencedLeaderEpoch            = kafkaerr.ErrFencedLeaderEpoch
	ErrUnknownLeaderEpoch           = kafkaerr.ErrUnknownLeaderEpoch
	ErrInvalidUpdateVersion         = kafkaerr.ErrInvalidUpdateVersion
	ErrIneligibleReplica            = kafkaerr.ErrIneligibleReplica

	ErrTopicAlreadyExists       = kafkaerr.ErrTopicAlreadyExists
	ErrInvalidReplicaAssignment = kafkaerr.ErrInvalidReplicaAssignment
	// ErrInvalidTopicConfig is Kafka's INVALID_CONFIG, of a topic's
	// config; ErrInvalidConfig is a Config of this package's out of range.
	ErrInvalidTopicConfig          = kafkaerr.ErrInvalidConfig
	ErrStaleBrokerEpoch            = kafkaerr.ErrStaleBrokerEpoch
	ErrPreferredLeaderNotAvailable = kafkaerr.ErrPreferredLeaderNotAvailable
	ErrEligibleLeadersNotAvailable = kafkaerr.ErrEligibleLeadersNotAvailable
	ErrElectionNotNeeded           = kafkaerr.ErrElectionNotNeeded
	ErrBrokerIDNotRegistered       = kafkaerr.ErrBrokerIDNotRegistered
	ErrNoReassignmentInProgress    = kafkaerr.ErrNoReassignmentInProgress
	// ErrNewLeaderElected answers an AlterPartition that was applied but
	// moved the lead off its sender (a reassignment it completed removed
	// it): the sender must wait for the new state.
	ErrNewLeaderElected = kafkaerr.ErrNewLeaderElected
)

// CodeOf returns the wire code of err: None for nil, the Code it wraps,
// or ErrKafkaStorageError for an error that wraps none (most likely the
// log's own).
func CodeOf(err error) Code {
	if err == nil {
		return kafkaerr.None
	}
	if c, ok := errors.AsType[Code](err); ok {
		return c
	}
	return ErrKafkaStorageError
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

// NotLeaderError is ErrNotLeaderOrFollower with the leader the partition knows, so
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

// Unwrap makes errors.Is(err, ErrNotLeaderOrFollower) true.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeaderOrFollower }
