package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// Any node produces at the leader and runs a transaction at its
// coordinator, on the nodes the metadata names, following them across
// the kill of the partition's leader; an idempotent retry the leader has
// is answered as a duplicate through the node that forwarded it.
func TestNodeForwardsProducesAndTransactions(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.nodes[3].WaitBrokers(ctx, 3))
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, c.nodes[3].WaitBrokers(short, 4), context.DeadlineExceeded, "a cluster of three")
	require.NoError(t, c.nodes[3].CreateTopic(ctx, "t", TopicSpec{Assignment: [][]replica.NodeID{{1, 2, 3}}}))
	waitFor(t, 10*time.Second, "node 1 leading", func() bool { return c.nodes[3].liveLeader("t", 0) == 1 })
	via := c.nodes[3]

	producer := &segment.ProducerFields{ID: 7}
	b := idempotentBatch(t, producer, "a")
	r, err := via.ProduceAtLeader(ctx, "t", 0, replica.AcksAll, b, "")
	require.NoError(t, err)
	require.EqualValues(t, 0, r.BaseOffset)
	r, err = via.ProduceAtLeader(ctx, "t", 0, replica.AcksAll, b, "")
	require.NoError(t, err)
	require.True(t, r.Duplicate, "the retry answered as the duplicate it is")

	pe, err := via.InitProducerID(ctx, "tx", time.Minute)
	require.NoError(t, err)
	txn, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("paid")}}, segment.BuildOptions{Transactional: true,
		Producer: &segment.ProducerFields{ID: pe.ProducerID, Epoch: pe.Epoch}})
	require.NoError(t, err)
	_, err = via.ProduceAtLeader(ctx, "t", 0, replica.AcksAll, txn, "tx")
	require.NoError(t, err)

	c.kill(1)
	_, err = via.ProduceAtLeader(ctx, "t", 0, replica.AcksAll, idempotentBatch(t, producer, "b"), "")
	require.NoError(t, err, "produced at the next leader")
	_, err = c.nodes[2].EndTxn(ctx, "tx", pe, true)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "the transaction read committed", func() bool {
		return len(c.readCommitted(ctx, "t", 0)) == 3
	})
	require.Equal(t, []string{"a", "paid", "b"}, c.readCommitted(ctx, "t", 0))

	_, err = via.ProduceAtLeader(ctx, "nope", 0, replica.AcksAll, b, "")
	require.ErrorIs(t, err, replica.ErrUnknownTopicOrPartition)
}
