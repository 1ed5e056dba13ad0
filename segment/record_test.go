package segment

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var writableCodecs = []Codec{CodecNone, CodecGzip, CodecLZ4}

func TestRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("strand "), 30000) // > one 64 KiB lz4 block
	recs := []Record{
		{Timestamp: 1000, Key: []byte("key"), Value: []byte("value")},
		{Timestamp: 990, Key: []byte{}, Value: nil},               // empty key, tombstone
		{Timestamp: math.MinInt64 + 5, Key: nil, Value: []byte{}}, // null key, empty value
		{Timestamp: math.MaxInt64, Value: big},                    // extreme deltas wrap
		{Headers: []Header{{Key: "null", Value: nil}, {Key: "", Value: []byte{}}, {Key: "k", Value: []byte("v")}}},
	}
	for _, c := range writableCodecs {
		t.Run(c.String(), func(t *testing.T) {
			b := mustBuild(t, recs, BuildOptions{Codec: c, BaseOffset: 500})
			require.NoError(t, b.Validate())
			assert.Equal(t, c, b.Codec())
			assert.Equal(t, int64(math.MaxInt64), b.MaxTimestamp())
			got := collect(t, b)
			require.Len(t, got, len(recs))
			for i, want := range recs {
				want.Offset = 500 + int64(i)
				assert.Equal(t, want, got[i], "record %d", i)
			}
			// assert.Equal treats nil and empty as equal; nullness is the point here.
			assert.NotNil(t, got[1].Key, "empty key stays empty, not null")
			assert.Nil(t, got[1].Value, "tombstone value stays null")
			assert.Nil(t, got[2].Key)
			assert.NotNil(t, got[2].Value)
			assert.Nil(t, got[4].Headers[0].Value)
			assert.NotNil(t, got[4].Headers[1].Value)
			assert.Nil(t, got[0].Headers, "no headers decode as nil")
		})
	}
}

func TestCompressionShrinks(t *testing.T) {
	recs := []Record{{Value: bytes.Repeat([]byte("compressible "), 1000)}}
	plain := mustBuild(t, recs, BuildOptions{})
	for _, c := range []Codec{CodecGzip, CodecLZ4} {
		assert.Less(t, len(mustBuild(t, recs, BuildOptions{Codec: c})), len(plain)/10, "%v", c)
	}
}

// The frame must be the one the Java client writes and reads:
// version 1, independent blocks, no checksums, 64 KiB blocks
// (apache/kafka:clients/.../common/compress/Lz4BlockOutputStream.java).
func TestLZ4FrameIsKafkas(t *testing.T) {
	b := mustBuild(t, []Record{{Value: []byte("x")}}, BuildOptions{Codec: CodecLZ4})
	frame := b[HeaderSize:]
	assert.Equal(t, []byte{0x04, 0x22, 0x4d, 0x18}, []byte(frame[:4]), "magic 0x184D2204, little-endian")
	assert.Equal(t, byte(0x60), frame[4], "FLG: version 01, block independence")
	assert.Equal(t, byte(0x40), frame[5], "BD: 64 KiB blocks")
	assert.Equal(t, []byte{0, 0, 0, 0}, []byte(frame[len(frame)-4:]), "end mark, no content checksum")
}

func TestRecordsAliasUncompressedBatch(t *testing.T) {
	b := mustBuild(t, []Record{{Key: []byte("k"), Value: []byte("value")}, {Value: []byte("next")}}, BuildOptions{})
	r, err := first(b)
	require.NoError(t, err)
	assert.Equal(t, len(r.Value), cap(r.Value), "appending to a value must not overwrite the next field")
	i := bytes.Index(b, []byte("value"))
	b[i] = 'V'
	assert.Equal(t, "Value", string(r.Value), "values alias the batch")
}

func TestKeepOffsets(t *testing.T) {
	recs := []Record{{Offset: 102, Value: []byte("a")}, {Offset: 105}, {Offset: 100 + math.MaxInt32}}
	b := mustBuild(t, recs, BuildOptions{BaseOffset: 100, KeepOffsets: true})
	assert.Equal(t, int64(100), b.BaseOffset(), "compaction keeps the original base offset")
	assert.Equal(t, int64(100+math.MaxInt32), b.LastOffset())
	var offsets []int64
	for _, r := range collect(t, b) {
		offsets = append(offsets, r.Offset)
	}
	assert.Equal(t, []int64{102, 105, 100 + math.MaxInt32}, offsets)
}

func TestAppendBatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs []Record
		opts BuildOptions
		want error
		msg  string
	}{
		{"no records", nil, BuildOptions{}, ErrInvalidRecords, "segment: invalid records: a batch needs at least one record"},
		{"transactional without producer", []Record{{}}, BuildOptions{Transactional: true}, ErrInvalidRecords,
			"a transactional batch needs a producer"},
		{"snappy", []Record{{}}, BuildOptions{Codec: CodecSnappy}, ErrUnsupportedCodec,
			"segment: building a batch: unsupported codec snappy"},
		{"zstd", []Record{{}}, BuildOptions{Codec: CodecZstd}, ErrUnsupportedCodec, "unsupported codec zstd"},
		{"unknown codec", []Record{{}}, BuildOptions{Codec: 7}, ErrUnsupportedCodec, "unsupported codec Codec(7)"},
		{"offset below base", []Record{{Offset: 9}}, BuildOptions{BaseOffset: 10, KeepOffsets: true}, ErrInvalidRecords,
			"segment: invalid records: record 0: offset 9 outside [base offset 10, base offset + 2^31)"},
		{"offsets repeat", []Record{{Offset: 3}, {Offset: 3}}, BuildOptions{KeepOffsets: true}, ErrInvalidRecords,
			"record 1: offset 3 does not follow offset 3"},
		{"offset delta past int32", []Record{{Offset: math.MaxInt32 + 1}}, BuildOptions{KeepOffsets: true},
			ErrInvalidRecords, "record 0: offset 2147483648 outside [base offset 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("prefix")
			out, err := AppendBatch(dst, tc.recs, tc.opts)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, "prefix", string(out), "dst is returned unchanged")
		})
	}
}

func TestCodecErrorIsTyped(t *testing.T) {
	_, err := AppendBatch(nil, []Record{{}}, BuildOptions{Codec: CodecZstd})
	var ce *CodecError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodecZstd, ce.Codec)

	// Stored zstd and unknown-codec batches parse and validate, and fail
	// only when decoded.
	for _, c := range []Codec{CodecSnappy, CodecZstd, 5} {
		b := mustBuild(t, []Record{{}}, BuildOptions{})
		binary.BigEndian.PutUint16(b[offAttributes:], uint16(c))
		fixCRC(b)
		require.NoError(t, b.Validate())
		_, err := first(b)
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, c, ce.Codec)
		assert.ErrorIs(t, err, ErrUnsupportedCodec)
		assert.Contains(t, err.Error(), "segment: batch at base offset 0: unsupported codec")
	}
}

func TestAppendBatchAppends(t *testing.T) {
	for _, c := range writableCodecs {
		dst := []byte("prefix")
		out, err := AppendBatch(dst, goldenRecords, BuildOptions{Codec: c})
		require.NoError(t, err)
		assert.Equal(t, "prefix", string(out[:6]))
		b, rest, err := ParseBatch(out[6:])
		require.NoError(t, err)
		assert.Empty(t, rest)
		assert.NoError(t, b.Validate())
	}
}

// raceEnabled is set by race_test.go. The race detector makes sync.Pool
// drop items at random, so pooled compressors are reallocated.
var raceEnabled bool

// Building into a reused buffer allocates nothing, so a log can build
// batches on its hot path; compressed builds reuse pooled compressors.
func TestAppendBatchAllocations(t *testing.T) {
	recs := benchRecords()
	for _, c := range writableCodecs {
		if c != CodecNone && raceEnabled {
			continue
		}
		buf, err := AppendBatch(nil, recs, BuildOptions{Codec: c})
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(50, func() {
			buf, err = AppendBatch(buf[:0], recs, BuildOptions{Codec: c})
		})
		require.NoError(t, err)
		assert.Zero(t, allocs, "%v", c)
	}
}

func TestVarintLen(t *testing.T) {
	for _, v := range []int64{0, -1, 1, 63, -64, 64, -65, 8191, 8192, math.MaxInt32, math.MinInt32,
		math.MaxInt64, math.MinInt64} {
		assert.Equal(t, len(binary.AppendVarint(nil, v)), varintLen(v), "%d", v)
	}
}

