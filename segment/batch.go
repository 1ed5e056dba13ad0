package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/strandlog/strand/kafkaerr"
)

// The layout of a RecordBatch v2 header, all fields big-endian. Source:
// apache/kafka:clients/src/main/java/org/apache/kafka/common/record/DefaultRecordBatch.java
// (the *_OFFSET constants and the class Javadoc).
const (
	// HeaderSize is the size of a batch header; a batch with no records is
	// exactly this long.
	HeaderSize = 61

	// Magic is the format version of the batches this package reads and
	// writes (RecordBatch v2, Kafka 0.11 and later).
	Magic = 2

	offBaseOffset      = 0
	offLength          = 8 // bytes after this field
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21 // the CRC covers everything from here on
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	// lengthOverhead is what the Length field does not count: the base
	// offset and the Length field itself (Kafka's LOG_OVERHEAD).
	lengthOverhead = offLength + 4
)

// Attribute bits, from DefaultRecordBatch.java (COMPRESSION_CODEC_MASK,
// TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG_MASK, CONTROL_FLAG_MASK,
// DELETE_HORIZON_FLAG_MASK). Bits 7 to 15 are unused.
const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
	attrDeleteHorizon = 0x40
)

// minRecordSize is the smallest encoded record: one byte each for the
// length, attributes, timestamp delta, offset delta, key length, value
// length and header count. It bounds how many records a batch can hold.
const minRecordSize = 7

// Errors returned for malformed or unusable batches. Every error this package
// returns wraps one of them (or is a *CodecError) so errors.Is can tell them
// apart; the message says which batch, record or field was wrong. Each
// carries the Kafka code a broker answers it with (kafkaerr.CodeOf).
var (
	// ErrShortBatch means the bytes end before the batch does: more data
	// may complete it. A log's recovery treats a short batch at the end of
	// a file as a torn write.
	ErrShortBatch = kafkaerr.New(kafkaerr.ErrCorruptMessage, "segment: short batch")

	// ErrCorrupt means the bytes cannot be a valid batch: a bad length,
	// magic or CRC, or records that do not decode.
	ErrCorrupt = kafkaerr.New(kafkaerr.ErrCorruptMessage, "segment: corrupt batch")

	// ErrBatchTooLarge means a batch, or its decompressed records, exceed
	// what the format or this package allows (see MaxDecompressedSize).
	ErrBatchTooLarge = kafkaerr.New(kafkaerr.ErrMessageTooLarge, "segment: batch too large")

	// ErrInvalidRecords means AppendBatch was given records or options it
	// cannot encode, such as no records or offsets that do not increase.
	ErrInvalidRecords = kafkaerr.New(kafkaerr.ErrInvalidRecord, "segment: invalid records")
)

// castagnoli is the CRC-32C table; hash/crc32 uses the CPU's CRC32
// instruction when it is handed this table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch is one RecordBatch v2 in Kafka's wire and disk format. It is a view
// over bytes owned by someone else: nothing is copied, and the setters write
// through to those bytes.
//
// The header accessors read only the first HeaderSize bytes, so they also
// work on the header-only Batch returned by ParseBatchHeader. They require
// len(b) >= HeaderSize, which ParseBatch and ParseBatchHeader guarantee.
type Batch []byte

// ParseBatch returns the batch at the front of b and the bytes after it,
// without copying. It checks the framing only (length and magic); call
// Validate to check the CRC before trusting bytes from a file or a network.
//
// If b ends before the batch does, the error wraps ErrShortBatch; if the
// header cannot be that of a v2 batch, it wraps ErrCorrupt.
func ParseBatch(b []byte) (batch Batch, rest []byte, err error) {
	size, err := checkFraming(b)
	if err != nil {
		return nil, b, err
	}
	if size > len(b) {
		return nil, b, fmt.Errorf("%w at base offset %d: length field says %d bytes, have %d",
			ErrShortBatch, baseOffset(b), size, len(b))
	}
	return Batch(b[:size:size]), b[size:], nil
}

// ParseBatchHeader checks the header at the front of b, as ParseBatch does,
// and returns it as a Batch of exactly HeaderSize bytes. Its header
// accessors work and Size reports the size of the whole batch, so a scan over
// a file can step from batch to batch reading HeaderSize bytes each time.
func ParseBatchHeader(b []byte) (Batch, error) {
	if _, err := checkFraming(b); err != nil {
		return nil, err
	}
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("%w at base offset %d: header needs %d bytes, have %d",
			ErrShortBatch, baseOffset(b), HeaderSize, len(b))
	}
	return Batch(b[:HeaderSize:HeaderSize]), nil
}

