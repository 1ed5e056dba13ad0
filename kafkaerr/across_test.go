package kafkaerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// The packages' errors are Kafka's codes: what one package answers,
// another's sentinel of the same code matches, and the code a broker
// answers with is the one Kafka would.
func TestErrorsMatchAcrossPackages(t *testing.T) {
	require.ErrorIs(t, group.ErrNotCoordinator, idempotence.ErrNotCoordinator)
	require.ErrorIs(t, replica.ErrInvalidRequest, group.ErrInvalidRequest)
	require.ErrorIs(t, replica.ErrInvalidRequest, idempotence.ErrInvalidRequest)
	require.ErrorIs(t, &replica.NotLeaderError{Leader: 2, LeaderEpoch: 4}, group.ErrNotLeaderOrFollower)

	d, err := log.OpenDir(t.TempDir(), log.DirOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	require.NoError(t, d.CreateTopic("t", log.TopicConfig{Partitions: 1}))

	// A Dir's refusals keep their own identity and carry Kafka's code.
	err = d.CreateTopic("t", log.TopicConfig{Partitions: 1})
	require.ErrorIs(t, err, log.ErrTopicExists)
	require.ErrorIs(t, err, replica.ErrTopicAlreadyExists, "the controller's refusal of the same")
	require.Equal(t, kafkaerr.ErrTopicAlreadyExists, kafkaerr.CodeOf(err))
	_, err = d.Partition("t", 7)
	require.ErrorIs(t, err, log.ErrUnknownPartition)
	require.NotErrorIs(t, err, log.ErrUnknownTopic)
	require.ErrorIs(t, err, group.ErrUnknownTopicOrPartition)

	// A batch that fails its CRC is CORRUPT_MESSAGE.
	p, err := d.Partition("t", 0)
	require.NoError(t, err)
	b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("v")}}, segment.BuildOptions{})
	require.NoError(t, err)
	b[len(b)-1] ^= 0xff
	_, err = p.AppendBatch(b)
	require.ErrorIs(t, err, segment.ErrCorrupt)
	require.Equal(t, kafkaerr.ErrCorruptMessage, kafkaerr.CodeOf(err))

	// A group coordinator's answer matches the code's sentinel anywhere.
	s, err := group.OpenService(d, group.ServiceOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	hb, err := s.Heartbeat(context.Background(), group.HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: "m"})
	require.NoError(t, err)
	require.ErrorIs(t, hb.Err, kafkaerr.ErrUnknownMemberID)
	require.False(t, kafkaerr.Retriable(hb.Err))
}

// Both coordinators answer a failed write of their partition as Kafka's
// do (CoordinatorOperationExceptionHelper, and
// TransactionStateManager.appendTransactionToLog): whatever wrote it, a
// Dir's local log or a cluster's replica.
func TestCoordinatorWriteErrorsAreKafkas(t *testing.T) {
	for _, c := range []struct {
		write error
		want  kafkaerr.Code
	}{
		{replica.ErrNotEnoughReplicas, kafkaerr.ErrCoordinatorNotAvailable},
		{replica.ErrNotEnoughReplicasAfterAppend, kafkaerr.ErrCoordinatorNotAvailable},
		{replica.ErrRequestTimedOut, kafkaerr.ErrCoordinatorNotAvailable},
		{context.DeadlineExceeded, kafkaerr.ErrCoordinatorNotAvailable},
		{replica.ErrUnknownTopicOrPartition, kafkaerr.ErrCoordinatorNotAvailable},
		{log.ErrUnknownPartition, kafkaerr.ErrCoordinatorNotAvailable},
		{&replica.NotLeaderError{Leader: 2}, kafkaerr.ErrNotCoordinator},
		{replica.ErrStopped, kafkaerr.ErrNotCoordinator},
		{replica.ErrKafkaStorageError, kafkaerr.ErrNotCoordinator},
		{log.ErrFailed, kafkaerr.ErrNotCoordinator},
		{log.ErrClosed, kafkaerr.ErrNotCoordinator},
		{context.Canceled, kafkaerr.ErrNotCoordinator}, // the coordinator closing
		{errors.New("a write of no code"), kafkaerr.ErrNotCoordinator},
		{replica.ErrMessageTooLarge, kafkaerr.ErrUnknownServerError},
		{segment.ErrBatchTooLarge, kafkaerr.ErrUnknownServerError},
		{kafkaerr.ErrRecordListTooLarge, kafkaerr.ErrUnknownServerError},
		{idempotence.ErrInvalidProducerEpoch, kafkaerr.ErrInvalidProducerEpoch},
		{replica.ErrInvalidRequest, kafkaerr.ErrInvalidRequest},
	} {
		write := fmt.Errorf("the partition's append: %w", c.write)
		err := kafkaerr.CoordinatorWriteError(write)
		require.Equal(t, c.want, kafkaerr.CodeOf(err), "%v", c.write)
		require.ErrorIs(t, err, c.write, "the cause is kept")
	}
	require.NoError(t, kafkaerr.CoordinatorWriteError(nil))
}
