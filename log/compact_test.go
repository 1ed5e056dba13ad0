package log

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// t0 is the tests' clock at the start.
var t0 = time.UnixMilli(1_700_000_000_000)

// compactLog opens a log of 4 KiB segments on fs whose clock is *now.
func compactLog(t testing.TB, fs vfs.FS, now *time.Time) *Log {
	t.Helper()
	l, err := Open("/data/c-0", compactOptions(fs, now))
	require.NoError(t, err)
	return l
}

func compactOptions(fs vfs.FS, now *time.Time) Options {
	opts := memOptions(fs)
	opts.SegmentBytes = 4 << 10
	opts.Now = func() time.Time { return *now }
	return opts
}

// model is what a compacted log must hold: every record appended, the
// producers' last batches and when compaction may first have seen each
// tombstone.
type model struct {
	recs      map[int64]segment.Record
	maybe     map[int64]segment.Record         // appends that failed: there or not
	producers map[int64]int64                  // producer id: last offset of its last batch
	seen      map[int64]time.Time              // tombstone offset: the first Compact after its append
	next      map[int64]segment.ProducerFields // producer id: epoch and sequence of its next batch
}

// producer returns the header fields of pid's next batch of n records, as an
// idempotent producer numbers them; nil for pid < 0.
func (m *model) producer(pid int64, n int) *segment.ProducerFields {
	if pid < 0 {
		return nil
	}
	p, ok := m.next[pid]
	if !ok {
		p = segment.ProducerFields{ID: pid}
	}
	next := p
	next.BaseSequence += int32(n)
	m.next[pid] = next
	return &p
}

// fence starts a new epoch for pid after an append that may or may not be
// in the log, as a producer does after an error it cannot resolve: the new
// epoch starts at sequence 0, whatever the log holds.
func (m *model) fence(pid int64) {
	if pid >= 0 {
		m.next[pid] = segment.ProducerFields{ID: pid, Epoch: m.next[pid].Epoch + 1}
	}
}

func newModel() *model {
	return &model{recs: map[int64]segment.Record{}, maybe: map[int64]segment.Record{}, producers: map[int64]int64{}, seen: map[int64]time.Time{}, next: map[int64]segment.ProducerFields{}}
}

// append appends recs as one batch, from producer pid if pid >= 0.
func (m *model) append(t testing.TB, l *Log, recs []segment.Record, pid int64) AppendResult {
	t.Helper()
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Producer: m.producer(pid, len(recs))})
	require.NoError(t, err)
	res, err := l.AppendBatch(b)
	require.NoError(t, err)
	m.add(recs, res, pid)
	return res
}

func (m *model) add(recs []segment.Record, res AppendResult, pid int64) {
	for i, r := range recs {
		r.Offset = res.BaseOffset + int64(i)
		m.recs[r.Offset] = r
	}
	if pid >= 0 {
		m.producers[pid] = res.LastOffset
	}
}

// compacted notes that a compaction ran at now.
func (m *model) compacted(now time.Time) {
	for off, r := range m.recs {
		if _, ok := m.seen[off]; !ok && r.Key != nil && r.Value == nil {
			m.seen[off] = now
		}
	}
}

// check reads the whole log and checks it against the model: every record
// read is the one appended at its offset; the latest record of every key
// is there, unless it is a tombstone past its retention; every record at
// or after keepFrom is there; each producer's last batch is there.
func (m *model) check(t testing.TB, l *Log, now time.Time, retention time.Duration, keepFrom int64, msg string) {
	t.Helper()
	got := map[int64]bool{}
	var batches []segment.Batch
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		bs, err := l.Read(off, 1<<20, ReadLogEnd)
		require.NoError(t, err, msg)
		n := 0
		for b, err := range bs.All() {
			require.NoError(t, err, msg)
			batches = append(batches, slices.Clone(b[:segment.HeaderSize]))
			for r, err := range b.Records() {
				require.NoError(t, err, msg)
				want, ok := m.recs[r.Offset]
				if !ok {
					want, ok = m.maybe[r.Offset]
				}
				require.True(t, ok, "%s: offset %d was never appended", msg, r.Offset)
				require.Equal(t, want.Key, r.Key, "%s: key at %d", msg, r.Offset)
				require.Equal(t, want.Value, r.Value, "%s: value at %d", msg, r.Offset)
				require.Equal(t, want.Timestamp, r.Timestamp, "%s: timestamp at %d", msg, r.Offset)
				got[r.Offset] = true
			}
			off = b.LastOffset() + 1
			n++
		}
		require.NoError(t, bs.Close())
		if n == 0 {
			break
		}
	}
	latest := map[string]int64{}
	for off, r := range m.recs {
		if r.Key != nil && off >= latest[string(r.Key)] {
			latest[string(r.Key)] = off
		}
		if off >= keepFrom {
			require.True(t, got[off], "%s: offset %d past the cleanable part is gone", msg, off)
		}
	}
	for key, off := range latest {
		if got[off] {
			continue
		}
		seen, ok := m.seen[off]
		require.True(t, m.recs[off].Value == nil && ok && !now.Before(seen.Add(retention)),
			"%s: the latest record of key %q, offset %d, is gone", msg, key, off)
	}
	for pid, last := range m.producers {
		require.True(t, slices.ContainsFunc(batches, func(b segment.Batch) bool {
			return b.ProducerID() == pid && b.LastOffset() == last
		}), "%s: the last batch of producer %d, ending at %d, is gone", msg, pid, last)
	}
}

