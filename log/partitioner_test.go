package log

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMurmur2KafkaVectors(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int32
	}{
		// apache/kafka: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java testMurmur2
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		// tulios/kafkajs: src/producer/partitioners/defaultJava/murmur2.spec.js,
		// generated with Kafka's Utils.murmur2 (Test.java beside it).
		{"0", 971027396},
		{"1", -1993445489},
		{"128", -326012175},
		{"2187", -1508407203},
		{"16384", -325739742},
		{"78125", -1654490814},
		{"279936", 1462227128},
		{"823543", -2014198330},
		{"2097152", 607668903},
		{"4782969", -1182699775},
		{"10000000", -1830336757},
		{"19487171", -1603849305},
		{"35831808", -857013643},
		{"62748517", -1167431028},
		{"105413504", -381294639},
		{"170859375", -1658323481},
		{"100:48069", 1009543857},
	} {
		require.Equal(t, tc.want, murmur2([]byte(tc.key)), "murmur2(%q)", tc.key)
	}
}

// Kafka places a key on toPositive(murmur2(key)) % n, where toPositive
// clears the sign bit (Utils.toPositive, BuiltInPartitioner.partitionForKey).
// The expected partitions are worked out by hand from the hashes above; for
// negative hashes they differ from |hash| % n, the classic porting mistake
// (shown in the comments).
func TestHashPartitionerPlacesKeysLikeKafka(t *testing.T) {
	p := HashPartitioner(rand.New(rand.NewPCG(1, 1)))
	for _, tc := range []struct {
		key  string
		n    int32
		want int32
	}{
		{"21", 7, 3},      // 1173551340 % 7; |hash| % 7 would be 6
		{"21", 100, 40},   // |hash| % 100 would be 8
		{"foobar", 10, 6}, // 1357151166 % 10; |hash| % 10 would be 2
		{"foobar", 12, 6},
		{"a-little-bit-long-string", 3, 2}, // 1161502112 % 3; |hash| % 3 would be 0
		{"a-little-bit-long-string", 7, 1},
		{"abc", 7, 4}, // a positive hash: 479470107 % 7
		{"abc", 10, 7},
		{"abc", 1, 0},
	} {
		for range 3 {
			require.Equal(t, tc.want, p.Partition([]byte(tc.key), tc.n), "key %q over %d partitions", tc.key, tc.n)
			p.OnNewBatch(tc.want) // completed batches never move keyed records
		}
	}
}

func TestHashPartitionerKeyKinds(t *testing.T) {
	p := HashPartitioner(rand.New(rand.NewPCG(1, 2)))
	empty := (murmur2([]byte{}) & 0x7fffffff) % 1000
	require.Equal(t, empty, p.Partition([]byte{}, 1000), "an empty key is hashed")

	sticky := p.Partition(nil, 1000)
	for range 10 {
		require.Equal(t, sticky, p.Partition(nil, 1000), "a nil key is no key: it sticks")
	}
	p.OnNewBatch(sticky)
	require.NotEqual(t, sticky, p.Partition(nil, 1000), "a completed batch moves records without a key")
}

// Kafka's StickyPartitionCacheTest.testStickyPartitionCache and
// BuiltInPartitionerTest.testStickyPartitioning, for one topic each.
func TestStickyPartitionerSticksUntilItsBatchIsComplete(t *testing.T) {
	for _, newP := range []func(*rand.Rand) BatchPartitioner{HashPartitioner, StickyPartitioner} {
		p := newP(rand.New(rand.NewPCG(7, 7)))
		partA := p.Partition(nil, 3)
		require.Equal(t, partA, p.Partition(nil, 3), "sticks before any batch completes")

		p.OnNewBatch(partA)
		changed := p.Partition(nil, 3)
		require.NotEqual(t, partA, changed, "switches to another partition")
		require.Equal(t, changed, p.Partition(nil, 3), "and sticks there")

		p.OnNewBatch(partA)
		require.Equal(t, changed, p.Partition(nil, 3), "a batch of the old partition is stale and changes nothing")

		one := newP(rand.New(rand.NewPCG(7, 8)))
		for range 10 {
			require.Equal(t, int32(0), one.Partition(nil, 1), "one partition")
			one.OnNewBatch(0)
		}
	}
}

func TestStickyPartitionerIgnoresKeys(t *testing.T) {
	p := StickyPartitioner(rand.New(rand.NewPCG(3, 3)))
	first := p.Partition([]byte("a"), 50)
	for i := range 20 {
		require.Equal(t, first, p.Partition(fmt.Appendf(nil, "key-%d", i), 50))
	}
}

