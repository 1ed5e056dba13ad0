package index

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/internal/vfs"
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

// TestAppendOnFullDiskIsAnError: an entry the file system has no room for
// fails the append with ENOSPC (where a store through a mapping would
// fault), changes nothing, and the index appends again once there is room.
func TestAppendOnFullDiskIsAnError(t *testing.T) {
	fsys := vfs.NewMem()
	require.NoError(t, fsys.MkdirAll("/seg", 0o755))
	x := newOffset(t, fsys, "/seg", 0, 4096)
	ti := newTime(t, fsys, "/seg", 0, 4096)
	full := fullDisk(fsys, x.Name(), ti.Name())
	require.NoError(t, x.Append(10, 4100))
	require.NoError(t, ti.MaybeAppend(1000, 10, false))

	full(true)
	require.ErrorIs(t, x.Append(20, 8200), syscall.ENOSPC)
	require.ErrorIs(t, ti.MaybeAppend(2000, 20, false), syscall.ENOSPC)
	require.ErrorIs(t, ti.MaybeAppend(2000, 20, true), syscall.ENOSPC, "the roll entry too")
	require.Equal(t, []OffsetPosition{{10, 4100}}, x.all())
	require.Equal(t, []TimestampOffset{{1000, 10}}, ti.all())
	require.Equal(t, OffsetPosition{10, 4100}, x.Lookup(25))
	require.Equal(t, TimestampOffset{1000, 10}, ti.Lookup(2500))

	full(false)
	require.NoError(t, x.Append(20, 8200))
	require.NoError(t, ti.MaybeAppend(2000, 20, false))
	require.NoError(t, x.Seal())
	require.NoError(t, ti.Seal())
	y, err := OpenOffset(fsys, x.Name(), 0, 4096, false)
	require.NoError(t, err)
	require.Equal(t, []OffsetPosition{{10, 4100}, {20, 8200}}, y.all())
	require.NoError(t, y.Close())
}

// shortWriteFS writes only the first bytes of each WriteAt of n bytes or
// more and then fails with ENOSPC, as a write whose second page cannot be
// allocated does.
type shortWriteFS struct {
	vfs.FS
	n, keep int
}

func (fsys shortWriteFS) Create(name string) (vfs.File, error) {
	f, err := fsys.FS.Create(name)
	return shortWriteFile{f, fsys.n, fsys.keep}, err
}

type shortWriteFile struct {
	vfs.File
	n, keep int
}

func (f shortWriteFile) WriteAt(p []byte, off int64) (int, error) {
	if len(p) < f.n {
		return f.File.WriteAt(p, off)
	}
	n, err := f.File.WriteAt(p[:f.keep], off)
	if err != nil {
		return n, err
	}
	return n, syscall.ENOSPC
}

// TestTornEntryOnFullDiskIsCleared: a time index entry straddling two
// pages may be written in part before the file system runs out of space.
// The part is cleared, so that the file still opens with its entries and
// a zero tail, not as corrupt.
func TestTornEntryOnFullDiskIsCleared(t *testing.T) {
	mem := vfs.NewMem()
	fsys := shortWriteFS{FS: mem, n: TimeEntrySize, keep: 4}
	name := "/0.timeindex"
	x, err := OpenTime(fsys, name, 0, 1200, true)
	require.NoError(t, err)
	defer x.Close()
	require.ErrorIs(t, x.MaybeAppend(1000, 10, false), syscall.ENOSPC)
	require.Zero(t, x.Entries())

	y, err := OpenTime(mem, name, 0, 1200, false)
	require.NoError(t, err, "the torn entry was cleared")
	require.Zero(t, y.Entries())
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