// activeBase returns the base offset of the active segment.
func activeBase(l *Log) int64 { return l.active().BaseOffset() }

// randomBatch makes a batch of records with keys from a small set, some
// tombstones and some without a key.
func randomBatch(rng *rand.Rand, now time.Time, keys int) []segment.Record {
	recs := make([]segment.Record, 1+rng.IntN(6))
	for i := range recs {
		r := segment.Record{Timestamp: now.UnixMilli(), Key: fmt.Appendf(nil, "k%d", rng.IntN(keys))}
		switch x := rng.IntN(20); {
		case x == 0:
			r.Key = nil
			r.Value = []byte("no key")
		case x < 4:
			// a tombstone
		default:
			r.Value = bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, 20+rng.IntN(200))
		}
		recs[i] = r
	}
	return recs
}

// TestCompactAgainstAModel appends random keyed records, tombstones and
// producer batches, and compacts at random times with random options and
// small key maps, reopening now and then. After each compaction the log
// holds exactly what the model allows.
func TestCompactAgainstAModel(t *testing.T) {
	const retention = time.Hour
	for seed := uint64(0); seed < 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		now := t0
		fs := newMemFS(t)
		l := compactLog(t, fs, &now)
		m := newModel()
		removed := int64(0)
		for step := 0; step < 120; step++ {
			now = now.Add(time.Duration(rng.IntN(20)) * time.Minute)
			pid := int64(-1)
			if rng.IntN(3) == 0 {
				pid = int64(rng.IntN(3))
			}
			m.append(t, l, randomBatch(rng, now, 30), pid)
			if rng.IntN(8) != 0 {
				continue
			}
			opts := CompactOptions{
				DeleteRetention: retention,
				Force:           rng.IntN(2) == 0,
				KeyMapBytes:     []int{minKeyMapBytes, 4 << 10, 0}[rng.IntN(3)],
			}
			if rng.IntN(3) == 0 {
				opts.MinCompactionLag = time.Duration(rng.IntN(60)) * time.Minute
			}
			keepFrom := activeBase(l)
			st, err := l.Compact(now, opts)
			require.NoError(t, err)
			m.compacted(now)
			removed += st.RecordsRemoved
			msg := fmt.Sprintf("seed %d step %d", seed, step)
			m.check(t, l, now, retention, keepFrom, msg)
			require.LessOrEqual(t, st.FirstDirtyOffset, keepFrom, msg)
			if rng.IntN(4) == 0 {
				require.NoError(t, l.Close())
				l = compactLog(t, fs, &now)
				m.check(t, l, now, retention, keepFrom, msg+" reopened")
			}
		}
		require.Positive(t, removed, "seed %d: compaction removed nothing", seed)
		require.NoError(t, l.Close())
	}
}

// TestCompactKeepsLatestOfEachKey compacts a log whose keys were each
// written many times: afterwards the cleanable part holds one record a
// key, at its original offset, and reads from any offset work.
func TestCompactKeepsLatestOfEachKey(t *testing.T) {
	now := t0
	fs := newMemFS(t)
	l := compactLog(t, fs, &now)
	defer func() { l.Close() }()
	m := newModel()
	for i := range 400 {
		m.append(t, l, []segment.Record{{Timestamp: now.UnixMilli(), Key: fmt.Appendf(nil, "k%d", i%10), Value: fmt.Appendf(nil, "v%d-%s", i, bytes.Repeat([]byte("x"), 100))}}, -1)
	}
	segsBefore := l.Stats().Segments
	keepFrom := activeBase(l)
	st, err := l.Compact(now, CompactOptions{})
	require.NoError(t, err)
	m.compacted(now)
	m.check(t, l, now, DefaultDeleteRetention, keepFrom, "after compaction")
	require.Equal(t, keepFrom, st.FirstDirtyOffset)
	require.Equal(t, segsBefore-1, st.Segments, "every segment but the active one")
	// Groups are made by the old sizes, as Kafka's: full segments are
	// rewritten one by one, and merge on a later compaction.
	require.Equal(t, st.Segments, st.Groups)
	require.Positive(t, st.BytesRead)
	require.Less(t, st.BytesWritten, st.BytesRead/10)

	var offsets []int64
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		if r.Offset < keepFrom {
			offsets = append(offsets, r.Offset)
		}
	}
	// The key map knows the cleanable part only: each key's latest record
	// there stays (Kafka's cleaner does not look into the active segment).
	var want []int64
	for off := keepFrom - 10; off < keepFrom; off++ {
		want = append(want, off)
	}
	require.Equal(t, want, offsets)
	require.Equal(t, keepFrom, st.RecordsRead)
	require.Equal(t, keepFrom-10, st.RecordsRemoved)

	// Reads from every offset still work, gaps included.
	for off := int64(0); off < 400; off += 7 {
		bs, err := l.Read(off, 1, ReadLogEnd)
		require.NoError(t, err, "offset %d", off)
		require.Positive(t, bs.Len(), "offset %d", off)
		require.NoError(t, bs.Close())
	}

	// A second compaction with nothing new to clean does nothing...
	st, err = l.Compact(now, CompactOptions{})
	require.NoError(t, err)
	require.Zero(t, st.Segments)
	require.Equal(t, keepFrom, st.FirstDirtyOffset)

	// ...unless forced: then the small cleaned segments merge into one.
	st, err = l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, segsBefore-1, st.Segments)
	require.Equal(t, 1, st.Groups)
	require.Equal(t, 2, l.Stats().Segments)
	require.Zero(t, st.RecordsRemoved)
	m.check(t, l, now, DefaultDeleteRetention, keepFrom, "after merging")
	require.NoError(t, l.Close())
	l = compactLog(t, fs, &now)
	m.check(t, l, now, DefaultDeleteRetention, keepFrom, "reopened")
}

