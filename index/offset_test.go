package index

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

func TestOffsetLookup(t *testing.T) {
	const base = 100
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		empty := newOffset(t, fsys, filepath.Join(dir), base, 4096)
		require.Equal(t, OffsetPosition{base, 0}, empty.Lookup(base+5), "empty index")

		x, err := OpenOffset(fsys, filepath.Join(dir, "1.index"), base, 4096, true)
		require.NoError(t, err)
		defer x.Close()
		for _, e := range []OffsetPosition{{110, 1000}, {120, 2000}, {130, 3000}} {
			require.NoError(t, x.Append(e.Offset, e.Position))
		}
		for _, tc := range []struct {
			name   string
			target int64
			want   OffsetPosition
		}{
			{"below base", 7, OffsetPosition{base, 0}},
			{"min int64", math.MinInt64, OffsetPosition{base, 0}},
			{"base", base, OffsetPosition{base, 0}},
			{"before first entry", 109, OffsetPosition{base, 0}},
			{"exact first", 110, OffsetPosition{110, 1000}},
			{"between", 125, OffsetPosition{120, 2000}},
			{"exact middle", 120, OffsetPosition{120, 2000}},
			{"exact last", 130, OffsetPosition{130, 3000}},
			{"after last", 1 << 40, OffsetPosition{130, 3000}},
			{"max int64", math.MaxInt64, OffsetPosition{130, 3000}},
		} {
			require.Equal(t, tc.want, x.Lookup(tc.target), tc.name)
		}
		require.Equal(t, OffsetPosition{130, 3000}, x.LastEntry())
	})
}

// TestOffsetLookupWarmAndCold checks the warm-section search against a
// linear scan on both sides of the warm boundary (1024 entries from the
// end) and on it.
func TestOffsetLookupWarmAndCold(t *testing.T) {
	const base, n = 5000, 3000
	x := newOffset(t, vfs.NewMem(), "/", base, n*OffsetEntrySize)
	for i := range n {
		require.NoError(t, x.Append(base+int64(3*i+2), uint32(100*(i+1))))
	}
	require.True(t, x.IsFull())
	want := func(target int64) OffsetPosition {
		got := OffsetPosition{Offset: base}
		for i := range n {
			if off := base + int64(3*i+2); off <= target {
				got = OffsetPosition{off, uint32(100 * (i + 1))}
			}
		}
		return got
	}
	hot := int64(base + 3*(n-warmBytes/OffsetEntrySize) + 2) // first warm entry's offset
	for _, target := range []int64{base, base + 1, base + 2, base + 3, base + 100, hot - 4, hot - 1, hot, hot + 1, hot + 2, base + 3*n - 2, base + 3*n + 50} {
		require.Equal(t, want(target), x.Lookup(target), "target %d", target)
	}
	for target := int64(base); target < base+3*n+3; target += 7 {
		require.Equal(t, want(target), x.Lookup(target), "target %d", target)
	}
}

func TestOffsetAppendRules(t *testing.T) {
	const base = 1000
	for _, tc := range []struct {
		name     string
		offset   int64
		position uint32
		want     error // nil: appended
	}{
		{"above last", 1011, 201, nil},
		{"far above last", base + math.MaxInt32, math.MaxInt32, nil},
		{"equal to last", 1010, 300, ErrInvalidOffset},
		{"below last", 1005, 300, ErrInvalidOffset},
		{"below base", 999, 300, ErrOffsetOverflow},
		{"relative offset above 2^31-1", base + math.MaxInt32 + 1, 300, ErrOffsetOverflow},
		{"position equal to last", 1011, 200, ErrInvalidPosition},
		{"position below last", 1011, 100, ErrInvalidPosition},
		{"position above 2^31-1", 1011, math.MaxInt32 + 1, ErrInvalidPosition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newOffset(t, vfs.NewMem(), "/", base, 1024)
			require.NoError(t, x.Append(1010, 200))
			err := x.Append(tc.offset, tc.position)
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, OffsetPosition{tc.offset, tc.position}, x.LastEntry())
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), "00000000000000000000.index")
			require.Equal(t, []OffsetPosition{{1010, 200}}, x.all(), "a failed append changes nothing")
		})
	}
}

func TestOffsetAppendFirstEntry(t *testing.T) {
	x := newOffset(t, vfs.NewMem(), "/", 0, 1024)
	require.ErrorIs(t, x.Append(3, 0), ErrInvalidPosition, "position 0 is never indexed")
	require.NoError(t, x.Append(0, 1), "the base offset itself may be indexed")
}

func TestOffsetFull(t *testing.T) {
	// 30 bytes round down to 3 entries.
	x := newOffset(t, vfs.NewMem(), "/", 0, 30)
	require.Equal(t, 3, x.MaxEntries())
	for i := range 3 {
		require.False(t, x.IsFull())
		require.NoError(t, x.Append(int64(i+1), uint32(10*(i+1))))
	}
	require.True(t, x.IsFull())
	require.ErrorIs(t, x.Append(9, 90), ErrIndexFull)
}

