package log

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
)

// TestAbortedMarkerPastTheLastStableOffset: a transaction aborted by a
// marker in a segment that begins past the last stable offset (another
// producer's transaction, open, holds the LSO below that segment) is still
// found by a ReadCommitted read below the LSO. Kafka's
// collectAbortedTransactions searches the following segments until an
// entry's last stable offset says it may stop, whatever their base offsets;
// stopping at the first segment past the read's upper bound reads the
// aborted records as committed.
func TestAbortedMarkerPastTheLastStableOffset(t *testing.T) {
	l, err := Open("/data/a-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 1, 0, 0, 3, true), 0, 2) // aborted below
	appendProducer(t, l, producerBatch(t, 2, 0, 0, 1, true), 3, 3) // stays open
	for n := len(segmentBases(l)); len(segmentBases(l)) == n; {
		appendN(t, l, int(l.LogEndOffset()), 1, 1, 500)
	}
	_, err = l.AppendMarker(marker(t, 1, 0, idempotence.MarkerAbort, 0))
	require.NoError(t, err)
	require.EqualValues(t, 3, l.LastStableOffset())
	require.Greater(t, activeBase(l), l.LastStableOffset(), "the marker is in a segment past the LSO")

	bs, err := l.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	defer bs.Close()
	require.Equal(t, []idempotence.AbortedTxn{{ProducerID: 1, FirstOffset: 0, LastOffset: l.LogEndOffset() - 1, LastStableOffset: 3}}, bs.Aborted)
	require.Empty(t, readOffsets(t, l, ReadCommitted), "the aborted records read as committed")
}

// TestReadCommittedListsOnlyTheAbortedTransactionsItReads: a read's
// Aborted are the transactions that overlap the batches it returns, as
// Kafka's fetch bounds them by the fetched data's end, not every one up to
// the last stable offset (which would make each read of a long log collect
// them all).
func TestReadCommittedListsOnlyTheAbortedTransactionsItReads(t *testing.T) {
	opts := memOptions(newMemFS(t))
	opts.SegmentBytes = 1 << 20
	l, err := Open("/data/a-0", opts)
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 1, 0, 0, 3, true), 0, 2)
	_, err = l.AppendMarker(marker(t, 1, 0, idempotence.MarkerAbort, 0)) // 3
	require.NoError(t, err)
	appendN(t, l, 4, 40, 1, 500)
	appendProducer(t, l, producerBatch(t, 2, 0, 0, 3, true), 44, 46)
	_, err = l.AppendMarker(marker(t, 2, 0, idempotence.MarkerAbort, 0)) // 47
	require.NoError(t, err)
	require.Len(t, segmentBases(l), 1)

	bs, err := l.Read(0, 2000, ReadCommitted) // the first batches only
	require.NoError(t, err)
	defer bs.Close()
	require.Less(t, bs.NextOffset(), int64(44))
	require.Equal(t, []idempotence.AbortedTxn{{ProducerID: 1, FirstOffset: 0, LastOffset: 3, LastStableOffset: 4}}, bs.Aborted)

	all, err := l.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	defer all.Close()
	require.Len(t, all.Aborted, 2, "a read of the whole log lists both")
}
