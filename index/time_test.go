package index

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

func TestTimeLookup(t *testing.T) {
	const base = 100
	x := newTime(t, vfs.NewMem(), "/", base, 1200)
	require.Equal(t, TimestampOffset{NoTimestamp, base}, x.Lookup(5000), "empty index")
	require.Equal(t, TimestampOffset{NoTimestamp, base}, x.LastEntry(), "empty index")
	for _, e := range []TimestampOffset{{1000, 105}, {2000, 110}, {3000, 110}} {
		require.NoError(t, x.MaybeAppend(e.Timestamp, e.Offset, false))
	}
	for _, tc := range []struct {
		name   string
		target int64
		want   TimestampOffset
	}{
		{"no timestamp", NoTimestamp, TimestampOffset{NoTimestamp, base}},
		{"min int64", math.MinInt64, TimestampOffset{NoTimestamp, base}},
		{"before first entry", 999, TimestampOffset{NoTimestamp, base}},
		{"exact first", 1000, TimestampOffset{1000, 105}},
		{"between", 2500, TimestampOffset{2000, 110}},
		{"exact last", 3000, TimestampOffset{3000, 110}},
		{"after last", math.MaxInt64, TimestampOffset{3000, 110}},
	} {
		require.Equal(t, tc.want, x.Lookup(tc.target), tc.name)
	}
	require.Equal(t, TimestampOffset{3000, 110}, x.LastEntry())
}

func TestTimeLookupWarmAndCold(t *testing.T) {
	const base, n = 0, 2000
	x := newTime(t, vfs.NewMem(), "/", base, n*TimeEntrySize)
	for i := range n {
		require.NoError(t, x.MaybeAppend(int64(10*(i+1)), int64(i), true))
	}
	for target := int64(-3); target < 10*n+20; target += 3 {
		want := TimestampOffset{NoTimestamp, base}
		if i := target/10 - 1; i >= 0 {
			want = TimestampOffset{10 * (min(i, n-1) + 1), min(i, n-1)}
		}
		require.Equal(t, want, x.Lookup(target), "target %d", target)
	}
}

// TestTimeMaybeAppend ports the rules of Kafka's TimeIndex.maybeAppend
// (apache/kafka:storage/.../log/TimeIndex.java and TimeIndexTest.scala).
// The index holds (1000, 110) when each case runs.
func TestTimeMaybeAppend(t *testing.T) {
	const base = 100
	for _, tc := range []struct {
		name      string
		timestamp int64
		offset    int64
		want      error
		appended  bool
	}{
		{"larger timestamp and offset", 1001, 111, nil, true},
		{"larger timestamp, same offset", 1001, 110, nil, true},
		{"same entry again (roll then close)", 1000, 110, nil, false},
		{"same timestamp, larger offset", 1000, 200, nil, false},
		{"offset goes backwards", 2000, 109, ErrInvalidOffset, false},
		{"timestamp goes backwards", 999, 111, ErrInvalidTimestamp, false},
		{"offset below base", 2000, 99, ErrOffsetOverflow, false},
		{"relative offset above 2^31-1", 2000, base + math.MaxInt32 + 1, ErrOffsetOverflow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTime(t, vfs.NewMem(), "/", base, 120)
			require.NoError(t, x.MaybeAppend(1000, 110, false))
			err := x.MaybeAppend(tc.timestamp, tc.offset, false)
			require.ErrorIs(t, err, tc.want)
			want := []TimestampOffset{{1000, 110}}
			if tc.appended {
				want = append(want, TimestampOffset{tc.timestamp, tc.offset})
			}
			require.Equal(t, want, x.all())
		})
	}
}

