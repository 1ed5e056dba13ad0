package segment

import (
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// failWrites fails every write (and allocation) to the files whose names
// end in suffix with ENOSPC while *full is true.
func failWrites(fs *vfs.MemFS, suffix string, full *bool) {
	fs.SetHook(func(op vfs.Op) error {
		if *full && op.Kind == vfs.OpWrite && strings.HasSuffix(op.Name, suffix) {
			return syscall.ENOSPC
		}
		return nil
	})
}

// TestAppendWhoseIndexIsFullChangesNothing: the time index has no room for
// the entry a batch needs after the offset index took its own. The append
// fails with ENOSPC and leaves the segment as it was: the batch is cut
// from the log and the offset index entry removed, so that once there is
// room the same batch appends and the segment reopens with exactly the
// batches acknowledged.
func TestAppendWhoseIndexIsFullChangesNothing(t *testing.T) {
	fs, dir := newMemDir(t)
	opts := on(fs, Options{IndexIntervalBytes: 1, MaxIndexBytes: 8 << 10})
	s, err := Create(dir, 0, opts)
	require.NoError(t, err)
	bs := testBatches(t, 3, 2, 100, 0, 1000)
	appendAll(t, s, bs[:1]) // the first batch is never indexed
	full := true
	failWrites(fs, TimeIndexSuffix, &full)

	err = s.Append(bs[1])
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorContains(t, err, TimeIndexSuffix)
	requireHolds(t, s, bs[:1])
	require.Zero(t, s.offsets.Entries(), "the offset index entry is gone again")
	fi, err := fs.Stat(FileName(dir, 0, LogSuffix))
	require.NoError(t, err)
	require.Equal(t, int64(len(bs[0])), fi.Size(), "the batch is cut from the file")

	full = false
	appendAll(t, s, bs[1:])
	requireHolds(t, s, bs)
	require.Equal(t, 2, s.offsets.Entries())
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())
	s, err = Open(dir, 0, opts)
	require.NoError(t, err)
	requireHolds(t, s, bs)
	require.NoError(t, s.Close())
}

// TestSealOnFullDiskCanBeRetried: sealing writes the time index's roll
// entry; without room for it Seal fails and the segment stays active.
// Sealing again, once the seal went through, changes nothing: the log
// retries a roll whose next segment could not be created.
func TestSealOnFullDiskCanBeRetried(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, Options{IndexIntervalBytes: 1 << 20, MaxIndexBytes: 8 << 10}))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 3, 2, 100, 0, 1000)
	appendAll(t, s, bs[:2])
	full := true
	failWrites(fs, TimeIndexSuffix, &full)
	require.ErrorIs(t, s.Seal(), syscall.ENOSPC)
	require.False(t, s.times.Sealed() || s.offsets.Sealed(), "the segment stays active")
	require.Equal(t, -1, int(s.times.LastEntry().Timestamp), "no roll entry")

	full = false
	appendAll(t, s, bs[2:])
	require.NoError(t, s.Seal())
	want := s.times.LastEntry()
	require.Equal(t, bs[2].MaxTimestamp(), want.Timestamp, "the roll entry")
	require.NoError(t, s.Seal(), "sealing a sealed segment")
	require.Equal(t, want, s.times.LastEntry())
	require.Equal(t, 1, s.times.Entries())
}
