package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strandlog/strand/log"
)

// The log suite runs log.Log beside github.com/tidwall/wal,
// github.com/hashicorp/raft-wal, cockroachdb/pebble's WAL writer and the
// raw file bounds (os.File.Write, and
// write plus fdatasync) on the same records, in one process, alternating
// the contenders run by run and reporting medians.
func init() { suites["log"] = logSuite }

var (
	logParent = flag.String("dir", os.TempDir(), "parent of the log suite's temporary directories")
	logCases  = flag.String("cases", "write,fsync,appenders,read", "the log suite's cases to run, comma-separated")
)

// logShape sizes the log suite.
type logShape struct {
	reps          int           // runs of each measurement; the median counts
	writeBatches  int           // batches per run without fsync
	syncBatches   int           // batches per run with an fsync each
	appendFor     time.Duration // how long the concurrent appenders run
	bigLog        int64         // the large log reopened and read
	smallLog      int64         // the small log reopened
	bigLogSkipped string        // why bigLog is smaller than the 2 GiB
}

// The shapes: 1 KiB records in batches of 100, 100-byte records for
// the concurrent appenders, and a 2 GiB log reopened beside a 2 MiB one.
const (
	recordSize      = 1 << 10
	batchRecords    = 100
	smallRecordSize = 100
	fullBigLog      = 2 << 30
	smallLog        = 2 << 20
	// The 2 GiB log is built only with room for it three times over, so
	// that the suite never fills a disk.
	minFreeForBigLog = 6 << 30
)

func logShapes(quick bool, free uint64) logShape {
	if quick {
		return logShape{reps: 1, writeBatches: 50, syncBatches: 20, appendFor: 200 * time.Millisecond,
			bigLog: 64 << 20, smallLog: smallLog, bigLogSkipped: "-quick"}
	}
	s := logShape{reps: 5, writeBatches: 2500, syncBatches: 1000, appendFor: 2 * time.Second,
		bigLog: fullBigLog, smallLog: smallLog}
	if free < minFreeForBigLog {
		s.bigLog = 256 << 20
		s.bigLogSkipped = fmt.Sprintf("only %s free in %s, the 2 GiB log needs %s", sizeName(int64(free)), *logParent, sizeName(minFreeForBigLog))
	}
	return s
}

// sample is what one run measured: records handled in an elapsed time,
// and the fsyncs a Strand log made meanwhile.
type sample struct {
	records int64
	elapsed time.Duration
	fsyncs  int64
	// p50 and p99 are the latencies of single operations, where a run
	// times them (the concurrent appenders).
	p50, p99 time.Duration
}

func (s sample) perSec() float64 { return float64(s.records) / s.elapsed.Seconds() }

// payloadMBps is the rate in MB/s of record values of size bytes.
func (s sample) payloadMBps(size int) float64 { return s.perSec() * float64(size) / 1e6 }

// medians runs each of runs reps times, alternating between them so that
// drifts in the machine's state (page cache, disk write-back, other
// tenants) spread over all, and returns each one's median sample by rate.
func medians(reps int, runs ...func() (sample, error)) ([]sample, error) {
	all := make([][]sample, len(runs))
	for range reps {
		for i, run := range runs {
			s, err := run()
			if err != nil {
				return nil, err
			}
			all[i] = append(all[i], s)
		}
	}
	out := make([]sample, len(runs))
	for i, ss := range all {
		slices.SortFunc(ss, func(a, b sample) int { return cmp.Compare(a.perSec(), b.perSec()) })
		out[i] = ss[len(ss)/2]
	}
	return out, nil
}

// comparison is one "ratio NAME VALUE" line, with the target.
type comparison struct {
	name  string
	value float64
	// bound is the target: at least bound, or at most if atMost; none if 0.
	bound  float64
	atMost bool
}

func (c comparison) target() string {
	switch {
	case c.bound == 0:
		return "-"
	case c.atMost:
		return fmt.Sprintf("<= %g", c.bound)
	}
	return fmt.Sprintf(">= %g", c.bound)
}

