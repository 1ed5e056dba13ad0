package log

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// fiveSegments writes 400 records in batches of 10 to a new log at dir,
// closes it cleanly and returns its segments' base offsets.
func fiveSegments(t *testing.T, fs vfs.FS, dir string) []int64 {
	t.Helper()
	l, err := Open(dir, memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 400, 10, 100)
	bases := segmentBases(l)
	require.Greater(t, len(bases), 4)
	require.NoError(t, l.Close())
	return bases
}

// removeSegment removes the files of the segment at base, as a mistaken
// rm would.
func removeSegment(t *testing.T, fs vfs.FS, dir string, base int64) {
	t.Helper()
	for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
		require.NoError(t, fs.Remove(segment.FileName(dir, base, suffix)))
	}
}

// unclean removes the clean-shutdown marker, as a crash leaves the log.
func unclean(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	require.NoError(t, fs.Remove(filepath.Join(dir, cleanShutdownFile)))
}

// cutLogFile truncates the log file of the segment at base to size.
func cutLogFile(t *testing.T, fs vfs.FS, dir string, base, size int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(segment.FileName(dir, base, segment.LogSuffix))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
}

// batchEnds returns the position after each batch of the segment at base.
func batchEnds(t *testing.T, fs vfs.FS, dir string, base int64) []int64 {
	t.Helper()
	s, err := segment.Open(dir, base, segment.Options{FS: fs, MaxIndexBytes: 1024, IndexIntervalBytes: 512})
	require.NoError(t, err)
	defer s.Close()
	var ends []int64
	pos := int64(0)
	for b, err := range s.Batches(base, false) {
		require.NoError(t, err)
		pos += int64(b.Size())
		ends = append(ends, pos)
	}
	return ends
}

// requireCorrupt checks that opening dir fails with ErrCorrupt naming
// every one of names.
func requireCorrupt(t *testing.T, fs vfs.FS, dir string, names ...string) {
	t.Helper()
	_, err := Open(dir, memOptions(fs))
	require.ErrorIs(t, err, ErrCorrupt)
	for _, name := range names {
		require.ErrorContains(t, err, name)
	}
}

// Item 5 of issue 8: what Open finds must agree with the log's own
// checkpoints and with itself; where it does not, records that were
// acknowledged are gone, and the log must say so rather than open.

func TestOpenRefusesADeletedSealedSegment(t *testing.T) {
	for _, crashed := range []bool{false, true} {
		t.Run(fmt.Sprintf("unclean=%t", crashed), func(t *testing.T) {
			fs := newMemFS(t)
			bases := fiveSegments(t, fs, "/data/g-0")
			removeSegment(t, fs, "/data/g-0", bases[2])
			if crashed {
				unclean(t, fs, "/data/g-0")
			}
			requireCorrupt(t, fs, "/data/g-0",
				segment.FileName("/data/g-0", bases[1], segment.LogSuffix),
				segment.FileName("/data/g-0", bases[3], segment.LogSuffix),
				fmt.Sprintf("offsets %d to %d", bases[2], bases[3]-1))
		})
	}
}

func TestOpenRefusesADeletedFirstSegment(t *testing.T) {
	t.Run("log start never moved", func(t *testing.T) {
		fs := newMemFS(t)
		bases := fiveSegments(t, fs, "/data/f-0")
		removeSegment(t, fs, "/data/f-0", 0)
		requireCorrupt(t, fs, "/data/f-0", segment.FileName("/data/f-0", bases[1], segment.LogSuffix), "log start offset 0")
	})
	t.Run("log start inside the first segment", func(t *testing.T) {
		fs := newMemFS(t)
		l, err := Open("/data/f-1", memOptions(fs))
		require.NoError(t, err)
		appendN(t, l, 0, 400, 10, 100)
		bases := segmentBases(l)
		require.NoError(t, l.DeleteRecordsBefore(bases[1]-5))
		require.NoError(t, l.Close())
		removeSegment(t, fs, "/data/f-1", 0)
		unclean(t, fs, "/data/f-1")
		requireCorrupt(t, fs, "/data/f-1", segment.FileName("/data/f-1", bases[1], segment.LogSuffix),
			fmt.Sprintf("log start offset %d", bases[1]-5))
	})
}

