package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// raceRecords are n records of writer w from its seq-th on, each valued
// as killValue says, so that a reader can check any record it meets.
func raceRecords(w, seq, n int) ([]segment.Record, []string) {
	recs := make([]segment.Record, n)
	keys := make([]string, n)
	for i := range recs {
		keys[i] = fmt.Sprintf("w%d-%d", w, seq+i)
		recs[i] = segment.Record{Key: []byte(keys[i]), Value: killValue(keys[i]), Timestamp: int64(1 + seq + i)}
	}
	return recs, keys
}

// offsetBook is what the appenders and readers of a test learned about
// which record sits at which offset. Whoever learns an offset first writes
// it down; everyone after must agree.
type offsetBook struct{ m sync.Map }

func (b *offsetBook) see(off int64, key string) error {
	if got, loaded := b.m.LoadOrStore(off, key); loaded && got != key {
		return fmt.Errorf("offset %d holds %q, earlier %q", off, key, got)
	}
	return nil
}

// checkRecord checks that r is the next record a reader expects and that
// it holds what was appended.
func (b *offsetBook) checkRecord(r segment.Record, next int64) error {
	if r.Offset != next {
		return fmt.Errorf("record at offset %d where %d was next", r.Offset, next)
	}
	if !bytes.Equal(r.Value, killValue(string(r.Key))) {
		return fmt.Errorf("offset %d: the value of %q is not the one appended", r.Offset, r.Key)
	}
	return b.see(r.Offset, string(r.Key))
}

// checkBatches checks the records of bs from offset *next on, advancing
// *next past them.
func (b *offsetBook) checkBatches(bs *Batches, next *int64) error {
	for batch, err := range bs.All() {
		if err != nil {
			return err
		}
		for r, err := range batch.Records() {
			if err != nil {
				return err
			}
			if r.Offset < *next {
				continue // the first batch may start before the offset asked for
			}
			if err := b.checkRecord(r, *next); err != nil {
				return err
			}
			*next++
		}
	}
	return nil
}

// errorUnless reports err unless it is nil or one of allowed.
func errorUnless(t *testing.T, err error, allowed ...error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return
		}
	}
	t.Error(err)
}

// requireNoLeakedGoroutines waits for the goroutine count to fall back to
// before and fails with every goroutine's stack if it does not.
func requireNoLeakedGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConcurrentUseThenClose runs appenders, readers of three kinds,
// waiters and a deleter of old records against one log, then closes it
// under them. Nothing may fail but with ErrClosed; every reader sees
// contiguous records holding what was appended; a reader holding batches
// reads them after Close; and once everyone let go, no goroutine, timer or
// file is left.
func TestConcurrentUseThenClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) (string, Options)
	}{
		{"MemFS/FsyncAlways", func(t *testing.T) (string, Options) {
			return "/data/race-0", Options{FS: newMemFS(t), SegmentBytes: 16 << 10, IndexIntervalBytes: 1024, MaxIndexBytes: 1024}
		}},
		{"OS/FsyncInterval", func(t *testing.T) (string, Options) {
			return t.TempDir() + "/race-0", Options{Fsync: FsyncInterval(time.Millisecond), SegmentBytes: 16 << 10, IndexIntervalBytes: 1024, MaxIndexBytes: 1024}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, opts := tc.opts(t)
			raceThenClose(t, dir, opts)
		})
	}
}

