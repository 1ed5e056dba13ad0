package assign

import (
	"slices"
	"testing"
)

// Property tests of clients/src/test/java/org/apache/kafka/clients/consumer/internals/AbstractStickyAssignorTest.java,
// run for both sticky assignors.

func TestStickyAssignmentUpdatedForDeletedTopic(t *testing.T) {
	// testAssignmentUpdatedForDeletedTopic: a subscribed topic that no
	// longer exists is ignored.
	topics := plainTopics(decl{"topic1", 1}, decl{"topic3", 100})
	members := []Member{{ID: "consumer", Topics: topicsOf("topic1", "topic2", "topic3"), Generation: -1}}
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		plan := mustAssign(t, a, members, topics)
		if n := len(plan["consumer"]["topic1"]) + len(plan["consumer"]["topic3"]); n != 101 || len(plan) != 1 {
			t.Fatalf("%s: %v, want all 101 partitions to the one consumer", a.Name(), plan)
		}
	}
}

func TestStickyNoExceptionThrownWhenOnlySubscribedTopicDeleted(t *testing.T) {
	// testNoExceptionThrownWhenOnlySubscribedTopicDeleted
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		members := []Member{{ID: "consumer", Topics: topicsOf("topic"), Generation: -1}}
		plan := mustAssign(t, a, members, plainTopics(decl{"topic", 3}))
		members[0].Owned, members[0].Generation = plan["consumer"], 1
		plan = mustAssign(t, a, members, nil)
		requirePlan(t, plan, map[string]string{"consumer": ""})
	}
}

func TestStickySubscriptionNotEqualAndAssignSamePartitionWith3Generation(t *testing.T) {
	// testSubscriptionNotEqualAndAssignSamePartitionWith3Generation: topic-2,
	// claimed by three members of three generations, goes to one member
	// only, and everyone gets one or two partitions.
	topics := plainTopics(decl{"topic", 6}, decl{"topic1", 1})
	for _, gens := range [][3]int32{{1, 2, 3}, {1, 3, 2}, {2, 1, 3}, {2, 3, 1}, {3, 1, 2}, {3, 2, 1}} {
		members := []Member{
			owner("consumer1", topicsOf("topic"), "topic-0, topic-2", gens[0]),
			owner("consumer2", topicsOf("topic"), "topic-1, topic-2, topic-3", gens[1]),
			owner("consumer3", topicsOf("topic"), "topic-2, topic-4, topic-5", gens[2]),
			owner("consumer4", topicsOf("topic1"), "topic1-0", 2),
		}
		for _, a := range []Assignor{Sticky, CooperativeSticky} {
			plan := mustAssign(t, a, members, topics)
			if err := validPlan(members, topics, plan); err != nil {
				t.Fatalf("%s, generations %v: %v", a.Name(), gens, err)
			}
			for id, tps := range plan {
				n := 0
				for _, ps := range tps {
					n += len(ps)
				}
				if a == Sticky && (n < 1 || n > 2) {
					t.Fatalf("generations %v: %s got %d partitions, want 1 or 2", gens, id, n)
				}
			}
		}
	}
}

func TestStickyMoveExistingAssignments(t *testing.T) {
	// testMoveExistingAssignments: six topics of one partition, owned so
	// that balance needs a partition to move between members.
	topics := plainTopics(decl{"topic1", 1}, decl{"topic2", 1}, decl{"topic3", 1}, decl{"topic4", 1}, decl{"topic5", 1}, decl{"topic6", 1})
	members := []Member{
		owner("consumer1", topicsOf("topic1", "topic2"), "topic1-0", 1),
		owner("consumer2", topicsOf("topic1", "topic2", "topic3", "topic4"), "topic2-0, topic3-0", 1),
		owner("consumer3", topicsOf("topic2", "topic3", "topic4", "topic5", "topic6"), "topic4-0, topic5-0, topic6-0", 1),
	}
	checkInvariants(t, members, topics, mustAssign(t, Sticky, members, topics))
	converge(t, CooperativeSticky, members, topics, mustAssign(t, CooperativeSticky, members, topics), 2)
}

func TestStickyAddRemoveTopicTwoConsumers(t *testing.T) {
	// testAddRemoveTopicTwoConsumers: adding a topic keeps what members had
	// and balances; removing it again leaves each member a part of what it had.
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		members := []Member{{ID: "consumer1", Topics: topicsOf("topic"), Generation: -1}, {ID: "consumer2", Topics: topicsOf("topic"), Generation: -1}}
		topics := plainTopics(decl{"topic", 3})
		first := mustAssign(t, a, members, topics)
		for i := range members {
			members[i].Topics, members[i].Owned, members[i].Generation = topicsOf("topic", "topic2"), first[members[i].ID], 1
		}
		topics["topic2"] = Topic{Partitions: 3}
		second := converge(t, a, members, topics, mustAssign(t, a, members, topics), 1)
		for _, m := range members {
			if n := len(second[m.ID]["topic"]) + len(second[m.ID]["topic2"]); n != 3 || !keeps(second[m.ID], first[m.ID]) {
				t.Fatalf("%s: %s went from [%s] to [%s]", a.Name(), m.ID, formatPartitions(first[m.ID]), formatPartitions(second[m.ID]))
			}
		}
		delete(topics, "topic")
		for i := range members {
			members[i].Topics, members[i].Owned, members[i].Generation = topicsOf("topic2"), second[members[i].ID], 2
		}
		third := converge(t, a, members, topics, mustAssign(t, a, members, topics), 2)
		for _, m := range members {
			if !keeps(second[m.ID], third[m.ID]) {
				t.Fatalf("%s: %s went from [%s] to [%s]", a.Name(), m.ID, formatPartitions(second[m.ID]), formatPartitions(third[m.ID]))
			}
		}
	}
}

// keeps reports whether all of sub is in super.
func keeps(super, sub map[string][]int32) bool {
	for t, ps := range sub {
		for _, p := range ps {
			if !slices.Contains(super[t], p) {
				return false
			}
		}
	}
	return true
}
