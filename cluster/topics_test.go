package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// testTopicConfig maps the topic configs these tests set onto a log's
// configuration, as an application's Options.TopicConfig does.
func testTopicConfig(base log.TopicConfig, configs map[string]string) (log.TopicConfig, error) {
	if v, ok := configs["retention.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return base, err
		}
		base.Retention.Age = time.Duration(ms) * time.Millisecond
	}
	if configs["cleanup.policy"] == "compact" {
		base.Compact = log.Compacted
	}
	if v, ok := configs["max.message.bytes"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return base, err
		}
		base.MaxBatchBytes = n
	}
	return base, nil
}

// startTopicsNode starts node 1 over fs, following s's metadata, with
// testTopicConfig.
func startTopicsNode(t *testing.T, s *scriptedController, fs vfs.FS, incarnation uint64) (*Node, *MemoryMetadataLog) {
	t.Helper()
	l, err := s.md.Open(1)
	require.NoError(t, err)
	n, err := New(Options{ID: 1, Dir: "/node", FS: fs, Transport: &recorder{}, Metadata: l, Logger: testLogger(t), Incarnation: incarnation,
		Tick: 10 * time.Millisecond, ControlTick: 10 * time.Millisecond, MinInsyncReplicas: 2, InternalReplicationFactor: 3,
		TopicConfig: testTopicConfig})
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); l.Close() })
	return n, l
}

// produceTo appends one record to partition 0 of a topic the node leads,
// acks=1, and returns its offset.
func produceTo(t *testing.T, n *Node, topic string) (int64, error) {
	t.Helper()
	b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("v")}}, segment.BuildOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := n.Produce(ctx, topic, 0, replica.AcksLeader, b)
	return r.BaseOffset, err
}

// A node that was cut off while topics were deleted, created again under
// their names and reconfigured catches up from the leader's snapshot,
// which names none of that history: the topics it has that the snapshot
// lacks are deleted with their replicas, one the snapshot gives another id
// is deleted and created anew (none of the old records), and every topic
// takes the snapshot's configs. The snapshot resurrects nothing.
func TestCatchUpFromSnapshotDeletesAndReconfigures(t *testing.T) {
	s := newScriptedController(t)
	s.registerLive(1, 100, true)
	s.registerLive(2, 1, true)
	s.registerLive(3, 1, true)
	create := func(name string, id byte, configs map[string]string) {
		s.commit(func() error {
			return s.ctrl.CreateTopic(name, [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{id}, Configs: configs})
		})
	}
	create("stray", 1, nil)
	create("renewed", 2, map[string]string{"retention.ms": "1000"})
	create("kept", 3, map[string]string{"retention.ms": "1000"})
	n, _ := startTopicsNode(t, s, vfs.NewMem(), 100)
	waitFor(t, 5*time.Second, "the node leads renewed-0 and has a record in it", func() bool {
		_, err := produceTo(t, n, "renewed")
		return err == nil
	})

	// Cut off: the records below never reach the node, and the log keeps
	// only a snapshot of them.
	s.md.Cut(1)
	s.commit(func() error { return s.ctrl.DeleteTopic("stray") })
	s.commit(func() error { return s.ctrl.DeleteTopic("renewed") })
	s.commit(func() error {
		return s.ctrl.CreateTopic("renewed", [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{4},
			Configs: map[string]string{"cleanup.policy": "compact"}})
	})
	s.commit(func() error {
		return s.ctrl.AlterTopicConfigs("kept", []controller.ConfigOp{{Op: controller.SetConfig, Name: "retention.ms", Value: "5000"}}, false)
	})
	data, err := encodeProposal(0, 0, s.ctrl.State().Records())
	require.NoError(t, err)
	leader, _ := s.md.Leader()
	require.Equal(t, replica.NodeID(9), leader)
	s.md.mu.Lock()
	last := s.md.lastIndexLocked()
	s.md.mu.Unlock()
	require.NoError(t, s.log.Snapshot(last, data))
	s.md.Heal(1)

	waitFor(t, 5*time.Second, "the node's log.Dir as the snapshot says", func() bool {
		_, strayErr := n.dir.TopicID("stray")
		id, err := n.dir.TopicID("renewed")
		renewed, rerr := n.dir.TopicConfig("renewed")
		kept, kerr := n.dir.TopicConfig("kept")
		return strayErr != nil && err == nil && id == [16]byte{4} && rerr == nil && renewed.Compact == log.Compacted &&
			kerr == nil && kept.Retention.Age == 5*time.Second
	})
	waitFor(t, 5*time.Second, "the node leads the new renewed-0, from offset 0", func() bool {
		offset, err := produceTo(t, n, "renewed")
		if err == nil {
			require.Zero(t, offset, "none of the old topic's records")
		}
		return err == nil
	})
}

