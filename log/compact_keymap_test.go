package log

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/strandlog/strand/segment"
	"github.com/stretchr/testify/require"
)

// TestKeyMapLatestInMarksEachKeysLatestOffset: the bit set compaction's
// rewrite reads instead of looking keys up marks, within its range,
// exactly the offsets the map holds as their key's latest; and the map
// grows to its budget with every key's latest offset intact, filling at
// the count of keys the budget sets.
func TestKeyMapLatestInMarksEachKeysLatestOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newKeyMap(256<<10, xxhash.Sum64)
	latest := map[string]int64{}
	var recs []segment.Record
	for off := int64(0); len(latest) < m.limit; off += 1 + int64(rng.IntN(3)) {
		key := fmt.Appendf(nil, "key-%d", rng.IntN(2*m.limit))
		recs = append(recs, segment.Record{Key: key, Offset: off})
		if len(recs) == 50 {
			require.Equal(t, len(recs), m.putAll(recs))
			recs = recs[:0]
		}
		latest[string(key)] = off
	}
	require.Equal(t, len(recs), m.putAll(recs))
	require.Len(t, m.slots, m.budget, "grown to the budget")
	require.Zero(t, m.putAll([]segment.Record{{Key: []byte("one too many"), Offset: 1 << 40}}), "full")
	for k, off := range latest {
		require.Equal(t, off, m.get([]byte(k)), "key %s", k)
	}

	var end int64
	for _, off := range latest {
		end = max(end, off+1)
	}
	from, to := end/4, end*3/4
	bits := m.latestIn(from, to, 1<<20)
	marked := map[int64]bool{}
	for off := from; off < to; off++ {
		if bits[(off-from)/64]&(1<<((off-from)%64)) != 0 {
			marked[off] = true
		}
	}
	want := map[int64]bool{}
	for _, off := range latest {
		if off >= from && off < to {
			want[off] = true
		}
	}
	require.Equal(t, want, marked)
	require.Nil(t, m.latestIn(0, 8*1024+1, 1024), "more bits than the bytes allowed")
}
