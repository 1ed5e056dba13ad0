package cluster

import (
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/vfs"
)

const (
	metaDir  = "/data/meta"
	metaSelf = replica.NodeID(3)
)

var metaLogName = filepath.Join(metaDir, logFile)

// openMeta opens the log in metaDir on fs, closed when the test ends, and
// returns it with its first update.
func openMeta(t *testing.T, fs vfs.FS) (*FileMetadata, MetadataUpdate) {
	t.Helper()
	m, err := OpenFileMetadata(fs, metaDir, metaSelf)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	u := nextUpdate(t, m)
	require.True(t, u.Replayed, "the first update completes the replay")
	require.Equal(t, metaSelf, u.Leader)
	return m, u
}

func nextUpdate(t *testing.T, m *FileMetadata) MetadataUpdate {
	t.Helper()
	select {
	case u, ok := <-m.Updates():
		require.True(t, ok, "the feed closed")
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no update")
		return MetadataUpdate{}
	}
}

// nextEntries reads updates until n entries have come, which must be
// ones of this node's lead of term, and returns them.
func nextEntries(t *testing.T, m *FileMetadata, term uint64, n int) []MetadataEntry {
	t.Helper()
	var got []MetadataEntry
	for len(got) < n {
		u := nextUpdate(t, m)
		require.Nil(t, u.Snapshot)
		require.False(t, u.Replayed)
		require.Equal(t, metaSelf, u.Leader)
		require.Equal(t, term, u.Term)
		got = append(got, u.Entries...)
	}
	require.Len(t, got, n)
	return got
}

// propose proposes the entries first to first+n-1 of term, each with the
// data "e<index>", and checks that they come back so.
func propose(t *testing.T, m *FileMetadata, term, first uint64, n int) {
	t.Helper()
	for i := range uint64(n) {
		require.NoError(t, m.Propose(term, entryData(first+i)))
	}
	require.Equal(t, wantEntries(first, term, n), nextEntries(t, m, term, n))
}

func entryData(index uint64) []byte { return fmt.Appendf(nil, "e%d", index) }

func wantEntries(first, term uint64, n int) []MetadataEntry {
	var es []MetadataEntry
	for i := range uint64(n) {
		es = append(es, MetadataEntry{Index: first + i, Term: term, Data: entryData(first + i)})
	}
	return es
}

// frameBytes is the length of the frames of the entries wantEntries
// returns.
func frameBytes(first, term uint64, n int) int64 {
	var b []byte
	for _, e := range wantEntries(first, term, n) {
		b = appendFrame(b, e.Term, e.Index, e.Data)
	}
	return int64(len(b))
}

func fileSize(t *testing.T, fs vfs.FS, name string) int64 {
	t.Helper()
	fi, err := fs.Stat(name)
	require.NoError(t, err)
	return fi.Size()
}

// writeFile replaces name on fs with data, durably.
func writeFile(t *testing.T, fs vfs.FS, name string, data []byte) {
	t.Helper()
	require.NoError(t, vfs.MkdirAll(fs, filepath.Dir(name), 0o755))
	require.NoError(t, vfs.WriteFileAtomic(fs, name, data))
}

func TestFileMetadataOpenEmpty(t *testing.T) {
	m, first := openMeta(t, vfs.NewMem())
	require.Equal(t, MetadataUpdate{Leader: metaSelf, Term: 1, Replayed: true}, first)
	require.Equal(t, []replica.NodeID{metaSelf}, m.Voters(), "a node on it sizes its internal topics at one replica")
	propose(t, m, 1, 1, 5)
	require.ErrorIs(t, m.Propose(2, []byte("x")), ErrNotMetadataLeader, "this open leads term 1 only")
	propose(t, m, 1, 6, 1)
}

