package assign

import (
	"errors"
	"testing"
)

// rackVector is one call of Kafka's AbstractPartitionAssignorTest.verifyRackAssignment.
type rackVector struct {
	name          string
	topics        []decl
	rf            int
	brokerRacks   []string
	consumerRacks []string
	subs          [][]string
	owned         []string
	want          []string
	mismatches    int // -1: not checked
}

func (v rackVector) run(t *testing.T, a Assignor) {
	t.Helper()
	topics := rackTopics(v.topics, v.rf, v.brokerRacks)
	members := consumers(v.consumerRacks, v.subs, v.owned)
	plan, err := a.Assign(members, topics)
	if err != nil {
		t.Fatal(err)
	}
	requirePlan(t, plan, wantByIndex(v.want...))
	if v.mismatches >= 0 {
		if got := rackMismatches(plan, members, topics); got != v.mismatches {
			t.Errorf("%d partitions on a member of another rack, want %d", got, v.mismatches)
		}
	}
}

// nonRackVectors is RangeAssignorTest.verifyNonRackAwareAssignment: the
// configurations in which racks must not change the result.
func nonRackVectors(name string, topics []decl, subs [][]string, want []string) []rackVector {
	n := len(subs)
	v := func(suffix string, rf int, brokers, consumers []string, mismatches int) rackVector {
		return rackVector{name + "/" + suffix, topics, rf, brokers, consumers, subs, nil, want, mismatches}
	}
	return []rackVector{
		v("no broker racks", 3, nullRacks(3), racks(n), -1),
		v("no consumer racks", 3, racks(3), nullRacks(n), -1),
		v("every partition on every rack", 3, racks(3), racks(n), 0),
		v("four racks", 4, racks(4), racks(n), 0),
		v("consumers on other racks", 3, racks(3), []string{"d", "e", "f", "d"}[:n], -1),
		v("some consumer racks", 3, racks(3), append([]string{""}, []string{"e", "f", "e"}[:n-1]...), -1),
	}
}

