package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"sort"
	"sync"

	"github.com/strandlog/strand/vfs"
)

// file is what the offset and time indexes share: the mapped file, the
// entry count, sealing, truncation and the warm-section search. Its
// exported methods are promoted to OffsetIndex and TimeIndex.
//
// Entries are stored through the mapping, which is writable while the
// index is active and read-only once it is sealed, as Kafka maps them. An
// active file is grown sparse, and a store into a page the file system
// cannot back (a hole on a full disk) faults with SIGBUS, which kills the
// process. So the file is allocated for real (vfs.File.Allocate, that is
// fallocate) ahead of the entries: on a full disk that call fails with
// ENOSPC, and only the append fails. Writing entries with pwrite into a
// read-only mapping would also cover copy-on-write file systems, where
// any store may need a new block, but it costs a system call per entry,
// which measured up to twice the CPU time of a segment append of 4 KiB
// batches; allocation costs a call per doubling of the index, then one per
// maxAllocBytes. Nothing is ever stored twice into a slot through the
// mapping: TruncateTo and Reset cut the file and grow it back rather than
// clear entries.
//
// On tmpfs even a read of a hole through a shared mapping allocates a page
// and faults when none is left, so the mapping is only read where entries
// are; load reads the file with ReadAt.
//
// Invariant while usable: buf is the whole file mapped (len(buf) is the
// file's length), its first entries*size bytes are the entries and every
// byte after them is zero. Keeping the tail zero is what lets Open find the
// entry count without trusting the file length.
type file struct {
	// mu guards everything below. Lookups hold it shared; appends,
	// truncation and remapping hold it exclusively, so a lookup never reads
	// a mapping that is being replaced (as Kafka's remapLock in
	// apache/kafka:storage/.../log/AbstractIndex.java).
	mu sync.RWMutex

	fs       vfs.FS
	name     string
	base     int64
	size     int // bytes per entry
	offCol   int // byte offset of the relative offset within an entry
	maxBytes int // length of the active file: maxBytes rounded down to entries

	f       vfs.File
	m       vfs.Mapping // nil while the file is empty
	buf     []byte
	rw      bool // m is writable
	alloc   int  // the first alloc bytes are allocated (Allocate)
	entries int
	sealed  bool
	err     error // set by Close or a failed remap; every later call fails with it
}

// checkEntry says why entry i, e, is invalid, given that the entries
// before it are valid and prev is the one just before it (nil for entry
// 0), or returns "" if it is valid.
type checkEntry func(e, prev []byte, i int) string

// maxFileBytes bounds an index file: Kafka's index sizes and positions are
// Java ints.
const maxFileBytes = math.MaxInt32

// warmBytes is the size of the tail of an index that lookups search first
// (apache/kafka:storage/.../log/AbstractIndex.java, warmEntries).
const warmBytes = 8192

// scanBytes is how much of the file load reads at a time.
const scanBytes = 64 << 10

// An active file is allocated ahead of its entries by as much as is
// allocated already, from minAllocBytes up to maxAllocBytes: few system
// calls for a large index, little of a nearly full disk for a small one.
const (
	minAllocBytes = 4 << 10
	maxAllocBytes = 1 << 20
)

// open opens the file and loads its entries; see OpenOffset.
func (x *file) open(fsys vfs.FS, name string, base int64, maxBytes int, active bool, size, offCol int, check checkEntry) error {
	if maxBytes < size || maxBytes > maxFileBytes {
		return fmt.Errorf("%w: %s: %d bytes, want %d to %d", ErrInvalidMaxBytes, name, maxBytes, size, maxFileBytes)
	}
	if base < 0 || base > math.MaxInt64-math.MaxInt32 {
		return fmt.Errorf("%w: %s: base offset %d out of range", ErrInvalidOffset, name, base)
	}
	x.fs, x.name, x.base, x.size, x.offCol, x.maxBytes = fsys, name, base, size, offCol, maxBytes/size*size
	f, err := fsys.OpenReadWrite(name) // read-write even when sealed: Unseal grows it
	if active && errors.Is(err, iofs.ErrNotExist) {
		f, err = fsys.Create(name)
	}
	if err != nil {
		return err
	}
	x.f = f
	if err := x.load(check); err != nil {
		x.unmap()
		f.Close()
		return err
	}
	if !active {
		x.sealed = true
		return nil
	}
	x.alloc = x.entries * size // the pages entries were stored in
	if err := x.remap(max(x.maxBytes, x.entries*size), true); err != nil {
		x.Close()
		return err
	}
	return nil
}

