package segment

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goldenBatch is a transactional batch of two records laid out by hand from
// the field tables in apache/kafka DefaultRecordBatch.java and
// DefaultRecord.java. Its CRC was computed apart from this package, with a
// bit-by-bit CRC-32C (polynomial 0x82F63B78) that reproduces the CRC of
// IBM/sarama's "uncompressed record" vector.
var goldenBatch = []byte{
	0, 0, 0, 0, 0, 0, 0, 42, // base offset 42
	0, 0, 0, 69, // length: 81 bytes - 12
	0xff, 0xff, 0xff, 0xff, // partition leader epoch -1
	2,                      // magic
	0xd4, 0x53, 0xa2, 0x15, // CRC-32C of the bytes from here on
	0, 0x10, // attributes: transactional
	0, 0, 0, 1, // last offset delta
	0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0, // base timestamp 1700000000000
	0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0, // max timestamp 1700000000000
	0, 0, 0, 0, 0, 0, 0, 7, // producer id 7
	0, 1, // producer epoch 1
	0, 0, 0, 100, // base sequence 100
	0, 0, 0, 2, // 2 records
	// record 0
	0x18,   // length 12
	0,      // attributes
	0,      // timestamp delta 0
	0,      // offset delta 0
	2, 'k', // key "k"
	4, 'v', '1', // value "v1"
	2,      // 1 header
	2, 'h', // header key "h"
	1, // header value null (-1)
	// record 1
	0x0c, // length 6
	0,    // attributes
	0x13, // timestamp delta -10
	2,    // offset delta 1
	1,    // key null (-1)
	0,    // value empty
	0,    // no headers
}

var goldenRecords = []Record{
	{Offset: 42, Timestamp: 1700000000000, Key: []byte("k"), Value: []byte("v1"), Headers: []Header{{Key: "h"}}},
	{Offset: 43, Timestamp: 1700000000000 - 10, Value: []byte{}},
}

var goldenOptions = BuildOptions{
	BaseOffset:    42,
	Producer:      &ProducerFields{ID: 7, Epoch: 1, BaseSequence: 100},
	Transactional: true,
}

func TestGoldenBatchBuild(t *testing.T) {
	got, err := AppendBatch(nil, goldenRecords, goldenOptions)
	require.NoError(t, err)
	assert.Equal(t, goldenBatch, got)
}

func TestGoldenBatchParse(t *testing.T) {
	b, rest, err := ParseBatch(goldenBatch)
	require.NoError(t, err)
	assert.Empty(t, rest)
	require.NoError(t, b.Validate())
	assert.Equal(t, goldenRecords, collect(t, b))
}

// Vectors from IBM/sarama:record_test.go (recordBatchTestCases), written by
// an independent Go client. Their producer fields are 0 rather than -1 and
// their max timestamp is 0, which is fine for parsing.
var (
	saramaRecordSection = []byte{
		0, 0, 0, 0, 0, 0, 0, 0, // producer id
		0, 0, // producer epoch
		0, 0, 0, 0, // base sequence
		0, 0, 0, 1, // 1 record
	}
	saramaUncompressed = saramaBatch(70, [4]byte{84, 121, 97, 253}, 0, []byte{
		40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12,
	})
	saramaGzip = saramaBatch(95, [4]byte{231, 74, 206, 165}, 1, []byte{
		31, 139, 8, 0, 0, 9, 110, 136, 0, 255, 0, 21, 0, 234, 255, 40, 0, 10, 0, 8, 1, 2,
		3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12, 3, 0, 173, 201, 88, 103, 21, 0, 0, 0,
	})
	saramaSnappy = saramaBatch(72, [4]byte{21, 0, 159, 97}, 2, []byte{
		21, 80, 40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2, 6, 8, 9, 10, 4, 11, 12,
	})
	saramaLZ4 = saramaBatch(89, [4]byte{169, 74, 119, 197}, 3, []byte{
		4, 34, 77, 24, 100, 112, 185, 21, 0, 0, 128, 40, 0, 10, 0, 8, 1, 2, 3, 4, 6, 5, 6, 7, 2,
		6, 8, 9, 10, 4, 11, 12, 0, 0, 0, 0, 12, 59, 239, 146,
	})
	saramaRecord = Record{
		Timestamp: 1479847795000 + 5,
		Key:       []byte{1, 2, 3, 4},
		Value:     []byte{5, 6, 7},
		Headers:   []Header{{Key: "\x08\x09\x0a", Value: []byte{11, 12}}},
	}
)

