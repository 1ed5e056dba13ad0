package index

import (
	"bytes"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func zeros(n int) []byte { return make([]byte, n) }

// TestOpenOffsetSanity opens offset index files as a crash or a bad disk
// may leave them. The entry count comes from the contents; anything
// inconsistent is ErrCorrupt naming the file and the entry.
func TestOpenOffsetSanity(t *testing.T) {
	valid := offsetBytes(10, 4100, 20, 8200, 30, 12300)
	for _, tc := range []struct {
		name    string
		file    []byte
		entries int    // when ok
		corrupt string // when ErrCorrupt: part of the message
	}{
		{name: "empty file", file: nil, entries: 0},
		{name: "exact length", file: valid, entries: 3},
		{name: "preallocated zero tail", file: cat(valid, zeros(800)), entries: 3},
		{name: "all zero", file: zeros(800), entries: 0},
		{name: "first entry relative offset 0", file: offsetBytes(0, 4100), entries: 1},
		{name: "length not a multiple of 8", file: cat(valid, zeros(3)), corrupt: "length 27 bytes is not a multiple of the 8-byte entry"},
		{name: "torn: an entry after an unused slot", file: cat(valid, zeros(16), offsetBytes(40, 16400)), corrupt: "entry 3 (byte 24) is unused but byte 43 (in entry 5) after it is not zero"},
		{name: "stray byte in the tail", file: cat(valid, zeros(100), []byte{1}, zeros(3)), corrupt: "entry 3 (byte 24) is unused but byte 124 (in entry 15)"},
		{name: "offsets go backwards", file: cat(offsetBytes(10, 4100, 20, 8200, 15, 12300), zeros(8)), corrupt: "entry 2 (byte 16): relative offset 15 is not above 20 of entry 1"},
		{name: "offset repeats", file: offsetBytes(10, 4100, 10, 8200), corrupt: "entry 1 (byte 8): relative offset 10 is not above 10"},
		{name: "positions go backwards", file: offsetBytes(10, 4100, 20, 4000), corrupt: "entry 1 (byte 8): position 4000 is not above 4100"},
		{name: "garbage in the middle", file: cat(valid, offsetBytes(0xdeadbeef, 0xfeedface), valid), corrupt: "entry 3 (byte 24): relative offset 3735928559 exceeds 2^31-1"},
		{name: "position above 2^31-1", file: offsetBytes(10, 0x80000000), corrupt: "entry 0 (byte 0): position 2147483648 exceeds 2^31-1"},
		{name: "first entry at position 0", file: offsetBytes(5, 0), corrupt: "entry 0 (byte 0): position 0 is never indexed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, active := range []bool{true, false} {
				fsys := vfs.NewMem()
				const name = "/00000000000000000100.index"
				writeFile(t, fsys, name, tc.file)
				x, err := OpenOffset(fsys, name, 100, 800, active)
				if tc.corrupt != "" {
					require.ErrorIs(t, err, ErrCorrupt, "active=%v", active)
					require.ErrorContains(t, err, name)
					require.ErrorContains(t, err, tc.corrupt)
					continue
				}
				require.NoError(t, err, "active=%v", active)
				require.Equal(t, tc.entries, x.Entries(), "active=%v", active)
				if active {
					require.Equal(t, int64(max(800, tc.entries*OffsetEntrySize)), fileSize(t, fsys, name), "preallocated to the maximum")
				} else {
					require.Equal(t, int64(len(tc.file)), fileSize(t, fsys, name), "sealed open keeps the file as it is")
				}
				require.NoError(t, x.Close())
			}
		})
	}
}

