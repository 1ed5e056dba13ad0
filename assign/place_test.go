package assign

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

// rackBrokers builds brokers from Kafka's broker id -> rack maps; "" is null.
func rackBrokers(racks map[int32]string) []Broker {
	var out []Broker
	for _, id := range slices.Sorted(maps.Keys(racks)) {
		out = append(out, Broker{ID: id, Rack: racks[id]})
	}
	return out
}

func TestPlaceReplicasVectors(t *testing.T) {
	// Vectors from core/src/test/scala/unit/kafka/admin/AdminRackAwareTest.scala.
	noRacks := rackBrokers(map[int32]string{0: "", 1: "", 2: "", 3: "", 4: ""})
	tests := []struct {
		name                                    string
		brokers                                 []Broker
		partitions, rf, start, shift, startPart int
		want                                    [][]int32
	}{
		{"testReplicaAssignment", noRacks, 10, 3, 0, 0, -1,
			[][]int32{{0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4, 0}, {4, 0, 1}, {0, 2, 3}, {1, 3, 4}, {2, 4, 0}, {3, 0, 1}, {4, 1, 2}}},
		{"testGetRackAlternatedBrokerListAndAssignReplicasToBrokers",
			rackBrokers(map[int32]string{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}), 7, 3, 0, 0, 0,
			[][]int32{{0, 3, 1}, {3, 1, 5}, {1, 5, 4}, {5, 4, 2}, {4, 2, 0}, {2, 0, 3}, {0, 4, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlaceReplicas(tt.brokers, tt.partitions, tt.rf, tt.start, tt.shift, tt.startPart)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestRackAlternated(t *testing.T) {
	// AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
	racks := map[int32]string{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
	ids := func(bs []Broker) []int32 {
		var out []int32
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	if got := ids(rackAlternated(rackBrokers(racks))); !slices.Equal(got, []int32{0, 3, 1, 5, 4, 2}) {
		t.Errorf("got %v, want [0 3 1 5 4 2]", got)
	}
	delete(racks, 5)
	if got := ids(rackAlternated(rackBrokers(racks))); !slices.Equal(got, []int32{0, 3, 1, 4, 2}) {
		t.Errorf("without broker 5: got %v, want [0 3 1 4 2]", got)
	}
}

func TestPlaceReplicasErrors(t *testing.T) {
	// AdminRackAwareTest.testAssignReplicasToBrokersWithInvalidParameters and
	// testReplicaAssignment.
	partial := rackBrokers(map[int32]string{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: ""})
	noRacks := rackBrokers(map[int32]string{0: "", 1: "", 2: "", 3: "", 4: ""})
	tests := []struct {
		name           string
		brokers        []Broker
		partitions, rf int
		start, shift   int
		want           error
	}{
		{"no partitions", partial, 0, 0, 0, 0, ErrInvalidPartitions},
		{"replication factor 0", partial, 10, 0, 0, 0, ErrInvalidReplicationFactor},
		{"replication factor above brokers", partial, 10, 6, 0, 0, ErrInvalidReplicationFactor},
		{"some brokers without rack", partial, 10, 5, 0, 0, ErrPartialRacks},
		{"no racks, replication factor 0", noRacks, 10, 0, 0, 0, ErrInvalidReplicationFactor},
		{"no racks, replication factor 6", noRacks, 10, 6, 0, 0, ErrInvalidReplicationFactor},
		{"no brokers", nil, 1, 1, 0, 0, ErrInvalidReplicationFactor},
		{"negative start", noRacks, 10, 3, -1, 0, ErrInvalidArgument},
		{"negative shift", noRacks, 10, 3, 0, -2, ErrInvalidArgument},
		{"duplicate broker", []Broker{{ID: 1}, {ID: 1}}, 1, 1, 0, 0, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlaceReplicas(tt.brokers, tt.partitions, tt.rf, tt.start, tt.shift, -1)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v (result %v), want %v", err, got, tt.want)
			}
		})
	}
}

// distribution is RackAwareTest.getReplicaDistribution.
type distribution struct {
	racks   []map[string]bool // per partition: racks with a replica
	leaders map[int32]int
	counts  map[int32]int
}

func distributionOf(place [][]int32, rackOf map[int32]string) distribution {
	d := distribution{leaders: map[int32]int{}, counts: map[int32]int{}}
	for _, replicas := range place {
		d.leaders[replicas[0]]++
		racks := map[string]bool{}
		for _, b := range replicas {
			d.counts[b]++
			racks[rackOf[b]] = true
		}
		d.racks = append(d.racks, racks)
	}
	return d
}

func TestPlaceReplicasRackAware(t *testing.T) {
	// The properties AdminRackAwareTest checks with
	// RackAwareTest.checkReplicaDistribution, over every start index and shift
	// (Kafka's tests draw them at random): replicas of a partition on distinct
	// racks, each broker leading partitions/brokers partitions and holding
	// partitions*rf/brokers replicas.
	std := map[int32]string{0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
	tests := []struct {
		name                  string
		racks                 map[int32]string
		partitions, rf        int
		startPartition        int
		leaders, replicaCount bool
	}{
		{"testAssignmentWithRackAware", std, 6, 3, 0, true, true},
		{"testAssignmentWithRackAwareWithUnevenReplicas", std, 13, 3, 0, false, false},
		{"testAssignmentWithRackAwareWithUnevenRacks", map[int32]string{0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 12, 3, 0, true, false},
		{"testAssignmentWith2ReplicasRackAware", std, 12, 2, 0, true, true},
		{"testRackAwareExpansion", map[int32]string{6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}, 12, 2, 12, true, true},
		{"testAssignmentWith2ReplicasRackAwareWith6Partitions", std, 6, 2, 0, true, true},
		{"testAssignmentWith2ReplicasRackAwareWith6PartitionsAnd3Brokers", map[int32]string{0: "rack1", 1: "rack2", 4: "rack3"}, 3, 2, 0, true, true},
		{"testLargeNumberPartitionsAssignment", map[int32]string{0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1",
			6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"}, 96, 3, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			brokers := rackBrokers(tt.racks)
			numRacks := len(slices.Compact(slices.Sorted(maps.Values(tt.racks))))
			for start := range len(brokers) {
				for shift := range len(brokers) {
					place, err := PlaceReplicas(brokers, tt.partitions, tt.rf, start, shift, tt.startPartition)
					if err != nil {
						t.Fatal(err)
					}
					d := distributionOf(place, tt.racks)
					for p, racks := range d.racks {
						if len(racks) != min(tt.rf, numRacks) || len(place[p]) != tt.rf {
							t.Fatalf("start %d shift %d: partition %d replicas %v span %d racks", start, shift, p, place[p], len(racks))
						}
					}
					for _, b := range brokers {
						if tt.leaders && d.leaders[b.ID] != tt.partitions/len(brokers) {
							t.Fatalf("start %d shift %d: broker %d leads %d partitions, want %d", start, shift, b.ID, d.leaders[b.ID], tt.partitions/len(brokers))
						}
						if tt.replicaCount && d.counts[b.ID] != tt.partitions*tt.rf/len(brokers) {
							t.Fatalf("start %d shift %d: broker %d holds %d replicas, want %d", start, shift, b.ID, d.counts[b.ID], tt.partitions*tt.rf/len(brokers))
						}
					}
				}
			}
		})
	}
}

func TestPlaceReplicasRackProperties(t *testing.T) {
	// AdminRackAwareTest.testMoreReplicasThanRacks, testLessReplicasThanRacks,
	// testSingleRack and testSkipBrokerWithReplicaAlreadyAssigned.
	tests := []struct {
		name           string
		racks          map[int32]string
		partitions, rf int
		spanRacks      int
		leadOnce       bool
	}{
		{"more replicas than racks", map[int32]string{0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}, 6, 5, 3, false},
		{"less replicas than racks", map[int32]string{0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}, 6, 2, 2, false},
		{"single rack", map[int32]string{0: "rack1", 1: "rack1", 2: "rack1", 3: "rack1", 4: "rack1", 5: "rack1"}, 6, 3, 1, true},
		{"skip broker with replica already assigned", map[int32]string{0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}, 6, 4, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			brokers := rackBrokers(tt.racks)
			for start := range len(brokers) {
				for shift := range len(brokers) {
					place, err := PlaceReplicas(brokers, tt.partitions, tt.rf, start, shift, -1)
					if err != nil {
						t.Fatal(err)
					}
					d := distributionOf(place, tt.racks)
					for p, racks := range d.racks {
						distinct := len(slices.Compact(slices.Sorted(slices.Values(place[p]))))
						if len(racks) != tt.spanRacks || distinct != tt.rf {
							t.Fatalf("start %d shift %d: partition %d replicas %v span %d racks", start, shift, p, place[p], len(racks))
						}
					}
					if tt.leadOnce {
						for _, b := range brokers {
							if d.leaders[b.ID] != 1 {
								t.Fatalf("start %d shift %d: broker %d leads %d partitions", start, shift, b.ID, d.leaders[b.ID])
							}
						}
					}
				}
			}
		})
	}
}

func TestPlaceReplicasStartPartitionContinuesLeaders(t *testing.T) {
	// Adding partitions with startPartition continues the leaders Kafka would
	// have chosen had the topic been created with them all; the follower shift
	// restarts from replicaShift, as in Kafka's partition expansion.
	for _, brokers := range [][]Broker{
		rackBrokers(map[int32]string{0: "", 1: "", 2: "", 3: "", 4: ""}),
		rackBrokers(map[int32]string{0: "a", 1: "b", 2: "b", 3: "c", 4: "c", 5: "a"}),
	} {
		whole, err := PlaceReplicas(brokers, 20, 3, 2, 1, -1)
		if err != nil {
			t.Fatal(err)
		}
		tail, err := PlaceReplicas(brokers, 8, 3, 2, 1, 12)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tail {
			if tail[i][0] != whole[12+i][0] {
				t.Errorf("partition %d: leader %d, want %d", 12+i, tail[i][0], whole[12+i][0])
			}
		}
	}
}
