package log

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// txnModel is what a log written by txnWorkload holds: the records a
// ReadCommitted reader must get, at their offsets, and the offsets of
// aborted records. Every committed record has a key of its own, so
// compaction may remove none of them; aborted records reuse the keys of
// committed ones, so that if their keys counted, compaction would remove
// committed records.
type txnModel struct {
	committed map[int64]segment.Record
	aborted   map[int64]bool
	seq       map[int64]int32 // producer id: its next sequence
	open      map[int64][]segment.Record
	openAt    map[int64][]int64 // producer id: the offsets of its open transaction's records
	keys      int
}

func newTxnModel() *txnModel {
	return &txnModel{committed: map[int64]segment.Record{}, aborted: map[int64]bool{}, seq: map[int64]int32{},
		open: map[int64][]segment.Record{}, openAt: map[int64][]int64{}}
}

// records returns n records stamped now: with new keys, or, for an
// aborted transaction's, with keys committed records hold.
func (m *txnModel) records(rng *rand.Rand, now time.Time, n int, reuse bool) []segment.Record {
	recs := make([]segment.Record, n)
	for i := range recs {
		k := m.keys
		if reuse && m.keys > 0 {
			k = rng.IntN(m.keys)
		} else {
			m.keys++
		}
		recs[i] = segment.Record{Timestamp: now.UnixMilli(), Key: fmt.Appendf(nil, "k%d", k),
			Value: []byte(strings.Repeat(string(rune('a'+rng.IntN(26))), 20+rng.IntN(100)))}
	}
	return recs
}

// produce appends a transactional batch of pid's.
func (m *txnModel) produce(t testing.TB, l *Log, pid int64, recs []segment.Record) {
	t.Helper()
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{
		Producer: &segment.ProducerFields{ID: pid, BaseSequence: m.seq[pid]}, Transactional: true})
	require.NoError(t, err)
	res, err := l.AppendBatch(b)
	require.NoError(t, err)
	m.seq[pid] += int32(len(recs))
	for i, r := range recs {
		r.Offset = res.BaseOffset + int64(i)
		m.open[pid] = append(m.open[pid], r)
		m.openAt[pid] = append(m.openAt[pid], r.Offset)
	}
}

// end writes pid's COMMIT or ABORT marker.
func (m *txnModel) end(t testing.TB, l *Log, pid int64, now time.Time, abort bool) {
	t.Helper()
	typ := idempotence.MarkerCommit
	if abort {
		typ = idempotence.MarkerAbort
	}
	b, err := idempotence.AppendMarkerBatch(nil, pid, 0, idempotence.Marker{Type: typ}, now.UnixMilli())
	require.NoError(t, err)
	_, err = l.AppendMarker(b)
	require.NoError(t, err)
	for _, r := range m.open[pid] {
		if abort {
			m.aborted[r.Offset] = true
		} else {
			m.committed[r.Offset] = r
		}
	}
	delete(m.open, pid)
	delete(m.openAt, pid)
}

// plain appends records without a producer.
func (m *txnModel) plain(t testing.TB, l *Log, recs []segment.Record) {
	t.Helper()
	res, err := l.Append(recs)
	require.NoError(t, err)
	for i, r := range recs {
		r.Offset = res.BaseOffset + int64(i)
		m.committed[r.Offset] = r
	}
}

// txnWorkload appends steps of plain batches and of transactions of three
// producers, interleaved, a third of them aborted, and ends every
// transaction still open.
func txnWorkload(t testing.TB, l *Log, m *txnModel, rng *rand.Rand, now time.Time, steps int) {
	t.Helper()
	aborting := map[int64]bool{}
	for range steps {
		pid := int64(1 + rng.IntN(3))
		switch x := rng.IntN(10); {
		case x < 3:
			m.plain(t, l, m.records(rng, now, 1+rng.IntN(4), false))
		case x < 7 || len(m.open[pid]) == 0:
			if len(m.open[pid]) == 0 {
				aborting[pid] = rng.IntN(3) == 0
			}
			m.produce(t, l, pid, m.records(rng, now, 1+rng.IntN(4), aborting[pid]))
		default:
			m.end(t, l, pid, now, aborting[pid])
		}
	}
	for pid := range int64(4) {
		if len(m.open[pid]) > 0 {
			m.end(t, l, pid, now, aborting[pid])
		}
	}
}

