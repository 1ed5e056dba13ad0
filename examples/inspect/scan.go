package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/strandlog/strand/segment"
)

// chunkSize is how much of a .log file is read at a time: many batches come
// from one read, and a segment of any size is read in bounded memory (a
// batch larger than this is read whole, as it must be to check its CRC).
const chunkSize = 1 << 20

// fileReader reads a file through a window of chunkSize bytes.
type fileReader struct {
	f      *os.File
	size   int64
	buf    []byte
	bufPos int64
}

// at returns the n bytes at pos; pos+n must not pass the size.
func (r *fileReader) at(pos int64, n int) ([]byte, error) {
	if off := pos - r.bufPos; off >= 0 && off+int64(n) <= int64(len(r.buf)) {
		return r.buf[off : off+int64(n)], nil
	}
	want := int(min(max(int64(n), chunkSize), r.size-pos))
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	if _, err := r.f.ReadAt(r.buf, pos); err != nil {
		r.buf = r.buf[:0]
		return nil, err
	}
	r.bufPos = pos
	return r.buf[:n], nil
}

// segScan is the check of one segment: its batches, read in order, against
// the index entries that are still to be matched.
type segScan struct {
	in      *inspector
	p       *partition
	base    int64
	logPath string

	recoverFrom int64 // see partition.recoverFrom
	next        int64 // offset after the last batch read, what recovery compares

	offsets []offsetEntry // sorted by position, not yet matched to a batch
	times   []timeEntry   // sorted by offset, not yet matched
	idxPath string
	tidPath string

	prevPos, prevBase, prevLast int64 // the batch before the current one
	prefixMax                   int64 // largest max timestamp of the batches so far

	batches, records int64
	first, last      int64
	maxTimestamp     int64
	unsupported      map[segment.Codec]int
}

// inspectSegment prints and checks the segment of p's directory with base
// offset base, with its indexes. It returns the offset after the segment's
// last batch, or -1 if the log file could not be read.
func (in *inspector) inspectSegment(p *partition, base, recoverFrom int64, printIndexes bool) int64 {
	s := &segScan{
		in: in, p: p, base: base,
		logPath:      segment.FileName(p.dir, base, segment.LogSuffix),
		idxPath:      segment.FileName(p.dir, base, segment.IndexSuffix),
		tidPath:      segment.FileName(p.dir, base, segment.TimeIndexSuffix),
		recoverFrom:  recoverFrom,
		next:         base,
		prevPos:      -1,
		prefixMax:    -1,
		first:        -1,
		last:         -1,
		maxTimestamp: -1,
	}
	f, err := openRegular(s.logPath)
	if err != nil {
		in.problem(s.logPath, "%v", err)
		return -1
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		in.problem(s.logPath, "%v", err)
		return -1
	}
	size := fi.Size()
	in.printf("  segment %s: %d bytes\n", s.logPath, size)
	if size > math.MaxInt32 {
		in.problem(s.logPath, "%d bytes: positions in Kafka's index format are int32, a segment holds at most 2^31-1", size)
	}
	if base > math.MaxInt64-math.MaxInt32 {
		in.problem(s.logPath, "base offset %d leaves no room for a segment's 2^31 relative offsets: not a segment", base)
	}
	if printIndexes {
		in.printf("    %s\n", s.idxPath)
	}
	nOffsets := s.readOffsetIndex(printIndexes)
	if printIndexes {
		in.printf("    %s\n", s.tidPath)
	}
	nTimes := s.readTimeIndex(printIndexes)

	end := s.scan(&fileReader{f: f, size: size})
	s.finishIndexes(end, size)

	offsets := "none"
	if s.batches > 0 {
		offsets = fmt.Sprintf("%d..%d", s.first, s.last)
	}
	in.printf("    %d batches, %d records, offsets %s, max timestamp %s, index %d entries, timeindex %d entries\n",
		s.batches, s.records, offsets, formatTime(s.maxTimestamp), nOffsets, nTimes)
	for codec, n := range s.unsupported {
		in.note(s.logPath, "%d %s batches: their records were not decoded (this build reads none, gzip and lz4)", n, codec)
	}
	return s.next
}