func TestRangeRackVectors(t *testing.T) {
	// Vectors from clients/src/test/java/org/apache/kafka/clients/consumer/RangeAssignorTest.java.
	t123 := []decl{{"t1", 6}, {"t2", 7}, {"t3", 2}}
	all := topicsOf("t1", "t2", "t3")
	uniform := [][]string{all, all, all}
	nonEqual := [][]string{all, all, topicsOf("t1", "t3")}
	t555 := []decl{{"t1", 5}, {"t2", 5}, {"t3", 5}}

	var vectors []rackVector
	// testRackAwareAssignmentWithUniformSubscription
	uniformPlain := []string{"t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "t1-2, t1-3, t2-3, t2-4, t3-1", "t1-4, t1-5, t2-5, t2-6"}
	vectors = append(vectors, nonRackVectors("uniform subscription", t123, uniform, uniformPlain)...)
	vectors = append(vectors,
		rackVector{"uniform subscription/rf1", t123, 1, racks(3), racks(3), uniform, nil,
			[]string{"t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0", "t1-2, t1-5, t2-2, t2-5, t3-1"}, 0},
		rackVector{"uniform subscription/rf2", t123, 2, racks(3), racks(3), uniform, nil,
			[]string{"t1-0, t1-2, t2-0, t2-2, t2-3, t3-1", "t1-1, t1-3, t2-1, t2-4, t3-0", "t1-4, t1-5, t2-5, t2-6"}, 1},
		rackVector{"uniform subscription/consumer rack without partitions", t123, 3, racks(2), racks(3), uniform, nil, uniformPlain, 4},
	)
	// testRackAwareAssignmentWithNonEqualSubscription
	nonEqualPlain := []string{"t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0", "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1", "t1-4, t1-5"}
	vectors = append(vectors, nonRackVectors("non-equal subscription", t123, nonEqual, nonEqualPlain)...)
	vectors = append(vectors,
		rackVector{"non-equal subscription/rf1", t123, 1, racks(3), racks(3), nonEqual, nil,
			[]string{"t1-0, t1-3, t2-0, t2-2, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t2-5, t3-0", "t1-2, t1-5, t3-1"}, 2},
		rackVector{"non-equal subscription/rf2", t123, 2, racks(3), racks(3), nonEqual, nil,
			[]string{"t1-0, t1-2, t2-0, t2-2, t2-3, t2-5, t3-1", "t1-1, t1-3, t2-1, t2-4, t2-6, t3-0", "t1-4, t1-5"}, 0},
		rackVector{"non-equal subscription/consumer rack without partitions", t123, 3, racks(2), racks(3), nonEqual, nil, nonEqualPlain, 2},
	)
	// testRackAwareAssignmentWithUniformPartitions: co-partitioning beats rack alignment.
	uniformPartitions := []string{"t1-0, t1-1, t2-0, t2-1, t3-0, t3-1", "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3", "t1-4, t2-4, t3-4"}
	vectors = append(vectors, nonRackVectors("uniform partitions", t555, uniform, uniformPartitions)...)
	vectors = append(vectors,
		rackVector{"uniform partitions/rf1", t555, 1, racks(3), racks(3), uniform, nil, uniformPartitions, 10},
		rackVector{"uniform partitions/rf2", t555, 2, racks(3), racks(3), uniform, nil, uniformPartitions, 5},
		rackVector{"uniform partitions/consumer rack without partitions", t555, 3, racks(2), racks(3), uniform, nil, uniformPartitions, 3},
	)
	// testRackAwareAssignmentWithUniformPartitionsNonEqualSubscription
	upNonEqual := []string{"t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1", "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3", "t1-4, t3-4"}
	vectors = append(vectors, nonRackVectors("uniform partitions non-equal", t555, nonEqual, upNonEqual)...)
	vectors = append(vectors,
		rackVector{"uniform partitions non-equal/rf1", t555, 1, racks(3), racks(3), nonEqual, nil,
			[]string{"t1-0, t1-1, t2-0, t2-1, t2-4, t3-0, t3-1", "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3", "t1-4, t3-4"}, 9},
		rackVector{"uniform partitions non-equal/rf2", t555, 2, racks(3), racks(3), nonEqual, nil,
			[]string{"t1-2, t2-0, t2-1, t2-3, t3-2", "t1-0, t1-3, t2-2, t2-4, t3-0, t3-3", "t1-1, t1-4, t3-1, t3-4"}, 0},
		rackVector{"uniform partitions non-equal/consumer rack without partitions", t555, 3, racks(2), racks(3), nonEqual, nil, upNonEqual, 2},
	)
	// testRackAwareAssignmentWithCoPartitioning
	t1234 := []decl{{"t1", 6}, {"t2", 6}, {"t3", 2}, {"t4", 2}}
	abba := []string{"a", "b", "b", "a"}
	pairs := [][]string{topicsOf("t1", "t2"), topicsOf("t1", "t2"), topicsOf("t3", "t4"), topicsOf("t3", "t4")}
	pairsPlain := []string{"t1-0, t1-1, t1-2, t2-0, t2-1, t2-2", "t1-3, t1-4, t1-5, t2-3, t2-4, t2-5", "t3-0, t4-0", "t3-1, t4-1"}
	four := topicsOf("t1", "t2", "t3", "t4")
	allFour := [][]string{four, four, four, four}
	allFourPlain := []string{"t1-0, t1-1, t2-0, t2-1, t3-0, t4-0", "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1", "t1-4, t2-4", "t1-5, t2-5"}
	vectors = append(vectors,
		rackVector{"co-partitioning pairs/rf3", t1234, 3, racks(2), abba, pairs, nil, pairsPlain, -1},
		rackVector{"co-partitioning pairs/rf2", t1234, 2, racks(2), abba, pairs, nil, pairsPlain, 0},
		rackVector{"co-partitioning pairs/rf1", t1234, 1, racks(2), abba, pairs, nil,
			[]string{"t1-0, t1-2, t1-4, t2-0, t2-2, t2-4", "t1-1, t1-3, t1-5, t2-1, t2-3, t2-5", "t3-1, t4-1", "t3-0, t4-0"}, 0},
		rackVector{"co-partitioning all/rf3", t1234, 3, racks(2), abba, allFour, nil, allFourPlain, -1},
		rackVector{"co-partitioning all/rf2", t1234, 2, racks(2), abba, allFour, nil, allFourPlain, 0},
		rackVector{"co-partitioning all/rf1", t1234, 1, racks(2), abba, allFour, nil,
			[]string{"t1-0, t1-2, t2-0, t2-2, t3-0, t4-0", "t1-1, t1-3, t2-1, t2-3, t3-1, t4-1", "t1-5, t2-5", "t1-4, t2-4"}, 0},
		rackVector{"co-partitioning all/rf1 three racks", t1234, 1, racks(3), abba, allFour, nil,
			[]string{"t1-0, t1-3, t2-0, t2-3, t3-0, t4-0", "t1-1, t1-4, t2-1, t2-4, t3-1, t4-1", "t1-2, t2-2", "t1-5, t2-5"}, 6},
	)
	// testCoPartitionedAssignmentWithSameSubscription (t7..t9 do not exist).
	t6 := []decl{{"t1", 6}, {"t2", 6}, {"t3", 2}, {"t4", 2}, {"t5", 4}, {"t6", 4}}
	nine := topicsOf("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9")
	abc := []string{"a", "b", "c"}
	vectors = append(vectors,
		rackVector{"same subscription/no broker racks", t6, 3, nullRacks(3), abc, [][]string{nine, nine, nine}, nil,
			[]string{"t1-0, t1-1, t2-0, t2-1, t3-0, t4-0, t5-0, t5-1, t6-0, t6-1", "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1, t5-2, t6-2", "t1-4, t1-5, t2-4, t2-5, t5-3, t6-3"}, -1},
		rackVector{"same subscription/every partition on every rack", t6, 3, racks(3), abc, [][]string{nine, nine, nine}, nil,
			[]string{"t1-0, t1-1, t2-0, t2-1, t3-0, t4-0, t5-0, t5-1, t6-0, t6-1", "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1, t5-2, t6-2", "t1-4, t1-5, t2-4, t2-5, t5-3, t6-3"}, 0},
		rackVector{"same subscription/rf2", t6, 2, racks(3), abc, [][]string{nine, nine, nine}, nil,
			[]string{"t1-0, t1-2, t2-0, t2-2, t3-0, t4-0, t5-1, t6-1", "t1-1, t1-3, t2-1, t2-3, t3-1, t4-1, t5-2, t6-2", "t1-4, t1-5, t2-4, t2-5, t5-0, t5-3, t6-0, t6-3"}, 0},
	)
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) { v.run(t, Range) })
	}
}