func TestFileMetadataReopen(t *testing.T) {
	fs := vfs.NewMem()
	m, _ := openMeta(t, fs)
	propose(t, m, 1, 1, 3)
	require.NoError(t, m.Close())

	m, first := openMeta(t, fs)
	require.Equal(t, uint64(2), first.Term, "each open is a new term")
	require.Nil(t, first.Snapshot)
	require.Equal(t, wantEntries(1, 1, 3), first.Entries, "the entries replay once, with their terms")
	err := m.Propose(1, []byte("stale"))
	require.ErrorIs(t, err, ErrNotMetadataLeader)
	require.ErrorContains(t, err, "term 2, not 1")
	propose(t, m, 2, 4, 2)
	require.NoError(t, m.Close())

	m, first = openMeta(t, fs)
	require.Equal(t, uint64(3), first.Term)
	require.NoError(t, m.Close())

	m, first = openMeta(t, fs)
	require.Equal(t, uint64(4), first.Term, "an open that proposed nothing still took its term")
	require.Equal(t, append(wantEntries(1, 1, 3), wantEntries(4, 2, 2)...), first.Entries)
	propose(t, m, 4, 6, 1)
}

func TestFileMetadataSnapshotCompacts(t *testing.T) {
	fs := vfs.NewMem()
	m, _ := openMeta(t, fs)
	propose(t, m, 1, 1, 10)
	require.Equal(t, frameBytes(1, 1, 10), fileSize(t, fs, metaLogName))

	require.ErrorIs(t, m.Snapshot(11, []byte("s")), iofs.ErrInvalid, "past the last entry")
	require.NoError(t, m.Snapshot(6, []byte("state 6")))
	require.Equal(t, frameBytes(7, 1, 4), fileSize(t, fs, metaLogName), "the log holds entries 7 to 10 only")
	require.ErrorIs(t, m.Snapshot(5, []byte("s")), iofs.ErrInvalid, "before the last snapshot")
	require.NoError(t, m.Snapshot(6, []byte("state 6 again")), "the same index replaces the state")
	propose(t, m, 1, 11, 2)
	require.NoError(t, m.Close())

	m, first := openMeta(t, fs)
	require.Equal(t, &MetadataSnapshot{Index: 6, Term: 1, Data: []byte("state 6 again")}, first.Snapshot)
	require.Equal(t, wantEntries(7, 1, 6), first.Entries, "only the entries after the snapshot")
	require.Equal(t, uint64(2), first.Term)
	propose(t, m, 2, 13, 1)
	require.NoError(t, m.Snapshot(13, []byte("state 13")))
	require.Zero(t, fileSize(t, fs, metaLogName), "a snapshot at the last entry empties the log")
	require.NoError(t, m.Close())

	m, first = openMeta(t, fs)
	require.Equal(t, &MetadataSnapshot{Index: 13, Term: 2, Data: []byte("state 13")}, first.Snapshot)
	require.Empty(t, first.Entries)
	require.Equal(t, uint64(3), first.Term)
	propose(t, m, 3, 14, 2)
}

// TestFileMetadataInterruptedCompaction: a power cut after the snapshot's
// rename but before the log's leaves the entries the snapshot holds in the
// log; open skips them and finishes the compaction.
func TestFileMetadataInterruptedCompaction(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	m, _ := openMeta(t, efs)
	propose(t, m, 1, 1, 5)
	efs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpRename}, Path: logFile})
	err := m.Snapshot(3, []byte("state 3"))
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.ErrorContains(t, err, metaLogName)
	require.ErrorIs(t, m.Propose(1, []byte("x")), ErrNotMetadataLeader, "the failed log refuses proposals")
	require.Equal(t, MetadataUpdate{Leader: replica.NoNode, Term: 1}, nextUpdate(t, m), "and leads no more")

	after := mem.Crash(vfs.CrashOptions{})
	require.Equal(t, frameBytes(1, 1, 5), fileSize(t, after, metaLogName), "the log was not compacted")
	m, first := openMeta(t, after)
	require.Equal(t, &MetadataSnapshot{Index: 3, Term: 1, Data: []byte("state 3")}, first.Snapshot)
	require.Equal(t, wantEntries(4, 1, 2), first.Entries, "the entries the snapshot holds are skipped")
	require.Equal(t, frameBytes(4, 1, 2), fileSize(t, after, metaLogName), "and compacted away")
	propose(t, m, 2, 6, 1)
	require.NoError(t, m.Close())
	_, first = openMeta(t, after)
	require.Equal(t, append(wantEntries(4, 1, 2), wantEntries(6, 2, 1)...), first.Entries)
}

