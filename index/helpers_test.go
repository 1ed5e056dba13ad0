package index

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// forEachFS runs fn on the OS file system and on the in-memory one.
func forEachFS(t *testing.T, fn func(t *testing.T, fsys vfs.FS, dir string)) {
	t.Run("os", func(t *testing.T) { fn(t, vfs.Default, t.TempDir()) })
	t.Run("mem", func(t *testing.T) {
		fsys := vfs.NewMem()
		require.NoError(t, fsys.MkdirAll("/seg", 0o755))
		fn(t, fsys, "/seg")
	})
}

// writeFile creates name with contents b.
func writeFile(t testing.TB, fsys vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fsys.Create(name)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func fileSize(t testing.TB, fsys vfs.FS, name string) int64 {
	t.Helper()
	fi, err := fsys.Stat(name)
	require.NoError(t, err)
	return fi.Size()
}

// offsetBytes encodes offset index entries given as (relative offset,
// position) pairs.
func offsetBytes(pairs ...uint32) []byte {
	b := make([]byte, 0, len(pairs)*4)
	for _, v := range pairs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// timeBytes encodes one time index entry.
func timeBytes(ts int64, rel uint32) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(ts))
	return binary.BigEndian.AppendUint32(b, rel)
}

func (x *OffsetIndex) all() []OffsetPosition {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]OffsetPosition, x.entries)
	for i := range out {
		out[i] = x.entry(i)
	}
	return out
}

func (x *TimeIndex) all() []TimestampOffset {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]TimestampOffset, x.entries)
	for i := range out {
		out[i] = x.entry(i)
	}
	return out
}

// newOffset opens a fresh active offset index in dir.
func newOffset(t testing.TB, fsys vfs.FS, dir string, base int64, maxBytes int) *OffsetIndex {
	t.Helper()
	x, err := OpenOffset(fsys, filepath.Join(dir, "00000000000000000000.index"), base, maxBytes, true)
	require.NoError(t, err)
	t.Cleanup(func() { x.Close() })
	return x
}

func newTime(t testing.TB, fsys vfs.FS, dir string, base int64, maxBytes int) *TimeIndex {
	t.Helper()
	x, err := OpenTime(fsys, filepath.Join(dir, "00000000000000000000.timeindex"), base, maxBytes, true)
	require.NoError(t, err)
	t.Cleanup(func() { x.Close() })
	return x
}
