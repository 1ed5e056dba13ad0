//go:build linux

package log

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/internal/fulldisk"
	"github.com/strandlog/strand/segment"
)

// fullDiskLong runs TestFullDisk over many more fill points (252 cases a
// file system: about a minute on tmpfs, half an hour on ext4, whose
// fsyncs reach the disk):
//
//	go test ./log -timeout 1h -run TestFullDisk -args -strand.fulldisk
//	go test ./log -run TestFullDisk/tmpfs -args -strand.fulldisk
var fullDiskLong = flag.Bool("strand.fulldisk", false, "run TestFullDisk over every combination of disk fill, record size and index interval")

// fullDiskCase is where a real file system fills up: how many pages stay
// free once the filler file is written, and what the log writes into them.
type fullDiskCase struct {
	freePages     int   // 4 KiB pages left free for the log
	recordBytes   []int // record value sizes, used in turn
	indexInterval int   // Options.IndexIntervalBytes; small ones fill index pages fast
	segmentBytes  int64 // small ones roll often: new index files, checkpoints
}

func (c fullDiskCase) String() string {
	return fmt.Sprintf("free=%dp/records=%v/interval=%d/segment=%d", c.freePages, c.recordBytes, c.indexInterval, c.segmentBytes)
}

// fullDiskCases varies which file needs the next page when the disk runs
// out: a log page, an offset or time index page, a checkpoint file, or the
// time index's roll entry when a segment rolls.
func fullDiskCases() []fullDiskCase {
	if !*fullDiskLong {
		return []fullDiskCase{
			{freePages: 6, recordBytes: []int{50}, indexInterval: 1, segmentBytes: 1 << 20},
			{freePages: 24, recordBytes: []int{3000, 100}, indexInterval: 0, segmentBytes: 16 << 10},
			{freePages: 40, recordBytes: []int{5000}, indexInterval: 64, segmentBytes: 8 << 10},
			{freePages: 80, recordBytes: []int{5000}, indexInterval: 1, segmentBytes: 64 << 10},
		}
	}
	var cases []fullDiskCase
	for _, free := range []int{3, 6, 12, 24, 40, 80, 160} {
		for _, recs := range [][]int{{50}, {700}, {3000, 100}, {5000}} {
			for _, interval := range []int{1, 64, 0} {
				for _, seg := range []int64{8 << 10, 64 << 10, 1 << 20} {
					cases = append(cases, fullDiskCase{free, recs, interval, seg})
				}
			}
		}
	}
	return cases
}

// fullDiskFileSystems are the file systems TestFullDisk fills, both of
// which the issue saw a process die on: a tmpfs and a loop-mounted ext4,
// and the files the cases must make run out of space on each. On ext4 the
// filler's own metadata blurs how many pages are left, and the short cases
// run out in the log and the checkpoint and snapshot files before they
// need a new index page or a roll, which the tmpfs cases cover.
var fullDiskFileSystems = []struct {
	name  string
	mount func(testing.TB) string
	kinds []string
}{
	{"tmpfs", func(t testing.TB) string { return fulldisk.Mount(t, 2<<20) }, []string{"log", "index", "checkpoint", "roll"}},
	{"ext4", func(t testing.TB) string { return fulldisk.MountExt4(t, 20<<20) }, []string{"log", "checkpoint"}},
}

// TestFullDisk fills a real file system until appends fail with ENOSPC.
// The process must live (an index written through a memory mapping dies
// of SIGBUS when the file system cannot back a page), every acknowledged
// record must read back, the log must open again (or fail to, cleanly) on
// the still-full disk, and once space is freed appends must work again.
func TestFullDisk(t *testing.T) {
	for _, fs := range fullDiskFileSystems {
		t.Run(fs.name, func(t *testing.T) {
			kinds := map[string]int{} // which files ran out of space, over all cases
			for _, c := range fullDiskCases() {
				t.Run(c.String(), func(t *testing.T) { runFullDisk(t, fs.mount(t), c, kinds) })
			}
			t.Logf("ENOSPC hits by file kind: %v", kinds)
			if !t.Failed() && !t.Skipped() {
				for _, k := range fs.kinds {
					require.Positive(t, kinds[k], "no case ran out of space writing a %s file (or rolling); the cases no longer cover it", k)
				}
			}
		})
	}
}