// TestFileMetadataCrash cuts the power while an entry is being synced,
// after others were acknowledged: every acknowledged entry survives, the
// one in flight survives whole or not at all, and the log goes on at the
// next index. With a Rand, part of the unsynced frame may survive: a torn
// tail.
func TestFileMetadataCrash(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			var cfg vfs.CrashOptions
			if seed > 0 {
				cfg.Rand = rand.New(rand.NewPCG(seed, 0))
			}
			mem := vfs.NewMem()
			m, _ := openMeta(t, mem)
			acked := 1 + int(seed%7)
			propose(t, m, 1, 1, acked)
			var after *vfs.MemFS
			mem.SetHook(func(op vfs.Op) error {
				if op.Kind == vfs.OpSync && op.Name == metaLogName && after == nil {
					after = mem.Crash(cfg)
				}
				return nil
			})
			require.NoError(t, m.Propose(1, entryData(uint64(acked+1))))
			require.NotNil(t, after)

			m, first := openMeta(t, after)
			require.Equal(t, uint64(2), first.Term)
			n := len(first.Entries)
			require.Contains(t, []int{acked, acked + 1}, n, "every acknowledged entry, and the one in flight whole or not at all")
			require.Equal(t, wantEntries(1, 1, n), first.Entries)
			if seed == 0 {
				require.Equal(t, acked, n, "without a Rand nothing unsynced survives")
			}
			propose(t, m, 2, uint64(n+1), 2)
			require.NoError(t, m.Close())

			after = after.Crash(cfg)
			_, first = openMeta(t, after)
			require.Equal(t, append(wantEntries(1, 1, n), wantEntries(uint64(n+1), 2, 2)...), first.Entries,
				"the entries after a cut tail are read back")
		})
	}
}

func TestFileMetadataTornTail(t *testing.T) {
	half := appendFrame(nil, 1, 4, []byte("a frame cut in two"))
	bad := appendFrame(nil, 1, 4, []byte("a frame with a bad checksum"))
	bad[len(bad)-1] ^= 1
	for name, tail := range map[string][]byte{
		"half a frame":   half[:len(half)/2],
		"half a header":  half[:5],
		"zeros":          make([]byte, 100),
		"garbage":        []byte("\xde\xad\xbe\xef not a frame at all, but bytes a crash left"),
		"a bad checksum": bad,
	} {
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			m, _ := openMeta(t, mem)
			propose(t, m, 1, 1, 3)
			require.NoError(t, m.Close())
			good := fileSize(t, mem, metaLogName)
			f, err := mem.OpenReadWrite(metaLogName)
			require.NoError(t, err)
			_, err = f.WriteAt(tail, good)
			require.NoError(t, err)
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())

			m, first := openMeta(t, mem)
			require.Equal(t, wantEntries(1, 1, 3), first.Entries)
			require.Equal(t, good, fileSize(t, mem, metaLogName), "the tail is cut")
			after := mem.Crash(vfs.CrashOptions{})
			require.Equal(t, good, fileSize(t, after, metaLogName), "durably")
			propose(t, m, 2, 4, 2)
			require.NoError(t, m.Close())
			_, first = openMeta(t, mem)
			require.Equal(t, append(wantEntries(1, 1, 3), wantEntries(4, 2, 2)...), first.Entries)
		})
	}
}

