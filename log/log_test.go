package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/metrics"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// memOptions are small segments on an in-memory file system.
func memOptions(fs vfs.FS) Options {
	return Options{FS: fs, SegmentBytes: 8 << 10, MaxIndexBytes: 1024, IndexIntervalBytes: 512}
}

func newMemFS(t testing.TB) *vfs.MemFS {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/data", 0o755))
	require.NoError(t, vfs.SyncDir(fs, "/"))
	return fs
}

func record(i int, size int) segment.Record {
	v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	return segment.Record{Key: fmt.Appendf(nil, "key-%d", i), Value: v, Timestamp: int64(1000 + i)}
}

// recordsFrom returns n records as record() makes them, from i.
func recordsFrom(i, n, size int) []segment.Record {
	recs := make([]segment.Record, n)
	for j := range recs {
		recs[j] = record(i+j, size)
	}
	return recs
}

func appendN(t testing.TB, l *Log, from, n, perBatch, size int) {
	t.Helper()
	for i := from; i < from+n; i += perBatch {
		recs := recordsFrom(i, min(perBatch, from+n-i), size)
		res, err := l.Append(recs)
		require.NoError(t, err)
		require.EqualValues(t, i, res.BaseOffset)
		require.EqualValues(t, i+len(recs)-1, res.LastOffset)
	}
}

// requireRecords checks that the log holds records from..to-1 as record()
// made them.
func requireRecords(t testing.TB, l *Log, from, to int, size int) {
	t.Helper()
	next := from
	for r, err := range l.Records(int64(from), ReadLogEnd) {
		require.NoError(t, err)
		require.EqualValues(t, next, r.Offset)
		want := record(next, size)
		require.Equal(t, want.Key, r.Key)
		require.Equal(t, want.Value, r.Value)
		require.Equal(t, want.Timestamp, r.Timestamp)
		next++
	}
	require.Equal(t, to, next)
}

func TestAppendReadReopen(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/orders-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 500, 10, 100)
	require.EqualValues(t, 500, l.LogEndOffset())
	require.EqualValues(t, 500, l.HighWatermark())
	require.Greater(t, l.Stats().Segments, 3, "small segments roll")
	requireRecords(t, l, 0, 500, 100)
	requireRecords(t, l, 255, 500, 100)
	require.NoError(t, l.Close())

	l, err = Open("/data/orders-0", memOptions(fs))
	require.NoError(t, err)
	segs := l.Stats().Segments
	require.Equal(t, segs-1+3+1, l.Stats().OpenFiles, "a clean reopen opens the sealed segments' indexes only when used (and the lock file)")
	requireRecords(t, l, 0, 500, 100)
	require.Equal(t, 3*segs+1, l.Stats().OpenFiles)
	appendN(t, l, 500, 100, 10, 100)
	requireRecords(t, l, 0, 600, 100)
	require.NoError(t, l.Close())
}

// A record appended without a timestamp gets the append time, as a Kafka
// producer stamps the records its caller sent without one; a record with
// one keeps it, and the caller's records are not changed.
func TestAppendStampsRecordsWithoutTimestamp(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	opts := memOptions(newMemFS(t))
	opts.Now = func() time.Time { return now }
	l, err := Open("/data/orders-0", opts)
	require.NoError(t, err)
	defer l.Close()
	recs := []segment.Record{{Value: []byte("a")}, {Timestamp: 42, Value: []byte("b")}}
	_, err = l.Append(recs)
	require.NoError(t, err)
	require.Zero(t, recs[0].Timestamp)
	var got []int64
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		got = append(got, r.Timestamp)
	}
	require.Equal(t, []int64{now.UnixMilli(), 42}, got)
}

// raceEnabled is set by race_flag_test.go. The race detector makes
// sync.Pool drop items at random, so pooled buffers are reallocated.
var raceEnabled bool

// An Append of records without timestamps allocates nothing once the log
// runs: the batch buffer, the pending append with its wake channel and the
// group's slice are reused, and the records are stamped as they are
// encoded rather than copied.
func TestAppendAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	l, err := Open("/data/orders-0", Options{FS: newMemFS(t), Fsync: FsyncNever()})
	require.NoError(t, err)
	defer l.Close()
	recs := []segment.Record{{Value: []byte("a")}, {Key: []byte("k"), Value: []byte("b")}}
	allocs := testing.AllocsPerRun(100, func() {
		_, err = l.Append(recs)
	})
	require.NoError(t, err)
	require.Zero(t, allocs)
}

