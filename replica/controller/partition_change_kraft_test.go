package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// The test vectors of Kafka's KRaft controller tests
// (metadata/src/test/java/org/apache/kafka/controller/
// PartitionChangeBuilderTest and ReplicationControlManagerTest) that
// Strand's model has: no log directories, no ZooKeeper, no metadata
// version older than KIP-966's ELR. Kafka's tests build a partition's
// state directly and hand PartitionChangeBuilder a set of acceptable
// leaders; here the state comes from the events that lead to it (a
// fenced broker is out of every ISR, as in a running KRaft controller),
// so a vector whose state only a hand-built registration has is replayed
// from the nearest state events reach, and its comment says so.

// vector is one test vector: on a topic "t" of one partition, setup
// brings it to the state the vector starts from and event makes the
// change the vector checks.
type vector struct {
	name     string
	kafka    string // the Kafka test method the vector comes from
	minISR   int
	unclean  bool
	replicas []replica.NodeID
	setup    func(h *harness)
	event    func(h *harness) error
	want     outcome
}

// outcome is the partition after a vector's event.
type outcome struct {
	err      error
	leader   replica.NodeID
	isr, elr []replica.NodeID
	// leaderEpochs is how many new leader epochs the event takes.
	leaderEpochs int32
	// recovering: the leader recovers from an unclean election (KIP-704).
	recovering bool
	// uncleanNow: the event elected a leader uncleanly, reported in
	// Ready.Unclean.
	uncleanNow bool
	// replicas and adding, when replicas is set: the assignment after a
	// reassignment's step.
	replicas, adding []replica.NodeID
	// noRecord: the event changes the partition in nothing and writes no
	// record of it (a topic's configuration may change).
	noRecord bool
}

func (v vector) run(t *testing.T) {
	t.Helper()
	h := newHarness(t, v.minISR, 0, 1, 2, 3, 4)
	h.topic("t", v.unclean, v.replicas)
	if v.setup != nil {
		v.setup(h)
	}
	before := *h.part("t", 0)
	stored, unclean := len(h.store), len(h.unclean)
	err := v.event(h)
	h.drain()
	if v.want.err != nil {
		require.ErrorIs(t, err, v.want.err)
	} else {
		require.NoError(t, err)
	}
	p := h.part("t", 0)
	require.Equal(t, v.want.leader, p.Leader, "leader; ISR %v ELR %v", p.ISR, p.ELR)
	require.ElementsMatch(t, v.want.isr, p.ISR, "ISR")
	require.ElementsMatch(t, v.want.elr, p.ELR, "ELR")
	require.Equal(t, before.LeaderEpoch+v.want.leaderEpochs, p.LeaderEpoch, "leader epoch")
	require.Equal(t, v.want.recovering, p.Recovering, "recovering")
	require.Equal(t, v.want.uncleanNow, len(h.unclean) > unclean, "reported unclean")
	if v.want.replicas != nil {
		require.Equal(t, v.want.replicas, p.Replicas, "replicas")
		require.Equal(t, v.want.adding, p.Adding, "adding")
	}
	if v.want.noRecord {
		for _, r := range h.store[stored:] {
			_, isPartition := r.(*PartitionRecord)
			require.False(t, isPartition, "no change, no partition record: %+v", r)
		}
		require.Equal(t, before, *p)
	}
}

func runVectors(t *testing.T, vs []vector) {
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			t.Logf("Kafka's %s", v.kafka)
			v.run(t)
		})
	}
}

// fooLedBy1 brings replicas [2,1,3] to PartitionChangeBuilderTest's FOO:
// leader 1 (not the preferred 2), every replica in the ISR.
func fooLedBy1(h *harness) {
	h.crash(2)
	h.start(2, true)
	require.NoError(h.t, h.alter("t", 1, 3, 2))
	require.Equal(h.t, replica.NodeID(1), h.part("t", 0).Leader)
}

// bazLedBy3 brings replicas [2,1,3] to PartitionChangeBuilderTest's BAZ:
// leader 3, ISR [3,1], the preferred replica 2 live but out of the ISR.
func bazLedBy3(h *harness) {
	h.crash(2)
	h.crash(1)
	h.start(1, true)
	h.start(2, true)
	require.NoError(h.t, h.alter("t", 3, 1))
	require.Equal(h.t, replica.NodeID(3), h.part("t", 0).Leader)
}

