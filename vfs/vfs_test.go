package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Both implementations must behave alike for everything but crashes.
func forEachFS(t *testing.T, fn func(t *testing.T, fs FS, dir string)) {
	t.Run("os", func(t *testing.T) { fn(t, Default, t.TempDir()) })
	t.Run("mem", func(t *testing.T) {
		fs := NewMem()
		require.NoError(t, fs.MkdirAll("/d", 0o755))
		fn(t, fs, "/d")
	})
}

func TestFileBasics(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "a.log")
		f, err := fs.Create(name)
		require.NoError(t, err)
		_, err = f.Write([]byte("hello "))
		require.NoError(t, err)
		_, err = f.Write([]byte("world"))
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("W"), 6)
		require.NoError(t, err)
		require.NoError(t, f.Sync())

		buf := make([]byte, 11)
		_, err = f.ReadAt(buf, 0)
		require.NoError(t, err)
		require.Equal(t, "hello World", string(buf))

		n, err := f.ReadAt(buf, 6)
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, 5, n)

		require.NoError(t, f.Truncate(5))
		fi, err := f.Stat()
		require.NoError(t, err)
		require.EqualValues(t, 5, fi.Size())
		require.NoError(t, f.Close())

		require.NoError(t, fs.Rename(name, filepath.Join(dir, "b.log")))
		names, err := fs.List(dir)
		require.NoError(t, err)
		require.Equal(t, []string{"b.log"}, names)

		ro, err := fs.Open(filepath.Join(dir, "b.log"))
		require.NoError(t, err)
		_, err = ro.WriteAt([]byte("x"), 0)
		require.Error(t, err, "a read-only file must refuse writes")
		require.NoError(t, ro.Close())

		_, err = fs.Open(filepath.Join(dir, "missing"))
		require.ErrorIs(t, err, syscall.ENOENT)
		_, err = fs.Stat(filepath.Join(dir, "missing"))
		require.ErrorIs(t, err, syscall.ENOENT)

		require.NoError(t, fs.Remove(filepath.Join(dir, "b.log")))
		names, err = fs.List(dir)
		require.NoError(t, err)
		require.Empty(t, names)
	})
}

func TestMapWritesReachTheFile(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, "x.index")
		f, err := fs.Create(name)
		require.NoError(t, err)
		m, err := f.Map(64)
		require.NoError(t, err)
		require.Len(t, m.Bytes(), 64)
		copy(m.Bytes()[8:], "mapped")
		require.NoError(t, m.Sync())
		require.NoError(t, m.Close())

		buf := make([]byte, 6)
		_, err = f.ReadAt(buf, 8)
		require.NoError(t, err)
		require.Equal(t, "mapped", string(buf))
		fi, err := f.Stat()
		require.NoError(t, err)
		require.EqualValues(t, 64, fi.Size(), "Map grows a short file")
		require.NoError(t, f.Close())
	})
}

func TestLockIsExclusive(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		name := filepath.Join(dir, ".lock")
		l, err := fs.Lock(name)
		require.NoError(t, err)
		_, err = fs.Lock(name)
		require.ErrorIs(t, err, ErrLocked)
		require.NoError(t, l.Close())
		l, err = fs.Lock(name)
		require.NoError(t, err)
		require.NoError(t, l.Close())
	})
}

