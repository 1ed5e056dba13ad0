package index

import "errors"

// Errors returned by this package. They are wrapped with the file name and
// the offending value; match them with errors.Is.
var (
	// ErrCorrupt means an index file's contents contradict the index rules.
	// The index is derived data: the caller removes the file and rebuilds
	// it from the log.
	ErrCorrupt = errors.New("index: corrupt index file")

	// ErrIndexFull means there is no slot left for an entry. A segment
	// rolls before its indexes fill up (see IsFull).
	ErrIndexFull = errors.New("index: index is full")

	// ErrInvalidOffset means an appended offset goes backwards (offset
	// index: not above the last entry; time index: below it), or a base
	// offset is out of range. Kafka throws InvalidOffsetException.
	ErrInvalidOffset = errors.New("index: invalid offset")

	// ErrOffsetOverflow means an offset does not fit in a relative offset:
	// it is below the base offset or more than 2^31-1 above it. Kafka
	// throws IndexOffsetOverflowException; the segment rolls before that.
	ErrOffsetOverflow = errors.New("index: relative offset overflow")

	// ErrInvalidPosition means an appended position is not above the last
	// entry's, is 0 (never indexed), or exceeds 2^31-1 (Kafka positions are
	// int32).
	ErrInvalidPosition = errors.New("index: invalid position")

	// ErrInvalidTimestamp means an appended timestamp is below the last
	// entry's.
	ErrInvalidTimestamp = errors.New("index: invalid timestamp")

	// ErrInvalidMaxBytes means the maximum index size cannot hold a single
	// entry or exceeds 2^31-1 bytes.
	ErrInvalidMaxBytes = errors.New("index: invalid maximum index size")

	// ErrSealed means an append to a sealed index. Unseal or Reset makes it
	// active again.
	ErrSealed = errors.New("index: index is sealed")

	// ErrClosed means the index was closed.
	ErrClosed = errors.New("index: index is closed")
)
