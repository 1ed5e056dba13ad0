package index

import (
	"errors"
	"fmt"
	"io"

	"github.com/strandlog/strand/vfs"
)

// LastOffsetEntry reads the last entry of the offset index file name of
// the segment starting at baseOffset, without mapping the file or checking
// its other entries: a cheap hint for a caller that checks the entry
// against the log, such as a log that reads the next offset of many
// segments when it opens. A file with no entries, or a zero last entry (an
// unused slot of a preallocated file), gives (baseOffset, 0), as LastEntry
// does. A file that is not whole entries is ErrCorrupt.
func LastOffsetEntry(fsys vfs.FS, name string, baseOffset int64) (OffsetPosition, error) {
	// Opening a FIFO for reading would block until a writer comes.
	fi, err := fsys.Stat(name)
	if err != nil {
		return OffsetPosition{}, err
	}
	n := fi.Size()
	switch {
	case !fi.Mode().IsRegular():
		return OffsetPosition{}, fmt.Errorf("%w: %s is not a regular file (mode %s)", ErrCorrupt, name, fi.Mode())
	case n%OffsetEntrySize != 0:
		return OffsetPosition{}, fmt.Errorf("%w: %s: length %d bytes is not a multiple of the %d-byte entry", ErrCorrupt, name, n, OffsetEntrySize)
	case n == 0:
		return OffsetPosition{Offset: baseOffset}, nil
	}
	f, err := fsys.Open(name)
	if err != nil {
		return OffsetPosition{}, err
	}
	defer f.Close()
	var e [OffsetEntrySize]byte
	if _, err := f.ReadAt(e[:], n-OffsetEntrySize); err != nil && !errors.Is(err, io.EOF) {
		return OffsetPosition{}, err
	}
	rel, pos := offsetEntryAt(e[:], 0)
	if pos == 0 {
		return OffsetPosition{Offset: baseOffset}, nil
	}
	return OffsetPosition{Offset: baseOffset + int64(rel), Position: pos}, nil
}
