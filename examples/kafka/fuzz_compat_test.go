package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/segment"
)

// FuzzBatchesAgainstFranz builds random records into batches both ways,
// Strand to kmsg and kmsg to Strand, with every codec and batch shape, and
// checks every field as TestStrandToFranz and TestFranzToStrand do.
func FuzzBatchesAgainstFranz(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0x3f, 5, 'k', 'e', 'y', 1, 2})
	f.Add([]byte{2, 1, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 3, 39, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := generator{data: data}
		c := codecs[g.byte()%byte(len(codecs))]
		h := headers[g.byte()%byte(len(headers))]
		recs := g.records()
		opts := h.opts
		opts.Codec = c.strand
		checkStrandToFranz(t, recs, opts, c.typ)
		checkFranzToStrand(t, recs, h.opts, c.strand, c.franz, c.typ)
	})
}

// FuzzParseAgainstFranz reads arbitrary bytes, with a right length and
// CRC, as a batch: whatever Strand accepts (ParseBatch and Validate, then
// every record), kmsg must decode to the same header fields and records.
func FuzzParseAgainstFranz(f *testing.F) {
	for _, c := range codecs {
		for _, h := range headers {
			opts := h.opts
			opts.Codec = c.strand
			raw, err := segment.AppendBatch(nil, records()[:3], opts)
			require.NoError(f, err)
			f.Add(raw)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A checksum would stop almost every mutation at the CRC: the
		// length and CRC are made right, so the parsers meet the body.
		if len(data) >= segment.HeaderSize {
			data[16] = 2
			binary.BigEndian.PutUint32(data[8:], uint32(len(data)-12))
			binary.BigEndian.PutUint32(data[17:], crc32.Checksum(data[21:], castagnoli))
		}
		b, _, err := segment.ParseBatch(data)
		if err != nil || b.Validate() != nil {
			return
		}
		raw := data[:b.Size()]
		var kb kmsg.RecordBatch
		require.NoError(t, kb.ReadFrom(raw), "kmsg reads the header of a batch Strand validated")
		assert.Equal(t, b.BaseOffset(), kb.FirstOffset)
		assert.Equal(t, b.PartitionLeaderEpoch(), kb.PartitionLeaderEpoch)
		assert.Equal(t, crc32.Checksum(raw[21:], castagnoli), uint32(kb.CRC))
		assert.Equal(t, b.LastOffsetDelta(), kb.LastOffsetDelta)
		assert.Equal(t, b.BaseTimestamp(), kb.FirstTimestamp)
		assert.Equal(t, b.MaxTimestamp(), kb.MaxTimestamp)
		assert.Equal(t, b.ProducerID(), kb.ProducerID)
		assert.Equal(t, b.ProducerEpoch(), kb.ProducerEpoch)
		assert.Equal(t, b.BaseSequence(), kb.FirstSequence)
		assert.Equal(t, b.NumRecords(), kb.NumRecords)
		assert.Equal(t, int16(b.Codec()), kb.Attributes&0x07)
		assert.Equal(t, b.Transactional(), kb.Attributes&0x10 != 0)
		assert.Equal(t, b.Control(), kb.Attributes&0x20 != 0)

		var ours []segment.Record
		for r, err := range b.Records() {
			if err != nil {
				return // Strand refuses the records: nothing to compare
			}
			ours = append(ours, r)
		}
		if b.NumRecords() == 0 {
			// Kafka reads no records section of an empty batch either
			// (DefaultRecordBatch.iterator).
			require.Empty(t, ours)
			return
		}
		typ := kgo.CompressionCodecType(b.Codec())
		section, err := kgo.DefaultDecompressor().Decompress(kb.Records, typ)
		require.NoError(t, err, "kgo decompresses records Strand read")
		theirs := readKmsgRecords(t, section)
		require.Len(t, theirs, len(ours))
		for i, kr := range theirs {
			r := ours[i]
			assert.Equal(t, b.BaseOffset()+int64(kr.OffsetDelta), r.Offset, "record %d offset", i)
			if !b.LogAppendTime() {
				assert.Equal(t, b.BaseTimestamp()+kr.TimestampDelta64, r.Timestamp, "record %d timestamp", i)
			}
			assertBytes(t, kr.Key, r.Key, "record %d key", i)
			assertBytes(t, kr.Value, r.Value, "record %d value", i)
			require.Len(t, r.Headers, len(kr.Headers), "record %d", i)
			for j, kh := range kr.Headers {
				assert.Equal(t, kh.Key, r.Headers[j].Key)
				assertBytes(t, kh.Value, r.Headers[j].Value, "record %d header %d", i, j)
			}
		}
	})
}

// generator turns a fuzzer's bytes into records; once the bytes run out
// every draw is zero.
type generator struct{ data []byte }

func (g *generator) byte() byte {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return b
}

func (g *generator) bytes(n int) []byte {
	n = min(n, len(g.data))
	b := g.data[:n:n]
	g.data = g.data[n:]
	return b
}

// field draws a key, value or header value: null, empty, a few bytes of
// input, or a large run that spans several LZ4 blocks.
func (g *generator) field() []byte {
	switch k := g.byte(); k % 4 {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return append([]byte{}, g.bytes(int(g.byte()))...)
	default:
		fill := make([]byte, int(k)*700)
		copy(fill, g.bytes(len(fill)))
		return fill
	}
}

// timestamp draws a timestamp: -1 (none), or one within 2^47 ms of the
// epoch either side, so that deltas between records never overflow.
func (g *generator) timestamp() int64 {
	v := binary.BigEndian.Uint64(append(g.bytes(8), make([]byte, 8)...)[:8])
	if v%16 == 0 {
		return -1
	}
	return int64(v%(1<<48)) - 1<<47
}

func (g *generator) records() []segment.Record {
	recs := make([]segment.Record, 1+int(g.byte())%40)
	for i := range recs {
		r := &recs[i]
		r.Timestamp = g.timestamp()
		r.Key = g.field()
		r.Value = g.field()
		for range g.byte() % 4 {
			r.Headers = append(r.Headers, segment.Header{Key: string(g.bytes(int(g.byte() % 16))), Value: g.field()})
		}
	}
	return recs
}
