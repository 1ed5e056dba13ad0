package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
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
		{&replica.NotLeaderError{Leader: 2, LeaderEpoch: 7}, kafkaerr.ErrNotLeaderOrFollower},
		{fmt.Errorf("%w: ISR [1], MinInsyncReplicas 2", replica.ErrNotEnoughReplicas), kafkaerr.ErrNotEnoughReplicas},
		{fmt.Errorf("%w: maximal ISR [1]", replica.ErrNotEnoughReplicasAfterAppend), kafkaerr.ErrNotEnoughReplicasAfterAppend},
		{replica.ErrRequestTimedOut, kafkaerr.ErrRequestTimedOut},
		{replica.ErrMessageTooLarge, kafkaerr.ErrMessageTooLarge},
		{replica.ErrCorruptMessage, kafkaerr.ErrCorruptMessage},
		{replica.ErrStopped, kafkaerr.ErrNotLeaderOrFollower},
		{context.DeadlineExceeded, kafkaerr.ErrRequestTimedOut},
		{fmt.Errorf("replica: append: %w", log.ErrFailed), kafkaerr.ErrKafkaStorageError},
		{&cluster.RemoteError{Code: replica.ErrTopicAlreadyExists, Message: "topic t exists"}, kafkaerr.ErrTopicAlreadyExists},
		{&cluster.RemoteError{Code: replica.ErrInvalidReplicaAssignment, Message: "broker 9 is not registered"}, kafkaerr.ErrInvalidReplicaAssignment},
		{fmt.Errorf("%w: the open transaction of %q", idempotence.ErrConcurrentTransactions, "t"), idempotence.ErrConcurrentTransactions},
	} {
		require.ErrorIs(t, kafkaError(c.err), c.want, "%v", c.err)
		require.Equal(t, c.want, kafkaerr.CodeOf(kafkaError(c.err)), "%v: the code answered", c.err)
	}
}
