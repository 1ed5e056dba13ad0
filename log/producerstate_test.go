package log

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// producerBatch is a batch of n 100-byte records, stamped now, from producer (id, epoch)
// starting at sequence seq, transactional if txn.
func producerBatch(t testing.TB, id int64, epoch int16, seq int32, n int, txn bool) segment.Batch {
	t.Helper()
	// Recent, or the producer would have expired by the next open
	// (producer.id.expiration.ms counts from its last timestamp).
	return producerBatchAt(t, time.Now().UnixMilli(), id, epoch, seq, n, txn)
}

// producerBatchAt is producerBatch stamped ms.
func producerBatchAt(t testing.TB, ms, id int64, epoch int16, seq int32, n int, txn bool) segment.Batch {
	t.Helper()
	recs := recordsFrom(int(seq), n, 100)
	for i := range recs {
		recs[i].Timestamp = ms
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{
		Producer: &segment.ProducerFields{ID: id, Epoch: epoch, BaseSequence: seq}, Transactional: txn})
	require.NoError(t, err)
	return b
}

// marker is the control batch a coordinator writes to end producer (id,
// epoch)'s transaction.
func marker(t testing.TB, id int64, epoch int16, typ idempotence.MarkerType, coordinatorEpoch int32) segment.Batch {
	t.Helper()
	b, err := idempotence.AppendMarkerBatch(nil, id, epoch, idempotence.Marker{Type: typ, CoordinatorEpoch: coordinatorEpoch}, time.Now().UnixMilli())
	require.NoError(t, err)
	return b
}

// appendProducer appends a producer's batch and checks the offsets it got.
func appendProducer(t testing.TB, l *Log, b segment.Batch, base, last int64) {
	t.Helper()
	res, err := l.AppendBatch(b)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, [2]int64{base, last}, [2]int64{res.BaseOffset, res.LastOffset})
}

// requireRefused checks that appending b fails with want and appends
// nothing.
func requireRefused(t testing.TB, l *Log, b segment.Batch, want error) {
	t.Helper()
	leo := l.LogEndOffset()
	_, err := l.AppendBatch(b)
	require.ErrorIs(t, err, want)
	require.Equal(t, leo, l.LogEndOffset(), "a refused batch was appended")
}

// requireDuplicate checks that appending b appends nothing and answers with
// the offsets the original got.
func requireDuplicate(t testing.TB, l *Log, b segment.Batch, base, last int64) {
	t.Helper()
	leo := l.LogEndOffset()
	res, err := l.AppendBatch(b)
	require.NoError(t, err)
	require.True(t, res.Duplicate, "a retry was not recognised")
	require.Equal(t, [2]int64{base, last}, [2]int64{res.BaseOffset, res.LastOffset}, "a retry got other offsets")
	require.Equal(t, leo, l.LogEndOffset(), "a retry was appended again")
}

