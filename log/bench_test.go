package log

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strandlog/strand/vfs"

	"github.com/strandlog/strand/segment"
)

// benchLogBytes bounds each log or file an append benchmark writes: both
// writers start afresh at the same point, outside the timer, so that
// neither pays for a segment roll or a growing directory.
const benchLogBytes = 256 << 20

// benchRecords are 1 KiB values in a batch of 100, the shape.
func benchRecords() []segment.Record {
	recs := make([]segment.Record, 100)
	for i := range recs {
		v := make([]byte, 1024)
		for j := range v {
			v[j] = byte(i + j)
		}
		recs[i].Value = v
	}
	return recs
}

// BenchmarkAppend appends 100 x 1 KiB records per Append, with and
// without an fsync per append, beside the bound: a raw os.File.Write of
// the same batch bytes (and fdatasync). Compare the writers with
//
//	go test -run '^$' -bench Append -count 6 ./log | benchstat -col /writer -
func BenchmarkAppend(b *testing.B) {
	for _, fsync := range []struct {
		name   string
		policy FsyncPolicy
		sync   bool
	}{{"never", FsyncNever(), false}, {"always", FsyncAlways(), true}} {
		b.Run("fsync="+fsync.name+"/writer=log", func(b *testing.B) { benchLogAppend(b, fsync.policy) })
		b.Run("fsync="+fsync.name+"/writer=raw", func(b *testing.B) { benchRawWrite(b, fsync.sync) })
	}
}

func benchLogAppend(b *testing.B, policy FsyncPolicy) {
	recs := benchRecords()
	batch, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	var (
		l       *Log
		written int
	)
	for b.Loop() {
		if l == nil || written >= benchLogBytes {
			b.StopTimer()
			if l != nil {
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
				if err := os.RemoveAll(l.Dir()); err != nil {
					b.Fatal(err)
				}
			}
			if l, err = Open(filepath.Join(b.TempDir(), "bench-0"), Options{Fsync: policy}); err != nil {
				b.Fatal(err)
			}
			written = 0
			b.StartTimer()
		}
		if _, err := l.Append(recs); err != nil {
			b.Fatal(err)
		}
		written += len(batch) // Stats would allocate inside the timed loop
	}
	b.StopTimer()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

// benchRawWrite appends the batch Append would write, already encoded,
// with write(2), and after each, if sync, the sync the log makes
// (fdatasync(2) on Linux).
func benchRawWrite(b *testing.B, sync bool) {
	batch, err := segment.AppendBatch(nil, benchRecords(), segment.BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	var (
		f    vfs.File
		path string
		size int64
	)
	for b.Loop() {
		if f == nil || size >= benchLogBytes {
			b.StopTimer()
			if f != nil {
				if err := errors.Join(f.Close(), os.Remove(path)); err != nil {
					b.Fatal(err)
				}
			}
			path = filepath.Join(b.TempDir(), "raw.log")
			f, err = vfs.Default.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			size = 0
			b.StartTimer()
		}
		n, err := f.Write(batch)
		if err != nil {
			b.Fatal(err)
		}
		size += int64(n)
		if sync {
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