// checkFraming checks the length and magic fields at the front of b and
// returns the size of the batch they describe. Like Kafka's
// FileLogInputStream.nextBatch, it reads the length before the magic; unlike
// it, a wrong magic is corruption as soon as the byte is there, since this
// package reads v2 only.
func checkFraming(b []byte) (int, error) {
	if len(b) < lengthOverhead {
		return 0, fmt.Errorf("%w: %d bytes, a batch header needs %d", ErrShortBatch, len(b), HeaderSize)
	}
	length := int32(binary.BigEndian.Uint32(b[offLength:]))
	if length < HeaderSize-lengthOverhead {
		return 0, fmt.Errorf("%w at base offset %d: length field %d is less than the minimum %d",
			ErrCorrupt, baseOffset(b), length, HeaderSize-lengthOverhead)
	}
	if length > math.MaxInt32-lengthOverhead {
		// Kafka holds a batch's size in an int32 too, so no batch is larger.
		return 0, fmt.Errorf("%w at base offset %d: length field %d makes the batch larger than %d bytes",
			ErrCorrupt, baseOffset(b), length, math.MaxInt32)
	}
	if len(b) <= offMagic {
		return 0, fmt.Errorf("%w at base offset %d: %d bytes, a batch header needs %d",
			ErrShortBatch, baseOffset(b), len(b), HeaderSize)
	}
	if m := b[offMagic]; m != Magic {
		return 0, fmt.Errorf("%w at base offset %d: magic %d, want %d", ErrCorrupt, baseOffset(b), m, Magic)
	}
	return int(length) + lengthOverhead, nil
}

func baseOffset(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[offBaseOffset:])) }

// Validate checks that b is exactly one well-formed batch: its length field
// matches len(b), the magic is 2, the CRC-32C over the bytes from the
// attributes to the end matches, and the offset delta and record count are
// possible. It does not decode the records; Records reports bad records as
// it meets them.
func (b Batch) Validate() error {
	size, err := checkFraming(b)
	if err != nil {
		return err
	}
	switch {
	case len(b) < HeaderSize:
		return fmt.Errorf("%w at base offset %d: header needs %d bytes, have %d",
			ErrShortBatch, b.BaseOffset(), HeaderSize, len(b))
	case size > len(b):
		return fmt.Errorf("%w at base offset %d: length field says %d bytes, have %d",
			ErrShortBatch, b.BaseOffset(), size, len(b))
	case size < len(b):
		return fmt.Errorf("%w at base offset %d: length field says %d bytes, slice has %d",
			ErrCorrupt, b.BaseOffset(), size, len(b))
	}
	if stored, computed := b.CRC(), crc32.Checksum(b[offAttributes:], castagnoli); stored != computed {
		return fmt.Errorf("%w at base offset %d: crc mismatch: stored %#08x, computed %#08x",
			ErrCorrupt, b.BaseOffset(), stored, computed)
	}
	n, delta := b.NumRecords(), b.LastOffsetDelta()
	switch {
	case delta < 0:
		return fmt.Errorf("%w at base offset %d: negative last offset delta %d", ErrCorrupt, b.BaseOffset(), delta)
	case n < 0:
		return fmt.Errorf("%w at base offset %d: negative record count %d", ErrCorrupt, b.BaseOffset(), n)
	case int64(n) > int64(delta)+1:
		// Records have distinct offsets in [base, base+delta]; compaction
		// may remove some but never adds any.
		return fmt.Errorf("%w at base offset %d: %d records but last offset delta %d",
			ErrCorrupt, b.BaseOffset(), n, delta)
	case b.Codec() == CodecNone && int64(n)*minRecordSize > int64(len(b)-HeaderSize):
		return fmt.Errorf("%w at base offset %d: %d records cannot fit in %d bytes",
			ErrCorrupt, b.BaseOffset(), n, len(b)-HeaderSize)
	}
	return nil
}

// BaseOffset returns the offset of the batch's first record (or, after
// compaction, of the record that was first).
func (b Batch) BaseOffset() int64 { return baseOffset(b) }

// SetBaseOffset sets the base offset. The field is outside the CRC, so a log
// assigns offsets to a producer's batch by stamping it, without re-encoding.
func (b Batch) SetBaseOffset(offset int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(offset))
}

// Size returns the size of the whole batch in bytes, from its length field.
func (b Batch) Size() int { return int(int32(binary.BigEndian.Uint32(b[offLength:]))) + lengthOverhead }

// PartitionLeaderEpoch returns the epoch of the leader that appended the
// batch, or -1 if none has.
func (b Batch) PartitionLeaderEpoch() int32 {
	return int32(binary.BigEndian.Uint32(b[offLeaderEpoch:]))
}