// readCommitted returns what a ReadCommitted reader gets from the whole log.
func readCommitted(t testing.TB, l *Log) []segment.Record {
	t.Helper()
	var out []segment.Record
	for r, err := range l.Records(l.LogStartOffset(), ReadCommitted) {
		require.NoError(t, err)
		r.Key, r.Value, r.Headers = slices.Clone(r.Key), slices.Clone(r.Value), nil
		out = append(out, r)
	}
	return out
}

// requireCommitted checks that a ReadCommitted reader gets exactly the
// model's committed records, and that no aborted record is in the log
// below the offset from which compaction left the log alone.
func (m *txnModel) requireCommitted(t testing.TB, l *Log, uncleaned int64, msg string) {
	t.Helper()
	got := readCommitted(t, l)
	offs := make([]int64, 0, len(m.committed))
	for off := range m.committed {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	require.Len(t, got, len(offs), msg)
	for i, r := range got {
		want := m.committed[offs[i]]
		require.Equal(t, offs[i], r.Offset, msg)
		require.Equal(t, want.Key, r.Key, "%s: key at %d", msg, r.Offset)
		require.Equal(t, want.Value, r.Value, "%s: value at %d", msg, r.Offset)
	}
	for r, err := range l.Records(l.LogStartOffset(), ReadLogEnd) {
		require.NoError(t, err)
		require.False(t, m.aborted[r.Offset] && r.Offset < uncleaned, "%s: aborted record at %d is still there", msg, r.Offset)
	}
	require.Equal(t, l.HighWatermark(), l.LastStableOffset(), "%s: a transaction hangs", msg)
}

// requireTxnIndexConsistent checks every segment's .txnindex against the
// log: entries in order of their markers, each the ABORT marker of its
// producer in the entry's segment, and, for every transactional batch with
// records in the log that the model says is aborted, an entry that covers
// it (or ReadCommitted readers would take it as committed).
func (m *txnModel) requireTxnIndexConsistent(t testing.TB, l *Log, msg string) {
	t.Helper()
	markers := map[int64]segment.Batch{}
	var aborted []segment.Batch
	for _, b := range batchesOf(t, l) {
		switch {
		case b.Control():
			markers[b.BaseOffset()] = b
		case b.NumRecords() > 0 && m.aborted[b.BaseOffset()]:
			aborted = append(aborted, b)
		}
	}
	l.mu.RLock()
	segs := slices.Clone(l.segs)
	l.mu.RUnlock()
	var all []idempotence.AbortedTxn
	for i, s := range segs {
		x, err := s.txnIndex()
		require.NoError(t, err, msg)
		last := int64(-1)
		for _, e := range x.Entries() {
			require.Greater(t, e.LastOffset, last, "%s: .txnindex of segment %d out of order", msg, s.BaseOffset())
			last = e.LastOffset
			require.GreaterOrEqual(t, e.LastOffset, s.BaseOffset(), "%s: entry %+v in the wrong segment", msg, e)
			if i+1 < len(segs) {
				require.Less(t, e.LastOffset, segs[i+1].BaseOffset(), "%s: entry %+v in the wrong segment", msg, e)
			}
			mk, ok := markers[e.LastOffset]
			require.True(t, ok, "%s: entry %+v names no marker", msg, e)
			info, err := idempotence.InfoOf(mk)
			require.NoError(t, err, msg)
			require.Equal(t, e.ProducerID, info.ProducerID, msg)
			require.NotNil(t, info.Marker, "%s: entry %+v names an emptied marker", msg, e)
			require.Equal(t, idempotence.MarkerAbort, info.Marker.Type, msg)
			all = append(all, e)
		}
	}
	for _, b := range aborted {
		require.True(t, slices.ContainsFunc(all, func(e idempotence.AbortedTxn) bool {
			return e.ProducerID == b.ProducerID() && e.FirstOffset <= b.BaseOffset() && b.LastOffset() < e.LastOffset
		}), "%s: aborted batch at %d has no .txnindex entry", msg, b.BaseOffset())
	}
}

// markerBatches returns the control batches below offset end.
func markerBatches(t testing.TB, l *Log, end int64) []segment.Batch {
	var out []segment.Batch
	for _, b := range batchesOf(t, l) {
		if b.Control() && b.BaseOffset() < end {
			out = append(out, b)
		}
	}
	return out
}

// TestCompactionRemovesAbortedTransactions follows Kafka's log cleaner
// (Cleaner.java, CleanedTransactionMetadata) over a log of interleaved
// committed and aborted transactions: the first compaction removes every
// aborted record in the cleanable part, keeps every committed one (though
// aborted records hold later records of their keys), and keeps the ABORT
// markers, with their .txnindex entries, since it read their
// transactions' batches. The second finds the markers' transactions empty
// and stamps them with a delete horizon; the third, past it, removes them,
// but for the headers that keep each producer's last batch. ReadCommitted
// reads the same records all along, and after a restart that rebuilds
// the producer state from the log alone.
func TestCompactionRemovesAbortedTransactions(t *testing.T) {
	now := t0
	fs := newMemFS(t)
	l := compactLog(t, fs, &now)
	m := newTxnModel()
	txnWorkload(t, l, m, rand.New(rand.NewPCG(7, 7)), now, 600)
	require.NotEmpty(t, m.aborted)
	before := readCommitted(t, l)
	m.requireCommitted(t, l, 0, "before compaction")
	m.requireTxnIndexConsistent(t, l, "before compaction")

	uncleaned := activeBase(l)
	abortedBelow := 0
	for off := range m.aborted {
		if off < uncleaned {
			abortedBelow++
		}
	}
	require.Greater(t, abortedBelow, 20)
	abortMarkers := 0
	for _, b := range markerBatches(t, l, uncleaned) {
		info, err := idempotence.InfoOf(b)
		require.NoError(t, err)
		if info.Marker.Type == idempotence.MarkerAbort {
			abortMarkers++
		}
	}

	st, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.EqualValues(t, abortedBelow, st.RecordsRemoved, "only the aborted records go")
	require.Equal(t, before, readCommitted(t, l), "ReadCommitted reads what it read before")
	m.requireCommitted(t, l, uncleaned, "after the first compaction")
	m.requireTxnIndexConsistent(t, l, "after the first compaction")
	entries := func() int {
		n := 0
		for _, s := range l.segs {
			x, err := s.txnIndex()
			require.NoError(t, err)
			for _, e := range x.Entries() {
				if e.LastOffset < uncleaned {
					n++
				}
			}
		}
		return n
	}
	require.Equal(t, abortMarkers, entries(), "each ABORT marker keeps its entry while it keeps its data's place")

	// Second: no marker's transaction has a batch left but producers'
	// last ones; the others are stamped with a horizon.
	_, err = l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, before, readCommitted(t, l))
	m.requireTxnIndexConsistent(t, l, "after the second compaction")
	stamped := 0
	for _, b := range markerBatches(t, l, uncleaned) {
		if h, ok := b.DeleteHorizon(); ok {
			require.Equal(t, now.Add(DefaultDeleteRetention).UnixMilli(), h)
			stamped++
		}
	}
	require.Greater(t, stamped, abortMarkers/2, "markers of empty transactions are stamped")

	// Third, past the horizon: the stamped markers go, but for producers'
	// last batches, kept as headers.
	markersBefore := len(markerBatches(t, l, uncleaned))
	later := now.Add(DefaultDeleteRetention)
	_, err = l.Compact(later, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, before, readCommitted(t, l))
	m.requireTxnIndexConsistent(t, l, "after the horizon")
	emptied := 0
	for _, b := range markerBatches(t, l, uncleaned) {
		_, stampedBefore := b.DeleteHorizon()
		require.False(t, stampedBefore && b.NumRecords() > 0, "marker at %d outlived its horizon", b.BaseOffset())
		if b.NumRecords() == 0 {
			emptied++
		}
	}
	require.LessOrEqual(t, emptied, 3, "at most a header for each producer's last batch")
	require.Equal(t, stamped, markersBefore-len(markerBatches(t, l, uncleaned))+emptied,
		"every stamped marker went, or stays as its producer's last batch")

	// A restart without producer snapshots replays the whole log: no
	// transaction is left open, and each producer's sequence goes on.
	leo := l.LogEndOffset()
	require.NoError(t, l.Close())
	removeSnapshots(t, fs, "/data/c-0")
	l = compactLog(t, fs, &now)
	defer l.Close()
	require.Equal(t, leo, l.LogEndOffset())
	require.Equal(t, before, readCommitted(t, l), "after a restart")
	m.requireTxnIndexConsistent(t, l, "after a restart")
	require.Equal(t, l.HighWatermark(), l.LastStableOffset(), "a transaction hangs after the restart")
	for pid := range int64(4) {
		if _, ok := m.seq[pid]; !ok {
			continue
		}
		e, ok := l.producers.Producer(pid)
		require.True(t, ok, "producer %d forgotten", pid)
		require.Equal(t, m.seq[pid]-1, e.LastSeq(), "producer %d's sequence", pid)
	}
}

