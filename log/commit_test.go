package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/strandlog/strand/internal/vfs"
	"github.com/strandlog/strand/segment"
	"github.com/stretchr/testify/require"
)

var errInjected = errors.New("injected fault")

// failOnce returns a hook that fails the first operation match accepts,
// once armed.
func failOnce(match func(vfs.Op) bool) (hook func(vfs.Op) error, arm func()) {
	var mu sync.Mutex
	armed := false
	hook = func(op vfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if armed && match(op) {
			armed = false
			return errInjected
		}
		return nil
	}
	return hook, func() { mu.Lock(); armed = true; mu.Unlock() }
}

// A directory sync that fails while rolling leaves the new segment's name
// possibly not durable: every later append into it could vanish with the
// name, so the log fails as a whole, as it does for a failed data sync.
func TestFailedDirectorySyncOnRollFailsTheLog(t *testing.T) {
	fs := newMemFS(t)
	dir := "/data/p"
	l, err := Open(dir, memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 10, 1, 100)

	created := false // the new segment's file: the sync of its name fails
	hook, arm := failOnce(func(op vfs.Op) bool {
		created = created || (op.Kind == vfs.OpCreate && strings.HasSuffix(op.Name, segment.LogSuffix))
		return created && op.Kind == vfs.OpSync && op.Name == dir
	})
	fs.SetHook(hook)
	arm()
	var rollErr error
	next := 10
	for rollErr == nil && next < 1000 { // fill the segment until it rolls
		_, rollErr = l.Append(recordsFrom(next, 1, 100))
		next++
	}
	require.ErrorIs(t, rollErr, ErrFailed)
	require.Greater(t, len(segmentBases(l)), 1, "the roll happened")

	_, err = l.Append(recordsFrom(next, 1, 100))
	require.ErrorIs(t, err, ErrFailed, "appends after the failed roll are refused")
	require.ErrorIs(t, l.Sync(), ErrFailed)
	require.ErrorIs(t, l.Close(), ErrFailed, "Close reports that it could not shut down cleanly")
	_, err = fs.Stat(filepath.Join(dir, cleanShutdownFile))
	require.Error(t, err, "no clean-shutdown marker after a failure")

	fs.SetHook(nil)
	l, err = Open(dir, memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	requireRecords(t, l, 0, next-1, 100)
}

// A checkpoint is an optimisation of recovery; its failure after the data
// was synced must not report the append as failed, or callers would retry
// and write the records twice.
func TestCheckpointFailureDoesNotFailCommittedAppends(t *testing.T) {
	fs := newMemFS(t)
	dir := "/data/p"
	opts := memOptions(fs)
	opts.CheckpointInterval = 1 // every append checkpoints
	l, err := Open(dir, opts)
	require.NoError(t, err)
	appendN(t, l, 0, 3, 1, 100)

	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpCreate && strings.Contains(filepath.Base(op.Name), recoveryPointFile) {
			return errInjected
		}
		return nil
	})
	res, err := l.Append(recordsFrom(3, 2, 100))
	require.NoError(t, err, "the records are synced; only the checkpoint failed")
	require.EqualValues(t, 3, res.BaseOffset)
	require.EqualValues(t, 5, l.HighWatermark())

	// A roll checkpoints too: it must not fail the append that rolled.
	for i := 5; i < 200; i++ {
		_, err := l.Append(recordsFrom(i, 1, 100))
		require.NoError(t, err, "append %d", i)
	}
	require.Greater(t, len(segmentBases(l)), 1)
	require.NotNil(t, l.Stats().CheckpointError, "the failure is visible in Stats")

	require.ErrorIs(t, l.Close(), errInjected, "Close could not write its checkpoints")
	fs.SetHook(nil)
	l, err = Open(dir, opts)
	require.NoError(t, err)
	defer l.Close()
	requireRecords(t, l, 0, 200, 100)
	require.Nil(t, l.Stats().CheckpointError)
}

// A panic inside the group commit (a bug, or a file system that panics)
// becomes an error for the appenders of that group and fails the log; the
// log must not be left with its group-commit lead taken, hanging every
// later append.
func TestPanicInGroupCommitFailsTheLog(t *testing.T) {
	fs := newMemFS(t)
	dir := "/data/p"
	l, err := Open(dir, memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 3, 1, 100)

	for _, kind := range []vfs.OpKind{vfs.OpWrite, vfs.OpSync} {
		t.Run(kind.String(), func(t *testing.T) {
			l, err := Open(dir+kind.String(), memOptions(fs))
			require.NoError(t, err)
			appendN(t, l, 0, 3, 1, 100)
			fs.SetHook(func(op vfs.Op) error {
				if op.Kind == kind && strings.HasSuffix(op.Name, ".log") {
					panic("file system bug")
				}
				return nil
			})
			_, err = l.Append(recordsFrom(3, 1, 100))
			fs.SetHook(nil)
			require.ErrorIs(t, err, ErrFailed)
			require.ErrorContains(t, err, "file system bug")

			done := make(chan error)
			go func() {
				_, err := l.Append(recordsFrom(3, 1, 100))
				done <- err
			}()
			require.ErrorIs(t, <-done, ErrFailed, "the next append returns")
			require.ErrorIs(t, l.Close(), ErrFailed)
		})
	}
	require.NoError(t, l.Close())
}

// A Batches is a value a caller may copy; a copy closed after the original
// must not release the segment a second time (closing files the log still
// appends to), and a copy used after Close must fail, not read whatever
// file reuses the descriptor.
func TestCopiesOfBatchesShareTheirClose(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(filepath.Join(dir, "p"), Options{})
	require.NoError(t, err)
	appendN(t, l, 0, 10, 2, 100)

	b, err := l.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	c := *b
	require.NoError(t, b.Close())
	require.NoError(t, c.Close())

	appendN(t, l, 10, 10, 2, 100)
	requireRecords(t, l, 0, 20, 100)

	b, err = l.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	c = *b
	require.NoError(t, b.Close())
	require.NoError(t, l.Close())
	decoy, err := os.Create(filepath.Join(dir, "decoy"))
	require.NoError(t, err)
	defer decoy.Close()
	_, err = decoy.Write(bytes.Repeat([]byte("decoy"), 1000))
	require.NoError(t, err)
	out, err := os.Create(filepath.Join(dir, "out"))
	require.NoError(t, err)
	defer out.Close()
	_, err = c.WriteTo(out)
	require.ErrorIs(t, err, os.ErrClosed, "the segment's file is closed")
	data, err := os.ReadFile(out.Name())
	require.NoError(t, err)
	require.NotContains(t, string(data), "decoy")
}
