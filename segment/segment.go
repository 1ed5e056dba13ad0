package segment

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/strandlog/strand/index"
	"github.com/strandlog/strand/vfs"
)

// File name suffixes of a segment's files, as Kafka names them.
const (
	LogSuffix       = ".log"
	IndexSuffix     = ".index"
	TimeIndexSuffix = ".timeindex"
)

// Defaults for Options, Kafka's index.interval.bytes and
// segment.index.bytes.
const (
	DefaultIndexIntervalBytes = 4096
	DefaultMaxIndexBytes      = 10 << 20
)

// Errors returned by a Segment, besides the batch errors above.
var (
	// ErrSegmentFull means a batch does not fit: positions are int32 in
	// Kafka's index format, so a segment stays below 2 GiB, and relative
	// offsets are int32 too. The log rolls a new segment before this.
	ErrSegmentFull = errors.New("segment: segment full")

	// ErrOffsetOrder means an appended batch does not start after the last
	// one, or starts below the segment's base offset.
	ErrOffsetOrder = errors.New("segment: offset out of order")

	// ErrOffsetNotFound means no batch in the segment holds the offset.
	ErrOffsetNotFound = errors.New("segment: offset not in segment")

	// ErrClosed means the segment was closed.
	ErrClosed = errors.New("segment: segment closed")
)

// Options configure a segment. The zero value means Kafka's defaults on
// the operating system's file system.
type Options struct {
	// FS is the file system; default the operating system's.
	FS vfs.FS

	// IndexIntervalBytes is how many bytes of batches are appended between
	// two index entries (Kafka's index.interval.bytes, default 4096).
	IndexIntervalBytes int
	// MaxIndexBytes is the size each index file is preallocated to while
	// its segment is active (Kafka's segment.index.bytes, default 10 MiB).
	MaxIndexBytes int

	// Lazy makes Open defer opening the indexes and reading the log's tail
	// to the first call that needs them, as Kafka's LazyIndex does, so that
	// opening a log of many segments opens little more than their .log
	// files. An error found then is returned by that call, and by every
	// later one that can return an error.
	Lazy bool

	// Suffix is appended to the names of the segment's files, so that a
	// segment can be built beside the one it replaces: log compaction
	// writes "<base>.log.cleaned" (Kafka's temporary suffixes). Rename
	// changes it. Default none.
	Suffix string

	// CheckBatch, if set, is called with the header of every batch that
	// the segment walks (Open's tail, Recover, Read, FindOffset,
	// FindTimestamp) once the segment's own checks of the fields outside
	// the CRC passed (see Read): a log checks the partition leader
	// epoch against its epoch cache there. An error it returns is
	// corruption, reported wrapping ErrCorrupt with the file and position.
	CheckBatch func(header Batch) error
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.IndexIntervalBytes <= 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.MaxIndexBytes <= 0 {
		o.MaxIndexBytes = DefaultMaxIndexBytes
	}
	return o
}

// FileName returns the name of a segment file in dir: the base offset
// zero-padded to 20 digits, so that ls sorts segments by offset, then the
// suffix.
func FileName(dir string, baseOffset int64, suffix string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", baseOffset, suffix))
}

// Segment is one segment of a partition log: a .log file of record batches,
// its sparse offset index (.index) and its time index (.timeindex).
//
// One goroutine at a time may change a segment (Append, TruncateTo, Seal,
// Unseal, Rename, Close); reads (Read, FindOffset, FindTimestamp and the
// accessors) may run concurrently with Append and with each other. A read
// sees every batch whose Append returned before the read began.
type Segment struct {
	fs   vfs.FS
	dir  string
	base int64
	opts Options

	log     vfs.File
	logPath atomic.Pointer[string] // changed by Rename while readers use it
	suffix  string                 // after each file's name: Options.Suffix, then Rename's
	offsets *index.OffsetIndex
	times   *index.TimeIndex

	size       atomic.Int64 // bytes of whole batches in the log file
	checked    atomic.Int64 // bytes from the start whose headers passed a walk, or were appended here
	nextOffset atomic.Int64 // offset after the last batch; base if empty

	maxTimestamp      atomic.Int64 // largest batch max timestamp so far, -1 if none
	firstBatchMaxTime atomic.Int64 // max timestamp of the first batch, -1 if empty

	// Written and read by the one writer only.
	offsetOfMaxTime int64 // last offset of the batch with maxTimestamp
	sinceIndexEntry int   // bytes appended since the last index entry

	// A lazily opened segment loads its indexes and tail on first use;
	// lazyMu also orders that load with Rename and Close.
	lazyMu  sync.Mutex
	pending atomic.Bool // not loaded yet
	lazyErr error       // why the load failed

	closeOnce sync.Once
}

