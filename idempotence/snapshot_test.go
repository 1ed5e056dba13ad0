package idempotence

import (
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

func newSnapshotDir(t testing.TB) (*vfs.MemFS, string) {
	t.Helper()
	m := vfs.NewMem()
	require.NoError(t, m.MkdirAll("/p", 0o755))
	require.NoError(t, vfs.SyncDir(m, "/"))
	return m, "/p"
}

// TestSnapshotBytes checks the file byte for byte against Kafka's
// ProducerSnapshot v1 schema, field by field.
func TestSnapshotBytes(t *testing.T) {
	entries := []Entry{
		{ProducerID: 7, Epoch: 3, CoordinatorEpoch: 9, LastTimestamp: 1234, TxnFirstOffset: 40,
			Batches: []BatchMetadata{{LastSeq: 1, LastOffset: 41, OffsetDelta: 1, Timestamp: 1200}, {LastSeq: 4, LastOffset: 44, OffsetDelta: 2, Timestamp: 1234}}},
		{ProducerID: 8, Epoch: 0, CoordinatorEpoch: -1, LastTimestamp: 99, TxnFirstOffset: -1},
	}
	var body []byte
	be := binary.BigEndian
	body = be.AppendUint32(body, 2) // entry count
	// Producer 7: only its newest batch is written.
	body = be.AppendUint64(body, 7)
	body = be.AppendUint16(body, 3)
	body = be.AppendUint32(body, 4)    // last sequence
	body = be.AppendUint64(body, 44)   // last offset
	body = be.AppendUint32(body, 2)    // offset delta
	body = be.AppendUint64(body, 1234) // timestamp
	body = be.AppendUint32(body, 9)    // coordinator epoch
	body = be.AppendUint64(body, 40)   // current transaction's first offset
	// Producer 8: no batch (only a marker), no transaction.
	body = be.AppendUint64(body, 8)
	body = be.AppendUint16(body, 0)
	body = be.AppendUint32(body, 0xffffffff)
	body = be.AppendUint64(body, 0xffffffffffffffff)
	body = be.AppendUint32(body, 0)
	body = be.AppendUint64(body, 99)
	body = be.AppendUint32(body, 0xffffffff)
	body = be.AppendUint64(body, 0xffffffffffffffff)
	want := be.AppendUint16(nil, 1)
	want = be.AppendUint32(want, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	want = append(want, body...)

	got := marshalSnapshot(entries)
	require.Equal(t, want, got)

	back, err := unmarshalSnapshot(got)
	require.NoError(t, err)
	entries[0].Batches = entries[0].Batches[1:]
	require.Equal(t, entries, back)
}

// TestReadWriteSnapshot: ProducerStateManagerTest.testReadWriteSnapshot.
func TestReadWriteSnapshot(t *testing.T) {
	entries := []Entry{
		{ProducerID: 1, Epoch: 2, CoordinatorEpoch: 3, LastTimestamp: -1, TxnFirstOffset: 100,
			Batches: []BatchMetadata{{LastSeq: 1, LastOffset: 2, OffsetDelta: 3, Timestamp: -1}}},
		{ProducerID: 11, Epoch: 12, CoordinatorEpoch: 13, LastTimestamp: 123456, TxnFirstOffset: -1},
	}
	back, err := unmarshalSnapshot(marshalSnapshot(entries))
	require.NoError(t, err)
	require.Equal(t, entries, back)
}

func TestSnapshotName(t *testing.T) {
	require.Equal(t, "/p/00000000000000000042.snapshot", SnapshotName("/p", 42))
}

// snapshotPartition is a partition whose state snapshots go to an
// in-memory directory.
func snapshotPartition(t *testing.T) (*partition, *vfs.MemFS, string) {
	p := newPartition(t)
	fs, dir := newSnapshotDir(t)
	return p, fs, dir
}

func (p *partition) snapshot(fs vfs.FS, dir string) {
	p.t.Helper()
	_, err := p.s.TakeSnapshot(fs, dir)
	require.NoError(p.t, err)
}

func (p *partition) reload(fs vfs.FS, dir string, logStart, logEnd, now int64) *State {
	p.t.Helper()
	s, err := Load(fs, dir, logStart, logEnd, millis(now), Config{})
	require.NoError(p.t, err)
	return s
}

func snapshotOffsets(t *testing.T, fs vfs.FS, dir string) []int64 {
	t.Helper()
	offs, err := ListSnapshots(fs, dir)
	require.NoError(t, err)
	return offs
}

// TestTruncateAndReloadRemovesOutOfRangeSnapshots:
// ProducerStateManagerTest.testTruncateAndReloadRemovesOutOfRangeSnapshots.
func TestTruncateAndReloadRemovesOutOfRangeSnapshots(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	for seq := range int32(5) {
		p.append(data(0, seq, seq))
		p.snapshot(fs, dir)
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5}, snapshotOffsets(t, fs, dir))
	s := p.reload(fs, dir, 1, 3, p.now)
	require.Equal(t, []int64{2, 3}, snapshotOffsets(t, fs, dir))
	require.Equal(t, int64(3), s.MapEndOffset())
}

// TestSkipSnapshotIfOffsetUnchanged:
// ProducerStateManagerTest.testSkipSnapshotIfOffsetUnchanged.
func TestSkipSnapshotIfOffsetUnchanged(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0))
	took, err := p.s.TakeSnapshot(fs, dir)
	require.NoError(t, err)
	require.True(t, took)
	took, err = p.s.TakeSnapshot(fs, dir)
	require.NoError(t, err)
	require.False(t, took)
	require.Equal(t, []int64{1}, snapshotOffsets(t, fs, dir))
}

