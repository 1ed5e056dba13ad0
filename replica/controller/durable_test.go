package controller

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// Registration.Synced: replicas that acknowledged only what they had
// synced lose nothing acknowledged in an unclean shutdown, so KIP-966's
// unclean exclusion, which exists because Kafka acknowledges from the page
// cache, does not apply to them.

// The topics of issue 21's cluster: a topic of the producers, and the
// groups' and transactions' internal ones.
var killedTopics = []string{"orders", "__consumer_offsets", "__transaction_state"}

// killEveryNode creates the topics (replication factor 3, each partition
// led by another broker) over brokers 1-3 at min.insync.replicas 2, then
// kills every node. With controllerToo the controller dies with them: a
// new one takes over the stored records, in which every broker is still
// unfenced, and the brokers register again before their sessions end.
// Otherwise the controller survives and fences them all as their
// sessions end. Either way the brokers are fenced in id order, by their
// sessions or by their registrations, which leaves 2 and 3, the last two
// to leave an ISR below min.insync.replicas, in every ELR: the replicas
// KIP-966 trusts to hold every committed record.
func killEveryNode(t *testing.T, controllerToo bool) *harness {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("orders", false, nodes(1, 2, 3), nodes(2, 3, 1), nodes(3, 1, 2))
	h.topic("__consumer_offsets", false, nodes(2, 3, 1), nodes(3, 1, 2))
	h.topic("__transaction_state", false, nodes(1, 2, 3))
	if !controllerToo {
		h.crash(1, 2, 3)
		for tp, p := range h.c.State().Partitions {
			require.Equal(t, replica.NoNode, p.Leader, "%v", tp)
			require.Empty(t, p.ISR, "%v", tp)
			require.ElementsMatch(t, nodes(2, 3), p.ELR, "%v", tp)
		}
		return h
	}
	s, err := Replay(h.store)
	require.NoError(t, err)
	h.c, err = New(h.c.cfg, s)
	require.NoError(t, err)
	h.drain()
	for _, b := range nodes(1, 2, 3) {
		require.False(t, h.c.State().Brokers[b].Fenced, "the records still have %d unfenced", b)
	}
	return h
}

// Issue 21: after SIGKILL of every node no partition got a leader again,
// since every broker registered uncleanly and KIP-966 took each out of
// every ELR (QuorumControllerTest.testUncleanShutdownBroker: "Unclean
// shutdown should remove the ELR members"). That stays Kafka's rule for
// topics a broker does not name in Registration.Synced. The topics it
// names keep their ELR through the unclean registrations, and once the
// brokers heartbeat each partition elects a leader from it, cleanly: no
// unclean election, no RECOVERING leader. Both when the controller
// outlived the brokers (it fenced them as their sessions ended) and when
// it died with them (each registration fences the previous incarnation,
// which the new controller still has unfenced).
func TestEveryNodeKilledSyncedReplicasComeBackFromTheELR(t *testing.T) {
	for _, controllerToo := range []bool{false, true} {
		for _, synced := range [][]string{nil, {"orders"}, killedTopics} {
			h := killEveryNode(t, controllerToo)
			for _, b := range nodes(1, 2, 3) {
				_, err := h.registerWith(b, Registration{Synced: synced})
				require.NoError(t, err)
			}
			h.drain()
			for _, b := range nodes(1, 2, 3) {
				h.unfence(b)
			}
			for tp, p := range h.c.State().Partitions {
				msg := fmt.Sprintf("controller killed %v, synced %v: %v ISR %v ELR %v", controllerToo, synced, tp, p.ISR, p.ELR)
				if !slices.Contains(synced, tp.Topic) {
					require.Equal(t, replica.NoNode, p.Leader, msg)
					require.Empty(t, p.ELR, msg)
					continue
				}
				require.Equal(t, replica.NodeID(2), p.Leader, "%s: the first of the ELR [2 3] to heartbeat", msg)
				require.Equal(t, nodes(2), p.ISR, msg)
				require.Equal(t, nodes(3), p.ELR, "%s: 3 stays eligible until the leader adds it", msg)
				require.False(t, p.Recovering, msg)
			}
			require.Empty(t, h.unclean, "controller killed %v, synced %v", controllerToo, synced)
		}
	}
}

