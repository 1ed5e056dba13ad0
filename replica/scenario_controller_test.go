package replica

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// stashAlterPartitions holds back every AlterPartition and returns a
// function that releases them.
func (c *cluster) stashAlterPartitions() (release func() []*AlterPartition) {
	var stash []*AlterPartition
	c.drop = func(m Message) bool {
		if ap, ok := m.(*AlterPartition); ok {
			stash = append(stash, ap)
			return true
		}
		return false
	}
	return func() []*AlterPartition {
		c.drop = nil
		for _, ap := range stash {
			c.queue = append(c.queue, ap)
		}
		out := stash
		stash = nil
		return out
	}
}

// TC-13, AlterPartition races (KIP-497): a pending shrink does not count
// until committed, a pending expansion counts at once, INELIGIBLE_REPLICA
// reverts to the committed ISR, an answer that comes after a leader change
// is ignored, and no ISR without its leader is proposed or taken.
func TestTC13AlterPartitionRaces(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(nil)
	c.elect(1)
	c.stabilize()
	release := c.stashAlterPartitions()
	cut3 := c.drop
	c.drop = func(m Message) bool { return cut3(m) || m.Head().From == 3 || m.Head().To == 3 }
	_, err := c.produce(1, AcksLeader, "p")
	require.NoError(t, err)
	c.tick(35)

	// (a) The shrink is pending: node 3 still holds the HW back.
	s := c.status(1)
	require.Equal(t, []NodeID{1, 2}, s.PendingISR)
	require.Equal(t, []NodeID{1, 2, 3}, s.MaximalISR, "a shrink counts only once committed")
	require.EqualValues(t, 0, s.HighWatermark)
	for _, ap := range release() {
		require.Contains(t, ap.Nodes(), NodeID(1), "(e) a leader proposes no ISR without itself")
	}
	c.stabilize()
	s = c.status(1)
	require.Equal(t, []NodeID{1, 2}, s.ISR)
	require.EqualValues(t, 1, s.HighWatermark, "committed, the shrink lets the HW move")

	// (b) Node 3 catches up: the expansion counts at once.
	release = c.stashAlterPartitions()
	c.tick(30) // node 3's lost fetch times out and is sent again
	s = c.status(1)
	require.Equal(t, []NodeID{1, 2, 3}, s.PendingISR)
	require.Equal(t, []NodeID{1, 2, 3}, s.MaximalISR, "an expansion counts while pending")
	require.Equal(t, []NodeID{1, 2}, s.ISR)

	// (c) The controller finds node 3 ineligible: back to the committed ISR.
	c.ctl.ineligible = []NodeID{3}
	release()
	c.deliverUntil(func() bool { return c.status(1).PendingISR == nil })
	s = c.status(1)
	require.Equal(t, []NodeID{1, 2}, s.MaximalISR, "INELIGIBLE_REPLICA reverts")
	c.ctl.ineligible = nil
	c.tick(10)
	require.Equal(t, []NodeID{1, 2, 3}, c.status(1).ISR, "it joins once eligible")

	// (d) An answer that arrives after the leader changed is ignored.
	var held *AlterPartitionResponse
	c.drop = func(m Message) bool {
		if r, ok := m.(*AlterPartitionResponse); ok && held == nil {
			held = r
			return true
		}
		return m.Head().From == 3 || m.Head().To == 3
	}
	_, err = c.produce(1, AcksLeader, "q")
	require.NoError(t, err)
	c.tick(35)
	require.NotNil(t, held)
	c.drop = nil
	c.elect(2, 1, 2)
	c.stabilize()
	before := c.status(1)
	require.ErrorIs(t, c.stepOn(1, held), ErrStale)
	require.Equal(t, before, c.status(1))

	// (e) A success that commits an ISR without its leader is refused.
	release = c.stashAlterPartitions()
	c.elect(1, 1, 2)
	c.stabilize()
	st := c.status(1)
	require.NotNil(t, st.PendingISR, "node 3 was proposed for the ISR\n%s", c.dumpTrace())
	bad := &AlterPartitionResponse{Header: Header{From: NoNode, To: 1, Topic: testTopic}, Leader: 1,
		LeaderEpoch: st.LeaderEpoch, PartitionEpoch: st.PartitionEpoch + 1, ISR: []NodeID{2, 3}}
	require.ErrorIs(t, c.stepOn(1, bad), ErrInvalidMessage)
	require.Equal(t, st, c.status(1))
	release()
	c.stabilize()
}

