package controller

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// Offline replicas: KIP-858's offline log directories, reported per
// replica (ReportOffline; see its doc for why).

// report sends a broker's offline replicas in its registered epoch.
func (h *harness) report(b replica.NodeID, offline ...TopicPartition) {
	h.t.Helper()
	require.NoError(h.t, h.c.ReportOffline(b, h.epochs[b], offline))
	h.drain()
}

// since returns the records stored from index n on.
func (h *harness) since(n int) []Record { return h.store[n:] }

// ReplicationControlManagerTest.testHandleDirectoriesOffline, per replica:
// brokers 101 and 102 host both partitions of topics a and b, led by 101.
// 101 reports a-0 and b-0 offline (Kafka's test: the replicas in its
// first directory) and c-0, a partition it does not host (Kafka's test:
// dir1b2, a directory of the other broker), which changes nothing. The
// records are Kafka's three: the broker's change, naming a-0 and b-0, and
// a partition change for each, led by 102 with the ISR [102].
func TestHandleDirectoriesOffline(t *testing.T) {
	const b1, b2 = 101, 102
	h := newHarness(t, 1, b1, b2)
	h.topic("a", false, nodes(b1, b2), nodes(b1, b2))
	h.topic("b", false, nodes(b1, b2), nodes(b1, b2))
	h.topic("c", false, nodes(b2))
	n := len(h.store)
	h.report(b1, TopicPartition{Topic: "a", Partition: 0}, TopicPartition{Topic: "c", Partition: 0}, TopicPartition{Topic: "b", Partition: 0})

	records := h.since(n)
	require.Len(t, records, 3)
	require.Equal(t, &OfflineRecord{Stamp: h.c.stamp(), Broker: b1, BrokerEpoch: h.epochs[b1],
		Offline: []TopicPartition{{Topic: "a", Partition: 0}, {Topic: "b", Partition: 0}}}, records[0])
	for i, topic := range []string{"a", "b"} {
		r := records[1+i].(*PartitionRecord)
		require.Equal(t, TopicPartition{Topic: topic, Partition: 0}, TopicPartition{Topic: r.Topic, Partition: r.Partition})
		require.Equal(t, replica.NodeID(b2), r.Leader)
		require.Equal(t, nodes(b2), r.ISR)
	}
	require.Equal(t, []TopicPartition{{Topic: "a", Partition: 0}, {Topic: "b", Partition: 0}}, h.c.State().Brokers[b1].Offline)
	for _, topic := range []string{"a", "b"} {
		require.Equal(t, replica.NodeID(b1), h.part(topic, 1).Leader, "%s-1 is in 101's other directory", topic)
		require.Equal(t, nodes(b1, b2), h.part(topic, 1).ISR)
	}

	n = len(h.store)
	h.report(b1, TopicPartition{Topic: "b", Partition: 0}, TopicPartition{Topic: "a", Partition: 0})
	require.Empty(t, h.since(n), "directories already offline make no record (newOfflineDirs is empty)")
}

// Kafka's LeaderAcceptor asks hasOnlineDir of every candidate, the unclean
// ones included: a topic that allows unclean election still never elects
// an offline replica; once it is online again, it may be.
func TestOfflineReplicaIsNeverElectedEvenUncleanly(t *testing.T) {
	h := newHarness(t, 1, 1, 2)
	h.topic("t", true, nodes(1, 2))
	h.report(2, TopicPartition{Topic: "t", Partition: 0})
	require.Equal(t, nodes(1), h.part("t", 0).ISR)

	h.crash(1)
	require.Equal(t, replica.NoNode, h.part("t", 0).Leader, "2 is live but its replica offline")
	require.Empty(t, h.unclean)
	err := h.c.ElectUnclean(TopicPartition{Topic: "t", Partition: 0})
	require.ErrorIs(t, err, replica.ErrEligibleLeadersNotAvailable, "not even an operator's unclean election")

	h.report(2) // its log reopened
	p := h.part("t", 0)
	require.Equal(t, replica.NodeID(2), p.Leader, "online again, it is elected as the topic allows")
	require.True(t, p.Recovering)
	require.Equal(t, []TopicPartition{{Topic: "t", Partition: 0}}, h.unclean)
}

