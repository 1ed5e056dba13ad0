package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The failure scenarios of KIP-101, KIP-279, KIP-320 and the KAFKA issues
// named, each as the KIP or issue tells it. Node numbers stand for the letters: A=1, B=2, C=3.

// TC-1, KIP-101 scenario 1: "A fetches m2 from the leader B ... has not yet
// got confirmation ... A restarts. It truncates its log to the high
// watermark ... B then fails and A becomes the new leader. Message m2 has
// been lost permanently." With epochs A keeps m1 (here m1 is KIP's m2); with
// the old rule switched back on the acknowledged record is lost.
func TestTC1HighWatermarkTruncationLosesAnAckedRecord(t *testing.T) {
	for _, buggy := range bugSettings() {
		t.Run(map[bool]string{false: "epochs", true: "truncate-to-hw"}[buggy], func(t *testing.T) {
			c := newCluster(t, 1, 2).start(func(cfg *Config) { cfg.bugs.truncateToHighWatermark = buggy })
			c.elect(2)
			c.stabilize()
			m0, err := c.produce(2, AcksAll, "m0")
			require.NoError(t, err)
			c.stabilize()
			c.tick(6) // both learn HW 1
			require.NoError(t, c.result(m0).Err)
			require.EqualValues(t, 1, c.hw(1))

			m1, err := c.produce(2, AcksAll, "m1")
			require.NoError(t, err)
			// A fetches m1; its next fetch moves B's HW to 2 and m1 is
			// acknowledged; the response, with HW 1, never reaches A.
			c.deliverUntil(func() bool { _, ok := c.results[m1]; return ok })
			require.NoError(t, c.result(m1).Err)
			require.EqualValues(t, 1, c.hw(1), "A's HW lags a round trip")
			c.crash(1)
			c.restart(1)
			c.queue = append(c.queue, c.leaderAndISR(1)) // A rejoins as follower
			c.deliverUntil(func() bool { return c.status(1).Role == RoleFollower })
			c.flush()
			c.crash(2) // before A's fetch is answered
			c.elect(1, 1)
			c.stabilize()
			require.Equal(t, RoleLeader, c.status(1).Role)
			if buggy {
				require.NotContains(t, c.values(1), "m1", "the old rule loses the acknowledged m1")
				return
			}
			require.Equal(t, []string{"m0", "m1"}, c.values(1), "the new leader has every acknowledged record")
			c.restart(2)
			c.elect(1)
			c.stabilize()
			c.tick(10)
			require.Equal(t, []string{"m0", "m1"}, c.values(2))
			c.requireLogsMatch(1, 2)
		})
	}
}

// TC-2, KIP-101 scenario 2: after both replicas crash with B's tail
// unsynced, B leads with a different record at offset 1; A, which kept m1,
// must truncate to where B's epoch 1 ends instead of keeping a divergent
// log ("the replicas can diverge, with different message lineage").
func TestTC2ReplicasDivergeAfterTwoCrashes(t *testing.T) {
	c := newCluster(t, 1, 2)
	c.node(2).fsync = logFsyncNever()
	c.start(nil)
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksAll, "m0")
	require.NoError(t, err)
	c.stabilize()
	c.sync(2)
	m1, err := c.produce(1, AcksAll, "m1")
	require.NoError(t, err)
	c.stabilize()
	require.NoError(t, c.result(m1).Err)
	require.Equal(t, []string{"m0", "m1"}, c.values(2))

	c.crash(1)
	c.crash(2) // B loses m1
	c.restart(2)
	require.Equal(t, []string{"m0"}, c.values(2))
	c.elect(2, 2) // unclean: B alone
	c.stabilize()
	_, err = c.produce(2, AcksLeader, "m2")
	require.NoError(t, err)
	c.stabilize()
	c.restart(1)
	c.queue = append(c.queue, c.leaderAndISR(1))
	c.stabilize()
	c.tick(10)
	require.Equal(t, []string{"m0", "m2"}, c.values(1), "A truncated m1 and took m2")
	require.Equal(t, c.entries(2), c.entries(1))
}