// TestFileMetadataCorruptMiddle flips each byte of the second of four
// frames in turn: a bad frame with good ones after it is no torn tail,
// whichever field the flip hit.
func TestFileMetadataCorruptMiddle(t *testing.T) {
	var log []byte
	for i := range uint64(4) {
		log = appendFrame(log, 1, i+1, entryData(i+1))
	}
	second := len(appendFrame(nil, 1, 1, entryData(1)))
	third := second + len(appendFrame(nil, 1, 2, entryData(2)))
	for off := second; off < third; off++ {
		fs := vfs.NewMem()
		damaged := append([]byte(nil), log...)
		damaged[off] ^= 0xff
		writeFile(t, fs, metaLogName, damaged)
		_, err := OpenFileMetadata(fs, metaDir, metaSelf)
		require.ErrorIs(t, err, ErrMetadataCorrupt, "byte %d flipped", off)
		require.ErrorContains(t, err, fmt.Sprintf("%s: bad frame at byte %d", metaLogName, second), "byte %d flipped", off)
		require.Equal(t, int64(len(log)), fileSize(t, fs, metaLogName), "nothing is cut")
	}
}

func TestFileMetadataCorruptIndexes(t *testing.T) {
	frames := func(indexes ...uint64) []byte {
		var b []byte
		for _, i := range indexes {
			b = appendFrame(b, 1, i, entryData(i))
		}
		return b
	}
	for name, c := range map[string]struct {
		log, snapshot []byte
		want          string
	}{
		"a gap":                     {log: frames(1, 2, 4), want: "entry 4 at byte 24 follows entry 2"},
		"a repeat":                  {log: frames(1, 2, 2), want: "entry 2 at byte 24 follows entry 2"},
		"no first entry":            {log: frames(2, 3), want: "the first entry, at byte 0, is 2"},
		"a gap after the snapshot":  {log: frames(5), snapshot: appendFrame(nil, 1, 3, nil), want: "is 5, but the snapshot holds up to 3"},
		"a snapshot cut short":      {snapshot: appendFrame(nil, 1, 3, []byte("state"))[:12], want: snapshotFile + " is not one whole frame (12 bytes)"},
		"a snapshot with a trailer": {snapshot: append(appendFrame(nil, 1, 3, nil), 0), want: snapshotFile + " is not one whole frame"},
	} {
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewMem()
			if c.log != nil {
				writeFile(t, fs, metaLogName, c.log)
			}
			if c.snapshot != nil {
				writeFile(t, fs, filepath.Join(metaDir, snapshotFile), c.snapshot)
			}
			_, err := OpenFileMetadata(fs, metaDir, metaSelf)
			require.ErrorIs(t, err, ErrMetadataCorrupt)
			require.ErrorContains(t, err, c.want)
			require.ErrorContains(t, err, metaDir)
		})
	}
}

func TestFileMetadataFailingDisk(t *testing.T) {
	for _, op := range []vfs.OpKind{vfs.OpSync, vfs.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			efs := vfs.NewErrorFS(mem)
			m, _ := openMeta(t, efs)
			efs.Inject(vfs.Fault{Ops: []vfs.OpKind{op}, Path: logFile, After: 2})
			propose(t, m, 1, 1, 2)
			err := m.Propose(1, entryData(3))
			require.ErrorIs(t, err, vfs.ErrInjected)
			require.ErrorContains(t, err, metaLogName)
			err = m.Propose(1, entryData(3))
			require.ErrorIs(t, err, ErrNotMetadataLeader, "a failed log refuses every later proposal")
			require.ErrorIs(t, err, vfs.ErrInjected, "and says why")
			require.Error(t, m.Snapshot(2, nil))
			require.Equal(t, MetadataUpdate{Leader: replica.NoNode, Term: 1}, nextUpdate(t, m),
				"the failed entry never comes; no one leads")
			require.NoError(t, m.Close())

			// Reopening reads what the failed operation left: a write that
			// failed wrote nothing; a sync that failed, the entry, which the
			// next open takes as committed. No index is used twice.
			m, first := openMeta(t, mem)
			n := 2
			if op == vfs.OpSync {
				n = 3
			}
			require.Equal(t, wantEntries(1, 1, n), first.Entries)
			propose(t, m, 2, uint64(n+1), 1)
		})
	}
}