func (c comparison) met() string {
	switch {
	case c.bound == 0:
		return "-"
	case c.atMost && c.value <= c.bound, !c.atMost && c.value >= c.bound:
		return "met"
	}
	return "NOT MET"
}

func printRateHeader() {
	fmt.Printf("%-24s %-22s %12s %9s  %s\n", "test", "contender", "records/s", "MB/s", "note")
}

// printRate prints one contender's median; size is its records' value size.
func printRate(test, contender string, s sample, size int, note string) {
	fmt.Printf("%-24s %-22s %12.0f %9.1f  %s\n", test, contender, s.perSec(), s.payloadMBps(size), note)
}

func logSuite(quick bool) error {
	var st unix.Statfs_t
	if err := unix.Statfs(*logParent, &st); err != nil {
		return fmt.Errorf("log suite: -dir %s: %w", *logParent, err)
	}
	shape := logShapes(quick, st.Bavail*uint64(st.Bsize))
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 't', 'r', 'a', 'n', 'd'}))
	payloads := make([][]byte, batchRecords)
	for i := range payloads {
		payloads[i] = make([]byte, recordSize)
		for j := range payloads[i] {
			payloads[i][j] = byte(rng.Uint32())
		}
	}

	fmt.Printf("records of %d bytes in batches of %d, %d runs each, medians; MB/s counts record values; temporary directories in %s\n",
		recordSize, batchRecords, shape.reps, *logParent)
	printRateHeader()
	var cmps []comparison
	steps := []struct {
		name string
		run  func() ([]comparison, error)
	}{
		{"write", func() ([]comparison, error) { return compareWrites(shape, payloads) }},
		{"fsync", func() ([]comparison, error) { return compareSyncedWrites(shape, payloads) }},
		{"appenders", func() ([]comparison, error) { return compareAppenders(shape, payloads[0][:smallRecordSize]) }},
		{"read", func() ([]comparison, error) { return compareReadAndReopen(shape, payloads) }},
	}
	cases := strings.Split(*logCases, ",")
	for _, step := range steps {
		if !slices.Contains(cases, step.name) {
			continue
		}
		c, err := step.run()
		if err != nil {
			return fmt.Errorf("log suite: %w", err)
		}
		cmps = append(cmps, c...)
	}

	printComparisons(cmps)
	return nil
}

// compareWrites appends 1 KiB records in batches of 100 without fsync.
func compareWrites(shape logShape, payloads [][]byte) ([]comparison, error) {
	ss, err := medians(shape.reps,
		writeRun(openStrand(log.FsyncNever()), payloads, shape.writeBatches),
		writeRun(openRaw(false), payloads, shape.writeBatches),
		writeRun(openTidwall(true), payloads, shape.writeBatches),
		writeRun(openStrandBatches(log.FsyncNever()), payloads, shape.writeBatches),
	)
	if err != nil {
		return nil, err
	}
	const test = "write, no fsync"
	printRate(test, "strand FsyncNever", ss[0], recordSize, "Append(100 records)")
	printRate(test, "raw write", ss[1], recordSize, "the same batch bytes")
	printRate(test, "tidwall/wal NoSync", ss[2], recordSize, "syncs at each 20 MB segment")
	printRate(test, "strand AppendBatch", ss[3], recordSize, "producer-built batches, one reused buffer")
	return []comparison{
		{name: "log-nofsync-vs-raw-write", value: ss[0].perSec() / ss[1].perSec(), bound: 0.8},
		{name: "log-nofsync-vs-tidwall", value: ss[0].perSec() / ss[2].perSec(), bound: 6},
	}, nil
}