// Create creates an empty active segment with base offset base in dir,
// replacing any files of that name. The caller syncs dir to make the new
// names durable.
func Create(dir string, base int64, opts Options) (*Segment, error) {
	opts = opts.withDefaults()
	fs := opts.FS
	s := newSegment(dir, base, opts)
	var err error
	if s.log, err = fs.Create(s.logName()); err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", s.logName(), err)
	}
	for _, name := range []string{s.fileName(IndexSuffix), s.fileName(TimeIndexSuffix)} {
		if err := fs.Remove(name); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return nil, errors.Join(err, s.log.Close())
		}
	}
	if err := s.openIndexes(true); err != nil {
		return nil, errors.Join(err, s.log.Close())
	}
	return s, nil
}

// Open opens an existing segment whose log can be trusted: one written
// before a clean shutdown or below the recovery point. Its indexes are
// checked and rebuilt from the log if they do not pass. The segment is
// opened sealed; Unseal makes it the active one.
//
// Open reads the log only from its last index entry to find the next
// offset; a framing error there, or a header that fails the checks of the
// fields outside the CRC (see Read), is returned, wrapping ErrCorrupt,
// with the file and position.
//
// With Options.Lazy, Open opens only the log file and leaves the rest to
// the first call that needs it.
func Open(dir string, base int64, opts Options) (*Segment, error) {
	s, err := openLog(dir, base, opts)
	if err != nil {
		return nil, err
	}
	if s.opts.Lazy {
		s.pending.Store(true)
		return s, nil
	}
	if err := s.loadTrusted(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// loadTrusted opens the indexes of a trusted segment, rebuilding them if
// they fail their checks or do not match the log, and reads the log's
// tail.
func (s *Segment) loadTrusted() error {
	err := s.openIndexes(false)
	if err == nil {
		if err = s.loadTail(); !errors.Is(err, errStaleIndex) {
			return err
		}
	} else if !errors.Is(err, index.ErrCorrupt) && !errors.Is(err, iofs.ErrNotExist) {
		return err
	}
	return errors.Join(s.rebuild(false, 0), s.seal())
}

// load finishes a lazy Open; it does nothing on a loaded segment.
func (s *Segment) load() error {
	if !s.pending.Load() {
		return nil
	}
	s.lazyMu.Lock()
	defer s.lazyMu.Unlock()
	if !s.pending.Load() {
		return nil
	}
	if s.lazyErr == nil {
		if s.lazyErr = s.loadTrusted(); s.lazyErr == nil {
			s.pending.Store(false)
		}
	}
	return s.lazyErr
}

// Recover opens a segment whose log cannot be trusted, after an unclean
// shutdown: it validates every batch, truncates the log at the first batch
// that is short, corrupt, out of order or whose leader epoch goes
// backwards (or that Options.CheckBatch refuses), and rebuilds both
// indexes. It returns the number of bytes truncated. The segment is opened
// active.
//
// Offsets below durable were synced before the crash, so a bad batch
// holding them is corruption, not a torn write: Recover then truncates
// nothing and returns an error wrapping ErrCorrupt that names the file and
// position. Pass the segment's base offset to treat every batch as torn,
// and math.MaxInt64 for a segment synced whole (one its log rolled past),
// whose every bad batch is corruption.
func Recover(dir string, base int64, opts Options, durable int64) (s *Segment, truncated int64, err error) {
	s, err = openLog(dir, base, opts)
	if err != nil {
		return nil, 0, err
	}
	for _, suffix := range []string{IndexSuffix, TimeIndexSuffix} {
		if err := s.fs.Remove(s.fileName(suffix)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return nil, 0, errors.Join(err, s.Close())
		}
	}
	if err := s.openIndexes(true); err != nil {
		return nil, 0, errors.Join(err, s.Close())
	}
	fileSize := s.size.Load()
	if err := s.rebuild(true, durable); err != nil {
		return nil, 0, errors.Join(err, s.Close())
	}
	return s, fileSize - s.size.Load(), nil
}

func (s *Segment) logName() string        { return *s.logPath.Load() }
func (s *Segment) setLogName(name string) { s.logPath.Store(&name) }

func newSegment(dir string, base int64, opts Options) *Segment {
	s := &Segment{
		fs: opts.FS, dir: dir, base: base, opts: opts, suffix: opts.Suffix,
		offsetOfMaxTime: -1,
	}
	s.setLogName(s.fileName(LogSuffix))
	s.nextOffset.Store(base)
	s.maxTimestamp.Store(-1)
	s.firstBatchMaxTime.Store(-1)
	return s
}

// fileName returns the name of one of the segment's files: kind is
// LogSuffix, IndexSuffix or TimeIndexSuffix.
func (s *Segment) fileName(kind string) string { return FileName(s.dir, s.base, kind) + s.suffix }

func openLog(dir string, base int64, opts Options) (*Segment, error) {
	s := newSegment(dir, base, opts.withDefaults())
	// A FIFO or device in a segment's place is not a segment, and opening
	// one may block or have effects: its type is checked first, then again
	// on what was opened.
	fi, err := s.fs.Stat(s.logName())
	if err == nil {
		err = checkRegular(s.logName(), fi)
	}
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", s.logName(), err)
	}
	if s.log, err = s.fs.OpenReadWrite(s.logName()); err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", s.logName(), err)
	}
	if fi, err = s.log.Stat(); err == nil {
		err = checkRegular(s.logName(), fi)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("segment: stat %s: %w", s.logName(), err), s.log.Close())
	}
	if fi.Size() > math.MaxInt32 {
		return nil, errors.Join(fmt.Errorf("%w: %s is %d bytes, more than 2^31-1", ErrCorrupt, s.logName(), fi.Size()), s.log.Close())
	}
	s.size.Store(fi.Size())
	return s, nil
}

