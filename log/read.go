package log

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

// Isolation is how far a read may go, as Kafka's FetchIsolation.
//
// ReadCommitted is Kafka's isolation.level=read_committed and the zero
// value. A log that holds no transactions has its last stable offset at
// the high watermark, so there ReadCommitted and ReadUncommitted read the
// same records: before transactions, ReadCommitted meant "up to the high
// watermark", and it still does for such logs.
type Isolation int8

const (
	// ReadCommitted reads up to the last stable offset (Kafka's
	// FETCH_TXN_COMMITTED): no record of a transaction still open or not
	// yet replicated, and with the aborted transactions of what it reads
	// (Batches.Aborted) so that the reader can drop their records; Records
	// drops them.
	ReadCommitted Isolation = iota
	// ReadLogEnd reads up to the log end offset: what followers replicate.
	ReadLogEnd
	// ReadUncommitted reads up to the high watermark (Kafka's
	// isolation.level=read_uncommitted, FETCH_HIGH_WATERMARK): every
	// replicated record, those of open and aborted transactions too.
	ReadUncommitted
)

func (l *Log) bound(iso Isolation) int64 {
	switch iso {
	case ReadLogEnd:
		return l.leo.Load()
	case ReadUncommitted:
		return l.hw.Load()
	}
	return l.LastStableOffset()
}

// Batches is the result of a read: whole batches from one segment, as a
// file slice that can be sent with sendfile (WriteTo) or read (All yields
// its batches, validated). It holds the segment's files open, even if
// retention deletes the segment meanwhile, until Close.
//
// Copies of a Batches share its hold: closing one closes them all, once.
type Batches struct {
	segment.Slice
	// Aborted are, for a ReadCommitted read, the aborted transactions
	// whose records the batches may hold, as Kafka's FetchResponse carries
	// them (abortedTransactions): a reader drops a producer's data batches
	// from an aborted transaction's first offset up to its ABORT marker
	// (idempotence.NewAbortedFilter does this).
	Aborted []idempotence.AbortedTxn
	hold    *hold
}

// hold is a reader's hold on a segment.
type hold struct {
	ref    *segRef
	closed atomic.Bool
}

// Close releases the segment. It is safe to call more than once, on any
// copy.
func (b *Batches) Close() error {
	if b.hold == nil || !b.hold.closed.CompareAndSwap(false, true) {
		return nil
	}
	return b.hold.ref.release()
}