// removeSnapshots deletes the producer-state snapshots of the log in dir.
func removeSnapshots(t testing.TB, fs vfs.FS, dir string) {
	t.Helper()
	names, err := fs.List(dir)
	require.NoError(t, err)
	for _, n := range names {
		if strings.HasSuffix(n, ".snapshot") {
			require.NoError(t, fs.Remove(dir+"/"+n))
		}
	}
}

// TestCompactionLeavesOpenTransactionsAlone: compaction stops at the last
// stable offset (Kafka's LogCleanerManager.cleanableOffsets): the segments
// from the one where a transaction is open on are not cleaned, however
// many of their records later ones supersede, until the transaction ends.
func TestCompactionLeavesOpenTransactionsAlone(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newTxnModel()
	rng := rand.New(rand.NewPCG(1, 1))
	m.plain(t, l, m.records(rng, now, 20, false))
	open := l.LogEndOffset()
	m.produce(t, l, 9, m.records(rng, now, 3, false))
	rec := func(i int) segment.Record {
		return segment.Record{Timestamp: now.UnixMilli(), Key: []byte("same"), Value: fmt.Appendf(nil, "%d %s", i, strings.Repeat("x", 200))}
	}
	for i := range 80 { // every one supersedes the one before
		_, err := l.Append([]segment.Record{rec(i)})
		require.NoError(t, err)
	}
	require.Equal(t, open, l.LastStableOffset())
	require.Greater(t, len(segmentBases(l)), 3)
	before := batchesOf(t, l)

	st, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Zero(t, st.RecordsRemoved, "nothing past the last stable offset is cleaned")
	require.Equal(t, before, batchesOf(t, l))

	m.end(t, l, 9, now, false)
	_, err = l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	n := 0
	for r, err := range l.Records(open, ReadCommitted) {
		require.NoError(t, err)
		if string(r.Key) == "same" {
			n++
		}
	}
	require.Less(t, n, 80, "once the transaction ended, the superseded records go")
}

