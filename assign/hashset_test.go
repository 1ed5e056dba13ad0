package assign

import "testing"

func TestStickyMovesBackInHashSetOrder(t *testing.T) {
	// Kafka's getTheActualPartitionToBeMoved moves back the first partition
	// of a java.util.HashSet<TopicPartition> (AbstractStickyAssignor.java:325),
	// not the lowest. On this racked group, found by examples/kafkaassign,
	// moving back the lowest leaves t4-3 with consumer-9-58479b72-1 and
	// gives t4-5 to consumer-9-43ee551d-4; Kafka's plan, below, is the other
	// way round.
	topics := map[string]Topic{
		"t0": {Partitions: 1, Racks: [][]string{{"r0", "r1"}}},
		"t1": {Partitions: 5, Racks: [][]string{{"r0", "r0", "r1"}, {"r0", "r0"}, {"r1", "r0"}, {"r0", "r1", "r0"}, {"r1", "r0", "r0"}}},
		"t2": {Partitions: 8, Racks: [][]string{{"r0", "r1", "r0"}, {"r0", "r0"}, {"r0", "r1"}, {"r0", "r1"}, {"r1", "r0"}, {"r0", "r0", "r1"}, {"r0", "r0", "r1"}, {"r1", "r0"}}},
		"t3": {Partitions: 12, Racks: [][]string{{"r0", "r0"}, {"r1", "r0"}, {"r1", "r0", "r0"}, {"r1", "r0", "r0"}, {"r1", "r0"}, {"r1", "r0"}, {"r1", "r0"}, {"r0", "r0"}, {"r0", "r1"}, {"r0", "r1", "r0"}, {"r0", "r0", "r1"}, {"r0", "r0"}}},
		"t4": {Partitions: 13, Racks: [][]string{{"r0", "r0", "r1"}, {"r1", "r0", "r0"}, {"r1", "r0"}, {"r0", "r0", "r1"}, {"r1", "r0"}, {"r0", "r1"}, {"r0", "r1"}, {"r1", "r0", "r0"}, {"r0", "r1", "r0"}, {"r0", "r0"}, {"r1", "r0"}, {"r1", "r0", "r0"}, {"r1", "r0"}}},
		"t5": {Partitions: 12, Racks: [][]string{{"r1", "r0", "r0"}, {"r0", "r0"}, {"r1", "r0"}, {"r0", "r0", "r1"}, {"r0", "r1"}, {"r0", "r0"}, {"r1", "r0"}, {"r1", "r0"}, {"r0", "r1"}, {"r0", "r1", "r0"}, {"r0", "r0"}, {"r1", "r0"}}},
	}
	members := []Member{
		{ID: "consumer-9-58479b72-1", Rack: "r1", Generation: 1, Topics: topicsOf("t0", "t2", "t3", "t4"), Owned: parsePartitions("t2-7, t3-4, t3-8, t3-10, t4-3, t4-5, t4-7, t4-10, t4-12")},
		{ID: "consumer-0-bf785524-100", Rack: "r1", Generation: -1, Topics: topicsOf("t3"), Owned: parsePartitions("")},
		{ID: "consumer-5-4edbb418-2", Rack: "r0", Generation: 1, Topics: topicsOf("t0", "t1", "t3"), Owned: parsePartitions("t1-1, t1-2, t1-3, t1-4, t3-0, t3-1, t3-3, t3-6, t3-9")},
		{ID: "consumer-0-c1560c25-3", Rack: "r0", Generation: 1, Topics: topicsOf("t1", "t5"), Owned: parsePartitions("t1-0, t5-0, t5-1, t5-2, t5-3, t5-4, t5-6, t5-8, t5-10")},
		{ID: "consumer-9-43ee551d-4", Rack: "r1", Generation: 1, Topics: topicsOf("t4"), Owned: parsePartitions("t4-0, t4-1, t4-2, t4-4, t4-6, t4-8, t4-9, t4-11")},
		{ID: "consumer-2-a7334e54-5", Rack: "r0", Generation: 1, Topics: topicsOf("t1", "t2", "t3", "t5"), Owned: parsePartitions("t3-2, t3-5, t3-7, t3-11, t5-5, t5-7, t5-9, t5-11")},
	}
	requirePlan(t, mustAssign(t, Sticky, members, topics), map[string]string{
		"consumer-9-58479b72-1":   "t2-2, t2-4, t2-6, t2-7, t3-10, t4-5, t4-7, t4-10, t4-12",
		"consumer-0-bf785524-100": "t3-0, t3-1, t3-2, t3-3, t3-4, t3-5, t3-7, t3-8",
		"consumer-5-4edbb418-2":   "t0-0, t1-0, t1-1, t1-2, t1-3, t1-4, t3-6, t3-9",
		"consumer-0-c1560c25-3":   "t5-0, t5-1, t5-2, t5-3, t5-4, t5-6, t5-8, t5-10",
		"consumer-9-43ee551d-4":   "t4-0, t4-1, t4-2, t4-3, t4-4, t4-6, t4-8, t4-9, t4-11",
		"consumer-2-a7334e54-5":   "t2-0, t2-1, t2-3, t2-5, t3-11, t5-5, t5-7, t5-9, t5-11",
	})
}

func TestPairSetIteratesAsJavaHashSet(t *testing.T) {
	// java.util.HashSet<TopicPartition> made with new HashSet<>(): the
	// first element is the one in the lowest bucket of the current table
	// (16, doubled past 12 elements), the earliest put among equals.
	// TopicPartition.hashCode of ("t", p) is 31*(31+p) + "t".hashCode().
	s := newPairSet()
	hash := func(p int32) int32 { return 31*(31+p) + javaHash("t") }
	for _, p := range []int32{5, 1, 12} {
		s.add(p, hash(p))
	}
	// Buckets of 16: p=5 -> 1232&15 = 0, p=1 -> 1108&15 = 4, p=12 -> 1449&15 = 9.
	if got := s.first(); got != 5 {
		t.Fatalf("first of {5, 1, 12} = %d, want 5", got)
	}
	s.remove(5)
	if got := s.first(); got != 1 {
		t.Fatalf("first of {1, 12} = %d, want 1", got)
	}
	// Thirteen elements make 32 buckets; Java then iterates t-21, t-20,
	// t-12, t-1, t-30, ..., t-22 (checked with java.util.HashSet).
	for p := int32(20); p < 31; p++ {
		s.add(p, hash(p))
	}
	if s.capacity != 32 {
		t.Fatalf("capacity %d after 13 elements, want 32", s.capacity)
	}
	if got := s.first(); got != 21 {
		t.Fatalf("first = %d, want 21", got)
	}
	s.remove(21)
	s.remove(20)
	if got := s.first(); got != 12 {
		t.Fatalf("first after removing 21 and 20 = %d, want 12 (the table does not shrink)", got)
	}
}
