package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// ReplicationControlManagerTest's vectors over several partitions: the
// topic "foo" of its election tests, replicas [1,2,3], [2,3,4], [0,2,1].

func createFoo(h *harness, unclean bool) {
	h.topic("foo", unclean, nodes(1, 2, 3), nodes(2, 3, 4), nodes(0, 2, 1))
}

// requireLeaders checks each partition of foo's leader and ISR.
func requireLeaders(t *testing.T, h *harness, leaders []replica.NodeID, isrs ...[]replica.NodeID) {
	t.Helper()
	for i, l := range leaders {
		p := h.part("foo", int32(i))
		require.Equal(t, l, p.Leader, "foo-%d's leader; ISR %v ELR %v", i, p.ISR, p.ELR)
		require.ElementsMatch(t, isrs[i], p.ISR, "foo-%d's ISR", i)
	}
}

// testFenceMultipleBrokers: 2 and 3 fenced together, each partition led
// by a live ISR member.
func TestFencingSeveralBrokersElectsAroundAllOfThem(t *testing.T) {
	h := newHarness(t, 1, 0, 1, 2, 3, 4)
	createFoo(h, false)
	h.crash(2, 3)
	requireLeaders(t, h, nodes(1, 4, 0), nodes(1), nodes(4), nodes(0, 1))
}

// testElectPreferredLeaders: a preferred election moves only partitions
// whose first replica is live and in the ISR; broker 1 is in controlled
// shutdown and 0 fenced at first, so neither is.
func TestPreferredElectionOfEachPartition(t *testing.T) {
	h := newHarness(t, 1, 2, 3, 4)
	_, err := h.register(0, true)
	require.NoError(t, err)
	h.start(1, true)
	require.NoError(t, h.c.Shutdown(1, h.epochs[1]))
	h.drain()
	createFoo(h, false)
	requireLeaders(t, h, nodes(2, 2, 2), nodes(2, 3), nodes(2, 3, 4), nodes(2))

	elect := func(p int32) error {
		err := h.c.ElectPreferred(TopicPartition{Topic: "foo", Partition: p})
		h.drain()
		return err
	}
	stored := len(h.store)
	require.ErrorIs(t, elect(0), replica.ErrPreferredLeaderNotAvailable)
	require.ErrorIs(t, elect(1), replica.ErrElectionNotNeeded)
	require.ErrorIs(t, elect(2), replica.ErrPreferredLeaderNotAvailable)
	require.ErrorIs(t, h.c.ElectPreferred(TopicPartition{Topic: "bar", Partition: 0}), replica.ErrUnknownTopicOrPartition)
	require.Len(t, h.store, stored, "no election, no record")

	h.start(1, true) // a new incarnation ends the controlled shutdown
	h.unfence(0)
	require.NoError(t, h.alterAt(TopicPartition{Topic: "foo", Partition: 0}, 1, 2, 3))
	resp := h.sent[len(h.sent)-1].(*replica.AlterPartitionResponse)
	require.Equal(t, replica.NodeID(2), resp.Leader)
	require.EqualValues(t, 0, resp.LeaderEpoch)
	require.EqualValues(t, 1, resp.PartitionEpoch)
	require.Equal(t, nodes(1, 2, 3), resp.ISR)
	require.NoError(t, h.alterAt(TopicPartition{Topic: "foo", Partition: 2}, 0, 2, 1))

	require.NoError(t, elect(0))
	require.ErrorIs(t, elect(1), replica.ErrElectionNotNeeded)
	require.NoError(t, elect(2))
	requireLeaders(t, h, nodes(1, 2, 0), nodes(1, 2, 3), nodes(2, 3, 4), nodes(0, 2, 1))
	for _, p := range []int32{0, 2} {
		require.EqualValues(t, 1, h.part("foo", p).LeaderEpoch, "foo-%d: only the leader changes", p)
	}
}

// testBalancePartitionLeaders: the automatic rebalance gives each
// partition back to its first replica once that one is live and in the
// ISR, and leaves the others.
func TestRebalanceMovesEachPartitionWhosePreferredReplicaIsInSync(t *testing.T) {
	h := newHarness(t, 1, 2, 3, 4)
	for _, b := range nodes(0, 1) {
		_, err := h.register(b, true)
		require.NoError(t, err)
	}
	createFoo(h, false)
	h.unfence(1)
	require.NoError(t, h.alterAt(TopicPartition{Topic: "foo", Partition: 0}, 1, 2, 3))
	require.NoError(t, h.c.Rebalance())
	h.drain()
	requireLeaders(t, h, nodes(1, 2, 2), nodes(1, 2, 3), nodes(2, 3, 4), nodes(2))

	h.unfence(0)
	require.NoError(t, h.alterAt(TopicPartition{Topic: "foo", Partition: 2}, 0, 2, 1))
	require.NoError(t, h.c.Rebalance())
	h.drain()
	requireLeaders(t, h, nodes(1, 2, 0), nodes(1, 2, 3), nodes(2, 3, 4), nodes(0, 2, 1))
}

