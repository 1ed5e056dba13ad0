package log

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/strandlog/strand/segment"
)

// benchReadBytes is the size of the log the read benchmarks read whole.
const benchReadBytes = 64 << 20

// readFixture builds a log of benchReadBytes in batches of benchRecords
// and returns it open, with its segment files and records.
func readFixture(b *testing.B) (*Log, []string, int64) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "read-0")
	l, err := Open(dir, Options{Fsync: FsyncNever(), SegmentBytes: 32 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	recs := benchRecords()
	for l.Stats().Bytes < benchReadBytes {
		if _, err := l.Append(recs); err != nil {
			b.Fatal(err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"+segment.LogSuffix))
	if err != nil {
		b.Fatal(err)
	}
	return l, files, l.LogEndOffset()
}

// BenchmarkReadLog reads a cached 64 MiB log whole: raw reads of its
// segment files into 1 MiB (the bound), Read+ReadAt into 1 MiB, and
// Records (every CRC checked, every record decoded). Compare with
//
//	go test -run '^$' -bench ReadLog -count 6 ./log | benchstat -col /reader -
func BenchmarkReadLog(b *testing.B) {
	l, files, records := readFixture(b)
	buf := make([]byte, 1<<20)
	b.Run("reader=raw", func(b *testing.B) {
		b.SetBytes(l.Stats().Bytes)
		for b.Loop() {
			for _, name := range files {
				f, err := os.Open(name)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := f.Read(buf); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
				f.Close()
			}
		}
	})
	b.Run("reader=readat", func(b *testing.B) {
		b.SetBytes(l.Stats().Bytes)
		b.ReportAllocs()
		for b.Loop() {
			for next := int64(0); next < records; {
				bs, err := l.Read(next, len(buf), ReadLogEnd)
				if err != nil {
					b.Fatal(err)
				}
				data := buf[:bs.Len()]
				if n, err := bs.ReadAt(data, 0); n < len(data) {
					b.Fatal(err)
				}
				for len(data) > 0 {
					bt, rest, err := segment.ParseBatch(data)
					if err != nil {
						b.Fatal(err)
					}
					next, data = bt.LastOffset()+1, rest
				}
				bs.Close()
			}
		}
	})
	b.Run("reader=records", func(b *testing.B) {
		b.SetBytes(l.Stats().Bytes)
		b.ReportAllocs()
		for b.Loop() {
			var n int64
			for _, err := range l.Records(0, ReadLogEnd) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != records {
				b.Fatal(errors.New("short read"))
			}
		}
	})
}
