package segment

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"slices"
	"sync"
)

// Record is one record of a batch. Its layout inside the batch is, with
// zig-zag varints (apache/kafka:clients/.../common/record/DefaultRecord.java):
//
//	length varint | attributes int8 (unused) | timestamp delta varlong |
//	offset delta varint | key length varint (< 0 = null, -1 written) | key |
//	value length varint (< 0 = null, -1 written) | value | header count varint | headers
type Record struct {
	// Offset is the record's absolute offset. Records fills it in;
	// AppendBatch reads it only with BuildOptions.KeepOffsets.
	Offset int64

	// Timestamp is in milliseconds since the Unix epoch. For a
	// LogAppendTime batch, Records reports the batch's MaxTimestamp.
	Timestamp int64

	// Key and Value are nil for a null key or value (a record with a key
	// and a null value is a tombstone) and non-nil, possibly empty,
	// otherwise. Records returns slices that alias the batch's bytes when
	// the batch is not compressed.
	Key, Value []byte

	Headers []Header
}

// Header is a record header. Kafka requires a key; the value may be null.
type Header struct {
	Key   string
	Value []byte // nil for null
}

// ProducerFields are the producer fields of a batch header: the
// idempotent or transactional producer of the batch and the sequence
// number of its first record.
type ProducerFields struct {
	ID           int64
	Epoch        int16
	BaseSequence int32
}

// BuildOptions sets the header fields of a batch built by AppendBatch. The
// zero value builds what a non-idempotent Kafka producer sends:
// uncompressed, base offset 0, producer fields -1, CreateTime timestamps,
// partition leader epoch -1.
type BuildOptions struct {
	// BaseOffset is the batch's base offset. Producers leave it 0 and the
	// log stamps the real one with Batch.SetBaseOffset.
	BaseOffset int64

	// Codec compresses the records: CodecNone, CodecGzip or CodecLZ4.
	Codec Codec

	// Producer is nil for a producer without idempotence (all three
	// fields -1).
	Producer *ProducerFields

	// Transactional marks the batch as part of a transaction; it needs a
	// Producer.
	Transactional bool

	// Control marks the batch as holding control records (transaction
	// markers).
	Control bool

	// KeepOffsets takes each record's offset from Record.Offset, which must
	// increase strictly and start at or after BaseOffset, as compaction
	// needs when it rewrites the records it keeps. Otherwise records get
	// BaseOffset, BaseOffset+1, and so on, and Record.Offset is ignored.
	KeepOffsets bool

	// DefaultTimestamp, if not zero, is the timestamp of the records whose
	// Timestamp is zero, as a producer stamps the records its caller sent
	// without one. The records themselves are left as they are.
	DefaultTimestamp int64
}

// timestamp returns r's timestamp in the batch.
func (o *BuildOptions) timestamp(r *Record) int64 {
	if r.Timestamp == 0 {
		return o.DefaultTimestamp
	}
	return r.Timestamp
}

func (o *BuildOptions) producer() ProducerFields {
	if o.Producer == nil {
		return ProducerFields{ID: -1, Epoch: -1, BaseSequence: -1}
	}
	return *o.Producer
}

