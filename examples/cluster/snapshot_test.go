//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/examples/raftlog"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// A node killed while the controller goes on deciding (here: creating
// topics, each at least one raft entry) comes back to find the leader's
// raft log compacted past its own last entry: raft sends it the snapshot,
// the controller's state as records, and the node, having stored it as
// its log's start, ends with the same controller state as the others.
func TestRestartedNodeCatchesUpFromSnapshot(t *testing.T) {
	const every = 8
	s, cl := startCluster(t, func(s *supervisor) { s.args = append(s.args, "-snapshot-entries", fmt.Sprint(every)) })
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	victim := replica.NodeID(1)
	for victim == md.RaftLeader {
		victim++
	}
	require.NoError(t, s.signal(victim, syscall.SIGKILL))
	victimLast := storedLog(t, s, victim).LastIndex
	waitFor(t, 20*time.Second, fmt.Sprintf("node %d fenced", victim), func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		i := slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == victim })
		return md.Brokers[i].Fenced, fmt.Sprintf("%+v", md.Brokers)
	})

	// Enough changes that the leader keeps none of the entries the victim
	// lacks, even those it keeps in memory past a snapshot.
	topics := 0
	for {
		md, err := metadataFrom(s, cl)
		require.NoError(t, err)
		// Read while the leader runs: its file's frames up to the last
		// whole one.
		led := storedLog(t, s, md.RaftLeader)
		if led.SnapshotIndex > victimLast+raftlog.KeptEntries+every {
			require.Greater(t, led.FirstIndex, victimLast+1, "the leader's log file starts after the victim's last entry")
			break
		}
		require.Less(t, topics, 200, "the leader's log was never compacted past %d (snapshot at %d)", victimLast, led.SnapshotIndex)
		createTopicT(t, cl, topicRequest{Topic: fmt.Sprint("t", topics), Partitions: 1, ReplicationFactor: 2})
		topics++
	}

	out := filepath.Join(s.dir, fmt.Sprintf("node-%d.out", victim))
	before, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, s.startNode(victim))
	var leader, caughtUp *metadata
	waitFor(t, 30*time.Second, fmt.Sprintf("node %d with the leader's controller state", victim), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if caughtUp, err = cl.metadata(ctx, victim); err != nil {
			return false, err.Error()
		}
		if leader, err = cl.metadata(ctx, caughtUp.RaftLeader); err != nil {
			return false, err.Error()
		}
		i := slices.IndexFunc(caughtUp.Brokers, func(b brokerView) bool { return b.ID == victim })
		same := caughtUp.RaftApplied == leader.RaftApplied && caughtUp.ControllerEpoch == leader.ControllerEpoch &&
			slices.EqualFunc(caughtUp.Brokers, leader.Brokers, func(a, b brokerView) bool { return a == b }) &&
			fmt.Sprint(caughtUp.Partitions) == fmt.Sprint(leader.Partitions)
		return same && i >= 0 && !caughtUp.Brokers[i].Fenced,
			fmt.Sprintf("node %d: applied %d, %+v; leader %d: applied %d, %+v", victim, caughtUp.RaftApplied, caughtUp.Brokers,
				leader.Node, leader.RaftApplied, leader.Brokers)
	})
	created := slices.DeleteFunc(slices.Clone(caughtUp.Partitions), func(p partitionView) bool {
		return p.Topic == group.OffsetsTopic || p.Topic == log.TransactionStateTopic
	})
	require.Len(t, created, topics, "the topics created, besides the coordinators'")
	got := storedLog(t, s, victim)
	require.Greater(t, got.SnapshotIndex, victimLast+every, "node %d's log starts at a snapshot it was sent", victim)
	require.Equal(t, got.SnapshotIndex+1, got.FirstIndex)
	after, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(after[len(before):]), "restored snapshot", "node %d's raft restored the snapshot its leader sent", victim)
	t.Logf("node %d: last raft entry %d when killed; %d topics created; caught up from a snapshot at %d, applied %d",
		victim, victimLast, topics, got.SnapshotIndex, caughtUp.RaftApplied)
}

// storedLog is what a node's raft log directory holds.
func storedLog(t *testing.T, s *supervisor, node replica.NodeID) raftlog.Stored {
	t.Helper()
	st, err := raftlog.Inspect(filepath.Join(s.nodeDir(node), raftDir))
	require.NoError(t, err)
	return st
}