// TestCompactionKeepsAbortedProducersLastBatch: a producer whose last data
// batch is in an aborted transaction keeps it as a header
// (RETAIN_EMPTY), and its marker stays as long as that header does, so
// that a replay of the log from its start, with no snapshot, finds the
// producer's epoch and sequence and no transaction left open (an
// emptied batch whose marker went would open one for good).
func TestCompactionKeepsAbortedProducersLastBatch(t *testing.T) {
	now := t0
	fs := newMemFS(t)
	l := compactLog(t, fs, &now)
	m := newTxnModel()
	rng := rand.New(rand.NewPCG(2, 2))
	m.produce(t, l, 5, m.records(rng, now, 3, false))
	m.end(t, l, 5, now, false)
	m.produce(t, l, 5, m.records(rng, now, 2, true))
	m.end(t, l, 5, now, true)
	for range 60 {
		m.plain(t, l, m.records(rng, now, 2, false))
	}
	for _, at := range []time.Time{now, now, now.Add(DefaultDeleteRetention), now.Add(2 * DefaultDeleteRetention)} {
		_, err := l.Compact(at, CompactOptions{Force: true})
		require.NoError(t, err)
	}
	var kept []segment.Batch
	for _, b := range batchesOf(t, l) {
		if b.ProducerID() == 5 {
			kept = append(kept, b)
		}
	}
	// The committed transaction's records are all the latest of their
	// keys, so it stays whole, with its marker.
	require.Len(t, kept, 4, "the committed transaction, the producer's last data batch and the markers")
	require.Zero(t, kept[2].NumRecords(), "the aborted batch is a bare header")
	require.EqualValues(t, 3, kept[2].BaseSequence())
	require.True(t, kept[3].Control())
	info, err := idempotence.InfoOf(kept[3])
	require.NoError(t, err)
	require.Equal(t, idempotence.MarkerAbort, info.Marker.Type, "the ABORT marker stays while the header does")
	m.requireCommitted(t, l, activeBase(l), "after compaction")

	require.NoError(t, l.Close())
	removeSnapshots(t, fs, "/data/c-0")
	l = compactLog(t, fs, &now)
	defer l.Close()
	require.Equal(t, l.HighWatermark(), l.LastStableOffset(), "the replay left a transaction open")
	gap := producerBatch(t, 5, 0, 9, 1, false)
	requireRefused(t, l, gap, idempotence.ErrOutOfOrderSequence)
	appendProducer(t, l, producerBatch(t, 5, 0, 5, 1, false), l.LogEndOffset(), l.LogEndOffset())
}

