package cluster

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// A leader whose disk fills up stops writing its replica: the node
// reports the replica offline, the controller moves the lead to an
// in-sync follower (KIP-858's offline directory, per replica here), and
// producers go on there with nothing acknowledged lost. Once the disk
// takes writes again the node recreates the replica over its log, and it
// catches up and rejoins the ISR.
func TestNodeFullDiskMovesTheLeadAndTheReplicaRecovers(t *testing.T) {
	c := newTestCluster(t, 3)
	disk := vfs.NewErrorFS(vfs.NewMem())
	disk.SetEnabled(false)
	disk.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpWrite}, Path: "*.log", Err: syscall.ENOSPC})
	c.tweak = func(cfg *Options) {
		cfg.recoverEvery, cfg.retryFailedAfter = 50*time.Millisecond, 200*time.Millisecond
		if cfg.ID == 1 {
			cfg.FS = disk
		}
	}
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Assignment: [][]replica.NodeID{{1, 2, 3}}}))
	producer := &segment.ProducerFields{ID: 3}
	var acked []string
	produce := func(v string) {
		_, err := c.produce(ctx, "t", 0, replica.AcksAll, idempotentBatch(t, producer, v))
		require.NoError(t, err)
		acked = append(acked, v)
	}
	for i := range 5 {
		produce(fmt.Sprint("before", i))
	}
	require.Equal(t, replica.NodeID(1), c.any().Metadata().Partition("t", 0).Leader)

	disk.SetEnabled(true)
	for i := range 5 {
		produce(fmt.Sprint("full", i))
	}
	p := c.any().Metadata().Partition("t", 0)
	require.NotEqual(t, replica.NodeID(1), p.Leader, "the lead moved off the full disk")
	require.False(t, slices.Contains(p.ISR, 1), "the offline replica left the ISR")
	require.Positive(t, disk.Injected())

	disk.SetEnabled(false)
	waitFor(t, 20*time.Second, "the recovered replica back in the ISR", func() bool {
		p := c.any().Metadata().Partition("t", 0)
		return p != nil && slices.Contains(p.ISR, 1)
	})
	produce("after")
	require.Equal(t, acked, c.readAll(ctx, "t", 0))
	l, err := c.nodes[1].Log("t", 0)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "node 1's replica caught up", func() bool {
		_, _, end, err := l.Offsets()
		return err == nil && end == int64(len(acked))
	})
}

// When every node loses power and starts again, every partition, the
// internal ones included, gets a leader again by itself, with unclean
// election disabled: the replicas acknowledged only what they had synced
// (FsyncAlways), so each registration claims its topics as synced and
// the controller keeps them in the ELR (KIP-966). Every acknowledged
// record is there.
func TestNodeEveryNodeKilledComesBackWithoutUncleanElection(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 3, ReplicationFactor: 3}))
	producer := &segment.ProducerFields{ID: 4}
	acked := map[int32][]string{}
	for i := range 12 {
		p, v := int32(i%3), fmt.Sprint("v", i)
		// One producer per partition: its sequence is per partition.
		prod := &segment.ProducerFields{ID: producer.ID + int64(p), BaseSequence: int32(len(acked[p]))}
		_, err := c.produce(ctx, "t", p, replica.AcksAll, idempotentBatch(t, prod, v))
		require.NoError(t, err)
		acked[p] = append(acked[p], v)
	}
	// Every partition, the internal topics' included, with all its
	// replicas in sync (TestNodeKilledBeforeItMadeAReplicaClaimsItSynced
	// has the replicas that were never made).
	waitFor(t, 30*time.Second, "every partition fully in sync", func() bool {
		md := c.any().Metadata()
		for _, p := range md.Partitions {
			if len(p.ISR) != 3 {
				return false
			}
		}
		return md.Topic(log.TransactionStateTopic) != nil && md.Topic(group.OffsetsTopic) != nil
	})
	for _, id := range c.ids {
		c.kill(id)
	}
	c.startAll()
	waitFor(t, 30*time.Second, "every partition led again, none elected uncleanly", func() bool {
		md := c.any().Metadata()
		for _, p := range md.Partitions {
			if p.Leader == replica.NoNode || p.Recovering || c.nodes[p.Leader] == nil {
				return false
			}
		}
		return len(md.Partitions) > 3 // the internal topics' too
	})
	for p, values := range acked {
		require.Equal(t, values, c.readAll(ctx, "t", p), "partition %d", p)
	}
}

// A replica that a topic's creation named on a node, and that the node
// never made because every node lost power first, acknowledged nothing:
// the node claims it synced when it registers again, on the data
// directory it ran on before, and the partition is led again without an
// unclean election. Found by TestSimulateNodes (the transaction state
// topic, created as every node died, stayed leaderless with an empty ISR
// and ELR). Here the replicas are made and then taken off every disk, as
// if they had never been.
func TestNodeKilledBeforeItMadeAReplicaClaimsItSynced(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 3}))
	waitFor(t, 10*time.Second, "every replica made", func() bool {
		for _, n := range c.nodes {
			if _, err := n.Log("t", 0); err != nil {
				return false
			}
		}
		return true
	})
	for _, id := range c.ids {
		c.kill(id)
	}
	for _, id := range c.ids {
		require.NoError(t, c.fs[id].Remove("/node/log/.topics/t.json"))
		require.NoError(t, c.fs[id].RemoveAll("/node/log/t-0"))
	}
	c.startAll()
	waitFor(t, 20*time.Second, "the partition led again", func() bool {
		p := c.any().Metadata().Partition("t", 0)
		return p != nil && p.Leader != replica.NoNode && !p.Recovering && c.nodes[p.Leader] != nil
	})
	_, err := c.produce(ctx, "t", 0, replica.AcksAll, batchOf(t, "after"))
	require.NoError(t, err)
	require.Equal(t, []string{"after"}, c.readAll(ctx, "t", 0))

	// A node on a new disk claims nothing it did not find: it may have
	// lost what its old disk acknowledged.
	require.Contains(t, c.nodes[2].registerClaims(), "t")
	c.kill(2)
	c.fs[2] = nil
	c.start(2)
	waitFor(t, 10*time.Second, "the metadata applied", func() bool { return c.nodes[2].Metadata().Topic("t") != nil })
	require.NotContains(t, c.nodes[2].registerClaims(), "t")
}