// checkRegular returns an error wrapping ErrCorrupt unless fi is a regular
// file's.
func checkRegular(name string, fi iofs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (mode %s)", ErrCorrupt, name, fi.Mode())
	}
	return nil
}

func (s *Segment) openIndexes(active bool) error {
	var err error
	s.offsets, err = index.OpenOffset(s.fs, s.fileName(IndexSuffix), s.base, s.opts.MaxIndexBytes, active)
	if err != nil {
		return err
	}
	s.times, err = index.OpenTime(s.fs, s.fileName(TimeIndexSuffix), s.base, s.opts.MaxIndexBytes, active)
	if err != nil {
		err = errors.Join(err, s.offsets.Close())
		s.offsets = nil
		return err
	}
	return nil
}

// rebuild scans the log from the start, checking framing and offsets (and
// CRCs if validate), and rebuilds both indexes. With validate, it truncates
// the log at the first bad batch unless that batch holds offsets below
// durable; without, a bad batch is an error.
func (s *Segment) rebuild(validate bool, durable int64) error {
	if s.offsets == nil {
		for _, suffix := range []string{IndexSuffix, TimeIndexSuffix} {
			if err := s.fs.Remove(s.fileName(suffix)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				return err
			}
		}
		if err := s.openIndexes(true); err != nil {
			return err
		}
	} else if err := errors.Join(s.offsets.Reset(), s.times.Reset()); err != nil {
		return err
	}
	end := s.size.Load()
	s.size.Store(0)
	s.checked.Store(0)
	s.nextOffset.Store(s.base)
	s.resetTimestamps()
	s.sinceIndexEntry = 0

	sc := newScanner(s.log, s.logName(), 0, end, scanChunk)
	w := s.walk(index.OffsetPosition{Offset: s.base})
	before := int64(-1) // the position of the last good batch
	for {
		pos := sc.pos
		b, err := sc.next(validate)
		if err == io.EOF {
			break
		}
		if err == nil && validate {
			err = b.Validate()
		}
		if err == nil {
			err = w.step(b)
		}
		if err != nil {
			// Without validate the log is trusted whole: a short batch in
			// it is corruption too, as below the durable offset.
			if !errors.Is(err, ErrCorrupt) && (!validate || s.nextOffset.Load() < durable) {
				err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			if !validate {
				return positionError(sc.name, pos, before, err)
			}
			if next := s.nextOffset.Load(); next < durable {
				if durable == math.MaxInt64 {
					return positionError(sc.name, pos, before, fmt.Errorf("the segment was synced whole, so it has no torn tail: %w", err))
				}
				return positionError(sc.name, pos, before, fmt.Errorf("offset %d is below the durable offset %d: %w", next, durable, err))
			}
			if err := s.log.Truncate(pos); err != nil {
				return fmt.Errorf("segment: truncate %s to %d: %w", s.logName(), pos, err)
			}
			break
		}
		if err := s.indexBatch(b, pos); err != nil {
			return err
		}
		s.size.Store(pos + int64(b.Size()))
		before = pos
	}
	s.checked.Store(s.size.Load())
	return nil
}

// walked records that the headers from position from to to passed a walk:
// if the checked prefix reaches from, it reaches to now.
func (s *Segment) walked(from, to int64) {
	for {
		c := s.checked.Load()
		if from > c || to <= c || s.checked.CompareAndSwap(c, to) {
			return
		}
	}
}

// errStaleIndex means an index entry points past the log or at a batch
// that does not hold its offset: the log was cut or rewritten after the
// index was written, so the index is rebuilt from the log.
var errStaleIndex = errors.New("segment: index does not match the log")

// loadTail finds the next offset and the largest timestamp of a segment
// whose indexes passed their check, reading batch headers from the last
// offset index entry (Kafka's LogSegment.readNextOffset). The data decides
// the next offset, never the index: an entry that the log does not bear
// out is errStaleIndex.
func (s *Segment) loadTail() error {
	t := s.times.LastEntry()
	if t.Timestamp >= 0 {
		s.setMaxTimestamp(t.Timestamp, t.Offset)
	}
	next, err := s.scanTail(s.offsets.LastEntry(), func(b Batch) {
		// The time index has an entry for the batches up to the last
		// offset index entry; the ones after it are scanned here.
		s.setMaxTimestamp(b.MaxTimestamp(), b.LastOffset())
	})
	if err != nil {
		return err
	}
	if t.Timestamp >= 0 && t.Offset >= next {
		return fmt.Errorf("%w: %s: entry for offset %d, the log ends at offset %d",
			errStaleIndex, s.fileName(TimeIndexSuffix), t.Offset, next)
	}
	s.nextOffset.Store(next)
	if s.size.Load() > 0 {
		first, err := s.lookup(0, s.size.Load()).next(false)
		if err != nil {
			return positionError(s.logName(), 0, -1, err)
		}
		s.firstBatchMaxTime.Store(first.MaxTimestamp())
	}
	return nil
}

// scanTail reads the batch headers of a trusted log from the offset index
// entry last to the end, calling each (if not nil) with every batch, and
// returns the offset after the last batch. The entry must point at a batch
// whose last offset is the entry's, or scanTail returns errStaleIndex. A
// batch that cannot be framed is corruption: the log was trusted whole.
func (s *Segment) scanTail(last index.OffsetPosition, each func(Batch)) (int64, error) {
	next := s.base
	sc := s.lookup(int64(last.Position), s.size.Load())
	w := s.walk(index.OffsetPosition{Offset: s.base}) // the entry is checked here, as a hint
	for first := last.Position > 0; ; first = false {
		pos := sc.pos
		b, err := sc.next(false)
		if first && (err != nil || b.LastOffset() != last.Offset) {
			return 0, fmt.Errorf("%w: %s: entry for offset %d at position %d, the log is %d bytes",
				errStaleIndex, s.fileName(IndexSuffix), last.Offset, last.Position, s.size.Load())
		}
		if err == io.EOF {
			return next, nil
		}
		if err == nil {
			err = w.step(b)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			return 0, sc.wrap(pos, err)
		}
		next = b.LastOffset() + 1
		if each != nil {
			each(b)
		}
	}
}

// ReadNextOffset returns the offset after the segment's last batch. On a
// lazily opened segment that is not loaded yet it reads the log's tail from
// the last offset index entry without loading the indexes or keeping them
// open, so that a log can check that its segments follow each other and
// still hold little more than their .log files open. A bad framing is
// reported wrapping ErrCorrupt, with the file and position.
func (s *Segment) ReadNextOffset() (int64, error) {
	s.lazyMu.Lock()
	defer s.lazyMu.Unlock()
	switch {
	case s.lazyErr != nil:
		return 0, s.lazyErr
	case !s.pending.Load():
		return s.nextOffset.Load(), nil
	}
	// The index's last entry is only a hint here, which scanTail checks
	// against the log; a missing, bad or stale index is rebuilt when the
	// segment loads, and until then the log is read from its start.
	last, err := index.LastOffsetEntry(s.fs, s.fileName(IndexSuffix), s.base)
	switch {
	case errors.Is(err, index.ErrCorrupt) || errors.Is(err, iofs.ErrNotExist):
		last = index.OffsetPosition{Offset: s.base}
	case err != nil:
		return 0, err
	}
	next, err := s.scanTail(last, nil)
	if errors.Is(err, errStaleIndex) {
		next, err = s.scanTail(index.OffsetPosition{Offset: s.base}, nil)
	}
	return next, err
}

// headerWalk checks, batch after batch, the header fields of a scan that
// a batch's CRC does not cover: Kafka's CRC-32C covers the attributes to
// the end (DefaultRecordBatch), not the base offset, the length or the
// partition leader epoch, so a bit flipped in one of them passes
// Validate. Each base offset must follow the batch before (and a batch
// found through an offset index entry must end at the entry's offset),
// each batch must fit the segment's offset range, and the leader epochs
// must not go backwards (Kafka's leader epoch rules, KIP-101); then
// Options.CheckBatch has its say. A wrong length makes the next header
// wrong, or the last batch end off the file's end, which the scanner
// reports. Open checks the headers it reads (the tail from the last
// offset index entry), Recover every batch, and a read those it returns
// and the next one, but for those already checked (see Read).
type headerWalk struct {
	s     *Segment
	next  int64 // the lowest base offset the next batch may have
	entry int64 // the last offset the next batch must have, or -1
	epoch int32 // the largest leader epoch so far
}

// noEpoch is the partition leader epoch of a batch written without one
// (Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH).
const noEpoch = -1

// walk returns a headerWalk that starts at the batch that index entry e
// points at: one that ends at e.Offset, unless e is the start of the
// segment.
func (s *Segment) walk(e index.OffsetPosition) headerWalk {
	w := headerWalk{s: s, next: s.base, entry: -1, epoch: noEpoch}
	if e.Position > 0 {
		w.entry = e.Offset
	}
	return w
}

// step checks batch header b, the next one of the walk; an error wraps
// ErrCorrupt.
func (w *headerWalk) step(b Batch) error {
	base, last, epoch := b.BaseOffset(), b.LastOffset(), b.PartitionLeaderEpoch()
	var err error
	switch {
	case base < w.next:
		err = fmt.Errorf("%w: base offset %d does not follow the batch before, which ends at offset %d", ErrCorrupt, base, w.next-1)
	case b.LastOffsetDelta() < 0 || last-w.s.base > math.MaxInt32:
		err = fmt.Errorf("%w: batch at base offset %d ends at offset %d, outside the segment based at %d", ErrCorrupt, base, last, w.s.base)
	case w.entry >= 0 && last != w.entry:
		err = fmt.Errorf("%w: batch at base offset %d ends at offset %d, the offset index says %d", ErrCorrupt, base, last, w.entry)
	case epoch < noEpoch:
		err = fmt.Errorf("%w: batch at base offset %d has leader epoch %d", ErrCorrupt, base, epoch)
	case epoch < w.epoch:
		err = fmt.Errorf("%w: batch at base offset %d has leader epoch %d, after a batch of epoch %d", ErrCorrupt, base, epoch, w.epoch)
	case w.s.opts.CheckBatch != nil:
		if cerr := w.s.opts.CheckBatch(b); cerr != nil {
			err = fmt.Errorf("%w: batch at base offset %d: %w", ErrCorrupt, base, cerr)
		}
	}
	if err != nil {
		return err
	}
	w.next, w.entry, w.epoch = last+1, -1, max(w.epoch, epoch)
	return nil
}

// checkFollows checks that b can follow, in a segment based at base, a
// batch that ended before offset next.
func checkFollows(b Batch, next, base int64) error {
	switch {
	case b.BaseOffset() < next:
		return fmt.Errorf("%w: batch at base offset %d, expected at least %d", ErrOffsetOrder, b.BaseOffset(), next)
	case b.LastOffset() < b.BaseOffset() || b.LastOffset()-base > math.MaxInt32:
		return fmt.Errorf("%w: batch with last offset %d does not fit a segment based at %d", ErrSegmentFull, b.LastOffset(), base)
	}
	return nil
}

// indexBatch updates the indexes and the timestamps for the batch b just
// written at pos, by Kafka's LogSegment.append rule: an index entry maps
// the batch's last offset to its start once more than IndexIntervalBytes
// were appended since the last entry. If an index write fails (a full
// disk), nothing changes: the entry written to the other index is removed.
func (s *Segment) indexBatch(b Batch, pos int64) error {
	maxTime, offsetOfMaxTime := s.maxTimestamp.Load(), s.offsetOfMaxTime
	if b.MaxTimestamp() > maxTime {
		maxTime, offsetOfMaxTime = b.MaxTimestamp(), b.LastOffset()
	}
	if s.sinceIndexEntry > s.opts.IndexIntervalBytes {
		if err := s.offsets.Append(b.LastOffset(), uint32(pos)); err != nil {
			return err
		}
		if err := s.times.MaybeAppend(maxTime, offsetOfMaxTime, false); err != nil {
			return errors.Join(err, s.offsets.TruncateTo(b.LastOffset()))
		}
		s.sinceIndexEntry = 0
	}
	if s.firstBatchMaxTime.Load() < 0 {
		s.firstBatchMaxTime.Store(b.MaxTimestamp())
	}
	s.setMaxTimestamp(b.MaxTimestamp(), b.LastOffset())
	s.sinceIndexEntry += b.Size()
	s.nextOffset.Store(b.LastOffset() + 1)
	return nil
}

// Append writes one whole batch at the end of the segment. The batch must
// carry its final offsets: its base offset at or after NextOffset. Append
// does not sync. If the write fails, the segment is left as it was before.
func (s *Segment) Append(b Batch) error {
	_, err := s.AppendBatches([]Batch{b}, b)
	return err
}

// AppendBatches writes batches bs, one after the other, at the end of the
// segment with one write of buf, which must hold exactly their bytes in
// order: a log appends the small batches of concurrent appenders so, one
// system call for them all. Each batch must follow the one before it as
// Append requires, and a reader sees none of them before the write is
// done.
//
// It returns how many batches were appended, from the first. If it is not
// all of them, the error says why the next one was not (its offsets, the
// segment's limits, a failed write or index update), and the segment ends
// after the last one appended, as if Append had been called for each and
// had failed at that batch.
func (s *Segment) AppendBatches(bs []Batch, buf []byte) (int, error) {
	if err := s.load(); err != nil {
		return 0, err
	}
	pos := s.size.Load()
	// The batches in order are written; the first out of order is the
	// error, after them.
	n, size, next := 0, 0, s.nextOffset.Load()
	var orderErr error
	for _, b := range bs {
		if orderErr = checkFollows(b, next, s.base); orderErr != nil {
			orderErr = fmt.Errorf("segment %s: %w", s.logName(), orderErr)
			break
		}
		n, size, next = n+1, size+len(b), b.LastOffset()+1
	}
	if n == 0 {
		return 0, orderErr
	}
	if pos+int64(size) > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s: %d bytes and %d more exceed 2^31-1", ErrSegmentFull, s.logName(), pos, size)
	}
	if s.offsets.IsFull() || s.times.IsFull() {
		return 0, fmt.Errorf("%w: %s: index full", ErrSegmentFull, s.logName())
	}
	if _, err := s.log.WriteAt(buf[:size], pos); err != nil {
		// Whatever part was written lies past size and is overwritten by
		// the next append, cut by recovery, or cut here.
		return 0, errors.Join(fmt.Errorf("segment: write %s at %d: %w", s.logName(), pos, err), s.log.Truncate(pos))
	}
	end := pos
	for i, b := range bs[:n] {
		var err error
		if i > 0 && (s.offsets.IsFull() || s.times.IsFull()) {
			err = fmt.Errorf("%w: %s: index full", ErrSegmentFull, s.logName())
		} else if err = s.indexBatch(b, end); err != nil {
			err = fmt.Errorf("segment %s: index batch at %d: %w", s.logName(), end, err)
		}
		if err != nil {
			// This batch and the ones after it are whole in the file but
			// not in the segment: cut them, or a clean reopen would find
			// them.
			s.size.Store(end)
			s.walked(pos, end)
			return i, errors.Join(err, s.log.Truncate(end))
		}
		end += int64(len(b))
	}
	s.size.Store(end)
	s.walked(pos, end) // checkFollows checked them
	return n, orderErr
}

