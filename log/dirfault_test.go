package log

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// openMemDir opens a Dir at /data on a new in-memory file system.
func openMemDir(t *testing.T) (*vfs.MemFS, *Dir) {
	t.Helper()
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	return fs, d
}

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
	opts.MaxOpenFiles = 4 // one single-segment partition: its log, two indexes and its lock
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
	opts.MaxOpenFiles = 4
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

// writeUserFile makes a user's file, and its folder, durable.
func writeUserFile(t *testing.T, fs vfs.FS, name string) {
	t.Helper()
	require.NoError(t, fs.MkdirAll(filepath.Dir(name), 0o755))
	writeFile(t, fs, name, []byte("precious"))
}

// TestOpenDirDeletesNothingItCannotProveItsOwn: OpenDir removed a topic's
// partitions when its configuration file was missing, the partitions past
// a configuration's count, and any user folder that merely looked like
// <name>-<digits>. Strand now removes only the folders it renamed for
// deletion itself; the others stay where they are, Strays reports them,
// and CreateTopic and AddPartitions refuse to adopt them.
func TestOpenDirDeletesNothingItCannotProveItsOwn(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("lost", TopicConfig{Partitions: 2}))
	require.NoError(t, d.CreateTopic("shrunk", TopicConfig{Partitions: 2}))
	for _, tp := range []string{"lost", "shrunk"} {
		for p := int32(0); p < 2; p++ {
			appendPartition(t, must(d.Partition(tp, p)), 0, 3)
		}
	}
	require.NoError(t, d.Close())

	require.NoError(t, fs.Remove("/data/.topics/lost.json"))
	f, err := fs.Create("/data/.topics/shrunk.json")
	require.NoError(t, err)
	_, err = f.Write([]byte(`{"partitions": 1}`))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	writeUserFile(t, fs, "/data/backup-1/notes.txt")
	writeUserFile(t, fs, "/data/photos-2023/cat.jpg")
	writeUserFile(t, fs, "/data/t-0.x-delete/keep.txt") // not a name Strand makes

	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	strays, err := d.Strays()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"/data/lost-0", "/data/lost-1", "/data/shrunk-1", "/data/backup-1", "/data/photos-2023", "/data/t-0.x-delete",
	}, strays)
	for _, name := range []string{"/data/backup-1/notes.txt", "/data/photos-2023/cat.jpg", "/data/t-0.x-delete/keep.txt"} {
		_, err := fs.Stat(name)
		require.NoError(t, err, "%s is the user's", name)
	}
	for _, dir := range []string{"/data/lost-0", "/data/lost-1", "/data/shrunk-1"} {
		names, err := fs.List(dir)
		require.NoError(t, err)
		require.Contains(t, names, "00000000000000000000.log", "%s keeps its data", dir)
	}

	err = d.CreateTopic("lost", TopicConfig{Partitions: 2})
	require.ErrorIs(t, err, ErrStray)
	require.ErrorContains(t, err, "/data/lost-0")
	err = d.CreateTopic("backup", TopicConfig{Partitions: 1})
	require.NoError(t, err, "partition 0 is free")
	err = d.AddPartitions("backup", 2)
	require.ErrorIs(t, err, ErrStray)
	require.ErrorContains(t, err, "/data/backup-1")
	err = d.AddPartitions("shrunk", 3)
	require.ErrorIs(t, err, ErrStray)
	require.ErrorContains(t, err, "/data/shrunk-1")
	cfg, err := d.TopicConfig("shrunk")
	require.NoError(t, err)
	require.EqualValues(t, 1, cfg.Partitions, "a refused increase writes nothing")
	require.NoError(t, d.Close())

	// Once the user moves a folder away, the name is free.
	require.NoError(t, fs.RemoveAll("/data/backup-1"))
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.AddPartitions("backup", 2))
	appendPartition(t, must(d.Partition("backup", 1)), 0, 1)
}