// A node that stopped after it applied a topic's RemoveTopicRecord but
// before it deleted the topic's replicas, and whose log keeps only a
// snapshot past the record, has nothing left to replay the deletion from:
// once it has applied what its metadata log had committed, it deletes the
// topics its state lacks. A topic created by an entry after that snapshot
// is kept with its records.
func TestRestartDeletesTheTopicsOfDeletionsACrashCutShort(t *testing.T) {
	s := newScriptedController(t)
	s.registerLive(1, 100, true)
	s.registerLive(2, 1, true)
	s.registerLive(3, 1, true)
	s.commit(func() error {
		return s.ctrl.CreateTopic("doomed", [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{1}})
	})
	fs := vfs.NewMem()
	first, l := startTopicsNode(t, s, fs, 100)
	waitFor(t, 5*time.Second, "the node has doomed", func() bool {
		_, err := first.dir.TopicID("doomed")
		return err == nil
	})
	// Down before the deletion: the node's Dir keeps the topic, and the
	// log compacts the deletion away.
	require.NoError(t, first.Close())
	require.NoError(t, l.Close())
	s.commit(func() error { return s.ctrl.DeleteTopic("doomed") })
	data, err := encodeProposal(0, 0, s.ctrl.State().Records())
	require.NoError(t, err)
	s.md.mu.Lock()
	last := s.md.lastIndexLocked()
	s.md.mu.Unlock()
	require.NoError(t, s.log.Snapshot(last, data))
	s.commit(func() error {
		return s.ctrl.CreateTopic("late", [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{2}})
	})

	second, _ := startTopicsNode(t, s, fs, 200)
	waitFor(t, 5*time.Second, "doomed deleted once the log is replayed, late created", func() bool {
		_, doomed := second.dir.TopicID("doomed")
		_, late := second.dir.TopicID("late")
		return doomed != nil && late == nil
	})
}

// A produce is checked against its topic's max.message.bytes, whatever it
// is (Kafka's leader checks LogConfig.maxMessageSize before it appends):
// a topic that takes 8 MiB takes a batch of 5, and one of the default
// 1 MiB refuses 2 (franz-go's TestIssueFetchLargerThanBrokerMaxReadBytes).
func TestNodeProduceTakesWhatItsTopicTakes(t *testing.T) {
	c := newTestCluster(t, 1)
	c.tweak = func(cfg *Options) { cfg.TopicConfig = testTopicConfig }
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := c.any()
	require.NoError(t, n.CreateTopic(ctx, "large", TopicSpec{Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)}}))
	require.NoError(t, n.CreateTopic(ctx, "small", TopicSpec{Partitions: 1, ReplicationFactor: 1}))
	batch := func(size int) []byte {
		b, err := segment.AppendBatch(nil, []segment.Record{{Value: make([]byte, size)}}, segment.BuildOptions{})
		require.NoError(t, err)
		return b
	}
	produce := func(topic string, b []byte) error {
		for {
			_, err := n.Produce(ctx, topic, 0, replica.AcksAll, b)
			if !errorsIsAny(err, replica.ErrNotLeaderOrFollower, replica.ErrUnknownTopicOrPartition) || ctx.Err() != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.NoError(t, produce("large", batch(5<<20)))
	require.ErrorIs(t, produce("large", batch(9<<20)), replica.ErrMessageTooLarge)
	require.ErrorIs(t, produce("small", batch(2<<20)), replica.ErrMessageTooLarge)
	require.NoError(t, produce("small", batch(1<<19)))
}
