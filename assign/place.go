package assign

import (
	"cmp"
	"fmt"
	"slices"
)

// Broker is a broker of the cluster as replica placement sees it.
type Broker struct {
	ID   int32
	Rack string // "" for none
}

// PlaceReplicas is Kafka's AdminUtils.assignReplicasToBrokers: result[p] = replicas of partition p, leader first.
// With startIndex == replicaShift == k it equals Kafka's fixedStartIndex k; startPartition -1 means 0.
//
// The leader of partition p is broker (p + startIndex) mod n of the broker
// list and the followers follow at a shift that grows by one every n
// partitions, so that leaders and followers spread evenly. When every broker
// has a rack, the list is first rearranged to alternate racks and a follower
// is skipped while some rack (or broker) still has no replica of the
// partition. startPartition continues the sequence from that partition id, as
// when partitions are added to a topic; the result then holds partitions
// startPartition.. at indexes 0...
//
// Kafka draws startIndex and replicaShift at random when they are not fixed;
// GenerateReassignment does so from a caller's source of randomness.
//
// Errors: ErrInvalidPartitions for partitions < 1, ErrInvalidReplicationFactor
// for a replication factor outside 1..len(brokers), ErrPartialRacks when only
// some brokers have a rack, ErrInvalidArgument for a negative startIndex or
// replicaShift or for duplicate broker ids.
func PlaceReplicas(brokers []Broker, partitions, replicationFactor, startIndex, replicaShift, startPartition int) ([][]int32, error) {
	if partitions <= 0 {
		return nil, fmt.Errorf("%w: %d, must be larger than 0", ErrInvalidPartitions, partitions)
	}
	if replicationFactor <= 0 {
		return nil, fmt.Errorf("%w: %d, must be larger than 0", ErrInvalidReplicationFactor, replicationFactor)
	}
	if replicationFactor > len(brokers) {
		return nil, fmt.Errorf("%w: %d larger than available brokers: %d", ErrInvalidReplicationFactor, replicationFactor, len(brokers))
	}
	if startIndex < 0 || replicaShift < 0 {
		return nil, fmt.Errorf("%w: startIndex %d and replicaShift %d must not be negative", ErrInvalidArgument, startIndex, replicaShift)
	}
	racks := 0
	seen := make(map[int32]struct{}, len(brokers))
	for _, b := range brokers {
		if _, dup := seen[b.ID]; dup {
			return nil, fmt.Errorf("%w: broker %d listed twice", ErrInvalidArgument, b.ID)
		}
		seen[b.ID] = struct{}{}
		if b.Rack != "" {
			racks++
		}
	}
	if racks == 0 {
		ids := make([]int32, len(brokers))
		for i, b := range brokers {
			ids[i] = b.ID
		}
		return placeRackUnaware(ids, partitions, replicationFactor, startIndex, replicaShift, max(0, startPartition)), nil
	}
	if racks < len(brokers) {
		return nil, fmt.Errorf("%w: %d of %d brokers have a rack", ErrPartialRacks, racks, len(brokers))
	}
	return placeRackAware(brokers, partitions, replicationFactor, startIndex, replicaShift, max(0, startPartition)), nil
}

// followerIndex is AdminUtils.replicaIndex: the index of follower j of a
// partition whose leader is at first, for n brokers and the given shift.
func followerIndex(first, shift, j, n int) int {
	return (first + 1 + (shift+j)%(n-1)) % n
}

func placeRackUnaware(brokers []int32, partitions, rf, start, shift, pid int) [][]int32 {
	n := len(brokers)
	out := make([][]int32, partitions)
	flat := make([]int32, partitions*rf)
	for i := range out {
		if pid > 0 && pid%n == 0 {
			shift++
		}
		first := (pid + start) % n
		replicas := flat[i*rf : i*rf : (i+1)*rf]
		replicas = append(replicas, brokers[first])
		for j := range rf - 1 {
			replicas = append(replicas, brokers[followerIndex(first, shift, j, n)])
		}
		out[i] = replicas
		pid++
	}
	return out
}

// rackAlternated is AdminUtils.getRackAlternatedBrokerList: racks in order,
// brokers of each rack by id, taken one rack at a time round robin.
func rackAlternated(brokers []Broker) []Broker {
	byRack := slices.Clone(brokers)
	slices.SortFunc(byRack, func(a, b Broker) int {
		return cmp.Or(compareJava(a.Rack, b.Rack), cmp.Compare(a.ID, b.ID))
	})
	var racks [][]Broker
	for i := 0; i < len(byRack); {
		j := i
		for j < len(byRack) && byRack[j].Rack == byRack[i].Rack {
			j++
		}
		racks = append(racks, byRack[i:j])
		i = j
	}
	out := make([]Broker, 0, len(brokers))
	for round := 0; len(out) < len(brokers); round++ {
		for _, r := range racks {
			if round < len(r) {
				out = append(out, r[round])
			}
		}
	}
	return out
}

func placeRackAware(brokers []Broker, partitions, rf, start, shift, pid int) [][]int32 {
	list := rackAlternated(brokers)
	n := len(list)
	rackIDs := make(map[string]int, n)
	rackOf := make([]int, n) // list index -> rack number
	for i, b := range list {
		if _, ok := rackIDs[b.Rack]; !ok {
			rackIDs[b.Rack] = len(rackIDs)
		}
		rackOf[i] = rackIDs[b.Rack]
	}
	numRacks := len(rackIDs)
	out := make([][]int32, partitions)
	flat := make([]int32, partitions*rf)
	usedRack := make([]bool, numRacks)
	usedBroker := make([]bool, n)
	for i := range out {
		if pid > 0 && pid%n == 0 {
			shift++
		}
		first := (pid + start) % n
		clear(usedRack)
		clear(usedBroker)
		replicas := flat[i*rf : i*rf : (i+1)*rf]
		replicas = append(replicas, list[first].ID)
		usedRack[rackOf[first]], usedBroker[first] = true, true
		racks, used := 1, 1
		k := 0
		for range rf - 1 {
			for {
				b := followerIndex(first, shift*numRacks, k, n)
				k++
				// Skip a broker whose rack already has a replica while some
				// rack has none, and a broker that has one while some has none.
				if (!usedRack[rackOf[b]] || racks == numRacks) && (!usedBroker[b] || used == n) {
					replicas = append(replicas, list[b].ID)
					if !usedRack[rackOf[b]] {
						usedRack[rackOf[b]] = true
						racks++
					}
					if !usedBroker[b] {
						usedBroker[b] = true
						used++
					}
					break
				}
			}
		}
		out[i] = replicas
		pid++
	}
	return out
}
