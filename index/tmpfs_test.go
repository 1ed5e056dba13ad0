//go:build linux

package index

import (
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/internal/fulldisk"
	"github.com/strandlog/strand/vfs"
)

// TestFullTmpfs runs an active index on a real tmpfs with no page left. An
// append past the allocated part of the file fails with ENOSPC, where a
// store through the mapping into a hole faulted with SIGBUS; the index then
// reopens on the full disk, where reading the holes of its preallocated
// tail through the mapping faulted too (tmpfs allocates a page even to
// read a hole).
func TestFullTmpfs(t *testing.T) {
	// A fault becomes a panic that fails the test, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	mnt := fulldisk.Mount(t, 256<<10)
	const maxBytes = 4 * minAllocBytes // a sparse file: it takes no space
	name := filepath.Join(mnt, "00000000000000000000.index")
	x, err := OpenOffset(vfs.Default, name, 0, maxBytes, true)
	require.NoError(t, err)
	defer x.Close()
	require.NoError(t, x.Append(10, 100)) // allocates the first page
	fulldisk.Fill(t, filepath.Join(mnt, "filler"))

	n := minAllocBytes / OffsetEntrySize
	for i := 2; i <= n; i++ {
		require.NoError(t, x.Append(int64(10*i), uint32(100*i)), "entry %d is allocated", i)
	}
	next := int64(10 * (n + 1))
	require.ErrorIs(t, x.Append(next, uint32(10*next)), syscall.ENOSPC)
	require.Equal(t, n, x.Entries())
	require.Equal(t, OffsetPosition{int64(10 * n), uint32(100 * n)}, x.Lookup(next))

	y, err := OpenOffset(vfs.Default, name, 0, maxBytes, true)
	require.NoError(t, err, "open on the full disk")
	defer y.Close()
	require.Equal(t, n, y.Entries())
	require.Equal(t, OffsetPosition{int64(10 * n), uint32(100 * n)}, y.Lookup(next))
}

// TestSealedIndexIsMappedReadOnly: as Kafka does, a sealed index is mapped
// read-only, whether sealed or opened sealed, so a stray store faults
// rather than change it; Unseal maps it writable again.
func TestSealedIndexIsMappedReadOnly(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	name := filepath.Join(t.TempDir(), "00000000000000000000.timeindex")
	x, err := OpenTime(vfs.Default, name, 0, 1200, true)
	require.NoError(t, err)
	defer x.Close()
	require.NoError(t, x.MaybeAppend(1000, 1, false))
	require.NoError(t, x.Seal())
	require.Panics(t, func() { x.buf[0] = 1 }, "a store into a sealed index")

	y, err := OpenTime(vfs.Default, name, 0, 1200, false)
	require.NoError(t, err)
	defer y.Close()
	require.Panics(t, func() { y.buf[0] = 1 }, "a store into an index opened sealed")

	require.NoError(t, x.Unseal())
	require.NoError(t, x.MaybeAppend(2000, 2, false))
	require.Equal(t, TimestampOffset{2000, 2}, x.LastEntry())
}