// BaseOffset returns the offset of the segment's first batch, or the one
// it was created for.
func (s *Segment) BaseOffset() int64 { return s.base }

// NextOffset returns the offset after the segment's last batch. Like the
// accessors below, it loads a lazily opened segment first.
func (s *Segment) NextOffset() int64 {
	s.load() // a failed load is reported by the calls that return errors
	return s.nextOffset.Load()
}

// Size returns the size of the segment's log in bytes.
func (s *Segment) Size() int64 {
	s.load()
	return s.size.Load()
}

// MaxTimestamp returns the largest batch timestamp in the segment, or -1
// if it has none. Retention by age compares it to the clock.
func (s *Segment) MaxTimestamp() int64 {
	s.load()
	return s.maxTimestamp.Load()
}

func (s *Segment) setMaxTimestamp(ts, offset int64) {
	if ts > s.maxTimestamp.Load() {
		s.maxTimestamp.Store(ts)
		s.offsetOfMaxTime = offset
	}
}

func (s *Segment) resetTimestamps() {
	s.maxTimestamp.Store(-1)
	s.firstBatchMaxTime.Store(-1)
	s.offsetOfMaxTime = -1
}

// FirstBatchTimestamp returns the max timestamp of the segment's first
// batch, or -1 if the segment is empty. The log rolls by age from it.
func (s *Segment) FirstBatchTimestamp() int64 {
	s.load()
	return s.firstBatchMaxTime.Load()
}

