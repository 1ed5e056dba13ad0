package replica

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// follower returns the leader's view of follower id.
func (c *cluster) followerOf(leader, id NodeID) *follower {
	fs := c.node(leader).p.ld.followers
	i := slices.IndexFunc(fs, func(f *follower) bool { return f.id == id })
	require.GreaterOrEqual(c.t, i, 0)
	return fs[i]
}

// sent returns the messages of a kind queued so far and not delivered.
func queued[T Message](c *cluster) []T {
	var out []T
	for _, m := range c.queue {
		if t, ok := m.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// TC-7a, KIP-320: a fetch in an older epoch is fenced and changes nothing
// on the leader; its follower stops until the controller tells it more. A
// fetch in an epoch the leader does not know yet is retried.
func TestTC7FencedAndUnknownLeaderEpoch(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(nil)
	c.ctl.leaderEpoch = 4
	c.elect(1) // epoch 5
	c.stabilize()
	before := *c.followerOf(1, 3)

	for _, tc := range []struct {
		epoch int32
		want  Code
	}{{4, ErrFencedLeaderEpoch}, {6, ErrUnknownLeaderEpoch}} {
		require.NoError(t, c.stepOn(1, &Fetch{Header: Header{From: 3, To: 1, Topic: testTopic}, ID: 77, CurrentLeaderEpoch: tc.epoch, FetchOffset: 5, LastFetchedEpoch: -1}))
		c.flush()
		rs := queued[*FetchResponse](c)
		require.NotEmpty(t, rs)
		r := rs[len(rs)-1]
		require.Equal(t, tc.want, r.Err, "fetch in epoch %d", tc.epoch)
		require.Empty(t, r.Records)
		f := c.followerOf(1, 3)
		require.Equal(t, before.leo, f.leo, "a refused fetch does not move the follower's log end")
		c.queue = slices.DeleteFunc(c.queue, func(m Message) bool { r, ok := m.(*FetchResponse); return ok && r.ID == 77 })
	}

	// Node 2 misses epoch 6: its fetches are fenced, and it stops.
	c.electOnly(1, []NodeID{1, 2, 3}, 1, 3)
	c.stabilize()
	fetches := 0
	missing := true // node 2 misses every LeaderAndISR, ISR changes too
	c.drop = func(m Message) bool {
		if f, ok := m.(*Fetch); ok && f.From == 2 {
			fetches++
		}
		_, control := m.(*LeaderAndISR)
		return missing && control && m.Head().To == 2
	}
	c.tick(100)
	require.LessOrEqual(t, fetches, 1, "a fenced follower waits for metadata\n%s", c.dumpTrace())
	require.True(t, c.node(2).p.fl.fenced)
	missing = false
	c.queue = append(c.queue, c.leaderAndISR(2))
	c.tick(10)
	require.Greater(t, fetches, 1, "new metadata resumes fetching")
	require.False(t, c.node(2).p.fl.fenced)

	// Node 2 learns epoch 7 before the leader: the leader does not know
	// it yet, and node 2 retries until it does.
	c.electOnly(1, []NodeID{1, 2, 3}, 2)
	fetches = 0
	c.tick(20)
	require.Greater(t, fetches, 2, "an unknown epoch is retried")
	c.queue = append(c.queue, c.leaderAndISR(1), c.leaderAndISR(3))
	c.stabilize()
	_, err := c.produce(1, AcksAll, "after")
	require.NoError(t, err)
	c.tick(10)
	require.Equal(t, []string{"after"}, c.values(2))
}

// TC-7b, KIP-320: a zombie leader that missed its replacement can append
// acks=1 records, which are later truncated, but can never commit an
// acks=all one: its followers fetch elsewhere and the controller fences
// its ISR shrink.
func TestTC7ZombieLeaderNeverCommits(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.ProduceTimeoutTicks = 30 })
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksAll, "m0")
	require.NoError(t, err)
	c.tick(10)

	// Node 1 is cut off from the others and misses its replacement; the
	// controller still answers it.
	c.drop = func(m Message) bool {
		h := m.Head()
		_, control := m.(*LeaderAndISR)
		return (h.From == 1 && h.To != NoNode) || (h.To == 1 && (control || h.From != NoNode))
	}
	c.elect(2, 2, 3)
	c.stabilize()
	all, err := c.produce(1, AcksAll, "zombie-all")
	require.NoError(t, err, "the zombie still believes it leads")
	one, err := c.produce(1, AcksLeader, "zombie-one")
	require.NoError(t, err)
	c.tick(40)
	require.NoError(t, c.result(one).Err, "acks=1 is acknowledged by the zombie alone")
	require.ErrorIs(t, c.result(all).Err, ErrRequestTimedOut, "acks=all never succeeds on a zombie")
	require.NotNil(t, c.node(1).p.ld.pending, "its ISR shrink is fenced by the controller, every time it asks")
	require.Equal(t, []NodeID{2, 3}, c.ctl.isr)

	_, err = c.produce(2, AcksAll, "m1")
	require.NoError(t, err)
	c.drop = nil
	c.queue = append(c.queue, c.leaderAndISR(1))
	c.tick(10)
	for _, id := range []NodeID{1, 2, 3} {
		require.Equal(t, []string{"m0", "m1"}, c.values(id), "node %d: the zombie's acks=1 record was truncated", id)
	}
}