// scratch holds the uncompressed records of a compressed batch while it is
// being built.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// AppendBatch appends a batch holding recs to dst and returns the extended
// slice; reusing dst lets a caller build batches without allocating. The
// batch's base timestamp is the first record's timestamp, its max
// timestamp the largest of the records' (-1 if none is larger), and its
// last offset delta and CRC are computed from the records.
//
// On error dst is returned unchanged. The error wraps ErrInvalidRecords for
// records or options that cannot be encoded, ErrBatchTooLarge if the batch
// would not fit the format's 32-bit sizes or, compressed, its records would
// decompress past MaxDecompressedSize (Records could not read them), and
// ErrUnsupportedCodec for a codec other than none, gzip and lz4.
func AppendBatch(dst []byte, recs []Record, opts BuildOptions) ([]byte, error) {
	switch {
	case len(recs) == 0:
		return dst, fmt.Errorf("%w: a batch needs at least one record", ErrInvalidRecords)
	case opts.Transactional && opts.Producer == nil:
		return dst, fmt.Errorf("%w: a transactional batch needs a producer", ErrInvalidRecords)
	case opts.Codec != CodecNone && opts.Codec != CodecGzip && opts.Codec != CodecLZ4:
		return dst, fmt.Errorf("segment: building a batch: %w", &CodecError{Codec: opts.Codec})
	}
	start := len(dst)
	// Every header byte is written by putHeader once the records are in.
	out := slices.Grow(dst, HeaderSize)[:start+HeaderSize]
	var enc encoded
	out, err := appendBody(out, opts.Codec, func(dst []byte) (b []byte, err error) {
		b, enc, err = appendRecords(dst, recs, &opts)
		return b, err
	})
	if err != nil {
		return dst, err
	}
	if size := len(out) - start; size > math.MaxInt32 {
		return dst, fmt.Errorf("%w: %d bytes, a batch holds at most %d", ErrBatchTooLarge, size, math.MaxInt32)
	}
	attrs := uint16(opts.Codec)
	if opts.Transactional {
		attrs |= attrTransactional
	}
	if opts.Control {
		attrs |= attrControl
	}
	putHeader(out[start:], &opts, attrs, enc.lastOffsetDelta, opts.timestamp(&recs[0]), enc.maxTimestamp, len(recs))
	return out, nil
}

// appendBody appends to out the records encode writes, compressed with
// codec.
func appendBody(out []byte, codec Codec, encode func(dst []byte) ([]byte, error)) ([]byte, error) {
	if codec == CodecNone {
		return encode(out)
	}
	buf := scratch.Get().(*[]byte)
	defer scratch.Put(buf)
	var err error
	if *buf, err = encode((*buf)[:0]); err != nil {
		return out, err
	}
	// What Records cannot decompress must not be written.
	if len(*buf) > MaxDecompressedSize {
		return out, fmt.Errorf("%w: the records take %d bytes uncompressed, and Records decompresses at most %d (MaxDecompressedSize)",
			ErrBatchTooLarge, len(*buf), MaxDecompressedSize)
	}
	return compress(out, *buf, codec)
}

// encoded is what appendRecords learns about the records for the header.
type encoded struct {
	lastOffsetDelta int32
	maxTimestamp    int64
}

// appendRecords appends the encoding of recs to dst.
func appendRecords(dst []byte, recs []Record, o *BuildOptions) ([]byte, encoded, error) {
	if len(recs)-1 > math.MaxInt32 {
		return dst, encoded{}, fmt.Errorf("%w: %d records, at most %d fit", ErrBatchTooLarge, len(recs), math.MaxInt32+1)
	}
	// One growth for the whole batch: records are at most 21 bytes of
	// framing beyond their keys, values and headers.
	need := 0
	for i := range recs {
		need += 21 + len(recs[i].Key) + len(recs[i].Value)
		for _, h := range recs[i].Headers {
			need += 10 + len(h.Key) + len(h.Value)
		}
	}
	dst = slices.Grow(dst, need)
	baseTS := o.timestamp(&recs[0])
	// The max timestamp starts at -1, no timestamp, as Kafka's
	// MemoryRecordsBuilder starts it: a batch whose records carry none, or
	// only negative ones, says it has none.
	enc := encoded{lastOffsetDelta: -1, maxTimestamp: -1}
	for i := range recs {
		r := &recs[i]
		delta := int64(i)
		if o.KeepOffsets {
			delta = r.Offset - o.BaseOffset
			switch {
			case delta < 0 || delta > math.MaxInt32:
				return dst, encoded{}, fmt.Errorf("%w: record %d: offset %d outside [base offset %d, base offset + 2^31)",
					ErrInvalidRecords, i, r.Offset, o.BaseOffset)
			case delta <= int64(enc.lastOffsetDelta):
				return dst, encoded{}, fmt.Errorf("%w: record %d: offset %d does not follow offset %d",
					ErrInvalidRecords, i, r.Offset, o.BaseOffset+int64(enc.lastOffsetDelta))
			}
		}
		var err error
		ts := o.timestamp(r)
		// The delta wraps for extreme timestamps, and base+delta wraps back.
		if dst, err = appendRecord(dst, r, i, delta, ts-baseTS); err != nil {
			return dst, encoded{}, err
		}
		enc.lastOffsetDelta = int32(delta)
		enc.maxTimestamp = max(enc.maxTimestamp, ts)
	}
	return dst, enc, nil
}

