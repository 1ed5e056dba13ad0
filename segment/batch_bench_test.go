package segment

import (
	"hash/crc32"
	"testing"
)

// benchRecords returns what the benchmarks build: 100 records of 100-byte
// values, no keys or headers, as a producer batching small messages sends.
func benchRecords() []Record {
	recs := make([]Record, 100)
	for i := range recs {
		v := make([]byte, 100)
		for j := range v {
			v[j] = byte(i + j)
		}
		recs[i] = Record{Timestamp: 1700000000000 + int64(i), Value: v}
	}
	return recs
}

// BenchmarkBuildBatch100B measures AppendBatch, CRC included, per byte of
// record value. BenchmarkCopyCRC100B is the floor it is compared with:
// copying the same values into one buffer and taking their CRC-32C.
func BenchmarkBuildBatch100B(b *testing.B) {
	recs := benchRecords()
	buf, err := AppendBatch(nil, recs, BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100 * 100)
	b.ReportAllocs()
	for b.Loop() {
		buf, err = AppendBatch(buf[:0], recs, BuildOptions{})
	}
	if err != nil {
		b.Fatal(err)
	}
}

func BenchmarkCopyCRC100B(b *testing.B) {
	recs := benchRecords()
	buf := make([]byte, 0, 100*100)
	var sum uint32
	b.SetBytes(100 * 100)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for i := range recs {
			buf = append(buf, recs[i].Value...)
		}
		sum = crc32.Checksum(buf, castagnoli)
	}
	_ = sum
}

func BenchmarkBuildBatchCompressed(b *testing.B) {
	recs := benchRecords()
	for _, c := range []Codec{CodecGzip, CodecLZ4} {
		b.Run(c.String(), func(b *testing.B) {
			var buf []byte
			var err error
			b.SetBytes(100 * 100)
			b.ReportAllocs()
			for b.Loop() {
				buf, err = AppendBatch(buf[:0], recs, BuildOptions{Codec: c})
			}
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkRecords(b *testing.B) {
	recs := benchRecords()
	for _, c := range writableCodecs {
		b.Run(c.String(), func(b *testing.B) {
			batch, err := AppendBatch(nil, recs, BuildOptions{Codec: c})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(100 * 100)
			b.ReportAllocs()
			for b.Loop() {
				for _, err := range Batch(batch).Records() {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