// OpenFiles returns how many files the segment holds open: the log alone
// until a lazily opened segment is loaded, then the indexes too.
func (s *Segment) OpenFiles() int {
	if s.pending.Load() {
		return 1
	}
	return 3
}

// IndexFull reports whether either index has no room left for an entry, in
// which case the log rolls a new segment.
func (s *Segment) IndexFull() bool {
	return s.load() == nil && (s.offsets.IsFull() || s.times.IsFull())
}

// Batch positions: find, read.

// FindOffset returns the position of the first batch whose last offset is
// at or after offset, and that batch's header. It returns ErrOffsetNotFound
// if every batch ends before offset.
func (s *Segment) FindOffset(offset int64) (pos int64, header Batch, err error) {
	if err := s.load(); err != nil {
		return 0, nil, err
	}
	return s.findOffset(offset, s.size.Load())
}

func (s *Segment) findOffset(offset, end int64) (int64, Batch, error) {
	pos, b, _, err := s.seek(offset, end)
	return pos, b, err
}

// seek finds the batch holding offset as FindOffset does, and returns the
// scanner that found it, past that batch.
func (s *Segment) seek(offset, end int64) (int64, Batch, *scanner, error) {
	sc := s.walkFrom(s.offsets.Lookup(offset), end)
	for {
		pos := sc.pos
		b, err := sc.nextHeader()
		if err == io.EOF {
			return 0, nil, nil, fmt.Errorf("%w: offset %d in %s (next offset %d)", ErrOffsetNotFound, offset, s.logName(), s.nextOffset.Load())
		}
		if err != nil {
			return 0, nil, nil, sc.wrap(pos, err)
		}
		if b.LastOffset() >= offset {
			return pos, b, sc, nil
		}
	}
}

