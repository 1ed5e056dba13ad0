package broker

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
)

// snappyBatch returns recs as a snappy batch, its records framed by frame.
func snappyBatch(t testing.TB, recs []segment.Record, frame func(raw []byte) []byte) segment.Batch {
	t.Helper()
	plain, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Producer: &segment.ProducerFields{ID: 7, Epoch: 1, BaseSequence: 40}})
	require.NoError(t, err)
	b := append(plain[:segment.HeaderSize:segment.HeaderSize], frame(plain[segment.HeaderSize:])...)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|uint16(segment.CodecSnappy))
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	require.NoError(t, segment.Batch(b).Validate())
	return b
}

// xerial frames data as Java's snappy-java does, in blocks of at most n
// bytes.
func xerial(n int) func([]byte) []byte {
	return func(raw []byte) []byte {
		out := append([]byte{}, xerialMagic...)
		out = binary.BigEndian.AppendUint32(out, 1)
		out = binary.BigEndian.AppendUint32(out, 1)
		for len(raw) > 0 {
			chunk := raw[:min(n, len(raw))]
			block := s2.EncodeSnappy(nil, chunk)
			out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
			out = append(out, block...)
			raw = raw[len(chunk):]
		}
		return out
	}
}

// A snappy batch in either framing (a bare block, as librdkafka and
// franz-go write, or xerial's, as Kafka's Java client writes) becomes an lz4
// batch of the same records and producer fields; a cut or corrupt one is an
// error, never a panic.
func TestTranscodeSnappyFramings(t *testing.T) {
	var recs []segment.Record
	for i := range 100 {
		recs = append(recs, segment.Record{Key: []byte{byte(i)}, Value: make([]byte, 100), Timestamp: int64(1000 + i)})
	}
	for name, frame := range map[string]func([]byte) []byte{
		"block":           func(raw []byte) []byte { return s2.EncodeSnappy(nil, raw) },
		"xerial, 1 block": xerial(1 << 20),
		"xerial, blocks":  xerial(333),
	} {
		t.Run(name, func(t *testing.T) {
			b := snappyBatch(t, recs, frame)
			out, err := transcode(b)
			require.NoError(t, err)
			require.NoError(t, out.Validate())
			require.Equal(t, segment.CodecLZ4, out.Codec())
			require.Equal(t, []any{int64(7), int16(1), int32(40)}, []any{out.ProducerID(), out.ProducerEpoch(), out.BaseSequence()})
			i := 0
			for r, err := range out.Records() {
				require.NoError(t, err)
				require.Equal(t, recs[i].Key, r.Key)
				require.Equal(t, recs[i].Timestamp, r.Timestamp)
				i++
			}
			require.Equal(t, len(recs), i)

			for cut := segment.HeaderSize; cut < len(b); cut += 97 {
				short := append(segment.Batch(nil), b[:cut]...)
				binary.BigEndian.PutUint32(short[8:], uint32(len(short)-12))
				_, err := transcode(short)
				require.Error(t, err, "cut at %d", cut)
			}
		})
	}
}

// FuzzTranscode: whatever a producer sends as a snappy or zstd batch,
// transcode returns a valid lz4 batch or an error, never a panic.
func FuzzTranscode(f *testing.F) {
	recs := []segment.Record{{Key: []byte("k"), Value: []byte("v"), Timestamp: 5}}
	f.Add([]byte(snappyBatch(f, recs, func(raw []byte) []byte { return s2.EncodeSnappy(nil, raw) })))
	f.Add([]byte(snappyBatch(f, recs, xerial(4))))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, _, err := segment.ParseBatch(data)
		if err != nil {
			return
		}
		out, err := transcode(b)
		if c := b.Codec(); err == nil && (c == segment.CodecSnappy || c == segment.CodecZstd) {
			if err := out.Validate(); err != nil {
				t.Fatalf("transcoded batch does not validate: %v", err)
			}
		}
	})
}