// load counts the file's entries and maps it read-only: the entries are
// the longest prefix of valid ones, provided the rest of the file is zero
// (a preallocated tail). A file that is valid up to entry i but has
// non-zero bytes after it is corrupt: a torn write, stale entries or
// garbage. The file length is only checked, never trusted.
func (x *file) load(check checkEntry) error {
	fi, err := x.f.Stat()
	if err != nil {
		return err
	}
	n := fi.Size()
	switch {
	case n > maxFileBytes:
		return fmt.Errorf("%w: %s: length %d bytes exceeds the %d-byte limit", ErrCorrupt, x.name, n, maxFileBytes)
	case n%int64(x.size) != 0:
		return fmt.Errorf("%w: %s: length %d bytes is not a multiple of the %d-byte entry", ErrCorrupt, x.name, n, x.size)
	case n == 0:
		return nil
	}
	if x.entries, err = x.scan(int(n), check); err != nil {
		return err
	}
	m, err := x.f.MapReadOnly(int(n))
	if err != nil {
		return err
	}
	x.m, x.buf, x.rw = m, m.Bytes(), false
	return nil
}

// scan reads the n bytes of the file with ReadAt, not through a mapping
// (see file), and returns the number of entries.
func (x *file) scan(n int, check checkEntry) (int, error) {
	chunk := make([]byte, min(n, scanBytes/x.size*x.size))
	prev := make([]byte, 0, x.size)
	entries := -1 // the first unused slot, once found
	for off := 0; off < n; off += len(chunk) {
		b := chunk[:min(len(chunk), n-off)]
		if _, err := x.f.ReadAt(b, int64(off)); err != nil && !(errors.Is(err, io.EOF) && off+len(b) == n) {
			return 0, fmt.Errorf("index: read %s at %d: %w", x.name, off, err)
		}
		at := 0 // where the zero tail starts in b, once the entries end
		for ; entries < 0 && at < len(b); at += x.size {
			i, e := (off+at)/x.size, b[at:at+x.size]
			why := check(e, prev, i)
			if why == "" {
				prev = append(prev[:0], e...)
				continue
			}
			if firstNonZero(e) >= 0 {
				return 0, fmt.Errorf("%w: %s: entry %d (byte %d): %s", ErrCorrupt, x.name, i, off+at, why)
			}
			entries = i
		}
		if nz := firstNonZero(b[at:]); entries >= 0 && nz >= 0 {
			slot, bad := entries*x.size, off+at+nz
			return 0, fmt.Errorf("%w: %s: entry %d (byte %d) is unused but byte %d (in entry %d) after it is not zero", ErrCorrupt, x.name, entries, slot, bad, bad/x.size)
		}
	}
	if entries < 0 {
		entries = n / x.size
	}
	return entries, nil
}