// TestOpenAcceptsWhatRetentionAndDeleteRecordsRemoved: the segments they
// delete are below the log start offset, which they checkpoint first.
func TestOpenAcceptsWhatRetentionAndDeleteRecordsRemoved(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/r-0", memOptions(fs))
	require.NoError(t, err)
	appendN(t, l, 0, 400, 10, 100)
	bases := segmentBases(l)
	require.NoError(t, l.DeleteRecordsBefore(bases[1]))
	n, err := l.ApplyRetention(time.Now(), Retention{Bytes: 1})
	require.NoError(t, err)
	require.Positive(t, n)
	start := l.LogStartOffset()
	require.NoError(t, l.Close())
	for _, crashed := range []bool{false, true} {
		if crashed {
			unclean(t, fs, "/data/r-0")
		}
		l, err = Open("/data/r-0", memOptions(fs))
		require.NoError(t, err)
		require.Equal(t, start, l.LogStartOffset())
		requireRecords(t, l, int(start), 400, 100)
		require.NoError(t, l.Close())
	}
}

func TestOpenRefusesAnEmptiedOnlySegment(t *testing.T) {
	for _, crashed := range []bool{false, true} {
		t.Run(fmt.Sprintf("unclean=%t", crashed), func(t *testing.T) {
			fs := newMemFS(t)
			opts := memOptions(fs)
			opts.SegmentBytes = 1 << 20
			l, err := Open("/data/e-0", opts)
			require.NoError(t, err)
			appendN(t, l, 0, 600, 10, 100)
			require.Equal(t, []int64{0}, segmentBases(l))
			require.NoError(t, l.Close())
			cutLogFile(t, fs, "/data/e-0", 0, 0)
			if crashed {
				unclean(t, fs, "/data/e-0")
			}
			_, err = Open("/data/e-0", opts)
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, segment.FileName("/data/e-0", 0, segment.LogSuffix))
			require.ErrorContains(t, err, "recovery point 600")
		})
	}
}

func TestOpenRefusesASegmentCutBelowTheRecoveryPoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crashed bool
		which   func(bases []int64) int
	}{
		{"active, unclean", true, func(b []int64) int { return len(b) - 1 }},
		{"active, clean", false, func(b []int64) int { return len(b) - 1 }},
		{"sealed, unclean", true, func([]int64) int { return 1 }},
		{"sealed, clean", false, func([]int64) int { return 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newMemFS(t)
			bases := fiveSegments(t, fs, "/data/c-0")
			base := bases[tc.which(bases)]
			ends := batchEnds(t, fs, "/data/c-0", base)
			require.Greater(t, len(ends), 2)
			cutLogFile(t, fs, "/data/c-0", base, ends[0]) // at a batch boundary
			if tc.crashed {
				unclean(t, fs, "/data/c-0")
			}
			requireCorrupt(t, fs, "/data/c-0", segment.FileName("/data/c-0", base, segment.LogSuffix))
		})
	}
}

// TestOpenRefusesAFIFOInPlaceOfASegment: a FIFO is no segment, and must
// neither become a gap nor block the open.
func TestOpenRefusesAFIFOInPlaceOfASegment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p-0")
	l, err := Open(dir, Options{SegmentBytes: 8 << 10, MaxIndexBytes: 1024, IndexIntervalBytes: 512, Fsync: FsyncNever()})
	require.NoError(t, err)
	appendN(t, l, 0, 400, 10, 100)
	bases := segmentBases(l)
	require.NoError(t, l.Close())
	name := segment.FileName(dir, bases[2], segment.LogSuffix)
	removeSegment(t, vfs.Default, dir, bases[2])
	require.NoError(t, syscall.Mkfifo(name, 0o644))

	done := make(chan error, 1)
	go func() {
		l, err := Open(dir, Options{SegmentBytes: 8 << 10, MaxIndexBytes: 1024, IndexIntervalBytes: 512})
		if err == nil {
			l.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, name)
		require.ErrorContains(t, err, "not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked on a FIFO")
	}
}

