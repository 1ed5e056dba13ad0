package controller

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/replica"
)

// failover replaces the active controller by a new one over the stored
// records, as when the node leading the application's store dies.
func (h *harness) failover() {
	h.t.Helper()
	h.drain()
	s, err := Replay(h.store)
	require.NoError(h.t, err)
	c, err := New(h.c.cfg, s)
	require.NoError(h.t, err)
	h.c = c
	h.drain()
}

// TC-15, reassignment, ORS {1,2,3} → TRS {4,5,6} as the ZooKeeper
// controller's comment tells it: replicas {4,5,6,1,2,3} with ISR {1,2,3},
// then ISR {1..6} as the leader adds the caught-up replicas, then leader 4,
// ISR {4,5,6}, replicas {4,5,6}. A controller failover between every step
// resumes from the records alone.
func TestTC15ReassignmentGrowsCatchesUpSwitchesShrinks(t *testing.T) {
	for _, failovers := range []bool{false, true} {
		t.Run(map[bool]string{false: "one controller", true: "failover between steps"}[failovers], func(t *testing.T) {
			h := newHarness(t, 2, 1, 2, 3, 4, 5, 6)
			step := func() {
				if failovers {
					h.failover()
				}
			}
			h.topic("t", false, nodes(1, 2, 3))
			tp := TopicPartition{Topic: "t", Partition: 0}
			target := nodes(4, 5, 6)
			require.NoError(t, h.c.Reassign(tp, target))
			h.drain()
			p := h.part("t", 0)
			require.Equal(t, nodes(4, 5, 6, 1, 2, 3), p.Replicas, "grow: the target first, then the replicas to remove")
			require.Equal(t, nodes(1, 2, 3), p.ISR, "the controller never adds to the ISR")
			require.Equal(t, nodes(4, 5, 6), p.Adding)
			require.Equal(t, nodes(1, 2, 3), p.Removing)
			require.Equal(t, replica.NodeID(1), p.Leader)
			status, err := h.c.Verify(tp, target)
			require.NoError(t, err)
			require.Equal(t, ReassignmentInProgress, status)
			step()

			require.NoError(t, h.alter("t", 1, 2, 3, 4))
			require.NoError(t, h.alter("t", 1, 2, 3, 4, 5))
			require.Equal(t, nodes(4, 5, 6, 1, 2, 3), h.part("t", 0).Replicas, "6 is still catching up")
			step()
			epoch := h.part("t", 0).LeaderEpoch
			require.ErrorIs(t, h.alter("t", 1, 2, 3, 4, 5, 6), replica.ErrNewLeaderElected, "the lead moves off 1")
			p = h.part("t", 0)
			require.Equal(t, nodes(4, 5, 6), p.Replicas)
			require.Equal(t, nodes(4, 5, 6), p.ISR)
			require.Empty(t, p.Adding)
			require.Empty(t, p.Removing)
			require.Equal(t, replica.NodeID(4), p.Leader, "the first target replica in the ISR")
			require.Equal(t, epoch+1, p.LeaderEpoch)
			step()
			status, err = h.c.Verify(tp, target)
			require.NoError(t, err)
			require.Equal(t, ReassignmentComplete, status)
			status, err = h.c.Verify(tp, nodes(1, 2, 3))
			require.NoError(t, err)
			require.Equal(t, ReassignmentDiffers, status)

			removed := map[replica.NodeID]bool{}
			for _, m := range h.sent {
				if l, ok := m.(*replica.LeaderAndISR); ok && l.PartitionEpoch == p.PartitionEpoch {
					removed[l.To] = true
				}
			}
			for _, n := range nodes(1, 2, 3, 4, 5, 6) {
				require.True(t, removed[n], "node %d hears the final state, removed ones included", n)
			}
		})
	}
}