// batchesOf returns the headers of the log's batches.
func batchesOf(t testing.TB, l *Log) []segment.Batch {
	t.Helper()
	var out []segment.Batch
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		bs, err := l.Read(off, 1<<20, ReadLogEnd)
		require.NoError(t, err)
		n := 0
		for b, err := range bs.All() {
			require.NoError(t, err)
			out = append(out, slices.Clone(b))
			off = b.LastOffset() + 1
			n++
		}
		require.NoError(t, bs.Close())
		if n == 0 {
			break
		}
	}
	return out
}

// fill appends keyed records until the log has rolled n more segments.
func fill(t testing.TB, l *Log, m *model, now time.Time, n int, key func(i int) string) {
	t.Helper()
	for target, i := l.Stats().Segments+n, 0; l.Stats().Segments < target; i++ {
		m.append(t, l, []segment.Record{{Timestamp: now.UnixMilli(), Key: []byte(key(i)), Value: bytes.Repeat([]byte("v"), 200)}}, -1)
	}
}

// TestTombstonesStayUntilTheirHorizon follows KIP-534: the first
// compaction that sees a tombstone stamps now+DeleteRetention on its batch;
// compactions before that time keep it, the first one after removes it.
func TestTombstonesStayUntilTheirHorizon(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	m.append(t, l, []segment.Record{{Timestamp: now.UnixMilli(), Key: []byte("gone"), Value: []byte("v1")}}, -1)
	res := m.append(t, l, []segment.Record{
		{Timestamp: now.UnixMilli(), Key: []byte("gone"), Value: nil},
		{Timestamp: now.UnixMilli() + 5, Key: []byte("stays"), Value: []byte("v")},
	}, -1)
	tombstone := res.BaseOffset
	fill(t, l, m, now, 2, func(i int) string { return fmt.Sprint("other", i) })

	const retention = time.Hour
	opts := CompactOptions{DeleteRetention: retention, Force: true}
	horizonOf := func() (int64, bool) {
		for _, b := range batchesOf(t, l) {
			if b.BaseOffset() == tombstone {
				h, ok := b.DeleteHorizon()
				require.True(t, ok, "the tombstone's batch has a horizon")
				return h, true
			}
		}
		return 0, false
	}
	hasTombstone := func() bool {
		for r, err := range l.Records(0, ReadLogEnd) {
			require.NoError(t, err)
			if r.Offset == tombstone {
				require.Nil(t, r.Value)
				return true
			}
		}
		return false
	}

	_, err := l.Compact(now, opts)
	require.NoError(t, err)
	require.True(t, hasTombstone())
	horizon, ok := horizonOf()
	require.True(t, ok)
	require.Equal(t, now.Add(retention).UnixMilli(), horizon)

	later := now.Add(retention - time.Millisecond)
	_, err = l.Compact(later, opts)
	require.NoError(t, err)
	require.True(t, hasTombstone(), "a millisecond before the horizon")
	h, _ := horizonOf()
	require.Equal(t, horizon, h, "a later compaction keeps the horizon")

	st, err := l.Compact(now.Add(retention), opts)
	require.NoError(t, err)
	require.False(t, hasTombstone(), "at the horizon")
	require.EqualValues(t, 1, st.RecordsRemoved)
	m.compacted(now)
	m.check(t, l, now.Add(retention), retention, activeBase(l), "after the horizon")
}