// TestDeleteSnapshotsBefore: ProducerStateManagerTest.testDeleteSnapshotsBefore.
func TestDeleteSnapshotsBefore(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0))
	p.append(data(0, 1, 1))
	p.snapshot(fs, dir)
	p.append(data(0, 2, 2))
	p.snapshot(fs, dir)
	require.Equal(t, []int64{2, 3}, snapshotOffsets(t, fs, dir))
	require.NoError(t, DeleteSnapshotsBefore(fs, dir, 3))
	require.Equal(t, []int64{3}, snapshotOffsets(t, fs, dir))
	require.NoError(t, DeleteSnapshotsBefore(fs, dir, 4))
	require.Empty(t, snapshotOffsets(t, fs, dir))
}

// TestRecoverFromSnapshotUnfinishedTransaction:
// ProducerStateManagerTest.testRecoverFromSnapshotUnfinishedTransaction.
func TestRecoverFromSnapshotUnfinishedTransaction(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0).transactional())
	p.append(data(0, 1, 1).transactional())
	p.snapshot(fs, dir)
	p.s = p.reload(fs, dir, 0, 3, p.now)
	// The snapshot keeps the newest batch only.
	e := p.entry(pid)
	require.Equal(t, []BatchMetadata{{LastSeq: 1, LastOffset: 1, Timestamp: p.now}}, e.Batches)
	require.Equal(t, int64(0), e.TxnFirstOffset)
	requireFirstUnstable(t, p.s, 0)
	p.append(data(0, 2, 2).transactional())
}

// TestRecoverFromSnapshotFinishedTransaction:
// ProducerStateManagerTest.testRecoverFromSnapshotFinishedTransaction.
func TestRecoverFromSnapshotFinishedTransaction(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0).transactional())
	p.append(data(0, 1, 1).transactional())
	p.append(abort(0, 0))
	p.snapshot(fs, dir)
	p.s = p.reload(fs, dir, 0, 3, p.now)
	e := p.entry(pid)
	require.Equal(t, []BatchMetadata{{LastSeq: 1, LastOffset: 1, Timestamp: p.now}}, e.Batches)
	require.Equal(t, int64(-1), e.TxnFirstOffset)
	_, ok := p.s.FirstUnstableOffset()
	require.False(t, ok)
}

// TestRecoverFromSnapshotEmptyTransaction:
// ProducerStateManagerTest.testRecoverFromSnapshotEmptyTransaction.
func TestRecoverFromSnapshotEmptyTransaction(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(abort(0, 0).stamped(p.now - 5))
	p.snapshot(fs, dir)
	p.s = p.reload(fs, dir, 0, 1, p.now)
	e := p.entry(pid)
	require.Equal(t, p.now-5, e.LastTimestamp)
	require.Equal(t, int64(-1), e.TxnFirstOffset)
}

// TestRemoveExpiredPidsOnReload:
// ProducerStateManagerTest.testRemoveExpiredPidsOnReload and
// testAcceptAppendWithoutProducerStateOnReplica.
func TestRemoveExpiredPidsOnReload(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0).stamped(1))
	p.append(data(0, 1, 1).stamped(2))
	p.snapshot(fs, dir)
	later := 2 + DefaultProducerIDExpiration.Milliseconds()
	p.s = p.reload(fs, dir, 0, 2, later)
	require.Empty(t, p.s.Producers())
	// The expired producer's next batch is accepted whatever its sequence.
	p.append(data(0, 7, 7).stamped(later + 1))
	require.Equal(t, "0:[7]", summary(p.entry(pid)))
	require.Equal(t, int64(3), p.s.MapEndOffset())
}