// saramaBatch assembles one of sarama's vectors: base offset 0, partition
// leader epoch 0, base timestamp 1479847795000, max timestamp 0.
func saramaBatch(length uint32, crc [4]byte, codec byte, records []byte) []byte {
	b := []byte{0, 0, 0, 0, 0, 0, 0, 0}
	b = binary.BigEndian.AppendUint32(b, length)
	b = append(b, 0, 0, 0, 0, 2)
	b = append(b, crc[:]...)
	b = append(b, 0, codec, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, 1479847795000)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = append(b, saramaRecordSection...)
	return append(b, records...)
}

func TestSaramaVectors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch []byte
		codec Codec
	}{
		{"uncompressed", saramaUncompressed, CodecNone},
		{"gzip", saramaGzip, CodecGzip},
		{"lz4", saramaLZ4, CodecLZ4},
		{"snappy", saramaSnappy, CodecSnappy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, rest, err := ParseBatch(tc.batch)
			require.NoError(t, err)
			assert.Empty(t, rest)
			require.NoError(t, b.Validate(), "CRC must match sarama's")
			assert.Equal(t, tc.codec, b.Codec())
			assert.Equal(t, int64(1479847795000), b.BaseTimestamp())
			assert.Equal(t, int32(1), b.NumRecords())
			if tc.codec == CodecSnappy {
				var ce *CodecError
				_, err := first(b)
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, CodecSnappy, ce.Codec)
				return
			}
			assert.Equal(t, []Record{saramaRecord}, collect(t, b))
		})
	}
}

func TestHeaderFields(t *testing.T) {
	recs := []Record{{Timestamp: 100}, {Timestamp: 300}, {Timestamp: 200}}
	producer := &ProducerFields{ID: 1 << 40, Epoch: 3, BaseSequence: math.MaxInt32 - 1}
	for _, tc := range []struct {
		name string
		opts BuildOptions
		want func(t *testing.T, b Batch)
	}{
		{"defaults are a plain producer's", BuildOptions{}, func(t *testing.T, b Batch) {
			assert.Equal(t, int64(0), b.BaseOffset())
			assert.Equal(t, int32(-1), b.PartitionLeaderEpoch())
			assert.Equal(t, int64(-1), b.ProducerID())
			assert.Equal(t, int16(-1), b.ProducerEpoch())
			assert.Equal(t, int32(-1), b.BaseSequence())
			assert.Equal(t, CodecNone, b.Codec())
			assert.False(t, b.Transactional())
			assert.False(t, b.Control())
			assert.False(t, b.LogAppendTime())
			_, ok := b.DeleteHorizon()
			assert.False(t, ok)
		}},
		{"base timestamp is the first record's, max the largest", BuildOptions{}, func(t *testing.T, b Batch) {
			assert.Equal(t, int64(100), b.BaseTimestamp())
			assert.Equal(t, int64(300), b.MaxTimestamp())
		}},
		{"offsets count from the base", BuildOptions{BaseOffset: 1000}, func(t *testing.T, b Batch) {
			assert.Equal(t, int64(1000), b.BaseOffset())
			assert.Equal(t, int32(2), b.LastOffsetDelta())
			assert.Equal(t, int64(1002), b.LastOffset())
			assert.Equal(t, int32(3), b.NumRecords())
		}},
		{"producer fields", BuildOptions{Producer: producer}, func(t *testing.T, b Batch) {
			assert.Equal(t, int64(1<<40), b.ProducerID())
			assert.Equal(t, int16(3), b.ProducerEpoch())
			assert.Equal(t, int32(math.MaxInt32-1), b.BaseSequence())
		}},
		{"transactional is bit 4", BuildOptions{Producer: producer, Transactional: true}, func(t *testing.T, b Batch) {
			assert.True(t, b.Transactional())
			assert.Equal(t, uint16(0x10), b.attributes())
		}},
		{"control is bit 5", BuildOptions{Control: true}, func(t *testing.T, b Batch) {
			assert.True(t, b.Control())
			assert.Equal(t, uint16(0x20), b.attributes())
		}},
		{"codec is bits 0-2", BuildOptions{Codec: CodecLZ4}, func(t *testing.T, b Batch) {
			assert.Equal(t, CodecLZ4, b.Codec())
			assert.Equal(t, uint16(3), b.attributes())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := AppendBatch(nil, recs, tc.opts)
			require.NoError(t, err)
			b := Batch(raw)
			require.NoError(t, b.Validate())
			assert.Equal(t, len(raw), b.Size())
			tc.want(t, b)
		})
	}
}

