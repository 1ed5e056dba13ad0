package assign

import (
	"strings"
	"testing"
)

// owner builds a member with owned partitions in Kafka's notation and a generation.
func owner(id string, topics []string, owned string, gen int32) Member {
	return Member{ID: id, Topics: topics, Owned: parsePartitions(owned), Generation: gen}
}

// stickyVector is one vector of Kafka's AbstractStickyAssignorTest, run for
// both sticky assignors and every rackConfig. want is Kafka's result; transfer
// lists the partitions Kafka reports in partitionsTransferringOwnership
// (partition -> new owner), which the cooperative assignor leaves out of its
// first plan and hands out in the follow-up rebalance.
type stickyVector struct {
	name     string
	topics   []decl
	members  []Member
	want     map[string]string
	transfer map[string]string
}

func (v stickyVector) run(t *testing.T) {
	for _, c := range rackConfigs {
		members := make([]Member, len(v.members))
		for i, m := range v.members {
			m.Rack = c.rack(i)
			members[i] = m
		}
		topics := c.topics(v.topics...)
		t.Run(v.name+"/sticky/"+c.name, func(t *testing.T) {
			plan, err := Sticky.Assign(members, topics)
			if err != nil {
				t.Fatal(err)
			}
			requirePlan(t, plan, v.want)
			checkInvariants(t, members, topics, plan)
		})
		t.Run(v.name+"/cooperative/"+c.name, func(t *testing.T) {
			plan, err := CooperativeSticky.Assign(members, topics)
			if err != nil {
				t.Fatal(err)
			}
			first := map[string]string{}
			for id, w := range v.want {
				first[id] = w
			}
			for tp, id := range v.transfer {
				first[id] = removePartition(first[id], tp)
			}
			requirePlan(t, plan, first)
			final := converge(t, CooperativeSticky, members, topics, plan, 1)
			requirePlan(t, final, v.want)
		})
	}
}

func removePartition(list, tp string) string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != tp && p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ", ")
}

