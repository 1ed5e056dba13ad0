package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/strandlog/strand/segment"
)

// Error is one of Kafka's protocol errors, with the code and name Kafka's
// clients know it by (org.apache.kafka.common.protocol.Errors). Responses
// carry either one of the Err variables below or an error wrapping one, so
// errors.Is matches the kind and errors.As recovers the code.
type Error struct {
	Code int16  // Kafka's error code
	Name string // Kafka's name, e.g. "UNKNOWN_MEMBER_ID"
}

func (e *Error) Error() string { return e.Name }

// Is reports whether target is an Error of the same code, so that an error
// an application builds from a Kafka code of its own (an AppendFunc's, say)
// matches the variable below of that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The errors of the group coordinator, by Kafka's names, and those of an
// append to the offsets log that the coordinator answers with one of its
// own (see AppendFunc).
var (
	ErrUnknownServerError           = &Error{-1, "UNKNOWN_SERVER_ERROR"}
	ErrUnknownTopicOrPartition      = &Error{3, "UNKNOWN_TOPIC_OR_PARTITION"}
	ErrInvalidFetchSize             = &Error{4, "INVALID_FETCH_SIZE"}
	ErrNotLeaderOrFollower          = &Error{6, "NOT_LEADER_OR_FOLLOWER"}
	ErrRequestTimedOut              = &Error{7, "REQUEST_TIMED_OUT"}
	ErrMessageTooLarge              = &Error{10, "MESSAGE_TOO_LARGE"}
	ErrOffsetMetadataTooLarge       = &Error{12, "OFFSET_METADATA_TOO_LARGE"}
	ErrCoordinatorLoadInProgress    = &Error{14, "COORDINATOR_LOAD_IN_PROGRESS"}
	ErrCoordinatorNotAvailable      = &Error{15, "COORDINATOR_NOT_AVAILABLE"}
	ErrNotCoordinator               = &Error{16, "NOT_COORDINATOR"}
	ErrRecordListTooLarge           = &Error{18, "RECORD_LIST_TOO_LARGE"}
	ErrNotEnoughReplicas            = &Error{19, "NOT_ENOUGH_REPLICAS"}
	ErrNotEnoughReplicasAfterAppend = &Error{20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"}
	ErrIllegalGeneration            = &Error{22, "ILLEGAL_GENERATION"}
	ErrInconsistentGroupProtocol    = &Error{23, "INCONSISTENT_GROUP_PROTOCOL"}
	ErrInvalidGroupID               = &Error{24, "INVALID_GROUP_ID"}
	ErrUnknownMemberID              = &Error{25, "UNKNOWN_MEMBER_ID"}
	ErrInvalidSessionTimeout        = &Error{26, "INVALID_SESSION_TIMEOUT"}
	ErrRebalanceInProgress          = &Error{27, "REBALANCE_IN_PROGRESS"}
	ErrUnsupportedVersion           = &Error{35, "UNSUPPORTED_VERSION"}
	ErrInvalidRequest               = &Error{42, "INVALID_REQUEST"}
	ErrKafkaStorageError            = &Error{56, "KAFKA_STORAGE_ERROR"}
	ErrNonEmptyGroup                = &Error{68, "NON_EMPTY_GROUP"}
	ErrGroupIDNotFound              = &Error{69, "GROUP_ID_NOT_FOUND"}
	ErrMemberIDRequired             = &Error{79, "MEMBER_ID_REQUIRED"}
	ErrGroupMaxSizeReached          = &Error{81, "GROUP_MAX_SIZE_REACHED"}
	ErrFencedInstanceID             = &Error{82, "FENCED_INSTANCE_ID"}
	ErrGroupSubscribedToTopic       = &Error{86, "GROUP_SUBSCRIBED_TO_TOPIC"}
	ErrUnstableOffsetCommit         = &Error{88, "UNSTABLE_OFFSET_COMMIT"}
	ErrProducerFenced               = &Error{90, "PRODUCER_FENCED"}
	ErrFencedMemberEpoch            = &Error{110, "FENCED_MEMBER_EPOCH"}
	ErrUnreleasedInstanceID         = &Error{111, "UNRELEASED_INSTANCE_ID"}
	ErrUnsupportedAssignor          = &Error{112, "UNSUPPORTED_ASSIGNOR"}
	ErrStaleMemberEpoch             = &Error{113, "STALE_MEMBER_EPOCH"}
	ErrInvalidRegularExpression     = &Error{128, "INVALID_REGULAR_EXPRESSION"}
)

// Code returns the Kafka error code of err: 0 for nil, the code of the Error
// err wraps, or UNKNOWN_SERVER_ERROR (-1) for any other error.
func Code(err error) int16 {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ErrUnknownServerError.Code
}

// errorf wraps kind with a message saying where the request went wrong.
func errorf(kind *Error, format string, args ...any) error {
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
// answered it. Another Error is answered as it is; an error of no Kafka
// code, a local log's own failure, is NOT_COORDINATOR as
// KAFKA_STORAGE_ERROR is.
func appendError(err error) *Error {
	var e *Error
	switch {
	case errors.Is(err, ErrNotEnoughReplicas), errors.Is(err, ErrNotEnoughReplicasAfterAppend),
		errors.Is(err, ErrRequestTimedOut), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrUnknownTopicOrPartition):
		return ErrCoordinatorNotAvailable
	case errors.Is(err, ErrMessageTooLarge), errors.Is(err, ErrRecordListTooLarge), errors.Is(err, ErrInvalidFetchSize),
		errors.Is(err, segment.ErrBatchTooLarge):
		return ErrUnknownServerError
	case errors.Is(err, ErrNotLeaderOrFollower), errors.Is(err, ErrKafkaStorageError), !errors.As(err, &e):
		return ErrNotCoordinator
	}
	return e
}