// TestSequenceRulesThroughTheLog runs rows of idempotence's TestSequenceRules
// (ProducerAppendInfo.checkSequence, ProducerStateManagerTest) through
// Log.AppendBatch: what the producer state decides is what the log does.
func TestSequenceRulesThroughTheLog(t *testing.T) {
	l, err := Open("/data/s-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()

	// S1: an unknown producer is accepted at any sequence (KIP-360).
	appendProducer(t, l, producerBatch(t, 7, 0, 40, 3, false), 0, 2)
	// S2: the next sequence follows.
	appendProducer(t, l, producerBatch(t, 7, 0, 43, 2, false), 3, 4)
	// A plain batch between them changes nothing.
	appendN(t, l, 5, 1, 1, 100)
	// S5: a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, and nothing is appended.
	requireRefused(t, l, producerBatch(t, 7, 0, 46, 1, false), idempotence.ErrOutOfOrderSequence)
	// S6: a partial overlap with a retained batch too.
	requireRefused(t, l, producerBatch(t, 7, 0, 44, 2, false), idempotence.ErrOutOfOrderSequence)
	// S3: a retry of one of the last five is answered with its offsets.
	requireDuplicate(t, l, producerBatch(t, 7, 0, 40, 3, false), 0, 2)
	requireDuplicate(t, l, producerBatch(t, 7, 0, 43, 2, false), 3, 4)
	// S9: a new epoch must start at sequence 0.
	requireRefused(t, l, producerBatch(t, 7, 1, 45, 1, false), idempotence.ErrOutOfOrderSequence)
	appendProducer(t, l, producerBatch(t, 7, 1, 0, 1, false), 6, 6)
	// S11: the old epoch is fenced now.
	requireRefused(t, l, producerBatch(t, 7, 0, 45, 1, false), idempotence.ErrInvalidProducerEpoch)
	// A client may not write a control batch.
	requireRefused(t, l, marker(t, 7, 1, idempotence.MarkerCommit, 0), idempotence.ErrInvalidRecord)
}

// TestOnlyTheLastFiveBatchesAreRecognised: a retry of the sixth batch back
// is out of order, not a duplicate (ProducerStateEntry keeps five).
func TestOnlyTheLastFiveBatchesAreRecognised(t *testing.T) {
	l, err := Open("/data/s-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	for i := range 6 {
		appendProducer(t, l, producerBatch(t, 1, 0, int32(i), 1, false), int64(i), int64(i))
	}
	requireRefused(t, l, producerBatch(t, 1, 0, 0, 1, false), idempotence.ErrOutOfOrderSequence)
	requireDuplicate(t, l, producerBatch(t, 1, 0, 1, 1, false), 1, 1)
}

// TestGroupCommitValidatesInOffsetOrder: the batches of one group commit are
// validated one after the other, each against the state the earlier ones
// left, so that a producer's batches in one group follow each other and a
// retry in the same group is a duplicate.
func TestGroupCommitValidatesInOffsetOrder(t *testing.T) {
	l, err := Open("/data/s-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	group := []*pending{
		{batch: producerBatch(t, 3, 0, 0, 2, false)},
		{batch: producerBatch(t, 3, 0, 2, 2, false)},
		{batch: producerBatch(t, 3, 0, 0, 2, false)}, // the first, retried
		{batch: producerBatch(t, 3, 0, 9, 1, false)}, // a gap
		{batch: producerBatch(t, 3, 0, 4, 1, false)},
	}
	seq, synced := l.write(group)
	require.True(t, synced)
	require.NoError(t, l.sync(seq))
	require.NoError(t, group[0].err)
	require.NoError(t, group[1].err)
	require.Equal(t, int64(2), group[1].res.BaseOffset)
	require.NoError(t, group[2].err)
	require.True(t, group[2].res.Duplicate)
	require.Equal(t, int64(0), group[2].res.BaseOffset)
	require.ErrorIs(t, group[3].err, idempotence.ErrOutOfOrderSequence)
	require.NoError(t, group[4].err)
	require.Equal(t, int64(4), group[4].res.BaseOffset)
	require.Equal(t, int64(5), l.LogEndOffset())
}

// TestDuplicatesAfterRestart: a producer's retry after the log was closed
// and opened again, with segments rolled in between, is still answered with
// the original offsets, from the snapshot (which keeps a producer's newest
// batch) or from the batches replayed after it.
func TestDuplicatesAfterRestart(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/s-0", memOptions(fs))
	require.NoError(t, err)
	var off int64
	for i := range 40 { // 40 batches of ~1.2 KiB: several rolls
		appendProducer(t, l, producerBatch(t, 5, 0, int32(10*i), 10, false), off, off+9)
		off += 10
	}
	require.Greater(t, len(segmentBases(l)), 2)
	require.NoError(t, l.Close())
	snaps, err := idempotence.ListSnapshots(fs, "/data/s-0")
	require.NoError(t, err)
	require.Contains(t, snaps, off, "Close snapshots at the log end")
	for _, base := range segmentBases(l)[1:] {
		require.Contains(t, snaps, base, "a roll snapshots at the new segment's base")
	}

	l, err = Open("/data/s-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	requireDuplicate(t, l, producerBatch(t, 5, 0, 390, 10, false), 390, 399)
	requireRefused(t, l, producerBatch(t, 5, 0, 401, 1, false), idempotence.ErrOutOfOrderSequence)
	appendProducer(t, l, producerBatch(t, 5, 0, 400, 1, false), 400, 400)
}

// TestReplicatedAppendsRebuildProducerState: a follower records the
// producers of what it copies without checking them, so that once it leads
// it answers their retries as the old leader would have.
func TestReplicatedAppendsRebuildProducerState(t *testing.T) {
	leader, err := Open("/data/leader", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer leader.Close()
	follower, err := Open("/data/follower", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer follower.Close()
	appendProducer(t, leader, producerBatch(t, 9, 2, 0, 3, false), 0, 2)
	appendProducer(t, leader, producerBatch(t, 9, 2, 3, 3, false), 3, 5)
	for off := int64(0); off < leader.LogEndOffset(); {
		bs, err := leader.Read(off, 1<<20, ReadLogEnd)
		require.NoError(t, err)
		for b, err := range bs.All() {
			require.NoError(t, err)
			_, err = follower.AppendReplicated(append(segment.Batch(nil), b...))
			require.NoError(t, err)
			off = b.LastOffset() + 1
		}
		require.NoError(t, bs.Close())
	}
	requireDuplicate(t, follower, producerBatch(t, 9, 2, 3, 3, false), 3, 5)
	requireRefused(t, follower, producerBatch(t, 9, 1, 6, 1, false), idempotence.ErrInvalidProducerEpoch)
	appendProducer(t, follower, producerBatch(t, 9, 2, 6, 1, false), 6, 6)
}

// TestRefusedBatchesChangeNoProducer: a batch AppendBatch refuses or
// answers as a retry leaves every producer's state as it was (Kafka
// applies a ProducerAppendInfo only once its batches are in the log); the
// next batch is checked against the state the last append left.
func TestRefusedBatchesChangeNoProducer(t *testing.T) {
	l, err := Open("/data/s-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 1, 0, 0, 3, false), 0, 2)
	appendProducer(t, l, producerBatch(t, 1, 0, 3, 2, false), 3, 4)
	appendProducer(t, l, producerBatch(t, 3, 1, 0, 1, true), 5, 5)
	before, err := l.Producers()
	require.NoError(t, err)
	lso := l.LastStableOffset()

	// A minute later, so that a batch taken for its producer's last
	// would show in its timestamp.
	later := time.Now().Add(time.Minute).UnixMilli()
	requireRefused(t, l, producerBatchAt(t, later, 1, 0, 6, 1, false), idempotence.ErrOutOfOrderSequence)
	requireRefused(t, l, producerBatchAt(t, later, 3, 0, 1, 1, true), idempotence.ErrInvalidProducerEpoch)
	requireRefused(t, l, producerBatchAt(t, later, 3, 1, 1, 1, false), idempotence.ErrInvalidTxnState)
	requireRefused(t, l, marker(t, 3, 1, idempotence.MarkerAbort, 0), idempotence.ErrInvalidRecord)
	requireDuplicate(t, l, producerBatchAt(t, later, 1, 0, 3, 2, false), 3, 4)

	after, err := l.Producers()
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, lso, l.LastStableOffset())
	appendProducer(t, l, producerBatch(t, 1, 0, 5, 1, false), 6, 6)
}

// readCommitted returns the offsets of the records a ReadCommitted reader
// gets from offset 0.
func readOffsets(t testing.TB, l *Log, iso Isolation) []int64 {
	t.Helper()
	var offs []int64
	for r, err := range l.Records(0, iso) {
		require.NoError(t, err)
		offs = append(offs, r.Offset)
	}
	return offs
}

func offsets(from, to int64) []int64 {
	var offs []int64
	for o := from; o < to; o++ {
		offs = append(offs, o)
	}
	return offs
}

// TestLastStableOffsetAndAbortedRecords: read-committed scenarios of Kafka's
// ProducerStateManagerTest and UnifiedLogTest through the log. An open transaction holds the last stable
// offset at its first offset; ReadCommitted stops there, ReadUncommitted
// goes on to the high watermark. After a COMMIT marker its records are
// read; after an ABORT they are skipped, the .txnindex lists the
// transaction, and Read hands the aborted range to the reader.
func TestLastStableOffsetAndAbortedRecords(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)

	appendN(t, l, 0, 2, 2, 100)                                     // 0-1 plain
	appendProducer(t, l, producerBatch(t, 1, 0, 0, 2, true), 2, 3)  // txn of producer 1
	appendProducer(t, l, producerBatch(t, 2, 0, 0, 2, false), 4, 5) // idempotent, no txn
	appendProducer(t, l, producerBatch(t, 3, 0, 0, 2, true), 6, 7)  // txn of producer 3
	require.Equal(t, int64(2), l.LastStableOffset(), "the open transaction at 2 holds the LSO")
	require.Equal(t, int64(8), l.HighWatermark())
	require.Equal(t, offsets(0, 2), readOffsets(t, l, ReadCommitted))
	require.Equal(t, offsets(0, 8), readOffsets(t, l, ReadUncommitted))

	// Only a transaction's first batch needs the coordinator to know.
	needs, err := l.NeedsVerification(producerBatch(t, 1, 0, 2, 1, true))
	require.NoError(t, err)
	require.False(t, needs, "producer 1's transaction is open here")
	needs, err = l.NeedsVerification(producerBatch(t, 4, 0, 0, 1, true))
	require.NoError(t, err)
	require.True(t, needs, "producer 4 has no transaction open here")

	// A non-transactional batch while the producer's transaction is open.
	requireRefused(t, l, producerBatch(t, 1, 0, 2, 1, false), idempotence.ErrInvalidTxnState)

	res, err := l.AppendMarker(marker(t, 1, 0, idempotence.MarkerCommit, 0)) // 8
	require.NoError(t, err)
	require.Equal(t, int64(8), res.BaseOffset)
	require.Equal(t, int64(6), l.LastStableOffset(), "producer 3's transaction is still open")
	require.Equal(t, offsets(0, 6), readOffsets(t, l, ReadCommitted))

	_, err = l.AppendMarker(marker(t, 3, 0, idempotence.MarkerAbort, 0)) // 9
	require.NoError(t, err)
	require.Equal(t, int64(10), l.LastStableOffset())
	appendN(t, l, 10, 1, 1, 100)
	want := []int64{0, 1, 2, 3, 4, 5, 10} // 6-7 aborted, 8-9 markers
	require.Equal(t, want, readOffsets(t, l, ReadCommitted))
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 10}, readOffsets(t, l, ReadUncommitted), "markers are never records")

	bs, err := l.Read(4, 1<<20, ReadCommitted)
	require.NoError(t, err)
	require.Equal(t, []idempotence.AbortedTxn{{ProducerID: 3, FirstOffset: 6, LastOffset: 9, LastStableOffset: 10}}, bs.Aborted)
	var read []int64
	for r, err := range bs.Records(5) {
		require.NoError(t, err)
		read = append(read, r.Offset)
	}
	require.Equal(t, []int64{5, 10}, read, "a consumer of the read from 5 sees neither the aborted 6-7 nor the markers 8-9")
	require.Equal(t, int64(11), bs.NextOffset(), "the next read starts past the last batch")
	require.NoError(t, bs.Close())
	bs, err = l.Read(10, 1<<20, ReadCommitted)
	require.NoError(t, err)
	require.Empty(t, bs.Aborted, "the aborted transaction ends before the read")
	require.NoError(t, bs.Close())

	// The index is Kafka's file beside the segment, and it survives a
	// restart.
	bases := segmentBases(l)
	last := bases[len(bases)-1] // the records' timestamps rolled the segment
	x, err := idempotence.OpenTxnIndex(fs, segment.FileName("/data/t-0", last, txnIndexSuffix), last)
	require.NoError(t, err)
	require.Len(t, x.Entries(), 1)
	require.NoError(t, l.Close())
	l, err = Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	require.Equal(t, want, readOffsets(t, l, ReadCommitted))
}

// TestMarkersAreFenced: a marker for an older producer epoch, or from an
// older coordinator, is refused and appends nothing.
func TestMarkersAreFenced(t *testing.T) {
	l, err := Open("/data/t-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 1, 3, 0, 1, true), 0, 0)
	_, err = l.AppendMarker(marker(t, 1, 3, idempotence.MarkerCommit, 5))
	require.NoError(t, err)
	appendProducer(t, l, producerBatch(t, 1, 4, 0, 1, true), 2, 2)

	leo := l.LogEndOffset()
	_, err = l.AppendMarker(marker(t, 1, 2, idempotence.MarkerAbort, 5))
	require.ErrorIs(t, err, idempotence.ErrInvalidProducerEpoch)
	_, err = l.AppendMarker(marker(t, 1, 4, idempotence.MarkerAbort, 4))
	require.ErrorIs(t, err, idempotence.ErrTransactionCoordinatorFenced)
	_, err = l.AppendMarker(producerBatch(t, 1, 4, 1, 1, true))
	require.ErrorIs(t, err, idempotence.ErrInvalidRecord, "AppendMarker takes control batches only")
	require.Equal(t, leo, l.LogEndOffset())
	require.Equal(t, int64(2), l.LastStableOffset())
}

// TestTruncationBelowASnapshot: truncating below a snapshot deletes it and
// rebuilds the producer state from an older one and the log, so that a
// batch the truncation removed is no longer a duplicate, and the .txnindex
// loses the aborted transactions whose markers were removed.
func TestTruncationBelowASnapshot(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	var off int64
	for i := range 20 {
		appendProducer(t, l, producerBatch(t, 5, 0, int32(10*i), 10, false), off, off+9)
		off += 10
	}
	appendProducer(t, l, producerBatch(t, 6, 0, 0, 1, true), 200, 200)
	_, err = l.AppendMarker(marker(t, 6, 0, idempotence.MarkerAbort, 0)) // 201
	require.NoError(t, err)
	bases := segmentBases(l)
	require.Greater(t, len(bases), 2)
	cut := bases[len(bases)-2] - 5 // inside the segment before the last
	snaps, err := idempotence.ListSnapshots(fs, "/data/t-0")
	require.NoError(t, err)
	require.Contains(t, snaps, bases[len(bases)-1])

	require.NoError(t, l.TruncateTo(cut))
	leo := l.LogEndOffset()
	require.LessOrEqual(t, leo, cut)
	snaps, err = idempotence.ListSnapshots(fs, "/data/t-0")
	require.NoError(t, err)
	for _, s := range snaps {
		require.LessOrEqual(t, s, leo, "a snapshot past the new log end is deleted")
	}
	_, err = fs.Stat(segment.FileName("/data/t-0", bases[len(bases)-1], txnIndexSuffix))
	require.Error(t, err, "the removed segment's .txnindex is removed")
	bs, err := l.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	require.Empty(t, bs.Aborted)
	require.NoError(t, bs.Close())

	// The last batch kept is the producer's last; the removed ones can be
	// sent again.
	requireDuplicate(t, l, producerBatch(t, 5, 0, int32(leo-10), 10, false), leo-10, leo-1)
	appendProducer(t, l, producerBatch(t, 5, 0, int32(leo), 10, false), leo, leo+9)
}

// TestRetentionDeletesSnapshotsAndTxnIndexes: the snapshots and .txnindex
// files of segments retention deletes go with them.
func TestRetentionDeletesSnapshotsAndTxnIndexes(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 6, 0, 0, 1, true), 0, 0)
	_, err = l.AppendMarker(marker(t, 6, 0, idempotence.MarkerAbort, 0))
	require.NoError(t, err)
	var off int64 = 2
	for i := range 20 {
		appendProducer(t, l, producerBatch(t, 5, 0, int32(10*i), 10, false), off, off+9)
		off += 10
	}
	bases := segmentBases(l)
	require.Greater(t, len(bases), 3)
	txnIndex := segment.FileName("/data/t-0", 0, txnIndexSuffix)
	_, err = fs.Stat(txnIndex)
	require.NoError(t, err)

	require.NoError(t, l.DeleteRecordsBefore(bases[2]))
	_, err = fs.Stat(txnIndex)
	require.Error(t, err, "the deleted segment's .txnindex is deleted")
	_, err = fs.Stat(txnIndex + deletedSuffix)
	require.Error(t, err)
	snaps, err := idempotence.ListSnapshots(fs, "/data/t-0")
	require.NoError(t, err)
	require.NotEmpty(t, snaps)
	require.GreaterOrEqual(t, snaps[0], bases[2], "the deleted segments' snapshots are deleted")
	requireDuplicate(t, l, producerBatch(t, 5, 0, 190, 10, false), off-10, off-1)
}

