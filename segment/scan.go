package segment

import (
	"fmt"
	"io"
	"sync"

	"github.com/strandlog/strand/vfs"
)

// scanChunk is how much of a log file a scan of a whole file reads at a
// time: many small batch headers come from one read.
const scanChunk = 64 << 10

// scanner steps through the batches of a log file between two positions,
// reading the file in chunks.
type scanner struct {
	f        vfs.File
	name     string
	from     int64 // where the scan began
	pos, end int64
	chunk    int64 // bytes read at a time while batches are small

	buf    []byte // file bytes from bufPos
	bufPos int64
	large  bool // the last batch was large: read headers alone

	walk headerWalk // the checks of nextHeader
}

// newScanner returns a scanner that reads chunk bytes at a time: scanChunk
// for a scan of a whole file, less for a lookup that scans from an index
// entry to the batch it wants, so that it reads no more than it needs.
func newScanner(f vfs.File, name string, pos, end, chunk int64) *scanner {
	sc := scanners.Get().(*scanner)
	*sc = scanner{f: f, name: name, from: pos, pos: pos, end: end, chunk: chunk, buf: sc.buf[:0]}
	return sc
}

// scanners keeps the scanners of finished reads, with their buffers: a
// read of a segment takes one for its lookup. A scanner goes back
// (release) only once nothing it returned is in use.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

// release gives the scanner back for another read; neither it nor any
// batch it returned may be used after.
func (s *scanner) release() {
	s.f = nil
	scanners.Put(s)
}

// next returns the batch at the scanner's position and moves past it:
// only its header, or the whole batch if whole. It returns io.EOF at the
// end, an error wrapping ErrShortBatch if the file ends inside the batch,
// and one wrapping ErrCorrupt if its framing is bad. A whole batch is
// valid until the next call.
func (s *scanner) next(whole bool) (Batch, error) {
	if s.pos >= s.end {
		return nil, io.EOF
	}
	b, err := s.bytes(min(HeaderSize, s.end-s.pos))
	if err != nil {
		return nil, err
	}
	h, err := ParseBatchHeader(b)
	if err != nil {
		return nil, err
	}
	size := int64(h.Size())
	if s.pos+size > s.end {
		return nil, fmt.Errorf("%w at base offset %d: %d-byte batch, %d bytes left in the file",
			ErrShortBatch, h.BaseOffset(), size, s.end-s.pos)
	}
	if whole {
		if b, err = s.bytes(size); err != nil {
			return nil, err
		}
		h = Batch(b)
	}
	s.pos += size
	s.large = size > s.chunk/4
	return h, nil
}

// nextHeader returns the next batch header, as next(false) does, once it
// passed the walk's checks (headerWalk).
func (s *scanner) nextHeader() (Batch, error) {
	b, err := s.next(false)
	if err == nil {
		err = s.walk.step(b)
	}
	return b, err
}

// bytes returns n bytes of the file at the scanner's position.
func (s *scanner) bytes(n int64) ([]byte, error) {
	if off := s.pos - s.bufPos; off >= 0 && off+n <= int64(len(s.buf)) {
		return s.buf[off : off+n], nil
	}
	// Read ahead a chunk when batches are small, so that many headers come
	// from one read; when they are large, a chunk would hold one header.
	want := min(n, s.end-s.pos)
	if !s.large {
		want = min(max(n, s.chunk), s.end-s.pos)
	}
	if int64(cap(s.buf)) < want {
		s.buf = make([]byte, want)
	}
	s.buf = s.buf[:want]
	got, err := s.f.ReadAt(s.buf, s.pos)
	if int64(got) < want {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%w: file ends at %d", ErrShortBatch, s.pos+int64(got))
		}
		s.buf = s.buf[:0]
		return nil, err
	}
	s.bufPos = s.pos
	return s.buf[:n], nil
}

// wrap names the file and position of an error met at pos.
func (s *scanner) wrap(pos int64, err error) error {
	return positionError(s.name, pos, -1, err)
}

func positionError(file string, pos, before int64, err error) *PositionError {
	return &PositionError{File: file, Position: pos, Before: before, Err: err}
}

// PositionError is an error met at a position of a segment's log file:
// a bad batch (wrapping ErrCorrupt or ErrShortBatch) or a failed read. A
// log that repairs damage (log.Options.TruncateCorruption) finds with
// errors.As where it was.
type PositionError struct {
	File     string // the log file
	Position int64  // the byte position of the batch
	// Before is the position of the batch before it, when Recover found
	// the error (it walks from the start of the file), or -1.
	Before int64
	Err    error
}

func (e *PositionError) Error() string {
	return fmt.Sprintf("segment %s: position %d: %v", e.File, e.Position, e.Err)
}

// Unwrap returns the error met there.
func (e *PositionError) Unwrap() error { return e.Err }