func TestOffsetTruncateTo(t *testing.T) {
	const base = 100
	entries := []OffsetPosition{{110, 1000}, {120, 2000}, {130, 3000}}
	for _, tc := range []struct {
		name   string
		offset int64
		keep   int
	}{
		{"below base removes all", 50, 0},
		{"base removes all", base, 0},
		{"first entry's offset removes it", 110, 0},
		{"between keeps those below", 125, 2},
		{"exact removes it and later", 120, 1},
		{"just above last keeps all", 131, 3},
		{"far above keeps all", math.MaxInt64, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			x := newOffset(t, fsys, "/", base, 1024)
			for _, e := range entries {
				require.NoError(t, x.Append(e.Offset, e.Position))
			}
			require.NoError(t, x.TruncateTo(tc.offset))
			require.Equal(t, entries[:tc.keep], x.all())
			require.NoError(t, x.Close())

			again, err := OpenOffset(fsys, "/00000000000000000000.index", base, 1024, true)
			require.NoError(t, err)
			defer again.Close()
			require.Equal(t, entries[:tc.keep], again.all(), "after reopening")
		})
	}
}

// TestOffsetTruncateDoesNotResurrect checks that entries dropped by a
// truncation stay dropped across a reopen even when the entries appended
// after it are below them: without zeroing, 130 and 140 would follow 127
// as valid entries.
func TestOffsetTruncateDoesNotResurrect(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "x.index")
		x, err := OpenOffset(fsys, name, 100, 1024, true)
		require.NoError(t, err)
		for i, off := range []int64{110, 120, 130, 140} {
			require.NoError(t, x.Append(off, uint32(1000*(i+1))))
		}
		require.NoError(t, x.TruncateTo(125))
		require.NoError(t, x.Append(127, 2500))
		require.NoError(t, x.Close())

		x, err = OpenOffset(fsys, name, 100, 1024, true)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, []OffsetPosition{{110, 1000}, {120, 2000}, {127, 2500}}, x.all())
	})
}

func TestOffsetSealAndReopen(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "00000000000000000042.index")
		const maxBytes = 1000
		x, err := OpenOffset(fsys, name, 42, maxBytes, true)
		require.NoError(t, err)
		require.Equal(t, int64(1000), fileSize(t, fsys, name), "preallocated")
		require.Equal(t, 125, x.MaxEntries())
		entries := []OffsetPosition{{50, 4100}, {60, 8200}, {75, 12300}}
		for _, e := range entries {
			require.NoError(t, x.Append(e.Offset, e.Position))
		}

		require.NoError(t, x.Seal())
		require.Equal(t, int64(3*OffsetEntrySize), fileSize(t, fsys, name), "trimmed on seal")
		require.True(t, x.Sealed())
		require.True(t, x.IsFull())
		require.Equal(t, 3, x.MaxEntries())
		require.Equal(t, 24, x.SizeBytes())
		require.ErrorIs(t, x.Append(80, 20000), ErrSealed)
		require.Equal(t, OffsetPosition{60, 8200}, x.Lookup(70), "lookups work when sealed")
		require.NoError(t, x.Sync())
		require.NoError(t, x.Close())

		sealed, err := OpenOffset(fsys, name, 42, maxBytes, false)
		require.NoError(t, err)
		require.Equal(t, entries, sealed.all())
		require.True(t, sealed.Sealed())
		require.Equal(t, int64(24), fileSize(t, fsys, name), "a sealed open leaves the file as it is")
		require.NoError(t, sealed.Unseal())
		require.Equal(t, int64(1000), fileSize(t, fsys, name), "grown back on unseal")
		require.NoError(t, sealed.Append(80, 20000))
		require.NoError(t, sealed.Close())

		active, err := OpenOffset(fsys, name, 42, maxBytes, true)
		require.NoError(t, err)
		defer active.Close()
		require.Equal(t, append(entries, OffsetPosition{80, 20000}), active.all())
	})
}

func TestOffsetSealEmpty(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "e.index")
		x, err := OpenOffset(fsys, name, 7, 80, true)
		require.NoError(t, err)
		require.NoError(t, x.Seal())
		require.Equal(t, int64(0), fileSize(t, fsys, name))
		require.Equal(t, OffsetPosition{7, 0}, x.Lookup(100))
		require.NoError(t, x.Close())

		x, err = OpenOffset(fsys, name, 7, 80, false)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, 0, x.Entries())
		require.True(t, x.IsFull())
		require.NoError(t, x.Reset(), "reset makes it active")
		require.NoError(t, x.Append(8, 100))
		require.Equal(t, int64(80), fileSize(t, fsys, name))
	})
}