// Cancelling mid-way returns to the original replicas in a new leader
// epoch (KAFKA-13972: the dropped replica must see an epoch it cannot
// ignore), and verify then says the replicas differ from the target.
func TestTC15CancelReassignment(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3, 4)
	h.topic("t", false, nodes(1, 2, 3))
	tp := TopicPartition{Topic: "t", Partition: 0}
	require.ErrorIs(t, h.c.CancelReassignment(tp), replica.ErrNoReassignmentInProgress)
	require.NoError(t, h.c.Reassign(tp, nodes(4, 2, 3)))
	h.drain()
	epoch := h.part("t", 0).LeaderEpoch
	require.NoError(t, h.c.CancelReassignment(tp))
	h.drain()
	p := h.part("t", 0)
	require.Equal(t, nodes(2, 3, 1), p.Replicas,
		"KRaft's PartitionReassignmentRevert keeps the merged order without the added replicas")
	require.Equal(t, nodes(1, 2, 3), p.ISR)
	require.Equal(t, replica.NodeID(1), p.Leader, "the leader stays")
	require.Empty(t, p.Adding)
	require.Empty(t, p.Removing)
	require.Equal(t, epoch+1, p.LeaderEpoch, "a cancel takes a new leader epoch")
	last := h.sent[len(h.sent)-1].(*replica.LeaderAndISR)
	require.Equal(t, replica.NodeID(4), last.To, "the dropped replica hears it")
	require.Equal(t, p.LeaderEpoch, last.LeaderEpoch)
	status, err := h.c.Verify(tp, nodes(4, 2, 3))
	require.NoError(t, err)
	require.Equal(t, ReassignmentDiffers, status)
}

// Cancelling when only replicas being added are in sync: the original
// replicas hold none of the ISR, so the revert must elect outside it
// (KRaft's PartitionReassignmentRevert, its testIsrSpecialCase). Kafka
// refuses the cancel unless the topic allows unclean election; Strand
// also takes a clean leader from the ELR (KIP-966) where one is live.
func TestCancellingWhenOnlyAddedReplicasAreInSync(t *testing.T) {
	tp := TopicPartition{Topic: "t", Partition: 0}
	// {1,2,3} -> {4,5,6}: 4 and 5 catch up, then 1, 2 and 3 die, leaving
	// ISR {4,5}; 1 comes back, out of the ISR.
	setup := func(t *testing.T, unclean bool) *harness {
		h := newHarness(t, 1, 1, 2, 3, 4, 5, 6)
		h.topic("t", unclean, nodes(1, 2, 3))
		require.NoError(t, h.c.Reassign(tp, nodes(4, 5, 6)))
		h.drain()
		require.NoError(t, h.alter("t", 1, 2, 3, 4, 5))
		for _, n := range nodes(1, 2, 3) {
			h.crash(n)
		}
		h.start(1, true)
		p := h.part("t", 0)
		require.Equal(t, nodes(4, 5), p.ISR)
		require.Equal(t, nodes(4, 5, 6), p.Adding)
		return h
	}
	t.Run("unclean election off: refused, nothing changes", func(t *testing.T) {
		h := setup(t, false)
		before := *h.part("t", 0)
		err := h.c.CancelReassignment(tp)
		require.ErrorIs(t, err, replica.ErrInvalidReplicaAssignment)
		require.ErrorContains(t, err, "unclean")
		h.drain()
		require.Equal(t, before, *h.part("t", 0))
	})
	t.Run("unclean election on: the first original replica leads, recovering", func(t *testing.T) {
		h := setup(t, true)
		epoch := h.part("t", 0).LeaderEpoch
		require.NoError(t, h.c.CancelReassignment(tp))
		h.drain()
		p := h.part("t", 0)
		require.Equal(t, nodes(1, 2, 3), p.Replicas)
		require.Empty(t, p.Adding)
		require.Empty(t, p.Removing)
		require.Equal(t, replica.NodeID(1), p.Leader)
		require.Equal(t, nodes(1), p.ISR)
		require.True(t, p.Recovering, "KIP-704: a leader elected outside the ISR recovers first")
		require.Equal(t, []TopicPartition{tp}, h.unclean, "reported as a possible loss")
		require.Equal(t, epoch+1, p.LeaderEpoch)
	})
	t.Run("an original replica in the ELR leads cleanly", func(t *testing.T) {
		// min ISR 2, {1,2} -> {3,4}: 3 catches up, 2 dies (ISR {1,3}),
		// then 1 dies, which leaves it in the ELR, and restarts cleanly.
		h := newHarness(t, 2, 1, 2, 3, 4)
		h.topic("t", false, nodes(1, 2))
		require.NoError(t, h.c.Reassign(tp, nodes(3, 4)))
		h.drain()
		require.NoError(t, h.alter("t", 1, 2, 3))
		h.crash(2)
		h.crash(1)
		h.start(1, true)
		p := h.part("t", 0)
		require.Equal(t, nodes(3), p.ISR)
		require.Equal(t, nodes(1), p.ELR)
		require.NoError(t, h.c.CancelReassignment(tp))
		h.drain()
		p = h.part("t", 0)
		require.Equal(t, nodes(1, 2), p.Replicas)
		require.Equal(t, replica.NodeID(1), p.Leader)
		require.Equal(t, nodes(1), p.ISR)
		require.False(t, p.Recovering, "an ELR member has every committed record")
		require.Empty(t, h.unclean)
	})
}

