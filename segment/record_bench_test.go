package segment

import "testing"

// BenchmarkDecodeRecords decodes a batch of 100 records of 100-byte values with
// keys, as a reader iterating a log does after the batch's CRC check,
// without headers and with two headers a record.
func BenchmarkDecodeRecords(b *testing.B) {
	for _, headers := range []int{0, 2} {
		recs := benchRecords()
		for i := range recs {
			recs[i].Key = []byte("key-00000")
			for range headers {
				recs[i].Headers = append(recs[i].Headers, Header{Key: "trace-id", Value: []byte("0123456789abcdef")})
			}
		}
		batch, err := AppendBatch(nil, recs, BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(map[int]string{0: "headers=0", 2: "headers=2"}[headers], func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				for r, err := range Batch(batch).Records() {
					if err != nil || len(r.Value) != 100 {
						b.Fatal(err)
					}
					n++
				}
				if n != len(recs) {
					b.Fatal(n)
				}
			}
		})
	}
}