func raceThenClose(t *testing.T, dir string, opts Options) {
	before := runtime.NumGoroutine()
	l, err := Open(dir, opts)
	require.NoError(t, err)

	var (
		book     offsetBook
		appended atomic.Int64
		wg       sync.WaitGroup
	)
	spawn := func(f func(rng *rand.Rand)) {
		wg.Add(1)
		seed := rand.Uint64()
		go func() {
			defer wg.Done()
			f(rand.New(rand.NewPCG(seed, 0)))
		}()
	}

	// Appenders, one of them with batches it builds itself.
	for w := range 3 {
		spawn(func(rng *rand.Rand) {
			for seq := 0; ; {
				recs, keys := raceRecords(w, seq, 1+rng.IntN(3))
				var res AppendResult
				var err error
				if w == 0 {
					var b segment.Batch
					if b, err = segment.AppendBatch(nil, recs, segment.BuildOptions{}); err == nil {
						res, err = l.AppendBatch(b)
					}
				} else {
					res, err = l.Append(recs)
				}
				if err != nil {
					errorUnless(t, err, ErrClosed)
					return
				}
				for i, k := range keys {
					errorUnless(t, book.see(res.BaseOffset+int64(i), k))
				}
				appended.Add(int64(len(keys)))
				seq += len(keys)
			}
		})
	}

	// restart moves a reader that fell below the log start offset up to
	// it; any other error ends the reader.
	restart := func(err error, next *int64) bool {
		var oor *OffsetOutOfRangeError
		if errors.As(err, &oor) && *next < oor.Start {
			*next = oor.Start
			return true
		}
		errorUnless(t, err, ErrClosed)
		return false
	}

	// A reader of batches up to the high watermark.
	spawn(func(rng *rand.Rand) {
		var next int64
		for {
			bs, err := l.Read(next, 1+rng.IntN(8<<10), ReadCommitted)
			if err != nil {
				if restart(err, &next) {
					continue
				}
				return
			}
			if bs.Len() == 0 {
				errorUnless(t, bs.Close())
				if err := l.Wait(context.Background(), next, ReadCommitted); err != nil {
					errorUnless(t, err, ErrClosed)
					return
				}
				continue
			}
			if err := errors.Join(book.checkBatches(bs, &next), bs.Close()); err != nil {
				t.Error(err)
				return
			}
		}
	})

	// A tailing reader of records up to the log end.
	spawn(func(*rand.Rand) {
		var next int64
		for {
			var rerr error
			for r, err := range l.Records(next, ReadLogEnd) {
				if err == nil {
					err = book.checkRecord(r, next)
				}
				if err != nil {
					rerr = err
					break
				}
				next++
			}
			if rerr == nil {
				rerr = l.Wait(context.Background(), next, ReadLogEnd)
			}
			if rerr != nil && !restart(rerr, &next) {
				return
			}
		}
	})

	// A sender that writes batches from random offsets to io.Discard and
	// holds each result until the next, across deletions and Close.
	spawn(func(rng *rand.Rand) {
		var held *Batches
		var heldBytes []byte
		// letGo checks that the held batches still read as they did, even
		// if their segment was deleted or the log closed, and closes them.
		letGo := func() bool {
			if held == nil {
				return true
			}
			got, err := held.Bytes()
			if err == nil && !bytes.Equal(got, heldBytes) {
				err = fmt.Errorf("held batches at position %d changed", held.Position())
			}
			if err = errors.Join(err, held.Close()); err != nil {
				t.Error(err)
				return false
			}
			return true
		}
		defer letGo()
		for {
			start, hw := l.LogStartOffset(), l.HighWatermark()
			bs, err := l.Read(start+rng.Int64N(hw-start+1), 4096, ReadCommitted)
			if err != nil {
				var oor *OffsetOutOfRangeError
				if errors.As(err, &oor) {
					continue // the log start moved on meanwhile
				}
				errorUnless(t, err, ErrClosed)
				return
			}
			n, err := bs.WriteTo(io.Discard)
			if err == nil && n != bs.Len() {
				err = fmt.Errorf("WriteTo wrote %d bytes of %d", n, bs.Len())
			}
			if err != nil {
				t.Error(err)
				return
			}
			if !letGo() {
				return
			}
			held = bs
			if heldBytes, err = bs.Bytes(); err != nil {
				t.Error(err)
				return
			}
			runtime.Gosched()
		}
	})

	// Waiters for a little past the end, and one for an offset never
	// reached, which only Close ends.
	for _, iso := range []Isolation{ReadCommitted, ReadLogEnd} {
		spawn(func(rng *rand.Rand) {
			for {
				off := l.LogEndOffset() + rng.Int64N(5)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				err := l.Wait(ctx, off, iso)
				cancel()
				switch {
				case err == nil:
					if bound := l.bound(iso); bound <= off {
						t.Errorf("Wait(%d, %v) returned at bound %d", off, iso, bound)
					}
				case errors.Is(err, context.DeadlineExceeded):
				default:
					errorUnless(t, err, ErrClosed)
					return
				}
			}
		})
	}
	spawn(func(*rand.Rand) {
		if err := l.Wait(context.Background(), 1<<62, ReadLogEnd); !errors.Is(err, ErrClosed) {
			t.Errorf("Wait for an offset never reached returned %v, want ErrClosed", err)
		}
	})

	// A deleter of old records, which also syncs and asks for stats.
	spawn(func(rng *rand.Rand) {
		for {
			off := l.HighWatermark() - rng.Int64N(300)
			err := l.DeleteRecordsBefore(off)
			if err == nil {
				err = l.Sync()
			}
			if err != nil {
				errorUnless(t, err, ErrClosed)
				return
			}
			if st := l.Stats(); st.LogStartOffset < off || st.LogStartOffset > st.HighWatermark {
				t.Errorf("log start offset %d after deleting before %d, high watermark %d", st.LogStartOffset, off, st.HighWatermark)
			}
			time.Sleep(time.Millisecond)
		}
	})

	deadline := time.Now().Add(time.Second)
	for appended.Load() < 3000 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, l.Close())
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines still using the log 5s after Close:\n%s", buf[:runtime.Stack(buf, true)])
	}
	require.Zero(t, l.Stats().OpenFiles, "files left open once every reader let go")
	recs, _ := raceRecords(0, 0, 1)
	_, err = l.Append(recs)
	require.ErrorIs(t, err, ErrClosed)
	_, err = l.Read(0, 1, ReadLogEnd)
	require.ErrorIs(t, err, ErrClosed)
	requireNoLeakedGoroutines(t, before)
	t.Logf("%d records appended before Close", appended.Load())

	// Every acknowledged record from the log start on is there, as the
	// readers saw it.
	l, err = Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	start, leo := l.LogStartOffset(), l.LogEndOffset()
	require.GreaterOrEqual(t, leo, appended.Load(), "records appended before Close are all there")
	next := start
	for r, err := range l.Records(start, ReadLogEnd) {
		require.NoError(t, err)
		require.NoError(t, book.checkRecord(r, next))
		next++
	}
	require.Equal(t, leo, next)
}

