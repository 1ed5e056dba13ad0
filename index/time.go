package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/strandlog/strand/vfs"
)

// TimeEntrySize is the size of a time index entry: a big-endian timestamp
// (int64, milliseconds since the Unix epoch) and relative offset (uint32).
const TimeEntrySize = 12

// NoTimestamp is the timestamp Lookup returns when no entry is at or below
// the target: Kafka's RecordBatch.NO_TIMESTAMP.
const NoTimestamp = -1

// TimestampOffset is a time index entry: no record before Offset has a
// timestamp above Timestamp, so a record with a larger timestamp is at or
// after Offset.
type TimestampOffset struct {
	Timestamp int64
	Offset    int64
}

// TimeIndex is a segment's time index (a .timeindex file). It is safe for
// concurrent use: lookups run in parallel with each other and are
// serialized with appends.
type TimeIndex struct {
	file
}

// OpenTime opens the time index file name of the segment starting at
// baseOffset, with the same rules as OpenOffset.
func OpenTime(fsys vfs.FS, name string, baseOffset int64, maxBytes int, active bool) (*TimeIndex, error) {
	x := &TimeIndex{}
	if err := x.open(fsys, name, baseOffset, maxBytes, active, TimeEntrySize, 8, checkTimeEntry); err != nil {
		return nil, err
	}
	return x, nil
}

// checkTimeEntry enforces what every time index Kafka writes satisfies
// (apache/kafka:storage/.../log/TimeIndex.java, maybeAppend): timestamps are
// non-negative, because an entry needs one above NoTimestamp, and strictly
// increase; relative offsets fit in an int32 and never decrease.
//
// An all-zero entry would be timestamp 0 at the base offset; it cannot be
// told from an unused slot, so it always marks the unused tail and
// MaybeAppend never writes it.
func checkTimeEntry(e, prev []byte, i int) string {
	ts, rel := timeEntryAt(e, 0)
	switch {
	case ts < 0:
		return fmt.Sprintf("timestamp %d is negative", ts)
	case rel > math.MaxInt32:
		return fmt.Sprintf("relative offset %d exceeds 2^31-1", rel)
	case i == 0 && ts == 0 && rel == 0:
		return "entry is zero"
	case i == 0:
		return ""
	}
	prevTs, prevRel := timeEntryAt(prev, 0)
	switch {
	case ts <= prevTs:
		return fmt.Sprintf("timestamp %d is not above %d of entry %d", ts, prevTs, i-1)
	case rel < prevRel:
		return fmt.Sprintf("relative offset %d is below %d of entry %d", rel, prevRel, i-1)
	}
	return ""
}

func timeEntryAt(buf []byte, i int) (ts int64, rel uint32) {
	e := buf[i*TimeEntrySize:]
	return int64(binary.BigEndian.Uint64(e)), binary.BigEndian.Uint32(e[8:])
}

func (x *TimeIndex) entry(i int) TimestampOffset {
	ts, rel := timeEntryAt(x.buf, i)
	return TimestampOffset{Timestamp: ts, Offset: x.base + int64(rel)}
}

func (x *TimeIndex) lastEntry() TimestampOffset {
	if x.entries == 0 {
		return TimestampOffset{Timestamp: NoTimestamp, Offset: x.base}
	}
	return x.entry(x.entries - 1)
}

// Lookup returns the entry with the largest timestamp <= target, or
// (NoTimestamp, base offset) if there is none: the offset from which a
// search of the log for the first record at or after target starts.
func (x *TimeIndex) Lookup(target int64) TimestampOffset {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := x.search(target, func(i int) int64 {
		ts, _ := timeEntryAt(x.buf, i)
		return ts
	})
	if i < 0 {
		return TimestampOffset{Timestamp: NoTimestamp, Offset: x.base}
	}
	return x.entry(i)
}

// LastEntry returns the last entry, or (NoTimestamp, base offset) if there
// is none. Once the roll entry is in, its timestamp is the segment's
// largest.
func (x *TimeIndex) LastEntry() TimestampOffset {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.lastEntry()
}

// IsFull reports whether MaybeAppend without skipFullCheck would fail for
// want of room. It keeps the last slot free for the entry appended when
// the segment rolls (Kafka's TimeIndex.isFull).
func (x *TimeIndex) IsFull() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.sealed || x.entries >= len(x.buf)/TimeEntrySize-1
}

// MaybeAppend records that no record before offset has a timestamp above
// timestamp, if timestamp is above the last entry's; otherwise it changes
// nothing. The segment calls it for every batch with its running maximum
// timestamp and the offset holding it, and once more with skipFullCheck
// when it rolls or closes, which may use the slot IsFull keeps free.
//
// It fails if offset is below the last entry's (ErrInvalidOffset) or not
// within 2^31-1 of the base offset (ErrOffsetOverflow), if timestamp is
// below the last entry's (ErrInvalidTimestamp), or if there is no room
// (ErrIndexFull) or the index is sealed (ErrSealed). If the file system
// cannot allocate the entry's page (a full disk: the error wraps ENOSPC),
// the index is left as it was.
func (x *TimeIndex) MaybeAppend(timestamp, offset int64, skipFullCheck bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.writable(); err != nil {
		return err
	}
	room := len(x.buf) / TimeEntrySize
	if !skipFullCheck && x.entries >= room-1 {
		return x.full(timestamp, offset)
	}
	rel, err := x.relative(offset)
	if err != nil {
		return err
	}
	// An entry equal to the last one is allowed and ignored: it is the
	// roll entry appended twice, at roll and at close.
	last := x.lastEntry()
	if x.entries > 0 && offset < last.Offset {
		return fmt.Errorf("%w: %s: offset %d is below the last indexed offset %d", ErrInvalidOffset, x.name, offset, last.Offset)
	}
	if x.entries > 0 && timestamp < last.Timestamp {
		return fmt.Errorf("%w: %s: timestamp %d at offset %d is below the last indexed timestamp %d", ErrInvalidTimestamp, x.name, timestamp, offset, last.Timestamp)
	}
	if timestamp <= last.Timestamp || (timestamp == 0 && rel == 0) {
		return nil
	}
	if x.entries >= room {
		return x.full(timestamp, offset)
	}
	if err := x.allocate((x.entries + 1) * TimeEntrySize); err != nil {
		return err
	}
	e := x.buf[x.entries*TimeEntrySize:]
	binary.BigEndian.PutUint64(e, uint64(timestamp))
	binary.BigEndian.PutUint32(e[8:], rel)
	x.entries++
	return nil
}

func (x *TimeIndex) full(timestamp, offset int64) error {
	return fmt.Errorf("%w: %s: %d entries, cannot append timestamp %d at offset %d", ErrIndexFull, x.name, x.entries, timestamp, offset)
}
