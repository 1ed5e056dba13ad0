package log

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// A Partitioner chooses the partition of a record that does not name one.
//
// Partition returns a partition in [0, numPartitions) for a record with the
// given key. A nil key is a record without a key; an empty non-nil key is a
// key like any other, as in Kafka's Java client. numPartitions must be
// positive: for numPartitions <= 0 Partition returns -1, which names no
// partition, so that a caller that checks the result (as it must for a
// Partitioner it did not write) reports the error instead of writing to a
// wrong partition.
//
// The partitioners of this package hold the state of one topic (a sticky
// choice, a round-robin counter): use one per topic. They are safe for
// concurrent use.
type Partitioner interface {
	Partition(key []byte, numPartitions int32) int32
}

// A BatchPartitioner is a Partitioner whose choice for records without a
// key sticks to one partition until the batch for that partition is
// complete, so that such records fill few large batches instead of many
// small ones (KIP-480).
type BatchPartitioner interface {
	Partitioner
	// OnNewBatch tells the partitioner that the records it chose for
	// partition were handed off as a batch. If partition is still its
	// choice, later records without a key go to another partition, picked
	// at random. A call naming any other partition is stale (another
	// goroutine's batch already moved the choice on) and changes nothing,
	// so concurrent producers that complete the same batch switch once.
	OnNewBatch(partition int32)
}

// HashPartitioner returns Kafka's default partitioner: a record with a key
// goes to toPositive(murmur2(key)) mod numPartitions, exactly as the Java
// client (and franz-go's StickyKeyPartitioner) place it, so that a key lands
// on the same partition whichever of them produced it; a record without a
// key goes to the sticky partition (see BatchPartitioner).
//
// rng picks sticky partitions; it is used under the partitioner's lock and
// must not be used elsewhere. A nil rng is seeded at random.
func HashPartitioner(rng *rand.Rand) BatchPartitioner {
	return &hashPartitioner{sticky: newSticky(rng)}
}

// StickyPartitioner returns a partitioner that places every record, with a
// key or without, on the sticky partition (see BatchPartitioner), like
// Kafka's UniformStickyPartitioner. Records with equal keys may land on
// different partitions.
//
// rng is as for HashPartitioner.
func StickyPartitioner(rng *rand.Rand) BatchPartitioner {
	return newSticky(rng)
}

// RoundRobinPartitioner returns a partitioner that places records, with a
// key or without, on partitions 0, 1, ..., numPartitions-1 in turn, like
// Kafka's RoundRobinPartitioner. It is not a BatchPartitioner: completed
// batches do not move it, which avoids Kafka's KAFKA-9965, where the new
// batch callback consumed a turn and left partitions skipped.
func RoundRobinPartitioner() Partitioner {
	return new(roundRobin)
}

type hashPartitioner struct {
	*sticky
}

func (p *hashPartitioner) Partition(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		return -1
	}
	if key == nil {
		return p.sticky.Partition(nil, numPartitions)
	}
	// Kafka's Utils.toPositive: clear the sign bit (not the absolute value,
	// which differs for negative hashes and overflows for MinInt32).
	return (murmur2(key) & 0x7fffffff) % numPartitions
}

// sticky keeps the partition chosen for the current batch
// (apache/kafka: clients/src/main/java/org/apache/kafka/clients/producer/internals/StickyPartitionCache.java).
type sticky struct {
	mu  sync.Mutex
	rng *rand.Rand
	cur int32 // the sticky partition; -1 before the first choice and after a switch
	old int32 // the partition a switch moved away from, or -1
}

func newSticky(rng *rand.Rand) *sticky {
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &sticky{rng: rng, cur: -1, old: -1}
}

func (s *sticky) Partition(_ []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur >= 0 && s.cur < numPartitions {
		return s.cur
	}
	// A choice beyond numPartitions is stale: the caller knows fewer
	// partitions than it did (or its view lags); choose again.
	switch {
	case numPartitions == 1:
		s.cur = 0
	case s.old >= 0 && s.old < numPartitions:
		// Uniform over the other partitions, without a retry loop.
		s.cur = s.rng.Int32N(numPartitions - 1)
		if s.cur >= s.old {
			s.cur++
		}
	default:
		s.cur = s.rng.Int32N(numPartitions)
	}
	return s.cur
}

func (s *sticky) OnNewBatch(partition int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if partition < 0 || partition != s.cur {
		return
	}
	s.old, s.cur = s.cur, -1
}

type roundRobin struct {
	next atomic.Uint64 // wide enough never to wrap, which would break the cycle
}

func (r *roundRobin) Partition(_ []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		return -1
	}
	return int32((r.next.Add(1) - 1) % uint64(numPartitions))
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, as Kafka's
// Utils.murmur2 computes it (apache/kafka:
// clients/src/main/java/org/apache/kafka/common/utils/Utils.java).
func murmur2(data []byte) int32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(data))
	for ; len(data) >= 4; data = data[4:] {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}