func TestStickyPartitionerSpreadsBatches(t *testing.T) {
	const n, batches = 4, 4000
	p := StickyPartitioner(rand.New(rand.NewPCG(11, 12)))
	counts := make([]int, n)
	prev := int32(-1)
	for range batches {
		part := p.Partition(nil, n)
		require.NotEqual(t, prev, part, "each batch goes to another partition than the last")
		counts[part]++
		prev = part
		p.OnNewBatch(part)
	}
	for i, c := range counts {
		require.InDelta(t, batches/n, c, batches/n/10, "partition %d got %d of %d batches", i, c, batches)
	}
}

func TestStickyPartitionerRepicksWhenPartitionsShrink(t *testing.T) {
	p := StickyPartitioner(rand.New(rand.NewPCG(5, 5)))
	for p.Partition(nil, 100) < 10 {
		p.OnNewBatch(p.Partition(nil, 100))
	}
	for range 50 {
		got := p.Partition(nil, 10)
		require.GreaterOrEqual(t, got, int32(0))
		require.Less(t, got, int32(10))
	}
}

func TestStickyPartitionerIsDeterministicForASeed(t *testing.T) {
	run := func() []int32 {
		p := StickyPartitioner(rand.New(rand.NewPCG(42, 43)))
		var got []int32
		for range 20 {
			part := p.Partition(nil, 8)
			got = append(got, part)
			p.OnNewBatch(part)
		}
		return got
	}
	require.Equal(t, run(), run())
}

// Kafka's RoundRobinPartitionerTest.testRoundRobinWithKeyBytes and
// testRoundRobinWithNullKeyBytes: 30 records over 3 partitions, 10 each,
// whatever happens to another topic's partitioner in between.
func TestRoundRobinPartitioner(t *testing.T) {
	for _, key := range [][]byte{[]byte("key"), nil} {
		topicA, topicB := RoundRobinPartitioner(), RoundRobinPartitioner()
		counts := map[int32]int{}
		for i := range 30 {
			part := topicA.Partition(key, 3)
			require.Equal(t, int32(i%3), part, "partitions in turn")
			counts[part]++
			if i%5 == 0 {
				topicB.Partition(key, 1)
			}
		}
		require.Equal(t, map[int32]int{0: 10, 1: 10, 2: 10}, counts)
	}
}

func TestPartitionersRejectNoPartitions(t *testing.T) {
	for name, p := range map[string]Partitioner{
		"hash":        HashPartitioner(nil),
		"sticky":      StickyPartitioner(nil),
		"round robin": RoundRobinPartitioner(),
	} {
		for _, n := range []int32{0, -1, -2147483648} {
			require.Equal(t, int32(-1), p.Partition(nil, n), "%s, keyless, %d partitions", name, n)
			require.Equal(t, int32(-1), p.Partition([]byte("k"), n), "%s, keyed, %d partitions", name, n)
		}
		require.Equal(t, int32(0), p.Partition(nil, 1), "%s still works after a bad call", name)
	}
	s := StickyPartitioner(nil)
	first := s.Partition(nil, 5)
	s.OnNewBatch(-1)
	require.Equal(t, first, s.Partition(nil, 5), "a batch of no partition moves nothing")
}

func TestPartitionersConcurrentUse(t *testing.T) {
	ps := []Partitioner{HashPartitioner(nil), StickyPartitioner(nil), RoundRobinPartitioner()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				for _, p := range ps {
					n := int32(1 + (g+i)%7)
					var key []byte
					if i%2 == 0 {
						key = fmt.Appendf(nil, "k%d", i)
					}
					part := p.Partition(key, n)
					if part < 0 || part >= n {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%T: %d of %d", p, part, n))
						mu.Unlock()
					}
					if bp, ok := p.(BatchPartitioner); ok && i%3 == 0 {
						bp.OnNewBatch(part)
					}
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, bad)
}

func BenchmarkHashPartitioner(b *testing.B) {
	p := HashPartitioner(nil)
	key := []byte("order-1234567890")
	for b.Loop() {
		p.Partition(key, 64)
	}
}

func ExampleHashPartitioner() {
	p := HashPartitioner(rand.New(rand.NewPCG(1, 2)))
	// The Java client puts these keys on the same partitions.
	fmt.Println(p.Partition([]byte("foobar"), 10))
	fmt.Println(p.Partition([]byte("abc"), 10))

	// Records without a key share one partition until its batch is done.
	first := p.Partition(nil, 10)
	fmt.Println(p.Partition(nil, 10) == first)
	p.OnNewBatch(first)
	fmt.Println(p.Partition(nil, 10) == first)
	// Output:
	// 6
	// 7
	// true
	// false
}