// TestCorruptTxnIndexIsRebuilt: a .txnindex that cannot be read is removed
// and rebuilt from the log when it opens.
func TestCorruptTxnIndexIsRebuilt(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	appendProducer(t, l, producerBatch(t, 6, 0, 0, 1, true), 0, 0)
	_, err = l.AppendMarker(marker(t, 6, 0, idempotence.MarkerAbort, 0))
	require.NoError(t, err)
	appendN(t, l, 2, 1, 1, 100)
	require.NoError(t, l.Close())
	name := segment.FileName("/data/t-0", 0, txnIndexSuffix)
	bad := make([]byte, idempotence.TxnIndexEntrySize)
	bad[1] = 9 // version 9
	require.NoError(t, vfs.WriteFileAtomic(fs, name, bad))

	l, err = Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	require.Equal(t, []int64{2}, readOffsets(t, l, ReadCommitted))
	x, err := idempotence.OpenTxnIndex(fs, name, 0)
	require.NoError(t, err)
	require.Equal(t, []idempotence.AbortedTxn{{ProducerID: 6, FirstOffset: 0, LastOffset: 1, LastStableOffset: 2}}, x.Entries())
}

// TestCrashAtEveryOperationKeepsProducerState appends idempotent batches
// from three producers, with rolls (and so snapshots) and an aborted
// transaction, under FsyncAlways, and cuts the power before each
// file-system operation in turn. After recovery every producer's last
// acknowledged batch, sent again, is a duplicate answered with its
// original offsets; the batch after it is taken; and if the ABORT marker
// was acknowledged its records are not read committed.
func TestCrashAtEveryOperationKeepsProducerState(t *testing.T) {
	type sent struct {
		seq        int32
		base, last int64
	}
	const producers, n = 3, 5
	batchOf := func(pid int64, seq int32) segment.Batch {
		return producerBatch(t, pid, 0, seq, n, false)
	}
	// acked[pid] is the producer's last acknowledged batch, acked[9] the
	// aborted transaction's; abortAcked whether the ABORT marker was.
	script := func(fs *vfs.MemFS, acked map[int64]sent, abortAcked *bool) {
		l, err := Open("/data/k-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		for i := range 36 {
			pid := int64(i % producers)
			seq := int32(i/producers) * n
			if i == 7 {
				res, err := l.AppendBatch(producerBatch(t, 9, 0, 0, 2, true))
				if err != nil {
					return
				}
				acked[9] = sent{0, res.BaseOffset, res.LastOffset}
			}
			if i == 20 {
				if _, err := l.AppendMarker(marker(t, 9, 0, idempotence.MarkerAbort, 0)); err != nil {
					return
				}
				*abortAcked = true
			}
			res, err := l.AppendBatch(batchOf(pid, seq))
			if err != nil {
				return
			}
			acked[pid] = sent{seq, res.BaseOffset, res.LastOffset}
		}
	}
	ackedAll := map[int64]sent{}
	var abortAll bool
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, ackedAll, &abortAll) })
	require.True(t, abortAll)
	require.Len(t, ackedAll, producers+1)

	step := 1
	if testing.Short() {
		step = 3
	}
	for stop := 0; stop < total; stop += step {
		acked := map[int64]sent{}
		abortAcked := false
		after := crashedAt(t, stop, 11, func(fs *vfs.MemFS) { script(fs, acked, &abortAcked) })
		l, err := Open("/data/k-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		txn := acked[9]
		delete(acked, 9)
		for pid, s := range acked {
			res, err := l.AppendBatch(batchOf(pid, s.seq))
			require.NoError(t, err, "stop %d: producer %d's retry", stop, pid)
			require.True(t, res.Duplicate, "stop %d: producer %d's retry of an acknowledged batch was appended again", stop, pid)
			require.Equal(t, [2]int64{s.base, s.last}, [2]int64{res.BaseOffset, res.LastOffset}, "stop %d: producer %d", stop, pid)
			_, err = l.AppendBatch(batchOf(pid, s.seq+n))
			require.NoError(t, err, "stop %d: producer %d's next batch", stop, pid)
		}
		if abortAcked {
			require.Equal(t, l.HighWatermark(), l.LastStableOffset(), "stop %d", stop)
			for r, err := range l.Records(0, ReadCommitted) {
				require.NoError(t, err)
				require.False(t, r.Offset >= txn.base && r.Offset <= txn.last, "stop %d: an aborted record at %d was read committed", stop, r.Offset)
			}
		}
		require.NoError(t, l.Close())
	}
}

