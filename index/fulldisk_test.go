package index

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// fullDisk makes every write to the files named fail with ENOSPC while it
// is set, as a file system that cannot allocate their next page does.
func fullDisk(fsys *vfs.MemFS, names ...string) (full func(bool)) {
	on := false
	fsys.SetHook(func(op vfs.Op) error {
		for _, name := range names {
			if on && op.Kind == vfs.OpWrite && op.Name == name {
				return syscall.ENOSPC
			}
		}
		return nil
	})
	return func(b bool) { on = b }
}

// TestAppendOnFullDiskIsAnError: an entry past the allocated part of the
// file, which the file system has no room to allocate, fails the append
// with ENOSPC (where a store through the mapping would fault), changes
// nothing, and the index appends again once there is room.
func TestAppendOnFullDiskIsAnError(t *testing.T) {
	fsys := vfs.NewMem()
	require.NoError(t, fsys.MkdirAll("/seg", 0o755))
	x := newOffset(t, fsys, "/seg", 0, 4*minAllocBytes)
	ti := newTime(t, fsys, "/seg", 0, 4*minAllocBytes)
	full := fullDisk(fsys, x.Name(), ti.Name())
	// Fill the first allocated part of each file.
	n := minAllocBytes / OffsetEntrySize
	for i := 1; i <= n; i++ {
		require.NoError(t, x.Append(int64(i), uint32(i)))
	}
	for i := 1; i <= minAllocBytes/TimeEntrySize; i++ {
		require.NoError(t, ti.MaybeAppend(int64(i), int64(i), false))
	}
	lastTime := ti.LastEntry()

	full(true)
	require.ErrorIs(t, x.Append(int64(n+1), uint32(n+1)), syscall.ENOSPC)
	require.ErrorIs(t, ti.MaybeAppend(1<<20, 1<<20, false), syscall.ENOSPC)
	require.ErrorIs(t, ti.MaybeAppend(1<<20, 1<<20, true), syscall.ENOSPC, "the roll entry too")
	require.Equal(t, n, x.Entries())
	require.Equal(t, OffsetPosition{int64(n), uint32(n)}, x.Lookup(1<<30))
	require.Equal(t, lastTime, ti.LastEntry())
	require.Equal(t, lastTime, ti.Lookup(1<<30))

	full(false)
	require.NoError(t, x.Append(int64(n+1), uint32(n+1)))
	require.NoError(t, ti.MaybeAppend(1<<20, 1<<20, false))
	require.NoError(t, x.Seal())
	y, err := OpenOffset(fsys, x.Name(), 0, 4096, false)
	require.NoError(t, err)
	require.Equal(t, n+1, y.Entries())
	require.Equal(t, OffsetPosition{int64(n + 1), uint32(n + 1)}, y.Lookup(1<<30))
	require.NoError(t, y.Close())
}

// TestTruncateNeedsNoSpace: dropping entries cuts and regrows the file
// rather than writing zeros, so it works on a full disk, and a reopen
// finds only the entries kept.
func TestTruncateNeedsNoSpace(t *testing.T) {
	fsys := vfs.NewMem()
	x, err := OpenOffset(fsys, "/0.index", 0, 800, true)
	require.NoError(t, err)
	defer x.Close()
	for i := range 10 {
		require.NoError(t, x.Append(int64(10*(i+1)), uint32(100*(i+1))))
	}
	fullDisk(fsys, "/0.index")(true)
	require.NoError(t, x.TruncateTo(45))
	require.Equal(t, 4, x.Entries())
	require.Equal(t, 100, x.MaxEntries(), "the file is grown back to its size")
	require.NoError(t, x.Reset())
	require.Zero(t, x.Entries())

	y, err := OpenOffset(fsys, "/0.index", 0, 800, false)
	require.NoError(t, err)
	require.Zero(t, y.Entries())
	require.NoError(t, y.Close())
}

// TestOpenScansLargeFiles: Open reads the file in chunks (not through the
// mapping, which on a full tmpfs faults on a hole). Entries and the zero
// tail span several chunks; a stray byte chunks after the last entry is
// still found and placed.
func TestOpenScansLargeFiles(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		// Entries across several scan chunks, then a zero tail across more.
		const n = 3*scanBytes/TimeEntrySize + 7
		name := filepath.Join(dir, "0.timeindex")
		x, err := OpenTime(fsys, name, 0, 2*n*TimeEntrySize, true)
		require.NoError(t, err)
		for i := range n {
			require.NoError(t, x.MaybeAppend(int64(1000+i), int64(i), false))
		}
		require.NoError(t, x.Close())
		y, err := OpenTime(fsys, name, 0, 2*n*TimeEntrySize, true)
		require.NoError(t, err)
		require.Equal(t, n, y.Entries())
		require.Equal(t, TimestampOffset{1000 + n - 1, n - 1}, y.Lookup(1<<40))
		require.NoError(t, y.Close())

		stray := 2*scanBytes + 5
		writeFile(t, fsys, name, cat(timeBytes(1000, 0), zeros(stray-TimeEntrySize), []byte{1}, zeros(TimeEntrySize-1-stray%TimeEntrySize)))
		_, err = OpenTime(fsys, name, 0, 4096, false)
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, fmt.Sprintf("entry 1 (byte 12) is unused but byte %d (in entry %d) after it is not zero", stray, stray/TimeEntrySize))
	})
}
