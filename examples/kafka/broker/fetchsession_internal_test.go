package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testSessions is a session cache of slots on a clock the test moves, with
// ids 1, 2, 3...
func testSessions(slots int) (*fetchSessions, *time.Time) {
	c := newFetchSessions(slots)
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	var id int32
	c.newID = func() int32 { id++; return id }
	return c, &now
}

func sessionOf(c *fetchSessions, privileged bool, size int) int32 {
	parts := make([]*sessionPartition, size)
	for i := range parts {
		parts[i] = &sessionPartition{key: sessionKey{topic: "t", partition: int32(i)}}
	}
	return c.create(privileged, false, parts)
}

// TestFetchSessionEviction checks FetchSessionCache.tryEvict's rules: a
// full cache takes a new session only by evicting a session unused for
// longer than the eviction age (whatever its size), or, among sessions
// created longer ago than that, the least valuable if the new one is worth
// more (larger; a follower's over a consumer's); a follower's session may
// evict a consumer's at any age.
func TestFetchSessionEviction(t *testing.T) {
	c, now := testSessions(2)
	small := sessionOf(c, false, 2)
	large := sessionOf(c, false, 5)
	require.EqualValues(t, 1, small)
	require.EqualValues(t, 2, large)

	require.Zero(t, sessionOf(c, false, 100), "young sessions are not evicted by a consumer's")

	*now = now.Add(fetchSessionEvictionAge + time.Second)
	c.sessions[small].used = *now
	c.sessions[large].used = *now
	require.Zero(t, sessionOf(c, false, 2), "not worth more than the least valuable: same size, lower id")
	third := sessionOf(c, false, 3)
	require.NotZero(t, third, "larger than the least valuable, which is old enough")
	require.NotContains(t, c.sessions, small)
	require.Contains(t, c.sessions, large)
	require.EqualValues(t, 1, c.stats().Evictions)

	// A session unused for longer than the eviction age goes first, even
	// a large one, for a small one.
	*now = now.Add(fetchSessionEvictionAge / 2)
	c.sessions[third].used = *now
	*now = now.Add(fetchSessionEvictionAge/2 + 2*time.Second)
	fourth := sessionOf(c, false, 1)
	require.NotZero(t, fourth)
	require.NotContains(t, c.sessions, large, "the stale session")
	require.Contains(t, c.sessions, third)

	// A follower's session evicts a consumer's at once; a consumer's
	// cannot evict a young follower's.
	f, _ := testSessions(1)
	consumer := sessionOf(f, false, 10)
	follower := sessionOf(f, true, 1)
	require.NotZero(t, follower)
	require.NotContains(t, f.sessions, consumer)
	require.Zero(t, sessionOf(f, false, 50))
}

// TestFetchSessionEpochWraps: after the largest epoch comes 1, never 0,
// which would ask for a new session.
func TestFetchSessionEpochWraps(t *testing.T) {
	require.EqualValues(t, 1, nextEpoch(0))
	require.EqualValues(t, 8, nextEpoch(7))
	require.EqualValues(t, 1, nextEpoch(1<<31-1))
}

// TestNoFetchSessions: a cache of no slots never creates a session.
func TestNoFetchSessions(t *testing.T) {
	c, _ := testSessions(-1)
	require.Zero(t, sessionOf(c, false, 1))
	require.Zero(t, c.stats().Sessions)
}
