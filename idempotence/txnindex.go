package idempotence

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// AbortedTxn is an entry of a segment's .txnindex: a transaction aborted by
// a marker in that segment (Kafka's AbortedTxn).
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64 // the transaction's first offset on the partition
	LastOffset  int64 // the ABORT marker's offset
	// LastStableOffset is the partition's last stable offset once the
	// transaction completed (CompletedTxn.LastStableOffset). A reader
	// collecting aborted transactions for a fetch stops at the first entry
	// whose LastStableOffset reaches past the fetch.
	LastStableOffset int64
}

// AbortedTxnOf returns the index entry of a completed transaction.
func AbortedTxnOf(c CompletedTxn) AbortedTxn {
	return AbortedTxn{ProducerID: c.ProducerID, FirstOffset: c.FirstOffset, LastOffset: c.LastOffset, LastStableOffset: c.LastStableOffset}
}

// The entry layout, big-endian: int16 version (0), int64 producer id, int64
// first offset, int64 last offset, int64 last stable offset (AbortedTxn.java).
const (
	txnIndexVersion   = 0
	TxnIndexEntrySize = 2 + 8 + 8 + 8 + 8
)

// ErrCorruptTxnIndex means a .txnindex file holds an entry Strand cannot
// read (an unknown version) or that cannot belong to its segment.
var ErrCorruptTxnIndex = errors.New("idempotence: corrupt transaction index")

// ErrTxnIndexOrder means an entry appended to a .txnindex does not end
// after the last one: markers are appended in offset order.
var ErrTxnIndexOrder = errors.New("idempotence: aborted transactions appended out of order")

func appendAbortedTxn(dst []byte, a AbortedTxn) []byte {
	be := binary.BigEndian
	dst = be.AppendUint16(dst, txnIndexVersion)
	dst = be.AppendUint64(dst, uint64(a.ProducerID))
	dst = be.AppendUint64(dst, uint64(a.FirstOffset))
	dst = be.AppendUint64(dst, uint64(a.LastOffset))
	return be.AppendUint64(dst, uint64(a.LastStableOffset))
}

// TxnIndex is one segment's .txnindex file (Kafka's TransactionIndex). Its
// entries are few, one per aborted transaction, and kept in memory; the
// file, created on the first append, holds them for the next open. It is
// not safe for concurrent use.
type TxnIndex struct {
	fs      vfs.FS
	name    string
	f       vfs.File // nil until the file is needed
	entries []AbortedTxn
}

// OpenTxnIndex opens the .txnindex file name of the segment starting at
// baseOffset; a missing file is an empty index. Bytes after the last whole
// entry (a torn append) are ignored, as Kafka ignores them, and cut off by
// the next append. An entry of an unknown version, or ending before
// baseOffset (Kafka's sanityCheck), gives an error wrapping
// ErrCorruptTxnIndex: the log rebuilds the index from its segment.
func OpenTxnIndex(fsys vfs.FS, name string, baseOffset int64) (*TxnIndex, error) {
	x := &TxnIndex{fs: fsys, name: name}
	b, err := vfs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return x, nil
	}
	if err != nil {
		return nil, err
	}
	be := binary.BigEndian
	for off := 0; off+TxnIndexEntrySize <= len(b); off += TxnIndexEntrySize {
		e := b[off:]
		if v := int16(be.Uint16(e)); v != txnIndexVersion {
			return nil, fmt.Errorf("%w: %s: entry at byte %d has version %d", ErrCorruptTxnIndex, name, off, v)
		}
		a := AbortedTxn{
			ProducerID:       int64(be.Uint64(e[2:])),
			FirstOffset:      int64(be.Uint64(e[10:])),
			LastOffset:       int64(be.Uint64(e[18:])),
			LastStableOffset: int64(be.Uint64(e[26:])),
		}
		if a.LastOffset < baseOffset {
			return nil, fmt.Errorf("%w: %s: entry at byte %d ends at offset %d, before the segment's base offset %d",
				ErrCorruptTxnIndex, name, off, a.LastOffset, baseOffset)
		}
		x.entries = append(x.entries, a)
	}
	return x, nil
}

