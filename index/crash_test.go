package index

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// TestCrashKeepsSyncedEntries appends, syncs, appends more and crashes.
// Whatever the crash keeps, the index must open, and it must hold the
// synced entries and at most the unsynced ones after them, never anything
// else.
func TestCrashKeepsSyncedEntries(t *testing.T) {
	const name = "/seg/00000000000000000000.index"
	var want []OffsetPosition
	for i := range 20 {
		want = append(want, OffsetPosition{int64(10 * (i + 1)), uint32(4100 * (i + 1))})
	}
	fsys := vfs.NewMem()
	require.NoError(t, fsys.MkdirAll("/seg", 0o755))
	x, err := OpenOffset(fsys, name, 0, 4096, true)
	require.NoError(t, err)
	defer x.Close()
	syncDir(t, fsys, "/")
	syncDir(t, fsys, "/seg")
	for _, e := range want[:10] {
		require.NoError(t, x.Append(e.Offset, e.Position))
	}
	require.NoError(t, x.Sync())
	for _, e := range want[10:] {
		require.NoError(t, x.Append(e.Offset, e.Position))
	}

	seen := map[int]bool{}
	for seed := range uint64(40) {
		cfg := vfs.CrashOptions{}
		if seed > 0 {
			cfg.Rand = rand.New(rand.NewPCG(seed, 1))
		}
		after := fsys.Crash(cfg)
		y, err := OpenOffset(after, name, 0, 4096, true)
		require.NoError(t, err, "seed %d", seed)
		got := y.all()
		require.GreaterOrEqual(t, len(got), 10, "seed %d: synced entries lost", seed)
		require.Equal(t, want[:len(got)], got, "seed %d", seed)
		seen[len(got)] = true
		require.NoError(t, y.Close())
	}
	// The in-memory file system drops writes through a mapping that is
	// still open (it cannot copy memory another goroutine may be writing).
	require.Equal(t, map[int]bool{10: true}, seen, "a crash keeps the synced entries")
}

// TestSealSurvivesCrash crashes right after Seal and after Seal and Sync:
// the sealed index opens with its entries either way.
func TestSealSurvivesCrash(t *testing.T) {
	fsys := vfs.NewMem()
	const name = "/t.timeindex"
	x, err := OpenTime(fsys, name, 0, 1200, true)
	require.NoError(t, err)
	defer x.Close()
	syncDir(t, fsys, "/")
	require.NoError(t, x.MaybeAppend(100, 1, false))
	require.NoError(t, x.MaybeAppend(200, 2, false))
	require.NoError(t, x.Sync())
	require.NoError(t, x.Seal())
	check := func(after vfs.FS) {
		t.Helper()
		y, err := OpenTime(after, name, 0, 1200, false)
		require.NoError(t, err)
		require.Equal(t, []TimestampOffset{{100, 1}, {200, 2}}, y.all())
		require.NoError(t, y.Close())
	}
	check(fsys.Crash(vfs.CrashOptions{}))
	require.NoError(t, x.Sync())
	synced := fsys.Crash(vfs.CrashOptions{})
	require.Equal(t, int64(24), fileSize(t, synced, name), "the trimmed length is durable")
	check(synced)
}

func syncDir(t *testing.T, fsys vfs.FS, name string) {
	t.Helper()
	dir, err := fsys.OpenDir(name)
	require.NoError(t, err)
	require.NoError(t, dir.Sync())
	require.NoError(t, dir.Close())
}

// TestFailedResize injects a failure into the truncate of Seal: the index
// becomes unusable, answers lookups as an empty index (still a correct
// place to start scanning the log) and can be closed.
func TestFailedResize(t *testing.T) {
	fsys := vfs.NewMem()
	x, err := OpenOffset(fsys, "/f.index", 0, 800, true)
	require.NoError(t, err)
	require.NoError(t, x.Append(5, 100))
	errDisk := errors.New("disk on fire")
	fsys.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpTruncate {
			return errDisk
		}
		return nil
	})
	require.ErrorIs(t, x.Seal(), errDisk)
	require.ErrorIs(t, x.Append(6, 200), errDisk)
	require.ErrorIs(t, x.Reset(), errDisk)
	require.Equal(t, OffsetPosition{0, 0}, x.Lookup(10))
	require.NoError(t, x.Close())
}

// TestConcurrentLookups runs lookups while one writer appends, truncates,
// seals and unseals. Every lookup must return an entry that was appended
// (or the base) at or below its target. Run with -race.
func TestConcurrentLookups(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		x := newOffset(t, fsys, dir, 0, 8*4096)
		// Entry offsets are multiples of 10 and positions 100 times the
		// offset, so any returned pair can be checked on its own.
		var wg sync.WaitGroup
		done := make(chan struct{})
		for r := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), 2))
				for {
					select {
					case <-done:
						return
					default:
					}
					target := rng.Int64N(40000)
					got := x.Lookup(target)
					if got.Offset > target || got.Offset%10 != 0 || int64(got.Position) != 100*got.Offset {
						t.Errorf("Lookup(%d) = %+v", target, got)
						return
					}
				}
			})
		}
		off := int64(0)
		for round := range 6 {
			for range 500 {
				off += 10
				require.NoError(t, x.Append(off, uint32(100*off)))
			}
			switch round % 3 {
			case 0:
				off -= 2000
				require.NoError(t, x.TruncateTo(off+1))
			case 1:
				require.NoError(t, x.Seal())
				require.NoError(t, x.Unseal())
			}
		}
		close(done)
		wg.Wait()
	})
}
