package idempotence

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// fakeLog does what the log is to do with producer state, on real batch
// bytes: stamp offsets, read the header with InfoOf, Validate, append,
// Commit, and snapshot on every roll.
type fakeLog struct {
	t       *testing.T
	s       *State
	batches [][]byte
	leo     int64
}

// append appends one producer batch and returns the offsets it got, or
// those of the batch it duplicates.
func (l *fakeLog) append(b []byte, origin Origin) (first, last int64, err error) {
	l.t.Helper()
	batch := segment.Batch(b)
	batch.SetBaseOffset(l.leo)
	info, err := InfoOf(batch)
	require.NoError(l.t, err)
	a, err := l.s.Validate(origin, info)
	if err != nil {
		return 0, 0, err
	}
	if a.Duplicate != nil {
		return a.Duplicate.FirstOffset(), a.Duplicate.LastOffset, nil
	}
	l.batches = append(l.batches, b)
	l.leo = batch.LastOffset() + 1
	_, err = l.s.Commit(a)
	require.NoError(l.t, err)
	return info.BaseOffset, info.LastOffset, nil
}

// open rebuilds the state as the log's open does: Load, then replay the
// batches after the snapshot.
func (l *fakeLog) open(fs vfs.FS, now int64) *State {
	l.t.Helper()
	s, err := Load(fs, "/p", 0, l.leo, millis(now), Config{})
	require.NoError(l.t, err)
	for _, b := range l.batches {
		batch := segment.Batch(b)
		if batch.BaseOffset() < s.MapEndOffset() {
			continue
		}
		info, err := InfoOf(batch)
		require.NoError(l.t, err)
		a, err := s.Validate(OriginReplication, info)
		require.NoError(l.t, err)
		_, err = s.Commit(a)
		require.NoError(l.t, err)
	}
	return s
}

func producerBatch(t *testing.T, id int64, epoch int16, seq int32, n int, txn bool) []byte {
	recs := make([]segment.Record, n)
	for i := range recs {
		recs[i] = segment.Record{Timestamp: 5000 + int64(i), Value: []byte("v")}
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{
		Producer: &segment.ProducerFields{ID: id, Epoch: epoch, BaseSequence: seq}, Transactional: txn})
	require.NoError(t, err)
	return b
}

// TestSeamOnRealBatches: producers append real batches, the log rolls and
// snapshots now and then, the power is cut; after the restart the state
// rebuilt from the newest snapshot and the batches after it answers a
// retry of each producer's last batch with its original offsets, and
// takes the next batch.
func TestSeamOnRealBatches(t *testing.T) {
	for run := range runs(t) {
		rng := rand.New(rand.NewPCG(uint64(run), 3))
		fs, _ := newSnapshotDir(t)
		s, err := NewState(0, Config{})
		require.NoError(t, err)
		l := &fakeLog{t: t, s: s}
		next := map[int64]int32{}
		last := map[int64][3]int64{} // first seq, first offset, last offset
		for range 100 {
			id := int64(1 + rng.IntN(4))
			n := 1 + rng.IntN(5)
			seq := next[id]
			first, lastOff, err := l.append(producerBatch(t, id, 0, seq, n, false), OriginClient)
			require.NoError(t, err)
			last[id] = [3]int64{int64(seq), first, lastOff}
			next[id] = IncrementSequence(seq, int32(n))
			if rng.IntN(2) == 0 { // a retry of the batch just sent
				f2, l2, err := l.append(producerBatch(t, id, 0, seq, n, false), OriginClient)
				require.NoError(t, err)
				require.Equal(t, [2]int64{first, lastOff}, [2]int64{f2, l2}, "a retry got other offsets")
			}
			if rng.IntN(10) == 0 { // a roll
				_, err := l.s.TakeSnapshot(fs, "/p")
				require.NoError(t, err)
			}
		}
		leo := l.leo
		after := fs.Crash(vfs.CrashOptions{Rand: rng})
		l.s = l.open(after, 6000)
		require.Equal(t, leo, l.s.MapEndOffset())
		for id, b := range last {
			n := int(b[2]-b[1]) + 1
			first, lastOff, err := l.append(producerBatch(t, id, 0, int32(b[0]), n, false), OriginClient)
			require.NoError(t, err)
			require.Equal(t, [2]int64{b[1], b[2]}, [2]int64{first, lastOff}, "run %d: producer %d's retry after the restart", run, id)
			require.Equal(t, leo, l.leo, "run %d: a retry was appended again", run)
		}
		for id := range last {
			_, _, err := l.append(producerBatch(t, id, 0, next[id], 1, false), OriginClient)
			require.NoError(t, err, "run %d: producer %d's next batch", run, id)
		}
		// A gap is still refused: the producers are known again.
		_, _, err = l.append(producerBatch(t, 1, 0, next[1]+5, 1, false), OriginClient)
		require.ErrorIs(t, err, ErrOutOfOrderSequence)
	}
}
