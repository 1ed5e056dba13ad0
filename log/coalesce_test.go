package log

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// plainBatch builds the batch Append would for records i to i+n-1 of
// size-byte values.
func plainBatch(t testing.TB, i, n, size int) segment.Batch {
	t.Helper()
	b, err := segment.AppendBatch(nil, recordsFrom(i, n, size), segment.BuildOptions{})
	require.NoError(t, err)
	return b
}

// logWrites counts the writes to segment logs.
func logWrites(fs *vfs.MemFS, n *int) {
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && strings.HasSuffix(op.Name, segment.LogSuffix) {
			*n++
		}
		return nil
	})
}

// A group's plain batches share one write, up to the first batch that
// needs more (a producer's, which the producer state checks first): each
// gets the offsets it would get alone, and the log reads back in order.
func TestGroupWritesPlainBatchesTogether(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/orders-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 2, 2, 100) // the segment's first batch goes alone

	group := []*pending{
		{batch: plainBatch(t, 2, 2, 100)},
		{batch: plainBatch(t, 4, 3, 100)},
		{batch: plainBatch(t, 7, 1, 100)},
		{batch: producerBatch(t, 3, 0, 8, 2, false)},
		{batch: plainBatch(t, 10, 2, 100)},
		{batch: plainBatch(t, 12, 3, 100)},
	}
	writes := 0
	logWrites(fs, &writes)
	seq, synced := l.write(group)
	require.True(t, synced)
	require.NoError(t, l.sync(seq))
	require.Equal(t, 3, writes, "the first three, the producer's, the last two")
	base := int64(2)
	for i, p := range group {
		require.NoError(t, p.err, "batch %d", i)
		require.Equal(t, base, p.res.BaseOffset, "batch %d", i)
		base = p.res.LastOffset + 1
	}
	require.EqualValues(t, 15, l.LogEndOffset())
	requireKeysInOrder(t, l, 15)
}

// requireKeysInOrder checks that the log holds n records, with offsets
// from 0 and the keys record() gives them.
func requireKeysInOrder(t *testing.T, l *Log, n int) {
	t.Helper()
	next := 0
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		require.EqualValues(t, next, r.Offset)
		require.Equal(t, record(next, len(r.Value)).Key, r.Key)
		next++
	}
	require.Equal(t, n, next)
}

// A group that fills the active segment rolls where appending its batches
// one by one would: the batches before go together into the old segment,
// the ones after into the new one.
func TestGroupWriteRollsWhereAppendsWould(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/orders-0", memOptions(fs)) // 8 KiB segments
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 1, 1, 100)
	var group []*pending
	for i := 1; i < 41; i += 4 {
		group = append(group, &pending{batch: plainBatch(t, i, 4, 250)})
	}
	seq, synced := l.write(group)
	require.True(t, synced)
	require.NoError(t, l.sync(seq))
	for i, p := range group {
		require.NoError(t, p.err, "batch %d", i)
		require.EqualValues(t, 1+4*i, p.res.BaseOffset, "batch %d", i)
	}
	require.Greater(t, l.Stats().Segments, 1)
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	for _, s := range segs {
		require.LessOrEqual(t, s.Size(), int64(8<<10), "segment %d", s.BaseOffset())
	}
	requireKeysInOrder(t, l, 41)
}