func TestOpenTimeSanity(t *testing.T) {
	valid := cat(timeBytes(1000, 5), timeBytes(2000, 9), timeBytes(3000, 9))
	for _, tc := range []struct {
		name    string
		file    []byte
		entries int
		corrupt string
	}{
		{name: "empty file", file: nil, entries: 0},
		{name: "exact length", file: valid, entries: 3},
		{name: "preallocated zero tail", file: cat(valid, zeros(120)), entries: 3},
		{name: "timestamp 0 after the base offset", file: timeBytes(0, 1), entries: 1},
		{name: "length not a multiple of 12", file: cat(valid, zeros(8)), corrupt: "length 44 bytes is not a multiple of the 12-byte entry"},
		{name: "torn: an entry after an unused slot", file: cat(valid, zeros(12), timeBytes(4000, 10)), corrupt: "entry 3 (byte 36) is unused but byte 54 (in entry 4) after it is not zero"},
		{name: "timestamps repeat", file: cat(timeBytes(1000, 5), timeBytes(1000, 6)), corrupt: "entry 1 (byte 12): timestamp 1000 is not above 1000 of entry 0"},
		{name: "offsets go backwards", file: cat(timeBytes(1000, 5), timeBytes(2000, 4)), corrupt: "entry 1 (byte 12): relative offset 4 is below 5 of entry 0"},
		{name: "negative timestamp", file: timeBytes(-5, 1), corrupt: "entry 0 (byte 0): timestamp -5 is negative"},
		{name: "relative offset above 2^31-1", file: cat(valid, timeBytes(4000, math.MaxUint32)), corrupt: "entry 3 (byte 36): relative offset 4294967295 exceeds 2^31-1"},
		{name: "zero entry then valid one", file: cat(timeBytes(0, 0), timeBytes(7, 1)), corrupt: "entry 0 (byte 0) is unused but byte 19 (in entry 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, active := range []bool{true, false} {
				fsys := vfs.NewMem()
				const name = "/00000000000000000100.timeindex"
				writeFile(t, fsys, name, tc.file)
				x, err := OpenTime(fsys, name, 100, 120, active)
				if tc.corrupt != "" {
					require.ErrorIs(t, err, ErrCorrupt, "active=%v", active)
					require.ErrorContains(t, err, name)
					require.ErrorContains(t, err, tc.corrupt)
					continue
				}
				require.NoError(t, err, "active=%v", active)
				require.Equal(t, tc.entries, x.Entries(), "active=%v", active)
				require.NoError(t, x.Close())
			}
		})
	}
}

// TestOpenHugeFile gives an index a sparse 3 GiB length: open must reject
// it from the length alone, without mapping or reading it.
func TestOpenHugeFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "huge.index")
	f, err := vfs.Default.Create(name)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(3<<30))
	require.NoError(t, f.Close())
	for _, active := range []bool{true, false} {
		_, err = OpenOffset(vfs.Default, name, 0, 1<<20, active)
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, "length 3221225472 bytes exceeds the 2147483647-byte limit")
		_, err = OpenTime(vfs.Default, name, 0, 1<<20, active)
		require.ErrorIs(t, err, ErrCorrupt)
	}
}

// TestOpenLongerThanMax opens an active index whose file is longer than
// the maximum size, as after a configuration change: it shrinks to the
// maximum if the entries fit, and otherwise keeps them all and is full.
func TestOpenLongerThanMax(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "long.index")
		writeFile(t, fsys, name, cat(offsetBytes(1, 100, 2, 200), zeros(984)))
		x, err := OpenOffset(fsys, name, 0, 80, true)
		require.NoError(t, err)
		require.Equal(t, int64(80), fileSize(t, fsys, name))
		require.Equal(t, 10, x.MaxEntries())
		require.NoError(t, x.Close())

		writeFile(t, fsys, name, offsetBytes(1, 100, 2, 200, 3, 300))
		x, err = OpenOffset(fsys, name, 0, 16, true)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, 3, x.Entries())
		require.True(t, x.IsFull())
		require.Equal(t, OffsetPosition{3, 300}, x.Lookup(9))
	})
}

// TestCorruptThenRebuild runs what a segment does on ErrCorrupt: remove
// the file, open it again (empty) and append the entries from the log.
func TestCorruptThenRebuild(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "c.index")
		writeFile(t, fsys, name, offsetBytes(10, 100, 5, 200))
		_, err := OpenOffset(fsys, name, 0, 80, true)
		require.ErrorIs(t, err, ErrCorrupt)

		require.NoError(t, fsys.Remove(name))
		x, err := OpenOffset(fsys, name, 0, 80, true)
		require.NoError(t, err)
		defer x.Close()
		require.Equal(t, 0, x.Entries())
		require.NoError(t, x.Append(10, 100))
		require.NoError(t, x.Append(15, 200))
		require.Equal(t, OffsetPosition{10, 100}, x.Lookup(12))
	})
}
