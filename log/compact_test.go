package log

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/strandlog/strand/internal/vfs"
	"github.com/strandlog/strand/segment"
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
	producers map[int64]int64     // producer id: last offset of its last batch
	seen      map[int64]time.Time // tombstone offset: the first Compact after its append
}

func newModel() *model {
	return &model{recs: map[int64]segment.Record{}, producers: map[int64]int64{}, seen: map[int64]time.Time{}}
}

// append appends recs as one batch, from producer pid if pid >= 0.
func (m *model) append(t testing.TB, l *Log, recs []segment.Record, pid int64) AppendResult {
	t.Helper()
	opts := segment.BuildOptions{}
	if pid >= 0 {
		opts.Producer = &segment.Producer{ID: pid, Epoch: 0, BaseSequence: int32(len(m.recs))}
	}
	b, err := segment.AppendBatch(nil, recs, opts)
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