// A leader that is still valid (in the ISR, live) stays, in its leader
// epoch: an ISR change alone, either way, takes a new partition epoch
// and no new leader epoch (KAFKA-15021, the rule since metadata version
// 3.6). A leader leaving the ISR hands over to the first live ISR member
// in assignment order, in a new leader epoch.
func TestPartitionChangeKeepsAValidLeaderElseTheFirstLiveISRMember(t *testing.T) {
	runVectors(t, []vector{
		{
			name: "another ISR member fenced: the leader stays", kafka: "testElectLeader (FOO, ONLINE), testNoChange",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { h.crash(3); return nil },
			want:  outcome{leader: 1, isr: nodes(1, 2)},
		},
		{
			name: "another ISR member fenced, unclean topic: the leader stays", kafka: "testElectLeader (FOO, UNCLEAN)",
			minISR: 1, unclean: true, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { h.crash(3); return nil },
			want:  outcome{leader: 1, isr: nodes(1, 2)},
		},
		{
			name: "enabling unclean election with a leader changes nothing", kafka: "testNoChange (FOO, UNCLEAN)",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { return h.c.SetUnclean("t", true) },
			want:  outcome{leader: 1, isr: nodes(1, 3, 2), noRecord: true},
		},
		{
			name: "the leader shrinks the ISR: no new leader epoch", kafka: "testIsrChangeDoesntBumpLeaderEpoch, testNoLeaderEpochBumpOnIsrShrink",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { return h.alter("t", 2, 1) },
			want:  outcome{leader: 1, isr: nodes(2, 1)},
		},
		{
			name: "the leader grows the ISR: no new leader epoch", kafka: "testNoLeaderEpochBumpOnIsrExpansion",
			minISR: 1, replicas: nodes(2, 1, 3),
			setup: func(h *harness) { fooLedBy1(h); require.NoError(h.t, h.alter("t", 2, 1)) },
			event: func(h *harness) error { return h.alter("t", 2, 1, 3) },
			want:  outcome{leader: 1, isr: nodes(2, 1, 3)},
		},
		{
			name: "the leader proposes the ISR it has: no record", kafka: "testNoLeaderEpochBumpIfNothingChanged, testChangeRecordIsNoOp",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { return h.alter("t", 1, 3, 2) },
			want:  outcome{leader: 1, isr: nodes(1, 3, 2), noRecord: true},
		},
		{
			name: "the leader fenced: the first live ISR member in assignment order leads", kafka: "testIsrChangeAndLeaderChange",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { h.crash(1); return nil },
			want:  outcome{leader: 2, isr: nodes(3, 2), leaderEpochs: 1},
		},
		{
			name: "a preferred election makes the first replica leader", kafka: "testElectLeader (FOO, PREFERRED)",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error { return h.c.ElectPreferred(TopicPartition{Topic: "t", Partition: 0}) },
			want:  outcome{leader: 2, isr: nodes(1, 3, 2), leaderEpochs: 1},
		},
		{
			name: "the preferred replica out of the ISR: the leader stays", kafka: "testElectLeader (BAZ, PREFERRED), testNoChange (BAZ)",
			minISR: 1, replicas: nodes(2, 1, 3), setup: bazLedBy3,
			event: func(h *harness) error { return h.c.ElectPreferred(TopicPartition{Topic: "t", Partition: 0}) },
			want:  outcome{err: replica.ErrPreferredLeaderNotAvailable, leader: 3, isr: nodes(3, 1), noRecord: true},
		},
		{
			name: "a live replica out of the ISR does not replace a valid leader, even uncleanly", kafka: "testElectLeader (BAZ, ONLINE and UNCLEAN)",
			minISR: 1, replicas: nodes(2, 1, 3), setup: bazLedBy3,
			event: func(h *harness) error { return h.c.SetUnclean("t", true) },
			want:  outcome{leader: 3, isr: nodes(3, 1)},
		},
		{
			name: "a controlled shutdown hands the lead over and leaves the ISR", kafka: "ReplicationControlManagerTest.testProcessBrokerHeartbeatInControlledShutdown",
			minISR: 1, replicas: nodes(0, 1, 2),
			event: func(h *harness) error { return h.c.Shutdown(0, h.epochs[0]) },
			want:  outcome{leader: 1, isr: nodes(1, 2), leaderEpochs: 1},
		},
	})
}