// firstNonZero returns the index of the first non-zero byte of b, or -1.
func firstNonZero(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 { // a word at a time: preallocated tails are megabytes
		if binary.LittleEndian.Uint64(b[i:]) != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// remap sets the file's length and mapping to n bytes, n >= entries*size,
// mapped writable or read-only. The caller holds mu exclusively (or owns x
// exclusively).
func (x *file) remap(n int, writable bool) error {
	if n == len(x.buf) && writable == x.rw {
		return nil
	}
	if n > 0 && n >= len(x.buf) {
		// Growing needs no space: the new part stays sparse until
		// allocate. The old mapping stays valid until the new one exists,
		// so a failure leaves the index as it was.
		m, err := x.mapFile(n, writable)
		if err != nil {
			return fmt.Errorf("index: %s: map %d bytes: %w", x.name, n, err)
		}
		err = x.unmap()
		x.m, x.buf, x.rw = m, m.Bytes(), writable
		return err
	}
	x.alloc = min(x.alloc, n)
	// The file must not be truncated while mapped (vfs.File.Map).
	if err := x.unmap(); err != nil {
		return x.fail(err)
	}
	if err := x.f.Truncate(int64(n)); err != nil {
		return x.fail(err)
	}
	if n > 0 {
		m, err := x.mapFile(n, writable)
		if err != nil {
			return x.fail(err)
		}
		x.m, x.buf = m, m.Bytes()
	}
	x.rw = writable
	return nil
}

func (x *file) mapFile(n int, writable bool) (vfs.Mapping, error) {
	if writable {
		return x.f.Map(n)
	}
	return x.f.MapReadOnly(n)
}

// allocate makes sure that the first end bytes of the file are allocated,
// so that storing an entry there cannot fault (see file). On a nearly full
// disk a request ahead of need may fail where one for end bytes would not:
// the disk is then within maxAllocBytes of full anyway.
func (x *file) allocate(end int) error {
	if end <= x.alloc {
		return nil
	}
	to := max(end, x.alloc+min(max(x.alloc, minAllocBytes), maxAllocBytes))
	to = min(len(x.buf), (to+minAllocBytes-1)/minAllocBytes*minAllocBytes)
	if err := x.f.Allocate(int64(x.alloc), int64(to-x.alloc)); err != nil {
		return fmt.Errorf("index: %s: allocate bytes %d to %d: %w", x.name, x.alloc, to, err)
	}
	x.alloc = to
	return nil
}

func (x *file) unmap() error {
	if x.m == nil {
		return nil
	}
	err := x.m.Close()
	x.m, x.buf = nil, nil
	return err
}

// fail makes the index unusable after a remap left it without a mapping.
// Lookups then answer as an empty index does, which is still a correct
// starting point for a scan of the log.
func (x *file) fail(err error) error {
	x.unmap()
	x.entries = 0
	x.err = fmt.Errorf("index: %s: unusable after failed resize: %w", x.name, err)
	return x.err
}

// writable returns why entries cannot be appended, or nil.
func (x *file) writable() error {
	switch {
	case x.err != nil:
		return x.err
	case x.sealed:
		return fmt.Errorf("%w: %s", ErrSealed, x.name)
	}
	return nil
}

// relative converts offset to a relative offset (Kafka's
// AbstractIndex.relativeOffset).
func (x *file) relative(offset int64) (uint32, error) {
	if offset < x.base || offset-x.base > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s: offset %d is not within [%d, %d]", ErrOffsetOverflow, x.name, offset, x.base, x.base+math.MaxInt32)
	}
	return uint32(offset - x.base), nil
}

// relAt returns the relative offset of entry i.
func (x *file) relAt(i int) uint32 {
	return binary.BigEndian.Uint32(x.buf[i*x.size+x.offCol:])
}

// search returns the last of the entries whose key is <= target, or -1.
func (x *file) search(target int64, key func(i int) int64) int {
	return searchWarm(x.entries, warmBytes/x.size, target, key)
}

// searchWarm returns the largest i < n with key(i) <= target, or -1; keys
// must be non-decreasing. Lookups come from followers and consumers near
// the tail, so it first tests whether the answer lies in the last warm
// entries and then searches only there: those pages stay in the page cache,
// where a plain binary search would touch cold pages in the middle of the
// file (apache/kafka:storage/.../log/AbstractIndex.java, indexSlotRangeFor).
func searchWarm(n, warm int, target int64, key func(i int) int64) int {
	lo, hi := 0, n
	if n > warm {
		if hot := n - warm; key(hot) <= target {
			lo = hot
		} else {
			hi = hot
		}
	}
	return lo + sort.Search(hi-lo, func(i int) bool { return key(lo+i) > target }) - 1
}

// Name returns the index file's name.
func (x *file) Name() string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.name
}

