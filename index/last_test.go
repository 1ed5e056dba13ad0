package index

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

func TestLastOffsetEntryReadsTheLastEntryUnmapped(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		name := filepath.Join(dir, "00000000000000000100.index")
		x, err := OpenOffset(fsys, name, 100, 1024, true)
		require.NoError(t, err)
		for i, pos := range []uint32{4096, 8192, 12288} {
			require.NoError(t, x.Append(int64(110+10*i), pos))
		}

		// Active: preallocated, the last slot zero.
		got, err := LastOffsetEntry(fsys, name, 100)
		require.NoError(t, err)
		require.Equal(t, OffsetPosition{Offset: 100}, got, "a zero last slot is no entry")

		require.NoError(t, x.Seal())
		got, err = LastOffsetEntry(fsys, name, 100)
		require.NoError(t, err)
		require.Equal(t, x.LastEntry(), got)
		require.Equal(t, OffsetPosition{Offset: 130, Position: 12288}, got)
		require.NoError(t, x.Close())

		writeFile(t, fsys, name, nil)
		got, err = LastOffsetEntry(fsys, name, 100)
		require.NoError(t, err)
		require.Equal(t, OffsetPosition{Offset: 100}, got, "empty")

		writeFile(t, fsys, name, make([]byte, 13))
		_, err = LastOffsetEntry(fsys, name, 100)
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, name)
	})
}

func TestLastOffsetEntryRefusesAFIFO(t *testing.T) {
	name := filepath.Join(t.TempDir(), "00000000000000000000.index")
	require.NoError(t, syscall.Mkfifo(name, 0o644))
	_, err := LastOffsetEntry(vfs.Default, name, 0) // without blocking
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "not a regular file")
}