func TestTimeMaybeAppendFirstEntry(t *testing.T) {
	const base = 100
	x := newTime(t, vfs.NewMem(), "/", base, 120)
	require.NoError(t, x.MaybeAppend(NoTimestamp, base+3, false))
	require.Equal(t, 0, x.Entries(), "records without timestamps are not indexed")
	require.NoError(t, x.MaybeAppend(0, base, false))
	require.Equal(t, 0, x.Entries(), "timestamp 0 at the base offset is indistinguishable from an unused slot")
	require.NoError(t, x.MaybeAppend(0, base+1, false))
	require.Equal(t, []TimestampOffset{{0, base + 1}}, x.all())
}

// TestTimeRollEntry checks that IsFull keeps one slot for the entry the
// segment appends when it rolls.
func TestTimeRollEntry(t *testing.T) {
	x := newTime(t, vfs.NewMem(), "/", 0, 3*TimeEntrySize)
	require.NoError(t, x.MaybeAppend(10, 1, false))
	require.False(t, x.IsFull())
	require.NoError(t, x.MaybeAppend(20, 2, false))
	require.True(t, x.IsFull(), "one slot left, kept for the roll entry")
	require.ErrorIs(t, x.MaybeAppend(30, 3, false), ErrIndexFull)
	require.NoError(t, x.MaybeAppend(30, 3, true), "the roll entry skips the full check")
	require.NoError(t, x.MaybeAppend(30, 3, true), "the same roll entry again at close is ignored")
	require.ErrorIs(t, x.MaybeAppend(40, 4, true), ErrIndexFull, "no slot left at all")
	require.NoError(t, x.Seal())
	require.Equal(t, TimestampOffset{30, 3}, x.LastEntry(), "the roll entry holds the segment's largest timestamp")
	require.ErrorIs(t, x.MaybeAppend(40, 4, true), ErrSealed)
}

// TestTimeTruncateTo truncates on the offset column, whose values may
// repeat: every entry at or above the offset goes.
func TestTimeTruncateTo(t *testing.T) {
	entries := []TimestampOffset{{10, 5}, {20, 5}, {30, 8}, {40, 9}}
	for _, tc := range []struct {
		offset int64
		keep   int
	}{
		{0, 0}, {5, 0}, {6, 2}, {8, 2}, {9, 3}, {10, 4}, {math.MaxInt64, 4},
	} {
		t.Run(fmt.Sprintf("offset=%d", tc.offset), func(t *testing.T) {
			forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
				name := filepath.Join(dir, "t.timeindex")
				x, err := OpenTime(fsys, name, 0, 120, true)
				require.NoError(t, err)
				for _, e := range entries {
					require.NoError(t, x.MaybeAppend(e.Timestamp, e.Offset, false))
				}
				require.NoError(t, x.TruncateTo(tc.offset))
				require.Equal(t, entries[:tc.keep], x.all(), "truncate to %d", tc.offset)
				require.NoError(t, x.Close())

				x, err = OpenTime(fsys, name, 0, 120, true)
				require.NoError(t, err)
				defer x.Close()
				require.Equal(t, entries[:tc.keep], x.all(), "truncate to %d, reopened", tc.offset)
			})
		})
	}
}

func TestTimeSealAndReopen(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "00000000000000000042.timeindex")
		x, err := OpenTime(fsys, name, 42, 1200, true)
		require.NoError(t, err)
		require.Equal(t, int64(1200), fileSize(t, fsys, name))
		entries := []TimestampOffset{{1000, 50}, {2000, 60}}
		for _, e := range entries {
			require.NoError(t, x.MaybeAppend(e.Timestamp, e.Offset, false))
		}
		require.NoError(t, x.Seal())
		require.Equal(t, int64(24), fileSize(t, fsys, name))
		require.NoError(t, x.Close())

		x, err = OpenTime(fsys, name, 42, 1200, false)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, entries, x.all())
		require.Equal(t, TimestampOffset{1000, 50}, x.Lookup(1999))
		require.NoError(t, x.Reset())
		require.Equal(t, int64(1200), fileSize(t, fsys, name))
		require.Equal(t, TimestampOffset{NoTimestamp, 42}, x.LastEntry())
	})
}
