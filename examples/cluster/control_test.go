package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

func newTestControl(t *testing.T) *control {
	t.Helper()
	return openTestControl(t, filepath.Join(t.TempDir(), raftFile))
}

// openTestControl opens node 1's control loop, alone in its raft group,
// over the raft log at path; it is not run.
func openTestControl(t *testing.T, path string) *control {
	t.Helper()
	store, err := openRaftStore(path, []uint64{1})
	require.NoError(t, err)
	t.Cleanup(func() { store.close() })
	c, err := newControl(1, store, map[replica.NodeID]string{1: "127.0.0.1:1"},
		controller.Config{Node: 1, SessionTimeout: 10, MinInsyncReplicas: 2}, time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(c.raftTr.close)
	return c
}

// drain takes what a controller decided as the entry a node would propose.
func drain(t *testing.T, c *controller.Controller, nonce, seq uint64, index uint64) *pb.Entry {
	t.Helper()
	rd := c.Ready()
	c.Advance(rd)
	data, err := encodeProposal(nonce, seq, rd.Records)
	require.NoError(t, err)
	return &pb.Entry{Term: new(uint64(1)), Index: new(index), Data: data}
}

// The records of a deposed controller that raft commits after its
// successor's first record are refused by every node's state (the
// controller epoch fences them), and left out of the history a new
// controller replays; the proposer's wait ends for its own proposal only,
// not for another incarnation's entry that happens to have the same
// sequence number.
func TestDeposedControllerRecordsAreRefused(t *testing.T) {
	c := newTestControl(t)
	cfg := controller.Config{Node: 2, SessionTimeout: 10, MinInsyncReplicas: 2}
	old, err := controller.New(cfg, controller.NewState())
	require.NoError(t, err)
	_, err = old.Register(1, 1, true)
	require.NoError(t, err)
	first := drain(t, old, 7, 1, 1)
	c.apply(first)
	require.Equal(t, int32(0), c.state.Epoch)

	replayed, err := controller.Replay(c.history)
	require.NoError(t, err)
	cfg.Node = 3
	next, err := controller.New(cfg, replayed)
	require.NoError(t, err)
	c.apply(drain(t, next, 8, 1, 2))
	require.Equal(t, int32(1), c.state.Epoch)

	_, err = old.Register(2, 1, true) // the deposed controller decides on
	require.NoError(t, err)
	done := false
	c.waiting[1] = func(error) { done = true }
	c.apply(drain(t, old, 7, 1, 3))
	require.NotContains(t, c.state.Brokers, replica.NodeID(2), "the deposed controller's registration is refused")
	require.False(t, done, "another proposer's entry does not end this node's wait")
	again, err := controller.Replay(c.history)
	require.NoError(t, err)
	require.Equal(t, c.state, again, "the history replays to the state")

	_, err = next.Register(2, 1, true)
	require.NoError(t, err)
	c.apply(drain(t, next, c.nonce, 1, 4))
	require.True(t, done, "the proposer's own entry ends its wait")
	require.Contains(t, c.state.Brokers, replica.NodeID(2))
}

// A raft entry that does not decode as a proposal is reported and skipped,
// never half applied.
func TestBadProposalsAreSkipped(t *testing.T) {
	c := newTestControl(t)
	good, err := encodeProposal(1, 1, []controller.Record{&controller.ControllerRecord{Node: 1}})
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"record cut short":    good[:len(good)-1],
		"truncated length":    append(good[:2:2], 0x80),
		"length past the end": append(good[:2:2], 0x7f),
		"bad record":          append(good[:2:2], 2, 0xff, 0),
	} {
		_, _, _, err := decodeProposal(data)
		require.Error(t, err, name)
		c.apply(&pb.Entry{Term: new(uint64(1)), Index: new(uint64(1)), Data: data})
		require.Equal(t, int32(-1), c.state.Epoch, name)
		require.Empty(t, c.history, name)
	}
}