// TestOpenAcceptsAFollowersGaps: a follower whose leader's log skips
// offsets starts segments after a gap; that is no loss.
func TestOpenAcceptsAFollowersGaps(t *testing.T) {
	fs := newMemFS(t)
	opts := memOptions(fs)
	l, err := Open("/data/f-0", opts)
	require.NoError(t, err)
	replicate := func(base int64, n int) {
		for i := range n {
			b, err := segment.AppendBatch(nil, []segment.Record{record(i, 1000)}, segment.BuildOptions{BaseOffset: base + int64(i)})
			require.NoError(t, err)
			_, err = l.AppendReplicated(b)
			require.NoError(t, err)
		}
	}
	replicate(1000, 14) // the first batch after a gap: the empty segment 0 goes; two full segments
	replicate(5000, 10) // a gap where the segment is full: a roll after it
	replicate(9000, 1)
	bases := segmentBases(l)
	require.Equal(t, int64(1000), bases[0])
	require.Contains(t, bases, int64(5000))
	require.NoError(t, l.Close())
	for _, crashed := range []bool{false, true} {
		if crashed {
			unclean(t, fs, "/data/f-0")
		}
		l, err = Open("/data/f-0", opts)
		require.NoError(t, err)
		require.Equal(t, bases, segmentBases(l))
		require.Equal(t, int64(9001), l.LogEndOffset())
		require.NoError(t, l.Close())
	}
	// A recorded gap still needs the segment before it to end where it
	// did.
	i := slices.Index(bases, 5000)
	removeSegment(t, fs, "/data/f-0", 5000)
	requireCorrupt(t, fs, "/data/f-0", segment.FileName("/data/f-0", bases[i+1], segment.LogSuffix),
		fmt.Sprintf("offsets %d to %d", bases[i-1]+7, bases[i+1]-1))
}

// Item 7 of issue 8: only the last segment can have a torn tail; a bad
// batch in a segment the log rolled past is corruption, even when the
// recovery point is stale and the segment is recovered.
func TestOpenRefusesABadBatchInASealedSegmentWithAStaleRecoveryPoint(t *testing.T) {
	fs := newMemFS(t)
	bases := fiveSegments(t, fs, "/data/s-0")
	ends := batchEnds(t, fs, "/data/s-0", bases[1])
	pos := ends[1] // the third batch of the second segment
	name := segment.FileName("/data/s-0", bases[1], segment.LogSuffix)
	f, err := fs.OpenReadWrite(name)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff, 0xff}, pos+segment.HeaderSize+3) // inside its records: the CRC fails
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fs.Remove(filepath.Join("/data/s-0", recoveryPointFile)))
	unclean(t, fs, "/data/s-0")

	requireCorrupt(t, fs, "/data/s-0", name, fmt.Sprintf("position %d", pos))
	names, err := fs.List("/data/s-0")
	require.NoError(t, err)
	for _, base := range bases {
		require.Contains(t, names, filepath.Base(segment.FileName("", base, segment.LogSuffix)), "no segment is deleted")
	}
}