// offlineWithELR brings replicas [2,1,3] (MinInsyncReplicas 2) to
// PartitionChangeBuilderTest's OFFLINE_WITH_ELR: no leader, an empty ISR,
// the fenced 2 and 3 eligible (ELR), 1 live but out of sync. Kafka's
// vector has 2 as its last known leader rather than in the ELR; the
// election is the same.
func offlineWithELR(h *harness) {
	require.NoError(h.t, h.alter("t", 2, 3))
	h.crash(2)
	h.crash(3)
}

// With no live member of the ISR, a leader comes from the ELR (KIP-966),
// cleanly, and the ISR becomes it; with neither, and only where the topic
// allows it, the first live replica in assignment order leads uncleanly:
// the ISR becomes it alone, the ELR is dropped, and it recovers (KIP-704)
// until its first ISR change. A preferred election is never unclean.
func TestPartitionChangeElectsFromTheELRThenUncleanlyWhereAllowed(t *testing.T) {
	runVectors(t, []vector{
		{
			name: "the ISR's last member fenced, no ELR member live: no leader", kafka: "testElectLeader (FOO, ISR [3], ONLINE)",
			minISR: 2, replicas: nodes(2, 1, 3), setup: func(h *harness) { require.NoError(h.t, h.alter("t", 2, 3)); h.crash(2) },
			event: func(h *harness) error { h.crash(3); return nil },
			want:  outcome{leader: replica.NoNode, elr: nodes(2, 3), leaderEpochs: 1},
		},
		{
			name: "the same where the topic allows unclean election: the first live replica, recovering", kafka: "testElectLeader (FOO, ISR [3], UNCLEAN), testUncleanLeaderElection, testUncleanSetsLeaderRecoveringState",
			minISR: 2, unclean: true, replicas: nodes(2, 1, 3), setup: func(h *harness) { require.NoError(h.t, h.alter("t", 2, 3)); h.crash(2) },
			event: func(h *harness) error { h.crash(3); return nil },
			want:  outcome{leader: 1, isr: nodes(1), leaderEpochs: 1, recovering: true, uncleanNow: true},
		},
		{
			name: "enabling unclean election elects the offline partition", kafka: "testUncleanLeaderElection (OFFLINE_WITH_ELR), ReplicationControlManagerTest.testMaybeTriggerUncleanLeaderElectionForLeaderlessPartitions (dynamic_topic)",
			minISR: 2, replicas: nodes(2, 1, 3), setup: offlineWithELR,
			event: func(h *harness) error { return h.c.SetUnclean("t", true) },
			want:  outcome{leader: 1, isr: nodes(1), leaderEpochs: 1, recovering: true, uncleanNow: true},
		},
		{
			name: "an ELR member back leads cleanly", kafka: "testEligibleLeaderReplicas_ElrCanBeElected, OFFLINE_WITH_ELR",
			minISR: 2, replicas: nodes(2, 1, 3), setup: offlineWithELR,
			event: func(h *harness) error { h.unfence(3); return nil },
			want:  outcome{leader: 3, isr: nodes(3), elr: nodes(2), leaderEpochs: 1},
		},
		{
			name: "a preferred election of an offline partition is not unclean", kafka: "ReplicationControlManagerTest.testPreferredElectionDoesNotTriggerUncleanElection",
			minISR: 2, replicas: nodes(2, 1, 3), setup: offlineWithELR,
			event: func(h *harness) error { return h.c.ElectPreferred(TopicPartition{Topic: "t", Partition: 0}) },
			want:  outcome{err: replica.ErrPreferredLeaderNotAvailable, leader: replica.NoNode, elr: nodes(2, 3), noRecord: true},
		},
		{
			name: "a recovering leader back from the ELR is still recovering", kafka: "testChangeInLeadershipDoesNotChangeRecoveryState",
			minISR: 2, unclean: true, replicas: nodes(2, 1, 3), setup: offlineWithELR,
			event: func(h *harness) error {
				h.crash(1)
				if h.part("t", 0).Leader != replica.NoNode || !h.part("t", 0).Recovering {
					h.t.Fatalf("offline, still recovering: %+v", h.part("t", 0))
				}
				h.unfence(1)
				return nil
			},
			want: outcome{leader: 1, isr: nodes(1), leaderEpochs: 2, recovering: true},
		},
		{
			name: "an ISR member added by a reassignment leads cleanly, the topic unclean or not", kafka: "testElectLeader (FOO, ISR [4], replicas [2,1,3,4], UNCLEAN)",
			minISR: 1, unclean: true, replicas: nodes(2, 1, 3),
			setup: func(h *harness) {
				require.NoError(h.t, h.c.Reassign(TopicPartition{Topic: "t", Partition: 0}, nodes(2, 1, 3, 4)))
				h.drain()
				require.NoError(h.t, h.alter("t", 2, 1, 3, 4))
			},
			event: func(h *harness) error { h.crash(1, 2, 3); return nil },
			want:  outcome{leader: 4, isr: nodes(4), leaderEpochs: 2},
		},
	})
}

