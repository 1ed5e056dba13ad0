//go:build linux

package index

import (
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/internal/fulldisk"
	"github.com/strandlog/strand/internal/vfs"
)

// TestFullTmpfs runs an active index on a real tmpfs with no page left. An
// append that needs a new page fails with ENOSPC, where a store through
// the mapping faulted with SIGBUS; the index then reopens on the full disk,
// where reading the holes of its preallocated tail through the mapping
// faulted too (tmpfs allocates a page even to read a hole).
func TestFullTmpfs(t *testing.T) {
	// A fault becomes a panic that fails the test, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	mnt := fulldisk.Mount(t, 256<<10)
	const maxBytes = 64 << 10 // a sparse file: it takes no space
	name := filepath.Join(mnt, "00000000000000000000.index")
	x, err := OpenOffset(vfs.Default, name, 0, maxBytes, true)
	require.NoError(t, err)
	defer x.Close()
	require.NoError(t, x.Append(10, 100)) // allocates the first page
	fulldisk.Fill(t, filepath.Join(mnt, "filler"))

	perPage := fulldisk.PageBytes / OffsetEntrySize
	for i := 2; i <= perPage; i++ {
		require.NoError(t, x.Append(int64(10*i), uint32(100*i)), "entry %d is on the first page", i)
	}
	next := int64(10 * (perPage + 1))
	require.ErrorIs(t, x.Append(next, uint32(10*next)), syscall.ENOSPC)
	require.Equal(t, perPage, x.Entries())
	require.Equal(t, OffsetPosition{int64(10 * perPage), uint32(100 * perPage)}, x.Lookup(next))

	y, err := OpenOffset(vfs.Default, name, 0, maxBytes, true)
	require.NoError(t, err, "open on the full disk")
	defer y.Close()
	require.Equal(t, perPage, y.Entries())
	require.Equal(t, OffsetPosition{int64(10 * perPage), uint32(100 * perPage)}, y.Lookup(next))
}
