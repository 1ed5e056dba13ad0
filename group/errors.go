package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/segment"
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

// appendError returns the coordinator error a request is answered with
// whose records failed to append with err, as Kafka maps it
// (CoordinatorOperationExceptionHelper.handleOperationException): an
// offsets log short of in-sync replicas, or slow to commit, is
// COORDINATOR_NOT_AVAILABLE, which clients retry at the same coordinator;
// a replica that does not lead, or whose log failed, NOT_COORDINATOR,
// which sends them looking for it; records too large, UNKNOWN_SERVER_ERROR.
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, which Kafka's own coordinator never
// sees (it appends with acks=1 and waits for the high watermark itself),
// is COORDINATOR_NOT_AVAILABLE, as the classic GroupMetadataManager
// answered it. Another code is answered as it is; an error of no Kafka
// code, a local log's own failure, is NOT_COORDINATOR as
// KAFKA_STORAGE_ERROR is.
func appendError(err error) kafkaerr.Code {
	e, coded := errors.AsType[kafkaerr.Code](err)
	switch {
	case errors.Is(err, ErrNotEnoughReplicas), errors.Is(err, ErrNotEnoughReplicasAfterAppend),
		errors.Is(err, ErrRequestTimedOut), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrUnknownTopicOrPartition):
		return ErrCoordinatorNotAvailable
	case errors.Is(err, ErrMessageTooLarge), errors.Is(err, ErrRecordListTooLarge), errors.Is(err, ErrInvalidFetchSize),
		errors.Is(err, segment.ErrBatchTooLarge):
		return ErrUnknownServerError
	case errors.Is(err, ErrNotLeaderOrFollower), errors.Is(err, ErrKafkaStorageError), !coded:
		return ErrNotCoordinator
	}
	return e
}