// TestLoadFromSnapshotRetainsNonExpiredProducers:
// ProducerStateManagerTest.testLoadFromSnapshotRetainsNonExpiredProducers.
func TestLoadFromSnapshotRetainsNonExpiredProducers(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0))
	p.append(data(0, 0, 0).of(2))
	p.snapshot(fs, dir)
	p.s = p.reload(fs, dir, 1, 2, p.now)
	require.Len(t, p.s.Producers(), 2)
	require.Equal(t, int64(0), p.entry(1).Batches[0].LastOffset)
	require.Equal(t, int64(1), p.entry(2).Batches[0].LastOffset)
}

// TestCoordinatorFencedAfterReload:
// ProducerStateManagerTest.testCoordinatorFencedAfterReload.
func TestCoordinatorFencedAfterReload(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(data(0, 0, 0).transactional())
	p.append(commit(0, 1))
	p.snapshot(fs, dir)
	p.s = p.reload(fs, dir, 0, 2, p.now)
	_, _, err := p.try(commit(0, 0))
	require.ErrorIs(t, err, ErrTransactionCoordinatorFenced)
}

// TestFirstUnstableOffsetAfterTruncation:
// ProducerStateManagerTest.testFirstUnstableOffsetAfterTruncation.
func TestFirstUnstableOffsetAfterTruncation(t *testing.T) {
	p, fs, dir := snapshotPartition(t)
	p.append(at(data(0, 0, 0).transactional(), 99))
	requireFirstUnstable(t, p.s, 99)
	p.snapshot(fs, dir) // at 100
	p.append(at(commit(0, 0), 105))
	p.s.OnHighWatermark(106)
	_, ok := p.s.FirstUnstableOffset()
	require.False(t, ok)
	p.snapshot(fs, dir) // at 106
	p.append(data(0, 1, 1))

	s := p.reload(fs, dir, 0, 106, p.now)
	_, ok = s.FirstUnstableOffset()
	require.False(t, ok)
	s = p.reload(fs, dir, 0, 100, p.now)
	requireFirstUnstable(t, s, 99)
}

// TestLoadFromCorruptSnapshot: ProducerStateManagerTest's
// testLoadFromEmptySnapshotFile, testLoadFromTruncatedSnapshotFile and
// testLoadFromCorruptSnapshotFile: the damaged newest snapshot is deleted and
// the one before it loaded.
func TestLoadFromCorruptSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(f vfs.File, size int64) error
	}{
		{"empty", func(f vfs.File, _ int64) error { return f.Truncate(0) }},
		{"truncated", func(f vfs.File, size int64) error { return f.Truncate(size / 2) }},
		{"garbage", func(f vfs.File, _ int64) error { _, err := f.WriteAt(make([]byte, 37), 0); return err }},
		{"one bit", func(f vfs.File, size int64) error { _, err := f.WriteAt([]byte{0x10}, size-3); return err }},
		{"trailing bytes", func(f vfs.File, size int64) error { _, err := f.WriteAt([]byte{0}, size); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, fs, dir := snapshotPartition(t)
			p.append(data(0, 0, 0))
			p.snapshot(fs, dir)
			p.append(data(0, 1, 1))
			p.snapshot(fs, dir)
			name := SnapshotName(dir, 2)
			f, err := fs.OpenReadWrite(name)
			require.NoError(t, err)
			fi, err := f.Stat()
			require.NoError(t, err)
			require.NoError(t, tc.damage(f, fi.Size()))
			require.NoError(t, f.Close())

			_, err = ReadSnapshot(fs, name)
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			require.ErrorContains(t, err, name)

			s := p.reload(fs, dir, 0, 20, p.now)
			_, err = fs.Stat(name)
			require.ErrorIs(t, err, fs_ErrNotExist)
			e, ok := s.Producer(pid)
			require.True(t, ok)
			require.Equal(t, int64(0), e.Batches[0].LastOffset)
			require.Equal(t, int64(1), s.MapEndOffset())
		})
	}
}

var fs_ErrNotExist = fs.ErrNotExist

// TestLoadWithoutSnapshots: no snapshot means the log replays from its start.
func TestLoadWithoutSnapshots(t *testing.T) {
	fs, dir := newSnapshotDir(t)
	s, err := Load(fs, dir, 7, 30, millis(0), Config{})
	require.NoError(t, err)
	require.Equal(t, int64(7), s.MapEndOffset())
	require.Empty(t, s.Producers())
}

var crashLong = flag.Bool("crash.long", false, "run the snapshot crash test with many random seeds per operation")