// walkFrom returns a scanner for a lookup from index entry e to end that
// checks the headers it reads (see nextHeader).
func (s *Segment) walkFrom(e index.OffsetPosition, end int64) *scanner {
	sc := s.lookup(int64(e.Position), end)
	sc.walk = s.walk(e)
	return sc
}

// lookup returns a scanner from pos for a lookup that starts at an index
// entry: one read of an index interval and a header covers the batches up
// to the next entry, unless they are large.
func (s *Segment) lookup(pos, end int64) *scanner {
	return newScanner(s.log, s.logName(), pos, end, min(scanChunk, int64(s.opts.IndexIntervalBytes)+HeaderSize))
}

// Read returns the whole batches that start at the batch holding offset and
// end before maxOffset (exclusive), up to maxBytes; at least one batch is
// returned if the first one ends before maxOffset, even if it is larger
// than maxBytes, so that a reader always makes progress (Kafka's
// minOneMessage). An empty Slice means no batch qualifies.
//
// Read walks the header of every batch it returns, and of the one after,
// checking what the CRC does not cover: each base offset follows the batch
// before, within the segment's offsets, the batch found through an index
// entry ends at the entry's offset, and leader epochs do not go backwards
// (then Options.CheckBatch). A header that fails is an error wrapping
// ErrCorrupt naming the file and position: a damaged batch is never
// served. Only headers that passed such a walk before (in Recover, or in
// an earlier read from the start of the segment's checked part) or that
// this segment appended are skipped, through the offset index.
func (s *Segment) Read(offset, maxOffset int64, maxBytes int) (Slice, error) {
	if err := s.load(); err != nil {
		return Slice{}, err
	}
	end := s.size.Load()
	pos, first, sc, err := s.seek(offset, end)
	if err != nil {
		return Slice{}, err
	}
	defer sc.release() // the slice keeps no header it read
	sl := Slice{f: s.log, name: s.logName(), pos: pos}
	if first.LastOffset() >= maxOffset {
		return sl, nil
	}
	sl.n, sl.next = int64(first.Size()), first.LastOffset()+1
	limit := pos + int64(max(maxBytes, 0))
	// Every batch before an indexed one that starts by limit and ends
	// before maxOffset qualifies: skip to it rather than read each header,
	// if their headers passed a walk before (Options.CheckBatch), or were
	// appended here. An entry at or past end belongs to a batch being
	// appended.
	skipTo := s.offsets.LookupPosition(limit)
	if e := s.offsets.Lookup(maxOffset - 1); e.Position < skipTo.Position {
		skipTo = e
	}
	skipped := false
	if skip := int64(skipTo.Position); skip > sc.pos && skip < end && skip <= s.checked.Load() {
		// The scanner goes on from there with its buffer, reading headers
		// alone if the batches it saw were large.
		sc.pos, sc.walk.entry = skip, skipTo.Offset
		sl.n, skipped = skip-pos, true
	} else {
		sc.chunk = scanChunk // a walk over what the read returns
	}
	for {
		at := sc.pos
		b, err := sc.nextHeader()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Slice{}, sc.wrap(at, err)
		}
		if skipped {
			// The batches skipped end before this one begins: at most a
			// compaction gap above the true next offset, which bounds
			// what a read-committed reader looks up, never below it.
			sl.next, skipped = b.BaseOffset(), false
		}
		if b.LastOffset() >= maxOffset || at+int64(b.Size()) > limit {
			break
		}
		sl.n, sl.next = at+int64(b.Size())-pos, b.LastOffset()+1
	}
	s.walked(sc.from, sc.pos)
	return sl, nil
}