// rackConfig is Kafka's RackConfig parameter of the basic assignor tests:
// topics get three replicas on brokers of three racks (so every partition is on
// every rack and racks must not change any result), on brokers without racks,
// or consumers have no rack.
type rackConfig struct {
	name          string
	brokerRacks   int
	consumerRacks bool
}

var rackConfigs = []rackConfig{
	{"no broker rack", 0, true},
	{"no consumer rack", 3, false},
	{"broker and consumer rack", 3, true},
}

// topics builds each topic as partitionInfos(topic, n, 3, brokerRacks, 0).
func (c rackConfig) topics(decls ...decl) map[string]Topic {
	out := make(map[string]Topic, len(decls))
	for _, d := range decls {
		out[d.name] = kafkaRackTopic(d.n, 3, c.brokerRacks, 0)
	}
	return out
}

// rack is the rack of consumer i (Kafka's subscription(topics, consumerIndex)).
func (c rackConfig) rack(i int) string {
	if !c.consumerRacks {
		return ""
	}
	n := c.brokerRacks
	if n == 0 {
		n = len(allRacks)
	}
	return allRacks[i%n]
}

// basicVector is one of the rack-independent vectors Kafka runs for every
// rackConfig. Members are given as id, instance id and topics; the rack comes
// from the member's position.
type basicVector struct {
	name    string
	topics  []decl
	members []Member
	want    map[string]string
}

func (v basicVector) run(t *testing.T, a Assignor) {
	for _, c := range rackConfigs {
		t.Run(v.name+"/"+c.name, func(t *testing.T) {
			members := make([]Member, len(v.members))
			for i, m := range v.members {
				m.Rack = c.rack(i)
				if m.Generation == 0 {
					m.Generation = -1
				}
				members[i] = m
			}
			plan, err := a.Assign(members, c.topics(v.topics...))
			if err != nil {
				t.Fatal(err)
			}
			requirePlan(t, plan, v.want)
		})
	}
}