// TC-14, controller epoch fencing: a node that saw controller epoch 4
// refuses epoch 3; older or repeated partition state is stale; a leader
// retries an ISR change answered NOT_CONTROLLER and waits for metadata
// after INVALID_UPDATE_VERSION.
func TestTC14ControllerEpochFencing(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(nil)
	c.ctl.epoch = 4
	c.elect(1)
	c.stabilize()
	before := c.status(2)

	old := c.leaderAndISR(2)
	old.ControllerEpoch = 3
	old.LeaderEpoch++
	require.ErrorIs(t, c.stepOn(2, old), ErrStaleControllerEpoch)
	older := c.leaderAndISR(2)
	older.LeaderEpoch--
	require.ErrorIs(t, c.stepOn(2, older), ErrStale)
	require.ErrorIs(t, c.stepOn(2, c.leaderAndISR(2)), ErrStale, "the same state twice")
	require.Equal(t, before, c.status(2))

	// The leader proposes a shrink; NOT_CONTROLLER makes it retry.
	release := c.stashAlterPartitions()
	cut := c.drop
	c.drop = func(m Message) bool { return cut(m) || m.Head().From == 3 }
	_, err := c.produce(1, AcksLeader, "p")
	require.NoError(t, err)
	c.tick(35)
	proposals := release()
	require.Len(t, proposals, 1)
	c.queue = slices.DeleteFunc(c.queue, func(m Message) bool { _, ok := m.(*AlterPartition); return ok })
	require.NoError(t, c.stepOn(1, &AlterPartitionResponse{Header: Header{From: NoNode, To: 1, Topic: testTopic}, Err: ErrNotController}))
	resent := 0
	c.drop = func(m Message) bool {
		_, ap := m.(*AlterPartition)
		if ap {
			resent++
		}
		return ap || m.Head().From == 3
	}
	c.tick(1)
	require.Zero(t, resent, "the retry waits RetryBackoffTicks")
	c.tick(2)
	require.Equal(t, 1, resent, "NOT_CONTROLLER: the same proposal is sent again")
	c.drop = nil

	// INVALID_UPDATE_VERSION: the proposal waits for new metadata, or
	// RequestTimeoutTicks, since the answer may be a late one to an earlier
	// proposal.
	require.NoError(t, c.stepOn(1, &AlterPartitionResponse{Header: Header{From: NoNode, To: 1, Topic: testTopic}, Err: ErrInvalidUpdateVersion}))
	p := c.node(1).p
	require.Equal(t, p.now+int64(p.cfg.RequestTimeoutTicks), p.ld.pending.retryAt)
	c.ctl.partitionEpoch++
	c.announce(NoNode)
	c.stabilize()
	require.Nil(t, c.node(1).p.ld.pending, "new metadata clears the pending change")
}

