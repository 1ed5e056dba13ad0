package segment

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strandlog/strand/vfs"
)

// benchFileBytes bounds each file a benchmark writes; both benchmarks
// start a new file at the same point so that they do the same work.
const benchFileBytes = 256 << 20

// benchBatches are 1 KiB records in batches of 100, as the issue sets.
func benchBatches(b *testing.B) []Batch {
	const n = 16
	bs := testBatches(b, n, 100, 1024, 0, 1)
	// Offsets continue across the set; each use restamps the base offset.
	return bs
}

// BenchmarkSegmentAppend appends 100 x 1 KiB batches to a segment on the
// OS file system, without syncing: compare with BenchmarkRawWrite.
func BenchmarkSegmentAppend(b *testing.B) {
	dir := b.TempDir()
	bs := benchBatches(b)
	b.SetBytes(int64(len(bs[0])))
	var seg *Segment
	next, base := int64(0), int64(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if seg == nil || seg.Size() > benchFileBytes {
			if seg != nil {
				b.StopTimer()
				seg.Remove()
				b.StartTimer()
			}
			var err error
			base = next
			if seg, err = Create(dir, base, on(vfs.Default, Options{})); err != nil {
				b.Fatal(err)
			}
		}
		batch := bs[i%len(bs)]
		batch.SetBaseOffset(next)
		if err := seg.Append(batch); err != nil {
			b.Fatal(err)
		}
		next = batch.LastOffset() + 1
	}
	b.StopTimer()
	seg.Remove()
}

// BenchmarkRawWrite writes the same bytes with os.File.Write: the bound
// for BenchmarkSegmentAppend.
func BenchmarkRawWrite(b *testing.B) {
	dir := b.TempDir()
	bs := benchBatches(b)
	b.SetBytes(int64(len(bs[0])))
	var f *os.File
	var size int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if f == nil || size > benchFileBytes {
			if f != nil {
				b.StopTimer()
				f.Close()
				os.Remove(f.Name())
				b.StartTimer()
			}
			var err error
			if f, err = os.Create(filepath.Join(dir, "raw.log")); err != nil {
				b.Fatal(err)
			}
			size = 0
		}
		n, err := f.Write(bs[i%len(bs)])
		if err != nil {
			b.Fatal(err)
		}
		size += int64(n)
	}
	b.StopTimer()
	f.Close()
}