// Hand-encoded records sections, each in a batch with a valid CRC so that
// only record decoding objects. Some would fail Validate's count check, but
// Records must defend itself: nothing makes callers validate first.
func TestRecordsCorrupt(t *testing.T) {
	// rec encodes a record body with the given raw fields.
	rec := func(fields ...[]byte) []byte {
		body := bytes.Join(fields, nil)
		return append(binary.AppendVarint(nil, int64(len(body))), body...)
	}
	v := func(x int64) []byte { return binary.AppendVarint(nil, x) }
	ok := rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(0))
	for _, tc := range []struct {
		name    string
		records []byte
		count   int32
		msg     string
	}{
		{"key length below int32", rec([]byte{0}, v(0), v(0), v(math.MinInt32-1), v(-1), v(0)), 1,
			"record 0 at byte 65 of the batch: key length -2147483649 out of range [-2147483648, 2147483647]"},
		{"value longer than the record", rec([]byte{0}, v(0), v(0), v(-1), v(10), v(0)), 1,
			"value length 10, record has 1 bytes left"},
		{"header count beyond bytes", rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(5), v(0)), 1,
			"record 0 at byte 68 of the batch: 5 headers cannot fit in 1 bytes"},
		{"null header key", rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), v(-1), v(-1)), 1,
			"header 0 key length -1 out of range [0, 2147483647]"},
		{"header value cut", rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), v(0), v(4)), 1,
			"header 0 value length 4, record has 0 bytes left"},
		{"unterminated varint", append(v(5), 0, 0x80, 0x80, 0x80, 0x80), 1, "timestamp delta: bad varint"},
		{"varint past the record", append(rec([]byte{0}, []byte{0x80}), 0), 1, "timestamp delta: bad varint"},
		{"record length past the end", append(v(50), 0, 0), 1, "record length 50, 2 bytes left"},
		{"zero record length", v(0), 1, "record length 0 out of range [1, 2147483647]"},
		{"fields shorter than length", rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(0), []byte{9}), 1,
			"record length 7 but its fields take 6 bytes"},
		{"fewer records than counted", ok, 2, "record 1 at byte 68 of the batch: record length: bad varint"},
		{"bytes after the last record", append(ok, 0), 1, "record 1 at byte 68 of the batch: 1 bytes after the last record"},
		{"offset delta past last", rec([]byte{0}, v(0), v(2), v(-1), v(-1), v(0)), 1,
			"offset delta 2 out of range [0, 1]"},
		{"offset delta repeats", append(ok, ok...), 2, "record 1 at byte 71 of the batch: offset delta 0 out of range [1, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lastErr(rawBatch(tc.records, tc.count, 1, CodecNone))
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), "segment: corrupt batch at base offset 7: ")
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestRecordsCorruptCompressed(t *testing.T) {
	plain := mustBuild(t, goldenRecords, BuildOptions{})
	gz, err := compress(nil, append(plain[HeaderSize:], 0), CodecGzip)
	require.NoError(t, err)
	b := rawBatch(gz, 2, 1, CodecGzip)
	_, err = lastErr(b)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "record 2 at byte 20 of the decompressed records: 1 bytes after the last record")

	for name, stream := range map[string][]byte{
		"not gzip":  []byte("plain text"),
		"truncated": gz[:len(gz)-5],
	} {
		_, err := lastErr(rawBatch(stream, 2, 1, CodecGzip))
		require.ErrorIs(t, err, ErrCorrupt, name)
		assert.Contains(t, err.Error(), "segment: corrupt batch at base offset 7: gzip stream", name)
	}
	lz, err := compress(nil, plain[HeaderSize:], CodecLZ4)
	require.NoError(t, err)
	_, err = lastErr(rawBatch(lz[:len(lz)-6], 2, 1, CodecLZ4))
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "lz4 stream")
}

func TestRecordsStopsWhenAsked(t *testing.T) {
	b := mustBuild(t, make([]Record, 10), BuildOptions{})
	n := 0
	for range b.Records() {
		n++
		if n == 3 {
			break
		}
	}
	assert.Equal(t, 3, n)
}

// Kafka reads any negative length of a key, value or header value as null,
// not only -1 (Utils.readBytes, called by DefaultRecord.readFrom and
// readHeaders), and its broker stores such records as they came; franz-go
// reads them so too (kbin.Reader.VarintBytes). Strand reads them as null,
// with either decoder, and writes them back as -1. A header key is not
// nullable: a negative length is refused there, as Kafka refuses it.
func TestRecordsNegativeLengthIsNull(t *testing.T) {
	rec := func(fields ...[]byte) []byte {
		body := bytes.Join(fields, nil)
		return append(binary.AppendVarint(nil, int64(len(body))), body...)
	}
	v := func(x int64) []byte { return binary.AppendVarint(nil, x) }
	records := append(rec([]byte{0}, v(0), v(0), v(-2), v(math.MinInt32), v(0)),
		rec([]byte{0}, v(0), v(1), v(1), []byte("k"), v(-7), v(1), v(1), []byte("h"), v(-100))...)
	b := rawBatch(records, 2, 1, CodecNone)
	want := []Record{
		{Offset: 7},
		{Offset: 8, Key: []byte("k"), Headers: []Header{{Key: "h"}}},
	}
	for name, read := range map[string]func(Batch) ([]Record, error){"Records": readAll, "field by field": readCarefully} {
		got, err := read(b)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
		for i := range got {
			assert.Nil(t, got[i].Value, "%s: record %d value", name, i)
		}
		assert.Nil(t, got[0].Key, name)
		assert.Nil(t, got[1].Headers[0].Value, name)
	}

	_, err := lastErr(rawBatch(rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), v(-2), v(-1)), 1, 0, CodecNone))
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "header 0 key length -2 out of range [0, 2147483647]")
}