// BaseOffset returns the base offset of the segment the index belongs to.
func (x *file) BaseOffset() int64 { return x.base }

// Entries returns the number of entries.
func (x *file) Entries() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries
}

// MaxEntries returns the number of entries the file has room for.
func (x *file) MaxEntries() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.buf) / x.size
}

// SizeBytes returns the number of bytes the entries take: the file's
// length once sealed.
func (x *file) SizeBytes() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries * x.size
}

// Sealed reports whether the index is sealed.
func (x *file) Sealed() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.sealed
}

// TruncateTo removes every entry whose offset is >= offset. Truncating to
// an offset above the last entry's removes nothing (Kafka's truncateTo). It
// is allowed on a sealed index.
func (x *file) TruncateTo(offset int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return x.err
	}
	var keep int
	switch {
	case offset <= x.base:
		keep = 0
	case offset-x.base > math.MaxInt32:
		keep = x.entries
	default:
		rel := uint32(offset - x.base)
		keep = sort.Search(x.entries, func(i int) bool { return x.relAt(i) >= rel })
	}
	return x.truncateToEntries(keep)
}

// truncateToEntries drops the entries from n on. It cuts the file after
// entry n and grows it back rather than write zeros over the dropped
// slots: that needs no space on any file system, and the slots read as
// zeros, so that a later Open does not take them for valid ones.
func (x *file) truncateToEntries(n int) error {
	if n == x.entries {
		return nil
	}
	length := len(x.buf)
	x.entries = n
	if err := x.remap(n*x.size, x.rw); err != nil {
		return err
	}
	return x.remap(length, x.rw)
}

// Reset removes every entry and makes the index active again, for a rebuild
// from the log (Kafka's reset).
func (x *file) Reset() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return x.err
	}
	x.entries = 0
	if err := x.remap(0, x.rw); err != nil { // as truncateToEntries does
		return err
	}
	return x.unsealLocked()
}

// Seal trims the file to its entries and makes the index read-only, as
// when its segment rolls or is recovered (Kafka's trimToValidSize). Sealing
// a sealed index trims a zero tail it may have been opened with.
func (x *file) Seal() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return x.err
	}
	if err := x.remap(x.entries*x.size, false); err != nil {
		return err
	}
	x.sealed = true
	return nil
}

// Unseal makes a sealed index active again, its file grown back to the
// maximum size given to Open, as when a truncation makes its segment the
// active one (Kafka's resize(maxIndexSize)).
func (x *file) Unseal() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return x.err
	}
	return x.unsealLocked()
}

func (x *file) unsealLocked() error {
	if err := x.remap(max(x.maxBytes, x.entries*x.size), true); err != nil {
		return err
	}
	x.sealed = false
	return nil
}

// Sync makes the entries and the file's length durable.
func (x *file) Sync() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.err != nil {
		return x.err
	}
	return x.f.Sync()
}

// Rename renames the index file, which may stay open and mapped, as the
// segment does with its .deleted, .cleaned and .swap suffixes.
func (x *file) Rename(newName string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return x.err
	}
	if err := x.fs.Rename(x.name, newName); err != nil {
		return err
	}
	x.name = newName
	return nil
}

// Close unmaps and closes the file as it is; it does not trim it (Seal
// does). Later calls fail with ErrClosed.
func (x *file) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.f == nil {
		return fmt.Errorf("%w: %s", ErrClosed, x.name)
	}
	err := errors.Join(x.unmap(), x.f.Close())
	x.f, x.entries = nil, 0
	x.err = fmt.Errorf("%w: %s", ErrClosed, x.name)
	return err
}