// TestProducerLastBatchKeptEmpty checks Kafka's RETAIN_EMPTY: a producer's
// batch whose records are all superseded stays as a bare header if it is
// the producer's last, with its offsets and sequence numbers; an earlier
// one goes.
func TestProducerLastBatchKeptEmpty(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	rec := func(key, value string) segment.Record {
		return segment.Record{Timestamp: now.UnixMilli(), Key: []byte(key), Value: []byte(value)}
	}
	first := m.append(t, l, []segment.Record{rec("a", "1"), rec("b", "1")}, 7)
	last := m.append(t, l, []segment.Record{rec("a", "2"), rec("b", "2"), rec("c", "2")}, 7)
	fill(t, l, m, now, 1, func(int) string { return "filler" })
	// Supersede every record of producer 7, from producer-less batches.
	m.append(t, l, []segment.Record{rec("a", "3"), rec("b", "3"), rec("c", "3")}, -1)
	fill(t, l, m, now, 1, func(int) string { return "filler" })

	st, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Positive(t, st.RecordsRemoved)
	m.check(t, l, now, DefaultDeleteRetention, activeBase(l), "after compaction")
	var found bool
	for _, b := range batchesOf(t, l) {
		require.NotEqual(t, first.BaseOffset, b.BaseOffset(), "the producer's earlier batch went")
		if b.ProducerID() != 7 {
			continue
		}
		found = true
		require.Len(t, b, segment.HeaderSize)
		require.NoError(t, b.Validate())
		require.EqualValues(t, 0, b.NumRecords())
		require.Equal(t, last.BaseOffset, b.BaseOffset())
		require.Equal(t, last.LastOffset, b.LastOffset())
		require.EqualValues(t, 2, b.BaseSequence(), "the base sequence the producer sent")
	}
	require.True(t, found, "the producer's last batch stays as a header")

	// Once the producer writes again, the header is no longer its last.
	next := m.append(t, l, []segment.Record{rec("d", "1")}, 7)
	fill(t, l, m, now, 1, func(int) string { return "filler" })
	_, err = l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	m.check(t, l, now, DefaultDeleteRetention, activeBase(l), "after the producer wrote again")
	for _, b := range batchesOf(t, l) {
		if b.ProducerID() == 7 {
			require.Equal(t, next.BaseOffset, b.BaseOffset(), "only the producer's new last batch")
		}
	}
}

// TestCollidingKeysLoseNothing forces every key onto the same first
// 64-bit hash: with that hash alone, the newest key would make the others'
// latest records look superseded. The second hash tells them apart.
func TestCollidingKeysLoseNothing(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	fill(t, l, m, now, 3, func(i int) string { return fmt.Sprint("key", i%5) })
	opts := CompactOptions{Force: true, hash: func([]byte) uint64 { return 42 }}
	keepFrom := activeBase(l)
	st, err := l.Compact(now, opts)
	require.NoError(t, err)
	require.Positive(t, st.RecordsRemoved)
	m.check(t, l, now, DefaultDeleteRetention, keepFrom, "colliding keys")
	keys := map[string]bool{}
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		if r.Offset < keepFrom {
			keys[string(r.Key)] = true
		}
	}
	require.Len(t, keys, 5, "each key keeps its latest record")
}

func TestKeyMap(t *testing.T) {
	m := newKeyMap(minKeyMapBytes, func([]byte) uint64 { return 1 })
	require.Equal(t, 42, len(m.slots))
	require.Equal(t, 31, m.limit)
	for i := range m.limit {
		require.True(t, m.put(fmt.Appendf(nil, "k%d", i), int64(i)))
	}
	require.True(t, m.put([]byte("k3"), 100), "a known key updates when full")
	require.False(t, m.put([]byte("new"), 101), "a new key does not fit")
	require.EqualValues(t, 100, m.get([]byte("k3")))
	require.EqualValues(t, 4, m.get([]byte("k4")))
	require.EqualValues(t, -1, m.get([]byte("new")))
	require.EqualValues(t, -1, m.get([]byte("absent")))

	// Real hashes spread the keys over the whole table.
	m = newKeyMap(24<<10, xxhash.Sum64)
	for i := range m.limit {
		require.True(t, m.put(fmt.Appendf(nil, "key-%d", i), int64(i)))
	}
	for i := range m.limit {
		require.EqualValues(t, i, m.get(fmt.Appendf(nil, "key-%d", i)))
	}
}

// TestKeyMapFullCleansAPrefix gives the key map room for 31 keys while the
// dirty part has 100: each compaction cleans the prefix the map covers,
// and the next one goes on from there (Kafka's partial cleaning).
func TestKeyMapFullCleansAPrefix(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	fill(t, l, m, now, 6, func(i int) string { return fmt.Sprint("key", i%100) })
	keepFrom := activeBase(l)
	opts := CompactOptions{KeyMapBytes: minKeyMapBytes, Force: true}
	var dirty []int64
	for range 10 {
		st, err := l.Compact(now, opts)
		require.NoError(t, err)
		m.check(t, l, now, DefaultDeleteRetention, keepFrom, "partial")
		dirty = append(dirty, st.FirstDirtyOffset)
		if st.FirstDirtyOffset == keepFrom {
			break
		}
	}
	require.Greater(t, len(dirty), 2, "the map cannot cover the dirty part at once: %v", dirty)
	require.True(t, slices.IsSorted(dirty), "each compaction goes further: %v", dirty)
	require.Equal(t, keepFrom, dirty[len(dirty)-1])
}