// The ELR (KIP-966): while the ISR is below MinInsyncReplicas, the
// replicas that leave it stay eligible to lead; an ISR back at
// MinInsyncReplicas drops the ELR; a replica that restarts without a
// clean shutdown leaves it (it may have lost acknowledged records); an
// ELR member elected becomes the ISR. Kafka's replicas [1,2,3,4],
// MinInsyncReplicas 3, unless the vector says otherwise.
func TestPartitionChangeKeepsTheELR(t *testing.T) {
	uncleanRestart := func(bs ...replica.NodeID) func(h *harness) {
		return func(h *harness) {
			for _, b := range bs {
				h.start(b, false)
			}
		}
	}
	shrinkTo1 := func(h *harness) { require.NoError(h.t, h.alter("t", 1)) }
	runVectors(t, []vector{
		{
			name: "an ISR shrink below MinInsyncReplicas keeps the leavers eligible", kafka: "testEligibleLeaderReplicas_IsrShrinkBelowMinISR",
			minISR: 3, replicas: nodes(1, 2, 3, 4),
			event: func(h *harness) error { return h.alter("t", 1, 2) },
			want:  outcome{leader: 1, isr: nodes(1, 2), elr: nodes(3, 4)},
		},
		{
			name: "an ISR back at MinInsyncReplicas drops the ELR", kafka: "testEligibleLeaderReplicas_IsrExpandAboveMinISR",
			minISR: 3, replicas: nodes(1, 2, 3, 4),
			setup: func(h *harness) { require.NoError(h.t, h.alter("t", 1, 2)); uncleanRestart(4)(h) },
			event: func(h *harness) error { return h.alter("t", 1, 2, 3) },
			want:  outcome{leader: 1, isr: nodes(1, 2, 3)},
		},
		{
			name: "an ISR growing by a replica outside the ELR keeps the ELR", kafka: "testEligibleLeaderReplicas_IsrAddNewMemberNotInELR",
			minISR: 3, replicas: nodes(1, 2, 3, 4),
			setup: func(h *harness) { shrinkTo1(h); uncleanRestart(2, 4)(h) },
			event: func(h *harness) error { return h.alter("t", 1, 4) },
			want:  outcome{leader: 1, isr: nodes(1, 4), elr: nodes(3)},
		},
		{
			name: "an unclean restart leaves the ELR", kafka: "testEligibleLeaderReplicas_RemoveUncleanShutdownReplicasFromElr",
			minISR: 3, replicas: nodes(1, 2, 3, 4),
			setup: func(h *harness) { shrinkTo1(h); uncleanRestart(4)(h) },
			event: func(h *harness) error { h.start(3, false); return nil },
			want:  outcome{leader: 1, isr: nodes(1), elr: nodes(2)},
		},
		{
			name: "the last ISR member fenced: an ELR member leads and is the ISR", kafka: "testEligibleLeaderReplicas_ElrCanBeElected",
			minISR: 3, replicas: nodes(1, 2, 3, 4),
			setup: func(h *harness) { shrinkTo1(h); uncleanRestart(2, 4)(h) },
			event: func(h *harness) error { h.crash(1); return nil },
			want:  outcome{leader: 3, isr: nodes(3), elr: nodes(1), leaderEpochs: 1},
		},
		{
			// Kafka's vector takes the ISR from four to none in one
			// change; fenced one at a time, as a running controller
			// fences them, every one stays eligible only while the ISR is
			// below MinInsyncReplicas from the first, here at 4.
			name: "the ISR can shrink to empty, every member eligible", kafka: "testEligibleLeaderReplicas_IsrCanShrinkToZero",
			minISR: 4, replicas: nodes(1, 2, 3, 4),
			event: func(h *harness) error { h.crash(1, 2, 3, 4); return nil },
			want:  outcome{leader: replica.NoNode, elr: nodes(1, 2, 3, 4), leaderEpochs: 4},
		},
		{
			name: "an ELR member fenced is not elected", kafka: "testEligibleLeaderReplicas_ElectLastKnownLeaderShouldFail",
			minISR: 3, replicas: nodes(1, 2, 3, 4),
			setup: func(h *harness) { shrinkTo1(h); uncleanRestart(2, 4)(h); h.crash(3) },
			event: func(h *harness) error { h.crash(1); return nil },
			want:  outcome{leader: replica.NoNode, elr: nodes(1, 3), leaderEpochs: 1},
		},
		{
			name: "an ISR shrink to the leader keeps the others eligible", kafka: "ReplicationControlManagerTest.testEligibleLeaderReplicas_ShrinkAndExpandIsr",
			minISR: 2, replicas: nodes(0, 1, 2),
			event: func(h *harness) error { return h.alter("t", 0) },
			want:  outcome{leader: 0, isr: nodes(0), elr: nodes(1, 2)},
		},
		{
			name: "and its growth back to MinInsyncReplicas drops them", kafka: "ReplicationControlManagerTest.testEligibleLeaderReplicas_ShrinkAndExpandIsr",
			minISR: 2, replicas: nodes(0, 1, 2),
			setup: func(h *harness) { require.NoError(h.t, h.alter("t", 0)) },
			event: func(h *harness) error { return h.alter("t", 0, 1) },
			want:  outcome{leader: 0, isr: nodes(0, 1)},
		},
	})
}