func TestAttributeBitsFromKafka(t *testing.T) {
	b := mustBuild(t, []Record{{Timestamp: 1}}, BuildOptions{})
	for _, tc := range []struct {
		attrs uint16
		check func(Batch) bool
	}{
		{0x08, Batch.LogAppendTime},
		{0x10, Batch.Transactional},
		{0x20, Batch.Control},
		{0x40, func(b Batch) bool { _, ok := b.DeleteHorizon(); return ok }},
	} {
		binary.BigEndian.PutUint16(b[offAttributes:], tc.attrs)
		assert.True(t, tc.check(b), "attributes %#x", tc.attrs)
		binary.BigEndian.PutUint16(b[offAttributes:], ^tc.attrs)
		assert.False(t, tc.check(b), "attributes %#x", ^tc.attrs)
	}
}

func TestDeleteHorizonIsTheBaseTimestamp(t *testing.T) {
	b := mustBuild(t, []Record{{Timestamp: 5000}, {Timestamp: 5007}}, BuildOptions{})
	binary.BigEndian.PutUint16(b[offAttributes:], attrDeleteHorizon)
	binary.BigEndian.PutUint64(b[offBaseTimestamp:], 9000)
	fixCRC(b)
	ms, ok := b.DeleteHorizon()
	assert.True(t, ok)
	assert.Equal(t, int64(9000), ms)
	// Record timestamps are deltas from whatever the field holds.
	recs := collect(t, b)
	assert.Equal(t, int64(9000), recs[0].Timestamp)
	assert.Equal(t, int64(9007), recs[1].Timestamp)
}

func TestSettersOutsideTheCRC(t *testing.T) {
	b := mustBuild(t, goldenRecords, BuildOptions{})
	crc := b.CRC()
	b.SetPartitionLeaderEpoch(17)
	b.SetBaseOffset(1 << 33)
	assert.Equal(t, int32(17), b.PartitionLeaderEpoch())
	assert.Equal(t, int64(1<<33), b.BaseOffset())
	assert.Equal(t, int64(1<<33+1), b.LastOffset())
	assert.Equal(t, crc, b.CRC())
	require.NoError(t, b.Validate())
	assert.Equal(t, int64(1<<33), collect(t, b)[0].Offset)
}

func TestSetLogAppendTime(t *testing.T) {
	b := mustBuild(t, goldenRecords, BuildOptions{Codec: CodecGzip})
	b.SetLogAppendTime(1234)
	require.NoError(t, b.Validate(), "the CRC must be recomputed")
	assert.True(t, b.LogAppendTime())
	assert.Equal(t, CodecGzip, b.Codec(), "other attribute bits are kept")
	assert.Equal(t, int64(1234), b.MaxTimestamp())
	for _, r := range collect(t, b) {
		assert.Equal(t, int64(1234), r.Timestamp, "every record takes the append time")
	}
}

func TestParseBatchSequence(t *testing.T) {
	var buf []byte
	for i := range 3 {
		var err error
		buf, err = AppendBatch(buf, []Record{{Value: make([]byte, i*10)}}, BuildOptions{BaseOffset: int64(i)})
		require.NoError(t, err)
	}
	rest := buf
	for i := range 3 {
		var b Batch
		var err error
		b, rest, err = ParseBatch(rest)
		require.NoError(t, err)
		require.NoError(t, b.Validate())
		assert.Equal(t, int64(i), b.BaseOffset())
		assert.Equal(t, HeaderSize+7+i*10, b.Size())
		assert.Equal(t, len(b), cap(b), "a batch must not let appends overwrite the next one")
	}
	assert.Empty(t, rest)
}

