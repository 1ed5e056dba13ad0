package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// atTxnCoordinator runs fn at txnID's coordinator, following it, until it
// answers other than a coordinator error a producer retries.
func (c *testCluster) atTxnCoordinator(ctx context.Context, txnID string, fn func(*Node) error) error {
	for {
		var err error
		if n := c.nodes[c.any().TransactionCoordinator(txnID)]; n != nil {
			err = fn(n)
			if !errorsIsAny(err, idempotence.ErrNotCoordinator, idempotence.ErrCoordinatorLoadInProgress,
				idempotence.ErrCoordinatorNotAvailable, idempotence.ErrConcurrentTransactions) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// produceTxn produces a transactional batch to the partition's leader,
// retrying what a producer retries.
func (c *testCluster) produceTxn(ctx context.Context, txnID string, pe idempotence.ProducerIDAndEpoch, seq int32, topic string, partition int32, values ...string) error {
	var recs []segment.Record
	for _, v := range values {
		recs = append(recs, segment.Record{Value: []byte(v)})
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Transactional: true,
		Producer: &segment.ProducerFields{ID: pe.ProducerID, Epoch: pe.Epoch, BaseSequence: seq}})
	require.NoError(c.t, err)
	for {
		md := c.any().Metadata()
		if p := md.Partition(topic, partition); p != nil && c.nodes[p.Leader] != nil {
			_, err = c.nodes[p.Leader].ProduceTransactional(ctx, txnID, true, topic, partition, replica.AcksAll, b)
			if err == nil || !retriable(err) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// readCommitted returns the values of a partition below its last stable
// offset, without those of aborted transactions.
func (c *testCluster) readCommitted(ctx context.Context, topic string, partition int32) []string {
	c.t.Helper()
	return c.read(ctx, topic, partition, log.ReadCommitted)
}

func TestNodeTransactionsCommitAndAbortAcrossCoordinatorKill(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 2, ReplicationFactor: 3}))

	var pe idempotence.ProducerIDAndEpoch
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) (err error) {
		pe, err = n.Transactions().InitProducerID("tx", time.Minute)
		return err
	}))
	require.NoError(t, c.produceTxn(ctx, "tx", pe, 0, "t", 0, "c1"))
	require.NoError(t, c.produceTxn(ctx, "tx", pe, 0, "t", 1, "c2"))
	require.Empty(t, c.readCommitted(ctx, "t", 0), "an open transaction is not read committed")

	// The coordinator dies with the transaction open; its successor loads
	// it from the replicated state and commits it.
	coordinator := c.any().TransactionCoordinator("tx")
	c.kill(coordinator)
	var next idempotence.ProducerIDAndEpoch
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) (err error) {
		next, err = n.Transactions().EndTxn("tx", pe, true)
		return err
	}))
	require.NotEqual(t, coordinator, c.any().TransactionCoordinator("tx"))
	waitFor(t, 20*time.Second, "the committed transaction read committed", func() bool {
		return len(c.readCommitted(ctx, "t", 0)) == 1 && len(c.readCommitted(ctx, "t", 1)) == 1
	})

	// The next transaction aborts: nothing of it is read committed.
	require.NoError(t, c.produceTxn(ctx, "tx", next, 0, "t", 0, "a1"))
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) error {
		_, err := n.Transactions().EndTxn("tx", next, false)
		return err
	}))
	c.start(coordinator)
	waitFor(t, 20*time.Second, "the abort marker", func() bool {
		n := c.leaderOf("t", 0)
		if n == nil {
			return false
		}
		st, err := n.Status(ctx, "t", 0)
		if err != nil {
			return false
		}
		l, err := n.Log("t", 0)
		if err != nil {
			return false
		}
		lso, err := l.LastStableOffset()
		return err == nil && lso == st.HighWatermark
	})
	require.Equal(t, []string{"c1"}, c.readCommitted(ctx, "t", 0))
	require.Equal(t, []string{"c2"}, c.readCommitted(ctx, "t", 1))
	rec, ok := c.nodes[c.any().TransactionCoordinator("tx")].Transactions().Describe("tx")
	require.True(t, ok)
	require.Equal(t, idempotence.TxnCompleteAbort, rec.State)
}

