package assign

import (
	"encoding/base64"
	"math/rand/v2"
	"slices"
	"testing"
)

// kafkaUUID is Kafka's Uuid.fromString: the 16 bytes of a URL-safe base64 text.
func kafkaUUID(s string) [16]byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		panic("bad uuid " + s)
	}
	return [16]byte(b)
}

// The topics of Kafka's uniform assignor tests, with their ids.
var (
	uuid1 = kafkaUUID("T1-A4s3VTwiI5CTbEp6POw")
	uuid2 = kafkaUUID("T2-B4s3VTwiI5YHbPp6YUe")
	uuid3 = kafkaUUID("T3-CU8fVTLCz5YMkLoDQsa")
	uuid4 = kafkaUUID("T4-Tw9fVTLCz5HbPp6YQsa")
)

// kafkaTopics declares topic1.. topic4 of Kafka's tests with partition
// counts (0 leaves a topic out).
func kafkaTopics(n1, n2, n3, n4 int32) map[string]Topic {
	out := map[string]Topic{}
	for i, t := range []Topic{{Partitions: n1, ID: uuid1}, {Partitions: n2, ID: uuid2}, {Partitions: n3, ID: uuid3}, {Partitions: n4, ID: uuid4}} {
		if t.Partitions > 0 {
			out["topic"+string(rune('1'+i))] = t
		}
	}
	return out
}

type uniformVector struct {
	name    string
	topics  map[string]Topic
	members []Member
	want    map[string]string
}

func (v uniformVector) run(t *testing.T) {
	t.Run(v.name, func(t *testing.T) {
		plan, err := Uniform.Assign(v.members, v.topics)
		if err != nil {
			t.Fatal(err)
		}
		requirePlan(t, plan, v.want)
	})
}

