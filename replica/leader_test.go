package replica

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// A follower's fetch with nothing to read waits on the leader (a long
// poll) until data arrives or FetchMaxWaitTicks ticks pass.
func TestLongPollWaitsForDataOrItsDeadline(t *testing.T) {
	c := newCluster(t, 1, 2).start(func(cfg *Config) { cfg.FetchMaxWaitTicks = 5 })
	c.elect(1)
	c.stabilize()
	require.NotNil(t, c.followerOf(1, 2).parked, "the follower's fetch is parked")
	for range 4 {
		c.tick(1)
		require.Empty(t, queued[*FetchResponse](c), "no answer before the deadline")
	}
	answered := 0
	c.drop = func(m Message) bool {
		if _, ok := m.(*FetchResponse); ok {
			answered++
		}
		return false
	}
	c.tick(1)
	require.Equal(t, 1, answered, "answered, empty, at the deadline")
	require.NotNil(t, c.followerOf(1, 2).parked, "and the next fetch waits again")

	_, err := c.produce(1, AcksLeader, "x")
	require.NoError(t, err)
	c.stabilize()
	require.Equal(t, []string{"x"}, c.values(2), "data wakes the parked fetch at once")
}

// An acks=all produce waiting for the HW fails with a *NotLeaderError
// naming the new leader when its leader steps down; the partition never
// drops it silently.
func TestLeadershipLossFailsWaitingProduces(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	c.drop = func(m Message) bool { return m.Head().From == 2 } // the follower cannot ack
	id, err := c.produce(1, AcksAll, "x")
	require.NoError(t, err)
	c.stabilize()
	_, done := c.results[id]
	require.False(t, done)
	c.drop = nil
	c.elect(2)
	c.stabilize()
	r := c.result(id)
	var nl *NotLeaderError
	require.ErrorAs(t, r.Err, &nl)
	require.Equal(t, NodeID(2), nl.Leader)
}

// The leader checks its followers every half of ReplicaLagTicks: a
// follower that stopped fetching leaves the ISR after at least
// ReplicaLagTicks and at most one and a half times it (Kafka's
// maybeShrinkIsr schedule).
func TestISRShrinkSchedule(t *testing.T) {
	const lag = 20
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.ReplicaLagTicks = lag })
	c.elect(1)
	c.stabilize()
	c.drop = func(m Message) bool { return m.Head().From == 3 || m.Head().To == 3 }
	_, err := c.produce(1, AcksLeader, "x") // node 3 falls behind at tick 0
	require.NoError(t, err)
	shrunkAt := -1
	for tick := 1; tick <= 2*lag && shrunkAt < 0; tick++ {
		c.tick(1)
		if len(c.ctl.isr) == 2 {
			shrunkAt = tick
		}
	}
	require.Equal(t, []NodeID{1, 2}, c.ctl.isr)
	require.GreaterOrEqual(t, shrunkAt, lag)
	require.LessOrEqual(t, shrunkAt, lag+lag/2)
}

// With SyncedAcks an acks=all result waits until every ISR member synced
// the batch, not only wrote it: here the follower, under FsyncNever,
// holds it back until it syncs. Without it, Kafka's rule, its write is
// enough.
func TestSyncedAcksWaitForTheFollowersSync(t *testing.T) {
	for _, synced := range []bool{false, true} {
		c := newCluster(t, 1, 2)
		c.node(2).fsync = logFsyncNever()
		c.start(func(cfg *Config) { cfg.SyncedAcks = synced })
		c.elect(1)
		c.stabilize()
		id, err := c.produce(1, AcksAll, "x")
		require.NoError(t, err)
		c.tick(10)
		require.Equal(t, []string{"x"}, c.values(2))
		_, done := c.results[id]
		require.Equal(t, !synced, done, "SyncedAcks %v: acknowledged before the follower synced", synced)
		if !synced {
			continue
		}
		c.sync(2)
		c.tick(10) // the follower reports it on its next fetch
		require.NoError(t, c.result(id).Err)
	}
}

// A fetch a follower sent before a crash that lost its unsynced tail may
// reach the leader after the follower restarted, claiming records it no
// longer has (the case of Kafka's KIP-903, found by the simulator at seed
// 18). With SyncedAcks the leader admits a follower to the ISR on what it
// synced, which the crash kept, so such a fetch cannot bring it in.
func TestSyncedAcksStaleFetchFromBeforeACrashDoesNotJoinTheISR(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	for _, n := range c.nodes {
		n.fsync = logFsyncNever()
	}
	c.start(func(cfg *Config) { cfg.SyncedAcks, cfg.MinInsyncReplicas = true, 2 })
	c.elect(1)
	c.stabilize()
	syncAll := func() {
		c.stabilize()
		for _, id := range c.live() {
			c.sync(id)
		}
		c.tick(12) // past a long poll, so that the followers report it
	}
	for _, v := range []string{"m0", "m1", "m2"} {
		_, err := c.produce(1, AcksAll, v)
		require.NoError(t, err)
	}
	syncAll()
	require.EqualValues(t, 3, c.hw(1))

	// Node 2 writes m3 and m4 without syncing them, and its next fetch,
	// at offset 5, is held in the network.
	for _, v := range []string{"m3", "m4"} {
		_, err := c.produce(1, AcksLeader, v)
		require.NoError(t, err)
	}
	isStale := func(m Message) bool { f, ok := m.(*Fetch); return ok && f.From == 2 && f.FetchOffset == 5 }
	c.deliverUntil(func() bool { return slices.ContainsFunc(c.queue, isStale) })
	stale := c.queue[slices.IndexFunc(c.queue, isStale)]
	c.queue = slices.DeleteFunc(c.queue, isStale)

	c.crash(2) // loses m3 and m4
	c.ctl.isr = []NodeID{1, 3}
	c.ctl.partitionEpoch++
	c.announce(2)
	c.tick(20) // node 2, caught up not long ago, holds the HW back for ReplicaLagTicks
	syncAll()
	require.EqualValues(t, 5, c.hw(1))
	require.Equal(t, []NodeID{1, 3}, c.status(1).ISR)

	c.restart(2)
	require.EqualValues(t, 3, c.node(2).log.LogEndOffset())
	require.NoError(t, c.node(1).p.Step(stale))
	require.Nil(t, c.status(1).PendingISR, "node 2 proposed for the ISR on a fetch from before its crash")
}

// A follower the controller takes out of the ISR (its broker fenced) no
// longer holds the high watermark back, though it caught up within
// ReplicaLagTicks: Kafka's leader waits for a caught-up follower outside the
// ISR only while it may join (Partition.maybeIncrementLeaderHW,
// isReplicaIsrEligible). Once it fetches to the log end again it is waited
// for, and rejoins.
func TestFollowerRemovedByTheControllerNoLongerHoldsTheHighWatermark(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.MinInsyncReplicas = 2; cfg.ReplicaLagTicks = 100 })
	c.elect(1)
	c.stabilize()
	c.crash(3)
	c.ctl.isr = []NodeID{1, 2} // the controller fenced node 3
	c.ctl.partitionEpoch++
	c.announce(3)
	c.stabilize()
	id, err := c.produce(1, AcksAll, "x")
	require.NoError(t, err)
	c.tick(2) // far less than ReplicaLagTicks
	require.NoError(t, c.result(id).Err, "committed by the ISR [1 2] at once")

	c.restart(3)
	c.queue = append(c.queue, c.leaderAndISR(3))
	c.tick(10)
	require.Equal(t, []NodeID{1, 2, 3}, c.ctl.isr, "node 3 caught up and rejoined")
	c.requireLogsMatch(1, 2, 3)
}
