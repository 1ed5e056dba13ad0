package replica

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/vfs"
)

// KIP-380: a node takes the controller's LeaderAndISR only for the broker
// epoch it is registered in. Before it knows one (it has not registered
// yet, or not heard the answer) it takes none that names an epoch; one for
// an earlier or later epoch of itself is refused, and changes nothing. A
// controller that tracks no broker epochs (NoBrokerEpoch) is not checked.
func TestKIP380APartitionTakesControllerMessagesForItsBrokerEpochOnly(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	p := c.node(2).p
	state := func(brokerEpoch int64, leaderEpoch int32) *LeaderAndISR {
		return &LeaderAndISR{Header: Header{From: NoNode, To: 2, Topic: testTopic}, BrokerEpoch: brokerEpoch,
			Leader: 1, LeaderEpoch: leaderEpoch, Replicas: []NodeID{1, 2}, ISR: []NodeID{1, 2}}
	}
	require.ErrorIs(t, p.Step(state(5, 1)), ErrStaleBrokerEpoch, "not registered yet")
	require.Equal(t, RoleNone, p.Status().Role)

	require.NoError(t, p.SetBrokerEpoch(5))
	require.ErrorIs(t, p.Step(state(4, 1)), ErrStaleBrokerEpoch, "for a previous life")
	require.ErrorIs(t, p.Step(state(6, 1)), ErrStaleBrokerEpoch, "for a registration it has not heard of")
	require.Equal(t, RoleNone, p.Status().Role)
	require.NoError(t, p.Step(state(5, 1)))
	require.Equal(t, RoleFollower, p.Status().Role)
	require.NoError(t, p.Step(state(NoBrokerEpoch, 2)), "no broker epoch, no check")
	require.EqualValues(t, 2, p.Status().LeaderEpoch)

	require.ErrorIs(t, p.SetBrokerEpoch(4), ErrStaleBrokerEpoch, "a broker epoch never goes back")
	n := NewNode(3)
	require.NoError(t, n.SetBrokerEpoch(8))
	added, err := n.Add(Config{Topic: testTopic, Log: c.node(1).log})
	require.NoError(t, err)
	require.EqualValues(t, 8, added.brokerEpoch, "a partition added later is in the node's epoch")
	require.ErrorIs(t, n.SetBrokerEpoch(7), ErrStaleBrokerEpoch)
}

// registerAll gives each node of c a broker epoch, 10 plus its id, known
// to the nodes and to the harness's controller.
func registerAll(c *cluster) {
	c.ctl.brokerEpochs = map[NodeID]int64{}
	for _, n := range c.nodes {
		c.register(n.id, 10+int64(n.id))
	}
}

func (c *cluster) register(id NodeID, epoch int64) {
	require.NoError(c.t, c.node(id).p.SetBrokerEpoch(epoch))
	c.ctl.brokerEpochs[id] = epoch
}

// KIP-903: a follower's fetch carries its broker epoch, and the leader's
// AlterPartition names each ISR member's: its own, and a follower's from
// the fetches that made it caught up.
func TestKIP903ProposalsNameEachMembersBrokerEpoch(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(nil)
	registerAll(c)
	var proposals []*AlterPartition
	hold2 := true // until 3 has fetched, so that the leader knows its epoch
	c.drop = func(m Message) bool {
		switch m := m.(type) {
		case *Fetch:
			require.Equal(t, 10+int64(m.From), m.BrokerEpoch, "a fetch carries its sender's broker epoch")
			return hold2 && m.From == 2
		case *AlterPartition:
			proposals = append(proposals, m)
		}
		return false
	}
	c.elect(1, 1, 3)
	c.stabilize()
	require.Empty(t, proposals)
	hold2 = false
	c.tick(c.node(2).p.cfg.RequestTimeoutTicks + c.node(2).p.cfg.FetchMaxWaitTicks) // 2 fetches again
	require.Equal(t, []NodeID{1, 3, 2}, c.status(1).ISR)
	require.Len(t, proposals, 1)
	require.EqualValues(t, 11, proposals[0].BrokerEpoch)
	require.Equal(t, []ISRMember{{1, 11}, {3, 13}, {2, 12}}, proposals[0].ISR)
}

