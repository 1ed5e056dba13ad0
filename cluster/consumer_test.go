package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/consumer"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// fastGroups makes members of consumer groups heartbeat every 50 ms, so
// that assignments move quickly.
func fastGroups(cfg *Options) { cfg.Groups.Config.ConsumerHeartbeatInterval = 50 * time.Millisecond }

// waitCoordinator returns the node coordinating groupID once there is one.
func (c *testCluster) waitCoordinator(groupID string) replica.NodeID {
	c.t.Helper()
	var id replica.NodeID
	waitFor(c.t, 10*time.Second, "the coordinator of "+groupID, func() bool {
		id = c.any().GroupCoordinator(groupID)
		return id != replica.NoNode
	})
	return id
}

// produceValues produces values to a partition as the producer's next
// idempotent batch.
func (c *testCluster) produceValues(ctx context.Context, p *segment.ProducerFields, topic string, partition int32, values ...string) {
	c.t.Helper()
	_, err := c.produce(ctx, topic, partition, replica.AcksAll, idempotentBatch(c.t, p, values...))
	require.NoError(c.t, err)
}

// consumed counts what the consumers of a test got.
type consumed struct {
	mu     sync.Mutex
	counts map[string]int
	errs   []error
}

func (d *consumed) add(ms []consumer.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range ms {
		d.counts[string(m.Value)]++
	}
}

func (d *consumed) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

// has reports whether every value was delivered.
func (d *consumed) has(values []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range values {
		if d.counts[v] == 0 {
			return false
		}
	}
	return true
}

