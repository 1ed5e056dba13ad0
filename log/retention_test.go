package log

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// TestRetentionAgainstAModel appends records with rising timestamps, moves
// the high watermark at random and applies random retention limits. After
// every step: the log start never passes the high watermark, every record
// newer than the age limit is still there, the log keeps at least the byte
// limit, and what is kept is contiguous with its exact content.
func TestRetentionAgainstAModel(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		fs := newMemFS(t)
		opts := memOptions(fs)
		opts.ExternalHighWatermark = true
		l, err := Open("/data/r-0", opts)
		require.NoError(t, err)
		next := 0
		for step := 0; step < 30; step++ {
			n := 1 + rng.IntN(40)
			appendN(t, l, next, n, 1+rng.IntN(8), 100) // record i has timestamp 1000+i ms
			next += n
			_, err := l.SetHighWatermark(l.HighWatermark() + int64(rng.IntN(n+20)))
			require.NoError(t, err)

			r := Retention{}
			if rng.IntN(2) == 0 {
				r.Age = time.Duration(rng.IntN(next+1)) * time.Millisecond
			}
			if rng.IntN(2) == 0 {
				r.Bytes = int64(rng.IntN(40 << 10))
			}
			now := time.UnixMilli(int64(1000 + next))
			sizeBefore := logBytes(l)
			hw, startBefore := l.HighWatermark(), l.LogStartOffset()
			_, err = l.ApplyRetention(now, r)
			require.NoError(t, err)

			start := l.LogStartOffset()
			require.LessOrEqual(t, start, hw, "seed %d step %d: log start passed the high watermark", seed, step)
			if r.Age > 0 && r.Bytes == 0 {
				// Record i is younger than the limit iff now-(1000+i) <= Age.
				youngest := int64(next) - r.Age.Milliseconds()
				require.LessOrEqual(t, start, max(youngest, startBefore), "seed %d step %d: a young record went", seed, step)
			}
			if r.Bytes > 0 && r.Age == 0 && start > startBefore {
				require.GreaterOrEqual(t, logBytes(l), min(r.Bytes, sizeBefore), "seed %d step %d: below the byte limit", seed, step)
			}
			requireRecords(t, l, int(start), next, 100)
		}
		require.NoError(t, l.Close())
		l, err = Open("/data/r-0", opts)
		require.NoError(t, err)
		requireRecords(t, l, int(l.LogStartOffset()), next, 100)
		require.NoError(t, l.Close())
	}
}

func logBytes(l *Log) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.Size()
	}
	return n
}

func TestRetentionDeletesEverythingBelowTheHighWatermark(t *testing.T) {
	fs := newMemFS(t)
	l, err := Open("/data/r-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 200, 10, 100)
	n, err := l.ApplyRetention(time.UnixMilli(10_000_000), Retention{Age: time.Second})
	require.NoError(t, err)
	require.Greater(t, n, 1)
	require.EqualValues(t, 200, l.LogStartOffset(), "every segment expired")
	require.Equal(t, 1, l.Stats().Segments, "an empty active segment remains")
	res, err := l.Append([]segment.Record{record(200, 100)})
	require.NoError(t, err)
	require.EqualValues(t, 200, res.BaseOffset)
	requireRecords(t, l, 200, 201, 100)
}

// TestCrashDuringRetention cuts the power before every file-system
// operation of a retention pass and of the appends around it: the log
// reopens valid, holding every acknowledged record at or after the log
// start the pass was allowed to reach, contiguous and intact.
func TestCrashDuringRetention(t *testing.T) {
	now := time.UnixMilli(1000 + 10_000)
	script := func(fs *vfs.MemFS, acked *int) {
		l, err := Open("/data/r-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		for i := 0; i < 150; i += 10 {
			var recs []segment.Record
			for j := i; j < i+10; j++ {
				recs = append(recs, record(j, 100))
			}
			if _, err := l.Append(recs); err != nil {
				return
			}
			*acked = i + 10
		}
		if _, err := l.ApplyRetention(now, Retention{Bytes: 6 << 10}); err != nil {
			return
		}
		for i := 150; i < 170; i += 10 {
			var recs []segment.Record
			for j := i; j < i+10; j++ {
				recs = append(recs, record(j, 100))
			}
			if _, err := l.Append(recs); err != nil {
				return
			}
			*acked = i + 10
		}
	}
	var acked int
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, &acked) })
	require.Equal(t, 170, acked)

	for stop := 0; stop < total; stop++ {
		acked := 0
		after := crashedAt(t, stop, 3, func(fs *vfs.MemFS) { script(fs, &acked) })
		l, err := Open("/data/r-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		start, leo := int(l.LogStartOffset()), int(l.LogEndOffset())
		require.GreaterOrEqual(t, leo, acked, "stop %d: acknowledged records lost", stop)
		require.LessOrEqual(t, start, 150, "stop %d: retention went past what it may delete", stop)
		requireRecords(t, l, start, leo, 100)
		require.NoError(t, l.Close())
	}
}
