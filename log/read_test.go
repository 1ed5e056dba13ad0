package log

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecordsReadsEveryChunkIntoOneBuffer: Records reads a log of many
// chunks into one buffer it reuses, so reading 8 MiB allocates about one
// chunk, not one per chunk; each record is whole while the loop body
// holds it (Records' documented contract).
func TestRecordsReadsEveryChunkIntoOneBuffer(t *testing.T) {
	const (
		records = 8 << 10
		size    = 1 << 10
		chunk   = 1 << 20 // what Records reads at a time
	)
	fs := newMemFS(t)
	l, err := Open("/data/big-0", Options{FS: fs, SegmentBytes: 3 << 20})
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, records, 100, size)
	require.Greater(t, l.Stats().Bytes, int64(8*chunk))

	var before, after runtime.MemStats
	var key []byte
	next := 0
	runtime.ReadMemStats(&before)
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		// record(next, size), checked without allocating
		key = fmt.Appendf(key[:0], "key-%d", next)
		if r.Offset != int64(next) || !bytes.Equal(r.Key, key) || len(r.Value) != size ||
			bytes.Count(r.Value, []byte{byte('a' + next%26)}) != size {
			require.Equal(t, record(next, size), r)
		}
		next++
	}
	runtime.ReadMemStats(&after)
	require.Equal(t, records, next)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(2*chunk),
		"bytes allocated reading %d bytes of records", l.Stats().Bytes)
}

// TestRecordsAgainAllocatesNoNewChunk: a consumer that polls calls
// Records again and again; each call takes the chunk buffer an earlier
// one left, so that it pays no fresh megabyte and its page faults.
func TestRecordsAgainAllocatesNoNewChunk(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	l, err := Open("/data/poll-0", Options{FS: newMemFS(t)})
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 600, 100, 1<<10)
	read := func() {
		n := 0
		for _, err := range l.Records(0, ReadLogEnd) {
			require.NoError(t, err)
			n++
		}
		require.Equal(t, 600, n)
	}
	read()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const polls = 20
	for range polls {
		read()
	}
	runtime.ReadMemStats(&after)
	// Without the pool every poll allocates a 1 MiB chunk; with it, none
	// does, but a garbage collection empties a pool, so allow a few.
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(3<<20),
		"bytes allocated by %d Records over a %d-byte log", polls, l.Stats().Bytes)
}