func TestCompactOptionsAreValidated(t *testing.T) {
	l := compactLog(t, newMemFS(t), &t0)
	defer l.Close()
	for _, tc := range []struct {
		opts CompactOptions
		want string
	}{
		{CompactOptions{DeleteRetention: -1}, "DeleteRetention is -1ns"},
		{CompactOptions{MinCleanableDirtyRatio: 1.5}, "MinCleanableDirtyRatio is 1.5, allowed above 0 to 1"},
		{CompactOptions{MinCleanableDirtyRatio: -0.1}, "MinCleanableDirtyRatio is -0.1"},
		{CompactOptions{MinCompactionLag: -time.Second}, "MinCompactionLag is -1s"},
		{CompactOptions{MaxCompactionLag: -time.Second}, "MaxCompactionLag is -1s"},
		{CompactOptions{KeyMapBytes: 1023}, "KeyMapBytes is 1023, allowed 1024 to 2147483647"},
	} {
		_, err := l.Compact(t0, tc.opts)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, tc.want)
	}
	require.NoError(t, l.Close())
	_, err := l.Compact(t0, CompactOptions{})
	require.ErrorIs(t, err, ErrClosed)
}

// TestCompactTriggers checks when Compact runs by itself: the dirty ratio,
// MinCompactionLag and MaxCompactionLag (Kafka's LogCleanerManager).
func TestCompactTriggers(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	fill(t, l, m, now, 4, func(i int) string { return fmt.Sprint("key", i%3) })
	st, err := l.Compact(now, CompactOptions{MinCompactionLag: time.Minute})
	require.NoError(t, err)
	require.Zero(t, st.Segments, "every segment is younger than the minimum lag")

	st, err = l.Compact(now.Add(time.Minute), CompactOptions{MinCompactionLag: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 4, st.Segments, "all dirty: ratio 1")

	// One dirty segment beside four clean ones: ratio 1/2 at most.
	now = now.Add(time.Hour)
	fill(t, l, m, now, 1, func(i int) string { return fmt.Sprint("key", i%3) })
	st, err = l.Compact(now, CompactOptions{MinCleanableDirtyRatio: 0.99})
	require.NoError(t, err)
	require.Zero(t, st.Segments, "dirty ratio below 0.99")
	st, err = l.Compact(now.Add(time.Hour), CompactOptions{MinCleanableDirtyRatio: 0.99, MaxCompactionLag: 2 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, st.Segments, "the dirty records are an hour old, not two")
	st, err = l.Compact(now.Add(3*time.Hour), CompactOptions{MinCleanableDirtyRatio: 0.99, MaxCompactionLag: 2 * time.Hour})
	require.NoError(t, err)
	require.Positive(t, st.Segments, "past the maximum lag")
	m.check(t, l, now, DefaultDeleteRetention, activeBase(l), "triggers")
}

// TestCompactionKeepsTheHighWatermarkOut leaves the segment holding the
// high watermark, and those after it, as they are.
func TestCompactionKeepsTheHighWatermarkOut(t *testing.T) {
	now := t0
	opts := compactOptions(newMemFS(t), &now)
	opts.ExternalHighWatermark = true
	l, err := Open("/data/c-0", opts)
	require.NoError(t, err)
	defer l.Close()
	m := newModel()
	fill(t, l, m, now, 5, func(i int) string { return fmt.Sprint("key", i%3) })
	l.mu.RLock()
	hw := l.segs[2].BaseOffset() + 1
	l.mu.RUnlock()
	_, err = l.SetHighWatermark(hw)
	require.NoError(t, err)
	st, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, 2, st.Segments)
	require.LessOrEqual(t, st.FirstDirtyOffset, hw)
	m.check(t, l, now, DefaultDeleteRetention, hw-1, "high watermark")
}

// TestReadersKeepOldSegments holds a read of a segment across the
// compaction that replaces it: the reader still reads the old bytes.
func TestReadersKeepOldSegments(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	fill(t, l, m, now, 3, func(i int) string { return fmt.Sprint("key", i%3) })
	bs, err := l.Read(0, 1<<20, ReadLogEnd)
	require.NoError(t, err)
	before, err := bs.Bytes()
	require.NoError(t, err)
	st, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Positive(t, st.RecordsRemoved)
	after, err := bs.Bytes()
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.NoError(t, bs.Close())
	m.check(t, l, now, DefaultDeleteRetention, activeBase(l), "after")
}

// TestTruncationAbandonsCompaction truncates the log between the key map
// and the rewrite: the map may name offsets that now hold other records,
// so nothing is rewritten.
func TestTruncationAbandonsCompaction(t *testing.T) {
	now := t0
	l := compactLog(t, newMemFS(t), &now)
	defer l.Close()
	m := newModel()
	fill(t, l, m, now, 4, func(i int) string { return fmt.Sprint("key", i%3) })
	opts, err := CompactOptions{Force: true}.withDefaults()
	require.NoError(t, err)
	p, err := l.planCompaction(now, opts)
	require.NoError(t, err)
	defer p.release()
	c := &cleaner{l: l, plan: p, opts: opts, now: now.UnixMilli(), keys: newKeyMap(opts.KeyMapBytes, opts.hash)}
	require.NoError(t, c.buildKeyMap())
	require.NoError(t, l.TruncateTo(p.segs[2].BaseOffset()))
	res, err := c.cleanGroup(p.segs[:1])
	require.NoError(t, err)
	require.Equal(t, groupTruncated, res)
	requireRecordsIntact(t, l, m)
}

// requireRecordsIntact checks that every record the log holds is the one
// appended at its offset and that nothing below the log end went.
func requireRecordsIntact(t testing.TB, l *Log, m *model) {
	t.Helper()
	next := l.LogStartOffset()
	for r, err := range l.Records(next, ReadLogEnd) {
		require.NoError(t, err)
		require.Equal(t, next, r.Offset)
		require.Equal(t, m.recs[r.Offset].Value, r.Value)
		next++
	}
	require.Equal(t, l.LogEndOffset(), next)
}

// TestCrashDuringCompaction cuts the power before each file-system
// operation that two compactions make, in turn. The log must reopen with
// every record read back as it was appended, every key's latest record
// and every producer's last batch, and everything past the cleanable part;
// it must then compact and take appends again.
func TestCrashDuringCompaction(t *testing.T) {
	type run struct {
		m        *model
		keepFrom int64 // the active segment's base when the last compaction began
	}
	script := func(fs *vfs.MemFS, r *run, compacting func(bool)) {
		now := t0
		l, err := Open("/data/c-0", compactOptions(fs, &now))
		if err != nil {
			return
		}
		defer l.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		for round := range 2 {
			for range 12 {
				pid := int64(-1)
				if rng.IntN(3) == 0 {
					pid = int64(rng.IntN(2))
				}
				recs := randomBatch(rng, now, 12)
				if err := r.m.tryAppend(l, recs, pid); err != nil {
					return
				}
			}
			r.keepFrom = activeBase(l)
			compacting(true)
			_, err := l.Compact(now, CompactOptions{Force: true, KeyMapBytes: []int{0, minKeyMapBytes}[round]})
			compacting(false)
			if err != nil {
				return
			}
			r.m.compacted(now)
		}
	}

	var during []int // the operations made while compacting
	n, in := 0, false
	fs := newMemFS(t)
	fs.SetHook(func(vfs.Op) error {
		if in {
			during = append(during, n)
		}
		n++
		return nil
	})
	full := &run{m: newModel(), keepFrom: math.MaxInt64}
	script(fs, full, func(c bool) { in = c })
	require.Greater(t, len(during), 20)
	require.Positive(t, full.m.seenCount(), "the script compacts tombstones")

	states := map[string]int{} // temporary suffixes a crash left, to show every step is hit
	for _, stop := range during {
		r := &run{m: newModel(), keepFrom: math.MaxInt64}
		after := crashedAt(t, stop, 9, func(fs *vfs.MemFS) { script(fs, r, func(bool) {}) })

		names, err := after.List("/data/c-0")
		require.NoError(t, err)
		state := ""
		for _, suffix := range []string{cleanedSuffix, swapSuffix, deletedSuffix} {
			if slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, segment.LogSuffix+suffix) }) {
				state += suffix
			}
		}
		states[state]++

		now := t0
		msg := fmt.Sprintf("crash at operation %d", stop)
		l, err := Open("/data/c-0", compactOptions(after, &now))
		require.NoError(t, err, msg)
		names, err = after.List("/data/c-0")
		require.NoError(t, err)
		for _, name := range names {
			require.NotRegexp(t, `\.(cleaned|swap|deleted)$`, name, msg)
		}
		r.m.check(t, l, now, DefaultDeleteRetention, r.keepFrom, msg)
		_, err = l.Compact(now, CompactOptions{Force: true})
		require.NoError(t, err, msg)
		r.m.check(t, l, now, DefaultDeleteRetention, activeBase(l), msg+", compacted again")
		r.m.append(t, l, []segment.Record{{Timestamp: now.UnixMilli(), Key: []byte("after"), Value: []byte("crash")}}, -1)
		require.NoError(t, l.Close())
	}
	// No temporary files; a complete new segment beside the old; the old
	// renamed .deleted with the new one still .swap, or already in place.
	// (The .cleaned names are never synced, so the in-memory file system
	// loses them; TestOpenAfterInterruptedSwaps leaves them.)
	for _, state := range []string{"", swapSuffix, swapSuffix + deletedSuffix, deletedSuffix} {
		require.Positive(t, states[state], "no crash left the files in state %q: %v", state, states)
	}
}

