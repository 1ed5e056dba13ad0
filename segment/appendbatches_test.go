package segment

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// countWrites counts the writes to the segment's log file.
func countWrites(fs *vfs.MemFS, n *int) {
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && op.Name == FileName("/p-0", 100, LogSuffix) {
			*n++
		}
		return nil
	})
}

// createMem creates an empty segment based at 100 on a new MemFS.
func createMem(t *testing.T, opts Options) (*vfs.MemFS, string, *Segment) {
	t.Helper()
	fs, dir := newMemDir(t)
	s, err := Create(dir, 100, on(fs, opts))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return fs, dir, s
}

// Batches appended together take one write and leave the segment as
// appending them one by one does: the same bytes, index entries by
// Kafka's interval rule, offsets and reads.
func TestAppendBatchesIsOneWriteOfAppends(t *testing.T) {
	bs := testBatches(t, 40, 3, 400, 100, 1000)
	_, _, one := createMem(t, smallIndex)
	appendAll(t, one, bs)

	fs, _, s := createMem(t, smallIndex)
	writes := 0
	countWrites(fs, &writes)
	n, err := s.AppendBatches(bs[:1], concat(bs[:1]))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = s.AppendBatches(bs[1:], concat(bs[1:]))
	require.NoError(t, err)
	require.Equal(t, len(bs)-1, n)
	require.Equal(t, 2, writes)
	requireHolds(t, s, bs)
	require.Equal(t, one.offsets.Entries(), s.offsets.Entries())
	require.Equal(t, one.times.Entries(), s.times.Entries())
	require.Equal(t, one.MaxTimestamp(), s.MaxTimestamp())
}

// A batch out of order ends the append there: the batches before it are
// appended, and the error is the one Append gives for it.
func TestAppendBatchesStopsAtABatchOutOfOrder(t *testing.T) {
	_, _, s := createMem(t, smallIndex)
	bs := testBatches(t, 3, 2, 10, 100, 1000)
	list := []Batch{bs[0], bs[1], bs[0], bs[2]}
	n, err := s.AppendBatches(list, concat(list))
	require.ErrorIs(t, err, ErrOffsetOrder)
	require.Equal(t, 2, n)
	requireHolds(t, s, bs[:2])

	n, err = s.AppendBatches(list[2:3], concat(list[2:3]))
	require.ErrorIs(t, err, ErrOffsetOrder)
	require.Zero(t, n)
	requireHolds(t, s, bs[:2])
}

// An index that fills up part way ends the append after the batches it
// could index, as many as Append takes one by one before it refuses one
// with a full index (where a log rolls): the rest are cut from the file.
func TestAppendBatchesStopsWhereTheIndexIsFull(t *testing.T) {
	opts := Options{IndexIntervalBytes: 1, MaxIndexBytes: 64}
	bs := testBatches(t, 12, 2, 10, 100, 1000)
	_, _, one := createMem(t, opts)
	fit := 0
	for _, b := range bs {
		if err := one.Append(b); err != nil {
			require.ErrorIs(t, err, ErrSegmentFull)
			break
		}
		fit++
	}
	require.Greater(t, fit, 1)
	require.Less(t, fit, len(bs))

	fs, dir, s := createMem(t, opts)
	n, err := s.AppendBatches(bs, concat(bs))
	require.ErrorIs(t, err, ErrSegmentFull)
	require.Equal(t, fit, n)
	requireHolds(t, s, bs[:fit])
	fi, err := fs.Stat(FileName(dir, 100, LogSuffix))
	require.NoError(t, err)
	require.Equal(t, s.Size(), fi.Size(), "the batches not appended are cut from the file")
}

// A failed write appends none of the batches and leaves the segment as it
// was.
func TestAppendBatchesFailedWriteChangesNothing(t *testing.T) {
	fs, _, s := createMem(t, smallIndex)
	bs := testBatches(t, 4, 2, 10, 100, 1000)
	appendAll(t, s, bs[:1])
	full := true
	failWrites(fs, LogSuffix, &full)
	n, err := s.AppendBatches(bs[1:], concat(bs[1:]))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Zero(t, n)
	requireHolds(t, s, bs[:1])

	full = false
	n, err = s.AppendBatches(bs[1:], concat(bs[1:]))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	requireHolds(t, s, bs)
}
