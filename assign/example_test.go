package assign_test

import (
	"fmt"

	"github.com/strandlog/strand/assign"
)

// A unit test of a group layout: which partitions each consumer gets with
// Kafka's range assignor.
func ExampleRange() {
	members := []assign.Member{
		{ID: "consumer-1", Topics: []string{"orders", "payments"}, Generation: -1},
		{ID: "consumer-2", Topics: []string{"orders", "payments"}, Generation: -1},
	}
	topics := map[string]assign.Topic{"orders": {Partitions: 3}, "payments": {Partitions: 3}}
	plan, err := assign.Range.Assign(members, topics)
	if err != nil {
		panic(err)
	}
	fmt.Println(plan["consumer-1"])
	fmt.Println(plan["consumer-2"])
	// Output:
	// map[orders:[0 1] payments:[0 1]]
	// map[orders:[2] payments:[2]]
}

// A member joins a group that already owns its partitions: the cooperative
// sticky assignor keeps everything in place except the partitions the new
// member will get, which are first revoked (left out of this plan) and
// assigned in the follow-up rebalance.
func ExampleCooperativeSticky() {
	topics := map[string]assign.Topic{"orders": {Partitions: 4}}
	members := []assign.Member{
		{ID: "a", Topics: []string{"orders"}, Owned: map[string][]int32{"orders": {0, 1, 2, 3}}, Generation: 1},
		{ID: "b", Topics: []string{"orders"}, Generation: 1},
	}
	first, err := assign.CooperativeSticky.Assign(members, topics)
	if err != nil {
		panic(err)
	}
	fmt.Println("first: ", first)

	members[0].Owned, members[1].Owned = first["a"], first["b"]
	second, err := assign.CooperativeSticky.Assign(members, topics)
	if err != nil {
		panic(err)
	}
	fmt.Println("second:", second)
	// Output:
	// first:  map[a:map[orders:[0 1]] b:map[]]
	// second: map[a:map[orders:[0 1]] b:map[orders:[2 3]]]
}

// Replica placement as Kafka's AdminUtils does it, with the start index and
// shift Kafka's tests fix.
func ExamplePlaceReplicas() {
	brokers := []assign.Broker{{ID: 0}, {ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}
	replicas, err := assign.PlaceReplicas(brokers, 6, 3, 0, 0, -1)
	if err != nil {
		panic(err)
	}
	for p, r := range replicas {
		fmt.Println(p, r)
	}
	// Output:
	// 0 [0 1 2]
	// 1 [1 2 3]
	// 2 [2 3 4]
	// 3 [3 4 0]
	// 4 [4 0 1]
	// 5 [0 2 3]
}