// tryAppend appends like append, for a script that may crash: the records
// of an append that fails may be there after recovery, or not.
func (m *model) tryAppend(l *Log, recs []segment.Record, pid int64) error {
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Producer: m.producer(pid, len(recs))})
	if err != nil {
		return err
	}
	leo := l.LogEndOffset()
	res, err := l.AppendBatch(b)
	if err != nil {
		m.fence(pid)
		for i, r := range recs {
			r.Offset = leo + int64(i)
			m.maybe[r.Offset] = r
		}
		return err
	}
	m.add(recs, res, pid)
	return nil
}

func (m *model) seenCount() int { return len(m.seen) }

// TestOpenAfterInterruptedSwaps builds by hand what a file system that
// does not keep renames in order could leave of a compaction, and checks
// what Open makes of it:
//   - .cleaned files are removed, the old segments stay;
//   - an old segment whose offsets the merged one covers is removed;
//   - a .swap log takes its place without the old segment's indexes.
func TestOpenAfterInterruptedSwaps(t *testing.T) {
	now := t0
	fs := newMemFS(t)
	l := compactLog(t, fs, &now)
	m := newModel()
	fill(t, l, m, now, 3, func(i int) string { return fmt.Sprint("key", i%4) })
	// The first segment's index as it was before any compaction: a
	// stale index with entries.
	staleIndex := readFile(t, fs, segment.FileName("/data/c-0", 0, segment.IndexSuffix))
	require.NotEmpty(t, staleIndex)
	// A first compaction shrinks the segments, so that the next merges
	// them.
	_, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	l.mu.RLock()
	var bases []int64
	for _, s := range l.segs[:len(l.segs)-1] {
		bases = append(bases, s.BaseOffset())
	}
	l.mu.RUnlock()
	require.Len(t, bases, 3)
	require.NoError(t, l.Close())
	dir := "/data/c-0"
	oldFiles := map[string][]byte{}
	for _, base := range bases {
		for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
			name := segment.FileName(dir, base, suffix)
			oldFiles[name] = readFile(t, fs, name)
		}
	}
	covered := func(name string) bool {
		return slices.ContainsFunc(bases[1:], func(b int64) bool {
			return strings.HasPrefix(filepath.Base(name), fmt.Sprintf("%020d.", b))
		})
	}

	l = compactLog(t, fs, &now)
	keepFrom := activeBase(l)
	st, err := l.Compact(now, CompactOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, 1, st.Groups, "the three segments merge")
	require.NoError(t, l.Close())
	merged := readFile(t, fs, segment.FileName(dir, 0, segment.LogSuffix))

	reopen := func(msg string) {
		t.Helper()
		// Each state below is one a crash leaves, so the log was not
		// closed cleanly (a clean Close never falls inside a swap).
		if err := fs.Remove(filepath.Join(dir, cleanShutdownFile)); err != nil {
			require.ErrorIs(t, err, iofs.ErrNotExist)
		}
		l := compactLog(t, fs, &now)
		m.check(t, l, now, DefaultDeleteRetention, keepFrom, msg)
		require.Equal(t, 2, l.Stats().Segments, msg)
		require.NoError(t, l.Close())
		names, err := fs.List(dir)
		require.NoError(t, err)
		for _, name := range names {
			require.NotRegexp(t, `\.(cleaned|swap|deleted)$`, name, msg)
			require.False(t, covered(name), "%s: %s is left", msg, name)
		}
	}

	// A half-built compaction beside the merged segment.
	for name, data := range oldFiles {
		writeFile(t, fs, name+cleanedSuffix, data)
	}
	reopen(".cleaned files")

	// The merged segment in place, the old ones after it still live.
	for name, data := range oldFiles {
		if covered(name) {
			writeFile(t, fs, name, data)
		}
	}
	reopen("old segments the merged one covers")

	// The merged log as .swap beside all the old files, its indexes lost
	// and an index with entries where it goes.
	for name, data := range oldFiles {
		writeFile(t, fs, name, data)
	}
	writeFile(t, fs, segment.FileName(dir, 0, segment.IndexSuffix), staleIndex)
	writeFile(t, fs, segment.FileName(dir, 0, segment.LogSuffix)+swapSuffix, merged)
	reopen("a .swap log beside the old segments' indexes")
	require.Equal(t, merged, readFile(t, fs, segment.FileName(dir, 0, segment.LogSuffix)))

	// An index .swap beside the old segments, its log's .swap lost:
	// without a directory sync between them, renames reach the disk in
	// any order. The new segment's index entry (offset 1 at position 5)
	// is a position inside a batch of the old log.
	for name, data := range oldFiles {
		writeFile(t, fs, name, data)
	}
	writeFile(t, fs, segment.FileName(dir, 0, segment.IndexSuffix)+swapSuffix, []byte{0, 0, 0, 1, 0, 0, 0, 5})
	require.NoError(t, fs.Remove(filepath.Join(dir, cleanShutdownFile)))
	l = compactLog(t, fs, &now)
	m.check(t, l, now, DefaultDeleteRetention, keepFrom, "an index .swap without its log's")
	require.Equal(t, len(bases)+1, l.Stats().Segments, "the old segments stay")
	require.NoError(t, l.Close())
	names, err := fs.List(dir)
	require.NoError(t, err)
	require.NotContains(t, names, filepath.Base(segment.FileName(dir, 0, segment.IndexSuffix))+swapSuffix)
}

