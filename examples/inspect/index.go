package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"

	"github.com/strandlog/strand/index"
	"github.com/strandlog/strand/segment"
)

// The index files are read here rather than with package index, which
// opens them read-write to map them; the rules checked are those of
// index/doc.go, which are what every index Kafka writes obeys.

// offsetEntry is a used .index entry: the batch whose last offset is
// offset starts at pos.
type offsetEntry struct {
	i           int // entry number, for messages
	offset, pos int64
}

// timeEntry is a used .timeindex entry: no record before offset has a
// timestamp above ts.
type timeEntry struct {
	i          int
	ts, offset int64
}

// readOffsetIndex reads the segment's .index, keeping the entries that obey
// the index rules for matching against the log, and returns how many
// entries it has.
func (s *segScan) readOffsetIndex(print bool) int {
	return s.readEntries(s.idxPath, index.OffsetEntrySize, func(i int, e []byte) string {
		rel, pos := binary.BigEndian.Uint32(e), binary.BigEndian.Uint32(e[4:])
		ent := offsetEntry{i: i, offset: s.base + int64(rel), pos: int64(pos)}
		if print {
			s.in.printf("      offset: %d position: %d\n", ent.offset, ent.pos)
		}
		n := len(s.offsets)
		switch {
		case rel > math.MaxInt32:
			return fmt.Sprintf("relative offset %d exceeds 2^31-1", rel)
		case pos > math.MaxInt32:
			return fmt.Sprintf("position %d exceeds 2^31-1", pos)
		case pos == 0:
			return "position 0 is never indexed: the first batch of a segment is found without an entry"
		case n > 0 && ent.offset <= s.offsets[n-1].offset:
			return fmt.Sprintf("offset %d is not above offset %d of entry %d", ent.offset, s.offsets[n-1].offset, s.offsets[n-1].i)
		case n > 0 && ent.pos <= s.offsets[n-1].pos:
			return fmt.Sprintf("position %d is not above position %d of entry %d", ent.pos, s.offsets[n-1].pos, s.offsets[n-1].i)
		}
		s.offsets = append(s.offsets, ent)
		return ""
	})
}

// readTimeIndex is readOffsetIndex for the .timeindex.
func (s *segScan) readTimeIndex(print bool) int {
	return s.readEntries(s.tidPath, index.TimeEntrySize, func(i int, e []byte) string {
		ts, rel := int64(binary.BigEndian.Uint64(e)), binary.BigEndian.Uint32(e[8:])
		ent := timeEntry{i: i, ts: ts, offset: s.base + int64(rel)}
		if print {
			s.in.printf("      timestamp: %d offset: %d\n", ent.ts, ent.offset)
		}
		n := len(s.times)
		switch {
		case ts < 0:
			return fmt.Sprintf("timestamp %d is negative", ts)
		case rel > math.MaxInt32:
			return fmt.Sprintf("relative offset %d exceeds 2^31-1", rel)
		case n > 0 && ts <= s.times[n-1].ts:
			return fmt.Sprintf("timestamp %d is not above timestamp %d of entry %d", ts, s.times[n-1].ts, s.times[n-1].i)
		case n > 0 && ent.offset < s.times[n-1].offset:
			return fmt.Sprintf("offset %d is below offset %d of entry %d", ent.offset, s.times[n-1].offset, s.times[n-1].i)
		}
		s.times = append(s.times, ent)
		return ""
	})
}