// TestIdleProducersExpire: a producer silent for longer than
// producer.id.expiration.ms (a day) is forgotten at the next check, every
// ten minutes, and its next batch is taken at any sequence as a new
// producer's is (KIP-360).
func TestIdleProducersExpire(t *testing.T) {
	now := time.Now()
	opts := memOptions(newMemFS(t))
	opts.Now = func() time.Time { return now }
	l, err := Open("/data/e-0", opts)
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 4, 0, 0, 1, false), 0, 0)
	gap := producerBatch(t, 4, 0, 7, 1, false)
	requireRefused(t, l, gap, idempotence.ErrOutOfOrderSequence)

	now = now.Add(idempotence.DefaultProducerIDExpiration - time.Minute)
	appendN(t, l, 1, 1, 1, 100) // the check runs: not yet expired
	requireRefused(t, l, gap, idempotence.ErrOutOfOrderSequence)

	now = now.Add(producerExpirationCheck + 2*time.Minute)
	appendN(t, l, 2, 1, 1, 100)
	appendProducer(t, l, gap, 3, 3)
}

// TestPartitionChecksProducers: a Dir's partition validates producer
// batches as its Log does and takes markers.
func TestPartitionChecksProducers(t *testing.T) {
	d, err := OpenDir("/data", DirOptions{Log: memOptions(newMemFS(t))})
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	p, err := d.Partition("t", 0)
	require.NoError(t, err)
	res, err := p.AppendBatch(producerBatch(t, 2, 0, 0, 3, true))
	require.NoError(t, err)
	_, err = p.AppendBatch(producerBatch(t, 2, 0, 5, 1, true))
	require.ErrorIs(t, err, idempotence.ErrOutOfOrderSequence)
	dup, err := p.AppendBatch(producerBatch(t, 2, 0, 0, 3, true))
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, res.BaseOffset, dup.BaseOffset)
	_, err = p.AppendMarker(marker(t, 2, 0, idempotence.MarkerAbort, 0))
	require.NoError(t, err)
	var got []segment.Record
	for r, err := range p.Records(0, ReadCommitted) {
		require.NoError(t, err)
		got = append(got, r)
	}
	require.Empty(t, got, "the aborted records are skipped")
}