// TestCrashDuringTruncationOpens cuts the power at every operation of a
// follower's truncations: whatever a crash leaves must open, since nothing
// acknowledged is missing, with the records below the truncation point
// intact. The recovery point must never be left above what the files hold,
// nor a cut segment before segments that a truncation removed.
func TestCrashDuringTruncationOpens(t *testing.T) {
	script := func(fs *vfs.MemFS) {
		l, err := Open("/data/t-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		for i := 0; i < 200; i += 10 {
			if _, err := l.Append(batchOf(i, 10)); err != nil {
				return
			}
		}
		if l.TruncateTo(125) != nil { // inside a sealed segment: later ones go
			return
		}
		if l.DeleteRecordsBefore(60) != nil || l.TruncateTo(10) != nil { // below the first segment: a restart
			return
		}
		_, _ = l.Append(batchOf(10, 10))
	}
	total := countOps(t, script)
	for stop := 0; stop < total; stop++ {
		after := crashedAt(t, stop, 11, script)
		l, err := Open("/data/t-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		leo := int(l.LogEndOffset())
		start := int(l.LogStartOffset())
		if start < leo {
			requireRecords(t, l, start, leo, 100)
		}
		require.NoError(t, l.Close())
	}
}

// batchOf is records from..from+n-1 as record() makes them, 100 bytes each.
func batchOf(from, n int) []segment.Record {
	recs := make([]segment.Record, n)
	for i := range recs {
		recs[i] = record(from+i, 100)
	}
	return recs
}

// Item 8 of issue 8: a Log locks its directory, as a Dir does, so that two
// writers never acknowledge appends into one log.

func TestLogIsLockedAgainstASecondOpen(t *testing.T) {
	for name, fs := range map[string]vfs.FS{"mem": newMemFS(t), "os": vfs.Default} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "p-0")
			opts := memOptions(fs)
			l, err := Open(dir, opts)
			require.NoError(t, err)
			_, err = Open(dir, opts)
			require.ErrorIs(t, err, ErrLogLocked)
			require.ErrorContains(t, err, dir)
			require.ErrorContains(t, err, "already open in this process")
			require.NotContains(t, err.Error(), "another process")
			appendN(t, l, 0, 10, 5, 10) // the first is unharmed
			require.NoError(t, l.Close())

			l, err = Open(dir, opts)
			require.NoError(t, err, "once the first closes, the second opens")
			requireRecords(t, l, 0, 10, 10)
			require.NoError(t, l.Close())
		})
	}
}

// A process's Log in a partition folder of another process's Dir is
// refused, though the Dir never opened that partition.
func TestLogInADirIsLockedAgainstASecondProcess(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	code, out := lockChild(t, lockChildLog+filepath.Join(dir, "t-0"))
	require.Equal(t, lockChildRefused, code, "the second process must be refused: %s", out)
	require.Contains(t, out, "in use by another process")
	require.NoError(t, d.Close())
	code, out = lockChild(t, lockChildLog+filepath.Join(dir, "t-0"))
	require.Zero(t, code, "once the Dir closes, the Log opens: %s", out)
}

func TestLogIsLockedAgainstASecondProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p-0")
	l, err := Open(dir, Options{})
	require.NoError(t, err)
	code, out := lockChild(t, lockChildLog+dir)
	require.Equal(t, lockChildRefused, code, "the second process must be refused: %s", out)
	require.Contains(t, out, dir, "the error names the directory")
	require.Contains(t, out, "in use by another process")
	require.NoError(t, l.Close())
	code, out = lockChild(t, lockChildLog+dir)
	require.Zero(t, code, "once the first closes, the second opens: %s", out)
}

// TestLogAndDirLockEachOther: a Dir's partitions are Logs, so log.Open of
// a partition folder of an open Dir is refused, whether or not the Dir
// has the partition open now (it closes the least recently used), and
// OpenDir is refused while a Log of one of its partitions is open; so is a
// Log in the Dir's own folder.
func TestLogAndDirLockEachOther(t *testing.T) {
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 2}))
	appendPartition(t, must(d.Partition("t", 0)), 0, 5)

	_, err = Open("/data/t-0", memOptions(fs))
	require.ErrorIs(t, err, ErrLogLocked)
	require.ErrorContains(t, err, "already open in this process")
	_, err = Open("/data", memOptions(fs))
	require.ErrorIs(t, err, ErrLogLocked)
	require.ErrorContains(t, err, "already open in this process, by a Dir")

	_, err = Open("/data/t-1", memOptions(fs))
	require.ErrorIs(t, err, ErrLogLocked, "a partition the Dir has not opened yet")
	require.ErrorContains(t, err, "/data/t-1 is a partition of the Dir /data")
	appendPartition(t, must(d.Partition("t", 1)), 0, 5)
	require.NoError(t, d.Close())

	l, err := Open("/data/t-1", memOptions(fs))
	require.NoError(t, err, "no Dir open")
	_, err = OpenDir("/data", dirOptions(fs))
	require.ErrorIs(t, err, ErrDirLocked)
	require.ErrorContains(t, err, "by a Log of one of its partitions")
	require.NoError(t, l.Close())

	// The lock file is neither a segment nor a stray file.
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	for p := range int32(2) {
		requireRecords(t, must(must(d.Partition("t", p)).acquire(false)), 0, 5, 50)
		must(d.Partition("t", p)).release(nil)
	}
	require.NoError(t, d.Close())
}