// A torn write leaves a prefix of the last batch: every prefix must read as
// short, never as corrupt, so recovery can tell the two apart.
func TestEveryPrefixIsShort(t *testing.T) {
	for n := range len(goldenBatch) {
		_, rest, err := ParseBatch(goldenBatch[:n])
		require.ErrorIs(t, err, ErrShortBatch, "prefix of %d bytes", n)
		assert.NotErrorIs(t, err, ErrCorrupt)
		assert.Len(t, rest, n, "rest is the input on error")
	}
}

func TestParseBatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func([]byte) []byte
		want   error
		msg    string
	}{
		{"length below the header", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLength:], 48)
			return b
		}, ErrCorrupt, "segment: corrupt batch at base offset 42: length field 48 is less than the minimum 49"},
		{"negative length", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLength:], math.MaxUint32)
			return b
		}, ErrCorrupt, "length field -1"},
		{"length past int32", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLength:], math.MaxInt32-11)
			return b
		}, ErrCorrupt, "segment: corrupt batch at base offset 42: length field 2147483636 makes the batch larger than 2147483647 bytes"},
		{"magic 1", func(b []byte) []byte { b[offMagic] = 1; return b }, ErrCorrupt,
			"segment: corrupt batch at base offset 42: magic 1, want 2"},
		{"wrong magic is corrupt once the byte is there", func(b []byte) []byte { b[offMagic] = 3; return b[:17] },
			ErrCorrupt, "magic 3"},
		{"length past the end", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLength:], 1000)
			return b
		}, ErrShortBatch, "segment: short batch at base offset 42: length field says 1012 bytes, have 81"},
		{"too short for a length", func(b []byte) []byte { return b[:11] }, ErrShortBatch,
			"segment: short batch: 11 bytes, a batch header needs 61"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.mutate(clone(goldenBatch))
			_, _, err := ParseBatch(in)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestParseBatchHeader(t *testing.T) {
	h, err := ParseBatchHeader(goldenBatch[:HeaderSize])
	require.NoError(t, err)
	assert.Len(t, h, HeaderSize)
	assert.Equal(t, len(goldenBatch), h.Size())
	assert.Equal(t, int64(43), h.LastOffset())
	assert.Equal(t, int64(1700000000000), h.MaxTimestamp())

	_, err = ParseBatchHeader(goldenBatch[:HeaderSize-1])
	assert.ErrorIs(t, err, ErrShortBatch)
	_, err = first(h)
	assert.ErrorIs(t, err, ErrShortBatch, "a header alone has no records to read")
	assert.ErrorIs(t, h.Validate(), ErrShortBatch)

	bad := clone(goldenBatch)
	bad[offMagic] = 0
	_, err = ParseBatchHeader(bad)
	assert.ErrorIs(t, err, ErrCorrupt)
}

func TestValidateErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(Batch) Batch
		want   error
		msg    string
	}{
		{"flipped record byte", func(b Batch) Batch { b[len(b)-3] ^= 1; return b }, ErrCorrupt,
			"segment: corrupt batch at base offset 42: crc mismatch: stored 0xd453a215, computed 0x"},
		{"flipped attribute", func(b Batch) Batch { b[offAttributes+1] ^= 0x08; return b }, ErrCorrupt, "crc mismatch"},
		{"flipped crc", func(b Batch) Batch { b[offCRC] ^= 0x80; return b }, ErrCorrupt, "stored 0x5453a215"},
		{"trailing bytes", func(b Batch) Batch { return append(b, 0) }, ErrCorrupt,
			"length field says 81 bytes, slice has 82"},
		{"missing bytes", func(b Batch) Batch { return b[:len(b)-1] }, ErrShortBatch,
			"length field says 81 bytes, have 80"},
		{"header cut", func(b Batch) Batch { return b[:HeaderSize-1] }, ErrShortBatch, "header needs 61 bytes, have 60"},
		{"negative last offset delta", func(b Batch) Batch {
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], math.MaxUint32)
			return fixCRC(b)
		}, ErrCorrupt, "negative last offset delta -1"},
		{"negative count", func(b Batch) Batch {
			binary.BigEndian.PutUint32(b[offNumRecords:], math.MaxUint32)
			return fixCRC(b)
		}, ErrCorrupt, "negative record count -1"},
		{"more records than offsets", func(b Batch) Batch {
			binary.BigEndian.PutUint32(b[offNumRecords:], 3)
			return fixCRC(b)
		}, ErrCorrupt, "3 records but last offset delta 1"},
		{"more records than bytes", func(b Batch) Batch {
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 100)
			binary.BigEndian.PutUint32(b[offNumRecords:], 3)
			return fixCRC(b)
		}, ErrCorrupt, "3 records cannot fit in 20 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.mutate(clone(goldenBatch)).Validate()
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// The count check cannot look inside compressed records, and compaction
// leaves empty batches whose last offset delta is kept.
func TestValidateAccepts(t *testing.T) {
	empty := clone(goldenBatch[:HeaderSize])
	binary.BigEndian.PutUint32(empty[offLength:], HeaderSize-lengthOverhead)
	binary.BigEndian.PutUint32(empty[offNumRecords:], 0)
	assert.NoError(t, fixCRC(empty).Validate())
	assert.Empty(t, collect(t, empty))

	gz := mustBuild(t, make([]Record, 50), BuildOptions{Codec: CodecGzip})
	assert.Less(t, len(gz)-HeaderSize, 50*minRecordSize)
	assert.NoError(t, gz.Validate())
}