// converge is CooperativeStickyAssignorTest.verifyValidityAndBalance: while a
// plan revokes partitions, the members rejoin owning what they were given, in
// generation gen; nothing may be revoked and handed out in one rebalance, and
// the group must settle within four follow-up rebalances.
func converge(t *testing.T, a Assignor, members []Member, topics map[string]Topic, plan Plan, gen int32) Plan {
	t.Helper()
	for round := 0; ; round++ {
		if !checkCooperative(t, members, plan) {
			checkInvariants(t, members, topics, plan)
			return plan
		}
		if round == 4 {
			t.Fatalf("still revoking partitions after %d follow-up rebalances", round)
		}
		next := make([]Member, len(members))
		for i, m := range members {
			m.Owned, m.Generation = plan[m.ID], gen
			next[i] = m
		}
		members = next
		var err error
		if plan, err = a.Assign(members, topics); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStickyVectors(t *testing.T) {
	// Vectors from clients/src/test/java/org/apache/kafka/clients/consumer/internals/AbstractStickyAssignorTest.java.
	// Members own partitions in Kafka's test generation 1 unless said otherwise.
	t12 := topicsOf("topic1", "topic2")
	one := topicsOf("topic")
	t23 := topicsOf("topic", "topic2")
	t123 := topicsOf("topic", "topic2", "topic3")
	vectors := []stickyVector{
		{name: "testOneConsumerNoTopic", members: []Member{owner("consumer", nil, "", -1)},
			want: map[string]string{"consumer": ""}},
		{name: "testOneConsumerNonexistentTopic", members: []Member{owner("consumer", one, "", -1)},
			want: map[string]string{"consumer": ""}},
		{name: "testOneConsumerOneTopic", topics: []decl{{"topic", 3}}, members: []Member{owner("consumer", one, "", -1)},
			want: map[string]string{"consumer": "topic-0, topic-1, topic-2"}},
		{name: "testOnlyAssignsPartitionsFromSubscribedTopics", topics: []decl{{"topic", 3}, {"other", 3}},
			members: []Member{owner("consumer", one, "", -1)},
			want:    map[string]string{"consumer": "topic-0, topic-1, topic-2"}},
		{name: "testOneConsumerMultipleTopics", topics: []decl{{"topic1", 1}, {"topic2", 2}},
			members: []Member{owner("consumer", t12, "", -1)},
			want:    map[string]string{"consumer": "topic1-0, topic2-0, topic2-1"}},
		{name: "testTwoConsumersOneTopicTwoPartitions", topics: []decl{{"topic", 2}},
			members: []Member{owner("consumer1", one, "", -1), owner("consumer2", one, "", -1)},
			want:    map[string]string{"consumer1": "topic-0", "consumer2": "topic-1"}},
		{name: "testMultipleConsumersMixedTopicSubscriptions", topics: []decl{{"topic1", 3}, {"topic2", 2}},
			members: []Member{owner("consumer1", topicsOf("topic1"), "", -1), owner("consumer2", t12, "", -1), owner("consumer3", topicsOf("topic1"), "", -1)},
			want:    map[string]string{"consumer1": "topic1-0, topic1-2", "consumer2": "topic2-0, topic2-1", "consumer3": "topic1-1"}},
		{name: "testTwoConsumersTwoTopicsSixPartitions", topics: []decl{{"topic1", 3}, {"topic2", 3}},
			members: []Member{owner("consumer1", t12, "", -1), owner("consumer2", t12, "", -1)},
			want:    map[string]string{"consumer1": "topic1-0, topic1-2, topic2-1", "consumer2": "topic1-1, topic2-0, topic2-2"}},
		{name: "testConsumerOwningMinQuotaExpectedMaxQuota", topics: []decl{{"topic1", 2}, {"topic2", 3}},
			members: []Member{owner("consumer1", t12, "topic1-0, topic2-1", 1), owner("consumer2", t12, "topic1-1, topic2-2", 1)},
			want:    map[string]string{"consumer1": "topic1-0, topic2-0, topic2-1", "consumer2": "topic1-1, topic2-2"}},
		// Exact only because Kafka walks the members in HashMap order
		// (consumer3, consumer2, consumer1), which Strand reproduces: consumer2
		// takes the one max-quota slot before consumer1 can.
		{name: "testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers", topics: []decl{{"topic1", 2}, {"topic2", 2}},
			members:  []Member{owner("consumer1", t12, "topic1-0, topic2-0", 1), owner("consumer2", t12, "topic1-1, topic2-1", 1), owner("consumer3", t12, "", 1)},
			want:     map[string]string{"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-1", "consumer3": "topic2-0"},
			transfer: map[string]string{"topic2-0": "consumer3"}},
		{name: "testAllConsumersAreUnderMinQuota", topics: []decl{{"topic1", 2}, {"topic2", 3}},
			members: []Member{owner("consumer1", t12, "topic1-0", 1), owner("consumer2", t12, "topic1-1", 1), owner("consumer3", t12, "", 1)},
			want:    map[string]string{"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic2-0"}},
		{name: "testAddRemoveConsumerOneTopic/add", topics: []decl{{"topic", 3}},
			members:  []Member{owner("consumer1", one, "topic-0, topic-1, topic-2", 1), owner("consumer2", one, "", 1)},
			want:     map[string]string{"consumer1": "topic-0, topic-1", "consumer2": "topic-2"},
			transfer: map[string]string{"topic-2": "consumer2"}},
		{name: "testAddRemoveConsumerOneTopic/remove", topics: []decl{{"topic", 3}},
			members: []Member{owner("consumer2", one, "topic-2", 1)},
			want:    map[string]string{"consumer2": "topic-0, topic-1, topic-2"}},
		{name: "testAddRemoveTwoConsumersTwoTopics/first", topics: []decl{{"topic1", 3}, {"topic2", 4}},
			members: []Member{owner("consumer1", t12, "", -1), owner("consumer2", t12, "", -1)},
			want:    map[string]string{"consumer1": "topic1-0, topic1-2, topic2-1, topic2-3", "consumer2": "topic1-1, topic2-0, topic2-2"}},
		{name: "testAddRemoveTwoConsumersTwoTopics/add", topics: []decl{{"topic1", 3}, {"topic2", 4}},
			members: []Member{owner("consumer1", t12, "topic1-0, topic1-2, topic2-1, topic2-3", 1), owner("consumer2", t12, "topic1-1, topic2-0, topic2-2", 1),
				owner("consumer3", t12, "", 1), owner("consumer4", t12, "", 1)},
			want: map[string]string{"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-0",
				"consumer3": "topic1-2, topic2-3", "consumer4": "topic2-2"},
			transfer: map[string]string{"topic1-2": "consumer3", "topic2-3": "consumer3", "topic2-2": "consumer4"}},
		{name: "testAddRemoveTwoConsumersTwoTopics/remove", topics: []decl{{"topic1", 3}, {"topic2", 4}},
			members: []Member{owner("consumer3", t12, "topic1-2, topic2-3", 1), owner("consumer4", t12, "topic2-2", 1)},
			want:    map[string]string{"consumer3": "topic1-0, topic1-2, topic2-1, topic2-3", "consumer4": "topic1-1, topic2-0, topic2-2"}},
		{name: "testAllConsumersReachExpectedQuotaAndAreConsideredFilled", topics: []decl{{"topic", 4}},
			members: []Member{owner("consumer1", one, "topic-0, topic-1", 1), owner("consumer2", one, "topic-2", 1), owner("consumer3", one, "", 1)},
			want:    map[string]string{"consumer1": "topic-0, topic-1", "consumer2": "topic-2", "consumer3": "topic-3"}},
		{name: "testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration", topics: []decl{{"topic", 3}, {"topic2", 3}},
			members: []Member{owner("consumer1", t23, "topic-0, topic-2, topic2-1", 10), owner("consumer2", t23, "topic-0, topic-2, topic2-1", 9)},
			want:    map[string]string{"consumer1": "topic-0, topic-2, topic2-1", "consumer2": "topic-1, topic2-0, topic2-2"}},
		{name: "testOwnedPartitionsAreInvalidatedForConsumerWithNoGeneration", topics: []decl{{"topic", 3}, {"topic2", 3}},
			members: []Member{owner("consumer1", t23, "topic-0, topic-2, topic2-1", 10), owner("consumer2", t23, "topic-0, topic-2, topic2-1", -1)},
			want:    map[string]string{"consumer1": "topic-0, topic-2, topic2-1", "consumer2": "topic-1, topic2-0, topic2-2"}},
		{name: "testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration", topics: []decl{{"topic", 3}},
			members:  []Member{owner("consumer1", one, "topic-0, topic-1", 1), owner("consumer2", one, "topic-0, topic-2", 1), owner("consumer3", one, "", 1)},
			want:     map[string]string{"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": "topic-0"},
			transfer: map[string]string{"topic-0": "consumer3"}},
		{name: "testEnsurePartitionsAssignedToHighestGeneration", topics: []decl{{"topic", 3}, {"topic2", 3}, {"topic3", 3}},
			members: []Member{owner("consumer1", t123, "topic-0, topic2-0, topic3-0", 10), owner("consumer2", t123, "topic-1, topic2-1, topic3-1", 9),
				owner("consumer3", t123, "topic2-1, topic3-0, topic3-2", 8)},
			want: map[string]string{"consumer1": "topic-0, topic2-0, topic3-0", "consumer2": "topic-1, topic2-1, topic3-1",
				"consumer3": "topic-2, topic2-2, topic3-2"}},
		{name: "testOwnedPartitionsAreInvalidatedForConsumerWithMultipleGeneration", topics: []decl{{"topic", 3}, {"topic2", 3}},
			members: []Member{owner("consumer1", t23, "topic-0, topic2-1, topic-1", 10), owner("consumer2", t23, "topic-0, topic2-1, topic2-2", 8)},
			want:    map[string]string{"consumer1": "topic-0, topic-1, topic2-1", "consumer2": "topic-2, topic2-0, topic2-2"}},
	}
	for _, v := range vectors {
		v.run(t)
	}
}

func TestStickyNoReassignmentOnCurrentMembers(t *testing.T) {
	// AbstractStickyAssignorTest.testNoReassignmentOnCurrentMembers: the new
	// member gets exactly the partitions nobody owned.
	all := topicsOf("topic", "topic2", "topic3", "topic1")
	members := []Member{
		owner("consumer1", all, "", -1),
		owner("consumer2", all, "topic-0, topic2-0, topic1-0", 9),
		owner("consumer3", all, "topic3-2, topic2-2, topic1-1", 8),
		owner("consumer4", all, "topic3-1, topic-1, topic-2", 7),
	}
	topics := plainTopics(decl{"topic", 3}, decl{"topic1", 3}, decl{"topic2", 3}, decl{"topic3", 3})
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		plan, err := a.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatPartitions(plan["consumer1"]); got != "topic1-2, topic2-1, topic3-0" {
			t.Errorf("%s: consumer1 got [%s], want [topic1-2, topic2-1, topic3-0]", a.Name(), got)
		}
	}
}

func TestStickyTopicBalanceAfterReassignment(t *testing.T) {
	// AbstractStickyAssignorTest.testTopicBalanceAfterReassignment: as members
	// come and go, each keeps an equal share of each topic.
	all := topicsOf("topic1", "topic2")
	topics := plainTopics(decl{"topic1", 12}, decl{"topic2", 12})
	steps := []struct {
		ids  []string
		each int
	}{
		{[]string{"consumer1"}, 12},
		{[]string{"consumer1", "consumer2"}, 6},
		{[]string{"consumer1", "consumer2", "consumer3", "consumer4"}, 3},
		{[]string{"consumer3", "consumer4"}, 6},
	}
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		prev := Plan{}
		for _, step := range steps {
			var members []Member
			for _, id := range step.ids {
				members = append(members, Member{ID: id, Topics: all, Owned: prev[id], Generation: 1})
			}
			plan, err := a.Assign(members, topics)
			if err != nil {
				t.Fatal(err)
			}
			if a == CooperativeSticky {
				plan = converge(t, a, members, topics, plan, 1)
			} else {
				checkInvariants(t, members, topics, plan)
			}
			for id, tp := range plan {
				if len(tp["topic1"]) != step.each || len(tp["topic2"]) != step.each {
					t.Fatalf("%s with %v: %s has %v, want %d of each topic", a.Name(), step.ids, id, tp, step.each)
				}
			}
			prev = plan
		}
	}
}

