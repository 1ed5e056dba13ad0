package group

import (
	"errors"
	"fmt"
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

// The errors of the group coordinator, by Kafka's names.
var (
	ErrUnknownServerError        = &Error{-1, "UNKNOWN_SERVER_ERROR"}
	ErrUnknownTopicOrPartition   = &Error{3, "UNKNOWN_TOPIC_OR_PARTITION"}
	ErrOffsetMetadataTooLarge    = &Error{12, "OFFSET_METADATA_TOO_LARGE"}
	ErrCoordinatorLoadInProgress = &Error{14, "COORDINATOR_LOAD_IN_PROGRESS"}
	ErrCoordinatorNotAvailable   = &Error{15, "COORDINATOR_NOT_AVAILABLE"}
	ErrNotCoordinator            = &Error{16, "NOT_COORDINATOR"}
	ErrIllegalGeneration         = &Error{22, "ILLEGAL_GENERATION"}
	ErrInconsistentGroupProtocol = &Error{23, "INCONSISTENT_GROUP_PROTOCOL"}
	ErrInvalidGroupID            = &Error{24, "INVALID_GROUP_ID"}
	ErrUnknownMemberID           = &Error{25, "UNKNOWN_MEMBER_ID"}
	ErrInvalidSessionTimeout     = &Error{26, "INVALID_SESSION_TIMEOUT"}
	ErrRebalanceInProgress       = &Error{27, "REBALANCE_IN_PROGRESS"}
	ErrUnsupportedVersion        = &Error{35, "UNSUPPORTED_VERSION"}
	ErrInvalidRequest            = &Error{42, "INVALID_REQUEST"}
	ErrNonEmptyGroup             = &Error{68, "NON_EMPTY_GROUP"}
	ErrGroupIDNotFound           = &Error{69, "GROUP_ID_NOT_FOUND"}
	ErrMemberIDRequired          = &Error{79, "MEMBER_ID_REQUIRED"}
	ErrGroupMaxSizeReached       = &Error{81, "GROUP_MAX_SIZE_REACHED"}
	ErrFencedInstanceID          = &Error{82, "FENCED_INSTANCE_ID"}
	ErrGroupSubscribedToTopic    = &Error{86, "GROUP_SUBSCRIBED_TO_TOPIC"}
	ErrUnstableOffsetCommit      = &Error{88, "UNSTABLE_OFFSET_COMMIT"}
	ErrProducerFenced            = &Error{90, "PRODUCER_FENCED"}
	ErrFencedMemberEpoch         = &Error{110, "FENCED_MEMBER_EPOCH"}
	ErrUnreleasedInstanceID      = &Error{111, "UNRELEASED_INSTANCE_ID"}
	ErrUnsupportedAssignor       = &Error{112, "UNSUPPORTED_ASSIGNOR"}
	ErrStaleMemberEpoch          = &Error{113, "STALE_MEMBER_EPOCH"}
	ErrInvalidRegularExpression  = &Error{128, "INVALID_REGULAR_EXPRESSION"}
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
