//go:build linux

package vfs

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/internal/fulldisk"
)

// TestAllocateOnFullDisk: on a real tmpfs, Allocate takes space up front
// and fails with ENOSPC once there is none, where a store through a
// mapping into the unallocated hole would fault with SIGBUS.
func TestAllocateOnFullDisk(t *testing.T) {
	mnt := fulldisk.Mount(t, 128<<10)
	f, err := Default.Create(filepath.Join(mnt, "x.index"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(64<<10), "a sparse file takes no space")
	require.NoError(t, f.Allocate(0, 8<<10))
	require.Equal(t, 2, pagesUsed(t, f), "Allocate takes the space")
	fulldisk.Fill(t, filepath.Join(mnt, "filler"))
	require.ErrorIs(t, f.Allocate(8<<10, 8<<10), syscall.ENOSPC)

	m, err := f.Map(64 << 10)
	require.NoError(t, err)
	defer m.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	m.Bytes()[8<<10-1] = 1 // allocated: no fault
}

func pagesUsed(t *testing.T, f File) int {
	fi, err := f.Stat()
	require.NoError(t, err)
	return int(fi.Sys().(*syscall.Stat_t).Blocks * 512 / fulldisk.PageBytes)
}

// TestMapReadOnlyRefusesStores: a store into a read-only mapping faults (a
// sealed index cannot be scribbled on), and the mapping shows the file.
func TestMapReadOnlyRefusesStores(t *testing.T) {
	name := filepath.Join(t.TempDir(), "x.index")
	require.NoError(t, os.WriteFile(name, []byte("sealed"), 0o644))
	f, err := Default.OpenReadWrite(name)
	require.NoError(t, err)
	defer f.Close()
	m, err := f.MapReadOnly(6)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, "sealed", string(m.Bytes()))
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	require.Panics(t, func() { m.Bytes()[0] = 'S' })
}

// TestMemAllocate: the in-memory file system checks the range and lets a
// hook fail Allocate as a full disk, seeing it as a write.
func TestMemAllocate(t *testing.T) {
	fs := NewMem()
	f, err := fs.Create("/x")
	require.NoError(t, err)
	require.NoError(t, f.Truncate(100))
	require.NoError(t, f.Allocate(0, 100))
	require.ErrorIs(t, f.Allocate(50, 51), syscall.EINVAL, "past the end")
	fs.SetHook(func(op Op) error {
		if op.Kind == OpWrite && op.Len == 10 {
			return syscall.ENOSPC
		}
		return nil
	})
	require.ErrorIs(t, f.Allocate(0, 10), syscall.ENOSPC)
}