// TestFsyncIntervalTimerEndsWithClose closes logs while their flush timer
// is pending or firing: Close waits for it, and no file-system operation
// happens after Close returns.
func TestFsyncIntervalTimerEndsWithClose(t *testing.T) {
	before := runtime.NumGoroutine()
	fs := newMemFS(t)
	opts := Options{FS: fs, Fsync: FsyncInterval(time.Millisecond), MaxIndexBytes: 1024}
	var closed atomic.Bool
	fs.SetHook(func(op vfs.Op) error {
		if closed.Load() {
			t.Errorf("%v %s after Close returned", op.Kind, op.Name)
		}
		return nil
	})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		closed.Store(false)
		l, err := Open("/data/timer-0", opts)
		require.NoError(t, err)
		recs, _ := raceRecords(0, i, 1)
		_, err = l.Append(recs)
		require.NoError(t, err)
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
		require.NoError(t, l.Close())
		closed.Store(true)
	}
	time.Sleep(5 * time.Millisecond) // past the last interval
	requireNoLeakedGoroutines(t, before)
}

// TestEmptyReadIsUsable reads at the high watermark, which returns no
// batches: the result must behave as an empty slice (a long-poll server
// writes whatever Read returned), not panic.
func TestEmptyReadIsUsable(t *testing.T) {
	l, err := Open("/data/empty-0", Options{FS: newMemFS(t), MaxIndexBytes: 1024})
	require.NoError(t, err)
	defer l.Close()
	recs, _ := raceRecords(0, 0, 2)
	_, err = l.Append(recs)
	require.NoError(t, err)

	for _, use := range []struct {
		name string
		f    func(*Batches) (int64, error)
	}{
		{"WriteTo", func(bs *Batches) (int64, error) { return bs.WriteTo(io.Discard) }},
		{"Bytes", func(bs *Batches) (int64, error) { b, err := bs.Bytes(); return int64(len(b)), err }},
		{"ReadAt", func(bs *Batches) (int64, error) {
			n, err := bs.ReadAt(make([]byte, 10), 0)
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return int64(n), err
		}},
		{"All", func(bs *Batches) (int64, error) {
			var n int64
			for _, err := range bs.All() {
				if err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		}},
	} {
		t.Run(use.name, func(t *testing.T) {
			bs, err := l.Read(l.HighWatermark(), 1<<20, ReadCommitted)
			require.NoError(t, err)
			defer func() { require.NoError(t, bs.Close()) }()
			require.Zero(t, bs.Len())
			var n int64
			require.NotPanics(t, func() { n, err = use.f(bs) })
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}

// TestDeleteRecordsWhileReading deletes segments while a reader reads at
// the log start offset, so that it is in a segment as the log deletes it.
func TestDeleteRecordsWhileReading(t *testing.T) {
	l, err := Open("/data/del-0", Options{FS: newMemFS(t), SegmentBytes: 4 << 10, MaxIndexBytes: 1024})
	require.NoError(t, err)
	defer l.Close()
	const n = 2000
	for i := range n {
		recs, _ := raceRecords(0, i, 1)
		_, err := l.Append(recs)
		require.NoError(t, err)
	}
	var reads atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l.LogStartOffset() < n-1 {
			bs, err := l.Read(l.LogStartOffset(), 1, ReadCommitted)
			if err != nil {
				errorUnless(t, err, ErrOffsetOutOfRange)
				continue
			}
			n, err := bs.WriteTo(io.Discard)
			if err == nil && n != bs.Len() {
				err = fmt.Errorf("WriteTo wrote %d bytes of %d", n, bs.Len())
			}
			errorUnless(t, errors.Join(err, bs.Close()))
			reads.Add(1)
		}
	}()
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	for _, s := range segs[1:] {
		for start := reads.Load(); reads.Load() == start; {
			runtime.Gosched() // let the reader into the segment first
		}
		require.NoError(t, l.DeleteRecordsBefore(s.BaseOffset()))
	}
	require.NoError(t, l.DeleteRecordsBefore(n-1))
	<-done
	require.Equal(t, 1, l.Stats().Segments)
}

// crashKeys opens the log in dir as a power cut of fs at this moment would
// leave it, checks that its records are contiguous from offset 0 and hold
// the values their keys make, and returns their keys.
func crashKeys(t *testing.T, fs *vfs.MemFS, cfg vfs.CrashOptions, dir string, opts Options) []string {
	t.Helper()
	opts.FS = fs.Crash(cfg)
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	keys := []string{}
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		require.EqualValues(t, len(keys), r.Offset, "offsets are contiguous")
		require.Equal(t, killValue(string(r.Key)), r.Value, "offset %d", r.Offset)
		keys = append(keys, string(r.Key))
	}
	require.EqualValues(t, l.LogEndOffset(), len(keys))
	return keys
}

// requirePrefix checks that got, the keys a crash left, are the first of
// the keys appended.
func requirePrefix(t *testing.T, appended, got []string) {
	t.Helper()
	require.LessOrEqual(t, len(got), len(appended), "more records than appended")
	require.Equal(t, appended[:len(got)], got, "not a prefix of what was appended")
}

// appendOne appends the i-th record of writer 0 and returns its key.
func appendOne(t *testing.T, l *Log, i int) string {
	t.Helper()
	recs, keys := raceRecords(0, i, 1)
	res, err := l.Append(recs)
	require.NoError(t, err)
	require.EqualValues(t, i, res.BaseOffset)
	return keys[0]
}

// TestFsyncAlwaysSurvivesPowerCuts appends from several goroutines with
// FsyncAlways and cuts the power at many moments, keeping a random part of
// what was not synced (seeded by the cut): every append that had returned
// before the cut is there after it.
func TestFsyncAlwaysSurvivesPowerCuts(t *testing.T) {
	fs := newMemFS(t)
	opts := Options{Fsync: FsyncAlways(), SegmentBytes: 8 << 10, MaxIndexBytes: 1024}
	const dir = "/data/always-0"
	type cut struct {
		fs    *vfs.MemFS
		acked map[int64]string
	}
	var (
		mu    sync.Mutex
		acked = make(map[int64]string)
		cuts  []cut
		ops   int
	)
	fs.SetHook(func(vfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if ops++; ops%5 == 0 {
			// What was acknowledged before the cut was synced before it.
			crashed := fs.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(ops), 0))})
			cuts = append(cuts, cut{acked: maps.Clone(acked), fs: crashed})
		}
		return nil
	})
	opts.FS = fs
	l, err := Open(dir, opts)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0))
			for seq := 0; seq < 120; {
				recs, keys := raceRecords(w, seq, 1+rng.IntN(3))
				res, err := l.Append(recs)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, k := range keys {
					acked[res.BaseOffset+int64(i)] = k
				}
				mu.Unlock()
				seq += len(keys)
			}
		})
	}
	wg.Wait()
	require.Greater(t, l.Stats().Segments, 3, "appends rolled segments")
	fs.SetHook(nil)
	require.NoError(t, l.Close())

	var lost int
	for _, c := range cuts {
		keys := crashKeys(t, c.fs, vfs.CrashOptions{}, dir, opts)
		for off, key := range c.acked {
			require.Less(t, off, int64(len(keys)), "acknowledged %q lost", key)
			require.Equal(t, key, keys[off], "offset %d", off)
		}
		lost += len(keys) - len(c.acked)
	}
	t.Logf("%d power cuts, %d records acknowledged in all, %d records written but not yet acknowledged survived them", len(cuts), len(acked), lost)
}

