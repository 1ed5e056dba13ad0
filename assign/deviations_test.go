package assign

import "testing"

// Groups on which Kafka's sticky assignors (apache/kafka trunk d79bd502ec,
// clients/.../consumer/internals/AbstractStickyAssignor.java) give a wrong
// result, found by the differential test in examples/kafkaassign. Strand
// gives a valid, balanced plan instead; the package doc lists them.

func TestStickyDeviationEmptyFirstSubscription(t *testing.T) {
	// AbstractStickyAssignor.java:149-150 (allSubscriptionsEqual): the first
	// member in HashMap order that subscribes to nothing leaves the set to
	// compare with empty, so the next member's topics become the reference
	// and Kafka takes the group for one of equal subscriptions. Its
	// ConstrainedAssignmentBuilder then gives consumer-1-f4e83bef-1, which
	// subscribes to nothing, topic t0-0.
	topics := plainTopics(decl{"t0", 2}, decl{"t1", 0})
	members := []Member{
		{ID: "consumer-2-aa8fb79f-0", InstanceID: "instance-52-0", Generation: -1, Topics: topicsOf("t0", "t1"), Owned: parsePartitions("t0-1")},
		{ID: "consumer-1-f4e83bef-1", Generation: 0},
	}
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		plan, err := a.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		requirePlan(t, plan, map[string]string{"consumer-2-aa8fb79f-0": "t0-0, t0-1", "consumer-1-f4e83bef-1": ""})
	}
}

func TestStickyDeviationPreviousOwnerNotSubscribed(t *testing.T) {
	// AbstractStickyAssignor.java:1411-1413 (performReassignments): a
	// partition goes back to its owner of an older generation when that
	// member has two fewer partitions, without asking whether it still
	// subscribes to the topic. Kafka gives consumer-8-11c97dee-2, which
	// subscribes to t0 only, t2-0: t0-0, t0-3, t0-6, t2-0.
	topics := plainTopics(decl{"t0", 9}, decl{"t1", 1}, decl{"t2", 4})
	members := []Member{
		{ID: "consumer-7-6e219c36-0", InstanceID: "instance-88-0", Generation: -1, Topics: topicsOf("t0", "t2"),
			Owned: parsePartitions("t0-1, t0-2, t0-4, t0-5, t2-1")},
		{ID: "consumer-2-af23dd84-1", Generation: 1, Topics: topicsOf("t0", "t2", "missing"), Owned: parsePartitions("t0-5, t0-7, t0-8")},
		{ID: "consumer-8-11c97dee-2", InstanceID: "instance-90-2", Generation: -1, Topics: topicsOf("t0", "missing"),
			Owned: parsePartitions("t0-7, t2-0, t2-1")},
	}
	plan, err := Sticky.Assign(members, topics)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, members, topics, plan)
	if _, ok := plan["consumer-8-11c97dee-2"]["t2"]; ok {
		t.Fatalf("consumer-8-11c97dee-2 got %v of t2, to which it does not subscribe", plan["consumer-8-11c97dee-2"]["t2"])
	}
	converge(t, CooperativeSticky, members, topics, mustAssign(t, CooperativeSticky, members, topics), 2)
}

func TestStickyDeviationPreviousOwnerLeftOut(t *testing.T) {
	// AbstractStickyAssignor.java:1412: when the owner of an older
	// generation takes no part in the balancing (it holds all it can and
	// nothing of a topic with two subscribers, so balance() moved it to
	// fixedAssignments at line 1356), currentAssignment.get(owner) is null
	// and Kafka throws a NullPointerException.
	topics := plainTopics(decl{"t0", 5}, decl{"t1", 6}, decl{"t2", 6}, decl{"t3", 1}, decl{"t4", 0})
	members := []Member{
		{ID: "consumer-4-c4d6603c-0", InstanceID: "instance-48-0", Generation: 0, Owned: parsePartitions("t0-0, t1-1, t1-3, t3-0")},
		{ID: "consumer-4-ae243279-1", Generation: -1, Topics: topicsOf("t0", "t4"), Owned: parsePartitions("t0-3, t1-1, t2-1")},
		{ID: "consumer-8-ffe7407f-2", Generation: 1, Topics: topicsOf("t0", "t2", "t3", "t4", "missing"),
			Owned: parsePartitions("t0-1, t1-1, t2-0, t2-2, t2-5, t3-0")},
	}
	plan := mustAssign(t, Sticky, members, topics)
	checkInvariants(t, members, topics, plan)
	converge(t, CooperativeSticky, members, topics, mustAssign(t, CooperativeSticky, members, topics), 2)
}

func mustAssign(t *testing.T, a Assignor, members []Member, topics map[string]Topic) Plan {
	t.Helper()
	plan, err := a.Assign(members, topics)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}