// run polls cons and commits what each Poll returned, until stop is
// called, which returns once the loop has.
func (d *consumed) run(cons *Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			poll, cancelPoll := context.WithTimeout(ctx, 100*time.Millisecond)
			ms, err := cons.Poll(poll)
			cancelPoll()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				d.fail(fmt.Errorf("poll: %w", err))
			}
			d.add(ms)
			if len(ms) > 0 {
				if err := cons.Commit(ctx); err != nil && ctx.Err() == nil {
					d.fail(fmt.Errorf("commit: %w", err))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// assigned is the partitions of "t" a consumer owns.
func assigned(cons *Consumer) []int32 {
	var ps []int32
	for _, tp := range cons.Assigned() {
		ps = append(ps, tp.Partition)
	}
	return ps
}

// Two consumers of a group, each through a node that does not coordinate
// it, share a topic's partitions and read every record exactly once
// through the coordinator's kill, a member leaving, and commits at each
// step.
func TestConsumersShareAGroupAcrossCoordinatorKill(t *testing.T) {
	c := newTestCluster(t, 3)
	c.tweak = fastGroups
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 4, ReplicationFactor: 3}))
	coordinator := c.waitCoordinator("g")
	var through []*Node
	for _, id := range c.ids {
		if id != coordinator {
			through = append(through, c.nodes[id])
		}
	}

	producers := map[int32]*segment.ProducerFields{}
	for p := range int32(4) {
		producers[p] = &segment.ProducerFields{ID: 100 + int64(p)}
	}
	var produced []string
	produceRound := func(round int) []string {
		var values []string
		for p := range int32(4) {
			for b := range 3 {
				batch := []string{fmt.Sprintf("r%d-p%d-b%d-0", round, p, b), fmt.Sprintf("r%d-p%d-b%d-1", round, p, b)}
				c.produceValues(ctx, producers[p], "t", p, batch...)
				values = append(values, batch...)
			}
		}
		produced = append(produced, values...)
		return values
	}
	got := &consumed{counts: map[string]int{}}
	delivered := func(what string, values []string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool { return got.has(values) })
	}

	a, err := NewConsumer(through[0], ConsumerOptions{Group: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	defer a.Close(ctx)
	stopA := got.run(a)
	delivered("the first round, to the only member", produceRound(1))
	require.Equal(t, []int32{0, 1, 2, 3}, assigned(a))

	b, err := NewConsumer(through[1], ConsumerOptions{Group: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	defer b.Close(ctx)
	stopB := got.run(b)
	waitFor(t, 20*time.Second, "the partitions shared", func() bool {
		pa, pb := assigned(a), assigned(b)
		return len(pa) == 2 && len(pb) == 2
	})
	require.ElementsMatch(t, []int32{0, 1, 2, 3}, append(assigned(a), assigned(b)...))
	delivered("the second round, to both", produceRound(2))

	coordinator = c.any().GroupCoordinator("g")
	require.NotContains(t, []replica.NodeID{through[0].cfg.ID, through[1].cfg.ID}, coordinator)
	c.kill(coordinator)
	delivered("the third round, after the coordinator's kill", produceRound(3))
	require.NotEqual(t, coordinator, c.any().GroupCoordinator("g"))

	// b leaves; a takes its partitions over from where b committed.
	stopB()
	require.NoError(t, b.Commit(ctx))
	require.NoError(t, b.Close(ctx))
	require.ErrorIs(t, b.Commit(ctx), consumer.ErrClosed)
	waitFor(t, 20*time.Second, "the partitions back with a", func() bool { return len(assigned(a)) == 4 })
	delivered("the fourth round, to the one left", produceRound(4))
	stopA()
	require.NoError(t, a.Close(ctx))

	got.mu.Lock()
	defer got.mu.Unlock()
	require.Empty(t, got.errs)
	require.ElementsMatch(t, produced, slices.Collect(maps.Keys(got.counts)))
	for v, n := range got.counts {
		require.Equal(t, 1, n, "consumed of %s", v)
	}
}

// pollFor polls cons until it has returned n records, and then for a
// while longer to catch any past them.
func pollFor(t *testing.T, cons *Consumer, n int) []consumer.Message {
	t.Helper()
	var out []consumer.Message
	deadline := time.Now().Add(30 * time.Second)
	for quiet := time.Now().Add(time.Hour); time.Now().Before(quiet); {
		require.True(t, time.Now().Before(deadline), "got %d records of %d", len(out), n)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		ms, err := cons.Poll(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		out = append(out, ms...)
		if len(out) >= n && quiet.After(time.Now().Add(300*time.Millisecond)) {
			quiet = time.Now().Add(300 * time.Millisecond)
		}
	}
	return out
}

func valuesOf(ms []consumer.Message) []string {
	var vs []string
	for _, m := range ms {
		vs = append(vs, string(m.Value))
	}
	return vs
}

// A consumer that closes leaves its commits behind: the next member of
// the group reads on from them, getting again only what came after the
// last commit. Read committed, neither sees an aborted transaction; read
// uncommitted, a consumer does.
func TestConsumerResumesFromCommittedOffsets(t *testing.T) {
	c := newTestCluster(t, 3)
	c.tweak = fastGroups
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 2, ReplicationFactor: 3}))
	c.waitCoordinator("g")

	p0, p1 := &segment.ProducerFields{ID: 200}, &segment.ProducerFields{ID: 201}
	c.produceValues(ctx, p0, "t", 0, "a0", "a1", "a2")
	c.produceValues(ctx, p0, "t", 0, "a3", "a4")
	c.produceValues(ctx, p1, "t", 1, "b0")
	// An aborted transaction, then a committed one, on partition 1.
	var pe idempotence.ProducerIDAndEpoch
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) (err error) {
		pe, err = n.Transactions().InitProducerID("tx", time.Minute)
		return err
	}))
	require.NoError(t, c.produceTxn(ctx, "tx", pe, 0, "t", 1, "x1", "x2"))
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) (err error) {
		pe, err = n.Transactions().EndTxn("tx", pe, false)
		return err
	}))
	require.NoError(t, c.produceTxn(ctx, "tx", pe, 0, "t", 1, "c1"))
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) error {
		_, err := n.Transactions().EndTxn("tx", pe, true)
		return err
	}))
	c.produceValues(ctx, p1, "t", 1, "b1", "b2")

	first, err := NewConsumer(c.nodes[1], ConsumerOptions{Group: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	defer first.Close(ctx)
	read := pollFor(t, first, 9)
	require.ElementsMatch(t, []string{"a0", "a1", "a2", "a3", "a4", "b0", "c1", "b1", "b2"}, valuesOf(read))
	require.NoError(t, first.Commit(ctx))
	c.produceValues(ctx, p0, "t", 0, "a5", "a6")
	c.produceValues(ctx, p1, "t", 1, "b3")
	uncommitted := pollFor(t, first, 3)
	require.ElementsMatch(t, []string{"a5", "a6", "b3"}, valuesOf(uncommitted))
	require.NoError(t, first.Close(ctx))
	_, err = first.Poll(ctx)
	require.ErrorIs(t, err, consumer.ErrClosed)

	next, err := NewConsumer(c.nodes[2], ConsumerOptions{Group: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	again := pollFor(t, next, 3)
	require.ElementsMatch(t, uncommitted, again, "delivered again: what came after the commit, and only that")
	require.NoError(t, next.Close(ctx))

	dirty, err := NewConsumer(c.nodes[3], ConsumerOptions{Group: "u", Topics: []string{"t"}, Isolation: log.ReadUncommitted})
	require.NoError(t, err)
	defer dirty.Close(ctx)
	require.ElementsMatch(t, []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "b0", "x1", "x2", "c1", "b1", "b2", "b3"},
		valuesOf(pollFor(t, dirty, 14)))
}

// A fetch answers the same at the leader and through any other node: the
// batches, the offsets, and read committed the aborted transactions; an
// offset past the log is out of range, with the offsets to reset to.
func TestNodeFetchAtTheLeaderFromAnyNode(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 3}))
	c.produceValues(ctx, &segment.ProducerFields{ID: 300}, "t", 0, "v0", "v1")
	var pe idempotence.ProducerIDAndEpoch
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) (err error) {
		pe, err = n.Transactions().InitProducerID("tx", time.Minute)
		return err
	}))
	require.NoError(t, c.produceTxn(ctx, "tx", pe, 0, "t", 0, "x"))
	require.NoError(t, c.atTxnCoordinator(ctx, "tx", func(n *Node) error {
		_, err := n.Transactions().EndTxn("tx", pe, false)
		return err
	}))

	// Reads from 0 to the log end, each from where the one before ended:
	// the marker may be in a segment of its own.
	readAll := func(n *Node) ([]string, []FetchResult, error) {
		var values []string
		var fetches []FetchResult
		for next := int64(0); next < 4; {
			res, err := n.Fetch(ctx, "t", 0, next, 1<<20, log.ReadCommitted)
			if err == nil && len(res.Records) == 0 {
				err = fmt.Errorf("nothing at %d below the last stable offset %d", next, res.LastStableOffset)
			}
			var msgs []consumer.Message
			if err == nil {
				msgs, next, err = records(consumer.TopicPartition{Topic: "t"}, next, res)
			}
			if err != nil {
				return nil, nil, err
			}
			values, fetches = append(values, valuesOf(msgs)...), append(fetches, res)
		}
		return values, fetches, nil
	}
	var leader *Node
	var values []string
	var fetches []FetchResult
	waitFor(t, 20*time.Second, "a read to past the abort marker", func() bool {
		if leader = c.leaderOf("t", 0); leader == nil {
			return false
		}
		var err error
		values, fetches, err = readAll(leader)
		return err == nil
	})
	require.Equal(t, []string{"v0", "v1"}, values, "without the aborted record and the marker")
	require.Equal(t, []idempotence.AbortedTxn{{ProducerID: pe.ProducerID, FirstOffset: 2, LastOffset: 3, LastStableOffset: 4}}, fetches[0].Aborted)
	require.Equal(t, int64(0), fetches[0].LogStartOffset)
	require.Equal(t, int64(4), fetches[0].LastStableOffset)
	require.Equal(t, int64(4), fetches[0].HighWatermark)

	for _, n := range c.nodes {
		if n == leader {
			continue
		}
		viaValues, via, err := readAll(n)
		require.NoError(t, err)
		require.Equal(t, values, viaValues, "through node %d", n.cfg.ID)
		require.Equal(t, fetches, via, "through node %d", n.cfg.ID)
		_, err = n.Fetch(ctx, "t", 0, 9, 1<<20, log.ReadUncommitted)
		require.ErrorIs(t, err, replica.ErrOffsetOutOfRange)
	}
	out, err := leader.Fetch(ctx, "t", 0, 9, 1<<20, log.ReadUncommitted)
	require.ErrorIs(t, err, replica.ErrOffsetOutOfRange)
	require.Equal(t, int64(4), out.HighWatermark)
	_, err = leader.Fetch(ctx, "t", 0, 0, 1, log.ReadLogEnd)
	require.ErrorIs(t, err, replica.ErrInvalidRequest)
}