func TestUniformHomogeneousVectors(t *testing.T) {
	// Vectors of group-coordinator/src/test/java/org/apache/kafka/coordinator/group/assignor/UniformHomogeneousAssignmentBuilderTest.java
	// (after KAFKA-18688: members left over with an extra partition are the last ones).
	t12 := topicsOf("topic1", "topic2")
	vectors := []uniformVector{
		{"testOneMemberNoTopicSubscription", kafkaTopics(3, 0, 0, 0),
			[]Member{{ID: "A"}}, map[string]string{"A": ""}},
		// Kafka's test passes the id of a topic that does not exist and
		// expects an exception; the coordinator only passes ids of topics
		// that exist, so a name that does not resolve is no subscription.
		{"testOneMemberSubscribedToNonexistentTopic", kafkaTopics(3, 0, 0, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic2")}}, map[string]string{"A": ""}},
		{"testFirstAssignmentTwoMembersTwoTopicsNoMemberRacks", kafkaTopics(3, 0, 2, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic1", "topic3")}, {ID: "B", Topics: topicsOf("topic1", "topic3")}},
			map[string]string{"A": "topic3-0, topic3-1", "B": "topic1-0, topic1-1, topic1-2"}},
		{"testFirstAssignmentNumMembersGreaterThanTotalNumPartitions", kafkaTopics(0, 0, 2, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic3")}, {ID: "B", Topics: topicsOf("topic3")}, {ID: "C", Topics: topicsOf("topic3")}},
			map[string]string{"A": "", "B": "topic3-0", "C": "topic3-1"}},
		{"testReassignmentWhenPartitionsAreAddedForTwoMembersTwoTopics", kafkaTopics(6, 5, 0, 0),
			[]Member{owner("A", t12, "topic1-0, topic1-2, topic2-0", -1), owner("B", t12, "topic1-1, topic2-1, topic2-2", -1)},
			map[string]string{"A": "topic1-0, topic1-2, topic2-0, topic2-3, topic2-4", "B": "topic1-1, topic1-3, topic1-4, topic1-5, topic2-1, topic2-2"}},
		{"testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersTwoTopics", kafkaTopics(3, 3, 0, 0),
			[]Member{owner("A", t12, "topic1-0, topic2-0", -1), owner("B", t12, "topic1-1, topic2-1", -1)},
			map[string]string{"A": "topic1-0, topic2-0, topic2-2", "B": "topic1-1, topic1-2, topic2-1"}},
		{"testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics", kafkaTopics(2, 2, 0, 0),
			[]Member{owner("A", topicsOf("topic2"), "topic1-0, topic2-0", -1), owner("B", topicsOf("topic2"), "topic1-1, topic2-1", -1)},
			map[string]string{"A": "topic2-0", "B": "topic2-1"}},
		// Kafka's tests of these two give each member's owned topics in a
		// LinkedHashMap, topic1 first; the coordinator builds a HashMap
		// (Assignment.fromRecord), which iterates topic2 first. These are
		// Kafka's results for the coordinator's order, checked with Kafka's
		// code (examples/kafkaassign); the tests' own are in the comments.
		// testReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment:
		// A "topic1-0, topic1-1, topic2-0", B "topic1-2, topic2-1, topic2-2".
		{"testReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment/coordinator order", kafkaTopics(3, 3, 0, 0),
			[]Member{owner("A", t12, "topic1-0, topic1-1, topic2-0, topic2-1", -1), owner("B", t12, "topic1-2, topic2-2", -1)},
			map[string]string{"A": "topic1-0, topic2-0, topic2-1", "B": "topic1-1, topic1-2, topic2-2"}},
		// testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics:
		// A "topic1-0, topic1-2", B "topic1-1, topic2-1", C "topic2-0, topic2-2".
		{"testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics/coordinator order", kafkaTopics(3, 3, 0, 0),
			[]Member{owner("A", t12, "topic1-0, topic1-2, topic2-0", -1), owner("B", t12, "topic1-1, topic2-1, topic2-2", -1), {ID: "C", Topics: t12}},
			map[string]string{"A": "topic1-0, topic2-0", "B": "topic2-1, topic2-2", "C": "topic1-1, topic1-2"}},
		// KAFKA-18688's own example (issue 16): a balanced group does not
		// move, and of 9 partitions over 2 members the last gets the fifth.
		{"KAFKA-18688 balanced group stays", map[string]Topic{"T1": {Partitions: 5, ID: uuid1}},
			[]Member{owner("A", topicsOf("T1"), "T1-0, T1-1", -1), owner("B", topicsOf("T1"), "T1-2", -1), owner("C", topicsOf("T1"), "T1-3, T1-4", -1)},
			map[string]string{"A": "T1-0, T1-1", "B": "T1-2", "C": "T1-3, T1-4"}},
		{"KAFKA-18688 extra partitions to the last members", map[string]Topic{"T1": {Partitions: 9, ID: uuid1}},
			[]Member{{ID: "A", Topics: topicsOf("T1")}, {ID: "B", Topics: topicsOf("T1")}},
			map[string]string{"A": "T1-0, T1-1, T1-2, T1-3", "B": "T1-4, T1-5, T1-6, T1-7, T1-8"}},
	}
	for _, v := range vectors {
		v.run(t)
	}
}

func TestUniformHeterogeneousVectors(t *testing.T) {
	// Vectors of group-coordinator/src/test/java/org/apache/kafka/coordinator/group/assignor/UniformHeterogeneousAssignmentBuilderTest.java.
	t12 := topicsOf("topic1", "topic2")
	t123 := topicsOf("topic1", "topic2", "topic3")
	vectors := []uniformVector{
		{"testTwoMembersNoTopicSubscription", kafkaTopics(3, 0, 0, 0),
			[]Member{{ID: "A"}, {ID: "B"}}, map[string]string{"A": "", "B": ""}},
		{"testTwoMembersSubscribedToNonexistentTopics", kafkaTopics(3, 0, 0, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic3")}, {ID: "B", Topics: topicsOf("topic2")}}, map[string]string{"A": "", "B": ""}},
		{"testFirstAssignmentTwoMembersTwoTopics", kafkaTopics(3, 0, 6, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic1", "topic3")}, {ID: "B", Topics: topicsOf("topic3")}},
			map[string]string{"A": "topic1-0, topic1-1, topic1-2, topic3-4", "B": "topic3-0, topic3-1, topic3-2, topic3-3, topic3-5"}},
		{"testFirstAssignmentNumMembersGreaterThanTotalNumPartitions", kafkaTopics(2, 0, 1, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic3")}, {ID: "B", Topics: topicsOf("topic3")}, {ID: "C", Topics: topicsOf("topic1")}},
			map[string]string{"A": "topic3-0", "B": "", "C": "topic1-0, topic1-1"}},
		// Also issue 16's vector: four moves where Strand used to make five.
		{"testReassignmentForTwoMembersThreeTopicsGivenUnbalancedPrevAssignment", kafkaTopics(6, 4, 4, 0),
			[]Member{owner("A", topicsOf("topic1"), "topic1-0, topic1-1, topic1-2", -1),
				owner("B", t12, "topic1-3, topic2-0", -1),
				owner("C", t123, "topic1-4, topic1-5, topic2-1, topic2-2, topic2-3, topic3-0, topic3-1, topic3-2, topic3-3", -1)},
			map[string]string{"A": "topic1-0, topic1-1, topic1-2, topic1-5", "B": "topic1-3, topic2-0, topic2-1, topic2-2, topic2-3",
				"C": "topic1-4, topic3-0, topic3-1, topic3-2, topic3-3"}},
		{"testReassignmentWhenPartitionsAreAddedForTwoMembers", kafkaTopics(6, 5, 3, 3),
			[]Member{owner("A", topicsOf("topic1", "topic3"), "topic1-0, topic1-1, topic1-2, topic1-3, topic3-0, topic3-1", -1),
				owner("B", topicsOf("topic1", "topic2", "topic3", "topic4"), "topic2-0, topic2-1, topic2-2, topic4-0, topic4-1, topic4-2", -1)},
			map[string]string{"A": "topic1-0, topic1-1, topic1-2, topic1-3, topic1-4, topic1-5, topic3-0, topic3-1, topic3-2",
				"B": "topic2-0, topic2-1, topic2-2, topic2-3, topic2-4, topic4-0, topic4-1, topic4-2"}},
		{"testReassignmentWhenOneMemberAddedAndPartitionsAddedTwoMembersTwoTopics", kafkaTopics(6, 7, 0, 0),
			[]Member{owner("A", topicsOf("topic1"), "topic1-0, topic1-2, topic2-0", -1), owner("B", t12, "topic1-1, topic2-1, topic2-2", -1),
				{ID: "C", Topics: t12}},
			map[string]string{"A": "topic1-0, topic1-2, topic1-3, topic1-4, topic1-5", "B": "topic1-1, topic2-1, topic2-2, topic2-6",
				"C": "topic2-0, topic2-3, topic2-4, topic2-5"}},
		{"testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersThreeTopics", kafkaTopics(3, 8, 3, 0),
			[]Member{owner("A", topicsOf("topic1", "topic3"), "topic1-0, topic1-1, topic1-2, topic3-0, topic3-1", -1),
				owner("B", topicsOf("topic2"), "topic2-3, topic2-4, topic2-5, topic2-6", -1)},
			map[string]string{"A": "topic1-0, topic1-1, topic1-2, topic3-0, topic3-1, topic3-2",
				"B": "topic2-0, topic2-1, topic2-2, topic2-3, topic2-4, topic2-5, topic2-6, topic2-7"}},
		{"testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics", kafkaTopics(3, 5, 0, 0),
			[]Member{owner("A", topicsOf("topic1"), "topic1-0, topic1-2, topic2-1, topic2-3", -1), owner("B", t12, "topic1-1, topic2-0, topic2-2, topic2-4", -1)},
			map[string]string{"A": "topic1-0, topic1-1, topic1-2", "B": "topic2-0, topic2-1, topic2-2, topic2-3, topic2-4"}},
		// Kafka's test calls the heterogeneous builder on equal
		// subscriptions; a name of no topic that only B subscribes to makes
		// the coordinator choose it too.
		{"testReassignmentWhenTopicPartitionsRunOutAndMembersHaveNoPartitions", kafkaTopics(2, 2, 2, 0),
			[]Member{owner("A", t123, "topic1-0, topic1-1, topic2-0, topic2-1, topic3-0, topic3-1", -1),
				{ID: "B", Topics: topicsOf("topic1", "topic2", "topic3", "topic9")}},
			map[string]string{"A": "topic2-0, topic3-0, topic3-1", "B": "topic1-0, topic1-1, topic2-1"}},
		{"testFirstAssignmentWithTwoMembersIncludingOneWithoutSubscriptions", kafkaTopics(3, 0, 0, 0),
			[]Member{{ID: "A", Topics: topicsOf("topic1")}, {ID: "B"}},
			map[string]string{"A": "topic1-0, topic1-1, topic1-2", "B": ""}},
	}
	for _, v := range vectors {
		v.run(t)
	}
}

func TestUniformChoosesBuilderBySubscribedNames(t *testing.T) {
	// ModernGroup.subscriptionType counts subscribed names, not topics that
	// exist: a name only one member subscribes to makes the group
	// heterogeneous even when no such topic exists. Of 5 partitions over 2
	// members, the homogeneous builder gives the extra one to the last
	// member (B), the heterogeneous one deals them in turn from the first.
	topics := map[string]Topic{"T1": {Partitions: 5, ID: uuid1}}
	homogeneous := []Member{{ID: "A", Topics: topicsOf("T1", "missing")}, {ID: "B", Topics: topicsOf("missing", "T1")}}
	heterogeneous := []Member{{ID: "A", Topics: topicsOf("T1", "missing")}, {ID: "B", Topics: topicsOf("T1")}}
	uniformVector{"same names", topics, homogeneous, map[string]string{"A": "T1-0, T1-1", "B": "T1-2, T1-3, T1-4"}}.run(t)
	uniformVector{"one more name", topics, heterogeneous, map[string]string{"A": "T1-0, T1-2, T1-4", "B": "T1-1, T1-3"}}.run(t)
}

func TestUniformMemberOrderIsCoordinators(t *testing.T) {
	// The coordinator hands members to the assignor in java.util.HashMap
	// order of their ids, whatever order they joined in: "consumer-b" (bucket
	// 12 of 16) before "consumer-a" (bucket 13), so the last member, which
	// takes the extra partition, is consumer-a.
	topics := map[string]Topic{"T1": {Partitions: 3, ID: uuid1}}
	ab := []Member{{ID: "consumer-a", Topics: topicsOf("T1")}, {ID: "consumer-b", Topics: topicsOf("T1")}}
	want := map[string]string{"consumer-b": "T1-0", "consumer-a": "T1-1, T1-2"}
	uniformVector{"joined a, b", topics, ab, want}.run(t)
	uniformVector{"joined b, a", topics, []Member{ab[1], ab[0]}, want}.run(t)
}

func TestServerRangeVectors(t *testing.T) {
	// Vectors from group-coordinator/src/test/java/org/apache/kafka/coordinator/group/assignor/RangeAssignorTest.java.
	all := topicsOf("T1", "T3")
	tests := []struct {
		name    string
		topics  map[string]Topic
		members []Member
		want    map[string]string
	}{
		{"more members than partitions", plainTopics(decl{"T1", 3}, decl{"T3", 2}),
			[]Member{{ID: "A", Topics: all}, {ID: "B", Topics: all}, {ID: "C", Topics: all}},
			map[string]string{"A": "T1-0, T3-0", "B": "T1-1, T3-1", "C": "T1-2"}},
		{"heterogeneous", plainTopics(decl{"T1", 3}, decl{"T2", 3}, decl{"T3", 2}),
			[]Member{{ID: "A", Topics: topicsOf("T1", "T2")}, {ID: "B", Topics: topicsOf("T3")}, {ID: "C", Topics: topicsOf("T2", "T3")}},
			map[string]string{"A": "T1-0, T1-1, T1-2, T2-0, T2-1", "B": "T3-0", "C": "T2-2, T3-1"}},
		{"static members first", plainTopics(decl{"T1", 3}),
			[]Member{{ID: "A", Topics: topicsOf("T1")}, {ID: "B", InstanceID: "i", Topics: topicsOf("T1")}},
			map[string]string{"B": "T1-0, T1-1", "A": "T1-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := ServerRange.Assign(tt.members, tt.topics)
			if err != nil {
				t.Fatal(err)
			}
			requirePlan(t, plan, tt.want)
		})
	}
}

func TestUniformInvariantsRandom(t *testing.T) {
	// Every plan of the uniform assignor is valid; a homogeneous one is
	// balanced; and a second run from a homogeneous plan moves nothing
	// (KAFKA-18688).
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		members, topics := randomGroup(r)
		for j := range members {
			members[j].Rack = ""
			members[j].Owned = nil
		}
		plan, err := Uniform.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		if err := validPlan(members, topics, plan); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		homogeneous := newGroupOrPanic(members, topics).classes <= 1
		if !homogeneous {
			continue
		}
		if err := invariantError(members, topics, plan); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		for j := range members {
			members[j].Owned = plan[members[j].ID]
		}
		again, err := Uniform.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if formatPartitions(again[m.ID]) != formatPartitions(plan[m.ID]) {
				t.Fatalf("group %d: %s moved from [%s] to [%s]", i, m.ID, formatPartitions(plan[m.ID]), formatPartitions(again[m.ID]))
			}
		}
	}
}

func newGroupOrPanic(members []Member, topics map[string]Topic) *group {
	g, err := newGroup(members, topics)
	if err != nil {
		panic(err)
	}
	return g
}

func TestUniformCommonAssignorTests(t *testing.T) {
	// CommonAssignorTests.testAssignmentReuse and testReassignmentStickiness
	// (group-coordinator, run by both uniform builder tests): a second
	// assignment from the first's result keeps it, whatever order the members
	// come in. "absent" is a name of no topic that makes the group
	// heterogeneous for the coordinator, as Kafka's heterogeneous test sets
	// the type by hand.
	topics := kafkaTopics(2, 5, 7, 0)
	all := topicsOf("topic1", "topic2", "topic3")
	for _, extra := range [][]string{nil, {"absent"}} {
		members := []Member{{ID: "A", Topics: all}, {ID: "B", Topics: all}, {ID: "C", Topics: append(slices.Clone(all), extra...)}}
		first := mustAssign(t, Uniform, members, topics)
		for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
			again := make([]Member, 0, 3)
			for _, k := range order {
				m := members[k]
				m.Owned = first[m.ID]
				again = append(again, m)
			}
			second := mustAssign(t, Uniform, again, topics)
			for _, m := range members {
				if formatPartitions(second[m.ID]) != formatPartitions(first[m.ID]) {
					t.Fatalf("extra %v, order %v: %s went from [%s] to [%s]", extra, order, m.ID, formatPartitions(first[m.ID]), formatPartitions(second[m.ID]))
				}
			}
		}
	}
}