// TC-8, KIP-320 rule 4: a new leader whose HW (8) lags what the previous
// leader committed (10) must not admit a follower at 9 to the ISR, though
// 9 >= 8: electing it would lose committed offset 9. The follower joins
// once it holds the leader epoch's start offset (10).
func TestTC8ISRExpansionWaitsForTheEpochStart(t *testing.T) {
	for _, buggy := range bugSettings() {
		t.Run(map[bool]string{false: "guarded", true: "no-guard"}[buggy], func(t *testing.T) {
			c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.bugs.noEpochStartGuard = buggy })
			ten := []string{"1:a", "1:b", "1:c", "1:d", "1:e", "1:f", "1:g", "1:h", "1:i", "1:j"}
			c.seed(1, 8, ten...)
			c.seed(2, 0, ten[:9]...)
			c.seed(3, 10, ten...)
			c.crash(3)
			c.ctl.leaderEpoch = 1
			c.elect(1, 1, 3) // epoch 2, starting at 10
			var proposedAt []int64
			c.drop = func(m Message) bool {
				if ap, ok := m.(*AlterPartition); ok && slices.Contains(ap.Nodes(), 2) {
					proposedAt = append(proposedAt, c.node(2).log.LogEndOffset())
				}
				return false
			}
			c.stabilize()
			require.EqualValues(t, 10, c.status(1).LeaderEpochStartOffset)
			require.NotEmpty(t, proposedAt)
			if buggy {
				require.EqualValues(t, 9, proposedAt[0], "without the guard the follower joins at 9")
				return
			}
			require.EqualValues(t, 10, proposedAt[0], "the follower joins once it holds offset 9")
			require.Equal(t, []NodeID{1, 3, 2}, c.status(1).ISR)
		})
	}
}

// TC-9, KAFKA-7164: a follower that sees the epoch jump from 1 to 3 with
// the same leader re-validates its log and truncates the uncommitted tail
// the leader lost meanwhile.
func TestTC9TruncateOnEveryEpochChange(t *testing.T) {
	c := newCluster(t, 1, 2)
	c.node(1).fsync = logFsyncNever()
	c.start(nil)
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksAll, "m0")
	require.NoError(t, err)
	c.stabilize()
	c.sync(1)
	_, err = c.produce(1, AcksLeader, "m1")
	require.NoError(t, err)
	c.stabilize()
	require.Equal(t, []string{"m0", "m1"}, c.values(2))

	c.crash(1) // loses m1
	c.restart(1)
	c.electOnly(1, []NodeID{1, 2}, 1) // epoch 2, which node 2 misses
	c.stabilize()
	c.elect(1) // epoch 3
	c.stabilize()
	c.tick(10)
	require.Equal(t, []string{"m0"}, c.values(2), "the follower truncated the tail its leader lost")
	_, err = c.produce(1, AcksAll, "m2")
	require.NoError(t, err)
	c.tick(10)
	require.Equal(t, c.entries(1), c.entries(2))
}

