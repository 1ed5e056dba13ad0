package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The high watermark is the lowest log end of the leader and of every
// follower that holds it back: maximal ISR members, and caught-up
// followers outside it that still fetch (Partition.maybeIncrementLeaderHW,
// where Kafka asks isReplicaIsrEligible).
func TestHighWatermarkRule(t *testing.T) {
	const now, lag, window = 100, 30, 5
	f := func(id NodeID, leo, lastCaughtUp int64) *follower {
		return &follower{id: id, leo: leo, lastCaughtUp: lastCaughtUp, lastFetchTime: now}
	}
	stopped := func(id NodeID, leo, lastCaughtUp int64) *follower {
		s := f(id, leo, lastCaughtUp)
		s.lastFetchTime = now - window - 1
		return s
	}
	for _, tc := range []struct {
		name      string
		followers []*follower
		maximal   []NodeID
		want      int64
	}{
		{"leader alone", nil, []NodeID{1}, 50},
		{"the slowest ISR member", []*follower{f(2, 40, now), f(3, 45, now)}, []NodeID{1, 2, 3}, 40},
		{"an ISR member that never fetched in this epoch", []*follower{f(2, -1, now), f(3, 45, now)}, []NodeID{1, 2, 3}, -1},
		{"a lagging non-ISR follower does not count", []*follower{f(2, 48, now), f(3, 10, never)}, []NodeID{1, 2}, 48},
		{"a caught-up non-ISR follower holds it back", []*follower{f(2, 48, now), f(3, 44, now-lag)}, []NodeID{1, 2}, 44},
		{"one caught up to the end counts however old", []*follower{f(3, 50, never)}, []NodeID{1}, 50},
		{"just past the lag it no longer counts", []*follower{f(3, 20, now-lag-1)}, []NodeID{1}, 50},
		{"a pending member of the maximal ISR counts", []*follower{f(3, 20, never)}, []NodeID{1, 3}, 20},
		{"followers ahead of the leader do not raise it", []*follower{f(2, 70, now)}, []NodeID{1, 2}, 50},
		{"a caught-up non-ISR follower that stopped fetching does not", []*follower{f(2, 48, now), stopped(3, 44, now)}, []NodeID{1, 2}, 48},
		{"an ISR member that stopped fetching still does", []*follower{stopped(2, 40, now)}, []NodeID{1, 2}, 40},
	} {
		require.Equal(t, tc.want, highWatermark(50, 50, tc.followers, tc.maximal, now, lag, window, false), tc.name)
	}
	// With SyncedAcks what the leader and its followers synced counts.
	fs := []*follower{{id: 2, leo: 48, synced: 30, lastCaughtUp: now}}
	require.EqualValues(t, 48, highWatermark(50, 50, fs, []NodeID{1, 2}, now, lag, window, false))
	require.EqualValues(t, 30, highWatermark(50, 50, fs, []NodeID{1, 2}, now, lag, window, true))
	require.EqualValues(t, 25, highWatermark(25, 50, fs, []NodeID{1, 2}, now, lag, window, true), "the leader synced only 25")
}

// A follower's caught-up time follows Replica.updateFetchStateOrThrow: now
// if it fetched at the leader's end, the previous fetch's time if it
// fetched at least where the leader's end was then, else unchanged.
func TestFollowerFetchStateRule(t *testing.T) {
	p := &Partition{written: 100}
	f := &follower{id: 2, leo: -1, lastCaughtUp: never, lastFetchTime: never, lastFetchLeaderLEO: -1}

	p.now = 10
	p.updateFollower(f, &Fetch{FetchOffset: 60})
	require.EqualValues(t, 10, f.lastFetchTime)
	require.EqualValues(t, never, f.lastCaughtUp, "behind the end, first fetch")
	require.EqualValues(t, 100, f.lastFetchLeaderLEO)

	p.now, p.written = 20, 130
	p.updateFollower(f, &Fetch{FetchOffset: 100})
	require.EqualValues(t, 10, f.lastCaughtUp, "it reached where the end was at its last fetch")

	p.now = 30
	p.updateFollower(f, &Fetch{FetchOffset: 120})
	require.EqualValues(t, 10, f.lastCaughtUp, "not where the end was at its last fetch (130)")

	p.now = 40
	p.updateFollower(f, &Fetch{FetchOffset: 130})
	require.EqualValues(t, 40, f.lastCaughtUp, "at the end: caught up now")
	require.True(t, f.fetchedThisEpoch)
	require.EqualValues(t, 130, f.leo)
}

// The follower's truncation point (AbstractFetcherThread
// .getOffsetTruncationState, KIP-279), against a follower log of epochs
// (0 at 0, 2 at 5, 4 at 8) ending at 10.
func TestTruncationOffsetRule(t *testing.T) {
	c := newCluster(t, 1).start(nil)
	c.seed(1, 0, "0:a", "0:b", "0:c", "0:d", "0:e", "2:f", "2:g", "2:h", "4:i", "4:j")
	p := c.node(1).p
	require.NoError(t, p.refresh())
	for _, tc := range []struct {
		name        string
		epoch       int32
		end, want   int64
		pre279Wants int64
	}{
		{"no epoch in the answer", -1, 7, 7, 7},
		{"the same epoch, the leader's ends first", 2, 6, 6, 6},
		{"the same epoch, ours ends first", 2, 9, 8, 9},
		{"an epoch we lack: our end of the one below", 3, 9, 8, 9},
		{"no epoch, the leader ending past ours", -1, 20, 10, 10},
		{"an epoch both have, the leader ending past ours", 0, 20, 5, 10},
	} {
		p.cfg.bugs.pre279 = false
		got, err := p.truncationOffset(tc.epoch, tc.end)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, tc.name)
		if bugsBuild {
			p.cfg.bugs.pre279 = true
			got, err = p.truncationOffset(tc.epoch, tc.end)
			require.NoError(t, err)
			require.Equal(t, tc.pre279Wants, got, "pre-279: %s", tc.name)
		}
	}
}
