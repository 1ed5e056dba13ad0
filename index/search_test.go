package index

import (
	"fmt"
	"math"
	"math/bits"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// probes runs searchWarm over keys 10, 20, ..., 10n for target and
// returns the result and the number of entries it read.
func probes(n, warm int, target int64) (int, int) {
	count := 0
	i := searchWarm(n, warm, target, func(i int) int64 {
		count++
		return int64(10 * (i + 1))
	})
	return i, count
}

func TestSearchWarmResult(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 8, 9, 100} {
		for _, warm := range []int{1, 8, 1024} {
			for target := int64(-5); target <= int64(10*n+15); target++ {
				want := int(min(target/10, int64(n))) - 1
				if target < 0 {
					want = -1
				}
				got, _ := probes(n, warm, target)
				require.Equal(t, want, got, "n=%d warm=%d target=%d", n, warm, target)
			}
		}
	}
}

// TestLookupCostGrowsAsLogN counts the entries a lookup reads at 1, 1,000
// and 1,000,000 entries. Counting probes rather than timing keeps the test
// exact on a noisy machine: the worst case over targets in the warm and the
// cold section is at most log2(n)+2 reads (one to pick the section).
func TestLookupCostGrowsAsLogN(t *testing.T) {
	const warm = warmBytes / OffsetEntrySize
	worst := map[int]int{}
	for _, n := range []int{1, 1000, 1000000} {
		targets := []int64{math.MinInt64, 0, 5, 10, int64(10 * n), math.MaxInt64}
		for k := int64(1); k <= int64(10*n); k = k*3 + 1 {
			targets = append(targets, k, int64(10*n)-k)
		}
		for _, target := range targets {
			_, c := probes(n, warm, target)
			worst[n] = max(worst[n], c)
		}
		bound := bits.Len(uint(n)) + 2
		require.LessOrEqual(t, worst[n], bound, "n=%d", n)
		t.Logf("entries=%d: at most %d probes", n, worst[n])
	}
	require.Less(t, worst[1000000], 3*worst[1000], "1000 times the entries, less than 3 times the probes")

	// Targets in the warm section read only it: log2(warm)+2 probes
	// however large the index.
	for _, target := range []int64{10 * (1000000 - 10), 10 * (1000000 - warm + 1)} {
		_, c := probes(1000000, warm, target)
		require.LessOrEqual(t, c, bits.Len(uint(warm))+2, "target %d", target)
	}
}

func BenchmarkOffsetLookup(b *testing.B) {
	for _, n := range []int{1, 1000, 1000000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			x, err := OpenOffset(vfs.NewMem(), "/b.index", 0, n*OffsetEntrySize, true)
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			for i := range n {
				if err := x.Append(int64(10*(i+1)), uint32(100*(i+1))); err != nil {
					b.Fatal(err)
				}
			}
			// Spread targets over the whole index, cold and warm.
			targets := make([]int64, 1024)
			for i := range targets {
				targets[i] = int64(i*7919) % int64(10*n+10)
			}
			for i := 0; b.Loop(); i++ {
				if got := x.Lookup(targets[i%len(targets)]); got.Offset < 0 {
					b.Fatal(got)
				}
			}
			_, c := probes(n, warmBytes/OffsetEntrySize, int64(10*n/2))
			b.ReportMetric(float64(c), "probes/lookup")
		})
	}
}

// BenchmarkOffsetAppend appends entries on the OS file system, where each
// is a pwrite, and on the in-memory one.
func BenchmarkOffsetAppend(b *testing.B) {
	for _, fs := range []struct {
		name string
		fsys vfs.FS
		dir  string
	}{{"os", vfs.Default, b.TempDir()}, {"mem", vfs.NewMem(), "/"}} {
		b.Run("fs="+fs.name, func(b *testing.B) {
			x, err := OpenOffset(fs.fsys, filepath.Join(fs.dir, "b.index"), 0, 8<<20, true)
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			var off int64
			for b.Loop() {
				if x.IsFull() {
					if err := x.Reset(); err != nil {
						b.Fatal(err)
					}
					off = 0
				}
				off++
				if err := x.Append(off, uint32(off)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