// TC-3, KIP-279: fast leader changes. A never learns of epoch 2, in which B
// wrote m2 at offset 1; A leads epoch 3 with m1 at offset 1. B must truncate
// to the end of epoch 1 in its own log (1), not to where A's epoch 1 ends
// (2); the pre-279 answer, without the epoch, keeps m2 and the logs fork.
func TestTC3FastFailoversNeedTheEpochInTheAnswer(t *testing.T) {
	for _, buggy := range bugSettings() {
		t.Run(map[bool]string{false: "kip-279", true: "pre-279"}[buggy], func(t *testing.T) {
			c := newCluster(t, 1, 2).start(func(cfg *Config) { cfg.bugs.pre279 = buggy })
			c.elect(1)
			c.stabilize()
			_, err := c.produce(1, AcksAll, "m0")
			require.NoError(t, err)
			c.stabilize()
			c.tick(6)

			// B does not fetch m1.
			c.drop = func(m Message) bool { return m.Head().From == 2 || m.Head().To == 2 }
			_, err = c.produce(1, AcksLeader, "m1")
			require.NoError(t, err)
			c.stabilize()
			c.drop = nil
			c.queue = nil // B's fetch is lost

			c.electOnly(2, []NodeID{1, 2}, 2) // A misses epoch 2
			c.stabilize()
			_, err = c.produce(2, AcksLeader, "m2")
			require.NoError(t, err)
			c.stabilize()
			require.Equal(t, []entry{{0, 1, "m0"}, {1, 2, "m2"}}, c.entries(2))

			c.crash(2)
			c.electOnly(1, []NodeID{1, 2}, 1)
			c.stabilize()
			_, err = c.produce(1, AcksLeader, "m3")
			require.NoError(t, err)
			c.stabilize()
			require.Equal(t, []entry{{0, 1, "m0"}, {1, 1, "m1"}, {2, 3, "m3"}}, c.entries(1))

			c.restart(2)
			c.queue = append(c.queue, c.leaderAndISR(2))
			c.stabilize()
			c.tick(10)
			if buggy {
				require.Equal(t, "m2", c.values(2)[1], "without the epoch B keeps m2 where A has m1")
				require.NotEqual(t, c.entries(1), c.entries(2))
				return
			}
			require.Equal(t, c.entries(1), c.entries(2))
		})
	}
}

// TC-4, AbstractFetcherThreadTest.testTruncation: logs with no epoch in
// common but the records' offsets. The follower asks three times, each
// answer naming an older epoch, until it truncates everything.
func TestTC4IterativeTruncationOverDisjointEpochs(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.seed(1, 0, "1:a", "3:b", "5:c")
	c.seed(2, 0, "0:x", "2:y", "4:z")
	c.ctl.leaderEpoch = 5
	c.elect(1) // epoch 6
	var diverging []int32
	c.drop = func(m Message) bool {
		if r, ok := m.(*FetchResponse); ok && r.DivergingEpoch >= 0 {
			diverging = append(diverging, r.DivergingEpoch)
		}
		return false
	}
	c.stabilize()
	require.Equal(t, []int32{3, 1, 0}, diverging, "the leader answers epochs 3, then 1, then 0")
	require.Equal(t, c.entries(1), c.entries(2))
	c.tick(10)
	s1, s2 := c.status(1), c.status(2)
	require.Equal(t, s1.LogStartOffset, s2.LogStartOffset)
	require.Equal(t, s1.LogEndOffset, s2.LogEndOffset)
	require.EqualValues(t, 3, c.hw(1))
	require.EqualValues(t, 3, c.hw(2))
}

// TC-5, testDivergingEpochs: the leader's diverging answer (2, 2) makes the
// follower truncate c; it applies neither records nor the high watermark
// of that response (KAFKA-14704), then fetches d.
func TestTC5DivergingEpochOnFetch(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.seed(1, 3, "0:a", "2:b", "5:d")
	c.seed(2, 0, "0:a", "2:b", "4:c")
	c.ctl.leaderEpoch = 5
	c.elect(1)
	var sawDiverging bool
	c.drop = func(m Message) bool {
		if r, ok := m.(*FetchResponse); ok && r.DivergingEpoch >= 0 {
			require.Equal(t, int32(2), r.DivergingEpoch)
			require.EqualValues(t, 2, r.DivergingEndOffset)
			require.EqualValues(t, 3, r.HighWatermark, "the answer carries the leader's HW")
			sawDiverging = true
		}
		return false
	}
	c.deliverUntil(func() bool { return sawDiverging })
	c.deliverOne() // the diverging response
	c.flush()
	require.EqualValues(t, 0, c.hw(2), "the HW of a diverging response is not applied")
	require.Equal(t, []string{"a", "b"}, c.values(2))
	c.stabilize()
	require.Equal(t, c.entries(1), c.entries(2))
}

// TC-6, Vanlightly's cases A to D: a follower behind with the same or
// older epochs keeps its log; one ahead in an epoch the leader has
// truncates to where the leader's epoch ends; one with an epoch the
// leader lacks truncates to the end of its own epoch below.
func TestTC6FollowerBehindOrAhead(t *testing.T) {
	for _, tc := range []struct {
		name             string
		leader, follower []string
		want             []string
	}{
		{"A behind, same epoch", []string{"1:a", "1:b", "1:c"}, []string{"1:a"}, []string{"a", "b", "c"}},
		{"B behind, leader has later epochs", []string{"1:a", "2:b", "3:c"}, []string{"1:a"}, []string{"a", "b", "c"}},
		{"C ahead in the leader's epoch", []string{"1:a", "1:b"}, []string{"1:a", "1:b", "1:x", "1:y"}, []string{"a", "b"}},
		{"D ahead in an epoch the leader lacks", []string{"1:a", "1:b", "3:c"}, []string{"1:a", "1:b", "2:x", "2:y"}, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, 2).start(nil)
			c.seed(1, 0, tc.leader...)
			c.seed(2, 0, tc.follower...)
			c.ctl.leaderEpoch = 3
			c.elect(1)
			c.stabilize()
			require.Equal(t, tc.want, c.values(2))
			require.Equal(t, c.entries(1), c.entries(2))
		})
	}
}
