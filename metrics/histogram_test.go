package metrics

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each duration lands in the first bucket whose bound is at least it, as
// Prometheus's le ("less or equal") buckets count: a bound itself in its
// own bucket, a nanosecond more in the next, the longest in the last.
func TestObserveCountsEachDurationInItsBucket(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 0},
		{50 * time.Microsecond, 0},
		{50*time.Microsecond + 1, 1},
		{100 * time.Microsecond, 1},
		{100*time.Microsecond + 1, 2},
		{time.Millisecond, 5}, // 50 µs << 5 = 1.6 ms is the first bound above 1 ms
		{LatencyBuckets[buckets-1], buckets - 1},
		{LatencyBuckets[buckets-1] + 1, buckets},
		{time.Hour, buckets},
	} {
		var h Histogram
		h.Observe(tc.d)
		s := h.Snapshot()
		want := make([]uint64, buckets+1)
		want[tc.want] = 1
		require.Equal(t, want, s.Counts, "%v", tc.d)
		require.Equal(t, uint64(1), s.Count)
		if tc.want < buckets {
			require.LessOrEqual(t, tc.d, s.Bounds[tc.want], "%v within its bucket's bound", tc.d)
		}
		if tc.want > 0 {
			require.Greater(t, tc.d, s.Bounds[tc.want-1], "%v above the bucket before", tc.d)
		}
	}
}

func TestLatencyBucketsDoubleFrom50Microseconds(t *testing.T) {
	require.Len(t, LatencyBuckets, 17)
	require.Equal(t, 50*time.Microsecond, LatencyBuckets[0])
	for i := 1; i < len(LatencyBuckets); i++ {
		require.Equal(t, 2*LatencyBuckets[i-1], LatencyBuckets[i])
	}
	require.Equal(t, 3276800*time.Microsecond, LatencyBuckets[16])
}

// Quantiles name the bound of the bucket that holds them.
func TestQuantile(t *testing.T) {
	var h Histogram
	require.Zero(t, h.Snapshot().Quantile(0.5), "nothing observed")
	for range 90 {
		h.Observe(80 * time.Microsecond) // bucket 1 (100 µs)
	}
	for range 9 {
		h.Observe(3 * time.Millisecond) // bucket 6 (3.2 ms)
	}
	h.Observe(10 * time.Second) // above every bound
	s := h.Snapshot()
	require.Equal(t, 100*time.Microsecond, s.Quantile(0.5))
	require.Equal(t, 100*time.Microsecond, s.Quantile(0.9))
	require.Equal(t, 3200*time.Microsecond, s.Quantile(0.99))
	require.Equal(t, 2*LatencyBuckets[16], s.Quantile(1), "the slowest lies above every bound")
	require.Equal(t, 90*80*time.Microsecond+9*3*time.Millisecond+10*time.Second, s.Sum)
}

// Observers on many goroutines lose no count (run with -race).
func TestObserveConcurrently(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Observe(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	require.Equal(t, uint64(8000), s.Count)
	var sum time.Duration
	for i := range 8000 {
		sum += time.Duration(i) * time.Microsecond
	}
	require.Equal(t, sum, s.Sum)
}

// BenchmarkObserve is what a histogram adds to what it times: compare it
// with an fsync (a few hundred microseconds) or a request.
func BenchmarkObserve(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Observe(time.Duration(i&0xfffff) * time.Microsecond)
	}
}
