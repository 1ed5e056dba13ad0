package kafka

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/segment"
)

// These tests hold Strand's batches against franz-go, a Kafka client whose
// kmsg package encodes RecordBatch and Record field by field and whose kgo
// package compresses and decompresses as it does when talking to brokers.
// The CRC is checked with hash/crc32 directly, so no Strand code vouches for
// its own bytes.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// codecs are the codecs Strand writes, with franz-go's names for them.
var codecs = []struct {
	strand segment.Codec
	franz  kgo.CompressionCodec
	typ    kgo.CompressionCodecType
}{
	{segment.CodecNone, kgo.NoCompression(), kgo.CodecNone},
	{segment.CodecGzip, kgo.GzipCompression(), kgo.CodecGzip},
	{segment.CodecLZ4, kgo.Lz4Compression(), kgo.CodecLz4},
}

// headers are batch shapes: a plain producer, an idempotent one, a
// transactional one, and a control batch.
var headers = []struct {
	name string
	opts segment.BuildOptions
}{
	{"plain", segment.BuildOptions{}},
	{"idempotent", segment.BuildOptions{Producer: &segment.ProducerFields{ID: 4000, Epoch: 2, BaseSequence: 17}}},
	{"transactional", segment.BuildOptions{
		Producer:      &segment.ProducerFields{ID: 1 << 40, Epoch: 32000, BaseSequence: 2147483000},
		Transactional: true,
	}},
	{"control", segment.BuildOptions{Producer: &segment.ProducerFields{ID: 9, Epoch: 0, BaseSequence: -1},
		Transactional: true, Control: true}},
}

// records covers null and empty keys and values, null header values,
// negative timestamp deltas, and a value larger than one 64 KiB LZ4 block.
func records() []segment.Record {
	return []segment.Record{
		{Timestamp: 1700000000000, Key: []byte("key"), Value: []byte("value"),
			Headers: []segment.Header{{Key: "trace", Value: []byte("abc")}, {Key: "null", Value: nil}}},
		{Timestamp: 1699999999000, Key: nil, Value: []byte{}},
		{Timestamp: 1700000005000, Key: []byte{}, Value: nil},
		{Timestamp: 1700000000001, Value: bytes.Repeat([]byte("0123456789abcdef"), 9000),
			Headers: []segment.Header{{Key: "", Value: []byte{}}}},
		{Timestamp: -1, Key: []byte{0}, Value: []byte{0xff}},
	}
}

func attributes(c segment.Codec, o segment.BuildOptions) int16 {
	a := int16(c)
	if o.Transactional {
		a |= 0x10
	}
	if o.Control {
		a |= 0x20
	}
	return a
}

func producer(o segment.BuildOptions) segment.ProducerFields {
	if o.Producer == nil {
		return segment.ProducerFields{ID: -1, Epoch: -1, BaseSequence: -1}
	}
	return *o.Producer
}

// TestStrandToFranz builds batches with Strand and decodes them with kmsg
// and kgo's decompressor.
func TestStrandToFranz(t *testing.T) {
	for _, c := range codecs {
		for _, h := range headers {
			t.Run(c.strand.String()+"/"+h.name, func(t *testing.T) {
				opts := h.opts
				opts.Codec = c.strand
				checkStrandToFranz(t, records(), opts, c.typ)
			})
		}
	}
}

// TestFranzToStrand builds batches with kmsg, compresses them with kgo's
// compressor (pierrec/lz4 with its own defaults, compress/gzip), and reads
// them with Strand.
func TestFranzToStrand(t *testing.T) {
	for _, c := range codecs {
		for _, h := range headers {
			t.Run(c.strand.String()+"/"+h.name, func(t *testing.T) {
				checkFranzToStrand(t, records(), h.opts, c.strand, c.franz, c.typ)
			})
		}
	}
}

// maxTimestamp is a batch's MaxTimestamp as Kafka's MemoryRecordsBuilder
// computes it: the largest of its records' timestamps, or -1 (none) if
// none is larger.
func maxTimestamp(recs []segment.Record) int64 {
	m := int64(-1)
	for _, r := range recs {
		m = max(m, r.Timestamp)
	}
	return m
}

