package segment

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
)

// AppendRetained appends to dst the batch that log compaction leaves of b
// when it keeps only recs, records decoded from b, in order. Whatever the
// records kept, the header keeps b's base offset, last offset delta,
// partition leader epoch, producer id, epoch and base sequence, timestamp
// type and transactional and control flags, as Kafka's
// MemoryRecords.filterTo rebuilds a batch (buildRetainedRecordsInto,
// overrideLastOffset): offsets and sequence numbers never change. The
// records are compressed with b's codec again.
//
// A deleteHorizon of 0 or more sets the delete-horizon attribute and stores
// the horizon as the base timestamp, the records' timestamps becoming
// deltas from it (KIP-534); -1 sets none.
//
// With no records the result is a header-only batch, as Kafka's
// DefaultRecordBatch.writeEmptyHeader writes it to keep a producer's last
// sequence number (BatchRetention.RETAIN_EMPTY): uncompressed, base
// timestamp -1, max timestamp b's, no delete horizon.
//
// The error wraps ErrInvalidRecords if a record's offset lies outside b's
// range or does not increase, ErrUnsupportedCodec if b's codec cannot be
// built, and ErrBatchTooLarge as AppendBatch's does; dst is then returned
// unchanged.
func AppendRetained(dst []byte, b Batch, recs []Record, deleteHorizon int64) ([]byte, error) {
	if len(b) < HeaderSize {
		return dst, fmt.Errorf("%w: %d bytes, a batch header needs %d", ErrShortBatch, len(b), HeaderSize)
	}
	opts := BuildOptions{
		BaseOffset: b.BaseOffset(),
		Codec:      b.Codec(),
		Producer:   &ProducerFields{ID: b.ProducerID(), Epoch: b.ProducerEpoch(), BaseSequence: b.BaseSequence()},
	}
	attrs := b.attributes() &^ (attrDeleteHorizon | attrCodecMask)
	start := len(dst)
	out := slices.Grow(dst, HeaderSize)[:start+HeaderSize]
	if len(recs) == 0 {
		opts.Codec = CodecNone
		putHeader(out[start:], &opts, attrs, b.LastOffsetDelta(), -1, b.MaxTimestamp(), 0)
		Batch(out[start:]).SetPartitionLeaderEpoch(b.PartitionLeaderEpoch())
		return out, nil
	}
	if opts.Codec != CodecNone && opts.Codec != CodecGzip && opts.Codec != CodecLZ4 {
		return dst, fmt.Errorf("segment: rebuilding the batch at base offset %d: %w", b.BaseOffset(), &CodecError{Codec: opts.Codec})
	}
	baseTS := recs[0].Timestamp
	if deleteHorizon >= 0 {
		baseTS = deleteHorizon
		attrs |= attrDeleteHorizon
	}
	var maxTS int64
	out, err := appendBody(out, opts.Codec, func(dst []byte) (b2 []byte, err error) {
		b2, maxTS, err = appendRetainedRecords(dst, recs, b, baseTS)
		return b2, err
	})
	if err != nil {
		return dst, err
	}
	if size := len(out) - start; size > math.MaxInt32 {
		return dst, fmt.Errorf("%w: %d bytes, a batch holds at most %d", ErrBatchTooLarge, size, math.MaxInt32)
	}
	if b.LogAppendTime() {
		// Every record's timestamp is the append time, the max field.
		maxTS = b.MaxTimestamp()
	}
	opts.Codec = b.Codec()
	putHeader(out[start:], &opts, attrs|uint16(opts.Codec), b.LastOffsetDelta(), baseTS, maxTS, len(recs))
	Batch(out[start:]).SetPartitionLeaderEpoch(b.PartitionLeaderEpoch())
	return out, nil
}

// appendRetainedRecords encodes recs with offset deltas from b's base
// offset and timestamp deltas from baseTS, and returns their largest
// timestamp.
func appendRetainedRecords(dst []byte, recs []Record, b Batch, baseTS int64) ([]byte, int64, error) {
	maxTS := int64(math.MinInt64)
	prev := int64(-1)
	for i := range recs {
		r := &recs[i]
		delta := r.Offset - b.BaseOffset()
		switch {
		case delta < 0 || delta > int64(b.LastOffsetDelta()):
			return dst, 0, fmt.Errorf("%w: record %d: offset %d outside the batch's offsets [%d, %d]",
				ErrInvalidRecords, i, r.Offset, b.BaseOffset(), b.LastOffset())
		case delta <= prev:
			return dst, 0, fmt.Errorf("%w: record %d: offset %d does not follow offset %d",
				ErrInvalidRecords, i, r.Offset, b.BaseOffset()+prev)
		}
		var err error
		if dst, err = appendRecord(dst, r, i, delta, r.Timestamp-baseTS); err != nil {
			return dst, 0, err
		}
		prev = delta
		maxTS = max(maxTS, r.Timestamp)
	}
	return dst, maxTS, nil
}

// Batches returns an iterator over the segment's batches from the one
// holding offset from (the first whose last offset is at or after it) to
// the end the segment had when the iteration began: whole batches if
// whole, else their headers only (a Batch of HeaderSize bytes whose Size
// is the whole batch's). The file is read in chunks, so that a scan of
// small batches costs few reads. A yielded batch is valid until the next
// iteration.
//
// Batches checks framing and offset order, not CRCs (see Validate); an
// error ends the iteration, naming the file and position.
func (s *Segment) Batches(from int64, whole bool) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		if err := s.load(); err != nil {
			yield(nil, err)
			return
		}
		end := s.size.Load()
		pos, _, err := s.findOffset(from, end)
		if err != nil {
			if !errors.Is(err, ErrOffsetNotFound) {
				yield(nil, err)
			}
			return
		}
		sc := newScanner(s.log, s.logName(), pos, end, scanChunk)
		next := int64(math.MinInt64)
		for {
			at := sc.pos
			b, err := sc.next(whole)
			if err == io.EOF {
				return
			}
			if err == nil && b.BaseOffset() < next {
				err = fmt.Errorf("%w: base offset %d follows offset %d", ErrCorrupt, b.BaseOffset(), next-1)
			}
			if err != nil {
				yield(nil, sc.wrap(at, err))
				return
			}
			next = b.LastOffset() + 1
			if !yield(b, nil) {
				return
			}
		}
	}
}
