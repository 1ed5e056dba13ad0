package vfs

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func createFile(t *testing.T, fs FS, name string) File {
	t.Helper()
	f, err := fs.Create(name)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestErrorFSFailsTheSelectedSyncs(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		e := NewErrorFS(fs)
		e.Inject(Fault{Ops: []OpKind{OpSync}, Path: "*.log", After: 2, Times: 1})
		seg := createFile(t, e, filepath.Join(dir, "0.log"))
		other := createFile(t, e, filepath.Join(dir, "0.index"))
		require.NoError(t, seg.Sync())
		require.NoError(t, other.Sync(), "another file's sync is not selected")
		require.NoError(t, seg.Sync())
		err := seg.Sync()
		require.ErrorIs(t, err, ErrInjected, "the third sync of a .log fails")
		require.ErrorIs(t, err, syscall.EIO, "as EIO unless the fault says otherwise")
		require.ErrorContains(t, err, "0.log")
		require.NoError(t, seg.Sync(), "Times: 1 fails one sync only, as a disk that recovers would")
		require.NoError(t, SyncDir(e, dir), "a directory's sync is another kind")
		require.Equal(t, 1, e.Injected())
	})
}

func TestErrorFSFailedWriteChangesNothing(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		e := NewErrorFS(fs)
		name := filepath.Join(dir, "f")
		f := createFile(t, e, name)
		_, err := f.Write([]byte("kept"))
		require.NoError(t, err)
		e.Inject(Fault{Ops: []OpKind{OpWrite}, Err: syscall.ENOSPC})
		_, err = f.Write([]byte(" lost"))
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.ErrorIs(t, err, ErrInjected)
		_, err = f.WriteAt([]byte("x"), 0)
		require.ErrorIs(t, err, syscall.ENOSPC, "Times: 0 fails every selected operation")
		require.Equal(t, "kept", readAll(t, fs, name))
	})
}

func TestErrorFSSelectsByKind(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		e := NewErrorFS(fs)
		f := createFile(t, e, filepath.Join(dir, "f"))
		e.Inject(Fault{Ops: []OpKind{OpSyncDir, OpRename, OpMap, OpTruncate, OpCreate, OpRemove, OpMkdir}})
		require.NoError(t, f.Sync(), "a file's sync is not a directory's")
		require.ErrorIs(t, SyncDir(e, dir), ErrInjected)
		require.ErrorIs(t, e.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")), ErrInjected)
		_, err := f.Map(64)
		require.ErrorIs(t, err, ErrInjected)
		require.ErrorIs(t, f.Truncate(0), ErrInjected)
		_, err = e.Create(filepath.Join(dir, "h"))
		require.ErrorIs(t, err, ErrInjected)
		require.ErrorIs(t, e.Remove(filepath.Join(dir, "f")), ErrInjected)
		require.ErrorIs(t, e.RemoveAll(filepath.Join(dir, "f")), ErrInjected)
		require.ErrorIs(t, e.MkdirAll(filepath.Join(dir, "sub"), 0o755), ErrInjected)
		names, err := e.List(dir)
		require.NoError(t, err, "reads are never failed")
		require.Equal(t, []string{"f"}, names, "no failed operation reached the file system")
	})
}

func TestErrorFSFailsAMappingsSync(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		e := NewErrorFS(fs)
		f := createFile(t, e, filepath.Join(dir, "0.index"))
		m, err := f.Map(64)
		require.NoError(t, err)
		defer m.Close()
		e.Inject(Fault{Ops: []OpKind{OpSync}, Path: "*.index"})
		require.ErrorIs(t, m.Sync(), ErrInjected, "an msync is the file's sync")
	})
}

func TestErrorFSRenameMatchesEitherName(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		e := NewErrorFS(fs)
		createFile(t, e, filepath.Join(dir, "a.tmp"))
		e.Inject(Fault{Ops: []OpKind{OpRename}, Path: filepath.Join(dir, "checkpoint")})
		require.ErrorIs(t, e.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "checkpoint")), ErrInjected,
			"the whole new name matches")
		require.NoError(t, e.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "b.tmp")))
	})
}

func TestErrorFSCanBeTurnedOff(t *testing.T) {
	fs := NewMem()
	e := NewErrorFS(fs)
	e.Inject(Fault{Ops: []OpKind{OpWrite}, After: 1})
	f := createFile(t, e, "/f")
	e.SetEnabled(false)
	for range 3 {
		_, err := f.Write([]byte("a"))
		require.NoError(t, err, "disabled: nothing fails, nothing is counted")
	}
	e.SetEnabled(true)
	_, err := f.Write([]byte("b"))
	require.NoError(t, err, "the first write seen is let through (After: 1)")
	_, err = f.Write([]byte("c"))
	require.ErrorIs(t, err, ErrInjected)
	e.SetEnabled(false)
	_, err = f.Write([]byte("d"))
	require.NoError(t, err)
	require.Equal(t, "aaabd", readAll(t, fs, "/f"))
}

func TestErrorFSProbabilityIsSeeded(t *testing.T) {
	run := func(seed uint64) []bool {
		e := NewErrorFS(NewMem())
		e.Inject(Fault{Ops: []OpKind{OpSync}, Prob: 0.25, Seed: seed})
		f := createFile(t, e, "/f")
		var failed []bool
		for range 400 {
			failed = append(failed, f.Sync() != nil)
		}
		return failed
	}
	a := run(7)
	require.Equal(t, a, run(7), "the same seed fails the same operations")
	require.NotEqual(t, a, run(8))
	n := 0
	for _, f := range a {
		if f {
			n++
		}
	}
	require.InDelta(t, 100, n, 40, "about a quarter of 400 syncs fail")
}