// Kafka reads a record's 32-bit varints (length, offset delta, key, value
// and header lengths, header count) from at most 5 bytes and refuses a
// longer one even if its value would fit (ByteUtils.readUnsignedVarint); its
// timestamp delta is a varlong of at most 10 bytes (readUnsignedVarlong). A
// batch Strand accepted with a longer varint could not be read by Kafka's
// consumers, so both decoders refuse it.
func TestRecordsOverlongVarint(t *testing.T) {
	rec := func(fields ...[]byte) []byte {
		body := bytes.Join(fields, nil)
		return append(binary.AppendVarint(nil, int64(len(body))), body...)
	}
	v := func(x int64) []byte { return binary.AppendVarint(nil, x) }
	five := []byte{0x80, 0x80, 0x80, 0x80, 0x00} // 0 in 5 bytes, as long as Kafka reads
	six := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}
	ten := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}
	read := map[string]func(Batch) ([]Record, error){"Records": readAll, "field by field": readCarefully}
	for name, tc := range map[string]struct{ ok, long []byte }{
		"offset delta": {rec([]byte{0}, v(0), five, v(-1), v(-1), v(0)), rec([]byte{0}, v(0), six, v(-1), v(-1), v(0))},
		"key length":   {rec([]byte{0}, v(0), v(0), five, v(-1), v(0)), rec([]byte{0}, v(0), v(0), six, v(-1), v(0))},
		"value length": {rec([]byte{0}, v(0), v(0), v(-1), five, v(0)), rec([]byte{0}, v(0), v(0), v(-1), six, v(0))},
		"header count": {rec([]byte{0}, v(0), v(0), v(-1), v(-1), five), rec([]byte{0}, v(0), v(0), v(-1), v(-1), six)},
		"header key length": {rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), five, v(-1)),
			rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), six, v(-1))},
		"header value length": {rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), v(0), five),
			rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(1), v(0), six)},
		"record length": {append([]byte{0x8c, 0x80, 0x80, 0x80, 0x00}, rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(0))[1:]...),
			append([]byte{0x8c, 0x80, 0x80, 0x80, 0x80, 0x00}, rec([]byte{0}, v(0), v(0), v(-1), v(-1), v(0))[1:]...)},
		"timestamp delta": {rec([]byte{0}, ten, v(0), v(-1), v(-1), v(0)), nil},
	} {
		for how, read := range read {
			_, err := read(rawBatch(tc.ok, 1, 0, CodecNone))
			require.NoError(t, err, "%s: %s", name, how)
			if tc.long == nil {
				continue
			}
			_, err = read(rawBatch(tc.long, 1, 0, CodecNone))
			require.ErrorIs(t, err, ErrCorrupt, "%s: %s", name, how)
			assert.Contains(t, err.Error(), "bad varint", "%s: %s", name, how)
		}
	}
}

// rawBatch wraps a hand-made records section in a header with base offset
// 7 and a valid CRC.
func rawBatch(records []byte, count, lastOffsetDelta int32, c Codec) Batch {
	b := make(Batch, HeaderSize, HeaderSize+len(records))
	b = append(b, records...)
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], 7)
	be.PutUint32(b[offLength:], uint32(len(b)-lengthOverhead))
	b[offMagic] = Magic
	be.PutUint16(b[offAttributes:], uint16(c))
	be.PutUint32(b[offLastOffsetDelta:], uint32(lastOffsetDelta))
	be.PutUint32(b[offNumRecords:], uint32(count))
	return fixCRC(b)
}

// lastErr iterates over all of b's records and returns how many there were
// and the error that ended the iteration, if any.
func lastErr(b Batch) (n int, err error) {
	for _, e := range b.Records() {
		if e != nil {
			return n, e
		}
		n++
	}
	return n, nil
}
