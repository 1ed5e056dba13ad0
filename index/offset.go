package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/strandlog/strand/vfs"
)

// OffsetEntrySize is the size of an offset index entry: a big-endian
// relative offset (uint32) and file position (uint32).
const OffsetEntrySize = 8

// OffsetPosition is an offset index entry: the batch holding Offset starts
// at byte Position of the segment's log file.
type OffsetPosition struct {
	Offset   int64
	Position uint32
}

// OffsetIndex is a segment's sparse offset index (a .index file). It is
// safe for concurrent use: lookups run in parallel with each other and are
// serialized with appends.
type OffsetIndex struct {
	file
}

// OpenOffset opens the offset index file name of the segment starting at
// baseOffset.
//
// If active, the index is the one being appended to: the file is created if
// missing and preallocated to maxBytes rounded down to a whole entry.
// Otherwise the file must exist and is opened sealed, as it is. Either way
// the entry count is the longest run of valid entries followed only by
// zeros; anything else fails with ErrCorrupt, after which the caller
// removes the file and rebuilds the index from the log.
func OpenOffset(fsys vfs.FS, name string, baseOffset int64, maxBytes int, active bool) (*OffsetIndex, error) {
	x := &OffsetIndex{}
	if err := x.open(fsys, name, baseOffset, maxBytes, active, OffsetEntrySize, 0, checkOffsetEntry); err != nil {
		return nil, err
	}
	return x, nil
}

// checkOffsetEntry enforces what every offset index Kafka writes satisfies:
// relative offsets and positions fit in an int32 and strictly increase, and
// no entry has position 0, because Kafka never indexes a segment's first
// batch (LogSegment.append adds an entry only after more than
// index.interval.bytes since the last one, starting from 0). So a zero
// entry always marks the unused tail.
func checkOffsetEntry(e, prev []byte, i int) string {
	rel, pos := offsetEntryAt(e, 0)
	switch {
	case rel > math.MaxInt32:
		return fmt.Sprintf("relative offset %d exceeds 2^31-1", rel)
	case pos > math.MaxInt32:
		return fmt.Sprintf("position %d exceeds 2^31-1", pos)
	case i == 0 && pos == 0:
		return "position 0 is never indexed"
	case i == 0:
		return ""
	}
	prevRel, prevPos := offsetEntryAt(prev, 0)
	switch {
	case rel <= prevRel:
		return fmt.Sprintf("relative offset %d is not above %d of entry %d", rel, prevRel, i-1)
	case pos <= prevPos:
		return fmt.Sprintf("position %d is not above %d of entry %d", pos, prevPos, i-1)
	}
	return ""
}

func offsetEntryAt(buf []byte, i int) (rel, pos uint32) {
	e := buf[i*OffsetEntrySize:]
	return binary.BigEndian.Uint32(e), binary.BigEndian.Uint32(e[4:])
}

func (x *OffsetIndex) entry(i int) OffsetPosition {
	rel, pos := offsetEntryAt(x.buf, i)
	return OffsetPosition{Offset: x.base + int64(rel), Position: pos}
}

// Lookup returns the entry with the largest offset <= target, or
// (base offset, 0) if there is none: where a forward scan of the log for
// target starts.
func (x *OffsetIndex) Lookup(target int64) OffsetPosition {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := -1
	if target >= x.base {
		i = x.search(target-x.base, func(i int) int64 { return int64(x.relAt(i)) })
	}
	if i < 0 {
		return OffsetPosition{Offset: x.base}
	}
	return x.entry(i)
}

// LookupPosition returns the entry with the largest position <= pos, or
// (base offset, 0) if there is none: the batch boundary a reader that may
// take the bytes up to pos can skip to.
func (x *OffsetIndex) LookupPosition(pos int64) OffsetPosition {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := x.search(pos, func(i int) int64 {
		_, p := offsetEntryAt(x.buf, i)
		return int64(p)
	})
	if i < 0 {
		return OffsetPosition{Offset: x.base}
	}
	return x.entry(i)
}

// LastEntry returns the last entry, or (base offset, 0) if there is none.
func (x *OffsetIndex) LastEntry() OffsetPosition {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.entries == 0 {
		return OffsetPosition{Offset: x.base}
	}
	return x.entry(x.entries - 1)
}

// IsFull reports whether Append would fail for want of room; the segment
// rolls before that.
func (x *OffsetIndex) IsFull() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.sealed || x.entries >= len(x.buf)/OffsetEntrySize
}

// Append adds an entry saying that the batch whose last offset is offset
// starts at position. Offsets and positions must strictly increase
// (ErrInvalidOffset, ErrInvalidPosition), the offset must be within 2^31-1
// of the base offset (ErrOffsetOverflow), and the index must have room
// (ErrIndexFull) and not be sealed (ErrSealed). If the file system cannot
// allocate the entry's page (a full disk: the error wraps ENOSPC), the
// index is left as it was.
func (x *OffsetIndex) Append(offset int64, position uint32) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.writable(); err != nil {
		return err
	}
	if x.entries >= len(x.buf)/OffsetEntrySize {
		return fmt.Errorf("%w: %s: %d entries, cannot append offset %d", ErrIndexFull, x.name, x.entries, offset)
	}
	rel, err := x.relative(offset)
	if err != nil {
		return err
	}
	if x.entries > 0 {
		last := x.entry(x.entries - 1)
		if offset <= last.Offset {
			return fmt.Errorf("%w: %s: offset %d is not above the last indexed offset %d", ErrInvalidOffset, x.name, offset, last.Offset)
		}
		if position <= last.Position {
			return fmt.Errorf("%w: %s: position %d of offset %d is not above the last indexed position %d", ErrInvalidPosition, x.name, position, offset, last.Position)
		}
	}
	if position == 0 || position > math.MaxInt32 {
		return fmt.Errorf("%w: %s: position %d of offset %d is not within [1, 2^31-1]", ErrInvalidPosition, x.name, position, offset)
	}
	if err := x.allocate((x.entries + 1) * OffsetEntrySize); err != nil {
		return err
	}
	e := x.buf[x.entries*OffsetEntrySize:]
	binary.BigEndian.PutUint32(e, rel)
	binary.BigEndian.PutUint32(e[4:], position)
	x.entries++
	return nil
}