// SetPartitionLeaderEpoch stamps the leader's epoch. The field is outside
// the CRC, so the CRC stays valid.
func (b Batch) SetPartitionLeaderEpoch(epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// CRC returns the stored CRC-32C of the bytes from the attributes to the end.
func (b Batch) CRC() uint32 { return binary.BigEndian.Uint32(b[offCRC:]) }

func (b Batch) attributes() uint16 { return binary.BigEndian.Uint16(b[offAttributes:]) }

// Codec returns the codec that compressed the records.
func (b Batch) Codec() Codec { return Codec(b.attributes() & attrCodecMask) }

// LogAppendTime reports whether the timestamps are the broker's append time
// (MaxTimestamp) rather than the producer's create time.
func (b Batch) LogAppendTime() bool { return b.attributes()&attrLogAppendTime != 0 }

// Transactional reports whether the batch belongs to a transaction.
func (b Batch) Transactional() bool { return b.attributes()&attrTransactional != 0 }

// Control reports whether the batch holds control records (transaction
// markers) rather than data.
func (b Batch) Control() bool { return b.attributes()&attrControl != 0 }

// DeleteHorizon returns the time after which compaction may drop the
// batch's tombstones and abort markers, and whether it is set (KIP-534).
// When set, it is stored in the base timestamp field, and record timestamps
// are deltas from it.
func (b Batch) DeleteHorizon() (ms int64, ok bool) {
	if b.attributes()&attrDeleteHorizon == 0 {
		return 0, false
	}
	return b.BaseTimestamp(), true
}

// LastOffsetDelta returns the last offset minus the base offset.
func (b Batch) LastOffsetDelta() int32 {
	return int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:]))
}

// LastOffset returns the offset of the batch's last record (or, after
// compaction, of the record that was last).
func (b Batch) LastOffset() int64 { return b.BaseOffset() + int64(b.LastOffsetDelta()) }

// BaseTimestamp returns the base of the records' timestamp deltas in
// milliseconds: the first record's timestamp, or the delete horizon.
func (b Batch) BaseTimestamp() int64 { return int64(binary.BigEndian.Uint64(b[offBaseTimestamp:])) }

// MaxTimestamp returns the largest record timestamp in milliseconds, or the
// append time for a LogAppendTime batch.
func (b Batch) MaxTimestamp() int64 { return int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])) }

// SetLogAppendTime marks the batch's timestamps as the broker's append time
// ms and recomputes the CRC, which covers both fields, so b must be the
// whole batch. This is how a Kafka broker stamps a producer's batch for a
// topic with message.timestamp.type=LogAppendTime (LogValidator, in place
// when no recompression is needed).
func (b Batch) SetLogAppendTime(ms int64) {
	binary.BigEndian.PutUint16(b[offAttributes:], b.attributes()|attrLogAppendTime)
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ms))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

// ProducerID returns the idempotent producer's id, or -1.
func (b Batch) ProducerID() int64 { return int64(binary.BigEndian.Uint64(b[offProducerID:])) }

// ProducerEpoch returns the idempotent producer's epoch, or -1.
func (b Batch) ProducerEpoch() int16 { return int16(binary.BigEndian.Uint16(b[offProducerEpoch:])) }

// BaseSequence returns the sequence number of the first record, or -1. The
// last record's is BaseSequence+LastOffsetDelta, wrapping past MaxInt32 to 0.
func (b Batch) BaseSequence() int32 { return int32(binary.BigEndian.Uint32(b[offBaseSequence:])) }

// NumRecords returns the record count stored in the header.
func (b Batch) NumRecords() int32 { return int32(binary.BigEndian.Uint32(b[offNumRecords:])) }

// putHeader fills the header of the batch b, whose records section is
// already in place, and computes its CRC.
func putHeader(b []byte, o *BuildOptions, attrs uint16, lastOffsetDelta int32, baseTS, maxTS int64, n int) {
	p := o.producer()
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], uint64(o.BaseOffset))
	be.PutUint32(b[offLength:], uint32(len(b)-lengthOverhead))
	be.PutUint32(b[offLeaderEpoch:], math.MaxUint32) // -1: no leader has stamped it yet
	b[offMagic] = Magic
	be.PutUint16(b[offAttributes:], attrs)
	be.PutUint32(b[offLastOffsetDelta:], uint32(lastOffsetDelta))
	be.PutUint64(b[offBaseTimestamp:], uint64(baseTS))
	be.PutUint64(b[offMaxTimestamp:], uint64(maxTS))
	be.PutUint64(b[offProducerID:], uint64(p.ID))
	be.PutUint16(b[offProducerEpoch:], uint16(p.Epoch))
	be.PutUint32(b[offBaseSequence:], uint32(p.BaseSequence))
	be.PutUint32(b[offNumRecords:], uint32(n))
	be.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}
