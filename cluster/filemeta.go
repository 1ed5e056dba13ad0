package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"math"
	"path/filepath"
	"sync"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/vfs"
)

// ErrMetadataCorrupt means a FileMetadata's files hold something no crash
// leaves: a bad frame followed by good ones, a gap between indexes, or a
// snapshot or term file that is not one whole frame. The message names the
// file and, in the log, the byte offset.
var ErrMetadataCorrupt = errors.New("cluster: metadata log corrupt")

// FileMetadata is a MetadataLog of one voter on a local file: the node that
// opens it leads, and an entry commits once it is synced, so that a single
// Strand node needs no consensus.
//
// Each open is a new term, one past the highest the directory holds, as a
// raft election would be. The first update carries the latest snapshot,
// the entries after it, and the node itself as the leader of the new term,
// Replayed. Propose appends an entry, syncs it and only then delivers it on
// the feed, which is an unbounded queue: Propose never waits for the
// reader of Updates. A write or sync that fails fails the log: it reports
// no leader on the feed and refuses every later Propose and Snapshot, and
// the node must reopen it, which reads whatever the failed write left.
//
// The directory, which the log owns, holds:
//
//	metadata.log       the entries after the snapshot, a frame each
//	metadata.snapshot  the latest snapshot: one frame of its index, term and state
//	metadata.term      the term of the latest open: one frame of index 0, no data
//	.lock              locked while the log is open
//
// A frame is a 4-byte little-endian length of its body, the 4-byte
// little-endian CRC-32C (Castagnoli) of the body, and the body: the uvarint
// term, the uvarint index, then the data. The snapshot and term files are
// replaced atomically (vfs.WriteFileAtomic), and so is the log when a
// snapshot compacts it. Every entry is synced before the next is written,
// so a crash can leave at most one frame torn, at the end of the log: open
// cuts the log after its last good frame, but a good frame past a bad one
// is damage no crash makes, and open fails with ErrMetadataCorrupt. The
// entries a snapshot holds that are still in the log (a crash between the
// snapshot's rename and the log's) are skipped, and the log compacted.
type FileMetadata struct {
	fs   vfs.FS
	dir  string
	self replica.NodeID
	lock io.Closer

	mu     sync.Mutex
	log    vfs.File
	size   int64            // bytes of good frames in the log file
	first  uint64           // index of the log file's first entry, or the next entry's if it has none
	pos    []entryPos       // the log file's entries, from first
	snap   MetadataSnapshot // the latest snapshot's index and term, not its state
	term   uint64           // the term this open leads
	failed error            // the write or sync that failed the log
	closed bool

	feed *feed[MetadataUpdate]
}

// entryPos is where an entry of the log file is, and its term, which a
// snapshot at its index takes.
type entryPos struct {
	off  int64
	term uint64
}

const (
	logFile      = "metadata.log"
	snapshotFile = "metadata.snapshot"
	termFile     = "metadata.term"
	lockFile     = ".lock"

	frameHeader = 8 // length and checksum
	// minFrame is the shortest frame: a header and one byte each for the
	// term and the index.
	minFrame = frameHeader + 2
	// maxData is the most data a frame's 4-byte length leaves room for.
	maxData = math.MaxUint32 - 2*binary.MaxVarintLen64
)

