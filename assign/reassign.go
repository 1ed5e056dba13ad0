package assign

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
)

// TopicsToMove is the file kafka-reassign-partitions --generate reads with
// --topics-to-move-json-file: {"topics":[{"topic":"foo"}],"version":1}.
type TopicsToMove struct {
	Topics  []TopicName `json:"topics"`
	Version int         `json:"version"`
}

// TopicName is one entry of TopicsToMove.
type TopicName struct {
	Topic string `json:"topic"`
}

// Reassignment is the partition replica assignment kafka-reassign-partitions
// prints with --generate (current and proposed) and reads with --execute and
// --verify: {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}.
type Reassignment struct {
	Version    int                 `json:"version"`
	Partitions []PartitionReplicas `json:"partitions"`
}

// PartitionReplicas is the replica list of one partition, leader first.
type PartitionReplicas struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Replicas  []int32  `json:"replicas"`
	LogDirs   []string `json:"log_dirs,omitempty"`
}

// GenerateReassignment is kafka-reassign-partitions --generate
// (ReassignPartitionsCommand.generateAssignment): every partition of the
// topics in move is placed anew on brokers with PlaceReplicas, keeping each
// topic's replication factor and partition count from current, with a start
// index and a follower shift drawn from rng for each topic, in that order, as
// Kafka draws them. Topics are taken in name order (Kafka's follows a
// HashMap). Brokers with racks get rack-aware placement; clear the racks for
// Kafka's --disable-rack-aware. The result lists partitions by topic and
// partition, with log directories "any".
func GenerateReassignment(current Reassignment, move TopicsToMove, brokers []Broker, rng *rand.Rand) (Reassignment, error) {
	type topicInfo struct{ partitions, rf int }
	info := map[string]topicInfo{}
	for _, p := range current.Partitions {
		ti := info[p.Topic]
		ti.partitions = max(ti.partitions, int(p.Partition)+1)
		if ti.rf == 0 {
			ti.rf = len(p.Replicas)
		}
		info[p.Topic] = ti
	}
	var names []string
	for _, t := range move.Topics {
		if _, ok := info[t.Topic]; !ok {
			return Reassignment{}, fmt.Errorf("%w: topic %q to move is not in the current assignment", ErrInvalidArgument, t.Topic)
		}
		names = append(names, t.Topic)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := Reassignment{Version: 1}
	for _, name := range names {
		ti := info[name]
		if len(brokers) == 0 {
			return Reassignment{}, fmt.Errorf("%w: no brokers for topic %q", ErrInvalidReplicationFactor, name)
		}
		start, shift := rng.IntN(len(brokers)), rng.IntN(len(brokers))
		placed, err := PlaceReplicas(brokers, ti.partitions, ti.rf, start, shift, -1)
		if err != nil {
			return Reassignment{}, fmt.Errorf("topic %q: %w", name, err)
		}
		for p, replicas := range placed {
			dirs := make([]string, len(replicas))
			for i := range dirs {
				dirs[i] = "any"
			}
			out.Partitions = append(out.Partitions, PartitionReplicas{Topic: name, Partition: int32(p), Replicas: replicas, LogDirs: dirs})
		}
	}
	slices.SortFunc(out.Partitions, func(a, b PartitionReplicas) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}