// TestFileMetadataProposeNeverWaits proposes many entries before reading
// the feed, as a Node that proposes from the goroutine that reads it
// does; they all come, in order.
func TestFileMetadataProposeNeverWaits(t *testing.T) {
	m, _ := openMeta(t, vfs.NewMem())
	const n = 1000
	for i := range uint64(n) {
		require.NoError(t, m.Propose(1, entryData(i+1)))
	}
	require.Equal(t, wantEntries(1, 1, n), nextEntries(t, m, 1, n))
}

func TestFileMetadataClose(t *testing.T) {
	start := runtime.NumGoroutine()
	m, err := OpenFileMetadata(vfs.NewMem(), metaDir, metaSelf)
	require.NoError(t, err)
	require.NoError(t, m.Propose(1, []byte("never read")))
	require.NoError(t, m.Close())
	_, ok := <-m.Updates()
	require.False(t, ok, "Close closes the feed")
	require.NoError(t, m.Close(), "a second Close does nothing")
	require.ErrorIs(t, m.Propose(1, []byte("late")), ErrNotMetadataLeader)
	require.ErrorIs(t, m.Snapshot(1, nil), iofs.ErrClosed)
	// Close waited for the feed's goroutine, which may take a moment more
	// to leave the scheduler's count once it returned.
	for i := 0; runtime.NumGoroutine() > start && i < 100; i++ {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, start, runtime.NumGoroutine(), "the feed's goroutine has returned")
}

// TestFileMetadataOnDisk runs on the operating system's file system, as
// a nil fs asks, which also keeps a second open of the directory out.
func TestFileMetadataOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	m, err := OpenFileMetadata(nil, dir, metaSelf)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, MetadataUpdate{Leader: metaSelf, Term: 1, Replayed: true}, nextUpdate(t, m))
	_, err = OpenFileMetadata(nil, dir, metaSelf)
	require.ErrorIs(t, err, vfs.ErrLocked)
	propose(t, m, 1, 1, 3)
	require.NoError(t, m.Snapshot(2, []byte("state 2")))
	require.NoError(t, m.Close())

	m, err = OpenFileMetadata(nil, dir, metaSelf)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, MetadataUpdate{
		Snapshot: &MetadataSnapshot{Index: 2, Term: 1, Data: []byte("state 2")},
		Entries:  wantEntries(3, 1, 1),
		Leader:   metaSelf, Term: 2, Replayed: true,
	}, nextUpdate(t, m))
}

// FuzzOpenFileMetadata opens a log file of any content: it opens or fails
// with ErrMetadataCorrupt, never panics, and an open log takes a proposal
// that the next open replays after what the first one did.
func FuzzOpenFileMetadata(f *testing.F) {
	var log []byte
	for i := range uint64(3) {
		log = appendFrame(log, 1+i/2, i+1, entryData(i+1))
	}
	f.Add([]byte{})
	f.Add(log)
	f.Add(log[:len(log)-3])
	f.Add(append(log[:10:10], log[20:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := vfs.NewMem()
		writeFile(t, fs, metaLogName, b)
		m, err := OpenFileMetadata(fs, metaDir, metaSelf)
		if err != nil {
			require.ErrorIs(t, err, ErrMetadataCorrupt)
			return
		}
		first := nextUpdate(t, m)
		next := uint64(len(first.Entries)) + 1
		require.NoError(t, m.Propose(first.Term, []byte("new")))
		require.Equal(t, []MetadataEntry{{Index: next, Term: first.Term, Data: []byte("new")}}, nextUpdate(t, m).Entries)
		require.NoError(t, m.Close())

		m, err = OpenFileMetadata(fs, metaDir, metaSelf)
		require.NoError(t, err)
		defer m.Close()
		again := nextUpdate(t, m)
		require.Equal(t, append(first.Entries, MetadataEntry{Index: next, Term: first.Term, Data: []byte("new")}), again.Entries)
	})
}
