// Package metrics holds the histograms Strand's packages keep of
// themselves: fixed buckets, cheap enough to update on every fsync or
// request (one atomic add each, no lock), and read at any time by a
// program or an exporter (Prometheus's histogram type takes them as they
// are: cumulative counts per upper bound, a count and a sum).
package metrics

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds of a Histogram's buckets: 50 µs,
// doubling up to 3.2768 s (17 buckets), and one more for what lasts
// longer. They span a page-cache write to a disk stalling for seconds, in
// the resolution an operator reads latency in: a factor of two.
var LatencyBuckets = func() []time.Duration {
	b := make([]time.Duration, buckets)
	for i := range b {
		b[i] = firstBound << i
	}
	return b
}()

const (
	firstBound = 50 * time.Microsecond
	buckets    = 17
)

// Histogram counts durations in LatencyBuckets. The zero value is ready
// to use; a Histogram is safe for concurrent use and must not be copied
// after first use.
type Histogram struct {
	counts [buckets + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// Observe counts d in its bucket: the first whose bound is at least d. A
// negative d counts as zero.
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	h.counts[bucketOf(d)].Add(1)
	h.sum.Add(int64(d))
}

// bucketOf is the bucket of d, found without a search: bound i is
// firstBound<<i, so d's bucket is the bit length of (d-1)/firstBound.
func bucketOf(d time.Duration) int {
	if d <= firstBound {
		return 0
	}
	return min(bits.Len64(uint64((d-1)/firstBound)), buckets)
}

// Snapshot returns the counts so far. It reads each bucket once, without
// stopping observers: an Observe racing with it is counted in Sum or in
// its bucket, or in both.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: LatencyBuckets, Counts: make([]uint64, buckets+1), Sum: time.Duration(h.sum.Load())}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	return s
}

// HistogramSnapshot is what a Histogram counted.
type HistogramSnapshot struct {
	// Bounds are the buckets' upper bounds, ascending (LatencyBuckets).
	Bounds []time.Duration
	// Counts are the observations of each bucket: Counts[i] those above
	// Bounds[i-1] and at most Bounds[i], the last those above every bound.
	// Prometheus's buckets are their running sums.
	Counts []uint64
	Count  uint64
	Sum    time.Duration
}

// Quantile returns the upper bound of the bucket that holds the q-quantile
// of the observations (0 < q <= 1): the median is Quantile(0.5). It is 0
// with no observations, and the last bound doubled for a quantile above
// every bound.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 || len(s.Bounds) == 0 {
		return 0
	}
	rank := uint64(q * float64(s.Count))
	rank = min(max(rank, 1), s.Count)
	var seen uint64
	for i, c := range s.Counts {
		if seen += c; seen >= rank {
			if i < len(s.Bounds) {
				return s.Bounds[i]
			}
			break
		}
	}
	return 2 * s.Bounds[len(s.Bounds)-1]
}