// ReplicationControlManagerTest's ELR tests fence brokers as its
// controller does, one after another in broker id order: a broker that
// leaves while the ISR is still at MinInsyncReplicas is not eligible,
// unfencing adds nobody to the ISR or ELR, and an ELR member is elected
// only once the ISR is empty. Replicas [0,1,2,3], MinInsyncReplicas 3.
func TestPartitionChangeELRAsBrokersAreFenced(t *testing.T) {
	fence123 := func(h *harness) {
		h.crash(1, 2, 3)
		p := h.part("t", 0)
		require.ElementsMatch(h.t, nodes(2, 3), p.ELR, "1 left while the ISR was at MinInsyncReplicas")
		require.Equal(h.t, nodes(0), p.ISR)
	}
	runVectors(t, []vector{
		{
			name: "fencing 2 then 3: only 3 is eligible", kafka: "testEligibleLeaderReplicas_BrokerFence",
			minISR: 3, replicas: nodes(0, 1, 2, 3),
			event: func(h *harness) error { h.crash(2, 3); return nil },
			want:  outcome{leader: 0, isr: nodes(0, 1), elr: nodes(3)},
		},
		{
			name: "then 1: 1 and 3 are eligible, and stay so once all are back", kafka: "testEligibleLeaderReplicas_BrokerFence",
			minISR: 3, replicas: nodes(0, 1, 2, 3),
			setup: func(h *harness) { h.crash(2, 3) },
			event: func(h *harness) error {
				h.crash(1)
				require.ElementsMatch(h.t, nodes(1, 3), h.part("t", 0).ELR)
				for _, b := range nodes(1, 2, 3) {
					h.unfence(b)
				}
				return nil
			},
			want: outcome{leader: 0, isr: nodes(0), elr: nodes(1, 3)},
		},
		{
			name: "the leader fenced with an empty ISR left: a live ELR member leads", kafka: "testEligibleLeaderReplicas_CleanElection",
			minISR: 3, replicas: nodes(0, 1, 2, 3), setup: func(h *harness) { fence123(h); h.unfence(2) },
			event: func(h *harness) error { h.crash(0); return nil },
			want:  outcome{leader: 2, isr: nodes(2), elr: nodes(0, 3), leaderEpochs: 1},
		},
		{
			name: "a fenced ELR member restarting uncleanly leaves the ELR", kafka: "testEligibleLeaderReplicas_UncleanShutdown",
			minISR: 3, replicas: nodes(0, 1, 2, 3), setup: fence123,
			event: func(h *harness) error { _, err := h.register(3, false); h.drain(); return err },
			want:  outcome{leader: 0, isr: nodes(0), elr: nodes(2)},
		},
		{
			// 0 is remembered as the last leader, as Kafka's lastKnownElr
			// (see TestLastKnownLeaderElectedOnlyUncleanly).
			name: "the last ISR member restarting uncleanly leaves the ISR and is not eligible", kafka: "testEligibleLeaderReplicas_UncleanShutdown",
			minISR: 3, replicas: nodes(0, 1, 2, 3),
			setup: func(h *harness) { fence123(h); _, err := h.register(3, false); require.NoError(h.t, err) },
			event: func(h *harness) error {
				_, err := h.register(0, false)
				require.Equal(h.t, replica.NodeID(0), h.part("t", 0).LastLeader)
				return err
			},
			want: outcome{leader: replica.NoNode, elr: nodes(2), leaderEpochs: 1},
		},
	})
}