// fillLeaving writes a file that leaves about free pages of the file
// system free: at most that many, as the file system may need some of
// them to hold the file.
func fillLeaving(t *testing.T, mnt string, free int) {
	avail := fulldisk.FreePages(t, mnt)
	require.Greater(t, avail, free, "the file system is too small for %d free pages", free)
	err := os.WriteFile(filepath.Join(mnt, "filler"), make([]byte, (avail-free)*fulldisk.PageBytes), 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		require.NoError(t, err)
	}
}

// diskLog is the log under test and what it acknowledged.
type diskLog struct {
	t     *testing.T
	dir   string
	opts  Options
	l     *Log
	acked map[int64]string // offset -> value of every acknowledged record
	seq   int
	c     fullDiskCase
	kinds map[string]int
}

func runFullDisk(t *testing.T, mnt string, c fullDiskCase, kinds map[string]int) {
	// A fault on a mapped page becomes a panic in this goroutine, which
	// writes and reads the log, rather than a crash of the test binary.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("the process would have died: %v\n%s", r, debug.Stack())
		}
	}()
	spare := filepath.Join(mnt, "spare")
	require.NoError(t, os.WriteFile(spare, make([]byte, 64*fulldisk.PageBytes), 0o644))
	fillLeaving(t, mnt, c.freePages)

	d := &diskLog{t: t, dir: filepath.Join(mnt, "log"), c: c, kinds: kinds, acked: map[int64]string{}}
	d.opts = Options{
		SegmentBytes:       c.segmentBytes,
		IndexIntervalBytes: c.indexInterval,
		MaxIndexBytes:      64 << 10,
		CheckpointInterval: time.Nanosecond, // checkpoint after every append
	}
	var err error
	d.l, err = Open(d.dir, d.opts)
	require.NoError(t, err, "open on a disk with %d free pages", c.freePages)

	// Until ENOSPC, and on for a while: each failure may be a different
	// file running out (a small record may still fit in the log's last
	// page while the index needs a new one).
	d.appendUntilFull(30)
	d.checkAcked(d.l)

	// Free some space: the same log appends again.
	require.NoError(t, os.Remove(spare))
	for range 5 {
		_, err := d.append()
		require.NoError(t, err, "append after space was freed")
	}
	d.checkAcked(d.l)

	// Fill the disk again and reopen the log on it: Open may fail, but
	// cleanly, and if it opens, every acknowledged record is there. Then
	// again without the index files, which Open or the first read of a
	// segment rebuilds from the log, on the same full disk.
	fulldisk.Fill(t, filepath.Join(mnt, "spare2"))
	t.Logf("close on a full disk: %v", d.l.Close())
	d.l = nil
	d.reopenOnFullDisk()
	removeIndexes(t, d.dir)
	fulldisk.Fill(t, filepath.Join(mnt, "spare3"))
	d.reopenOnFullDisk()

	// With space again the log opens, has everything, and appends.
	for _, name := range []string{"filler", "spare2", "spare3"} {
		require.NoError(t, os.Remove(filepath.Join(mnt, name)))
	}
	d.l, err = Open(d.dir, d.opts)
	require.NoError(t, err, "open after space was freed")
	d.checkAcked(d.l)
	for range 20 {
		_, err := d.append()
		require.NoError(t, err, "append after space was freed and the log reopened")
	}
	require.NoError(t, d.l.Close())
	l, err := Open(d.dir, d.opts)
	require.NoError(t, err)
	d.checkAcked(l)
	require.NoError(t, l.Close())
}

// reopenOnFullDisk opens the log on a full disk. Open may fail, with
// ENOSPC; if it opens, reads return the acknowledged records or fail with
// ENOSPC (a segment opened lazily rebuilds its indexes on the first read).
func (d *diskLog) reopenOnFullDisk() {
	l, err := Open(d.dir, d.opts)
	if err != nil {
		require.ErrorIs(d.t, err, syscall.ENOSPC, "open on a full disk")
		d.t.Logf("open on a full disk failed cleanly, writing a %s file: %v", fileKind(err), err)
		return
	}
	d.checkAckedOr(l, syscall.ENOSPC)
	_, err = d.appendTo(l)
	d.t.Logf("append after reopening on a full disk: %v", err)
	d.t.Logf("close: %v", l.Close())
}