var (
	_ MetadataLog    = (*FileMetadata)(nil)
	_ MetadataVoters = (*FileMetadata)(nil)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenFileMetadata opens the metadata log of node self in dir on fs
// (vfs.Default if nil), creating dir if it is missing, and starts a new
// term that self leads. Damage no crash leaves fails it with an error
// matching ErrMetadataCorrupt; a directory another FileMetadata has open,
// with one matching vfs.ErrLocked.
func OpenFileMetadata(fs vfs.FS, dir string, self replica.NodeID) (*FileMetadata, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if err := vfs.MkdirAll(fs, dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: metadata log %s: %w", dir, err)
	}
	lock, err := fs.Lock(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log %s: %w", dir, err)
	}
	m := &FileMetadata{fs: fs, dir: dir, self: self, lock: lock}
	first, err := m.load()
	if err != nil {
		return nil, errors.Join(err, m.closeFiles())
	}
	m.feed = newMetadataFeed()
	m.feed.push(first)
	return m, nil
}

func (m *FileMetadata) path(file string) string { return filepath.Join(m.dir, file) }

// load reads the directory, cuts a torn tail off the log, finishes a
// compaction a crash interrupted and records the new term; it returns the
// first update.
func (m *FileMetadata) load() (MetadataUpdate, error) {
	var first MetadataUpdate
	snap, hasSnap, err := readFrameFile(m.fs, m.path(snapshotFile))
	if err != nil {
		return first, err
	}
	if hasSnap {
		// m.snap keeps no state: only the feed needs it.
		m.snap = MetadataSnapshot{Index: snap.index, Term: snap.term}
		first.Snapshot = &MetadataSnapshot{Index: snap.index, Term: snap.term, Data: snap.data}
	}
	term, _, err := readFrameFile(m.fs, m.path(termFile))
	if err != nil {
		return first, err
	}
	b, err := m.openLog()
	if err != nil {
		return first, err
	}
	name := m.path(logFile)
	entries, err := m.scan(name, b)
	if err != nil {
		return first, err
	}
	if m.size < int64(len(b)) {
		if err := m.log.Truncate(m.size); err != nil {
			return first, fmt.Errorf("cluster: metadata log %s: cut the torn tail at byte %d: %w", name, m.size, err)
		}
		if err := m.log.Sync(); err != nil {
			return first, fmt.Errorf("cluster: metadata log %s: sync: %w", name, err)
		}
	}
	m.term = max(term.term, m.snap.Term)
	if n := len(m.pos); n > 0 {
		m.term = max(m.term, m.pos[n-1].term)
	}
	m.term++
	if err := m.compact(m.snap.Index); err != nil {
		return first, err
	}
	if err := vfs.WriteFileAtomic(m.fs, m.path(termFile), appendFrame(nil, m.term, 0, nil)); err != nil {
		return first, fmt.Errorf("cluster: metadata log %s: record term %d: %w", m.dir, m.term, err)
	}
	for _, e := range entries {
		if e.Index > m.snap.Index {
			first.Entries = append(first.Entries, e)
		}
	}
	first.Leader, first.Term, first.Replayed = m.self, m.term, true
	return first, nil
}

// openLog opens the log file, creating it if it is missing, and returns
// its content.
func (m *FileMetadata) openLog() ([]byte, error) {
	name := m.path(logFile)
	f, err := m.fs.OpenReadWrite(name)
	if errors.Is(err, iofs.ErrNotExist) {
		if f, err = m.fs.Create(name); err == nil {
			m.log = f
			err = vfs.SyncDir(m.fs, m.dir)
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: metadata log %s: create: %w", name, err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log %s: open: %w", name, err)
	}
	m.log = f
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log %s: %w", name, err)
	}
	b, err := io.ReadAll(io.NewSectionReader(f, 0, fi.Size()))
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log %s: read: %w", name, err)
	}
	return b, nil
}

// scan reads the frames of b, the log file name, into m.first, m.pos and
// m.size, the length of its good frames, and returns their entries.
func (m *FileMetadata) scan(name string, b []byte) ([]MetadataEntry, error) {
	var entries []MetadataEntry
	m.first = m.snap.Index + 1
	off := 0
	for off < len(b) {
		f, n := decodeFrame(b[off:])
		if n == 0 || !f.intact() {
			last := m.snap.Index
			if len(entries) > 0 {
				last = entries[len(entries)-1].Index
			}
			if good := goodFrameAfter(b, off, last); good >= 0 {
				return nil, fmt.Errorf("%w: %s: bad frame at byte %d, but a good one at byte %d", ErrMetadataCorrupt, name, off, good)
			}
			break
		}
		switch {
		case len(entries) == 0 && (f.index == 0 || f.index > m.snap.Index+1):
			return nil, fmt.Errorf("%w: %s: the first entry, at byte %d, is %d, but the snapshot holds up to %d", ErrMetadataCorrupt, name, off, f.index, m.snap.Index)
		case len(entries) == 0:
			m.first = f.index
		case f.index != entries[len(entries)-1].Index+1:
			return nil, fmt.Errorf("%w: %s: entry %d at byte %d follows entry %d", ErrMetadataCorrupt, name, f.index, off, entries[len(entries)-1].Index)
		}
		entries = append(entries, MetadataEntry{Index: f.index, Term: f.term, Data: f.data})
		m.pos = append(m.pos, entryPos{off: int64(off), term: f.term})
		off += n
	}
	m.size = int64(off)
	return entries, nil
}