// txnCrashAll makes TestCrashDuringCompactionOfTransactions cut the power
// before every operation, the writes of the new segments' batches too.
var txnCrashAll = flag.Bool("strand.txncrash", false, "cut the power before every write in TestCrashDuringCompactionOfTransactions")

// TestCrashDuringCompactionOfTransactions cuts the power before each
// file-system operation of three compactions of a log of transactions
// (one that removes aborted records, one that stamps markers, one past
// the horizon that removes them): each create, truncate, sync, rename and
// remove, and each tenth write of a batch to a new segment
// (-strand.txncrash: each write; a cut between two writes of a file not yet
// synced leaves what a cut before the next sync leaves, with more or less
// of its bytes). With -short, every sixth of those operations. The log
// must reopen with every committed record, ReadCommitted reading exactly
// those, its .txnindex files in agreement with it and no transaction left
// open; and compact again.
func TestCrashDuringCompactionOfTransactions(t *testing.T) {
	const steps = 60
	script := func(fs *vfs.MemFS, m *txnModel, compacting func(bool)) {
		now := t0
		l, err := Open("/data/c-0", compactOptions(fs, &now))
		if err != nil {
			return
		}
		defer l.Close()
		txnWorkload(t, l, m, rand.New(rand.NewPCG(3, 4)), now, steps)
		compacting(true)
		defer compacting(false)
		for _, at := range []time.Time{now, now, now.Add(DefaultDeleteRetention)} {
			if _, err := l.Compact(at, CompactOptions{Force: true}); err != nil {
				return
			}
		}
	}
	var during []int
	n, in, writes := 0, false, 0
	fs := newMemFS(t)
	fs.SetHook(func(op vfs.Op) error {
		if in && (op.Kind != vfs.OpWrite || writes%10 == 0 || *txnCrashAll) {
			during = append(during, n)
		}
		if in && op.Kind == vfs.OpWrite {
			writes++
		}
		n++
		return nil
	})
	script(fs, newTxnModel(), func(c bool) { in = c })
	require.Greater(t, len(during), 20)
	stride := 1
	if testing.Short() {
		stride = 6
	}

	for i := 0; i < len(during); i += stride {
		stop := during[i]
		m := newTxnModel()
		after := crashedAt(t, stop, 11, func(fs *vfs.MemFS) { script(fs, m, func(bool) {}) })
		msg := fmt.Sprintf("crash at operation %d", stop)
		now := t0
		l, err := Open("/data/c-0", compactOptions(after, &now))
		require.NoError(t, err, msg)
		m.requireCommitted(t, l, 0, msg)
		m.requireTxnIndexConsistent(t, l, msg)
		_, err = l.Compact(now.Add(DefaultDeleteRetention), CompactOptions{Force: true})
		require.NoError(t, err, msg)
		m.requireCommitted(t, l, activeBase(l), msg+", compacted again")
		m.requireTxnIndexConsistent(t, l, msg+", compacted again")
		require.NoError(t, l.Close())
	}
}