// removeIndexes removes the index files of the log in dir.
func removeIndexes(t *testing.T, dir string) {
	for _, pattern := range []string{"*" + segment.IndexSuffix, "*" + segment.TimeIndexSuffix} {
		names, err := filepath.Glob(filepath.Join(dir, pattern))
		require.NoError(t, err)
		for _, name := range names {
			require.NoError(t, os.Remove(name))
		}
	}
}

// appendUntilFull appends until failures appends failed. Each must fail
// with ENOSPC, and only that append: a full disk, like any failed write,
// does not fail the log (ErrFailed is for failed syncs). A checkpoint that
// cannot be written fails no append at all: Stats reports it.
func (d *diskLog) appendUntilFull(failures int) {
	for n, i := 0, 0; n < failures; i++ {
		require.Less(d.t, i, 100000, "the disk never filled up")
		_, err := d.append()
		if cerr := d.l.Stats().CheckpointError; cerr != nil {
			require.ErrorIs(d.t, cerr, syscall.ENOSPC, "append %d", i)
			d.kinds[fileKind(cerr)]++
		}
		if err == nil {
			continue
		}
		n++
		require.ErrorIs(d.t, err, syscall.ENOSPC, "append %d", i)
		require.NotErrorIs(d.t, err, ErrFailed, "append %d", i)
		d.kinds[fileKind(err)]++
		if strings.Contains(err.Error(), ": roll: ") {
			d.kinds["roll"]++
			d.t.Logf("a roll failed: %v", err)
		}
	}
}

// fileKind says which file an error was about: log, index, checkpoint.
func fileKind(err error) string {
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return "unknown"
	}
	base := filepath.Base(pe.Path)
	switch {
	case strings.HasSuffix(base, segment.LogSuffix):
		return "log"
	case strings.HasSuffix(base, segment.IndexSuffix), strings.HasSuffix(base, segment.TimeIndexSuffix):
		return "index"
	case strings.Contains(base, "checkpoint"):
		return "checkpoint"
	case strings.Contains(base, idempotence.SnapshotSuffix):
		return "snapshot"
	}
	return base
}

func (d *diskLog) append() (AppendResult, error) { return d.appendTo(d.l) }

// appendTo appends one record with a value unique to it and remembers it
// if acknowledged.
func (d *diskLog) appendTo(l *Log) (AppendResult, error) {
	size := d.c.recordBytes[d.seq%len(d.c.recordBytes)]
	v := fmt.Sprintf("%08d", d.seq)
	v += strings.Repeat(v[len(v)-1:], max(0, size-len(v)))
	d.seq++
	res, err := l.Append([]segment.Record{{Value: []byte(v)}})
	if err == nil {
		d.acked[res.BaseOffset] = v
	}
	return res, err
}

// checkAcked reads the log and checks that every acknowledged record is
// there, at its offset. Records whose append failed may be there too.
func (d *diskLog) checkAcked(l *Log) {
	d.t.Helper()
	d.checkAckedOr(l, nil)
}

// checkAckedOr is checkAcked, but a read may also fail with allowed.
func (d *diskLog) checkAckedOr(l *Log, allowed error) {
	d.t.Helper()
	got := map[int64]string{}
	for r, err := range l.Records(l.LogStartOffset(), ReadCommitted) {
		if err != nil && allowed != nil && errors.Is(err, allowed) {
			d.t.Logf("read failed: %v", err)
			return
		}
		require.NoError(d.t, err)
		got[r.Offset] = string(r.Value)
	}
	offsets := make([]int64, 0, len(d.acked))
	for off := range d.acked {
		offsets = append(offsets, off)
	}
	slices.Sort(offsets)
	for _, off := range offsets {
		v, ok := got[off]
		require.True(d.t, ok, "acknowledged offset %d is missing (%d acknowledged, %d read)", off, len(d.acked), len(got))
		require.Equal(d.t, d.acked[off], v, "offset %d", off)
	}
}