// goodFrameAfter returns the offset of a good frame past the bad one at
// off in b, or -1 if there is none and the bad frame is a torn tail. A
// frame after the bad one holds an index past last, the last good frame's
// (the snapshot's if none is good), and at most one more for every
// minFrame bytes past off: the bound spares checksumming most of a torn
// tail, and makes it unlikely that a frame held in an entry's data passes
// for one of the log's.
func goodFrameAfter(b []byte, off int, last uint64) int {
	for p := off + 1; p+minFrame <= len(b); p++ {
		f, n := decodeFrame(b[p:])
		if n > 0 && f.index > last && f.index-last <= 1+uint64(p-off)/minFrame && f.intact() {
			return p
		}
	}
	return -1
}

// Propose appends data as the next entry of term, syncs it and delivers
// it on the feed; it returns once the entry is synced. It returns an error
// matching ErrNotMetadataLeader if term is not the one this open leads, or
// if the log is closed or failed; one matching fs.ErrInvalid if data is
// too long for a frame (4 GiB less 20 bytes); and the error of the write or the sync that fails the log.
func (m *FileMetadata) Propose(term uint64, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("%w: metadata log %s is closed", ErrNotMetadataLeader, m.dir)
	case m.failed != nil:
		return fmt.Errorf("%w: metadata log %s failed: %w", ErrNotMetadataLeader, m.dir, m.failed)
	case term != m.term:
		return fmt.Errorf("%w: metadata log %s leads term %d, not %d", ErrNotMetadataLeader, m.dir, m.term, term)
	case uint64(len(data)) > maxData:
		return fmt.Errorf("cluster: metadata log %s: an entry of %d bytes, over the %d a frame holds: %w", m.dir, len(data), uint64(maxData), iofs.ErrInvalid)
	}
	index := m.first + uint64(len(m.pos))
	// The frame is never reused, so the entry on the feed can hold its
	// tail rather than another copy of data.
	b := appendFrame(make([]byte, 0, frameHeader+2*binary.MaxVarintLen64+len(data)), term, index, data)
	name := m.path(logFile)
	if _, err := m.log.WriteAt(b, m.size); err != nil {
		return m.fail(fmt.Errorf("cluster: metadata log %s: write entry %d at byte %d: %w", name, index, m.size, err))
	}
	if err := m.log.Sync(); err != nil {
		return m.fail(fmt.Errorf("cluster: metadata log %s: sync entry %d: %w", name, index, err))
	}
	m.pos = append(m.pos, entryPos{off: m.size, term: term})
	m.size += int64(len(b))
	m.feed.push(MetadataUpdate{
		Entries: []MetadataEntry{{Index: index, Term: term, Data: b[len(b)-len(data):]}},
		Leader:  m.self,
		Term:    term,
	})
	return nil
}

// fail records err as what failed the log and tells the feed that no one
// leads any more, since no entry can commit; it returns err.
func (m *FileMetadata) fail(err error) error {
	m.failed = err
	m.feed.push(MetadataUpdate{Leader: replica.NoNode, Term: m.term})
	return err
}

// Updates implements MetadataLog.
func (m *FileMetadata) Updates() <-chan MetadataUpdate { return m.feed.out }

// Voters implements MetadataVoters: the one node the log is for, so that
// its internal topics have one replica.
func (m *FileMetadata) Voters() []replica.NodeID { return []replica.NodeID{m.self} }

// Snapshot records data as the state once the entries up to index are
// applied, and drops those entries from the log file. index must lie
// between the last snapshot's and the last entry's, and data fit a frame
// (4 GiB less 20 bytes); otherwise the error matches fs.ErrInvalid. A write that fails fails the log, as in Propose.
func (m *FileMetadata) Snapshot(index uint64, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.first + uint64(len(m.pos)) - 1
	switch {
	case m.closed:
		return fmt.Errorf("cluster: metadata log %s: snapshot: %w", m.dir, iofs.ErrClosed)
	case m.failed != nil:
		return fmt.Errorf("cluster: metadata log %s: snapshot: the log failed: %w", m.dir, m.failed)
	case index < m.snap.Index || index > last:
		return fmt.Errorf("cluster: metadata log %s: snapshot at index %d, outside the last snapshot's %d to the last entry's %d: %w",
			m.dir, index, m.snap.Index, last, iofs.ErrInvalid)
	case uint64(len(data)) > maxData:
		return fmt.Errorf("cluster: metadata log %s: a snapshot of %d bytes, over the %d a frame holds: %w", m.dir, len(data), uint64(maxData), iofs.ErrInvalid)
	}
	term := m.snap.Term
	if index > m.snap.Index {
		term = m.pos[index-m.first].term
	}
	name := m.path(snapshotFile)
	if err := vfs.WriteFileAtomic(m.fs, name, appendFrame(nil, term, index, data)); err != nil {
		return m.fail(fmt.Errorf("cluster: metadata log %s: write the snapshot at index %d: %w", name, index, err))
	}
	m.snap = MetadataSnapshot{Index: index, Term: term}
	if err := m.compact(index); err != nil {
		return m.fail(err)
	}
	return nil
}