func TestReadOutsideTheLog(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 100, 10, 50)
	require.NoError(t, l.DeleteRecordsBefore(20))

	for _, off := range []int64{-1, 19, 101} {
		_, err := l.Read(off, 1000, ReadLogEnd)
		var oor *OffsetOutOfRangeError
		require.ErrorAs(t, err, &oor, "offset %d", off)
		require.ErrorIs(t, err, ErrOffsetOutOfRange)
		require.Equal(t, OffsetOutOfRangeError{Offset: off, Start: 20, End: 100}, *oor)
	}
	bs, err := l.Read(100, 1000, ReadLogEnd)
	require.NoError(t, err)
	require.Zero(t, bs.Len(), "the log end offset reads nothing")
	require.NoError(t, bs.Close())
}

func TestOptionsAreValidated(t *testing.T) {
	fs := newMemFS(t)
	for _, tc := range []struct {
		opts Options
		name string
	}{
		{Options{SegmentBytes: 100}, "SegmentBytes"},
		{Options{SegmentBytes: 1 << 31}, "SegmentBytes"},
		{Options{SegmentAge: -time.Second}, "SegmentAge"},
		{Options{MaxIndexBytes: 10}, "MaxIndexBytes"},
		{Options{IndexIntervalBytes: -1}, "IndexIntervalBytes"},
		{Options{MaxBatchBytes: 10}, "MaxBatchBytes"},
		{Options{SegmentBytes: 1 << 20, MaxBatchBytes: 2 << 20}, "MaxBatchBytes"},
		{Options{Compression: segment.CodecSnappy}, "Compression"},
		{Options{CheckpointInterval: -1}, "CheckpointInterval"},
		{Options{Fsync: FsyncInterval(0)}, "Fsync"},
		{Options{Fsync: FsyncEvery(0, 0)}, "Fsync"},
	} {
		tc.opts.FS = fs
		_, err := Open("/data/x-0", tc.opts)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, tc.name)
		require.ErrorContains(t, err, "allowed")
	}
}

func TestClosedLogRefusesEverything(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 10, 5, 10)
	require.NoError(t, l.Close())

	_, err = l.Append([]segment.Record{record(0, 1)})
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.Read(0, 100, ReadLogEnd)
	require.ErrorIs(t, err, ErrClosed)
	for _, err := range l.Records(0, ReadLogEnd) {
		require.ErrorIs(t, err, ErrClosed)
	}
	require.ErrorIs(t, l.Wait(context.Background(), 100, ReadLogEnd), ErrClosed)
	require.ErrorIs(t, l.TruncateTo(0), ErrClosed)
	require.ErrorIs(t, l.DeleteRecordsBefore(1), ErrClosed)
	require.ErrorIs(t, l.SetLeaderEpoch(3), ErrClosed)
	require.ErrorIs(t, l.Sync(), ErrClosed)
	_, err = l.SetHighWatermark(3)
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = l.EndOffsetForEpoch(0)
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = l.OffsetForTimestamp(0)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, l.Close(), ErrClosed)
}

func TestGroupCommitSharesFsyncs(t *testing.T) {
	fs := newMemFS(t)
	opts := memOptions(fs)
	opts.SegmentBytes = 1 << 30
	opts.MaxIndexBytes = 1 << 20
	l, err := Open("/data/g-0", opts)
	require.NoError(t, err)
	before := l.Stats().Fsyncs

	const writers, each = 8, 50
	var wg sync.WaitGroup
	offsets := make(chan int64, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := l.Append([]segment.Record{{Value: []byte("x"), Timestamp: 1}})
				if err != nil {
					t.Error(err)
					return
				}
				offsets <- res.BaseOffset
			}
		}()
	}
	wg.Wait()
	close(offsets)
	seen := make(map[int64]bool)
	for o := range offsets {
		require.False(t, seen[o], "offset %d assigned twice", o)
		seen[o] = true
	}
	require.Len(t, seen, writers*each)
	st := l.Stats()
	require.EqualValues(t, writers*each, st.Appends)
	require.LessOrEqual(t, st.Fsyncs-before, int64(writers*each), "at most one fsync an append")
	require.EqualValues(t, st.Fsyncs, st.FsyncLatency.Count, "every fsync in the latency histogram")
	require.Equal(t, st.FsyncTime, st.FsyncLatency.Sum)
	require.LessOrEqual(t, st.FsyncLatency.Quantile(1), max(2*st.MaxFsync, metrics.LatencyBuckets[0]), "the slowest bucket holds the longest fsync")
	require.Equal(t, st.HighWatermark, st.LastStableOffset, "no transaction: the last stable offset is the high watermark")
	t.Logf("%d appends, %d fsyncs, median %v", st.Appends, st.Fsyncs-before, st.FsyncLatency.Quantile(0.5))
	require.NoError(t, l.Close())
}