func readFile(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil && !(errors.Is(err, io.EOF) && len(data) == 0) {
		require.NoError(t, err)
	}
	return data
}

// writeFile writes a file and makes it and its name durable.
func writeFile(t testing.TB, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := fs.Create(name)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, errors.Join(f.Sync(), f.Close()))
	require.NoError(t, vfs.SyncDir(fs, filepath.Dir(name)))
}

// benchCompactBytes is the size of the log the compaction benchmarks
// clean: 1 MiB segments of batches of 10 records with 200-byte values
// over 20,000 keys, so that about a third of the records stay.
const benchCompactBytes = 32 << 20

// compactFixture writes the benchmark's log in dir and returns the names
// of its segments' log files but the active one's, and their size.
func compactFixture(b *testing.B, dir string) (logs []string, size int64) {
	b.Helper()
	l, err := Open(dir, Options{SegmentBytes: 1 << 20, Fsync: FsyncNever()})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	value := bytes.Repeat([]byte("v"), 200)
	recs := make([]segment.Record, 10)
	for l.Stats().Bytes < benchCompactBytes {
		for i := range recs {
			recs[i] = segment.Record{Key: fmt.Appendf(nil, "key-%05d", rng.IntN(20000)), Value: value}
		}
		if _, err := l.Append(recs); err != nil {
			b.Fatal(err)
		}
	}
	l.mu.RLock()
	for _, s := range l.segs[:len(l.segs)-1] {
		logs = append(logs, segment.FileName(dir, s.BaseOffset(), segment.LogSuffix))
		size += s.Size()
	}
	l.mu.RUnlock()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	return logs, size
}