// file opens the index file for writing, creating it, and cuts off any
// torn entry at its end.
func (x *TxnIndex) file() (vfs.File, error) {
	if x.f != nil {
		return x.f, nil
	}
	f, err := x.fs.OpenReadWrite(x.name)
	if errors.Is(err, fs.ErrNotExist) {
		// The new name is made durable at once: a producer snapshot or
		// a recovery point written later, past the entries, would
		// otherwise survive a crash that loses the file, and the
		// aborted transactions would read as committed.
		if f, err = x.fs.Create(x.name); err == nil {
			if err = vfs.SyncDir(x.fs, filepath.Dir(x.name)); err != nil {
				f.Close()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != int64(len(x.entries))*TxnIndexEntrySize {
		err = f.Truncate(int64(len(x.entries)) * TxnIndexEntrySize)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	x.f = f
	return f, nil
}

// Append adds an aborted transaction, which must end after the last one
// (ErrTxnIndexOrder otherwise).
func (x *TxnIndex) Append(a AbortedTxn) error {
	if n := len(x.entries); n > 0 && x.entries[n-1].LastOffset >= a.LastOffset {
		return fmt.Errorf("%w: %s: last offset %d after %d", ErrTxnIndexOrder, x.name, a.LastOffset, x.entries[n-1].LastOffset)
	}
	f, err := x.file()
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(appendAbortedTxn(nil, a), int64(len(x.entries))*TxnIndexEntrySize); err != nil {
		return err
	}
	x.entries = append(x.entries, a)
	return nil
}

// Sync makes the appended entries durable.
func (x *TxnIndex) Sync() error {
	if x.f == nil {
		return nil
	}
	return x.f.Sync()
}

// TruncateTo removes the entries of transactions aborted at or after
// offset, as the log does when it truncates its segment.
func (x *TxnIndex) TruncateTo(offset int64) error {
	i := slices.IndexFunc(x.entries, func(a AbortedTxn) bool { return a.LastOffset >= offset })
	if i < 0 {
		return nil
	}
	f, err := x.file()
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(i) * TxnIndexEntrySize); err != nil {
		return err
	}
	x.entries = x.entries[:i]
	return nil
}

// Entries returns the index's entries, in order.
func (x *TxnIndex) Entries() []AbortedTxn { return slices.Clone(x.entries) }

// Collect returns the aborted transactions that overlap the fetch of
// offsets [fetchOffset, upperBound): those that end at or after fetchOffset
// and begin before upperBound (TransactionIndex.collectAbortedTxns). done
// reports that an entry's last stable offset reached upperBound, so the
// following segments' indexes need not be searched.
func (x *TxnIndex) Collect(fetchOffset, upperBound int64) (aborted []AbortedTxn, done bool) {
	for _, a := range x.entries {
		if a.LastOffset >= fetchOffset && a.FirstOffset < upperBound {
			aborted = append(aborted, a)
		}
		if a.LastStableOffset >= upperBound {
			return aborted, true
		}
	}
	return aborted, false
}

// Close closes the file.
func (x *TxnIndex) Close() error {
	if x.f == nil {
		return nil
	}
	err := x.f.Close()
	x.f = nil
	return err
}

// AbortedFilter tells a read-committed reader which batches to drop, given
// the aborted transactions that overlap what it reads (Kafka's consumer,
// CompletedFetch): the data batches of a producer between the first offset
// of one of its aborted transactions and that transaction's ABORT marker,
// and every control batch. Batches must be passed in offset order.
type AbortedFilter struct {
	pending  []AbortedTxn // by first offset, not yet reached
	aborting map[int64]bool
}

// NewAbortedFilter returns a filter for the aborted transactions, in any
// order: Kafka's consumer sorts them by first offset, and so does this.
func NewAbortedFilter(aborted []AbortedTxn) *AbortedFilter {
	p := slices.Clone(aborted)
	slices.SortStableFunc(p, func(a, b AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return &AbortedFilter{pending: p, aborting: map[int64]bool{}}
}

// Drop reports whether a consumer drops the records of b: a control batch
// (a transaction marker, which no application sees), or with a filter the
// data batch of an aborted transaction. A nil filter, a read of
// uncommitted records, drops control batches only. Every batch read must
// pass in offset order, aborted or not: the filter learns where an
// aborted transaction ends from its marker.
func (f *AbortedFilter) Drop(b segment.Batch) (bool, error) {
	if f == nil || !b.Control() && !b.Transactional() {
		return b.Control(), nil
	}
	info, err := InfoOf(b)
	if err != nil {
		return false, err
	}
	return f.Skip(info), nil
}

// Skip reports whether a read-committed reader drops b.
func (f *AbortedFilter) Skip(b BatchInfo) bool {
	if b.ProducerID >= 0 {
		for len(f.pending) > 0 && f.pending[0].FirstOffset <= b.LastOffset {
			f.aborting[f.pending[0].ProducerID] = true
			f.pending = f.pending[1:]
		}
		if b.Control && b.Marker != nil && b.Marker.Type == MarkerAbort {
			delete(f.aborting, b.ProducerID)
		} else if b.Transactional && !b.Control && f.aborting[b.ProducerID] {
			return true
		}
	}
	return b.Control
}