// A reassignment's steps as PartitionChangeBuilder takes them: a new
// leader epoch only when the leader changes or a replica leaves the
// replicas (triggerLeaderEpochBumpForReplicaReassignmentIfNeeded), so
// that removed replicas learn they are out (KAFKA-13972); reordering or
// adding replicas keeps it. Completion elects the first target replica in
// the ISR when the leader is removed.
func TestPartitionChangeReassignmentSteps(t *testing.T) {
	reassign := func(target ...replica.NodeID) func(h *harness) error {
		return func(h *harness) error { return h.c.Reassign(TopicPartition{Topic: "t", Partition: 0}, target) }
	}
	runVectors(t, []vector{
		{
			name: "reordering the replicas keeps the leader epoch", kafka: "testReassignmentRearrangesReplicas",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1, event: reassign(3, 2, 1),
			want: outcome{leader: 1, isr: nodes(1, 3, 2), replicas: nodes(3, 2, 1)},
		},
		{
			name: "adding a replica keeps the leader epoch and the ISR", kafka: "testAddingReplicaReassignment",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1, event: reassign(1, 2, 3, 4),
			want: outcome{leader: 1, isr: nodes(1, 3, 2), replicas: nodes(1, 2, 3, 4), adding: nodes(4)},
		},
		{
			name: "removing a replica completes at once, in a new leader epoch", kafka: "testRemovingReplicaReassignment",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1, event: reassign(1, 2),
			want: outcome{leader: 1, isr: nodes(2, 1), leaderEpochs: 1, replicas: nodes(1, 2)},
		},
		{
			name: "a replica set that drops one takes a new leader epoch", kafka: "testLeaderEpochBumpOnNewReplicaSetDisjoint",
			minISR: 1, replicas: nodes(2, 1, 3), setup: fooLedBy1,
			event: func(h *harness) error {
				if err := reassign(2, 1, 4)(h); err != nil {
					return err
				}
				h.drain()
				return h.alter("t", 1, 3, 2, 4)
			},
			want: outcome{leader: 1, isr: nodes(1, 2, 4), leaderEpochs: 1, replicas: nodes(2, 1, 4)},
		},
		{
			name: "the ISR growth that completes a move elects off a removed leader", kafka: "testIsrEnlargementCompletesReassignment",
			minISR: 1, replicas: nodes(1, 2, 3), setup: func(h *harness) { require.NoError(h.t, reassign(2, 3, 4)(h)) },
			event: func(h *harness) error { return h.alter("t", 1, 2, 3, 4) },
			want:  outcome{err: replica.ErrNewLeaderElected, leader: 2, isr: nodes(2, 3, 4), leaderEpochs: 1, replicas: nodes(2, 3, 4)},
		},
		{
			// KRaft's revert keeps the merged order without the added
			// replicas: [0,2,1,3] gives [2,1,3], not the original [3,2,1].
			name: "cancelling drops the added replica in a new leader epoch, the leader staying", kafka: "ReplicationControlManagerTest.testReassignPartitions, testRevertReassignment",
			minISR: 1, replicas: nodes(3, 2, 1), setup: func(h *harness) { require.NoError(h.t, reassign(0, 2, 1)(h)) },
			event: func(h *harness) error { return h.c.CancelReassignment(TopicPartition{Topic: "t", Partition: 0}) },
			want:  outcome{leader: 3, isr: nodes(3, 2, 1), leaderEpochs: 1, replicas: nodes(2, 1, 3)},
		},
		{
			// Kafka writes this as one change (partition epoch 2, its
			// PartitionChangeBuilder completing the move as it builds it);
			// Strand writes the grow step, then the completion (3).
			name: "a reassignment dropping a fenced replica completes at once", kafka: "ReplicationControlManagerTest.testCancelReassignPartitions (foo-0)",
			minISR: 1, replicas: nodes(1, 2, 3, 4), setup: func(h *harness) { h.crash(3) }, event: reassign(1, 2, 4),
			want: outcome{leader: 1, isr: nodes(1, 2, 4), leaderEpochs: 1, replicas: nodes(1, 2, 4)},
		},
		{
			name: "a reassignment reordering the replicas around a fenced one keeps the leader and its epoch", kafka: "ReplicationControlManagerTest.testCancelReassignPartitions (foo-1)",
			minISR: 1, replicas: nodes(0, 1, 2, 3), setup: func(h *harness) { h.crash(3) }, event: reassign(1, 2, 3, 0),
			want: outcome{leader: 0, isr: nodes(0, 1, 2), replicas: nodes(1, 2, 3, 0)},
		},
		{
			name: "a growing reassignment adds the new replicas, sorted", kafka: "ReplicationControlManagerTest.testCancelReassignPartitions (bar-0)",
			minISR: 1, replicas: nodes(4, 3, 2), setup: func(h *harness) { h.crash(3) }, event: reassign(1, 2, 3, 4, 0),
			want: outcome{leader: 4, isr: nodes(4, 2), replicas: nodes(1, 2, 3, 4, 0), adding: nodes(0, 1)},
		},
		{
			name: "and cancelling it keeps the merged order without them, in a new leader epoch", kafka: "ReplicationControlManagerTest.testCancelReassignPartitions (bar-0)",
			minISR: 1, replicas: nodes(4, 3, 2), setup: func(h *harness) { h.crash(3); require.NoError(h.t, reassign(1, 2, 3, 4, 0)(h)) },
			event: func(h *harness) error { return h.c.CancelReassignment(TopicPartition{Topic: "t", Partition: 0}) },
			want:  outcome{leader: 4, isr: nodes(4, 2), leaderEpochs: 1, replicas: nodes(2, 3, 4)},
		},
	})
}

