package idempotence

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// kafkaAborted are the entries of TransactionIndexTest.
var kafkaAborted = []AbortedTxn{
	{ProducerID: 0, FirstOffset: 0, LastOffset: 10, LastStableOffset: 11},
	{ProducerID: 1, FirstOffset: 5, LastOffset: 15, LastStableOffset: 13},
	{ProducerID: 2, FirstOffset: 18, LastOffset: 35, LastStableOffset: 25},
	{ProducerID: 3, FirstOffset: 32, LastOffset: 50, LastStableOffset: 40},
}

func newTxnIndex(t *testing.T, entries ...AbortedTxn) (*TxnIndex, vfs.FS) {
	t.Helper()
	fs, dir := newSnapshotDir(t)
	x, err := OpenTxnIndex(fs, dir+"/00000000000000000000.txnindex", 0)
	require.NoError(t, err)
	for _, a := range entries {
		require.NoError(t, x.Append(a))
	}
	return x, fs
}

// TestAbortedTxnBytes: AbortedTxn's layout, field by field
// (TransactionIndexTest.testAbortedTxnSerde's entry).
func TestAbortedTxnBytes(t *testing.T) {
	var want []byte
	be := binary.BigEndian
	want = be.AppendUint16(want, 0)
	want = be.AppendUint64(want, 983493)
	want = be.AppendUint64(want, 137)
	want = be.AppendUint64(want, 299)
	want = be.AppendUint64(want, 200)
	got := appendAbortedTxn(nil, AbortedTxn{ProducerID: 983493, FirstOffset: 137, LastOffset: 299, LastStableOffset: 200})
	require.Equal(t, want, got)
	require.Len(t, got, TxnIndexEntrySize)
}

// TestTxnIndexReopen: TransactionIndexTest.testPositionSetCorrectlyWhenOpened.
func TestTxnIndexReopen(t *testing.T) {
	x, fs := newTxnIndex(t, kafkaAborted...)
	require.NoError(t, x.Sync())
	require.NoError(t, x.Close())
	x, err := OpenTxnIndex(fs, x.name, 0)
	require.NoError(t, err)
	another := AbortedTxn{ProducerID: 3, FirstOffset: 50, LastOffset: 60, LastStableOffset: 55}
	require.NoError(t, x.Append(another))
	require.NoError(t, x.Close())
	x, err = OpenTxnIndex(fs, x.name, 0)
	require.NoError(t, err)
	require.Equal(t, append(kafkaAborted[:4:4], another), x.Entries())
}

// TestTxnIndexLastOffsetMustIncrease: TransactionIndexTest's
// testLastOffsetMustIncrease and testLastOffsetCannotDecrease.
func TestTxnIndexLastOffsetMustIncrease(t *testing.T) {
	x, _ := newTxnIndex(t, AbortedTxn{ProducerID: 1, FirstOffset: 5, LastOffset: 15, LastStableOffset: 13})
	require.ErrorIs(t, x.Append(AbortedTxn{FirstOffset: 0, LastOffset: 15, LastStableOffset: 11}), ErrTxnIndexOrder)
	require.ErrorIs(t, x.Append(AbortedTxn{FirstOffset: 0, LastOffset: 10, LastStableOffset: 11}), ErrTxnIndexOrder)
	require.Len(t, x.Entries(), 1)
}

// TestTxnIndexSanityCheck: TransactionIndexTest.testSanityCheck, and an
// entry of an unknown version.
func TestTxnIndexSanityCheck(t *testing.T) {
	x, fs := newTxnIndex(t, kafkaAborted...)
	require.NoError(t, x.Close())
	_, err := OpenTxnIndex(fs, x.name, 100)
	require.ErrorIs(t, err, ErrCorruptTxnIndex)

	f, err := fs.OpenReadWrite(x.name)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0, 1}, TxnIndexEntrySize)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = OpenTxnIndex(fs, x.name, 0)
	require.ErrorIs(t, err, ErrCorruptTxnIndex)
	require.ErrorContains(t, err, "byte 34")
}