// TestCompactionKeepsAbortedTransactions: the segment compaction writes in
// place of several keeps their aborted transactions in its .txnindex, so
// that ReadCommitted still skips the aborted records it keeps (Kafka's
// cleaner rewrites the index of the cleaned segment too).
func TestCompactionKeepsAbortedTransactions(t *testing.T) {
	fs := newMemFS(t)
	now := time.Now()
	opts := memOptions(fs)
	opts.Now = func() time.Time { return now }
	l, err := Open("/data/c-0", opts)
	require.NoError(t, err)
	var aborted []int64
	var off int64
	for i := range 60 {
		res, err := l.AppendBatch(producerBatch(t, int64(100+i), 0, int32(1000*(i%4)), 10, true)) // keys repeat
		require.NoError(t, err)
		typ := idempotence.MarkerCommit
		if i%3 == 0 {
			typ = idempotence.MarkerAbort
			aborted = append(aborted, offsets(res.BaseOffset, res.LastOffset+1)...)
		}
		_, err = l.AppendMarker(marker(t, int64(100+i), 0, typ, 0))
		require.NoError(t, err)
		off = l.LogEndOffset()
	}
	require.Greater(t, len(segmentBases(l)), 3)
	_, err = l.Compact(now, CompactOptions{Force: true}) // removes most records
	require.NoError(t, err)
	st, err := l.Compact(now, CompactOptions{Force: true}) // merges the small segments
	require.NoError(t, err)
	require.Greater(t, st.Segments, st.Groups, "segments were merged")
	for r, err := range l.Records(0, ReadCommitted) {
		require.NoError(t, err)
		require.NotContains(t, aborted, r.Offset, "an aborted record was read committed after compaction")
	}
	require.NoError(t, l.Close())
	l, err = Open("/data/c-0", opts)
	require.NoError(t, err)
	defer l.Close()
	n := 0
	for r, err := range l.Records(0, ReadCommitted) {
		require.NoError(t, err)
		require.NotContains(t, aborted, r.Offset, "an aborted record was read committed after compaction and a restart")
		n++
	}
	require.Positive(t, n)
	require.Equal(t, off, l.LogEndOffset())
}