// TestFsyncNeverLeavesSyncingToRolls appends with FsyncNever: it syncs
// only when a segment rolls, so a power cut loses the active segment's
// appends, and what it leaves is a prefix of what was appended.
func TestFsyncNeverLeavesSyncingToRolls(t *testing.T) {
	fs := newMemFS(t)
	opts := Options{FS: fs, Fsync: FsyncNever(), SegmentBytes: 8 << 10, MaxIndexBytes: 1024}
	const dir = "/data/never-0"
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	var appended []string
	for i := 0; l.Stats().Segments == 1; i++ {
		appended = append(appended, appendOne(t, l, i))
	}
	require.EqualValues(t, 1, l.Stats().Fsyncs, "one fsync: the roll's")
	// The roll synced the first segment; the batch that made it roll is
	// the first in the second one, unsynced.
	require.Len(t, crashKeys(t, fs, vfs.CrashOptions{}, dir, opts), len(appended)-1)

	active := l.active().BaseOffset()
	for i := len(appended); len(appended) < int(active)+20; i++ {
		appended = append(appended, appendOne(t, l, i))
	}
	require.EqualValues(t, 1, l.Stats().Fsyncs, "no fsync but the roll's")
	require.EqualValues(t, active, len(crashKeys(t, fs, vfs.CrashOptions{}, dir, opts)), "all unsynced appends lost")
	for seed := range uint64(20) {
		cfg := vfs.CrashOptions{Rand: rand.New(rand.NewPCG(seed, 0))}
		got := crashKeys(t, fs, cfg, dir, opts)
		require.GreaterOrEqual(t, len(got), int(active), "seed %d: a rolled segment lost", seed)
		requirePrefix(t, appended, got)
	}
}

