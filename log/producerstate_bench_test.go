package log

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/strandlog/strand/segment"
)

// BenchmarkAppendProducer appends 100 x 1 KiB records per AppendBatch, from
// no producer and from an idempotent producer whose sequence goes up with
// each batch, so that the cost of producer state shows as the ratio of the
// two (the target: idempotent at 0.9 of plain or better). Both
// write the sequence into the batch and recompute its CRC each time, as a
// producer would build it, so that they differ only in the log's work.
//
//	go test -run '^$' -bench AppendProducer -count 6 ./log | benchstat -col /producer -
func BenchmarkAppendProducer(b *testing.B) {
	for _, p := range []struct {
		name string
		id   int64
	}{{"none", -1}, {"idempotent", 1}} {
		b.Run("producer="+p.name, func(b *testing.B) {
			opts := segment.BuildOptions{}
			if p.id >= 0 {
				opts.Producer = &segment.ProducerFields{ID: p.id}
			}
			batch, err := segment.AppendBatch(nil, benchRecords(), opts)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			dir := b.TempDir()
			var l *Log
			var seq int32
			for b.Loop() {
				if l == nil || l.Stats().Bytes >= benchLogBytes {
					// A new log, and with it a new producer: sequences
					// start again, as after an expiry.
					b.StopTimer()
					if l != nil {
						if err := errors.Join(l.Close(), os.RemoveAll(l.Dir())); err != nil {
							b.Fatal(err)
						}
					}
					if l, err = Open(filepath.Join(dir, "bench-0"), Options{Fsync: FsyncNever()}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if p.id >= 0 {
					setSequence(batch, seq)
					seq += 100
				} else {
					setSequence(batch, -1)
				}
				if _, err := l.AppendBatch(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// setSequence writes seq into b's header (base sequence, bytes 53 to 56 of
// Kafka's RecordBatch) and recomputes its CRC-32C (bytes 17 to 20, over the
// bytes from the attributes at 21 on).
func setSequence(b segment.Batch, seq int32) {
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
}
