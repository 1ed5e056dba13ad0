package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

var errInjected = errors.New("injected fault")

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

// A checkpoint file that does not parse is an ErrCorrupt a user can match,
// not only an error of an internal package.
func TestCorruptCheckpointIsErrCorrupt(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/p", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 3, 1, 100)
	require.NoError(t, l.Close())
	f, err := fs.Create(filepath.Join("/data/p", recoveryPointFile))
	require.NoError(t, err)
	_, err = f.Write([]byte("0\n1\nnot an offset\n"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Open("/data/p", memOptions(fs))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, recoveryPointFile)
}

// A log, or a Dir, opened where its directories do not exist yet creates
// them and makes their names durable: a power cut must not take away a
// directory, and every synced record in it with it.
func TestNewDirectoriesSurviveACrash(t *testing.T) {
	fs := vfs.NewMem()
	l, err := Open("/a/b/p", Options{FS: fs})
	require.NoError(t, err)
	appendN(t, l, 0, 3, 1, 100)
	d, err := OpenDir("/c/d", DirOptions{Log: Options{FS: fs}, MaintenanceInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	appendPartition(t, must(d.Partition("t", 0)), 0, 3)

	after := fs.Crash(vfs.CrashOptions{})
	l, err = Open("/a/b/p", Options{FS: after})
	require.NoError(t, err)
	defer l.Close()
	requireRecords(t, l, 0, 3, 100)
	d, err = OpenDir("/c/d", DirOptions{Log: Options{FS: after}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer d.Close()
	_, _, end, err := must(d.Partition("t", 0)).Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 3, end)
}