func TestDirIsLockedAgainstASecondOpenInThisProcess(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	_, err = OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.ErrorIs(t, err, ErrDirLocked)
	require.ErrorContains(t, err, "already open in this process, by a Dir")
	require.NotContains(t, err.Error(), "another process")
	require.NoError(t, d.Close())
}

// TestACRCErrorNamesTheFileAndTheBatchPosition: a clean reopen reads no
// batch, so a flipped bit is found by a read, whose error must say where
// (item 12 of issue 8).
func TestACRCErrorNamesTheFileAndTheBatchPosition(t *testing.T) {
	fs := newMemFS(t)
	bases := fiveSegments(t, fs, "/data/x-0")
	ends := batchEnds(t, fs, "/data/x-0", bases[1])
	pos := ends[2] // the fourth batch of the second segment
	name := segment.FileName("/data/x-0", bases[1], segment.LogSuffix)
	f, err := fs.OpenReadWrite(name)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff}, pos+segment.HeaderSize+5)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	l, err := Open("/data/x-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	var readErr error
	for _, err := range l.Records(bases[1], ReadCommitted) {
		if err != nil {
			readErr = err
			break
		}
	}
	require.ErrorIs(t, readErr, ErrCorrupt)
	require.ErrorContains(t, readErr, "crc mismatch")
	require.ErrorContains(t, readErr, name)
	require.ErrorContains(t, readErr, fmt.Sprintf("position %d", pos))
}

// TestCrashDuringAFollowersGapRollsOpens cuts the power at every operation
// of a follower that rolls segments after gaps: the gap is recorded before
// its segment exists, so whatever a crash leaves opens.
func TestCrashDuringAFollowersGapRollsOpens(t *testing.T) {
	script := func(fs *vfs.MemFS) {
		l, err := Open("/data/g-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		for _, base := range []int64{100, 101, 102, 103, 104, 105, 106, 107, 500, 501, 900} {
			b, err := segment.AppendBatch(nil, []segment.Record{record(int(base), 1500)}, segment.BuildOptions{BaseOffset: base})
			if err != nil {
				return
			}
			if _, err := l.AppendReplicated(b); err != nil {
				return
			}
		}
	}
	total := countOps(t, script)
	for stop := 0; stop < total; stop++ {
		after := crashedAt(t, stop, 13, script)
		l, err := Open("/data/g-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		require.NoError(t, l.Close())
	}
}

// TestOpenRefusesAJunkSegmentName: a file named like a segment at the
// largest offset is no segment of the log.
func TestOpenRefusesAJunkSegmentName(t *testing.T) {
	fs := newMemFS(t)
	fiveSegments(t, fs, "/data/j-0")
	junk := "/data/j-0/09223372036854775807.log"
	f, err := fs.Create(junk)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	requireCorrupt(t, fs, "/data/j-0", junk)
}

// An empty path is refused as the bad option it is, not tried as a
// directory whose sync fails.
func TestOpenRefusesAnEmptyPath(t *testing.T) {
	_, err := OpenDir("", DirOptions{MaintenanceInterval: -1})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "empty path")
	_, err = Open("", Options{})
	require.ErrorIs(t, err, ErrInvalidOption)
}