// TestLastStableOffsetWaitsForTheMarkerToReplicate: with a replication
// layer owning the high watermark, a completed transaction holds the last
// stable offset back until the high watermark passes its marker
// (ProducerStateManager.onHighWatermarkUpdated), and the LSO never passes
// the high watermark.
func TestLastStableOffsetWaitsForTheMarkerToReplicate(t *testing.T) {
	opts := memOptions(newMemFS(t))
	opts.ExternalHighWatermark = true
	l, err := Open("/data/r-0", opts)
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 3, 3, 100)
	appendProducer(t, l, producerBatch(t, 1, 0, 0, 2, true), 3, 4)
	_, err = l.AppendMarker(marker(t, 1, 0, idempotence.MarkerCommit, 0)) // 5
	require.NoError(t, err)
	require.Equal(t, int64(0), l.LastStableOffset(), "nothing is replicated yet")
	_, err = l.SetHighWatermark(4)
	require.NoError(t, err)
	require.Equal(t, int64(3), l.LastStableOffset(), "the marker at 5 is not replicated")
	require.Equal(t, offsets(0, 3), readOffsets(t, l, ReadCommitted))
	_, err = l.SetHighWatermark(6)
	require.NoError(t, err)
	require.Equal(t, int64(6), l.LastStableOffset())
	require.Equal(t, offsets(0, 5), readOffsets(t, l, ReadCommitted))
}