// TestFsyncEveryBoundsTheLoss appends one record at a time with FsyncEvery
// and cuts the power after each append: the cut loses at most the limit
// less one record (or byte), and does lose that many when they were due.
func TestFsyncEveryBoundsTheLoss(t *testing.T) {
	for _, tc := range []struct {
		name            string
		messages, bytes int64
	}{
		{"5 messages", 5, 0},
		{"1 KiB", 0, 1 << 10},
		{"3 messages or 1 KiB", 3, 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newMemFS(t)
			opts := Options{FS: fs, Fsync: FsyncEvery(tc.messages, tc.bytes), SegmentBytes: 1 << 20, MaxIndexBytes: 1024}
			dir := "/data/every-0"
			l, err := Open(dir, opts)
			require.NoError(t, err)
			defer l.Close()
			var appended []string
			sizes := []int64{0} // sizes[i]: bytes of the batches before offset i
			var maxMsgs, maxBytes int64
			for i := range 60 {
				appended = append(appended, appendOne(t, l, i))
				sizes = append(sizes, l.Stats().Bytes)
				got := crashKeys(t, fs, vfs.CrashOptions{}, dir, opts)
				requirePrefix(t, appended, got)
				// Whatever else a crash keeps, it keeps what was synced.
				kept := crashKeys(t, fs, vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(i), 0))}, dir, opts)
				requirePrefix(t, appended, kept)
				require.GreaterOrEqual(t, len(kept), len(got), "after %d appends", i+1)
				lostMsgs, lostBytes := int64(len(appended)-len(got)), sizes[len(appended)]-sizes[len(got)]
				if tc.messages > 0 {
					require.Less(t, lostMsgs, tc.messages, "after %d appends", i+1)
				}
				if tc.bytes > 0 {
					require.Less(t, lostBytes, tc.bytes, "after %d appends", i+1)
				}
				maxMsgs, maxBytes = max(maxMsgs, lostMsgs), max(maxBytes, lostBytes)
			}
			// The bound is reached: the policy does not sync more often
			// than it says.
			if tc.messages > 0 {
				require.Equal(t, tc.messages-1, maxMsgs)
			} else {
				require.Greater(t, maxBytes, tc.bytes*3/4)
			}
		})
	}
}