// ReplicationControlManagerTest.testEligibleLeaderReplicas_UncleanShutdown:
// foo-0 on brokers 0-3 at min.insync.replicas 3; 1, 2 and 3 are fenced,
// leaving the ELR [2 3]. 3's unclean shutdown takes it out of the ELR;
// then 0's, the last ISR member, leaves 0 the last known leader. A
// registration naming foo in Synced leaves the ELR as it was.
func TestEligibleLeaderReplicasUncleanShutdown(t *testing.T) {
	for _, synced := range [][]string{nil, {"foo"}} {
		h := newHarness(t, 1, 0, 1, 2, 3)
		h.topic("foo", false, nodes(0, 1, 2, 3))
		require.NoError(t, h.c.AlterTopicConfigs("foo", []ConfigOp{{Op: SetConfig, Name: minISRConfig, Value: "3"}}, false))
		h.drain()
		h.crash(1, 2, 3)
		require.Equal(t, nodes(2, 3), h.part("foo", 0).ELR)

		_, err := h.registerWith(3, Registration{Synced: synced})
		require.NoError(t, err)
		h.drain()
		if synced == nil {
			require.Equal(t, nodes(2), h.part("foo", 0).ELR, "an unclean shutdown ELR member is kicked out")
		} else {
			require.Equal(t, nodes(2, 3), h.part("foo", 0).ELR, "3 lost nothing it acknowledged")
		}

		_, err = h.registerWith(0, Registration{Synced: synced})
		require.NoError(t, err)
		h.drain()
		p := h.part("foo", 0)
		require.Equal(t, replica.NoNode, p.Leader)
		if synced == nil {
			require.Equal(t, nodes(2), p.ELR)
			require.Equal(t, replica.NodeID(0), p.LastLeader, "the last ISR member is the last known leader")
		} else {
			require.ElementsMatch(t, nodes(0, 2, 3), p.ELR, "0 left the ISR below min.insync.replicas, and keeps its place")
		}
	}
}

// The claim is per topic: an unclean registration naming b keeps its
// replica of b in the ELR, not of a; the record keeps the claim as a set
// of the topics the state has.
func TestSyncedNamesOnlyTheTopicsItKeeps(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("a", false, nodes(1, 2, 3))
	h.topic("b", false, nodes(1, 2, 3))
	h.crash(2, 3)
	require.Equal(t, nodes(3), h.part("a", 0).ELR, "3 left the ISR [1 3] below min.insync.replicas")
	_, err := h.registerWith(3, Registration{Synced: []string{"b", "nope", "b"}})
	require.NoError(t, err)
	h.drain()
	require.Empty(t, h.part("a", 0).ELR)
	require.Equal(t, nodes(3), h.part("b", 0).ELR)
	r := h.store[len(h.store)-2].(*RegisterRecord)
	require.Equal(t, []string{"b"}, r.Synced, "the record says what the broker claimed of known topics, as a set")
}

// QuorumControllerTest.testUncleanShutdownBroker: foo-0 on brokers 1-3 at
// min.insync.replicas 2, every broker fenced: no ISR, the ELR [2 3], 3 the
// last known leader. 3 registers after an unclean shutdown and leaves the
// ELR; registering again leaves the last known leader as it was; 2
// unfences and is elected with the ISR [2], no ELR and no last known
// leader. With foo in Synced, 3 stays in the ELR through both
// registrations, and unfencing first it leads again.
func TestUncleanShutdownBroker(t *testing.T) {
	for _, synced := range [][]string{nil, {"foo"}} {
		h := newHarness(t, 2, 1, 2, 3)
		h.topic("foo", false, nodes(1, 2, 3))
		h.crash(1, 2, 3)
		p := h.part("foo", 0)
		require.Empty(t, p.ISR)
		require.Equal(t, replica.NoNode, p.Leader)
		require.Equal(t, nodes(2, 3), p.ELR)
		require.Equal(t, replica.NodeID(3), p.LastLeader)

		for range 2 {
			_, err := h.registerWith(3, Registration{Synced: synced})
			require.NoError(t, err)
			h.drain()
			p = h.part("foo", 0)
			require.Equal(t, replica.NodeID(3), p.LastLeader, "an unclean shutdown leaves the last known leader")
			if synced == nil {
				require.Equal(t, nodes(2), p.ELR, "an unclean shutdown removes the ELR member")
			} else {
				require.Equal(t, nodes(2, 3), p.ELR, "3 lost nothing it acknowledged")
			}
		}

		next := replica.NodeID(2)
		if synced != nil {
			next = 3
		}
		h.unfence(next)
		p = h.part("foo", 0)
		require.Equal(t, next, p.Leader)
		require.Equal(t, nodes(next), p.ISR)
		require.Equal(t, replica.NoNode, p.LastLeader)
		if synced == nil {
			require.Empty(t, p.ELR)
		} else {
			require.Equal(t, nodes(2), p.ELR, "2 stays eligible below min.insync.replicas")
		}
		require.Empty(t, h.unclean)
	}
}