func mustBuild(t testing.TB, recs []Record, opts BuildOptions) Batch {
	t.Helper()
	b, err := AppendBatch(nil, recs, opts)
	require.NoError(t, err)
	return b
}

// collect returns all records of b, failing the test on an error.
func collect(t testing.TB, b Batch) []Record {
	t.Helper()
	var recs []Record
	for r, err := range b.Records() {
		require.NoError(t, err)
		recs = append(recs, r)
	}
	return recs
}

// first returns the first record of b or the error that ends the iteration.
func first(b Batch) (Record, error) {
	for r, err := range b.Records() {
		return r, err
	}
	return Record{}, errors.New("no records")
}

func fixCRC(b Batch) Batch {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

func clone(b []byte) Batch { return append(Batch(nil), b...) }

// A record without a timestamp gets DefaultTimestamp, as if its producer
// had stamped it: the batch is the one built from stamped records, byte
// for byte, and the caller's records stay as they were.
func TestDefaultTimestampStampsRecordsWithout(t *testing.T) {
	const now = 1700000000123
	recs := []Record{{Value: []byte("a")}, {Timestamp: now - 5, Value: []byte("b")}, {Value: []byte("c")}}
	stamped := []Record{{Timestamp: now, Value: []byte("a")}, {Timestamp: now - 5, Value: []byte("b")}, {Timestamp: now, Value: []byte("c")}}
	want, err := AppendBatch(nil, stamped, BuildOptions{})
	require.NoError(t, err)

	got, err := AppendBatch(nil, recs, BuildOptions{DefaultTimestamp: now})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	b := Batch(got)
	assert.Equal(t, int64(now), b.BaseTimestamp())
	assert.Equal(t, int64(now), b.MaxTimestamp())
	assert.Zero(t, recs[0].Timestamp)
	assert.Zero(t, recs[2].Timestamp)
}

// A batch's max timestamp is the largest of its records', or -1 (no
// timestamp) when none is larger, as Kafka's MemoryRecordsBuilder starts
// it at NO_TIMESTAMP: records without timestamps, or with negative ones,
// make a batch that says it has none.
func TestMaxTimestampIsNoTimestampUnlessARecordHasOne(t *testing.T) {
	for _, c := range []struct {
		timestamps []int64
		want       int64
	}{
		{[]int64{5, 9, 7}, 9},
		{[]int64{-1, -1}, -1},
		{[]int64{-5, -7}, -1},
		{[]int64{-5, 0}, 0},
		{[]int64{-1, 3}, 3},
	} {
		recs := make([]Record, len(c.timestamps))
		for i, ts := range c.timestamps {
			recs[i] = Record{Timestamp: ts, Value: []byte("v")}
		}
		raw, err := AppendBatch(nil, recs, BuildOptions{})
		require.NoError(t, err)
		assert.Equal(t, c.want, Batch(raw).MaxTimestamp(), "timestamps %v", c.timestamps)
		assert.Equal(t, c.timestamps[0], Batch(raw).BaseTimestamp(), "timestamps %v", c.timestamps)
	}
}