func TestStickyRackVectors(t *testing.T) {
	// AbstractStickyAssignorTest.testRackAwareAssignmentWithUniformSubscription
	// and testRackAwareAssignmentWithNonEqualSubscription, fresh and with every
	// member already owning its expected partitions.
	t123 := []decl{{"t1", 6}, {"t2", 7}, {"t3", 2}}
	all := topicsOf("t1", "t2", "t3")
	uniform := [][]string{all, all, all}
	nonEqual := [][]string{all, all, topicsOf("t1", "t3")}
	uniformWant := []string{"t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0", "t1-2, t1-5, t2-2, t2-5, t3-1"}
	nonEqualWant := []string{"t1-5, t2-0, t2-2, t2-4, t2-6", "t1-3, t2-1, t2-3, t2-5, t3-0", "t1-0, t1-1, t1-2, t1-4, t3-1"}
	var vectors []rackVector
	both := func(name string, subs [][]string, rf int, brokers, consumers []string, want []string, mismatches int) {
		vectors = append(vectors,
			rackVector{name, t123, rf, brokers, consumers, subs, nil, want, mismatches},
			rackVector{name + "/owned", t123, rf, brokers, consumers, subs, want, want, mismatches})
	}
	for _, c := range []struct {
		name      string
		subs      [][]string
		want      []string
		rf1, rf2  []string
		rf1Misses int
	}{
		{"uniform", uniform, uniformWant, uniformWant, uniformWant, 0},
		{"non-equal", nonEqual, nonEqualWant,
			[]string{"t1-3, t2-0, t2-2, t2-3, t2-6", "t1-4, t2-1, t2-4, t2-5, t3-0", "t1-0, t1-1, t1-2, t1-5, t3-1"},
			[]string{"t1-3, t2-0, t2-2, t2-5, t2-6", "t1-0, t2-1, t2-3, t2-4, t3-0", "t1-1, t1-2, t1-4, t1-5, t3-1"}, 4},
	} {
		both(c.name+"/no broker racks", c.subs, 3, nullRacks(3), racks(3), c.want, -1)
		both(c.name+"/no consumer racks", c.subs, 3, racks(3), nullRacks(3), c.want, -1)
		both(c.name+"/every partition on every rack", c.subs, 3, racks(3), racks(3), c.want, 0)
		both(c.name+"/four racks", c.subs, 4, racks(4), racks(3), c.want, 0)
		both(c.name+"/consumers on other racks", c.subs, 3, racks(3), []string{"d", "e", "f"}, c.want, -1)
		both(c.name+"/some consumer racks", c.subs, 3, racks(3), []string{"", "e", "f"}, c.want, -1)
		both(c.name+"/rf1", c.subs, 1, racks(3), racks(3), c.rf1, c.rf1Misses)
		both(c.name+"/rf2", c.subs, 2, racks(3), racks(3), c.rf2, 0)
		both(c.name+"/consumer rack without partitions", c.subs, 3, racks(2), racks(3), c.want, 5)
	}
	// Uniform, racks(3) with one replica, members owning a contiguous split:
	// Kafka's result after a rack-aware rebalance; the cooperative assignor
	// first keeps only what stays in place.
	owned := []string{"t1-0, t1-1, t1-2, t1-3, t1-4", "t1-5, t2-0, t2-1, t2-2, t2-3", "t2-4, t2-5, t2-6, t3-0, t3-1"}
	for _, v := range vectors {
		t.Run(v.name+"/sticky", func(t *testing.T) { v.run(t, Sticky) })
	}
	rackVector{"uniform/rf1 from contiguous owners", t123, 1, racks(3), racks(3), uniform, owned, uniformWant, 0}.run(t, Sticky)
	rackVector{"uniform/rf1 from contiguous owners", t123, 1, racks(3), racks(3), uniform, owned,
		[]string{"t1-0, t1-3", "t2-1", "t2-5, t3-1"}, 0}.run(t, CooperativeSticky)
	rackVector{"non-equal/rf1 from contiguous owners", t123, 1, racks(3), racks(3), nonEqual, owned,
		[]string{"t1-3", "t2-1", "t3-1"}, 0}.run(t, CooperativeSticky)
}