// TC-10, KIP-966 part 1 (strict min ISR): with the ISR below
// MinInsyncReplicas nothing commits, not even acks=1 records, and acks=all
// is refused before the append. (The controller's part, ELR and unclean
// exclusion, belongs to the controller, which is not built yet.)
func TestTC10StrictMinISRFreezesTheHighWatermark(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.MinInsyncReplicas = 2 })
	c.elect(3)
	c.stabilize()
	_, err := c.produce(3, AcksAll, "m0")
	require.NoError(t, err)
	c.tick(5)
	require.EqualValues(t, 1, c.hw(3))

	// A follower whose log end equals the leader's is caught up however
	// long it is silent (Replica.isCaughtUp): the ISR shrinks only under
	// traffic. Kafka's controller fences dead brokers for the idle case.
	c.drop = func(m Message) bool { return m.Head().From == 1 || m.Head().To == 1 }
	_, err = c.produce(3, AcksLeader, "p1")
	require.NoError(t, err)
	c.tick(40)
	require.Equal(t, []NodeID{2, 3}, c.ctl.isr, "node 1 left the ISR")
	ok, err := c.produce(3, AcksAll, "m1")
	require.NoError(t, err, "an ISR of MinInsyncReplicas still takes acks=all")
	c.tick(5)
	require.NoError(t, c.result(ok).Err)

	c.drop = func(m Message) bool { h := m.Head(); return h.From == 1 || h.To == 1 || h.From == 2 || h.To == 2 }
	_, err = c.produce(3, AcksLeader, "p2")
	require.NoError(t, err)
	c.tick(40)
	require.Equal(t, []NodeID{3}, c.ctl.isr)
	hw := c.hw(3)
	one, err := c.produce(3, AcksLeader, "m2")
	require.NoError(t, err)
	c.tick(5)
	require.NoError(t, c.result(one).Err)
	require.Equal(t, hw, c.hw(3), "under min ISR the HW does not move, even for acks=1")
	_, err = c.produce(3, AcksAll, "m3")
	require.ErrorIs(t, err, ErrNotEnoughReplicas)
	require.NotContains(t, c.values(3), "m3", "a refused acks=all produce appends nothing")
}

// TC-11, Jepsen 2013: followers cut off, the ISR shrinks to the leader,
// which goes on acknowledging acks=all alone under MinInsyncReplicas 1;
// an unclean election then loses what it acknowledged. With
// MinInsyncReplicas 2 the lone leader refuses acks=all instead.
func TestTC11LoneLeaderAndUncleanElection(t *testing.T) {
	for _, minISR := range []int{1, 2} {
		t.Run(map[int]string{1: "unsafe", 2: "safe"}[minISR], func(t *testing.T) {
			c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.MinInsyncReplicas = minISR })
			c.elect(1)
			c.stabilize()
			_, err := c.produce(1, AcksAll, "m0")
			require.NoError(t, err)
			c.tick(5)
			c.drop = func(m Message) bool {
				h := m.Head()
				return h.From != NoNode && h.To != NoNode && (h.From == 1) != (h.To == 1)
			}
			_, err = c.produce(1, AcksLeader, "p")
			require.NoError(t, err)
			c.tick(40)
			require.Equal(t, []NodeID{1}, c.ctl.isr)
			w, err := c.produce(1, AcksAll, "w")
			if minISR == 2 {
				require.ErrorIs(t, err, ErrNotEnoughReplicas)
				return // and the controller, unclean election off, leaves the partition offline
			}
			require.NoError(t, err)
			c.tick(5)
			require.NoError(t, c.result(w).Err, "the lone leader acknowledges acks=all")
			c.crash(1)
			c.drop = nil
			c.elect(2, 2) // unclean: node 2 was not in the ISR
			c.stabilize()
			c.restart(1)
			c.queue = append(c.queue, c.leaderAndISR(1))
			c.tick(10)
			for _, id := range []NodeID{1, 2, 3} {
				require.NotContains(t, c.values(id), "w", "node %d: the acknowledged write is lost", id)
			}
		})
	}
}

// TC-12, KAFKA-10527: a leader restarted after losing its unsynced tail
// must not lead the same epoch again, or two records share an (epoch,
// offset) and epoch-based truncation cannot tell them apart.
func TestTC12NoEpochReuseAfterRestart(t *testing.T) {
	for _, buggy := range bugSettings() {
		t.Run(map[bool]string{false: "refused", true: "reused"}[buggy], func(t *testing.T) {
			c := newCluster(t, 1, 2)
			c.node(1).fsync = logFsyncNever()
			c.start(func(cfg *Config) { cfg.bugs.reuseEpoch = buggy })
			c.elect(1)
			c.stabilize()
			_, err := c.produce(1, AcksAll, "m0")
			require.NoError(t, err)
			c.stabilize()
			c.sync(1)
			_, err = c.produce(1, AcksLeader, "m1")
			require.NoError(t, err)
			c.stabilize()
			require.Equal(t, []string{"m0", "m1"}, c.values(2))

			c.crash(1)
			c.restart(1)
			err = c.stepOn(1, c.leaderAndISR(1)) // the same epoch again
			if !buggy {
				require.ErrorIs(t, err, ErrLeaderEpochReused)
				require.Equal(t, RoleNone, c.status(1).Role)
				return
			}
			require.NoError(t, err)
			c.stabilize()
			_, err = c.produce(1, AcksLeader, "m1-other")
			require.NoError(t, err)
			c.tick(40)
			e1, e2 := c.entries(1), c.entries(2)
			require.Equal(t, e1[1].Epoch, e2[1].Epoch, "the same epoch ...")
			require.NotEqual(t, e1[1].Value, e2[1].Value, "... and offset hold two records")
		})
	}
}