// testMaybeTriggerUncleanLeaderElectionForLeaderlessPartitions, its foo
// of replicas [1,2,4], [1,3,4], [0,2,4]: every broker fenced, then 2 back. 2 is a replica of foo-0 and foo-2 but in
// neither's ISR or ELR: it leads them only uncleanly, where the topic
// allows it, at once if it did already ("static"), or when it is enabled
// ("dynamic_topic"). foo-1 has no live replica. Kafka's vector keeps 4,
// the last member, in the ISR (no ELR); here it is the ELR.
func TestUncleanElectionOfLeaderlessPartitionsOnlyWhereTheTopicAllowsIt(t *testing.T) {
	offline := nodes(replica.NoNode, replica.NoNode, replica.NoNode)
	for _, tc := range []struct {
		name               string
		static, setDynamic bool
	}{
		{"none", false, false},
		{"static", true, false},
		{"dynamic_topic", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, 0, 1, 2, 3, 4)
			h.topic("foo", tc.static, nodes(1, 2, 4), nodes(1, 3, 4), nodes(0, 2, 4))
			h.crash(0, 1, 2, 3, 4)
			requireLeaders(t, h, offline, nil, nil, nil)
			for p := range int32(3) {
				require.Equal(t, nodes(4), h.part("foo", p).ELR)
			}
			h.unfence(2)
			if tc.setDynamic {
				requireLeaders(t, h, offline, nil, nil, nil)
				require.NoError(t, h.c.SetUnclean("foo", true))
				h.drain()
			}
			if !tc.static && !tc.setDynamic {
				requireLeaders(t, h, offline, nil, nil, nil)
				require.Empty(t, h.unclean)
				return
			}
			requireLeaders(t, h, nodes(2, replica.NoNode, 2), nodes(2), nil, nodes(2))
			require.Equal(t, []TopicPartition{{Topic: "foo", Partition: 0}, {Topic: "foo", Partition: 2}}, h.unclean)
			for _, p := range []int32{0, 2} {
				require.True(t, h.part("foo", p).Recovering)
				require.Empty(t, h.part("foo", p).ELR, "an unclean election drops the ELR")
			}
		})
	}
}

// testAlterPartitionShouldRejectFencedBrokers and
// testAlterPartitionShouldRejectShuttingDownBrokers: a broker fenced or in
// controlled shutdown leaves the ISR without a new leader epoch, a leader
// may not add it back (INELIGIBLE_REPLICA), and may once it is back.
func TestAlterPartitionRefusesAnIneligibleReplicaUntilItIsBack(t *testing.T) {
	for _, tc := range []struct {
		name       string
		out, back  func(h *harness)
		sameEpochs bool
	}{
		{"fenced", func(h *harness) { h.crash(3) }, func(h *harness) { h.unfence(3) }, true},
		{"shutting down", func(h *harness) {
			require.NoError(h.t, h.c.Shutdown(3, h.epochs[3]))
			h.drain()
		}, func(h *harness) { h.start(3, true) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, 0, 1, 2, 3, 4)
			h.topic("foo", false, nodes(1, 2, 3, 4))
			tc.out(h)
			p := h.part("foo", 0)
			require.Equal(t, nodes(1, 2, 4), p.ISR)
			require.EqualValues(t, 0, p.LeaderEpoch)
			require.EqualValues(t, 1, p.PartitionEpoch)
			require.ErrorIs(t, h.alter("foo", 1, 2, 3, 4), replica.ErrIneligibleReplica)
			require.Equal(t, replica.ErrIneligibleReplica, h.sent[len(h.sent)-1].(*replica.AlterPartitionResponse).Err)
			tc.back(h)
			require.NoError(t, h.alter("foo", 1, 2, 3, 4))
			p = h.part("foo", 0)
			require.Equal(t, nodes(1, 2, 3, 4), p.ISR)
			require.EqualValues(t, 0, p.LeaderEpoch)
			require.EqualValues(t, 2, p.PartitionEpoch)
		})
	}
}

