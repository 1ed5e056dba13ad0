package log

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// The tests in this file inject failed syncs and writes into a log on the
// real file system (vfs.ErrorFS over vfs.Default) and check what a failed
// fsync must mean, after PostgreSQL's fsyncgate and pebble's handling of
// sync errors: an append whose sync failed is never acknowledged, the
// failure is sticky (Linux may report a later fsync as good although the
// failed pages are gone), nothing acknowledged before is lost, and the log
// is not marked as cleanly shut down.

// faultyLog is a log whose file system fails on request, and what its
// appends returned.
type faultyLog struct {
	*Log
	t      *testing.T
	dir    string
	opts   Options
	fs     *vfs.ErrorFS
	mu     sync.Mutex
	acked  map[int64]string // offset: key of an acknowledged record
	failed map[string]bool  // keys of appends that returned an error
	next   int              // records tried
}

func openFaulty(t *testing.T, opts Options) *faultyLog {
	t.Helper()
	f := &faultyLog{t: t, dir: filepath.Join(t.TempDir(), "faults-0"), opts: opts,
		fs: vfs.NewErrorFS(vfs.Default), acked: map[int64]string{}, failed: map[string]bool{}}
	opts.FS = f.fs
	var err error
	f.Log, err = Open(f.dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// faultOptions sync every append and checkpoint only when a test asks.
func faultOptions() Options {
	return Options{Fsync: FsyncAlways(), SegmentBytes: 1 << 20, CheckpointInterval: time.Hour}
}

// append appends the next record of writer w, noting whether it was
// acknowledged.
func (f *faultyLog) append(w int) error {
	f.mu.Lock()
	recs, keys := raceRecords(w, f.next, 1)
	f.next++
	f.mu.Unlock()
	res, err := f.Append(recs)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failed[keys[0]] = true
		return err
	}
	f.acked[res.BaseOffset] = keys[0]
	return nil
}

func (f *faultyLog) appendOK(n int) {
	f.t.Helper()
	for range n {
		require.NoError(f.t, f.append(0))
	}
}

// appendUntilError appends until an append fails, at most limit times, and
// returns its error.
func (f *faultyLog) appendUntilError(limit int) error {
	f.t.Helper()
	for range limit {
		if err := f.append(0); err != nil {
			return err
		}
	}
	f.t.Fatalf("%d appends and no failure", limit)
	return nil
}

// requireFailed checks that the log refuses appends and syncs from now on,
// although the file system works again.
func (f *faultyLog) requireFailed() {
	f.t.Helper()
	f.fs.SetEnabled(false)
	defer f.fs.SetEnabled(true)
	for range 3 {
		require.ErrorIs(f.t, f.append(0), ErrFailed, "later appends fail too")
	}
	require.ErrorIs(f.t, f.Sync(), ErrFailed, "Sync reports the failure")
}

// requireNoMarker checks that the log was not marked as shut down cleanly:
// the next Open must recover it.
func (f *faultyLog) requireNoMarker() {
	f.t.Helper()
	_, err := os.Stat(filepath.Join(f.dir, cleanShutdownFile))
	require.ErrorIs(f.t, err, iofs.ErrNotExist, "clean-shutdown marker written after a failure")
}

// checkReopened opens the log again on the plain file system, as a
// restart would: every acknowledged record is at its offset; every other
// record is one whose append failed, and no record acknowledged follows
// one whose append failed. The reopened log takes appends again.
func (f *faultyLog) checkReopened() {
	f.t.Helper()
	opts := f.opts
	opts.FS = vfs.Default
	l, err := Open(f.dir, opts)
	require.NoError(f.t, err)
	defer func() { require.NoError(f.t, l.Close()) }()
	var off int64
	failedAt := int64(-1)
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(f.t, err)
		require.Equal(f.t, off, r.Offset, "offsets are contiguous")
		key := string(r.Key)
		require.Equal(f.t, killValue(key), r.Value, "offset %d", off)
		switch {
		case f.failed[key]:
			if failedAt < 0 {
				failedAt = off
			}
		case f.acked[off] == key:
			require.Less(f.t, failedAt, int64(0), "%q at offset %d acknowledged after the failed append at offset %d", key, off, failedAt)
		default:
			f.t.Fatalf("offset %d: %q was neither acknowledged nor failed", off, key)
		}
		off++
	}
	for o, key := range f.acked {
		require.Less(f.t, o, off, "acknowledged %q at offset %d lost", key, o)
	}
	recs, _ := raceRecords(9, 0, 1)
	_, err = l.Append(recs)
	require.NoError(f.t, err, "the reopened log takes appends")
}