// TestOpenDirFinishesAnInterruptedDelete: a crash in the middle of
// DeleteTopic, after its commit point, leaves the topic's folders under
// their own names or renamed for deletion; the next OpenDir finishes the
// delete, and the topic can be created again, empty.
func TestOpenDirFinishesAnInterruptedDelete(t *testing.T) {
	for _, stop := range []vfs.OpKind{vfs.OpRename, vfs.OpRemove} {
		t.Run(stop.String(), func(t *testing.T) {
			fs, d := openMemDir(t)
			require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 3}))
			for p := int32(0); p < 3; p++ {
				appendPartition(t, must(d.Partition("t", p)), 0, 3)
			}
			// Crash at the second rename of a partition folder, or at the
			// first removal of a renamed one.
			var crashed atomic.Pointer[vfs.MemFS]
			seen := 0
			fs.SetHook(func(op vfs.Op) error {
				if op.Kind == stop && filepath.Dir(op.Name) == "/data" && strings.HasPrefix(op.Name, "/data/t-") && crashed.Load() == nil {
					if seen++; seen == 2 || stop == vfs.OpRemove {
						crashed.Store(fs.Crash(vfs.CrashOptions{}))
					}
				}
				return nil
			})
			require.NoError(t, d.DeleteTopic("t"))
			fs.SetHook(nil)
			require.NoError(t, d.Close())
			after := crashed.Load()
			require.NotNil(t, after)

			d, err := OpenDir("/data", dirOptions(after))
			require.NoError(t, err)
			defer d.Close()
			require.Empty(t, must(d.Topics()))
			names, err := after.List("/data")
			require.NoError(t, err)
			require.ElementsMatch(t, []string{".lock", ".topics"}, names)
			strays, err := d.Strays()
			require.NoError(t, err)
			require.Empty(t, strays)
			require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 3}))
			_, _, end, err := must(d.Partition("t", 2)).Offsets()
			require.NoError(t, err)
			require.Zero(t, end)
		})
	}
}

// TestDeleteTopicRacesCreateTopic: a CreateTopic of the same name that
// comes while DeleteTopic removes the files used to open the old folder,
// append on top of the deleted data and then lose its configuration and
// folder to the delete. DeleteTopic now renames the folders away before
// the name is free again.
func TestDeleteTopicRacesCreateTopic(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	appendPartition(t, must(d.Partition("t", 0)), 0, 10)

	var once sync.Once
	recreated := make(chan error, 1)
	var offset atomic.Int64
	offset.Store(-1)
	fs.SetHook(func(op vfs.Op) error {
		if op.Name != "/data/.topics/t.json" || (op.Kind != vfs.OpRemove && op.Kind != vfs.OpRename) {
			return nil
		}
		once.Do(func() {
			go func() {
				for {
					err := d.CreateTopic("t", TopicConfig{})
					if errors.Is(err, ErrTopicExists) {
						time.Sleep(time.Millisecond)
						continue
					}
					if err == nil {
						var res AppendResult
						res, err = must(d.Partition("t", 0)).Append([]segment.Record{record(0, 50)})
						offset.Store(res.BaseOffset)
					}
					recreated <- err
					return
				}
			}()
			// Give the create every chance to run in the middle of the
			// delete, as it did before the fix.
			select {
			case err := <-recreated:
				recreated <- err
			case <-time.After(100 * time.Millisecond):
			}
		})
		return nil
	})
	require.NoError(t, d.DeleteTopic("t"))
	require.NoError(t, <-recreated)
	fs.SetHook(nil)
	require.Zero(t, offset.Load(), "the new topic starts empty")
	require.NoError(t, d.Close())

	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, []string{"t"}, must(d.Topics()))
	var got []int64
	for r, err := range must(d.Partition("t", 0)).Records(0, ReadCommitted) {
		require.NoError(t, err)
		got = append(got, r.Offset)
	}
	require.Equal(t, []int64{0}, got)
}