// An election from the ELR whose ISR of the leader alone is at the
// topic's min.insync.replicas (lowered while the partition had no ISR)
// clears the rest of the ELR: the leader may commit alone from then on,
// and a member left behind would miss it. Kafka's PartitionChangeBuilder
// computes the ELR before its election (maybePopulateTargetElr, then
// tryElection) and keeps them; the invariant that an ISR at min ISR has no
// ELR (Vanlightly's ValidControllerIsrAndElr) holds only with the ELR
// cleared. Found by TestReplayEqualsLive (seed 38 once it drove
// registrations claiming synced topics).
func TestELRElectionAtMinISRClearsTheRestOfTheELR(t *testing.T) {
	h := newHarness(t, 3, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	h.crash(1, 2, 3)
	require.Equal(t, nodes(1, 2, 3), h.part("t", 0).ELR)
	require.NoError(t, h.c.AlterTopicConfigs("t", []ConfigOp{{Op: SetConfig, Name: minISRConfig, Value: "1"}}, false))
	h.drain()
	h.unfence(2)
	p := h.part("t", 0)
	require.Equal(t, replica.NodeID(2), p.Leader)
	require.Equal(t, nodes(2), p.ISR)
	require.Empty(t, p.ELR, "1 and 3 lack what 2 commits alone")
	h.unfence(1)
	h.unfence(3)
	h.crash(2)
	require.Equal(t, nodes(2), h.part("t", 0).ELR, "only 2 holds every committed record")
	require.Equal(t, replica.NoNode, h.part("t", 0).Leader)
}