func TestCleanReopenScansNothingAndUncleanReportsCorruption(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/c-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 50, 10, 100)
	require.Equal(t, 1, l.Stats().Segments)
	require.NoError(t, l.Close())

	// Flip a bit inside the first batch's records: only a scan can see it.
	name := segment.FileName("/data/c-0", 0, segment.LogSuffix)
	f, err := fs.OpenReadWrite(name)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, 100)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{b[0] ^ 0x10}, 100)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	l, err = Open("/data/c-0", memOptions(fs))
	require.NoError(t, err, "a clean reopen reads no batch")
	require.EqualValues(t, 50, l.LogEndOffset())
	require.NoError(t, l.Close())

	// Without the marker, the active segment is scanned; the bad batch is
	// below the recovery point, so it is reported, not cut.
	require.NoError(t, fs.Remove(filepath.Join("/data/c-0", cleanShutdownFile)))
	_, err = Open("/data/c-0", memOptions(fs))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, name)
	require.ErrorContains(t, err, "position 0")
}

func TestTruncateTo(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 400, 10, 100)
	segs := l.Stats().Segments
	require.Greater(t, segs, 3)

	require.NoError(t, l.TruncateTo(205))
	require.EqualValues(t, 200, l.LogEndOffset(), "the batch holding 205 goes whole")
	require.LessOrEqual(t, l.HighWatermark(), int64(200))
	requireRecords(t, l, 0, 200, 100)
	appendN(t, l, 200, 100, 10, 100)
	requireRecords(t, l, 0, 300, 100)

	// Below the first segment: the log restarts there.
	require.NoError(t, l.DeleteRecordsBefore(150))
	require.NoError(t, l.TruncateTo(0))
	require.EqualValues(t, 0, l.LogEndOffset())
	require.Equal(t, 1, l.Stats().Segments)
	appendN(t, l, 0, 20, 10, 100)
	requireRecords(t, l, 0, 20, 100)
}

func TestDeletedSegmentStaysReadableWhileHeld(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/d-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 300, 10, 100)
	held, err := l.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	want, err := held.Bytes()
	require.NoError(t, err)

	require.NoError(t, l.DeleteRecordsBefore(250))
	require.EqualValues(t, 250, l.LogStartOffset())
	names, err := fs.List("/data/d-0")
	require.NoError(t, err)
	require.Contains(t, names, "00000000000000000000.log.deleted")

	got, err := held.Bytes()
	require.NoError(t, err)
	require.Equal(t, want, got, "a reader holding a deleted segment still reads it")
	require.NoError(t, held.Close())
	names, err = fs.List("/data/d-0")
	require.NoError(t, err)
	require.NotContains(t, names, "00000000000000000000.log.deleted", "removed once released")

	require.ErrorIs(t, l.DeleteRecordsBefore(301), ErrOffsetOutOfRange, "not past the high watermark")
}

