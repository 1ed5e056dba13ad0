package log

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/internal/vfs"
	"github.com/strandlog/strand/segment"
)

// TestCrashDuringTruncation cuts the power before every file-system
// operation of a follower's truncations (KIP-101): one that cuts the tail,
// one below the first segment that empties the log and restarts it
// (Kafka's truncateFullyAndStartAt), and the appends around them. Every
// record at offset o is record(o), so whatever a crash keeps of a
// truncation, the log must reopen with contiguous offsets from its start,
// each holding its own record, and hold everything acknowledged below the
// last truncation begun.
func TestCrashDuringTruncation(t *testing.T) {
	appendFrom := func(l *Log, from, to int, acked *int) bool {
		for i := from; i < to; i += 5 {
			var recs []segment.Record
			for j := i; j < i+5; j++ {
				recs = append(recs, record(j, 150))
			}
			if _, err := l.Append(recs); err != nil {
				return false
			}
			*acked = i + 5
		}
		return true
	}
	script := func(fs *vfs.MemFS, acked *int) {
		l, err := Open("/data/t-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		if !appendFrom(l, 0, 100, acked) {
			return
		}
		// A truncation may remove what it was asked to from its start.
		*acked = 60 // the batch holding 63 goes whole
		if l.TruncateTo(63) != nil || !appendFrom(l, 60, 90, acked) || l.DeleteRecordsBefore(45) != nil {
			return
		}
		*acked = 20
		if l.TruncateTo(20) != nil {
			return
		}
		appendFrom(l, 20, 40, acked)
	}
	var acked int
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, &acked) })
	require.Equal(t, 40, acked)

	for stop := 0; stop < total; stop++ {
		acked := 0
		after := crashedAt(t, stop, 5, func(fs *vfs.MemFS) { script(fs, &acked) })
		l, err := Open("/data/t-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		start, leo := int(l.LogStartOffset()), int(l.LogEndOffset())
		require.GreaterOrEqual(t, leo, acked, "stop %d: acknowledged records lost", stop)
		requireRecords(t, l, start, leo, 150)
		appendN(t, l, leo, 5, 5, 150) // and it takes appends again
		require.NoError(t, l.Close())
	}
}