// openRegular opens a file for reading if it is a regular file: opening a
// FIFO would block, and a device is no segment.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (mode %s)", fi.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (mode %s)", fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// scan reads the batches of the log file and returns the position where
// reading stopped: the file's size unless a batch could not be framed.
func (s *segScan) scan(r *fileReader) int64 {
	pos := int64(0)
	for pos < r.size {
		raw, err := r.at(pos, int(min(segment.HeaderSize, r.size-pos)))
		if err != nil {
			s.batchFault(pos, "read: %v", err)
			return pos
		}
		h, err := segment.ParseBatchHeader(raw)
		if err != nil {
			s.batchFault(pos, "%v; the %d bytes from here on cannot be read", err, r.size-pos)
			return pos
		}
		size := int64(h.Size())
		if pos+size > r.size {
			s.batchFault(pos, "%v: the batch at base offset %d is %d bytes, the file ends %d bytes after its start",
				segment.ErrShortBatch, h.BaseOffset(), size, r.size-pos)
			return pos
		}
		raw, err = r.at(pos, int(size))
		if err != nil {
			s.batchFault(pos, "read: %v", err)
			return pos
		}
		s.checkBatch(segment.Batch(raw), pos)
		pos += size
	}
	return pos
}

// checkBatch checks and prints the whole batch b found at pos, and matches
// it against the index entries.
func (s *segScan) checkBatch(b segment.Batch, pos int64) {
	valid := b.Validate()
	if s.in.opts.batches {
		s.in.printf("    %s\n", describeBatch(b, pos, valid == nil))
	}
	if valid != nil {
		s.batchFault(pos, "%v", valid)
	} else {
		s.checkRecords(b, pos)
	}
	switch {
	case b.BaseOffset() < s.base:
		s.batchFault(pos, "base offset %d is below the segment's base offset %d (its file name)", b.BaseOffset(), s.base)
	case b.BaseOffset() <= s.p.lastOffset:
		s.batchFault(pos, "base offset %d does not follow offset %d of the batch before it", b.BaseOffset(), s.p.lastOffset)
	case b.LastOffset()-s.base > math.MaxInt32:
		s.batchFault(pos, "last offset %d is more than 2^31-1 past the segment's base offset %d", b.LastOffset(), s.base)
	}
	s.checkEpoch(b, pos)
	s.matchIndexes(b, pos)

	if s.batches == 0 {
		s.first = b.BaseOffset()
	}
	s.batches++
	s.records += int64(b.NumRecords())
	s.last = b.LastOffset()
	s.maxTimestamp = max(s.maxTimestamp, b.MaxTimestamp())
	s.prevPos, s.prevBase, s.prevLast = pos, b.BaseOffset(), b.LastOffset()
	s.p.lastOffset = max(s.p.lastOffset, b.LastOffset())
	s.next = max(s.next, b.LastOffset()+1)
}

// checkRecords decodes the records of the valid batch b, printing them if
// asked, and checks the max timestamp against them.
func (s *segScan) checkRecords(b segment.Batch, pos int64) {
	largest := int64(math.MinInt64)
	n := 0
	for r, err := range b.Records() {
		if errors.Is(err, segment.ErrUnsupportedCodec) {
			if s.unsupported == nil {
				s.unsupported = make(map[segment.Codec]int)
			}
			s.unsupported[b.Codec()]++
			return
		}
		if err != nil {
			s.batchFault(pos, "%v", err)
			return
		}
		n++
		largest = max(largest, r.Timestamp)
		if s.p.offsets && !b.Control() {
			s.in.groupRecord(s.logPath, r)
		}
		if s.in.opts.records {
			s.in.printf("    | %s\n", describeRecord(r, s.in.opts.maxBytes))
		}
	}
	if n > 0 && !b.LogAppendTime() && largest != b.MaxTimestamp() {
		s.batchFault(pos, "batch at base offset %d: max timestamp %d, but its records' largest is %d",
			b.BaseOffset(), b.MaxTimestamp(), largest)
	}
}