// readEntries streams the entries of an index file to check, which says
// why an entry breaks the rules or returns "". An all-zero entry is an
// unused slot of a preallocated file, and only zeros may follow it. It
// returns the number of used entries.
func (s *segScan) readEntries(path string, size int, check func(i int, e []byte) string) int {
	f, err := openRegular(path)
	if errors.Is(err, iofs.ErrNotExist) {
		s.in.note(path, "missing; opening the log rebuilds it")
		return 0
	}
	if err != nil {
		s.indexFault(path, "%v", err)
		return 0
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()%int64(size) != 0 {
		s.indexFault(path, "length %d bytes is not a multiple of the %d-byte entry", fi.Size(), size)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	e := make([]byte, size)
	used, unused := 0, -1
	for i := 0; ; i++ {
		if _, err := io.ReadFull(r, e); err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				s.indexFault(path, "entry %d (byte %d): %v", i, i*size, err)
			}
			return used
		}
		zero := allZero(e)
		switch {
		case zero && unused < 0:
			unused = i
		case zero:
		case unused >= 0:
			s.indexFault(path, "entry %d (byte %d) is not zero, but entry %d before it is: only zeros may follow the last entry",
				i, i*size, unused)
			return used
		default:
			used++
			if why := check(i, e); why != "" {
				s.indexFault(path, "entry %d (byte %d): %s", i, i*size, why)
			}
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// matchIndexes checks the index entries that point at or before the batch
// h at pos, which the scan has reached.
func (s *segScan) matchIndexes(h segment.Batch, pos int64) {
	for len(s.offsets) > 0 && s.offsets[0].pos <= pos {
		e := s.offsets[0]
		s.offsets = s.offsets[1:]
		switch {
		case e.pos < pos:
			s.indexFault(s.idxPath, "entry %d (byte %d): offset %d at position %d: no batch starts there; it is inside the batch at position %d (offsets %d..%d)",
				e.i, e.i*index.OffsetEntrySize, e.offset, e.pos, s.prevPos, s.prevBase, s.prevLast)
		case e.offset != h.LastOffset():
			s.indexFault(s.idxPath, "entry %d (byte %d): offset %d at position %d, but the batch there holds offsets %d..%d (an entry maps a batch's last offset)",
				e.i, e.i*index.OffsetEntrySize, e.offset, e.pos, h.BaseOffset(), h.LastOffset())
		}
	}
	for len(s.times) > 0 && s.times[0].offset <= h.LastOffset() {
		e := s.times[0]
		s.times = s.times[1:]
		switch {
		case e.offset < h.BaseOffset():
			s.indexFault(s.tidPath, "entry %d (byte %d): timestamp %d at offset %d: no batch holds that offset",
				e.i, e.i*index.TimeEntrySize, e.ts, e.offset)
		case e.ts != h.MaxTimestamp():
			s.indexFault(s.tidPath, "entry %d (byte %d): timestamp %d at offset %d, but the batch holding that offset (position %d) has max timestamp %d",
				e.i, e.i*index.TimeEntrySize, e.ts, e.offset, pos, h.MaxTimestamp())
		case e.ts < s.prefixMax:
			s.indexFault(s.tidPath, "entry %d (byte %d): timestamp %d at offset %d is below max timestamp %d of an earlier batch",
				e.i, e.i*index.TimeEntrySize, e.ts, e.offset, s.prefixMax)
		}
	}
	s.prefixMax = max(s.prefixMax, h.MaxTimestamp())
}

// finishIndexes reports the entries no batch matched, once the scan
// stopped at end of a log file of size bytes.
func (s *segScan) finishIndexes(end, size int64) {
	if end < size {
		if n := len(s.offsets) + len(s.times); n > 0 {
			s.in.note(s.logPath, "%d index entries past position %d were not checked: the log cannot be read from there", n, end)
		}
		return
	}
	for _, e := range s.offsets {
		s.indexFault(s.idxPath, "entry %d (byte %d): offset %d at position %d: past the last batch (the log is %d bytes)",
			e.i, e.i*index.OffsetEntrySize, e.offset, e.pos, size)
	}
	for _, e := range s.times {
		s.indexFault(s.tidPath, "entry %d (byte %d): timestamp %d at offset %d: past the last batch (last offset %d)",
			e.i, e.i*index.TimeEntrySize, e.ts, e.offset, s.last)
	}
}

// indexFault reports a wrong index: a problem, unless opening the log
// recovers the segment, which rebuilds its indexes from the log.
func (s *segScan) indexFault(path, format string, args ...any) {
	if s.recoverFrom != math.MaxInt64 {
		s.in.note(path, "%s (opening the log recovers this segment and rebuilds its indexes)", fmt.Sprintf(format, args...))
		return
	}
	s.in.problem(path, format, args...)
}