// compareSyncedWrites appends the same batches with one fsync each.
func compareSyncedWrites(shape logShape, payloads [][]byte) ([]comparison, error) {
	ss, err := medians(shape.reps,
		writeRun(openStrand(log.FsyncAlways()), payloads, shape.syncBatches),
		writeRun(openRaw(true), payloads, shape.syncBatches),
		writeRun(openTidwall(false), payloads, shape.syncBatches),
		writeRun(openRaftWAL, payloads, shape.syncBatches),
		writeRun(openStrandBatches(log.FsyncAlways()), payloads, shape.syncBatches),
		writeRun(openPebble, payloads, shape.syncBatches),
	)
	if err != nil {
		return nil, err
	}
	const test = "write, fsync per batch"
	printRate(test, "strand FsyncAlways", ss[0], recordSize, "Append(100 records)")
	printRate(test, "raw write+fdatasync", ss[1], recordSize, "the same batch bytes")
	printRate(test, "tidwall/wal", ss[2], recordSize, "")
	printRate(test, "hashicorp/raft-wal", ss[3], recordSize, "StoreLogs")
	printRate(test, "strand AppendBatch", ss[4], recordSize, "producer-built batches, one reused buffer")
	printRate(test, "pebble WAL", ss[5], recordSize, "SyncRecord of the batch's values")
	return []comparison{
		{name: "log-fsync-vs-raw-fdatasync", value: ss[0].perSec() / ss[1].perSec(), bound: 0.95},
		{name: "log-fsync-vs-pebble-wal", value: ss[0].perSec() / ss[5].perSec(), bound: 1},
		{name: "log-fsync-vs-tidwall-fsync", value: ss[0].perSec() / ss[2].perSec()},
		{name: "log-fsync-vs-raftwal", value: ss[0].perSec() / ss[3].perSec()},
	}, nil
}

// compareAppenders appends one 100-byte record per Append under
// FsyncAlways from 1 and from 8 goroutines: group commit should make 8
// appenders share each fsync. Beside it, in the same run: pebble's WAL
// writer with 8 synced writers, and the plain group commit bound (one loop
// writing and syncing all that is pending).
func compareAppenders(shape logShape, value []byte) ([]comparison, error) {
	contenders := []struct {
		name string
		open appenderOpener
		n    int
	}{
		{"strand 1 appender", openStrandAppender, 1},
		{"strand 8 appenders", openStrandAppender, 8},
		{"pebble WAL 1 writer", openPebbleAppender, 1},
		{"pebble WAL 8 writers", openPebbleAppender, 8},
		{"raw group commit 1", openGroupCommitAppender, 1},
		{"raw group commit 8", openGroupCommitAppender, 8},
	}
	runs := make([]func() (sample, error), len(contenders))
	for i, c := range contenders {
		runs[i] = appendersRun(c.open, c.n, shape.appendFor, value)
	}
	ss, err := medians(shape.reps, runs...)
	if err != nil {
		return nil, err
	}
	const test = "append 100 B, fsync"
	for i, c := range contenders {
		printRate(test, c.name, ss[i], smallRecordSize, fmt.Sprintf("%.1f records per fsync, latency p50 %v p99 %v",
			float64(ss[i].records)/float64(ss[i].fsyncs), ss[i].p50.Round(time.Microsecond), ss[i].p99.Round(time.Microsecond)))
	}
	return []comparison{
		{name: "log-8-appenders-vs-1", value: ss[1].perSec() / ss[0].perSec(), bound: 7},
		{name: "log-8-appenders-vs-pebble-8-writers", value: ss[1].perSec() / ss[3].perSec(), bound: 1},
		{name: "pebble-8-writers-vs-1", value: ss[3].perSec() / ss[2].perSec()},
		{name: "raw-group-commit-8-vs-1", value: ss[5].perSec() / ss[4].perSec()},
	}, nil
}

// tempDir makes a fresh directory for one run under -dir.
func tempDir() (string, error) {
	return os.MkdirTemp(*logParent, "strand-bench-")
}

// removeAfter removes dir, joining its error to *err.
func removeAfter(dir string, err *error) {
	*err = errors.Join(*err, os.RemoveAll(dir))
}

// sizeName prints a power-of-two size the way the issue does: 2 GiB, 2 MiB.
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}