// TestTxnIndexTornTail: a torn last entry is ignored and cut off by the
// next append, so entries stay aligned.
func TestTxnIndexTornTail(t *testing.T) {
	x, fs := newTxnIndex(t, kafkaAborted[:2]...)
	require.NoError(t, x.Close())
	f, err := fs.OpenReadWrite(x.name)
	require.NoError(t, err)
	_, err = f.WriteAt(appendAbortedTxn(nil, kafkaAborted[2])[:20], 2*TxnIndexEntrySize)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	x, err = OpenTxnIndex(fs, x.name, 0)
	require.NoError(t, err)
	require.Equal(t, kafkaAborted[:2], x.Entries())
	require.NoError(t, x.Append(kafkaAborted[3]))
	require.NoError(t, x.Close())
	x, err = OpenTxnIndex(fs, x.name, 0)
	require.NoError(t, err)
	require.Equal(t, []AbortedTxn{kafkaAborted[0], kafkaAborted[1], kafkaAborted[3]}, x.Entries())
}

// TestTxnIndexCollect: TransactionIndexTest.testCollectAbortedTransactions.
func TestTxnIndexCollect(t *testing.T) {
	x, _ := newTxnIndex(t, kafkaAborted...)
	for _, tc := range []struct {
		fetch, upper int64
		want         []AbortedTxn
		done         bool
	}{
		{0, 100, kafkaAborted, false},
		{0, 32, kafkaAborted[:3], true},
		{0, 35, kafkaAborted, true},
		{10, 35, kafkaAborted, true},
		{11, 35, kafkaAborted[1:], true},
		{20, 41, kafkaAborted[2:], false},
	} {
		got, done := x.Collect(tc.fetch, tc.upper)
		require.Equal(t, tc.want, got, "collect [%d, %d)", tc.fetch, tc.upper)
		require.Equal(t, tc.done, done, "collect [%d, %d)", tc.fetch, tc.upper)
	}
}

// TestTxnIndexTruncate: TransactionIndexTest.testTruncate, and the file
// truncated with it.
func TestTxnIndexTruncate(t *testing.T) {
	entries := []AbortedTxn{
		{ProducerID: 0, FirstOffset: 0, LastOffset: 10, LastStableOffset: 2},
		{ProducerID: 1, FirstOffset: 5, LastOffset: 15, LastStableOffset: 16},
		{ProducerID: 2, FirstOffset: 18, LastOffset: 35, LastStableOffset: 25},
		{ProducerID: 3, FirstOffset: 32, LastOffset: 50, LastStableOffset: 40},
	}
	x, fs := newTxnIndex(t, entries...)
	require.NoError(t, x.TruncateTo(51))
	require.Equal(t, entries, x.Entries())
	require.NoError(t, x.TruncateTo(50))
	require.Equal(t, entries[:3], x.Entries())
	require.NoError(t, x.Close())
	x, err := OpenTxnIndex(fs, x.name, 0)
	require.NoError(t, err)
	require.Equal(t, entries[:3], x.Entries())
	require.NoError(t, x.TruncateTo(0))
	require.Empty(t, x.Entries())
	// The next abort may end anywhere after the truncation point.
	require.NoError(t, x.Append(entries[0]))
}

// TestReadCommittedFilter: read-committed fetches (Kafka's
// TransactionIndexTest and UnifiedLogTest's aborted transactions) through the index and the reader's filter. A log holds
// batches with their offsets; the reader keeps what the filter does not
// skip.
func TestReadCommittedFilter(t *testing.T) {
	p := newPartition(t)
	x, _ := newTxnIndex(t)
	write := func(bs ...batch) {
		for _, b := range bs {
			for _, c := range p.append(b) {
				if c.Aborted {
					require.NoError(t, x.Append(AbortedTxnOf(c)))
				}
			}
		}
	}
	// T5: P1@0, P2@1, P1 COMMIT@2, P2 ABORT@3, then a plain batch, and P1
	// aborting a transaction of two batches around P2's committed one.
	write(
		data(0, 0, 0).transactional(),       // 0
		data(0, 0, 0).of(2).transactional(), // 1
		commit(0, 0),                        // 2
		abort(0, 0).of(2),                   // 3
		data(0, 0, 0).of(NoProducerID),      // 4
		data(0, 1, 2).transactional(),       // 5-6
		data(0, 1, 1).of(2).transactional(), // 7
		data(0, 3, 3).transactional(),       // 8
		abort(0, 0),                         // 9
		commit(0, 0).of(2),                  // 10
	)
	require.Equal(t, []AbortedTxn{
		{ProducerID: 2, FirstOffset: 1, LastOffset: 3, LastStableOffset: 4},
		{ProducerID: 1, FirstOffset: 5, LastOffset: 9, LastStableOffset: 7},
	}, x.Entries(), "P1's abort at 9 leaves P2's transaction from 7 open")
	// T7: until the high watermark passes the markers, the transactions
	// they completed still hold the last stable offset back.
	require.Equal(t, int64(0), p.s.LastStableOffset(p.leo))
	p.s.OnHighWatermark(p.leo)
	lso := p.s.LastStableOffset(p.leo)
	require.Equal(t, p.leo, lso)

	read := func(from int64, aborted []AbortedTxn) []int64 {
		f := NewAbortedFilter(aborted)
		var kept []int64
		for _, b := range p.log {
			if b.BaseOffset < from {
				continue
			}
			if !f.Skip(b) {
				kept = append(kept, b.BaseOffset)
			}
		}
		return kept
	}
	aborted, done := x.Collect(0, lso)
	require.False(t, done)
	require.Equal(t, []int64{0, 4, 7}, read(0, aborted))
	// T20: the aborted list in another order gives the same.
	require.Equal(t, []int64{0, 4, 7}, read(0, []AbortedTxn{aborted[1], aborted[0]}))
	// A fetch from offset 5 needs only P1's abort.
	aborted, _ = x.Collect(5, lso)
	require.Equal(t, []AbortedTxn{x.Entries()[1]}, aborted)
	require.Equal(t, []int64{7}, read(5, aborted))
}

