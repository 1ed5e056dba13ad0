package segment

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"syscall"

	"github.com/strandlog/strand/vfs"
	"golang.org/x/sys/unix"
)

// Slice is a read-only view of whole batches in a segment's log file, to
// hand to a consumer or a follower without copying them through user
// space: WriteTo sends it with sendfile when the destination is a socket
// or file and the segment is on the OS file system.
//
// A Slice reads the file when it is used; it stays valid as long as the
// segment's file is open. The zero Slice is empty.
type Slice struct {
	f    vfs.File
	name string
	pos  int64
	n    int64
	next int64
}

// Len returns the size of the slice in bytes.
func (s Slice) Len() int64 { return s.n }

// NextOffset returns the offset after the slice's last batch, 0 if the
// slice is empty: the upper bound of the aborted transactions a
// read-committed reader of the slice needs (Kafka's fetch collects them up
// to the fetched batches' next offset).
func (s Slice) NextOffset() int64 { return s.next }

// Position returns where the slice starts in the segment's log file.
func (s Slice) Position() int64 { return s.pos }

// ReadAt reads the slice's bytes from off, relative to its start.
func (s Slice) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == 0 && off == 0 {
		return 0, nil
	}
	if off < 0 || off >= s.n {
		if off == s.n {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("segment: read %s: offset %d outside a %d-byte slice", s.name, off, s.n)
	}
	eof := false
	if int64(len(p)) > s.n-off {
		p, eof = p[:s.n-off], true
	}
	n, err := s.f.ReadAt(p, s.pos+off)
	if err == nil && eof {
		err = io.EOF
	}
	return n, err
}

// Bytes reads the whole slice into memory.
func (s Slice) Bytes() ([]byte, error) {
	b := make([]byte, s.n)
	if err := s.readInto(b); err != nil {
		return nil, err
	}
	return b, nil
}

// readInto reads the whole slice into b, which is s.n bytes long.
func (s Slice) readInto(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if n, err := s.f.ReadAt(b, s.pos); n < len(b) {
		return fmt.Errorf("segment: read %s at %d: %w", s.name, s.pos+int64(n), err)
	}
	return nil
}

// All reads the slice into memory and yields its batches one by one, each
// validated (CRC included). An error ends the iteration, naming the file
// and the position of the batch in it. The batches are read into memory
// of their own, which they may keep.
func (s Slice) All() iter.Seq2[Batch, error] {
	var buf []byte
	return s.AllInto(&buf)
}

// AllInto is All reading into *buf, which it grows (and sets) when the
// slice does not fit, instead of into new memory: a reader of many slices
// reuses one buffer. The batches yielded alias *buf, so they are only
// valid until the next read into it.
func (s Slice) AllInto(buf *[]byte) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		if int64(cap(*buf)) < s.n {
			*buf = make([]byte, s.n)
		}
		data := (*buf)[:s.n]
		err := s.readInto(data)
		if err != nil {
			yield(nil, err)
			return
		}
		pos := s.pos
		for len(data) > 0 {
			var b Batch
			if b, data, err = ParseBatch(data); err == nil {
				err = b.Validate()
			}
			if err != nil {
				yield(nil, positionError(s.name, pos, -1, err))
				return
			}
			if !yield(b, nil) {
				return
			}
			pos += int64(len(b))
		}
	}
}

// WriteTo writes the slice to w. If w is an OS file or socket
// (syscall.Conn) and the segment's file has a descriptor, the kernel copies
// the bytes with sendfile(2) from the slice's position; otherwise they are
// read and written.
func (s Slice) WriteTo(w io.Writer) (int64, error) {
	if s.n == 0 {
		return 0, nil
	}
	if conn, ok := w.(syscall.Conn); ok {
		if src, err := s.f.SyscallConn(); err == nil {
			if n, done, err := s.sendfile(conn, src); done {
				return n, err
			}
		}
	}
	return io.Copy(w, io.NewSectionReader(s.f, s.pos, s.n))
}

// sendfile sends the slice with sendfile(2). done is false if the
// destination refused it before anything was sent, so the caller falls
// back to copying.
//
// The source descriptor is used inside its Control, which keeps it open:
// a Slice used after its segment's files were closed fails instead of
// reading whatever file got the descriptor's number since.
func (s Slice) sendfile(conn syscall.Conn, src syscall.RawConn) (written int64, done bool, err error) {
	dst, err := conn.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	off := s.pos
	var serr, werr error
	cerr := src.Control(func(srcFd uintptr) {
		werr = dst.Write(func(dstFd uintptr) bool {
			for written < s.n {
				n, err := unix.Sendfile(int(dstFd), int(srcFd), &off, int(min(s.n-written, 1<<30)))
				if n > 0 {
					written += int64(n)
				}
				switch {
				case err == unix.EAGAIN:
					return false // wait until the destination is writable
				case err == unix.EINTR:
					continue
				case err != nil:
					serr = err
					return true
				case n == 0:
					serr = io.ErrUnexpectedEOF // the file is shorter than the slice
					return true
				}
			}
			return true
		})
	})
	if cerr != nil { // the only error of Control: the file was closed
		return 0, true, fmt.Errorf("segment: sendfile %s: %w (%v)", s.name, os.ErrClosed, cerr)
	}
	// The destination refused sendfile (a regular file on macOS: ENOTSOCK).
	if written == 0 && (errors.Is(serr, unix.EINVAL) || errors.Is(serr, unix.ENOSYS) ||
		errors.Is(serr, unix.ENOTSOCK) || errors.Is(serr, unix.EOPNOTSUPP)) {
		return 0, false, nil
	}
	if serr == nil {
		serr = werr
	}
	if serr != nil {
		return written, true, fmt.Errorf("segment: sendfile %s at %d: %w", s.name, off, serr)
	}
	return written, true, nil
}