// TestFsyncIntervalSyncsAfterTheInterval appends with FsyncInterval(d):
// once d has passed, a power cut loses nothing; before, it leaves a
// prefix. How long after d the timer's goroutine runs is the scheduler's
// (seconds on a loaded machine), so the test waits, past d, until a cut
// that loses every unsynced byte keeps every record, then cuts as before.
func TestFsyncIntervalSyncsAfterTheInterval(t *testing.T) {
	const d = 20 * time.Millisecond
	fs := newMemFS(t)
	opts := Options{FS: fs, Fsync: FsyncInterval(d), SegmentBytes: 1 << 20, MaxIndexBytes: 1024}
	const dir = "/data/interval-0"
	l, err := Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	var appended []string
	for round := range 3 {
		for range 10 {
			appended = append(appended, appendOne(t, l, len(appended)))
		}
		anyCrash := func() vfs.CrashOptions { return vfs.CrashOptions{Rand: rand.New(rand.NewPCG(uint64(round), 0))} }
		requirePrefix(t, appended, crashKeys(t, fs, anyCrash(), dir, opts))
		time.Sleep(d)
		for deadline := time.Now().Add(10 * time.Second); len(crashKeys(t, fs, vfs.CrashOptions{}, dir, opts)) < len(appended); time.Sleep(d) {
			require.True(t, time.Now().Before(deadline), "round %d: not synced 10s after the appends", round)
		}
		require.Equal(t, appended, crashKeys(t, fs, anyCrash(), dir, opts), "round %d: after the interval", round)
	}
}