// TestConcurrentProducersAndReadCommittedReaders: producers appending at
// once, so that their batches share group commits and rolls, each get
// every batch in, in sequence, once; transactions commit and abort
// meanwhile, and a read-committed reader never sees an aborted record.
func TestConcurrentProducersAndReadCommittedReaders(t *testing.T) {
	l, err := Open("/data/c-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	const producers, batches = 4, 40
	errs := make(chan error, producers+1)
	abortedKeys := make(chan string, producers*batches)
	for p := range producers {
		go func() {
			pid := int64(p)
			for i := range batches {
				txn := i%4 == 3
				b, err := segment.AppendBatch(nil, []segment.Record{{Key: fmt.Appendf(nil, "p%d-%d", p, i), Value: []byte("v"), Timestamp: time.Now().UnixMilli()}},
					segment.BuildOptions{Producer: &segment.ProducerFields{ID: pid, BaseSequence: int32(i)}, Transactional: txn})
				if err != nil {
					errs <- err
					return
				}
				res, err := l.AppendBatch(b)
				if err == nil && res.Duplicate {
					err = fmt.Errorf("producer %d's batch %d taken for a duplicate", p, i)
				}
				if err == nil && txn {
					typ := idempotence.MarkerCommit
					if i%8 == 7 {
						typ = idempotence.MarkerAbort
						abortedKeys <- fmt.Sprintf("p%d-%d", p, i)
					}
					var m segment.Batch
					if m, err = idempotence.AppendMarkerBatch(nil, pid, 0, idempotence.Marker{Type: typ}, time.Now().UnixMilli()); err == nil {
						_, err = l.AppendMarker(m)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			for _, err := range l.Records(0, ReadCommitted) {
				if err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	for range producers {
		require.NoError(t, <-errs)
	}
	<-done
	close(abortedKeys)
	skipped := map[string]bool{}
	for k := range abortedKeys {
		skipped[k] = true
	}
	n := 0
	for r, err := range l.Records(0, ReadCommitted) {
		require.NoError(t, err)
		require.False(t, skipped[string(r.Key)], "aborted record %s at %d read committed", r.Key, r.Offset)
		n++
	}
	require.Equal(t, producers*batches-len(skipped), n)
	require.Equal(t, l.HighWatermark(), l.LastStableOffset())
}

// TestTruncatedSnapshotStaysDeletedAfterACrash: a truncation below the
// clean-shutdown snapshot deletes it for good, so that when the log grows
// past its offset again and the power is cut, recovery does not take the
// old snapshot for the state of the new batches.
func TestTruncatedSnapshotStaysDeletedAfterACrash(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	for i := range 4 {
		appendProducer(t, l, producerBatch(t, 5, 0, int32(10*i), 10, false), int64(10*i), int64(10*i+9))
	}
	require.NoError(t, l.Close()) // a snapshot at 40
	l, err = Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	require.NoError(t, l.TruncateTo(20))
	// The producer sends again from sequence 20, in batches of another
	// size, past offset 40.
	for i := range 5 {
		appendProducer(t, l, producerBatch(t, 5, 0, int32(20+5*i), 5, false), int64(20+5*i), int64(24+5*i))
	}
	after := fs.Crash(vfs.CrashOptions{}) // every unsynced change lost
	l, err = Open("/data/t-0", memOptions(after))
	require.NoError(t, err)
	defer l.Close()
	requireDuplicate(t, l, producerBatch(t, 5, 0, 40, 5, false), 40, 44)
	appendProducer(t, l, producerBatch(t, 5, 0, 45, 1, false), 45, 45)
}