// TestTopicConfigIsReadUnderTheLock: maintenance and the producer read a
// topic's configuration while AddPartitions changes it (a data race under
// -race before the fix).
func TestTopicConfigIsReadUnderTheLock(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Retention: Retention{Age: time.Hour}}))
	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	defer pr.Close()
	var wg sync.WaitGroup
	var done atomic.Bool
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		for n := int32(2); n <= 100; n++ {
			time.Sleep(100 * time.Microsecond)
			if err := d.AddPartitions("t", n); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := d.Maintain(); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for !done.Load() {
			if _, err := pr.Produce(context.Background(), "t", AnyPartition, segment.Record{Value: []byte("v")}); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
}

// TestAddPartitionsWhileDeleting: while DeleteTopic closes the partitions,
// the topic takes no new ones, which would open while their folders are
// renamed away.
func TestAddPartitionsWhileDeleting(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	appendPartition(t, must(d.Partition("t", 0)), 0, 1)
	var added error
	var once sync.Once
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpCreate && op.Name == "/data/t-0/"+cleanShutdownFile {
			once.Do(func() { // DeleteTopic is closing t-0
				added = d.AddPartitions("t", 2)
				if added == nil {
					_, added = must(d.Partition("t", 1)).Append([]segment.Record{record(0, 10)})
				}
			})
		}
		return nil
	})
	require.NoError(t, d.DeleteTopic("t"))
	fs.SetHook(nil)
	require.ErrorIs(t, added, ErrUnknownTopic)
	require.NoError(t, d.Close())
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.Empty(t, must(d.Topics()))
	strays, err := d.Strays()
	require.NoError(t, err)
	require.Empty(t, strays)
}

// TestDirCrashAtEveryOperation cuts the power before each file-system
// operation of a topic's life in turn: created, written, deleted, created
// again and written. Whatever the cut, the next OpenDir opens, finds no
// folder it does not own, and finds the topic whole: its first life with
// every acknowledged record until DeleteTopic returned, never after it,
// and its second life with every acknowledged record once created.
func TestDirCrashAtEveryOperation(t *testing.T) {
	type progress struct {
		acked                        [2]int
		deleting, deleted, recreated bool
		acked2                       int
	}
	script := func(fs *vfs.MemFS, pr *progress) {
		d, err := OpenDir("/data", dirOptions(fs))
		if err != nil {
			return
		}
		defer d.Close()
		if d.CreateTopic("t", TopicConfig{Partitions: 2}) != nil {
			return
		}
		for i := 0; i < 4; i++ {
			for p := range 2 {
				if _, err := must(d.Partition("t", int32(p))).Append([]segment.Record{record(i, 40)}); err != nil {
					return
				}
				pr.acked[p] = i + 1
			}
		}
		pr.deleting = true
		if d.DeleteTopic("t") != nil {
			return
		}
		pr.deleted = true
		if d.CreateTopic("t", TopicConfig{Partitions: 1}) != nil {
			return
		}
		pr.recreated = true
		for i := 0; i < 3; i++ {
			if _, err := must(d.Partition("t", 0)).Append([]segment.Record{record(100+i, 40)}); err != nil {
				return
			}
			pr.acked2 = i + 1
		}
	}
	var full progress
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, &full) })
	require.Equal(t, 3, full.acked2)

	for stop := 0; stop < total; stop++ {
		var pr progress
		after := crashedAt(t, stop, 11, func(fs *vfs.MemFS) { script(fs, &pr) })
		d, err := OpenDir("/data", dirOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		strays, err := d.Strays()
		require.NoError(t, err)
		require.Empty(t, strays, "stop %d", stop)
		cfg, err := d.TopicConfig("t")
		switch {
		case err != nil:
			require.ErrorIs(t, err, ErrUnknownTopic)
			require.False(t, pr.recreated, "stop %d: a created topic is gone", stop)
			if pr.acked[0] > 0 {
				require.True(t, pr.deleting, "stop %d: only a delete loses a topic with records", stop)
			}
		case cfg.Partitions == 2: // the first life
			require.False(t, pr.deleted, "stop %d: a deleted topic came back", stop)
			for p := range 2 {
				_, _, end, err := must(d.Partition("t", int32(p))).Offsets()
				require.NoError(t, err)
				require.GreaterOrEqual(t, int(end), pr.acked[p], "stop %d partition %d", stop, p)
			}
		default: // the second life
			require.EqualValues(t, 1, cfg.Partitions)
			require.True(t, pr.deleted, "stop %d", stop)
			n := 0
			for r, err := range must(d.Partition("t", 0)).Records(0, ReadCommitted) {
				require.NoError(t, err)
				require.Equal(t, record(100+n, 40).Value, r.Value, "stop %d: only the second life's records", stop)
				n++
			}
			require.GreaterOrEqual(t, n, pr.acked2, "stop %d", stop)
		}
		require.NoError(t, d.Close())
	}
}
