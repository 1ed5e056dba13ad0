package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A follower's fetch with nothing to read waits on the leader (a long
// poll) until data arrives or FetchMaxWait ticks pass.
func TestLongPollWaitsForDataOrItsDeadline(t *testing.T) {
	c := newCluster(t, 1, 2).start(func(cfg *Config) { cfg.FetchMaxWait = 5 })
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

// The leader checks its followers every half of ReplicaLagTime: a
// follower that stopped fetching leaves the ISR after at least
// ReplicaLagTime and at most one and a half times it (Kafka's
// maybeShrinkIsr schedule).
func TestISRShrinkSchedule(t *testing.T) {
	const lag = 20
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.ReplicaLagTime = lag })
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