// appendRecord appends r, record i of its batch.
func appendRecord(dst []byte, r *Record, i int, offsetDelta, timestampDelta int64) ([]byte, error) {
	size := 1 + varintLen(timestampDelta) + varintLen(offsetDelta) +
		bytesLen(r.Key) + bytesLen(r.Value) + varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		size += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	if size > math.MaxInt32 {
		return dst, fmt.Errorf("%w: record %d takes %d bytes, at most %d fit", ErrBatchTooLarge, i, size, math.MaxInt32)
	}
	dst = binary.AppendVarint(dst, int64(size))
	dst = append(dst, 0) // attributes, unused since v2
	dst = binary.AppendVarint(dst, timestampDelta)
	dst = binary.AppendVarint(dst, offsetDelta)
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytes(dst, h.Value)
	}
	return dst, nil
}

// varintLen returns the size of v as a zig-zag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

// bytesLen returns the encoded size of a length-prefixed, nullable field.
func bytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// Records returns an iterator over the batch's records, with absolute
// offsets and timestamps. It decompresses a gzip or lz4 batch first, into
// at most MaxDecompressedSize bytes. Keys, values and header values alias
// the batch when it is not compressed, so they are only valid as long as
// the batch's bytes are.
//
// An error ends the iteration: it is yielded with a zero Record. Records
// does not check the CRC (see Validate) but checks every length and count
// against the bytes, and that offsets increase within the batch's range; a
// snappy or zstd batch yields an error matching ErrUnsupportedCodec.
func (b Batch) Records() iter.Seq2[Record, error] { return b.records(true) }

// records is Records; onePass has each record decoded in one pass when it
// is well formed, field by field otherwise (tests compare the two).
func (b Batch) records(onePass bool) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		d, err := b.newRecordDecoder()
		if err != nil {
			yield(Record{}, err)
			return
		}
		for i := range d.count {
			var r Record
			var err error
			if !onePass || !d.fast(&r) {
				r, err = d.next(i)
			}
			if err != nil {
				yield(Record{}, err)
				return
			}
			if !yield(r, nil) {
				return
			}
		}
		if len(d.buf) > d.off {
			yield(Record{}, d.errorf(d.count, "%d bytes after the last record", len(d.buf)-d.off))
		}
	}
}

// recordDecoder decodes the records section of a batch.
type recordDecoder struct {
	buf        []byte // the records, decompressed
	off        int    // where the next field starts in buf
	end        int    // where the record being decoded ends in buf
	count      int    // records the header promises
	compressed bool

	baseOffset      int64
	lastOffsetDelta int64
	baseTimestamp   int64
	appendTime      int64 // with logAppendTime, every record's timestamp
	logAppendTime   bool
	prevDelta       int64
}

func (b Batch) newRecordDecoder() (recordDecoder, error) {
	if len(b) < HeaderSize {
		return recordDecoder{}, fmt.Errorf("%w: %d bytes, a batch header needs %d", ErrShortBatch, len(b), HeaderSize)
	}
	if _, err := checkFraming(b); err != nil {
		return recordDecoder{}, err
	}
	if b.Size() > len(b) {
		return recordDecoder{}, fmt.Errorf("%w at base offset %d: length field says %d bytes, have %d",
			ErrShortBatch, b.BaseOffset(), b.Size(), len(b))
	}
	if b.NumRecords() < 0 {
		return recordDecoder{}, fmt.Errorf("%w at base offset %d: negative record count %d", ErrCorrupt, b.BaseOffset(), b.NumRecords())
	}
	d := recordDecoder{
		buf:             b[HeaderSize:b.Size()],
		count:           int(b.NumRecords()),
		baseOffset:      b.BaseOffset(),
		lastOffsetDelta: int64(b.LastOffsetDelta()),
		baseTimestamp:   b.BaseTimestamp(),
		appendTime:      b.MaxTimestamp(),
		logAppendTime:   b.LogAppendTime(),
		prevDelta:       -1,
	}
	if c := b.Codec(); c != CodecNone && d.count > 0 {
		buf, err := decompress(d.buf, c, MaxDecompressedSize, d.baseOffset)
		if err != nil {
			return recordDecoder{}, err
		}
		d.buf, d.compressed = buf, true
	}
	return d, nil
}