func TestCrashLosesUnsyncedData(t *testing.T) {
	fs := NewMem()
	require.NoError(t, fs.MkdirAll("/d", 0o755))
	syncDir(t, fs, "/")
	f, err := fs.Create("/d/f")
	require.NoError(t, err)
	syncDir(t, fs, "/d")
	_, err = f.Write([]byte("durable"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.Write([]byte(" lost"))
	require.NoError(t, err)

	after := fs.Crash(CrashOptions{})
	require.Equal(t, "durable", readAll(t, after, "/d/f"))
	require.Equal(t, "durable lost", readAll(t, fs, "/d/f"), "the crash leaves the running file system alone")
}

func TestCrashLosesUnsyncedNames(t *testing.T) {
	fs := NewMem()
	require.NoError(t, fs.MkdirAll("/d", 0o755))
	syncDir(t, fs, "/")
	for _, name := range []string{"/d/kept", "/d/renamed", "/d/lost"} {
		f, err := fs.Create(name)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
	}
	require.NoError(t, fs.Remove("/d/lost"))
	f, err := fs.Create("/d/lost")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	syncDir(t, fs, "/d")
	require.NoError(t, fs.Rename("/d/renamed", "/d/new"))
	_, err = fs.Create("/d/unsynced")
	require.NoError(t, err)

	after := fs.Crash(CrashOptions{})
	names, err := after.List("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"kept", "lost", "renamed"}, names, "only names made durable by a directory sync survive")
}

// TestCrashKeepsAnySubsetOfUnsyncedNames: with a Rand, each unsynced change
// to the entries of a directory survives or not, independently of the
// others, but a rename never half survives (a journaling file system
// commits it whole); the same seed gives the same crash.
func TestCrashKeepsAnySubsetOfUnsyncedNames(t *testing.T) {
	fs := NewMem()
	require.NoError(t, fs.MkdirAll("/d", 0o755))
	require.NoError(t, fs.MkdirAll("/e", 0o755))
	syncDir(t, fs, "/")
	for _, name := range []string{"/d/gone", "/d/renamed", "/d/moved"} {
		f, err := fs.Create(name)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	syncDir(t, fs, "/d")
	f, err := fs.Create("/d/created")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fs.Remove("/d/gone"))
	require.NoError(t, fs.Rename("/d/renamed", "/d/new"))
	require.NoError(t, fs.Rename("/d/moved", "/e/moved"))
	require.NoError(t, fs.MkdirAll("/made/sub", 0o755))
	f, err = fs.Create("/made/sub/f")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	syncDir(t, fs, "/made/sub")
	syncDir(t, fs, "/made")

	crash := func(seed uint64) [3][]string {
		after := fs.Crash(CrashOptions{Rand: rand.New(rand.NewPCG(seed, 0))})
		d, err := after.List("/d")
		require.NoError(t, err)
		e, err := after.List("/e")
		require.NoError(t, err)
		root, err := after.List("/")
		require.NoError(t, err)
		if slices.Contains(root, "made") {
			sub, err := after.List("/made/sub")
			require.NoError(t, err)
			require.Equal(t, []string{"f"}, sub, "a directory that survives has its synced entries")
		}
		return [3][]string{d, e, root}
	}
	outcomes := map[string]bool{}
	for seed := range uint64(200) {
		got := crash(seed)
		require.Equal(t, got, crash(seed), "seed %d: a crash is reproducible", seed)
		d, e := got[0], got[1]
		require.True(t, slices.Contains(d, "renamed") != slices.Contains(d, "new"), "seed %d: a rename is whole: %v", seed, got)
		require.True(t, slices.Contains(d, "moved") != slices.Contains(e, "moved"), "seed %d: a rename between directories is whole: %v", seed, got)
		outcomes[fmt.Sprint(got)] = true
	}
	require.Len(t, outcomes, 1<<5, "every subset of the five changes (create, remove, rename, move, mkdir) survives some crash")

	syncDir(t, fs, "/e")
	for seed := range uint64(20) {
		got := crash(seed)
		require.Equal(t, []string{"moved"}, got[1], "seed %d: syncing the target's directory makes the whole move durable", seed)
		require.NotContains(t, got[0], "moved", "seed %d", seed)
	}
}

func TestCrashKeepsAPrefixOfUnsyncedWrites(t *testing.T) {
	// A file is appended to and overwritten at random; every crash must
	// leave exactly the synced content with an in-order prefix of the later
	// writes applied, the last possibly torn.
	type write struct {
		off  int64
		data []byte
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		fs := NewMem()
		f, err := fs.Create("/f")
		require.NoError(t, err)
		syncDir(t, fs, "/")
		var synced []byte
		var pending []write
		apply := func(b []byte, w write, n int) []byte {
			if end := w.off + int64(n); end > int64(len(b)) {
				b = append(b, make([]byte, end-int64(len(b)))...)
			}
			copy(b[w.off:], w.data[:n])
			return b
		}
		var cur []byte
		for i := 0; i < 1+rng.IntN(8); i++ {
			w := write{off: int64(rng.IntN(len(cur) + 4)), data: bytes.Repeat([]byte{byte('a' + i)}, 1+rng.IntN(6))}
			_, err := f.WriteAt(w.data, w.off)
			require.NoError(t, err)
			cur = apply(cur, w, len(w.data))
			pending = append(pending, w)
			if rng.IntN(4) == 0 {
				require.NoError(t, f.Sync())
				synced = append([]byte(nil), cur...)
				pending = nil
			}
		}
		seed := rng.Uint64()
		got := readAll(t, fs.Crash(CrashOptions{Rand: rand.New(rand.NewPCG(seed, 0))}), "/f")

		// Some prefix of pending, the last torn at some byte, must explain it.
		explained := false
		for k := 0; k <= len(pending) && !explained; k++ {
			want := append([]byte(nil), synced...)
			for _, w := range pending[:k] {
				want = apply(want, w, len(w.data))
			}
			if k == len(pending) {
				explained = bytes.Equal(want, []byte(got))
				break
			}
			for torn := 0; torn <= len(pending[k].data); torn++ {
				if bytes.Equal(apply(append([]byte(nil), want...), pending[k], torn), []byte(got)) {
					explained = true
					break
				}
			}
		}
		require.True(t, explained, "round %d: %q is not synced %q plus a prefix of %v", round, got, synced, pending)
	}
}

func TestCrashMappedWritesNeedSync(t *testing.T) {
	fs := NewMem()
	f, err := fs.Create("/i")
	require.NoError(t, err)
	syncDir(t, fs, "/")
	m, err := f.Map(8)
	require.NoError(t, err)
	copy(m.Bytes(), "abcd")
	require.NoError(t, m.Sync())
	copy(m.Bytes()[4:], "efgh")
	require.Equal(t, "abcd\x00\x00\x00\x00", readAll(t, fs.Crash(CrashOptions{}), "/i"))
	require.NoError(t, f.Sync())
	require.Equal(t, "abcdefgh", readAll(t, fs.Crash(CrashOptions{}), "/i"))

	_, err = f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, syscall.EBUSY, "writing a mapped file is a bug the in-memory FS reports")
	require.ErrorIs(t, f.Truncate(0), syscall.EBUSY)
	require.NoError(t, m.Close())
	require.NoError(t, f.Truncate(0))
}

func TestHookFailsOperations(t *testing.T) {
	fs := NewMem()
	f, err := fs.Create("/f")
	require.NoError(t, err)
	fs.SetHook(func(op Op) error {
		if op.Kind == OpWrite && op.Len > 3 {
			return syscall.ENOSPC
		}
		return nil
	})
	_, err = f.Write([]byte("ok"))
	require.NoError(t, err)
	_, err = f.Write([]byte("too big"))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Equal(t, "ok", readAll(t, fs, "/f"), "a failed write changes nothing")
}

func syncDir(t *testing.T, fs FS, dir string) {
	t.Helper()
	d, err := fs.OpenDir(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	require.NoError(t, d.Close())
}

func readAll(t *testing.T, fs FS, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	if !errors.Is(err, io.EOF) {
		require.NoError(t, err)
	}
	return string(b)
}