// A move whose leader is removed completes in the AlterPartition that
// brings the last target replica into the ISR, and leadership moves.
func TestReassignmentMovesLeadershipOffARemovedLeader(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3, 4)
	h.topic("t", false, nodes(1, 2, 3))
	require.NoError(t, h.c.Reassign(TopicPartition{Topic: "t", Partition: 0}, nodes(4, 2, 3)))
	h.drain()
	require.ErrorIs(t, h.alter("t", 1, 2, 3, 4), replica.ErrNewLeaderElected)
	p := h.part("t", 0)
	require.Equal(t, nodes(4, 2, 3), p.Replicas)
	require.Equal(t, nodes(2, 3, 4), p.ISR)
	require.Equal(t, replica.NodeID(4), p.Leader)
}

// The shrink never leaves the ISR below MinInsyncReplicas (Vanlightly
// §6.7): a move from {1,2,3} to {3} under minISR 2 waits.
func TestReassignmentNeverShrinksTheISRBelowMinISR(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	tp := TopicPartition{Topic: "t", Partition: 0}
	require.NoError(t, h.c.Reassign(tp, nodes(3)))
	h.drain()
	p := h.part("t", 0)
	require.Equal(t, nodes(3, 1, 2), p.Replicas)
	require.Equal(t, nodes(1, 2), p.Removing)
	require.Equal(t, nodes(1, 2, 3), p.ISR, "the shrink waits")
}

func TestReassignRefusesBadTargets(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	tp := TopicPartition{Topic: "t", Partition: 0}
	for name, target := range map[string][]replica.NodeID{
		"empty": nil, "duplicate": nodes(1, 1, 2), "unknown broker": nodes(1, 2, 9),
	} {
		require.ErrorIs(t, h.c.Reassign(tp, target), replica.ErrInvalidReplicaAssignment, name)
	}
	require.ErrorIs(t, h.c.Reassign(TopicPartition{Topic: "u", Partition: 0}, nodes(1)), replica.ErrUnknownTopicOrPartition)
	require.False(t, h.c.HasReady(), "refusals change nothing")
}