// FindTimestamp returns the offset of the first record whose timestamp is
// at or after ts, by Kafka's rule: the time index gives an offset at or
// before it, the offset index a position, and a scan finds the first batch
// whose max timestamp is at or after ts, whose records are then searched.
// ok is false if no record in the segment is that late.
func (s *Segment) FindTimestamp(ts int64) (offset int64, ok bool, err error) {
	if err := s.load(); err != nil {
		return 0, false, err
	}
	end := s.size.Load()
	from := s.times.Lookup(ts)
	sc := s.walkFrom(s.offsets.Lookup(from.Offset), end)
	for {
		pos := sc.pos
		h, err := sc.nextHeader()
		if err == io.EOF {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, sc.wrap(pos, err)
		}
		if h.MaxTimestamp() < ts {
			continue
		}
		whole, err := s.lookup(pos, end).next(true)
		if err == nil {
			err = whole.Validate()
		}
		if err != nil {
			return 0, false, positionError(s.logName(), pos, -1, err)
		}
		for r, err := range whole.Records() {
			if err != nil {
				return 0, false, positionError(s.logName(), pos, -1, err)
			}
			if r.Timestamp >= ts {
				return r.Offset, true, nil
			}
		}
		// LogAppendTime batches stamp one time on all records; the batch
		// qualifies as a whole.
		return h.BaseOffset(), true, nil
	}
}