// TestFailedFsyncIsNeverAcknowledged fails the fdatasync of the active
// segment once: that append fails with ErrFailed, and so does every later
// one although the disk works again (fsyncgate: the failed pages may be
// gone while the next fsync succeeds).
func TestFailedFsyncIsNeverAcknowledged(t *testing.T) {
	f := openFaulty(t, faultOptions())
	f.appendOK(10)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSync}, Path: "*.log", Times: 1})
	err := f.append(0)
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, vfs.ErrInjected, "the cause is kept")
	require.ErrorIs(t, err, syscall.EIO)
	require.EqualValues(t, 10, f.HighWatermark(), "the high watermark stays at the last good sync")
	f.requireFailed()
	f.Close()
	f.requireNoMarker()
	f.checkReopened()
}

// TestCloseReportsAFailedSync: Close after a failed sync skips the final
// sync and the clean-shutdown marker, and must say so.
func TestCloseReportsAFailedSync(t *testing.T) {
	f := openFaulty(t, faultOptions())
	f.appendOK(3)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSync}, Path: "*.log", Times: 1})
	require.ErrorIs(t, f.append(0), ErrFailed)
	require.ErrorIs(t, f.Close(), ErrFailed, "Close returns the failure, not nil")
	f.requireNoMarker()
}

// TestFailedFsyncUnderConcurrentAppends fails one fdatasync while several
// goroutines append through group commit: every append acknowledged before
// it survives, and no append is acknowledged after it (the syncs of groups
// written meanwhile fail too).
func TestFailedFsyncUnderConcurrentAppends(t *testing.T) {
	f := openFaulty(t, faultOptions())
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSync}, Path: "*.log", After: 40, Times: 1})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range 1000 {
				if err := f.append(w); err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("writer %d: %v, want ErrFailed", w, err)
					}
					return
				}
			}
			t.Errorf("writer %d: 1000 appends and no failure", w)
		})
	}
	wg.Wait()
	require.Equal(t, 1, f.fs.Injected())
	f.requireFailed()
	f.Close()
	f.requireNoMarker()
	f.checkReopened()
}

// TestFailedFsyncOnTheTimerFailsLaterAppends: with FsyncInterval the
// append is acknowledged before its sync; the timer's failed sync must
// fail the appends after it.
func TestFailedFsyncOnTheTimerFailsLaterAppends(t *testing.T) {
	opts := faultOptions()
	opts.Fsync = FsyncInterval(time.Millisecond)
	f := openFaulty(t, opts)
	f.appendOK(5)
	require.NoError(t, f.Sync())
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSync}, Path: "*.log", Times: 1})
	f.appendOK(1)
	require.Eventually(t, func() bool { return f.fs.Injected() == 1 }, 10*time.Second, time.Millisecond, "the timer synced")
	f.requireFailed()
	f.Close()
	f.requireNoMarker()
	f.checkReopened()
}

// TestFailedWriteIsNotAcknowledged fails one write of the active segment
// with ENOSPC: that append fails and leaves nothing behind; the log may go
// on (a write that failed was not made, unlike a failed fsync) or refuse
// with ErrFailed, but an append it acknowledges is durable and readable.
func TestFailedWriteIsNotAcknowledged(t *testing.T) {
	f := openFaulty(t, faultOptions())
	f.appendOK(10)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpWrite}, Path: "*.log", Times: 1, Err: syscall.ENOSPC})
	err := f.append(0)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, err, vfs.ErrInjected)
	for range 5 {
		if err := f.append(0); err != nil {
			require.ErrorIs(t, err, ErrFailed, "a later append fails only if the log failed")
		}
	}
	require.NoError(t, f.Close())
	f.checkReopened()
}