// field names a record field in errors; header is the index of the header
// it belongs to, or -1, and length marks the length prefix of the field.
type field struct {
	name   string
	header int
	length bool
}

func recordField(name string) field        { return field{name: name, header: -1} }
func headerField(j int, name string) field { return field{name: name, header: j} }

func (f field) String() string {
	s := f.name
	if f.header >= 0 {
		s = fmt.Sprintf("header %d %s", f.header, f.name)
	}
	if f.length {
		s += " length"
	}
	return s
}

// errorf returns an ErrCorrupt error that names the batch, the record and
// where in the records it went wrong.
func (d *recordDecoder) errorf(i int, format string, args ...any) error {
	where := "batch"
	pos := d.off + HeaderSize
	if d.compressed {
		where, pos = "decompressed records", d.off
	}
	return fmt.Errorf("%w at base offset %d: record %d at byte %d of the %s: %s",
		ErrCorrupt, d.baseOffset, i, pos, where, fmt.Sprintf(format, args...))
}

// varint reads a zig-zag varint of the current record into [lo, hi].
// A field whose range fits 32 bits is a varint, the others (the timestamp
// delta) varlongs.
func (d *recordDecoder) varint(i int, f field, lo, hi int64) (int64, error) {
	v, n := binary.Varint(d.buf[d.off:d.end])
	if n <= 0 {
		return 0, d.errorf(i, "%v: bad varint", f)
	}
	if n > maxVarint32Len && lo >= math.MinInt32 && hi <= math.MaxInt32 {
		return 0, d.errorf(i, "%v: bad varint: %d bytes, a 32-bit one takes at most %d", f, n, maxVarint32Len)
	}
	if v < lo || v > hi {
		return 0, d.errorf(i, "%v %d out of range [%d, %d]", f, v, lo, hi)
	}
	d.off += n
	return v, nil
}