// BenchmarkCompact compacts a 32 MiB log on the operating system's file
// system, page cache warm, syncs included. BenchmarkRawRead reads the
// same segment files sequentially: the bound. Compare them with
//
//	go test -run '^$' -bench 'Compact|RawRead' ./log
func BenchmarkCompact(b *testing.B) {
	src := filepath.Join(b.TempDir(), "src")
	logs, size := compactFixture(b, src)
	b.SetBytes(size)
	b.ReportAllocs()
	var removed float64
	for i := range b.N {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), fmt.Sprint(i))
		copyFiles(b, src, dir)
		l, err := Open(dir, Options{SegmentBytes: 1 << 20, Fsync: FsyncNever()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		st, err := l.Compact(time.Now(), CompactOptions{Force: true})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if st.Segments != len(logs) {
			b.Fatalf("compacted %d segments of %d", st.Segments, len(logs))
		}
		removed = float64(st.RecordsRemoved) / float64(st.RecordsRead)
		if err := errors.Join(l.Close(), os.RemoveAll(dir)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(removed, "removed/record")
}

func BenchmarkRawRead(b *testing.B) {
	src := filepath.Join(b.TempDir(), "src")
	logs, size := compactFixture(b, src)
	b.SetBytes(size)
	buf := make([]byte, 1<<20)
	for b.Loop() {
		for _, name := range logs {
			f, err := os.Open(name)
			if err != nil {
				b.Fatal(err)
			}
			for {
				_, err := f.Read(buf)
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			f.Close()
		}
	}
}

func copyFiles(b *testing.B, from, to string) {
	b.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		b.Fatal(err)
	}
}

func ExampleLog_Compact() {
	dir, err := os.MkdirTemp("", "strand-compact")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	l, err := Open(filepath.Join(dir, "prices-0"), Options{SegmentBytes: 4096})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	// Prices change; the oldest are dropped by compaction, the latest of
	// each key stay. "delisted" ends with a tombstone.
	for i := range 60 {
		_, err := l.Append([]segment.Record{
			{Key: []byte("apple"), Value: fmt.Appendf(nil, "%d", 100+i)},
			{Key: []byte("pear"), Value: fmt.Appendf(nil, "%d", 50+i)},
			{Key: []byte("delisted"), Value: bytes.Repeat([]byte("x"), 60)},
		})
		if err != nil {
			panic(err)
		}
	}
	if _, err := l.Append([]segment.Record{{Key: []byte("delisted")}}); err != nil {
		panic(err)
	}
	// Fill the active segment, which compaction never touches.
	for range 20 {
		if _, err := l.Append([]segment.Record{{Key: []byte("other"), Value: bytes.Repeat([]byte("y"), 200)}}); err != nil {
			panic(err)
		}
	}

	st, err := l.Compact(time.Now(), CompactOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("removed:", st.RecordsRemoved)
	for r, err := range l.Records(0, ReadCommitted) {
		if err != nil {
			panic(err)
		}
		switch {
		case r.Offset >= st.FirstDirtyOffset:
			// the active segment
		case r.Value == nil:
			fmt.Printf("%d %s: tombstone\n", r.Offset, r.Key)
		case len(r.Value) > 10:
			fmt.Printf("%d %s: %d bytes\n", r.Offset, r.Key, len(r.Value))
		default:
			fmt.Printf("%d %s: %s\n", r.Offset, r.Key, r.Value)
		}
	}
	// Output:
	// removed: 184
	// 177 apple: 159
	// 178 pear: 109
	// 180 delisted: tombstone
	// 187 other: 200 bytes
}
