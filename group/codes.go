package group

import "fmt"

// byCode are the Errors of errors.go by their codes.
var byCode = map[int16]*Error{}

func init() {
	for _, e := range []*Error{
		ErrUnknownServerError, ErrUnknownTopicOrPartition, ErrInvalidFetchSize, ErrNotLeaderOrFollower,
		ErrRequestTimedOut, ErrMessageTooLarge, ErrOffsetMetadataTooLarge, ErrCoordinatorLoadInProgress,
		ErrCoordinatorNotAvailable, ErrNotCoordinator, ErrRecordListTooLarge, ErrNotEnoughReplicas,
		ErrNotEnoughReplicasAfterAppend, ErrIllegalGeneration, ErrInconsistentGroupProtocol, ErrInvalidGroupID,
		ErrUnknownMemberID, ErrInvalidSessionTimeout, ErrRebalanceInProgress, ErrUnsupportedVersion,
		ErrInvalidRequest, ErrKafkaStorageError, ErrNonEmptyGroup, ErrGroupIDNotFound, ErrMemberIDRequired,
		ErrGroupMaxSizeReached, ErrFencedInstanceID, ErrGroupSubscribedToTopic, ErrUnstableOffsetCommit,
		ErrProducerFenced, ErrFencedMemberEpoch, ErrUnreleasedInstanceID, ErrUnsupportedAssignor,
		ErrStaleMemberEpoch, ErrInvalidRegularExpression,
	} {
		byCode[e.Code] = e
	}
}

// ErrorForCode returns the error of a Kafka error code, the inverse of
// Code: nil for 0, the Err variable of that code, or, for a code this
// package has none of, an *Error of that code named by its number. An
// application that carries a response's errors as codes (from a
// coordinator on another broker) turns them back into errors that
// errors.Is matches as it matches the coordinator's own.
func ErrorForCode(code int16) error {
	if code == 0 {
		return nil
	}
	if e, ok := byCode[code]; ok {
		return e
	}
	return &Error{Code: code, Name: fmt.Sprintf("error code %d", code)}
}
