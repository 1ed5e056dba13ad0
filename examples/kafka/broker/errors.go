package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// codes map the errors of Strand's packages to Kafka's error codes, as
// Kafka's broker maps its exceptions (Errors.forException).
var codes = []struct {
	err  error
	code *kerr.Error
}{
	{log.ErrUnknownTopic, kerr.UnknownTopicOrPartition},
	{log.ErrUnknownPartition, kerr.UnknownTopicOrPartition},
	{log.ErrStalePartition, kerr.UnknownTopicOrPartition},
	{log.ErrTopicExists, kerr.TopicAlreadyExists},
	{log.ErrInvalidTopic, kerr.InvalidTopicException},
	{log.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
	{log.ErrKeyRequired, kerr.InvalidRecord},
	{log.ErrStaleEpoch, kerr.FencedLeaderEpoch},
	{log.ErrFailed, kerr.KafkaStorageError},
	// A partition closed under a request: its topic was deleted, or the
	// broker is stopping; the client looks the leader up again.
	{log.ErrClosed, kerr.NotLeaderForPartition},
	{segment.ErrShortBatch, kerr.CorruptMessage},
	{segment.ErrCorrupt, kerr.CorruptMessage},
	{segment.ErrBatchTooLarge, kerr.MessageTooLarge},
	{segment.ErrUnsupportedCodec, kerr.UnsupportedCompressionType},
	{segment.ErrInvalidRecords, kerr.InvalidRecord},
}

// code returns Kafka's error code for err: 0 for nil, the code an
// idempotence or group error carries, the code of a known sentinel, else
// UNKNOWN_SERVER_ERROR.
func code(err error) int16 {
	if err == nil {
		return 0
	}
	var ie *idempotence.Error
	if errors.As(err, &ie) {
		return ie.Code
	}
	var ge *group.Error
	if errors.As(err, &ge) {
		return group.Code(err)
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code.Code
		}
	}
	return kerr.UnknownServerError.Code
}

// ErrorCode returns Kafka's error code for err as the broker answers it:
// 0 for nil, UNKNOWN_SERVER_ERROR for an error it does not know. A
// Cluster that forwards requests between its nodes answers with it.
func ErrorCode(err error) int16 { return code(err) }

// message returns err's text for a response's ErrorMessage, nil for nil.
func message(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