// Read returns whole batches starting with the one that holds offset, up
// to maxBytes (at least one batch, however large, so that a reader always
// progresses) and below the bound iso sets. The batches come from one
// segment; a read that reaches the segment's end returns fewer bytes. An
// offset at or past the bound returns no batches. An offset outside the
// log start and end offsets is an *OffsetOutOfRangeError.
//
// A ReadCommitted read stops at the last stable offset and lists the
// aborted transactions that overlap it in Batches.Aborted, from the
// segments' .txnindex files.
//
// The caller must Close the result.
func (l *Log) Read(offset int64, maxBytes int, iso Isolation) (*Batches, error) {
	for {
		l.mu.RLock()
		if l.closed {
			l.mu.RUnlock()
			return nil, ErrClosed
		}
		start, leo, bound := l.logStart.Load(), l.leo.Load(), l.bound(iso)
		if offset < start || offset > leo {
			l.mu.RUnlock()
			return nil, &OffsetOutOfRangeError{Offset: offset, Start: start, End: leo}
		}
		if offset >= bound {
			l.mu.RUnlock()
			return &Batches{}, nil
		}
		segs := l.segs
		i := segmentOf(segs, offset)
		ref := segs[i]
		last := i == len(segs)-1
		var next int64
		if !last {
			next = segs[i+1].BaseOffset()
		}
		ok := ref.acquire()
		l.mu.RUnlock()
		if !ok {
			continue // deleted and closed under us: look again
		}
		sl, err := ref.Read(offset, bound, maxBytes)
		switch {
		case err == nil:
			bs := &Batches{Slice: sl, hold: &hold{ref: ref}}
			if iso == ReadCommitted {
				// Only the transactions the batches read may hold, as
				// Kafka's fetch bounds them by the fetched data's end:
				// bounded by the LSO, every read would collect all the
				// aborted transactions to the end of the log.
				if bs.Aborted, err = abortedIn(segs[i:], offset, sl.NextOffset()); err != nil {
					ref.release()
					return nil, fmt.Errorf("log %s: %w", l.dir, err)
				}
			}
			return bs, nil
		case errors.Is(err, segment.ErrOffsetNotFound) && !last:
			// The offset falls in a gap at the segment's end (compaction
			// removed it): carry on at the next segment.
			offset = next
			ref.release()
		default:
			ref.release()
			return nil, fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
}

// recordsChunk is how much of the log Records reads at a time: Kafka's
// default max.partition.fetch.bytes.
const recordsChunk = 1 << 20

// chunkBuffers holds the buffers Records reads chunks into, kept from one
// iteration to the next: a fresh 1 MiB buffer costs its page faults each
// time (a tenth of a cached read of the whole log), where a consumer that
// polls calls Records again and again.
var chunkBuffers = sync.Pool{New: func() any { return new([]byte) }}

// Records yields the records from offset from up to the bound iso sets,
// reading the log in chunks. It stops at the bound as it stands when the
// iteration reaches it; Wait tells when there is more. Control records
// (transaction markers) are never yielded, as Kafka's consumer never
// returns them; with ReadCommitted neither are the records of aborted
// transactions. Every batch's CRC is checked.
//
// The keys, values and header values of the records yielded alias a
// buffer the iteration reuses for the next chunk of the log: they are
// valid until the loop body returns, and a caller that keeps them must
// copy them (bytes.Clone). Reusing the buffer, rather than allocating
// each chunk, is what lets a reader keep up with the page cache.
func (l *Log) Records(from int64, iso Isolation) iter.Seq2[segment.Record, error] {
	return func(yield func(segment.Record, error) bool) {
		pooled := chunkBuffers.Get().(*[]byte)
		buf := *pooled
		defer func() {
			*pooled = buf[:0]
			chunkBuffers.Put(pooled)
		}()
		for {
			bs, err := l.Read(from, recordsChunk, iso)
			if err != nil {
				yield(segment.Record{}, err)
				return
			}
			if bs.Len() == 0 {
				return
			}
			bound := l.bound(iso)
			if need := int(bs.Len()); need > cap(buf) {
				// A whole chunk for a read of more than half of one, so
				// that a long read allocates once; doubling otherwise,
				// so that a short log costs little.
				size := max(need, 2*cap(buf))
				if need > recordsChunk/2 {
					size = max(need, recordsChunk)
				}
				buf = make([]byte, 0, size)
			}
			for r, err := range bs.records(from, bs.AllInto(&buf)) {
				if err != nil {
					bs.Close()
					yield(segment.Record{}, fmt.Errorf("log %s: %w", l.dir, err))
					return
				}
				if r.Offset >= bound {
					continue
				}
				if !yield(r, nil) {
					bs.Close()
					return
				}
			}
			from = max(from, bs.NextOffset())
			bs.Close()
		}
	}
}

// Records yields the records of the batches a consumer sees, from offset
// from on: not those of control batches (transaction markers), nor, after
// a ReadCommitted read, those of the transactions in Aborted. The records'
// keys, values and header values are in memory of their own, which the
// caller may keep. Where the next read starts is NextOffset, past the
// batches dropped too.
func (b *Batches) Records(from int64) iter.Seq2[segment.Record, error] {
	return b.records(from, b.All())
}

// records is Records over batches, the slice's batches read into memory
// of the caller's choice.
func (b *Batches) records(from int64, batches iter.Seq2[segment.Batch, error]) iter.Seq2[segment.Record, error] {
	return func(yield func(segment.Record, error) bool) {
		var aborted *idempotence.AbortedFilter
		if len(b.Aborted) > 0 {
			aborted = idempotence.NewAbortedFilter(b.Aborted)
		}
		for batch, err := range batches {
			if err != nil {
				yield(segment.Record{}, err)
				return
			}
			drop, err := aborted.Drop(batch)
			if err != nil {
				yield(segment.Record{}, fmt.Errorf("the batch at offset %d: %w", batch.BaseOffset(), err))
				return
			}
			if drop {
				continue
			}
			for r, err := range batch.Records() {
				if err != nil {
					yield(segment.Record{}, fmt.Errorf("the batch at offset %d: %w", batch.BaseOffset(), err))
					return
				}
				if r.Offset >= from && !yield(r, nil) {
					return
				}
			}
		}
	}
}

// Wait blocks until the bound iso sets passes offset, so that a read of
// offset returns batches: for long polls and tailing consumers. It returns
// ctx's error if ctx ends first and ErrClosed if the log closes.
func (l *Log) Wait(ctx context.Context, offset int64, iso Isolation) error {
	for {
		ch := l.advancedChan()
		if l.isClosed() {
			return ErrClosed
		}
		if l.bound(iso) > offset {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Timestamps of OffsetForTimestamp that ask for an end of the log, as in
// Kafka's ListOffsets.
const (
	// LatestTimestamp asks for the high watermark: the offset the next
	// committed record will have.
	LatestTimestamp int64 = -1
	// EarliestTimestamp asks for the log start offset.
	EarliestTimestamp int64 = -2
)

// OffsetForTimestamp returns the offset of the first record whose
// timestamp (in milliseconds since the Unix epoch) is at or after ts
// (Kafka's ListOffsets by time); ok is false if no record is that late.
// LatestTimestamp and EarliestTimestamp ask for the high watermark and
// the log start offset, as in Kafka; other negative timestamps are
// ErrInvalidOption.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, ok bool, err error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, false, ErrClosed
	}
	switch {
	case ts == LatestTimestamp:
		l.mu.RUnlock()
		return l.hw.Load(), true, nil
	case ts == EarliestTimestamp:
		l.mu.RUnlock()
		return l.logStart.Load(), true, nil
	case ts < 0:
		l.mu.RUnlock()
		return 0, false, fmt.Errorf("%w: timestamp %d, allowed 0 or more, LatestTimestamp (-1) or EarliestTimestamp (-2)", ErrInvalidOption, ts)
	}
	var ref *segRef
	for _, s := range l.segs {
		if s.MaxTimestamp() >= ts && s.acquire() {
			ref = s
			break
		}
	}
	start := l.logStart.Load()
	l.mu.RUnlock()
	if ref == nil {
		return 0, false, nil
	}
	defer ref.release()
	offset, ok, err = ref.FindTimestamp(ts)
	if err != nil {
		return 0, false, fmt.Errorf("log %s: %w", l.dir, err)
	}
	return max(offset, start), ok, nil
}
