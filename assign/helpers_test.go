package assign

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// This file holds the fixtures Kafka's assignor tests share, rebuilt so that
// their vectors can be ported as they are.

// allRacks is AbstractPartitionAssignorTest.ALL_RACKS.
var allRacks = []string{"a", "b", "c", "d", "e", "f"}

// racks is AbstractPartitionAssignorTest.racks(n).
func racks(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = allRacks[i%len(allRacks)]
	}
	return out
}

// nullRacks is AbstractPartitionAssignorTest.nullRacks(n): n brokers or
// consumers without a rack.
func nullRacks(n int) []string { return make([]string, n) }

// decl is one entry of Kafka's mkMap(mkEntry(topic, partitions), ...).
type decl struct {
	name string
	n    int32
}

// rackTopics is AbstractPartitionAssignorTest.partitionsPerTopic: replica j of
// partition i of a topic is broker (i + j + offset) mod len(brokerRacks),
// where offset counts the partitions of the topics declared before it.
func rackTopics(decls []decl, rf int, brokerRacks []string) map[string]Topic {
	out := make(map[string]Topic, len(decls))
	offset := 0
	for _, d := range decls {
		out[d.name] = topicOnBrokers(d.n, rf, brokerRacks, offset)
		offset += int(d.n)
	}
	return out
}

// topicOnBrokers is AbstractPartitionAssignorTest.partitionInfos with an
// explicit broker list.
func topicOnBrokers(n int32, rf int, brokerRacks []string, offset int) Topic {
	t := Topic{Partitions: n, Racks: make([][]string, n)}
	for i := range int(n) {
		for j := range rf {
			t.Racks[i] = append(t.Racks[i], brokerRacks[(i+j+offset)%len(brokerRacks)])
		}
	}
	return t
}

// kafkaRackTopic is AbstractPartitionAssignorTest.partitionInfos(topic, n, rf,
// numBrokerRacks, offset): rf*numBrokerRacks brokers on racks a, b, c... in
// turn, or rf brokers without racks when numBrokerRacks is 0.
func kafkaRackTopic(n int32, rf, numBrokerRacks, offset int) Topic {
	var brokers []string
	if numBrokerRacks <= 0 {
		brokers = nullRacks(rf)
	} else {
		for i := range numBrokerRacks * rf {
			brokers = append(brokers, allRacks[i%numBrokerRacks])
		}
	}
	return topicOnBrokers(n, rf, brokers, offset)
}

// consumers builds members consumer0, consumer1, ... as verifyRackAssignment
// does, with the given racks, subscriptions and owned partitions ("t1-0, t2-3").
func consumers(racks []string, subs [][]string, owned []string) []Member {
	out := make([]Member, len(racks))
	for i := range out {
		out[i] = Member{ID: "consumer" + strconv.Itoa(i), Rack: racks[i], Topics: subs[i], Generation: -1}
		if i < len(owned) {
			out[i].Owned = parsePartitions(owned[i])
		}
	}
	return out
}

// parsePartitions reads Kafka's "topic-p, topic-p" notation.
func parsePartitions(s string) map[string][]int32 {
	out := map[string][]int32{}
	if strings.TrimSpace(s) == "" {
		return out
	}
	for _, tp := range strings.Split(s, ",") {
		tp = strings.TrimSpace(tp)
		i := strings.LastIndexByte(tp, '-')
		p, err := strconv.Atoi(tp[i+1:])
		if err != nil {
			panic(fmt.Sprintf("bad partition %q", tp))
		}
		out[tp[:i]] = append(out[tp[:i]], int32(p))
	}
	for t := range out {
		slices.Sort(out[t])
	}
	return out
}

// formatPartitions writes a member's partitions in Kafka's notation, by topic
// then partition.
func formatPartitions(m map[string][]int32) string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(m)) {
		for _, p := range m[t] {
			parts = append(parts, t+"-"+strconv.Itoa(int(p)))
		}
	}
	return strings.Join(parts, ", ")
}

// requirePlan checks that plan has exactly the members of want and that each
// has exactly the partitions want lists, in Kafka's notation.
func requirePlan(t *testing.T, plan Plan, want map[string]string) {
	t.Helper()
	if len(plan) != len(want) {
		t.Fatalf("plan has %d members, want %d: %v", len(plan), len(want), plan)
	}
	for id, w := range want {
		got, ok := plan[id]
		if !ok {
			t.Fatalf("member %q missing from plan %v", id, plan)
		}
		if g, w := formatPartitions(got), formatPartitions(parsePartitions(w)); g != w {
			t.Errorf("member %s: got [%s], want [%s]", id, g, w)
		}
	}
}

// wantByIndex maps expected assignments to consumer0, consumer1, ...
func wantByIndex(lists ...string) map[string]string {
	out := make(map[string]string, len(lists))
	for i, l := range lists {
		out["consumer"+strconv.Itoa(i)] = l
	}
	return out
}

// rackMismatches counts partitions assigned to a member with a rack that
// holds no replica of them (verifyRackAssignment's numPartitionsWithRackMismatch).
func rackMismatches(plan Plan, members []Member, topics map[string]Topic) int {
	n := 0
	for _, m := range members {
		if m.Rack == "" {
			continue
		}
		for t, ps := range plan[m.ID] {
			for _, p := range ps {
				if !slices.Contains(topics[t].Racks[p], m.Rack) {
					n++
				}
			}
		}
	}
	return n
}

// topicsOf is Kafka's topics(...) helper.
func topicsOf(names ...string) []string { return names }

// plainTopics builds rack-less topics from name, count pairs.
func plainTopics(decls ...decl) map[string]Topic {
	out := make(map[string]Topic, len(decls))
	for _, d := range decls {
		out[d.name] = Topic{Partitions: d.n}
	}
	return out
}