// TestCollectAcrossSegments (LogSegment.collectAbortedTxns across
// segments, UnifiedLog.collectAbortedTransactions): a fetch that spans two
// segments finds the aborted transaction whose marker is in the second: the
// first segment's index does not reach the fetch's end, so the search goes
// on.
func TestCollectAcrossSegments(t *testing.T) {
	fs, dir := newSnapshotDir(t)
	first, err := OpenTxnIndex(fs, dir+"/00000000000000000000.txnindex", 0)
	require.NoError(t, err)
	second, err := OpenTxnIndex(fs, dir+"/00000000000000000100.txnindex", 100)
	require.NoError(t, err)
	early := AbortedTxn{ProducerID: 1, FirstOffset: 10, LastOffset: 20, LastStableOffset: 21}
	spanning := AbortedTxn{ProducerID: 2, FirstOffset: 90, LastOffset: 120, LastStableOffset: 121}
	require.NoError(t, first.Append(early))
	require.NoError(t, second.Append(spanning))

	var aborted []AbortedTxn
	for _, x := range []*TxnIndex{first, second} {
		got, done := x.Collect(50, 150)
		aborted = append(aborted, got...)
		if done {
			break
		}
	}
	require.Equal(t, []AbortedTxn{spanning}, aborted)
	// A fetch that ends inside the first segment stops there.
	got, done := first.Collect(0, 21)
	require.Equal(t, []AbortedTxn{early}, got)
	require.True(t, done)
}

// TestDropOnRealBatches: Drop reads a real batch's header and drops what
// Kafka's consumer drops (CompletedFetch): control batches always, and the
// data of an aborted transaction only with a filter, until its marker.
func TestDropOnRealBatches(t *testing.T) {
	parse := func(b []byte, base int64) segment.Batch {
		batch, _, err := segment.ParseBatch(b)
		require.NoError(t, err)
		batch.SetBaseOffset(base)
		return batch
	}
	abortMarker, err := AppendMarkerBatch(nil, 7, 0, Marker{Type: MarkerAbort}, 5000)
	require.NoError(t, err)
	log := []segment.Batch{
		parse(producerBatch(t, 7, 0, 0, 2, true), 0),  // 0-1: producer 7's aborted transaction
		parse(producerBatch(t, 8, 0, 0, 1, false), 2), // 2: idempotent
		parse(abortMarker, 3),                         // 3: its ABORT
		parse(producerBatch(t, 7, 0, 2, 1, true), 4),  // 4: producer 7's next transaction
	}
	drops := func(f *AbortedFilter) []bool {
		var out []bool
		for _, b := range log {
			drop, err := f.Drop(b)
			require.NoError(t, err)
			out = append(out, drop)
		}
		return out
	}
	require.Equal(t, []bool{false, false, true, false}, drops(nil), "read uncommitted: the marker only")
	require.Equal(t, []bool{true, false, true, false},
		drops(NewAbortedFilter([]AbortedTxn{{ProducerID: 7, FirstOffset: 0, LastOffset: 3}})),
		"read committed: the aborted data and the marker, not what follows the marker")
}