// checkStrandToFranz builds recs into a batch with Strand and checks every
// field kmsg decodes from it, and every record kgo's decompressor and kmsg
// find in it.
func checkStrandToFranz(t *testing.T, recs []segment.Record, opts segment.BuildOptions, typ kgo.CompressionCodecType) {
	t.Helper()
	raw, err := segment.AppendBatch(nil, recs, opts)
	require.NoError(t, err)
	segment.Batch(raw).SetBaseOffset(1000)
	segment.Batch(raw).SetPartitionLeaderEpoch(5)

	var kb kmsg.RecordBatch
	require.NoError(t, kb.ReadFrom(raw))
	p := producer(opts)
	assert.Equal(t, int64(1000), kb.FirstOffset)
	assert.Equal(t, int32(len(raw)-12), kb.Length)
	assert.Equal(t, int32(5), kb.PartitionLeaderEpoch)
	assert.Equal(t, int8(2), kb.Magic)
	assert.Equal(t, crc32.Checksum(raw[21:], castagnoli), uint32(kb.CRC))
	assert.Equal(t, attributes(opts.Codec, opts), kb.Attributes)
	assert.Equal(t, int32(len(recs)-1), kb.LastOffsetDelta)
	assert.Equal(t, recs[0].Timestamp, kb.FirstTimestamp)
	assert.Equal(t, maxTimestamp(recs), kb.MaxTimestamp)
	assert.Equal(t, p.ID, kb.ProducerID)
	assert.Equal(t, p.Epoch, kb.ProducerEpoch)
	assert.Equal(t, p.BaseSequence, kb.FirstSequence)
	assert.Equal(t, int32(len(recs)), kb.NumRecords)
	assert.Equal(t, raw, kb.AppendTo(nil), "kmsg re-encodes the same bytes")

	section, err := kgo.DefaultDecompressor().Decompress(kb.Records, typ)
	require.NoError(t, err)
	got := readKmsgRecords(t, section)
	require.Len(t, got, len(recs))
	for i, want := range recs {
		kr := got[i]
		assert.Equal(t, int8(0), kr.Attributes)
		assert.Equal(t, int32(i), kr.OffsetDelta, "record %d", i)
		assert.Equal(t, want.Timestamp-recs[0].Timestamp, kr.TimestampDelta64, "record %d", i)
		assertBytes(t, want.Key, kr.Key, "record %d key", i)
		assertBytes(t, want.Value, kr.Value, "record %d value", i)
		require.Len(t, kr.Headers, len(want.Headers), "record %d", i)
		for j, wh := range want.Headers {
			assert.Equal(t, wh.Key, kr.Headers[j].Key)
			assertBytes(t, wh.Value, kr.Headers[j].Value, "record %d header %d", i, j)
		}
	}
}

// checkFranzToStrand builds recs into a batch with kmsg and kgo's
// compressor, and checks every field and record Strand reads from it; an
// uncompressed batch must also be the bytes Strand builds.
func checkFranzToStrand(t *testing.T, recs []segment.Record, opts segment.BuildOptions,
	codec segment.Codec, franz kgo.CompressionCodec, typ kgo.CompressionCodecType) {
	t.Helper()
	p := producer(opts)
	raw := franzBatch(t, recs, franz, typ, kmsg.RecordBatch{
		FirstOffset:          77,
		PartitionLeaderEpoch: 3,
		Attributes:           attributes(codec, opts),
		ProducerID:           p.ID,
		ProducerEpoch:        p.Epoch,
		FirstSequence:        p.BaseSequence,
	})

	b, rest, err := segment.ParseBatch(raw)
	require.NoError(t, err)
	assert.Empty(t, rest)
	require.NoError(t, b.Validate())
	assert.Equal(t, int64(77), b.BaseOffset())
	assert.Equal(t, len(raw), b.Size())
	assert.Equal(t, int32(3), b.PartitionLeaderEpoch())
	assert.Equal(t, codec, b.Codec())
	assert.Equal(t, opts.Transactional, b.Transactional())
	assert.Equal(t, opts.Control, b.Control())
	assert.False(t, b.LogAppendTime())
	assert.Equal(t, int32(len(recs)-1), b.LastOffsetDelta())
	assert.Equal(t, int64(77+len(recs)-1), b.LastOffset())
	assert.Equal(t, recs[0].Timestamp, b.BaseTimestamp())
	assert.Equal(t, maxTimestamp(recs), b.MaxTimestamp())
	assert.Equal(t, p.ID, b.ProducerID())
	assert.Equal(t, p.Epoch, b.ProducerEpoch())
	assert.Equal(t, p.BaseSequence, b.BaseSequence())
	assert.Equal(t, int32(len(recs)), b.NumRecords())

	i := 0
	for got, err := range b.Records() {
		require.NoError(t, err)
		require.Less(t, i, len(recs), "more records than were built")
		want := recs[i]
		assert.Equal(t, int64(77+i), got.Offset)
		assert.Equal(t, want.Timestamp, got.Timestamp)
		assertBytes(t, want.Key, got.Key, "record %d key", i)
		assertBytes(t, want.Value, got.Value, "record %d value", i)
		require.Len(t, got.Headers, len(want.Headers))
		for j, wh := range want.Headers {
			assert.Equal(t, wh.Key, got.Headers[j].Key)
			assertBytes(t, wh.Value, got.Headers[j].Value, "record %d header %d", i, j)
		}
		i++
	}
	assert.Equal(t, len(recs), i)

	if codec == segment.CodecNone {
		// Uncompressed, the two encoders agree byte for byte.
		opts.BaseOffset = 77
		ours, err := segment.AppendBatch(nil, recs, opts)
		require.NoError(t, err)
		segment.Batch(ours).SetPartitionLeaderEpoch(3)
		assert.Equal(t, raw, ours)
	}
}