// compact replaces the log file with one that holds only the entries after
// index upTo, which a durable snapshot holds, so that the file does not
// grow without bound.
func (m *FileMetadata) compact(upTo uint64) error {
	if upTo < m.first {
		return nil
	}
	drop := min(upTo+1-m.first, uint64(len(m.pos)))
	m.first = upTo + 1
	if drop == 0 {
		return nil
	}
	base := m.size
	if drop < uint64(len(m.pos)) {
		base = m.pos[drop].off
	}
	name := m.path(logFile)
	kept, err := io.ReadAll(io.NewSectionReader(m.log, base, m.size-base))
	if err == nil {
		err = vfs.WriteFileAtomic(m.fs, name, kept)
	}
	if err != nil {
		return fmt.Errorf("cluster: metadata log %s: compact up to entry %d: %w", name, upTo, err)
	}
	// The old file is gone from the directory and everything in it was
	// synced: a failure to close it loses nothing.
	_ = m.log.Close()
	if m.log, err = m.fs.OpenReadWrite(name); err != nil {
		return fmt.Errorf("cluster: metadata log %s: reopen after compaction: %w", name, err)
	}
	rest := m.pos[drop:]
	m.pos = make([]entryPos, len(rest))
	for i, p := range rest {
		m.pos[i] = entryPos{off: p.off - base, term: p.term}
	}
	m.size -= base
	return nil
}

// Close stops the feed, closes the Updates channel and the files and
// releases the directory. Closing a closed log does nothing.
func (m *FileMetadata) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.feed.close()
	return m.closeFiles()
}

func (m *FileMetadata) closeFiles() error {
	var err error
	if m.log != nil {
		err = m.log.Close()
	}
	return errors.Join(err, m.lock.Close())
}

// frame is a decoded frame; body and sum are for intact.
type frame struct {
	term, index uint64
	data        []byte
	body        []byte
	sum         uint32
}

// appendFrame appends to b the frame of an entry (or a snapshot, or a
// term) and returns the extended slice.
func appendFrame(b []byte, term, index uint64, data []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b = binary.AppendUvarint(b, term)
	b = binary.AppendUvarint(b, index)
	b = append(b, data...)
	body := b[start+frameHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b
}

// decodeFrame decodes the frame at the start of b, without checking its
// checksum, and returns its length: 0 if b does not start with a whole
// frame.
func decodeFrame(b []byte) (frame, int) {
	if len(b) < frameHeader {
		return frame{}, 0
	}
	size := binary.LittleEndian.Uint32(b)
	if size < minFrame-frameHeader || uint64(size) > uint64(len(b)-frameHeader) {
		return frame{}, 0
	}
	body := b[frameHeader : frameHeader+int(size)]
	term, k := binary.Uvarint(body)
	if k <= 0 {
		return frame{}, 0
	}
	index, j := binary.Uvarint(body[k:])
	if j <= 0 {
		return frame{}, 0
	}
	f := frame{term: term, index: index, data: body[k+j:], body: body, sum: binary.LittleEndian.Uint32(b[4:])}
	return f, frameHeader + int(size)
}

func (f frame) intact() bool { return crc32.Checksum(f.body, castagnoli) == f.sum }

// readFrameFile reads name, a file that vfs.WriteFileAtomic wrote: one
// whole frame, or no file at all (ok false).
func readFrameFile(fs vfs.FS, name string) (f frame, ok bool, err error) {
	b, err := vfs.ReadFile(fs, name)
	if errors.Is(err, iofs.ErrNotExist) {
		return frame{}, false, nil
	}
	if err != nil {
		return frame{}, false, fmt.Errorf("cluster: metadata log %s: read: %w", name, err)
	}
	f, n := decodeFrame(b)
	if n == 0 || n != len(b) || !f.intact() {
		return frame{}, false, fmt.Errorf("%w: %s is not one whole frame (%d bytes)", ErrMetadataCorrupt, name, len(b))
	}
	return f, true, nil
}