// KAFKA-14139, the case KIP-903 closes: follower 2 catches up and the
// leader proposes it for the ISR; before the controller decides, 2's disk
// is replaced and it registers again, empty. Without broker epochs the
// controller takes the proposal, and an ISR member lacks committed
// records: the next clean election may lose them. With them, the proposal
// names 2's previous epoch and is ineligible; the leader starts 2's state
// over at its first fetch in the new epoch, and admits it once it has
// caught up again.
func TestKIP903AReplacedDiskDoesNotJoinTheISROnItsPreviousLifesFetches(t *testing.T) {
	for _, pre903 := range bugSettings() {
		c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.bugs.preKIP903 = pre903 })
		registerAll(c)
		var held *AlterPartition
		c.drop = func(m Message) bool {
			if ap, ok := m.(*AlterPartition); ok && held == nil && slices.Contains(ap.Nodes(), 2) {
				held = ap
				return true
			}
			return false
		}
		c.elect(1, 1, 3)
		c.stabilize()
		require.NotNil(t, held, "2 caught up and was proposed")
		for _, v := range []string{"m0", "m1", "m2"} {
			_, err := c.produce(1, AcksAll, v)
			require.NoError(t, err)
		}
		c.stabilize()
		require.EqualValues(t, 3, c.hw(1), "2, proposed, is in the maximal ISR and has them")

		// 2's disk is replaced: it restarts empty, in a new broker epoch.
		c.crash(2)
		n := c.node(2)
		n.fs = vfs.NewMem()
		require.NoError(t, n.fs.MkdirAll("/data", 0o755))
		c.restart(2)
		c.register(2, 22)
		require.EqualValues(t, 0, c.node(2).log.LogEndOffset())

		c.drop = nil
		resp := c.alterPartition(held)
		if pre903 {
			require.Equal(t, kafkaerr.None, resp.Err)
			require.Contains(t, c.ctl.isr, NodeID(2))
			require.Less(t, c.node(2).log.LogEndOffset(), c.hw(1), "without KIP-903 an ISR member lacks committed records")
			continue
		}
		require.Equal(t, ErrIneligibleReplica, resp.Err)
		require.Equal(t, []NodeID{1, 3}, c.ctl.isr)
		c.queue = append(c.queue, resp)
		c.announce(NoNode)
		c.stabilize()
		f := c.followerOf(1, 2)
		require.EqualValues(t, 22, f.brokerEpoch, "the leader knows 2 by its new epoch")
		require.Equal(t, []NodeID{1, 3, 2}, c.ctl.isr, "2 joins once caught up in its new epoch")
		require.Equal(t, c.values(1), c.values(2))
	}
}

// A fetch of a follower's previous life that reaches the leader after the
// follower's new life fetched is refused: it would claim records the new
// life may lack. The follower's state, started over at the new life's
// first fetch, stays as that fetch left it.
func TestKIP903AFetchOfAnEarlierBrokerEpochIsRefused(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	registerAll(c)
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksAll, "m0")
	require.NoError(t, err)
	var old Fetch
	c.drop = func(m Message) bool {
		if f, ok := m.(*Fetch); ok && f.From == 2 {
			old = *f
		}
		return false
	}
	c.stabilize()
	require.EqualValues(t, 12, old.BrokerEpoch)
	c.drop = nil

	c.crash(2)
	c.restart(2)
	c.register(2, 22)
	c.announce(NoNode)
	c.stabilize()
	before := *c.followerOf(1, 2)
	require.EqualValues(t, 22, before.brokerEpoch)

	old.FetchOffset = 5 // what the previous life claims
	err = c.node(1).p.Step(&old)
	require.ErrorIs(t, err, ErrStaleBrokerEpoch)
	require.ErrorIs(t, err, ErrStale)
	require.Equal(t, before, *c.followerOf(1, 2))
}