// A marker is appended only by the partition's leader in the epoch the
// coordinator saw, and only from the producer's epoch or a later one
// (Kafka's ProducerAppendInfo.appendEndTxnMarker): a marker of an older
// producer epoch is refused.
func TestNodeMarkersOnlyAtTheLeaderInItsEpoch(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 3}))
	var pe idempotence.ProducerIDAndEpoch
	require.NoError(t, c.atTxnCoordinator(ctx, "m", func(n *Node) (err error) {
		pe, err = n.Transactions().InitProducerID("m", time.Minute)
		return err
	}))
	require.NoError(t, c.produceTxn(ctx, "m", pe, 0, "t", 0, "x"))
	require.NoError(t, c.atTxnCoordinator(ctx, "m", func(n *Node) error {
		_, err := n.Transactions().EndTxn("m", pe, true)
		return err
	}))
	// The commit bumped the producer's epoch: a marker of the epoch it
	// had is stale.
	stale, err := idempotence.AppendMarkerBatch(nil, pe.ProducerID, pe.Epoch, idempotence.Marker{Type: idempotence.MarkerAbort}, time.Now().UnixMilli())
	require.NoError(t, err)
	p := c.any().Metadata().Partition("t", 0)
	leader := c.nodes[p.Leader]
	follower := c.nodes[p.Replicas[slices.IndexFunc(p.Replicas, func(r replica.NodeID) bool { return r != p.Leader })]]
	marker := func(n *Node, leaderEpoch int32) error {
		return (&markerRequest{Topic: "t", Partition: 0, LeaderEpoch: leaderEpoch, Batch: stale}).serve(ctx, n)
	}
	require.ErrorIs(t, marker(follower, p.LeaderEpoch), replica.ErrNotLeaderOrFollower, "at a follower")
	require.ErrorIs(t, marker(leader, p.LeaderEpoch+1), replica.ErrNotLeaderOrFollower, "in another leader epoch")
	require.ErrorIs(t, marker(leader, p.LeaderEpoch), idempotence.ErrInvalidProducerEpoch, "of an epoch older than the producer's")
}

// The partitions of one transactional produce join the transaction in one
// transition at the coordinator, as Kafka's ReplicaManager verifies them
// together through AddPartitionsToTxnManager: one record in the state
// log, and none of them refused CONCURRENT_TRANSACTIONS by another's.
func TestNodeTransactionalProduceJoinsItsPartitionsAtOnce(t *testing.T) {
	c := newTestCluster(t, 1)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const partitions = 6
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: partitions, ReplicationFactor: 1}))
	n := c.any()
	var pe idempotence.ProducerIDAndEpoch
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) (err error) {
		pe, err = n.Transactions().InitProducerID("tx", time.Minute)
		return err
	}))
	state := group.PartitionFor("tx", n.cfg.TransactionPartitions)
	before := len(c.readAll(ctx, log.TransactionStateTopic, state))

	var batches []PartitionBatch
	for p := range int32(partitions) {
		b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte{byte('a' + p)}}}, segment.BuildOptions{Transactional: true,
			Producer: &segment.ProducerFields{ID: pe.ProducerID, Epoch: pe.Epoch}})
		require.NoError(t, err)
		batches = append(batches, PartitionBatch{Topic: "t", Partition: p, Batch: b})
	}
	for i, r := range n.ProduceTransactionalBatches(ctx, "tx", true, replica.AcksAll, batches...) {
		require.NoError(t, r.Err, "partition %d", i)
	}
	rec, ok := n.Transactions().Describe("tx")
	require.True(t, ok)
	require.Len(t, rec.Partitions, partitions)
	require.Len(t, c.readAll(ctx, log.TransactionStateTopic, state), before+1, "one transition added every partition")

	// A batch of another producer in the same produce is refused alone.
	other, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("x")}}, segment.BuildOptions{Transactional: true,
		Producer: &segment.ProducerFields{ID: pe.ProducerID + 1, Epoch: 0}})
	require.NoError(t, err)
	again, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("b")}}, segment.BuildOptions{Transactional: true,
		Producer: &segment.ProducerFields{ID: pe.ProducerID, Epoch: pe.Epoch, BaseSequence: 1}})
	require.NoError(t, err)
	rs := n.ProduceTransactionalBatches(ctx, "tx", true, replica.AcksAll,
		PartitionBatch{Topic: "t", Partition: 0, Batch: again}, PartitionBatch{Topic: "t", Partition: 1, Batch: other})
	require.NoError(t, rs[0].Err)
	require.ErrorIs(t, rs[1].Err, idempotence.ErrInvalidProducerIDMapping)
}