// testEligibleLeaderReplicas_EffectiveMinIsr: a topic's min.insync.replicas
// above its replication factor counts as the replication factor
// (ReplicationControlManager.getTopicEffectiveMinIsr: 5 on three replicas
// is 3). Strand's reassignment never shrinks the ISR below
// MinInsyncReplicas; under 5, a move of three replicas to three others
// would wait for an ISR of five that three replicas never reach. Counted
// as Kafka counts it, the move completes; a move to fewer replicas than
// MinInsyncReplicas still waits (TestReassignmentNeverShrinksTheISRBelowMinISR).
func TestReassignmentCountsMinISRAboveTheReplicationFactorAsIt(t *testing.T) {
	h := newHarness(t, 5, 0, 1, 2, 3, 4)
	h.topic("t", false, nodes(0, 1, 2))
	require.NoError(t, h.c.Reassign(TopicPartition{Topic: "t", Partition: 0}, nodes(2, 3, 4)))
	h.drain()
	require.ErrorIs(t, h.alter("t", 0, 1, 2, 3, 4), replica.ErrNewLeaderElected)
	p := h.part("t", 0)
	require.Equal(t, nodes(2, 3, 4), p.Replicas, "adding %v removing %v", p.Adding, p.Removing)
	require.Equal(t, nodes(2, 3, 4), p.ISR)
	require.Equal(t, replica.NodeID(2), p.Leader)
	require.Empty(t, p.ELR, "an ISR of every replica has no ELR")
}

// KIP-966's last known leader (PartitionChangeBuilder.canElectLastKnownLeader,
// testEligibleLeaderReplicas_ElectLastKnownLeader): the leader a partition
// had when it lost its last ISR member is remembered, and once the ISR
// and ELR are both empty (their members restarted uncleanly) it is
// elected, uncleanly (RECOVERING), as soon as it is live; not while it is
// fenced (KAFKA-19522, testEligibleLeaderReplicas_NotEligibleLastKnownLeader).
// Kafka does so whatever the topic's unclean.leader.election.enable says.
// Strand elects uncleanly only where the topic allows it (package doc: a
// deliberate choice, the safer one: an operator consents to losing
// acknowledged records); where it does, it prefers the last leader, as
// Kafka does, over the first live replica.
//
// Replicas [1,2,3,4] under MinInsyncReplicas 4 are fenced in id order,
// 4 leading last; each restarts uncleanly and leaves the ELR.
func TestLastKnownLeaderElectedOnlyUncleanly(t *testing.T) {
	offline := func(t *testing.T, back ...replica.NodeID) *harness {
		h := newHarness(t, 4, 1, 2, 3, 4)
		h.topic("t", false, nodes(1, 2, 3, 4))
		h.crash(1, 2, 3, 4)
		require.Equal(t, nodes(1, 2, 3, 4), h.part("t", 0).ELR)
		for _, b := range back {
			h.start(b, false)
		}
		p := h.part("t", 0)
		require.Equal(t, replica.NoNode, p.Leader, "ISR %v ELR %v", p.ISR, p.ELR)
		require.Empty(t, p.ISR)
		return h
	}
	t.Run("the topic does not allow unclean election: no leader", func(t *testing.T) {
		h := offline(t, 1, 2, 3, 4)
		require.Empty(t, h.part("t", 0).ELR)
		require.Empty(t, h.unclean, "Kafka elects 4 here")
	})
	t.Run("enabled: the last leader, live, leads uncleanly", func(t *testing.T) {
		h := offline(t, 1, 2, 3, 4)
		require.NoError(t, h.c.SetUnclean("t", true))
		h.drain()
		p := h.part("t", 0)
		require.Equal(t, replica.NodeID(4), p.Leader, "not 1, the first live replica")
		require.Equal(t, nodes(4), p.ISR)
		require.True(t, p.Recovering)
		require.Equal(t, []TopicPartition{{Topic: "t", Partition: 0}}, h.unclean)
		require.Equal(t, replica.NoNode, p.LastLeader, "forgotten once a leader is elected")
	})
	t.Run("enabled, the last leader fenced: the first live replica", func(t *testing.T) {
		h := offline(t, 1, 2, 3)
		require.NoError(t, h.c.SetUnclean("t", true))
		h.drain()
		require.Equal(t, replica.NodeID(1), h.part("t", 0).Leader)
	})
	t.Run("enabled, an ELR member left, though fenced: the first live replica", func(t *testing.T) {
		h := offline(t, 1, 4)
		require.Equal(t, nodes(2, 3), h.part("t", 0).ELR)
		require.NoError(t, h.c.SetUnclean("t", true))
		h.drain()
		require.Equal(t, replica.NodeID(1), h.part("t", 0).Leader, "the last leader only when the ISR and ELR are empty")
	})
}