// TruncateTo removes every batch at or after the one holding offset, so
// that NextOffset becomes at most offset. Kafka's LogSegment.truncateTo
// also drops the whole batch holding offset if offset falls inside it. It
// returns the number of bytes removed. A sealed segment is unsealed: after
// a truncation it is the active one.
func (s *Segment) TruncateTo(offset int64) (int64, error) {
	if err := s.load(); err != nil {
		return 0, err
	}
	size := s.size.Load()
	pos, _, err := s.FindOffset(offset)
	if errors.Is(err, ErrOffsetNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := s.offsets.TruncateTo(offset); err != nil {
		return 0, err
	}
	if err := s.times.TruncateTo(offset); err != nil {
		return 0, err
	}
	if err := s.log.Truncate(pos); err != nil {
		return 0, fmt.Errorf("segment: truncate %s to %d: %w", s.logName(), pos, err)
	}
	s.size.Store(pos)
	for c := s.checked.Load(); c > pos && !s.checked.CompareAndSwap(c, pos); c = s.checked.Load() {
	}
	if err := s.Unseal(); err != nil {
		return 0, err
	}
	// Recompute what the removed batches may have contributed.
	if err := s.rebuildTailState(); err != nil {
		return 0, err
	}
	return size - pos, nil
}

func (s *Segment) rebuildTailState() error {
	s.nextOffset.Store(s.base)
	s.resetTimestamps()
	if err := s.loadTail(); err != nil {
		return err
	}
	// Kafka resets the interval after a truncation; the next append is
	// indexed once IndexIntervalBytes more bytes have gone by.
	s.sinceIndexEntry = 0
	return nil
}

// Sync makes the log and both indexes durable.
func (s *Segment) Sync() error {
	if err := s.load(); err != nil {
		return err
	}
	if err := s.log.Sync(); err != nil {
		return fmt.Errorf("segment: sync %s: %w", s.logName(), err)
	}
	return errors.Join(s.offsets.Sync(), s.times.Sync())
}

// SyncLog makes the log durable, not the indexes: they are rebuilt from
// the log after an unclean shutdown. This is the append path's fsync.
func (s *Segment) SyncLog() error {
	if err := s.log.Sync(); err != nil {
		return fmt.Errorf("segment: sync %s: %w", s.logName(), err)
	}
	return nil
}

// Seal makes the segment read-only, as when the log rolls past it: the
// time index gets its final entry (the largest timestamp, which retention
// reads) and both index files are trimmed to their entries. It does not
// sync.
func (s *Segment) Seal() error {
	if err := s.load(); err != nil {
		return err
	}
	return s.seal()
}

// seal may run again on a sealed segment, when the roll that sealed it
// could not create the next one (a full disk): the roll entry is in.
func (s *Segment) seal() error {
	if ts := s.maxTimestamp.Load(); ts >= 0 && !s.times.Sealed() {
		if err := s.times.MaybeAppend(ts, s.offsetOfMaxTime, true); err != nil {
			return err
		}
	}
	return errors.Join(s.offsets.Seal(), s.times.Seal())
}

// Unseal makes a sealed segment active again: its indexes are grown back
// to their preallocated size.
func (s *Segment) Unseal() error {
	if err := s.load(); err != nil {
		return err
	}
	return errors.Join(s.offsets.Unseal(), s.times.Unseal())
}

// Rename renames the segment's files by replacing the base offset and
// suffix naming with suffix appended (".deleted", ".swap", ...), keeping
// them open. Rename("") restores the plain names.
func (s *Segment) Rename(suffix string) error {
	s.lazyMu.Lock()
	defer s.lazyMu.Unlock()
	logName := FileName(s.dir, s.base, LogSuffix) + suffix
	if err := s.fs.Rename(s.logName(), logName); err != nil {
		return err
	}
	oldIndex, oldTime := s.fileName(IndexSuffix), s.fileName(TimeIndexSuffix)
	s.setLogName(logName)
	s.suffix = suffix
	if s.pending.Load() { // never loaded: the index files are closed
		var errs []error
		for _, r := range [][2]string{{oldIndex, s.fileName(IndexSuffix)}, {oldTime, s.fileName(TimeIndexSuffix)}} {
			if err := s.fs.Rename(r[0], r[1]); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return errors.Join(
		s.offsets.Rename(s.fileName(IndexSuffix)),
		s.times.Rename(s.fileName(TimeIndexSuffix)),
	)
}

// Close closes the segment's files without syncing or sealing them.
func (s *Segment) Close() error {
	err := ErrClosed
	s.closeOnce.Do(func() {
		s.lazyMu.Lock()
		defer s.lazyMu.Unlock()
		err = s.log.Close()
		if s.offsets != nil {
			err = errors.Join(err, s.offsets.Close(), s.times.Close())
		}
		// A load after Close fails rather than open the indexes again.
		s.lazyErr = cmp.Or(s.lazyErr, error(fmt.Errorf("%w: %s", ErrClosed, s.logName())))
	})
	return err
}

// Remove closes the segment and removes its files.
func (s *Segment) Remove() error {
	err := s.Close()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	for _, name := range []string{s.logName(), s.fileName(IndexSuffix), s.fileName(TimeIndexSuffix)} {
		if rerr := s.fs.Remove(name); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}