// TestSnapshotCrashAtEveryOperation cuts the power before each file-system
// operation of a snapshot write that replaces an older snapshot's role, and
// checks that a restart loads the old state or the new one, never a mix,
// never an error. With -crash.long each cut keeps many random parts of the
// unsynced writes.
func TestSnapshotCrashAtEveryOperation(t *testing.T) {
	seeds := 3
	if *crashLong {
		seeds = 200
	}
	// script takes a snapshot at offset 2 (producer 1 up to sequence 1),
	// calls arm, and takes one at offset 4 (producer 1 up to 2, and
	// producer 2).
	script := func(fs *vfs.MemFS, arm func()) (p *partition, old []Entry, err error) {
		p = newPartition(t)
		p.append(data(0, 0, 0))
		p.append(data(0, 1, 1))
		p.snapshot(fs, "/p")
		old = p.s.Producers()
		p.append(data(0, 2, 2))
		p.append(data(4, 0, 0).of(2))
		arm()
		_, err = p.s.TakeSnapshot(fs, "/p")
		return p, old, err
	}
	total := 0
	{
		fs, _ := newSnapshotDir(t)
		_, _, err := script(fs, func() { fs.SetHook(func(vfs.Op) error { total++; return nil }) })
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, total, 5, "a snapshot write is a create, write, sync, rename and directory sync")

	for stop := 0; stop <= total; stop++ {
		for seed := range seeds {
			crash := vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(stop), uint64(seed)))}
			fs, _ := newSnapshotDir(t)
			var after *vfs.MemFS
			n := 0
			p, old, err := script(fs, func() {
				fs.SetHook(func(vfs.Op) error {
					if n == stop {
						after = fs.Crash(crash)
					}
					n++
					if n > stop {
						return errPowerCut
					}
					return nil
				})
			})
			if after == nil {
				require.NoError(t, err)
				after = fs.Crash(crash)
			}

			s, err := Load(after, "/p", 0, 4, millis(p.now), Config{})
			require.NoError(t, err, "stop %d seed %d", stop, seed)
			switch s.MapEndOffset() {
			case 2:
				require.Equal(t, trimToNewest(old), s.Producers(), "stop %d seed %d", stop, seed)
			case 4:
				require.Equal(t, trimToNewest(p.s.Producers()), s.Producers(), "stop %d seed %d", stop, seed)
			default:
				t.Fatalf("stop %d seed %d: loaded a snapshot at %d", stop, seed, s.MapEndOffset())
			}
			if stop == total {
				require.Equal(t, int64(4), s.MapEndOffset(), "a completed snapshot was lost")
			}
			names, err := after.List("/p")
			require.NoError(t, err)
			for _, name := range names {
				require.NotContains(t, name, vfs.TempSuffix, "Load left a temporary file")
			}
		}
	}
}

var errPowerCut = errors.New("power cut")

// trimToNewest is what a snapshot keeps of entries: each one's newest batch.
func trimToNewest(entries []Entry) []Entry {
	for i := range entries {
		if n := len(entries[i].Batches); n > 1 {
			entries[i].Batches = entries[i].Batches[n-1:]
		}
	}
	return entries
}

func FuzzUnmarshalSnapshot(f *testing.F) {
	f.Add(marshalSnapshot(nil))
	f.Add(marshalSnapshot([]Entry{{ProducerID: 1, Epoch: 2, TxnFirstOffset: 5, Batches: []BatchMetadata{{LastSeq: 3, LastOffset: 9}}}}))
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := unmarshalSnapshot(b)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			return
		}
		// What decodes encodes back to the same bytes.
		require.Equal(t, b, marshalSnapshot(entries))
	})
}

// TestRemoveStraySnapshots: ProducerStateManagerTest's
// testRemoveStraySnapshotsKeepCleanShutdownSnapshot and
// testRemoveAllStraySnapshots.
func TestRemoveStraySnapshots(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segments []int64
		want     []int64
	}{
		{"keeps the clean shutdown snapshot above the last segment", []int64{5}, []int64{5, 42}},
		{"removes every stray below the last segment", []int64{42}, []int64{42}},
		{"no segments: keeps the newest", nil, []int64{42}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := newSnapshotDir(t)
			for _, off := range []int64{5, 2, 42} {
				require.NoError(t, vfs.WriteFileAtomic(fs, SnapshotName(dir, off), marshalSnapshot(nil)))
			}
			require.NoError(t, RemoveStraySnapshots(fs, dir, tc.segments))
			require.Equal(t, tc.want, snapshotOffsets(t, fs, dir))
		})
	}
}