// An AlterPartition whose ISR completes a reassignment that removes its
// leader makes the change and answers NEW_LEADER_ELECTED (KRaft's
// alterPartition since AlterPartition v2, testReassignPartitions,
// testIsrEnlargementCompletesReassignment): the asker no longer leads and
// must wait for the new state, which its response does not carry.
func TestAlterPartitionCompletingAMoveOffItsLeaderAnswersNewLeaderElected(t *testing.T) {
	h := newHarness(t, 1, 0, 1, 2, 3)
	h.topic("foo", false, nodes(3, 2, 1))
	require.NoError(t, h.c.Reassign(TopicPartition{Topic: "foo", Partition: 0}, nodes(0, 2, 1)))
	h.drain()
	err := h.alter("foo", 3, 0, 2, 1)
	require.ErrorIs(t, err, replica.ErrNewLeaderElected)
	resp := h.sent[len(h.sent)-1].(*replica.AlterPartitionResponse)
	require.Equal(t, replica.ErrNewLeaderElected, resp.Err)
	require.Equal(t, replica.NodeID(3), resp.To)
	p := h.part("foo", 0)
	require.Equal(t, nodes(0, 2, 1), p.Replicas, "the change is made")
	require.Equal(t, replica.NodeID(0), p.Leader)
	require.EqualValues(t, 1, p.LeaderEpoch)

	require.NoError(t, h.alter("foo", 0, 2), "the new leader's own changes answer as usual")
}

// testCreateTopicsISRInvariants: a new partition's ISR is its replicas
// that are live, neither fenced nor in controlled shutdown, led by the
// first of them; testManualPartitionAssignmentOnAllFencedBrokers: an
// assignment with a partition none of whose replicas is live is refused
// (INVALID_REPLICA_ASSIGNMENT) and creates nothing.
func TestCreateTopicISRIsTheLiveReplicas(t *testing.T) {
	h := newHarness(t, 1, 0)
	h.start(1, true)
	require.NoError(t, h.c.Shutdown(1, h.epochs[1]))
	_, err := h.register(2, true)
	require.NoError(t, err)
	h.drain()

	h.topic("foo", false, nodes(1, 0, 2))
	p := h.part("foo", 0)
	require.Equal(t, nodes(0), p.ISR)
	require.Equal(t, replica.NodeID(0), p.Leader)
	require.EqualValues(t, 0, p.LeaderEpoch)
	require.EqualValues(t, 0, p.PartitionEpoch)

	stored := len(h.store)
	err = h.c.CreateTopic("bar", [][]replica.NodeID{nodes(0), nodes(1, 2)}, TopicSpec{})
	require.ErrorIs(t, err, replica.ErrInvalidReplicaAssignment)
	require.ErrorContains(t, err, "partition 1")
	h.drain()
	require.Len(t, h.store, stored)
	require.Nil(t, h.c.State().Topics["bar"])
}

// ElectLeaders with ElectionType UNCLEAN (testElectUncleanLeaders_WithoutElr,
// here with the ELR, which holds 1 where Kafka's vector keeps it in the
// ISR): an operator's unclean election of one partition, whatever its
// topic allows. A partition with a leader needs none; one with no live
// replica gets none (ELIGIBLE_LEADERS_NOT_AVAILABLE); once 2 is back it
// leads foo-0 uncleanly, and foo-1, led, is left alone (no preferred
// election on the side).
func TestElectUncleanOfOnePartition(t *testing.T) {
	h := newHarness(t, 1, 0, 1, 2, 3, 4)
	createFoo(h, false)
	h.crash(2, 3)
	h.crash(1)
	requireLeaders(t, h, nodes(replica.NoNode, 4, 0), nil, nodes(4), nodes(0))
	require.Equal(t, nodes(1), h.part("foo", 0).ELR)

	elect := func(p int32) error {
		err := h.c.ElectUnclean(TopicPartition{Topic: "foo", Partition: p})
		h.drain()
		return err
	}
	stored := len(h.store)
	require.ErrorIs(t, elect(0), replica.ErrEligibleLeadersNotAvailable)
	require.ErrorIs(t, elect(1), replica.ErrElectionNotNeeded)
	require.ErrorIs(t, elect(2), replica.ErrElectionNotNeeded)
	require.ErrorIs(t, h.c.ElectUnclean(TopicPartition{Topic: "bar", Partition: 0}), replica.ErrUnknownTopicOrPartition)
	require.Len(t, h.store, stored, "no election, no record")

	h.unfence(2)
	require.NoError(t, h.alterAt(TopicPartition{Topic: "foo", Partition: 1}, 4, 2))
	require.NoError(t, elect(0))
	requireLeaders(t, h, nodes(2, 4, 0), nodes(2), nodes(4, 2), nodes(0))
	p := h.part("foo", 0)
	require.True(t, p.Recovering)
	require.Empty(t, p.ELR)
	require.Equal(t, []TopicPartition{{Topic: "foo", Partition: 0}}, h.unclean)
	require.False(t, h.c.State().Topics["foo"].Unclean, "the topic's configuration is not changed")
}