// TC-15, reassignment as the partition sees it: a replica added with the
// same leader epoch catches up and joins the ISR; one removed stops and
// is no longer served; a replica removed and re-added in one epoch change
// starts over and must fetch in the new epoch before it may rejoin.
// (Generating, executing and verifying a reassignment is the controller's
// work, not built yet.)
func TestTC15ReassignmentOnThePartition(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(nil)
	c.ctl.replicas = []NodeID{1, 2}
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksAll, "m0", "m1")
	require.NoError(t, err)
	c.stabilize()
	require.Equal(t, RoleNone, c.status(3).Role)

	// Grow: 3 is added with the same leader epoch.
	c.ctl.replicas = []NodeID{1, 2, 3}
	c.ctl.partitionEpoch++
	c.announce(NoNode)
	c.tick(10)
	require.Equal(t, []string{"m0", "m1"}, c.values(3))
	require.Equal(t, []NodeID{1, 2, 3}, c.status(1).ISR, "the added replica joined the ISR")

	// Shrink: 2 is removed, with a new leader epoch (KRaft bumps it when a
	// reassignment completes).
	c.ctl.replicas = []NodeID{1, 3}
	c.elect(1, 1, 3)
	c.ctl.replicas = []NodeID{1, 2, 3} // tell 2 too
	c.queue = append(c.queue, &LeaderAndISR{Header: Header{From: NoNode, To: 2, Topic: testTopic}, ControllerEpoch: c.ctl.epoch,
		Leader: 1, LeaderEpoch: c.ctl.leaderEpoch, PartitionEpoch: c.ctl.partitionEpoch, Replicas: []NodeID{1, 3}, ISR: []NodeID{1, 3}})
	c.ctl.replicas = []NodeID{1, 3}
	c.stabilize()
	require.Equal(t, RoleNone, c.status(2).Role, "a removed replica stops")
	require.NoError(t, c.stepOn(1, &Fetch{Header: Header{From: 2, To: 1, Topic: testTopic}, ID: 9, CurrentLeaderEpoch: c.ctl.leaderEpoch, FetchOffset: 2, LastFetchedEpoch: 1}))
	c.flush()
	rs := queued[*FetchResponse](c)
	require.Equal(t, ErrUnknownLeaderEpoch, rs[len(rs)-1].Err, "a fetch from a removed replica is not served")
	c.queue = nil

	// Remove and re-add 3 within one epoch change: its state starts over.
	c.elect(1, 1)
	c.deliverUntil(func() bool { return c.status(1).LeaderEpoch == c.ctl.leaderEpoch })
	f := c.followerOf(1, 3)
	require.False(t, f.fetchedThisEpoch)
	require.EqualValues(t, -1, f.leo, "no stale log end carried over")
	var early bool
	c.drop = func(m Message) bool {
		if ap, ok := m.(*AlterPartition); ok && slices.Contains(ap.Nodes(), 3) && !c.followerOf(1, 3).fetchedThisEpoch {
			early = true
		}
		return false
	}
	c.tick(10)
	require.False(t, early, "3 rejoins only after fetching in the new epoch")
	require.Equal(t, []NodeID{1, 3}, c.status(1).ISR)
}

// An AlterPartitionResponse names no request, so an error answer may be a
// late one to a proposal that new metadata already replaced. The leader
// must not then wait for metadata that already came: it proposes again
// after RequestTimeoutTicks (the simulator's seed 1265 waited for good).
func TestLateErrorAnswerToAReplacedProposalIsRetried(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.MinInsyncReplicas = 2 })
	c.elect(1, 1, 2)
	dropProposals := func() {
		c.queue = slices.DeleteFunc(c.queue, func(m Message) bool { _, ok := m.(*AlterPartition); return ok })
	}
	release := c.stashAlterPartitions()
	c.tick(3)
	require.Len(t, release(), 1, "node 3 caught up and is proposed")
	dropProposals()

	// New metadata replaces the proposal; the next one is lost, and the
	// answer to the first comes late.
	release = c.stashAlterPartitions()
	c.ctl.partitionEpoch++
	c.announce(NoNode)
	c.tick(3)
	require.Len(t, release(), 1, "proposed again in the new partition epoch")
	dropProposals()
	require.NoError(t, c.stepOn(1, &AlterPartitionResponse{Header: Header{From: NoNode, To: 1, Topic: testTopic}, Err: ErrInvalidUpdateVersion}))

	c.tick(25)
	require.Equal(t, []NodeID{1, 2, 3}, c.ctl.isr)
}