// bytes reads a length-prefixed field of the current record. If nullable,
// any negative length is null, not only the -1 writers use: Kafka reads
// them so (Utils.readBytes) and its broker stores such records as they came.
func (d *recordDecoder) bytes(i int, f field, nullable bool) ([]byte, error) {
	lo := int64(0)
	if nullable {
		lo = math.MinInt32
	}
	f.length = true
	n, err := d.varint(i, f, lo, math.MaxInt32)
	if err != nil || n < 0 {
		return nil, err
	}
	if n > int64(d.end-d.off) {
		return nil, d.errorf(i, "%v %d, record has %d bytes left", f, n, d.end-d.off)
	}
	b := d.buf[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return b, nil
}

// maxVarint32Len is the longest varint Kafka reads for a 32-bit field
// (ByteUtils.readUnsignedVarint): it refuses a longer one even if its value
// fits, so a batch holding one could not be read by Kafka's consumers.
const maxVarint32Len = 5

// varintAt decodes the zig-zag varint of at most 9 bytes at b[off:]; n
// is 0 if there is none. It is small enough to be inlined in the record
// decoder's fast path, which leaves what it refuses (10-byte varints
// too, which can overflow) to the careful one.
func varintAt(b []byte, off int) (v int64, n int) {
	var u uint64
	for i, s := off, uint(0); i < len(b) && s < 63; i, s = i+1, s+7 {
		u |= uint64(b[i]&0x7f) << s
		if b[i] < 0x80 {
			return int64(u>>1) ^ -int64(u&1), i + 1 - off
		}
	}
	return 0, 0
}

// bytesAt decodes the nullable length-prefixed field at rec[off:], null
// for any negative length as in bytes; ok is false if it is not whole.
func bytesAt(rec []byte, off int) (b []byte, end int, ok bool) {
	n, k := varintAt(rec, off)
	off += k
	switch {
	case k == 0 || k > maxVarint32Len || n < math.MinInt32 || n > int64(len(rec)-off):
		return nil, 0, false
	case n < 0:
		return nil, off, true
	}
	end = off + int(n)
	return rec[off:end:end], end, true
}

// fast decodes the next record into r in one pass over its bytes, if it
// is well formed. Anything it does not take, headers included, it leaves to next,
// which decodes the same record again field by field and says what is
// wrong with it.
func (d *recordDecoder) fast(r *Record) bool {
	size, n := varintAt(d.buf, d.off)
	if n == 0 || n > maxVarint32Len || size < 1 || size > int64(len(d.buf)-d.off-n) {
		return false
	}
	rec := d.buf[d.off+n : d.off+n+int(size)]
	tsDelta, k := varintAt(rec, 1) // after the attributes, unused
	p := 1 + k
	offDelta, k2 := varintAt(rec, p)
	p += k2
	if k == 0 || k2 == 0 || k2 > maxVarint32Len || offDelta <= d.prevDelta || offDelta > d.lastOffsetDelta {
		return false
	}
	key, p, ok := bytesAt(rec, p)
	if !ok {
		return false
	}
	value, p, ok := bytesAt(rec, p)
	if !ok || p+1 != len(rec) || rec[p] != 0 { // no headers, and nothing after
		return false
	}
	d.off += n + int(size)
	d.prevDelta = offDelta
	*r = Record{Offset: d.baseOffset + offDelta, Timestamp: d.baseTimestamp + tsDelta, Key: key, Value: value}
	if d.logAppendTime {
		r.Timestamp = d.appendTime
	}
	return true
}

// next decodes record i.
func (d *recordDecoder) next(i int) (Record, error) {
	d.end = len(d.buf)
	size, err := d.varint(i, recordField("record length"), 1, math.MaxInt32)
	if err != nil {
		return Record{}, err
	}
	if size > int64(len(d.buf)-d.off) {
		return Record{}, d.errorf(i, "record length %d, %d bytes left", size, len(d.buf)-d.off)
	}
	start := d.off
	d.end = d.off + int(size)
	d.off++ // attributes: unused
	tsDelta, err := d.varint(i, recordField("timestamp delta"), math.MinInt64, math.MaxInt64)
	if err != nil {
		return Record{}, err
	}
	offDelta, err := d.varint(i, recordField("offset delta"), d.prevDelta+1, d.lastOffsetDelta)
	if err != nil {
		return Record{}, err
	}
	d.prevDelta = offDelta
	r := Record{Offset: d.baseOffset + offDelta, Timestamp: d.baseTimestamp + tsDelta}
	if d.logAppendTime {
		r.Timestamp = d.appendTime
	}
	if r.Key, err = d.bytes(i, recordField("key"), true); err != nil {
		return Record{}, err
	}
	if r.Value, err = d.bytes(i, recordField("value"), true); err != nil {
		return Record{}, err
	}
	nh, err := d.varint(i, recordField("header count"), 0, math.MaxInt32)
	if err != nil {
		return Record{}, err
	}
	// Each header takes at least two bytes, which bounds the allocation.
	if nh > int64(d.end-d.off)/2 {
		return Record{}, d.errorf(i, "%d headers cannot fit in %d bytes", nh, d.end-d.off)
	}
	if nh > 0 {
		r.Headers = make([]Header, nh)
		for j := range r.Headers {
			key, err := d.bytes(i, headerField(j, "key"), false)
			if err != nil {
				return Record{}, err
			}
			r.Headers[j].Key = string(key)
			if r.Headers[j].Value, err = d.bytes(i, headerField(j, "value"), true); err != nil {
				return Record{}, err
			}
		}
	}
	if d.off != d.end {
		return Record{}, d.errorf(i, "record length %d but its fields take %d bytes", size, d.off-start)
	}
	return r, nil
}
