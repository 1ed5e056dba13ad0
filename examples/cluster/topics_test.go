package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// produceTopic appends one record to partition 0 of a topic the node
// leads, and returns its offset.
func (tn *testNode) produceTopic(t *testing.T, topic string) (int64, error) {
	t.Helper()
	batch, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("v")}}, segment.BuildOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := tn.d.Produce(ctx, topic, 0, replica.AcksLeader, batch)
	return res.BaseOffset, firstErr(err, res.Err)
}

// A node that was down while topics were deleted, created again under
// their names and reconfigured catches up from the leader's snapshot, which
// names none of that history: the topics it has that the snapshot lacks
// are deleted with their replicas, one the snapshot gives another id is
// deleted and created anew (none of the old records), and every topic
// takes the snapshot's configs. The snapshot carries the configs; it
// resurrects nothing.
func TestCatchUpFromSnapshotDeletesAndReconfigures(t *testing.T) {
	c := newTestControl(t)
	node := startTestNode(t, filepath.Join(t.TempDir(), logDir), 100)
	c.publish = node.update
	ctrl := newTestController(t)
	registerLive(t, c, ctrl, 1, 100, true)
	registerLive(t, c, ctrl, 2, 1, true)
	registerLive(t, c, ctrl, 3, 1, true)
	create := func(name string, id byte, configs map[string]string) {
		commitDecision(t, c, ctrl, func() error {
			return ctrl.CreateTopicWith(name, [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{id}, Configs: configs})
		})
	}
	create("stray", 1, nil)
	create("renewed", 2, map[string]string{"retention.ms": "1000"})
	create("kept", 3, map[string]string{"retention.ms": "1000"})
	waitFor(t, 5*time.Second, "the node leads renewed-0 and has a record in it", func() (bool, string) {
		_, err := node.produceTopic(t, "renewed")
		return err == nil, errString(err)
	})

	// Down: the records below never reach the node.
	require.NoError(t, ctrl.DeleteTopic("stray"))
	require.NoError(t, ctrl.DeleteTopic("renewed"))
	require.NoError(t, ctrl.CreateTopicWith("renewed", [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{4},
		Configs: map[string]string{"cleanup.policy": "compact"}}))
	require.NoError(t, ctrl.AlterTopicConfigs("kept", []controller.ConfigOp{{Op: controller.SetConfig, Name: "retention.ms", Value: "5000"}}, false))
	ctrl.Advance(ctrl.Ready())

	data, err := encodeSnapshot(ctrl.State())
	require.NoError(t, err)
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(c.applied.index + 10), Term: new(uint64(1)),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	require.NoError(t, c.restore(snap, true))
	c.publishChanges()

	waitFor(t, 5*time.Second, "the node's log.Dir as the snapshot says", func() (bool, string) {
		topics := node.localTopics()
		id, err := node.dir.TopicID("renewed")
		switch {
		case topics["stray"] != nil:
			return false, "stray is still there"
		case err != nil || id != [16]byte{4}:
			return false, "renewed not created anew"
		case topics["renewed"]["cleanup.policy"] != "compact":
			return false, "renewed has cleanup.policy " + topics["renewed"]["cleanup.policy"]
		case topics["kept"]["retention.ms"] != "5000":
			return false, "kept has retention.ms " + topics["kept"]["retention.ms"]
		}
		return true, ""
	})
	waitFor(t, 5*time.Second, "the node leads the new renewed-0, from offset 0", func() (bool, string) {
		offset, err := node.produceTopic(t, "renewed")
		require.Zero(t, offset, "none of the old topic's records")
		return err == nil, errString(err)
	})
}

// A node that crashed after it applied a topic's RemoveTopicRecord but
// before it deleted the topic's replicas, and took a snapshot past the
// record, has nothing left to replay the deletion from: once it has
// applied what its raft log had committed, it deletes the topics its state
// lacks. A topic created by an entry after that snapshot, which the
// snapshot lacks too, is kept with its records: the node waits for the
// replay first.
func TestRestartDeletesTheTopicsOfDeletionsACrashCutShort(t *testing.T) {
	raftPath, logPath := filepath.Join(t.TempDir(), raftFile), filepath.Join(t.TempDir(), logDir)
	c := openTestControl(t, raftPath)
	first := startTestNode(t, logPath, 100)
	c.publish = first.update
	ctrl := newTestController(t)
	registerLive(t, c, ctrl, 1, 100, true)
	registerLive(t, c, ctrl, 2, 1, true)
	registerLive(t, c, ctrl, 3, 1, true)
	create := func(name string, id byte) {
		commitDecision(t, c, ctrl, func() error {
			return ctrl.CreateTopicWith(name, [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{ID: [16]byte{id}})
		})
	}
	create("doomed", 1)
	waitFor(t, 5*time.Second, "the node has doomed", func() (bool, string) { return first.localTopics()["doomed"] != nil, "" })

	// The deletion is committed and applied, the crash comes before it is
	// published, and the node's snapshot is past it.
	require.NoError(t, ctrl.DeleteTopic("doomed"))
	index := c.applied.index + 1
	e := drain(t, ctrl, 9, index, index)
	require.NoError(t, c.store.save(nil, &pb.HardState{Term: new(uint64(1)), Commit: new(index)}, []*pb.Entry{e}))
	c.apply(e)
	delete(c.topics, "doomed") // the crash: the deletion never reaches the node
	c.snap.every = 1
	require.NoError(t, c.maybeSnapshot())
	c.snap.every = 0
	create("late", 2)
	waitFor(t, 5*time.Second, "the node leads late-0 and has a record in it", func() (bool, string) {
		_, err := first.produceTopic(t, "late")
		return err == nil, errString(err)
	})
	first.stop()
	require.NoError(t, c.store.close())

	again := openTestControl(t, raftPath)
	second := startTestNode(t, logPath, 200)
	again.publish = second.update
	again.publishChanges() // as run does first: the snapshot, before the replay
	require.Contains(t, second.localTopics(), "late", "not deleted before the replay")
	require.NoError(t, again.ready())
	waitFor(t, 5*time.Second, "doomed deleted once the log is replayed", func() (bool, string) {
		return second.localTopics()["doomed"] == nil, ""
	})
	p, err := second.dir.Partition("late", 0)
	require.NoError(t, err)
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 1, end, "late kept with its record")
}