// An offline replica leaves the ELR (the brief's rule; Kafka keeps it
// there but never elects it, which comes to the same while it is offline,
// and KIP-966 trusts an ELR member to hold every committed record, which a
// failed log no longer promises). With min.insync.replicas 3 the lagging
// follower 3 is in the ELR; without the report the ELR would elect it when
// 1 and 2 die, with it nobody is elected.
func TestOfflineReplicaLeavesTheELR(t *testing.T) {
	for _, fails := range []bool{false, true} {
		h := newHarness(t, 3, 1, 2, 3)
		h.topic("t", false, nodes(1, 2, 3))
		require.NoError(t, h.alter("t", 1, 2))
		require.Equal(t, nodes(3), h.part("t", 0).ELR)
		if fails {
			h.report(3, TopicPartition{Topic: "t", Partition: 0})
			require.Empty(t, h.part("t", 0).ELR, "its log failed")
		}
		h.crash(1, 2)
		p := h.part("t", 0)
		if fails {
			require.Equal(t, replica.NoNode, p.Leader, "the ELR %v holds no online replica", p.ELR)
		} else {
			require.Equal(t, replica.NodeID(3), p.Leader, "elected from the ELR")
		}
		require.Empty(t, h.unclean)
	}
}

// The controller never adds to an ISR itself: an offline replica that is
// online again rejoins when its leader's AlterPartition says it caught up,
// the normal expand path. While offline, the AlterPartition naming it is
// refused as Kafka refuses a fenced one (INELIGIBLE_REPLICA).
func TestOfflineReplicaRejoinsTheISRThroughAlterPartition(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	h.report(3, TopicPartition{Topic: "t", Partition: 0})
	before := *h.part("t", 0)
	require.Equal(t, nodes(1, 2), before.ISR)

	err := h.alter("t", 1, 2, 3)
	require.ErrorIs(t, err, replica.ErrIneligibleReplica)
	require.ErrorContains(t, err, "replica 3 is offline")
	require.Equal(t, replica.ErrIneligibleReplica, h.sent[len(h.sent)-1].(*replica.AlterPartitionResponse).Err)
	require.Equal(t, before, *h.part("t", 0))

	n := len(h.store)
	h.report(3)
	require.Len(t, h.since(n), 1, "online again: the broker's change only")
	require.Equal(t, nodes(1, 2), h.part("t", 0).ISR)
	require.NoError(t, h.alter("t", 1, 2, 3))
	require.Equal(t, nodes(1, 2, 3), h.part("t", 0).ISR)
}

// Issue 21's full disk: node 3 leads t-0 with the ISR [3 2 1]; its data
// directory fills, and every write to its replicas fails. Before, the
// controller never heard of it: 3 stayed leader, and nothing was ever
// elected. With the report, t-0 elects 2, 3 leaves every ISR, and the
// partitions it only followed keep their leaders and epochs. Space freed,
// 3 is online again, rejoins through the leaders, and a preferred
// election gives t-0 back.
func TestFullDiskMovesTheLeadAndTheReplicasRejoin(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("t", false, nodes(3, 2, 1), nodes(2, 1, 3), nodes(1, 3, 2))
	all := []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "t", Partition: 2}}
	epochs := map[int32]int32{}
	for _, tp := range all {
		epochs[tp.Partition] = h.part("t", tp.Partition).LeaderEpoch
	}
	h.report(3, all...)
	for i, want := range []struct {
		leader replica.NodeID
		isr    []replica.NodeID
	}{{2, nodes(2, 1)}, {2, nodes(2, 1)}, {1, nodes(1, 2)}} {
		p := h.part("t", int32(i))
		require.Equal(t, want.leader, p.Leader, "t-%d", i)
		require.Equal(t, want.isr, p.ISR, "t-%d", i)
		require.Empty(t, p.ELR, "t-%d: the ISR is at min.insync.replicas", i)
		bump := int32(0)
		if i == 0 {
			bump = 1
		}
		require.Equal(t, epochs[int32(i)]+bump, p.LeaderEpoch, "t-%d: a new leader epoch only where 3 led", i)
	}

	h.report(3)
	for _, tp := range all {
		require.NoError(t, h.alterAt(tp, slices.Concat(h.part(tp.Topic, tp.Partition).ISR, nodes(3))...))
		require.Contains(t, h.part(tp.Topic, tp.Partition).ISR, replica.NodeID(3))
	}
	require.NoError(t, h.c.ElectPreferred(all[0]))
	h.drain()
	require.Equal(t, replica.NodeID(3), h.part("t", 0).Leader)
}