// Snappy and zstd batches, which Strand does not decode, parse, validate and
// pass through untouched; reading their records fails with a typed error.
func TestFranzSnappyZstdPassThrough(t *testing.T) {
	for _, c := range []struct {
		strand segment.Codec
		franz  kgo.CompressionCodec
		typ    kgo.CompressionCodecType
	}{
		{segment.CodecSnappy, kgo.SnappyCompression(), kgo.CodecSnappy},
		{segment.CodecZstd, kgo.ZstdCompression(), kgo.CodecZstd},
	} {
		t.Run(c.strand.String(), func(t *testing.T) {
			raw := franzBatch(t, records(), c.franz, c.typ, kmsg.RecordBatch{
				Attributes: int16(c.strand), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
			})
			orig := bytes.Clone(raw)
			b, _, err := segment.ParseBatch(raw)
			require.NoError(t, err)
			require.NoError(t, b.Validate())
			b.SetBaseOffset(500)
			b.SetPartitionLeaderEpoch(8)
			require.NoError(t, b.Validate(), "stamping keeps the CRC valid")
			assert.Equal(t, orig[21:], raw[21:], "the CRC-covered bytes are untouched")

			n := 0
			for _, err := range b.Records() {
				var ce *segment.CodecError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, c.strand, ce.Codec)
				assert.ErrorIs(t, err, segment.ErrUnsupportedCodec)
				n++
			}
			assert.Equal(t, 1, n, "one error ends the iteration")
		})
	}
}

// franzBatch encodes recs with kmsg into batch, compresses them with kgo,
// fills the derived header fields and sets the CRC.
func franzBatch(t *testing.T, recs []segment.Record, codec kgo.CompressionCodec,
	typ kgo.CompressionCodecType, batch kmsg.RecordBatch) []byte {
	t.Helper()
	var section []byte
	for i, r := range recs {
		kr := kmsg.Record{
			TimestampDelta64: r.Timestamp - recs[0].Timestamp,
			OffsetDelta:      int32(i),
			Key:              r.Key,
			Value:            r.Value,
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		// Length counts what follows it; encoded as 0 it takes one byte.
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		section = kr.AppendTo(section)
	}
	if typ != kgo.CodecNone {
		comp, err := kgo.DefaultCompressor(codec)
		require.NoError(t, err)
		var used kgo.CompressionCodecType
		section, used = comp.Compress(new(bytes.Buffer), section)
		require.Equal(t, typ, used)
		section = bytes.Clone(section)
	}
	batch.Magic = 2
	batch.MaxTimestamp = maxTimestamp(recs)
	batch.Length = int32(49 + len(section))
	batch.LastOffsetDelta = int32(len(recs) - 1)
	batch.FirstTimestamp = recs[0].Timestamp
	batch.NumRecords = int32(len(recs))
	batch.Records = section
	raw := batch.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], castagnoli))
	return raw
}

// readKmsgRecords splits a records section at each record's length prefix
// and decodes each record with kmsg.
func readKmsgRecords(t *testing.T, section []byte) []kmsg.Record {
	t.Helper()
	var out []kmsg.Record
	for len(section) > 0 {
		length, n := binary.Varint(section)
		require.Positive(t, n, "record length varint")
		end := n + int(length)
		require.LessOrEqual(t, end, len(section))
		var kr kmsg.Record
		require.NoError(t, kr.ReadFrom(section[:end]))
		require.Equal(t, int32(length), kr.Length)
		out = append(out, kr)
		section = section[end:]
	}
	return out
}

// assertBytes compares byte fields, telling null from empty.
func assertBytes(t *testing.T, want, got []byte, msgAndArgs ...any) {
	t.Helper()
	assert.Equal(t, want == nil, got == nil, msgAndArgs...)
	assert.Equal(t, want, got, msgAndArgs...)
}
