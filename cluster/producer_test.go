package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// values are records of these values.
func values(vs ...string) []log.Record {
	recs := make([]log.Record, len(vs))
	for i, v := range vs {
		recs[i].Value = []byte(v)
	}
	return recs
}

// An idempotent producer writes on at the next leader after a kill, and a
// batch that failed, which may or may not have been appended, does not
// leave the producer refused as out of order: it goes on under a new
// producer id (Kafka's producer resets its id after an unresolved
// sequence, before KIP-360 bumped the epoch instead).
func TestProducerWritesOnAcrossALeaderKillAndAFailedBatch(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	via := c.nodes[3]
	require.NoError(t, via.WaitBrokers(ctx, 3))
	require.NoError(t, via.CreateTopic(ctx, "t", TopicSpec{Assignment: [][]replica.NodeID{{1, 2, 3}}}))
	p, err := NewProducer(ctx, via, ProducerOptions{})
	require.NoError(t, err)

	r, err := p.Produce(ctx, "t", 0, values("a", "b")...)
	require.NoError(t, err)
	require.EqualValues(t, 0, r.BaseOffset)
	c.kill(1)
	r, err = p.Produce(ctx, "t", 0, values("c")...)
	require.NoError(t, err, "produced at the next leader")
	require.EqualValues(t, 2, r.BaseOffset)

	// With one replica of three live the batch cannot commit.
	c.kill(2)
	first := p.producer
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = p.Produce(short, "t", 0, values("lost?")...)
	cancelShort()
	require.Error(t, err)
	require.NotEqual(t, first.ProducerID, p.producer.ProducerID, "a new producer id after a batch whose fate is unknown")
	c.start(1)
	c.start(2)
	_, err = p.Produce(ctx, "t", 0, values("d")...)
	require.NoError(t, err, "the next batch is not refused as out of order")

	got := c.readAll(ctx, "t", 0)
	if len(got) == 5 {
		require.Equal(t, "lost?", got[3], "the failed batch, if appended, once")
		got = append(got[:3], got[4:]...)
	}
	require.Equal(t, []string{"a", "b", "c", "d"}, got)
}

// A transactional producer's records are read committed once Commit
// returns, in every partition it wrote, and never after Abort; a batch
// that failed leaves the transaction to be aborted (TRANSACTION_ABORTABLE),
// after which the next one commits; and a new producer of the same id
// fences the old one.
func TestProducerTransactions(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	via := c.nodes[1]
	require.NoError(t, via.WaitBrokers(ctx, 3))
	require.NoError(t, via.CreateTopic(ctx, "t", TopicSpec{Assignment: [][]replica.NodeID{{1, 2, 3}, {2, 3, 1}}}))
	p, err := NewProducer(ctx, via, ProducerOptions{TransactionalID: "tx"})
	require.NoError(t, err)

	require.NoError(t, p.Commit(ctx), "a transaction of no batch commits nothing")
	_, err = p.Produce(ctx, "t", 0, values("a0")...)
	require.NoError(t, err)
	_, err = p.Produce(ctx, "t", 1, values("a1")...)
	require.NoError(t, err)
	require.Empty(t, c.readCommitted(ctx, "t", 0), "open: not read committed")
	require.NoError(t, p.Commit(ctx))
	require.Equal(t, []string{"a0"}, c.readCommitted(ctx, "t", 0))
	require.Equal(t, []string{"a1"}, c.readCommitted(ctx, "t", 1))

	_, err = p.Produce(ctx, "t", 0, values("b0")...)
	require.NoError(t, err)
	require.NoError(t, p.Abort(ctx))

	_, err = p.Produce(ctx, "nope", 0, values("c0")...)
	require.ErrorIs(t, err, replica.ErrUnknownTopicOrPartition)
	require.ErrorIs(t, err, log.ErrTransactionAbortable)
	_, err = p.Produce(ctx, "t", 0, values("c0")...)
	require.ErrorIs(t, err, log.ErrTransactionAbortable, "nothing more in a transaction to abort")
	require.ErrorIs(t, p.Commit(ctx), log.ErrTransactionAbortable)
	require.NoError(t, p.Abort(ctx))

	_, err = p.Produce(ctx, "t", 0, values("d0")...)
	require.NoError(t, err)
	require.NoError(t, p.Commit(ctx))
	waitFor(t, 10*time.Second, "the markers", func() bool { return len(c.readCommitted(ctx, "t", 0)) == 2 })
	require.Equal(t, []string{"a0", "d0"}, c.readCommitted(ctx, "t", 0), "the aborted b0 never read committed")

	next, err := NewProducer(ctx, c.nodes[2], ProducerOptions{TransactionalID: "tx"})
	require.NoError(t, err)
	_, err = p.Produce(ctx, "t", 0, values("zombie")...)
	require.Error(t, err, "the old producer is fenced")
	require.True(t, errorsIsAny(err, idempotence.ErrInvalidProducerEpoch, idempotence.ErrProducerFenced), "%v", err)
	_, err = next.Produce(ctx, "t", 0, values("e0")...)
	require.NoError(t, err)
	require.NoError(t, next.Commit(ctx))

	idem, err := NewProducer(ctx, via, ProducerOptions{})
	require.NoError(t, err)
	require.ErrorIs(t, idem.Commit(ctx), log.ErrTransactionState)
}