// TestFailedIndexSyncWhileRollingFailsTheLog fails the sync of the index
// files a roll seals: the segment being sealed may not be durable, so the
// log fails.
func TestFailedIndexSyncWhileRollingFailsTheLog(t *testing.T) {
	opts := faultOptions()
	opts.SegmentBytes = 8 << 10
	f := openFaulty(t, opts)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSync}, Path: "*.index", Times: 1})
	require.ErrorIs(t, f.appendUntilError(1000), ErrFailed)
	require.Equal(t, 1, f.Stats().Segments, "the roll did not happen")
	f.requireFailed()
	f.Close()
	f.requireNoMarker()
	f.checkReopened()
}

// TestFailedDirSyncWhileRollingFailsTheLog fails the directory sync that
// makes a new segment's name durable: appends into a file whose name a
// crash may lose must not be acknowledged, so the log fails.
func TestFailedDirSyncWhileRollingFailsTheLog(t *testing.T) {
	opts := faultOptions()
	opts.SegmentBytes = 8 << 10
	f := openFaulty(t, opts)
	// A roll syncs the directory twice: for the producer-state snapshot
	// (which fails nothing, being derived) and for the new segment.
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpSyncDir}, After: 1, Times: 1})
	require.ErrorIs(t, f.appendUntilError(1000), ErrFailed)
	f.requireFailed()
	require.ErrorIs(t, f.Close(), ErrFailed)
	f.requireNoMarker()
	f.checkReopened()
}

// TestFailedCheckpointAfterSyncIsNotAFailedAppend fails the write of a
// checkpoint in a group whose records were written and synced: they are
// committed, and reporting them as failed makes callers append them twice.
func TestFailedCheckpointAfterSyncIsNotAFailedAppend(t *testing.T) {
	opts := faultOptions()
	opts.CheckpointInterval = time.Nanosecond
	f := openFaulty(t, opts)
	f.appendOK(3)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpCreate}, Path: "*checkpoint.tmp", Times: 1})
	require.NoError(t, f.append(0), "the records were written and synced")
	require.Equal(t, 1, f.fs.Injected())
	f.appendOK(3)
	require.NoError(t, f.Close())
	f.checkReopened()
}

// TestFailedCheckpointLosesNothing fails every checkpoint write: whatever
// the appends returned, nothing acknowledged is lost.
func TestFailedCheckpointLosesNothing(t *testing.T) {
	opts := faultOptions()
	opts.CheckpointInterval = time.Nanosecond
	f := openFaulty(t, opts)
	f.appendOK(3)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpRename}, Path: "*checkpoint.tmp"})
	for range 5 {
		f.append(0)
	}
	require.Positive(t, f.fs.Injected())
	f.fs.SetEnabled(false)
	f.Close()
	f.checkReopened()
}

// TestFailedSnapshotFailsNothing fails every write of a producer-state
// snapshot: snapshots only shorten the replay of the next Open, so the
// rolls that take them, and the appends that roll, succeed; the failure is
// in Stats, and Close reports it after shutting down cleanly.
func TestFailedSnapshotFailsNothing(t *testing.T) {
	opts := faultOptions()
	opts.SegmentBytes = 8 << 10
	f := openFaulty(t, opts)
	f.fs.Inject(vfs.Fault{Ops: []vfs.OpKind{vfs.OpCreate}, Path: "*.snapshot.tmp", Err: syscall.ENOSPC})
	f.appendOK(300)
	require.Greater(t, f.Stats().Segments, 2, "the log rolled")
	require.Positive(t, f.fs.Injected(), "rolls tried to take snapshots")
	require.ErrorIs(t, f.Stats().CheckpointError, syscall.ENOSPC)
	require.ErrorIs(t, f.Close(), syscall.ENOSPC)
	_, err := os.Stat(filepath.Join(f.dir, cleanShutdownFile))
	require.NoError(t, err, "the shutdown was clean: the next Open replays the log")
	f.checkReopened()
}