// checkEpoch checks that leader epochs never go down along the log (a
// leader's batches follow those of every earlier epoch; a follower
// truncates what diverged before it appends) and that the epoch checkpoint
// gives the batch's base offset its epoch (KIP-101).
func (s *segScan) checkEpoch(b segment.Batch, pos int64) {
	e := b.PartitionLeaderEpoch()
	if e < s.p.lastEpoch {
		s.batchFault(pos, "batch at base offset %d has leader epoch %d, below epoch %d of the batch before it",
			b.BaseOffset(), e, s.p.lastEpoch)
	}
	s.p.lastEpoch = max(s.p.lastEpoch, e)
	if e < 0 {
		return
	}
	s.p.epochsSeen = true
	// Entries below the log start offset are dropped, so batches before
	// the first entry are not covered.
	if want, ok := s.p.epochFor(b.BaseOffset()); ok && want != e {
		s.batchFault(pos, "batch at base offset %d has leader epoch %d, but %s gives that offset to epoch %d",
			b.BaseOffset(), e, epochFile, want)
	}
}

// batchFault reports damage at pos of the log file: a problem, unless
// opening the log cuts it off as a torn write (see partition.recoverFrom).
func (s *segScan) batchFault(pos int64, format string, args ...any) {
	msg := fmt.Sprintf("position %d: %s", pos, fmt.Sprintf(format, args...))
	switch {
	case s.p.cut != "":
		s.in.note(s.logPath, "%s (after %s, where opening the log truncates it)", msg, s.p.cut)
	case s.next >= s.recoverFrom:
		s.p.cut = fmt.Sprintf("%s position %d", s.logPath, pos)
		s.in.note(s.logPath, "%s (past the recovery point %d after an unclean shutdown: a torn write, which opening the log truncates here)",
			msg, s.p.recoveryPoint)
	default:
		s.in.problem(s.logPath, "%s", msg)
	}
}

// describeBatch formats a batch header as kafka-dump-log does: key: value
// pairs.
func describeBatch(b segment.Batch, pos int64, valid bool) string {
	tsType := "CreateTime"
	if b.LogAppendTime() {
		tsType = "LogAppendTime"
	}
	horizon := "none"
	if ms, ok := b.DeleteHorizon(); ok {
		horizon = strconv.FormatInt(ms, 10)
	}
	return fmt.Sprintf("baseOffset: %d lastOffset: %d count: %d position: %d size: %d crc: %#08x valid: %t "+
		"codec: %s timestampType: %s baseTimestamp: %d maxTimestamp: %d "+
		"producerId: %d producerEpoch: %d baseSequence: %d transactional: %t control: %t "+
		"partitionLeaderEpoch: %d deleteHorizon: %s",
		b.BaseOffset(), b.LastOffset(), b.NumRecords(), pos, b.Size(), b.CRC(), valid,
		b.Codec(), tsType, b.BaseTimestamp(), b.MaxTimestamp(),
		b.ProducerID(), b.ProducerEpoch(), b.BaseSequence(), b.Transactional(), b.Control(),
		b.PartitionLeaderEpoch(), horizon)
}

// describeRecord formats a record, showing at most maxBytes of each key,
// value and header value (all of them if maxBytes < 0).
func describeRecord(r segment.Record, maxBytes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "offset: %d timestamp: %d keySize: %d valueSize: %d", r.Offset, r.Timestamp, size(r.Key), size(r.Value))
	if len(r.Headers) > 0 {
		b.WriteString(" headers: [")
		for i, h := range r.Headers {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%s", strconv.Quote(h.Key), quote(h.Value, maxBytes))
		}
		b.WriteString("]")
	}
	fmt.Fprintf(&b, " key: %s value: %s", quote(r.Key, maxBytes), quote(r.Value, maxBytes))
	return b.String()
}

// size is Kafka's size of a nullable field: -1 for null.
func size(b []byte) int {
	if b == nil {
		return -1
	}
	return len(b)
}

// quote shows bytes as a Go string literal, null for nil, cut after
// maxBytes bytes.
func quote(b []byte, maxBytes int) string {
	if b == nil {
		return "null"
	}
	if maxBytes >= 0 && len(b) > maxBytes {
		return strconv.Quote(string(b[:maxBytes])) + "..."
	}
	return strconv.Quote(string(b))
}

// formatTime shows a timestamp in milliseconds and as UTC time.
func formatTime(ms int64) string {
	if ms < 0 {
		return "none"
	}
	return fmt.Sprintf("%d (%s)", ms, time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z"))
}
