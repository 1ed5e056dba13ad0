package assign

import (
	"math/rand/v2"
	"testing"
)

func TestUniformHomogeneousVectors(t *testing.T) {
	// Vectors from group-coordinator/src/test/java/org/apache/kafka/coordinator/group/assignor/OptimizedUniformAssignmentBuilderTest.java.
	// Kafka deals topics in HashSet order of their ids; where that order
	// matters the topics are named so that name order is Kafka's order.
	tests := []struct {
		name    string
		topics  map[string]Topic
		members []Member
		want    map[string]string
	}{
		// testFirstAssignmentTwoMembersTwoTopicsNoMemberRacks: Kafka's order
		// is T3 before T1, so T3 is "a" and T1 is "b" here.
		{"first assignment two members two topics", plainTopics(decl{"b", 3}, decl{"a", 2}),
			[]Member{{ID: "A", Topics: topicsOf("a", "b")}, {ID: "B", Topics: topicsOf("a", "b")}},
			map[string]string{"A": "b-0, a-0, a-1", "B": "b-1, b-2"}},
		{"more members than partitions", plainTopics(decl{"T3", 2}),
			[]Member{{ID: "A", Topics: topicsOf("T3")}, {ID: "B", Topics: topicsOf("T3")}, {ID: "C", Topics: topicsOf("T3")}},
			map[string]string{"A": "T3-0", "B": "T3-1", "C": ""}},
		{"unbalanced previous assignment", plainTopics(decl{"T1", 3}, decl{"T2", 3}),
			[]Member{owner("A", topicsOf("T1", "T2"), "T1-0, T1-1, T2-0, T2-1", -1), owner("B", topicsOf("T1", "T2"), "T1-2, T2-2", -1)},
			map[string]string{"A": "T1-0, T1-1, T2-0", "B": "T1-2, T2-1, T2-2"}},
		{"member added after initial assignment", plainTopics(decl{"T1", 3}, decl{"T2", 3}),
			[]Member{owner("A", topicsOf("T1", "T2"), "T1-0, T1-2, T2-0", -1), owner("B", topicsOf("T1", "T2"), "T1-1, T2-1, T2-2", -1),
				owner("C", topicsOf("T1", "T2"), "", -1)},
			map[string]string{"A": "T1-0, T1-2", "B": "T1-1, T2-1", "C": "T2-0, T2-2"}},
		// KAFKA-18688: a balanced group does not move, whichever members hold
		// the extra partitions.
		{"balanced group stays", plainTopics(decl{"T1", 5}),
			[]Member{owner("A", topicsOf("T1"), "T1-0, T1-1", -1), owner("B", topicsOf("T1"), "T1-2", -1), owner("C", topicsOf("T1"), "T1-3, T1-4", -1)},
			map[string]string{"A": "T1-0, T1-1", "B": "T1-2", "C": "T1-3, T1-4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Uniform.Assign(tt.members, tt.topics)
			if err != nil {
				t.Fatal(err)
			}
			requirePlan(t, plan, tt.want)
		})
	}
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
	// Every plan of the uniform assignor is valid and balanced, homogeneous
	// or not, and a second run from its own result moves nothing.
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		members, topics := randomGroup(r)
		for j := range members {
			members[j].Rack = ""
		}
		plan, err := Uniform.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
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