// The reassignment demo of kafka-reassign-partitions: the current
// assignment, a plan generated by assign onto brokers 4, 5, 6, execute,
// the leaders add the new replicas as they catch up, verify.
func TestReassignmentFileGenerateExecuteVerify(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3, 4, 5, 6)
	h.topic("t", false, nodes(1, 2, 3), nodes(2, 3, 1), nodes(3, 1, 2))
	current := h.c.Assignment("t")
	require.Len(t, current.Partitions, 3)
	require.Equal(t, []int32{2, 3, 1}, current.Partitions[1].Replicas)
	plan, err := assign.GenerateReassignment(current, assign.TopicsToMove{Version: 1, Topics: []assign.TopicName{{Topic: "t"}}},
		[]assign.Broker{{ID: 4}, {ID: 5}, {ID: 6}}, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.NoError(t, h.c.Execute(plan))
	h.drain()
	statuses, err := h.c.VerifyAll(plan)
	require.NoError(t, err)
	for _, st := range statuses {
		require.Equal(t, ReassignmentInProgress, st.Status, "%v", st.TopicPartition)
	}
	for i := range 3 {
		p := h.part("t", int32(i))
		err := h.c.AlterPartition(&replica.AlterPartition{
			Header:      replica.Header{From: p.Leader, Topic: "t", Partition: int32(i)},
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: isrOf(append([]replica.NodeID{p.Leader}, minus(p.Replicas, nodes(p.Leader))...)...),
		})
		h.drain()
		h.requireAltered(TopicPartition{Topic: "t", Partition: int32(i)}, p.Leader, err)
	}
	statuses, err = h.c.VerifyAll(plan)
	require.NoError(t, err)
	for i, st := range statuses {
		require.Equal(t, ReassignmentComplete, st.Status, "%v", st.TopicPartition)
		require.Equal(t, plan.Partitions[i].Replicas, h.c.Assignment("t").Partitions[i].Replicas)
	}
}

// A wrong reassignment file is refused whole, with the entry named, and
// changes nothing.
func TestReassignmentFileRefusesBadInput(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3), nodes(2, 3, 1))
	good := assign.PartitionReplicas{Topic: "t", Partition: 0, Replicas: []int32{3, 2, 1}}
	for _, tc := range []struct {
		name string
		bad  assign.PartitionReplicas
		ver  int
		want error
	}{
		{"unknown broker", assign.PartitionReplicas{Topic: "t", Partition: 1, Replicas: []int32{1, 9}}, 1, replica.ErrInvalidReplicaAssignment},
		{"duplicate broker", assign.PartitionReplicas{Topic: "t", Partition: 1, Replicas: []int32{1, 1}}, 1, replica.ErrInvalidReplicaAssignment},
		{"empty replicas", assign.PartitionReplicas{Topic: "t", Partition: 1}, 1, replica.ErrInvalidReplicaAssignment},
		{"partition named twice", good, 1, replica.ErrInvalidReplicaAssignment},
		{"unknown partition", assign.PartitionReplicas{Topic: "t", Partition: 2, Replicas: []int32{1}}, 1, replica.ErrUnknownTopicOrPartition},
		{"log dirs do not match", assign.PartitionReplicas{Topic: "t", Partition: 1, Replicas: []int32{1}, LogDirs: []string{"any", "any"}}, 1, replica.ErrInvalidReplicaAssignment},
		{"wrong version", assign.PartitionReplicas{Topic: "t", Partition: 1, Replicas: []int32{1}}, 2, replica.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := assign.Reassignment{Version: tc.ver, Partitions: []assign.PartitionReplicas{good, tc.bad}}
			err := h.c.Execute(file)
			require.ErrorIs(t, err, tc.want)
			if tc.ver == 1 {
				require.ErrorContains(t, err, "partitions[1]", "the error names the entry")
			}
			require.False(t, h.c.HasReady(), "nothing changed, not even the good entry")
			_, err = h.c.VerifyAll(file)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// TC-15, remove then re-add the same replica (Vanlightly §6.5.4): the
// re-added replica comes back as Adding, outside the ISR, whatever it held
// before; only its leader's AlterPartition can bring it back in.
func TestTC15RemovedThenReaddedReplicaDoesNotReenterTheISR(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	tp := TopicPartition{Topic: "t", Partition: 0}
	require.NoError(t, h.c.Reassign(tp, nodes(1, 2)))
	require.NoError(t, h.c.Reassign(tp, nodes(1, 2, 3)))
	h.drain()
	p := h.part("t", 0)
	require.Equal(t, nodes(1, 2, 3), p.Replicas)
	require.Equal(t, nodes(1, 2), p.ISR)
	require.Equal(t, nodes(3), p.Adding)
	require.NoError(t, h.alter("t", 1, 2, 3))
	require.Empty(t, h.part("t", 0).Adding, "the leader's ISR change completes it")
}