func TestRangeVectors(t *testing.T) {
	// Vectors from RangeAssignorTest.java.
	t12 := topicsOf("topic1", "topic2")
	vectors := []basicVector{
		{"one consumer no topic", nil,
			[]Member{{ID: "consumer1"}},
			map[string]string{"consumer1": ""}},
		{"one consumer nonexistent topic", nil,
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": ""}},
		{"one consumer one topic", []decl{{"topic1", 3}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic1-2"}},
		{"only assigns partitions from subscribed topics", []decl{{"topic1", 3}, {"other", 3}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic1-2"}},
		{"one consumer multiple topics", []decl{{"topic1", 1}, {"topic2", 2}},
			[]Member{{ID: "consumer1", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic2-0, topic2-1"}},
		{"two consumers one topic one partition", []decl{{"topic1", 1}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}, {ID: "consumer2", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": "topic1-0", "consumer2": ""}},
		{"two consumers one topic two partitions", []decl{{"topic1", 2}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}, {ID: "consumer2", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": "topic1-0", "consumer2": "topic1-1"}},
		{"multiple consumers mixed topics", []decl{{"topic1", 3}, {"topic2", 2}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}, {ID: "consumer2", Topics: t12}, {ID: "consumer3", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-0, topic2-1", "consumer3": "topic1-2"}},
		{"two consumers two topics six partitions", []decl{{"topic1", 3}, {"topic2", 3}},
			[]Member{{ID: "consumer1", Topics: t12}, {ID: "consumer2", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer2": "topic1-2, topic2-2"}},
		// The instance id decides, not the member id.
		{"two static consumers", []decl{{"topic1", 3}, {"topic2", 3}},
			[]Member{{ID: "consumer-b", InstanceID: "instance1", Topics: t12}, {ID: "consumer-a", InstanceID: "instance2", Topics: t12}},
			map[string]string{"consumer-b": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer-a": "topic1-2, topic2-2"}},
		// A static member comes before every dynamic one.
		{"one static one dynamic", []decl{{"topic1", 3}, {"topic2", 3}},
			[]Member{{ID: "consumer-b", InstanceID: "instance1", Topics: t12}, {ID: "consumer-a", Topics: t12}},
			map[string]string{"consumer-b": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer-a": "topic1-2, topic2-2"}},
		// testStaticMemberRangeAssignmentPersistent
		{"static members persistent", []decl{{"topic1", 5}, {"topic2", 4}},
			[]Member{{ID: "consumer1", InstanceID: "instance1", Topics: t12}, {ID: "consumer2", InstanceID: "instance2", Topics: t12},
				{ID: "consumer3", InstanceID: "instance3", Topics: t12}, {ID: "consumer4", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0", "consumer2": "topic1-2, topic2-1",
				"consumer3": "topic1-3, topic2-2", "consumer4": "topic1-4, topic2-3"}},
		{"static members persistent after dynamic member replaced", []decl{{"topic1", 5}, {"topic2", 4}},
			[]Member{{ID: "consumer1", InstanceID: "instance1", Topics: t12}, {ID: "consumer2", InstanceID: "instance2", Topics: t12},
				{ID: "consumer3", InstanceID: "instance3", Topics: t12}, {ID: "consumer5", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0", "consumer2": "topic1-2, topic2-1",
				"consumer3": "topic1-3, topic2-2", "consumer5": "topic1-4, topic2-3"}},
		// testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges
		{"static members before member id change", []decl{{"topic1", 5}, {"topic2", 5}},
			[]Member{{ID: "consumer1", InstanceID: "instance1", Topics: t12}, {ID: "consumer2", InstanceID: "instance2", Topics: t12},
				{ID: "consumer3", InstanceID: "instance3", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer2": "topic1-2, topic1-3, topic2-2, topic2-3",
				"consumer3": "topic1-4, topic2-4"}},
		{"static members after member id change", []decl{{"topic1", 5}, {"topic2", 5}},
			[]Member{{ID: "consumer1", InstanceID: "instance1", Topics: t12}, {ID: "consumer5", InstanceID: "instance2", Topics: t12},
				{ID: "consumer4", InstanceID: "instance3", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer5": "topic1-2, topic1-3, topic2-2, topic2-3",
				"consumer4": "topic1-4, topic2-4"}},
	}
	for _, v := range vectors {
		v.run(t, Range)
	}
}

func TestRangeRackAwareStaticMembers(t *testing.T) {
	// RangeAssignorTest.testRackAwareStaticMemberRangeAssignmentPersistentAfterMemberIdChanges:
	// both topics on six brokers of racks a, b, c with two replicas, so each
	// partition is on two of the three racks.
	topics := map[string]Topic{"topic1": kafkaRackTopic(5, 2, 3, 0), "topic2": kafkaRackTopic(5, 2, 3, 0)}
	t12 := topicsOf("topic1", "topic2")
	want := map[string]string{"instance1": "topic1-0, topic1-2, topic2-0, topic2-2",
		"instance2": "topic1-1, topic1-3, topic2-1, topic2-3", "instance3": "topic1-4, topic2-4"}
	for _, ids := range [][]string{{"consumer1", "consumer2", "consumer3"}, {"consumer1", "consumer5", "consumer4"}} {
		members := []Member{
			{ID: ids[0], InstanceID: "instance1", Rack: "a", Topics: t12},
			{ID: ids[1], InstanceID: "instance2", Rack: "b", Topics: t12},
			{ID: ids[2], InstanceID: "instance3", Rack: "c", Topics: t12},
		}
		plan, err := Range.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		byInstance := Plan{}
		for _, m := range members {
			byInstance[m.InstanceID] = plan[m.ID]
		}
		requirePlan(t, byInstance, want)
	}
}

func TestUseRackAwareAssignment(t *testing.T) {
	// AbstractPartitionAssignorTest.testUseRackAwareAssignment, through one
	// topic of ten partitions whose replicas are on all of a, b, c or each on
	// one of them in turn.
	onAll, onOne := Topic{Partitions: 10}, Topic{Partitions: 10}
	for i := range 10 {
		onAll.Racks = append(onAll.Racks, []string{"a", "b", "c"})
		onOne.Racks = append(onOne.Racks, []string{allRacks[i%3]})
	}
	tests := []struct {
		name          string
		consumerRacks []string
		topic         Topic
		want          bool
	}{
		{"no consumer racks", []string{"", ""}, onAll, false},
		{"no partition racks", []string{"a", "b", "c"}, Topic{Partitions: 10}, false},
		{"consumer racks hold no replica", []string{"d"}, onAll, false},
		{"every partition on every rack", []string{"a", "b", "c"}, onAll, false},
		{"every partition on every rack, two consumer racks", []string{"a", "b"}, onAll, false},
		{"every partition on every rack, one foreign rack", []string{"a", "d"}, onAll, false},
		{"partitions on subsets of racks", []string{"a", "b", "c"}, onOne, true},
		{"partitions on subsets, two consumer racks", []string{"a", "b"}, onOne, true},
		{"partitions on subsets, one foreign rack", []string{"a", "d"}, onOne, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var members []Member
			for i, r := range tt.consumerRacks {
				members = append(members, Member{ID: "c" + string(rune('0'+i)), Rack: r, Topics: topicsOf("topic")})
			}
			g, err := newGroup(members, map[string]Topic{"topic": tt.topic})
			if err != nil {
				t.Fatal(err)
			}
			subs := subscribersInOrder(g, g.memberOrder())
			if got := topicNeedsRacks(g, 0, subs[0]); got != tt.want {
				t.Errorf("topicNeedsRacks = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMemberOrder(t *testing.T) {
	// AbstractPartitionAssignorTest.testMemberInfoSorting*: static members by
	// instance id first, then dynamic members by member id.
	members := []Member{
		{ID: "a"}, {ID: "k", InstanceID: "i3"}, {ID: "c"}, {ID: "z", InstanceID: "i1"}, {ID: "b"}, {ID: "m", InstanceID: "i2"},
	}
	g, err := newGroup(members, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range g.memberOrder() {
		got = append(got, members[m].ID)
	}
	want := []string{"z", "m", "k", "a", "b", "c"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestAssignorErrors(t *testing.T) {
	topics := map[string]Topic{"t": {Partitions: 3}}
	for _, a := range []Assignor{Range, RoundRobin, Sticky, CooperativeSticky, Uniform, ServerRange} {
		t.Run(a.Name(), func(t *testing.T) {
			_, err := a.Assign([]Member{{ID: "m", Topics: topicsOf("t")}, {ID: "m", Topics: topicsOf("t")}}, topics)
			if !errors.Is(err, ErrDuplicateMember) {
				t.Errorf("duplicate member: err = %v, want ErrDuplicateMember", err)
			}
			_, err = a.Assign([]Member{{ID: "m", Topics: topicsOf("t")}, {ID: "", Topics: topicsOf("t")}}, topics)
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("empty member id: err = %v, want ErrInvalidArgument", err)
			}
			_, err = a.Assign([]Member{{ID: "m", Topics: topicsOf("t")}}, map[string]Topic{"t": {Partitions: -1}})
			if !errors.Is(err, ErrInvalidPartitions) {
				t.Errorf("negative partitions: err = %v, want ErrInvalidPartitions", err)
			}
			plan, err := a.Assign(nil, topics)
			if err != nil || len(plan) != 0 {
				t.Errorf("no members: plan %v, err %v; want an empty plan", plan, err)
			}
		})
	}
}