func TestLeaderEpochs(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/e-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 10, 5, 10)
	require.NoError(t, l.SetLeaderEpoch(1))
	appendN(t, l, 10, 10, 5, 10)
	require.NoError(t, l.SetLeaderEpoch(3))
	appendN(t, l, 20, 10, 5, 10)
	require.ErrorIs(t, l.SetLeaderEpoch(2), ErrStaleEpoch)

	bs, err := l.Read(10, 1<<20, ReadLogEnd)
	require.NoError(t, err)
	for b, err := range bs.All() {
		require.NoError(t, err)
		want := int32(1)
		if b.BaseOffset() >= 20 {
			want = 3
		}
		require.Equal(t, want, b.PartitionLeaderEpoch(), "batch at %d", b.BaseOffset())
	}
	require.NoError(t, bs.Close())

	for _, tc := range []struct {
		ask       int32
		epoch     int32
		endOffset int64
	}{
		{1, 1, 20}, {2, 1, 20}, {3, 3, 30},
		{4, -1, -1}, // an epoch this log never saw (LeaderEpochFileCache.endOffsetFor)
	} {
		e, off, err := l.EndOffsetForEpoch(tc.ask)
		require.NoError(t, err)
		require.Equal(t, tc.epoch, e, "epoch asked %d", tc.ask)
		require.Equal(t, tc.endOffset, off, "epoch asked %d", tc.ask)
	}
	require.NoError(t, l.Close())

	l, err = Open("/data/e-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	require.EqualValues(t, 3, l.LeaderEpoch())
	require.Equal(t, []EpochEntry{{1, 10}, {3, 20}}, l.Epochs())
	require.NoError(t, l.TruncateTo(15))
	require.Equal(t, []EpochEntry{{1, 10}}, l.Epochs())
}

func TestFullDiskFailsTheAppendOnly(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/f-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 40, 10, 100)
	full := true
	fs.SetHook(func(op vfs.Op) error {
		if full && op.Kind == vfs.OpWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	_, err = l.Append([]segment.Record{record(40, 100)})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.EqualValues(t, 40, l.LogEndOffset())
	full = false
	appendN(t, l, 40, 20, 10, 100)
	requireRecords(t, l, 0, 60, 100)
	require.NoError(t, l.Close())
	l, err = Open("/data/f-0", memOptions(fs))
	require.NoError(t, err)
	requireRecords(t, l, 0, 60, 100)
	require.NoError(t, l.Close())
}

func TestOffsetForTimestamp(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/ts-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 300, 7, 80) // record i has timestamp 1000+i
	require.Greater(t, l.Stats().Segments, 2)
	for _, ts := range []int64{0, 1000, 1001, 1150, 1299} {
		off, ok, err := l.OffsetForTimestamp(ts)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, max(ts-1000, 0), off, "timestamp %d", ts)
	}
	_, ok, err := l.OffsetForTimestamp(1300)
	require.NoError(t, err)
	require.False(t, ok)
}

// A Wait parked before the append (synctest.Wait: every goroutine of the
// bubble is blocked) wakes with it, and one parked before Close with
// ErrClosed.
func TestWaitWakesOnAppendAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newMemFS(t)
		l, err := Open("/data/w-0", memOptions(fs))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- l.Wait(context.Background(), 0, ReadCommitted) }()
		synctest.Wait()
		require.Empty(t, done, "Wait returned before anything was appended")
		appendN(t, l, 0, 1, 1, 10)
		require.NoError(t, <-done)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, l.Wait(ctx, 1, ReadCommitted), context.DeadlineExceeded)

		go func() { done <- l.Wait(context.Background(), 5, ReadCommitted) }()
		synctest.Wait()
		require.Empty(t, done, "Wait returned before the log closed")
		require.NoError(t, l.Close())
		require.ErrorIs(t, <-done, ErrClosed)
	})
}

// TestCrashAtEveryOperation appends with FsyncAlways on the in-memory file
// system and cuts the power before each file-system operation in turn:
// every append that returned must be there after recovery, with its bytes,
// and offsets must be contiguous.
func TestCrashAtEveryOperation(t *testing.T) {
	script := func(fs *vfs.MemFS, acked *int) {
		l, err := Open("/data/k-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		for i := 0; i < 60; i += 5 {
			var recs []segment.Record
			for j := i; j < i+5; j++ {
				recs = append(recs, record(j, 150))
			}
			if _, err := l.Append(recs); err != nil {
				return
			}
			*acked = i + 5
			if i == 30 {
				if l.TruncateTo(100) != nil { // no-op, but runs the checkpoint path
					return
				}
			}
		}
	}
	var acked int
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, &acked) })
	require.Equal(t, 60, acked)

	for stop := 0; stop < total; stop++ {
		acked := 0
		after := crashedAt(t, stop, 7, func(fs *vfs.MemFS) { script(fs, &acked) })
		l, err := Open("/data/k-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		leo := int(l.LogEndOffset())
		require.GreaterOrEqual(t, leo, acked, "stop %d: acknowledged records lost", stop)
		requireRecords(t, l, 0, leo, 150)
		appendN(t, l, leo, 5, 5, 150) // and it takes appends again
		require.NoError(t, l.Close())
	}
}