// A restart reopens the logs: the new incarnation's registration names
// the replicas still offline (a log that does not open), which leave the
// ELR however cleanly the broker stopped; the others are online again.
func TestRegistrationNamesTheReplicasStillOffline(t *testing.T) {
	h := newHarness(t, 3, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3), nodes(2, 1, 3))
	require.NoError(t, h.alter("t", 1, 2))
	require.Equal(t, nodes(3), h.part("t", 0).ELR)
	h.report(3, TopicPartition{Topic: "t", Partition: 1})

	_, err := h.registerWith(3, Registration{Clean: true, Offline: []TopicPartition{{Topic: "t", Partition: 0}}})
	require.NoError(t, err)
	h.drain()
	require.Equal(t, []TopicPartition{{Topic: "t", Partition: 0}}, h.c.State().Brokers[3].Offline, "t-1 reopened, t-0 did not")
	require.Empty(t, h.part("t", 0).ELR, "a clean shutdown does not keep an offline replica eligible")
	h.unfence(3)
	require.NoError(t, h.alterAt(TopicPartition{Topic: "t", Partition: 1}, 2, 1, 3))

	h.start(3, true)
	require.Nil(t, h.c.State().Brokers[3].Offline)
	require.NoError(t, h.alter("t", 1, 2, 3))
}

// A report names the broker's epoch, like a heartbeat: a previous life's
// is refused, and only partitions the state has with the broker among
// their replicas are kept.
func TestReportOfflineIsFencedByTheBrokerEpoch(t *testing.T) {
	h := newHarness(t, 1, 1, 2)
	h.topic("t", false, nodes(1, 2))
	old := h.epochs[2]
	h.start(2, true)
	n := len(h.store)
	require.ErrorIs(t, h.c.ReportOffline(2, old, []TopicPartition{{Topic: "t", Partition: 0}}), replica.ErrStaleBrokerEpoch)
	require.ErrorIs(t, h.c.ReportOffline(7, 1, nil), replica.ErrBrokerIDNotRegistered)
	require.NoError(t, h.c.ReportOffline(2, h.epochs[2], []TopicPartition{{Topic: "t", Partition: 1}, {Topic: "u", Partition: 0}, {Topic: "", Partition: -1}}))
	h.drain()
	require.Len(t, h.store, n, "nothing the controller knows of: no record")
}

// A deleted topic's offline replicas are forgotten with it: a topic
// created again under its name has new replicas, all online.
func TestDeletingATopicForgetsItsOfflineReplicas(t *testing.T) {
	h := newHarness(t, 1, 1, 2)
	h.topic("t", false, nodes(1, 2))
	h.topic("u", false, nodes(1, 2))
	h.report(2, TopicPartition{Topic: "t", Partition: 0}, TopicPartition{Topic: "u", Partition: 0})
	require.NoError(t, h.c.DeleteTopic("t"))
	h.drain()
	require.Equal(t, []TopicPartition{{Topic: "u", Partition: 0}}, h.c.State().Brokers[2].Offline)
	h.topic("t", false, nodes(1, 2))
	require.Equal(t, nodes(1, 2), h.part("t", 0).ISR)
}
