package log

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/strandlog/strand/internal/vfs"
	"github.com/strandlog/strand/segment"
	"github.com/stretchr/testify/require"
)

// failSyncs makes every sync of a file under dir fail with EIO until the
// returned function is called, as a disk that lost the pages would.
func failSyncs(fs *vfs.MemFS, dir string) (stop func()) {
	var on atomic.Bool
	on.Store(true)
	fs.SetHook(func(op vfs.Op) error {
		if on.Load() && op.Kind == vfs.OpSync && strings.HasPrefix(op.Name, dir+"/") {
			return syscall.EIO
		}
		return nil
	})
	return func() { on.Store(false) }
}

// TestFailedFsyncStaysFailedAcrossEviction is fsyncgate's rule for a Dir:
// after a failed fsync the pages may be gone from the disk although the
// page cache still holds them, so a partition whose sync failed must not be
// closed by the open-file bound and reopened, which would re-sync the
// cached pages and acknowledge appends as if nothing had happened. It stays
// failed, for appends, for the life of the Dir; reads go on.
func TestFailedFsyncStaysFailedAcrossEviction(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaxOpenFiles = 3 // one single-segment partition
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 2}))
	p0, p1 := must(d.Partition("t", 0)), must(d.Partition("t", 1))
	appendPartition(t, p0, 0, 5)

	heal := failSyncs(fs, "/data/t-0")
	_, err = p0.Append([]segment.Record{record(5, 50)})
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, syscall.EIO)
	heal() // the disk works again: only the remembered failure refuses now

	// Other partitions go on, and using them would evict t-0.
	appendPartition(t, p1, 0, 5)
	appendPartition(t, p1, 5, 5)

	_, err = p0.Append([]segment.Record{record(6, 50)})
	require.ErrorIs(t, err, ErrFailed, "no silent reopen of a failed partition")
	_, err = p0.AppendBatch(must(segment.AppendBatch(nil, []segment.Record{record(6, 50)}, segment.BuildOptions{})))
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, p0.DeleteRecordsBefore(1), ErrFailed)

	// Reads go on, up to the last good sync.
	n := 0
	for r, err := range p0.Records(0, ReadCommitted) {
		require.NoError(t, err)
		require.EqualValues(t, n, r.Offset)
		n++
	}
	require.Equal(t, 5, n)

	err = d.Close()
	require.ErrorIs(t, err, ErrFailed, "Close reports that t-0 was not shut down cleanly")
	_, err = fs.Stat("/data/t-0/" + cleanShutdownFile)
	require.Error(t, err, "no clean-shutdown marker beside a failed log")
	_, err = fs.Stat("/data/t-1/" + cleanShutdownFile)
	require.NoError(t, err, "the healthy partition shut down cleanly")

	// A new Dir recovers what the disk holds: every acknowledged record,
	// and maybe (here, yes: the memory file system kept the pages) the one
	// whose append failed.
	d, err = OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	p0 = must(d.Partition("t", 0))
	_, _, end, err := p0.Offsets()
	require.NoError(t, err)
	require.GreaterOrEqual(t, end, int64(5))
	_, err = p0.Append([]segment.Record{record(int(end), 50)})
	require.NoError(t, err, "a new Dir starts from what it recovered")
}

// TestFailedFsyncFoundByEvictionStaysFailed: under FsyncInterval a failed
// background sync reaches no caller; the eviction that closes the log
// learns of it, and the partition must not be reopened either.
func TestFailedFsyncFoundByEvictionStaysFailed(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaxOpenFiles = 3
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 2, Fsync: FsyncNever()}))
	p0, p1 := must(d.Partition("t", 0)), must(d.Partition("t", 1))
	appendPartition(t, p0, 0, 5) // acknowledged, not synced
	heal := failSyncs(fs, "/data/t-0")
	appendPartition(t, p1, 0, 1) // evicts t-0, whose final sync fails
	heal()

	_, err = p0.Append([]segment.Record{record(5, 50)})
	require.ErrorIs(t, err, ErrFailed)
	_, _, _, err = p0.Offsets()
	require.ErrorIs(t, err, ErrFailed, "its log is closed, and reopening it would re-sync the lost pages")
	require.ErrorIs(t, d.Close(), ErrFailed)
}

// TestLogCloseReportsAFailedSync: Close skips the final sync and the
// clean-shutdown marker of a failed log, and says so.
func TestLogCloseReportsAFailedSync(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 5, 1, 50)
	heal := failSyncs(fs, "/data/t-0")
	_, err = l.Append([]segment.Record{record(5, 50)})
	require.ErrorIs(t, err, ErrFailed)
	heal()
	err = l.Close()
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorContains(t, err, "/data/t-0")
	_, err = fs.Stat(filepath.Join("/data/t-0", cleanShutdownFile))
	require.Error(t, err)

	// A failed final sync is a failure too.
	l, err = Open("/data/t-0", Options{FS: fs, Fsync: FsyncNever()})
	require.NoError(t, err)
	_, err = l.Append([]segment.Record{record(6, 50)})
	require.NoError(t, err)
	heal = failSyncs(fs, "/data/t-0")
	err = l.Close()
	heal()
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, syscall.EIO)
}
