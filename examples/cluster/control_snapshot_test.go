package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// A node restarted after a snapshot loads it as its committed state and
// history, then applies the entries after it (the tail raft hands out as
// committed): its state is the one it had, and a new controller over its
// history replays to it.
func TestControlRestartsFromSnapshotAndTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), raftFile)
	c := openTestControl(t, path)
	c.snap.every = 3
	ctrl, err := controller.New(controller.Config{Node: 1, SessionTimeout: 10, MinInsyncReplicas: 2}, controller.NewState())
	require.NoError(t, err)
	commit := func(index uint64, decide func()) {
		decide()
		e := drain(t, ctrl, 9, index, index)
		require.NoError(t, c.store.save(nil, &pb.HardState{Term: new(uint64(1)), Commit: new(index)}, []*pb.Entry{e}))
		c.apply(e)
		require.NoError(t, c.maybeSnapshot())
	}
	index := uint64(0)
	for _, b := range []replica.NodeID{1, 2, 3} {
		index++
		commit(index, func() {
			e, err := ctrl.Register(b, 1, true)
			require.NoError(t, err)
			_, err = ctrl.Heartbeat(b, e) // live: a topic needs a live replica per partition
			require.NoError(t, err)
		})
	}
	index++
	commit(index, func() { require.NoError(t, ctrl.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}}, false)) })
	require.Equal(t, uint64(3), c.snap.taken, "a snapshot every 3 entries")
	first, err := c.store.ms.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(4), first, "the log starts after the snapshot")
	require.Equal(t, ctrl.State(), c.state)
	require.NoError(t, c.store.close())

	again := openTestControl(t, path)
	require.Equal(t, uint64(3), again.applied.index, "the snapshot loaded")
	require.NoError(t, again.ready())
	require.Equal(t, index, again.applied.index, "the tail applied")
	require.Equal(t, ctrl.State(), again.state)
	replayed, err := controller.Replay(again.history)
	require.NoError(t, err)
	require.Equal(t, again.state, replayed, "the history (the snapshot's image, then the tail) replays to the state")
}