// countOps returns how many file-system operations script makes on a new
// in-memory file system.
func countOps(t *testing.T, script func(*vfs.MemFS)) int {
	n := 0
	fs := newMemFS(t)
	fs.SetHook(func(vfs.Op) error { n++; return nil })
	script(fs)
	return n
}

// crashedAt runs script on a new in-memory file system whose power is cut
// before its operation number stop, counting from 0: that operation and
// every later one fail. It returns what a restart finds, keeping a random
// part (seeded by seed and stop) of what was not synced.
func crashedAt(t *testing.T, stop int, seed uint64, script func(*vfs.MemFS)) *vfs.MemFS {
	t.Helper()
	fs := newMemFS(t)
	var after *vfs.MemFS
	n := 0
	fs.SetHook(func(vfs.Op) error {
		if n == stop {
			after = fs.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(stop), seed+*crashSeed))})
		}
		n++
		if n > stop {
			return errPowerCut
		}
		return nil
	})
	script(fs)
	if after == nil {
		after = fs.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(stop), seed+*crashSeed))})
	}
	return after
}

var errPowerCut = errors.New("power cut")

// TestRollRules checks each of Kafka's LogSegment.shouldRoll conditions.
func TestRollRules(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		l, err := Open("/data/s-0", memOptions(newMemFS(t)))
		require.NoError(t, err)
		defer l.Close()
		appendN(t, l, 0, 100, 10, 200) // ~2.2 KiB batches into 8 KiB segments
		l.mu.RLock()
		defer l.mu.RUnlock()
		for _, s := range l.segs {
			require.LessOrEqual(t, s.Size(), int64(8<<10))
		}
		require.Greater(t, len(l.segs), 2)
	})
	t.Run("age by record timestamps", func(t *testing.T) {
		opts := memOptions(newMemFS(t))
		opts.SegmentBytes = 1 << 20
		opts.SegmentAge = time.Second
		l, err := Open("/data/a-0", opts)
		require.NoError(t, err)
		defer l.Close()
		for i, ts := range []int64{1000, 1500, 2000, 2001, 3500} {
			_, err := l.Append([]segment.Record{{Value: []byte{byte(i)}, Timestamp: ts}})
			require.NoError(t, err)
		}
		// 2001-1000 > 1s rolls before offset 3; 3500-2001 > 1s before 4.
		require.Equal(t, []int64{0, 3, 4}, segmentBases(l))
	})
	t.Run("full index", func(t *testing.T) {
		opts := memOptions(newMemFS(t))
		opts.SegmentBytes = 1 << 20
		opts.MaxIndexBytes = 1024 // time index: 85 entries, full at 84
		opts.IndexIntervalBytes = 1
		l, err := Open("/data/i-0", opts)
		require.NoError(t, err)
		defer l.Close()
		appendN(t, l, 0, 200, 1, 10)
		bases := segmentBases(l)
		require.Equal(t, []int64{0, 85, 170}, bases, "one entry a batch after the first: 84 entries, then a roll")
		requireRecords(t, l, 0, 200, 10)
	})
	t.Run("relative offset overflow", func(t *testing.T) {
		l, err := Open("/data/o-0", memOptions(newMemFS(t)))
		require.NoError(t, err)
		defer l.Close()
		far := int64(math.MaxInt32) + 10
		for _, base := range []int64{0, far} {
			b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("x"), Timestamp: 1}}, segment.BuildOptions{BaseOffset: base})
			require.NoError(t, err)
			_, err = l.AppendReplicated(b)
			require.NoError(t, err)
		}
		require.Equal(t, []int64{0, far}, segmentBases(l))
		require.Equal(t, far+1, l.LogEndOffset())
	})
}

func segmentBases(l *Log) []int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var bases []int64
	for _, s := range l.segs {
		bases = append(bases, s.BaseOffset())
	}
	return bases
}
