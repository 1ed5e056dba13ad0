package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// compareCompaction builds a log of keyed records with many versions of
// each key, then, run by run, forces a compaction of a fresh copy of it
// and reads the same segment files raw (os.File.Read into 1 MiB), both
// from the page cache. Compaction reads every dirty segment twice (once
// to map the keys, once to rewrite), writes what it keeps and syncs it;
// the ratio charges all of that to the bytes of the segments it cleaned.
func compareCompaction(shape dirShape, rng *rand.Rand) (cmp comparison, err error) {
	parent, err := tempDir()
	if err != nil {
		return cmp, err
	}
	defer removeAfter(parent, &err)
	built := filepath.Join(parent, "compact-0")
	if err := buildKeyedLog(built, shape, rng); err != nil {
		return cmp, err
	}
	files, records, bytes, err := cleanableSegments(built)
	if err != nil {
		return cmp, err
	}
	buf := make([]byte, readChunk)
	if _, err := readFiles(files, buf); err != nil { // warm the page cache
		return cmp, err
	}
	var kept int64
	raw := func() (sample, error) {
		start := time.Now()
		n, err := readFiles(files, buf)
		if err == nil && n != bytes {
			err = fmt.Errorf("read %d bytes of %d", n, bytes)
		}
		return sample{records: records, elapsed: time.Since(start)}, err
	}
	compact := func() (sample, error) {
		s, st, err := compactCopy(built, parent, shape.compactSegment, len(files), buf)
		kept = st.RecordsRead - st.RecordsRemoved
		return s, err
	}
	ss, err := medians(shape.reps, raw, compact)
	if err != nil {
		return cmp, err
	}
	mbps := func(s sample) float64 { return float64(bytes) / s.elapsed.Seconds() / 1e6 }
	fmt.Printf("%-24s %-22s %12s %9s  %s\n", "compaction, cached", "contender", "records/s", "MB/s", "note (MB/s of segment bytes)")
	test := fmt.Sprintf("%.1f MiB in %d segments", float64(bytes)/(1<<20), len(files))
	fmt.Printf("%-24s %-22s %12.0f %9.1f  %s\n", test, "raw read 1 MiB", ss[0].perSec(), mbps(ss[0]), "the cleanable segment files")
	fmt.Printf("%-24s %-22s %12.0f %9.1f  %s\n", "", "strand Compact", ss[1].perSec(), mbps(ss[1]),
		fmt.Sprintf("Force; %d records over %d keys, %d kept", records, shape.compactKeys, kept))
	return comparison{name: "dir-compact-vs-raw-read", value: ss[1].perSec() / ss[0].perSec()}, nil
}

// buildKeyedLog writes shape.compactRecords records with keys drawn at
// random from shape.compactKeys, in batches of batchRecords, to a new log
// without fsync, and closes it cleanly.
func buildKeyedLog(dir string, shape dirShape, rng *rand.Rand) error {
	l, err := log.Open(dir, log.Options{Fsync: log.FsyncNever(), SegmentBytes: shape.compactSegment})
	if err != nil {
		return err
	}
	values := make([]byte, smallRecordSize*batchRecords)
	for i := range values {
		values[i] = byte(rng.Uint32())
	}
	recs := make([]segment.Record, batchRecords)
	for i := range recs {
		recs[i].Value = values[i*smallRecordSize : (i+1)*smallRecordSize]
	}
	for n := 0; n < shape.compactRecords; n += len(recs) {
		for i := range recs {
			recs[i].Key = fmt.Appendf(recs[i].Key[:0], "key-%07d", rng.IntN(shape.compactKeys))
		}
		if _, err := l.Append(recs); err != nil {
			return errors.Join(err, l.Close())
		}
	}
	return l.Close()
}

// cleanableSegments returns the log files of the segments that
// compaction may clean, all but the active (last) one, with their records
// and bytes. The log starts at offset 0, so the active segment's base
// offset, which names its files, counts the records before it.
func cleanableSegments(dir string) (files []string, records, bytes int64, err error) {
	files, err = filepath.Glob(filepath.Join(dir, "*"+segment.LogSuffix))
	if err != nil {
		return nil, 0, 0, err
	}
	if len(files) < 2 {
		return nil, 0, 0, fmt.Errorf("%s has %d segments, compaction needs 2 or more", dir, len(files))
	}
	// Zero-padded base offsets sort in offset order.
	slices.Sort(files)
	active := files[len(files)-1]
	files = files[:len(files)-1]
	if records, err = strconv.ParseInt(strings.TrimSuffix(filepath.Base(active), segment.LogSuffix), 10, 64); err != nil {
		return nil, 0, 0, fmt.Errorf("segment file %s: %w", active, err)
	}
	for _, name := range files {
		fi, err := os.Stat(name)
		if err != nil {
			return nil, 0, 0, err
		}
		bytes += fi.Size()
	}
	return files, records, bytes, nil
}

// compactCopy copies the log in built to a fresh directory under parent,
// reads its cleanable segments once to have them in the page cache, as
// the raw read has them, and times a forced compaction of it, which must
// clean all segments of them.
func compactCopy(built, parent string, segmentBytes int64, segments int, buf []byte) (s sample, st log.CompactStats, err error) {
	dir, err := os.MkdirTemp(parent, "copy-")
	if err != nil {
		return s, st, err
	}
	defer removeAfter(dir, &err)
	logDir := filepath.Join(dir, filepath.Base(built))
	if err := os.CopyFS(logDir, os.DirFS(built)); err != nil {
		return s, st, err
	}
	files, records, _, err := cleanableSegments(logDir)
	if err != nil {
		return s, st, err
	}
	if _, err := readFiles(files, buf); err != nil {
		return s, st, err
	}
	l, err := log.Open(logDir, log.Options{Fsync: log.FsyncNever(), SegmentBytes: segmentBytes})
	if err != nil {
		return s, st, err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	start := time.Now()
	st, err = l.Compact(time.Now(), log.CompactOptions{Force: true})
	s = sample{records: records, elapsed: time.Since(start)}
	if err == nil && (st.Segments != segments || st.RecordsRead != records) {
		err = fmt.Errorf("compaction cleaned %d segments and read %d records, the log has %d cleanable segments of %d records",
			st.Segments, st.RecordsRead, segments, records)
	}
	return s, st, err
}
