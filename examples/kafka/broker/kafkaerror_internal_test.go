package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// The replica package's codes are Kafka's: a produce's outcome reaches the
// Kafka client as the error of the same code, and what has no code as the
// error Kafka answers in its place.
func TestKafkaErrorOfAReplicaOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{&replica.NotLeaderError{Leader: 2, LeaderEpoch: 7}, kerr.NotLeaderForPartition},
		{fmt.Errorf("%w: ISR [1], MinInsyncReplicas 2", replica.ErrNotEnoughReplicas), kerr.NotEnoughReplicas},
		{fmt.Errorf("%w: maximal ISR [1]", replica.ErrNotEnoughReplicasAfterAppend), kerr.NotEnoughReplicasAfterAppend},
		{replica.ErrRequestTimedOut, kerr.RequestTimedOut},
		{replica.ErrMessageTooLarge, kerr.MessageTooLarge},
		{replica.ErrCorruptMessage, kerr.CorruptMessage},
		{replica.ErrStopped, kerr.NotLeaderForPartition},
		{context.DeadlineExceeded, kerr.RequestTimedOut},
		{fmt.Errorf("replica: append: %w", log.ErrFailed), kerr.KafkaStorageError},
		{&cluster.RemoteError{Code: replica.ErrTopicAlreadyExists, Message: "topic t exists"}, log.ErrTopicExists},
		{&cluster.RemoteError{Code: replica.ErrInvalidReplicaAssignment, Message: "broker 9 is not registered"}, kerr.InvalidReplicaAssignment},
		{fmt.Errorf("%w: the open transaction of %q", idempotence.ErrConcurrentTransactions, "t"), idempotence.ErrConcurrentTransactions},
	} {
		require.ErrorIs(t, kafkaError(c.err), c.want, "%v", c.err)
	}
}