// TestOffsetResetRebuild runs the rebuild sequence of a segment recovery:
// Reset, then Append for each indexed batch, then Seal.
func TestOffsetResetRebuild(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "r.index")
		x, err := OpenOffset(fsys, name, 0, 800, true)
		require.NoError(t, err)
		for i := range 10 {
			require.NoError(t, x.Append(int64(10*(i+1)), uint32(5000*(i+1))))
		}
		require.NoError(t, x.Seal())
		require.NoError(t, x.Reset())
		require.False(t, x.Sealed())
		require.Equal(t, 0, x.Entries())
		require.Equal(t, OffsetPosition{0, 0}, x.Lookup(55))
		rebuilt := []OffsetPosition{{3, 4200}, {7, 8400}}
		for _, e := range rebuilt {
			require.NoError(t, x.Append(e.Offset, e.Position))
		}
		require.NoError(t, x.Close())

		x, err = OpenOffset(fsys, name, 0, 800, true)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, rebuilt, x.all())
	})
}

func TestOffsetRename(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name, deleted := filepath.Join(dir, "a.index"), filepath.Join(dir, "a.index.deleted")
		x, err := OpenOffset(fsys, name, 0, 80, true)
		require.NoError(t, err)
		require.NoError(t, x.Append(1, 100))
		require.NoError(t, x.Rename(deleted))
		require.Equal(t, deleted, x.Name())
		require.NoError(t, x.Append(2, 200), "the mapping survives the rename")
		require.NoError(t, x.Close())

		_, err = fsys.Stat(name)
		require.Error(t, err)
		x, err = OpenOffset(fsys, deleted, 0, 80, false)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, []OffsetPosition{{1, 100}, {2, 200}}, x.all())
	})
}

func TestOffsetClosed(t *testing.T) {
	x := newOffset(t, vfs.NewMem(), "/", 0, 80)
	require.NoError(t, x.Append(1, 100))
	require.NoError(t, x.Close())
	require.ErrorIs(t, x.Close(), ErrClosed)
	require.ErrorIs(t, x.Append(2, 200), ErrClosed)
	require.ErrorIs(t, x.TruncateTo(0), ErrClosed)
	require.ErrorIs(t, x.Seal(), ErrClosed)
	require.ErrorIs(t, x.Sync(), ErrClosed)
	require.Equal(t, OffsetPosition{0, 0}, x.Lookup(5), "a closed index answers as an empty one")
}

func TestOpenArguments(t *testing.T) {
	fsys := vfs.NewMem()
	for _, tc := range []struct {
		name     string
		base     int64
		maxBytes int
		want     error
	}{
		{"max size below one entry", 0, 7, ErrInvalidMaxBytes},
		{"max size above 2^31-1", 0, math.MaxInt32 + 1, ErrInvalidMaxBytes},
		{"negative base offset", -1, 80, ErrInvalidOffset},
		{"base offset too large for relative offsets", math.MaxInt64 - 5, 80, ErrInvalidOffset},
	} {
		_, err := OpenOffset(fsys, "/x.index", tc.base, tc.maxBytes, true)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	_, err := OpenOffset(fsys, "/missing.index", 0, 80, false)
	require.Error(t, err, "a sealed index must exist")
}

// TestOffsetTruncateKafkaSequence is the sequence of Kafka's
// OffsetIndexTest.truncate
// (apache/kafka:storage/src/test/java/org/apache/kafka/storage/internals/log/OffsetIndexTest.java):
// entries (i, i) for i in 1..9, then truncations each followed by an append.
// Its final append of (0, 0) is left out: position 0 is never indexed here.
func TestOffsetTruncateKafkaSequence(t *testing.T) {
	x := newOffset(t, vfs.NewMem(), "/", 0, 10*OffsetEntrySize)
	require.NoError(t, x.Reset())
	for i := int64(1); i < 10; i++ {
		require.NoError(t, x.Append(i, uint32(i)))
	}
	for _, step := range []struct {
		truncateTo int64
		wantLast   OffsetPosition // Lookup(10) after the truncation
		thenAppend int64
	}{
		{12, OffsetPosition{9, 9}, 10}, // past the end: unchanged
		{10, OffsetPosition{9, 9}, 10}, // at the end: drops the entry just appended
		{9, OffsetPosition{8, 8}, 9},
		{5, OffsetPosition{4, 4}, 5},
	} {
		require.NoError(t, x.TruncateTo(step.truncateTo))
		require.Equal(t, step.wantLast, x.Lookup(10), "after truncating to %d", step.truncateTo)
		require.Equal(t, step.wantLast, x.LastEntry())
		require.NoError(t, x.Append(step.thenAppend, uint32(step.thenAppend)))
	}
	require.NoError(t, x.Reset())
	require.Equal(t, 0, x.Entries(), "full truncation leaves no entries")
}
