package assign

import "testing"

func TestRoundRobinVectors(t *testing.T) {
	// Vectors from clients/src/test/java/org/apache/kafka/clients/consumer/RoundRobinAssignorTest.java
	// and the RoundRobinAssignor javadoc. RoundRobin ignores racks, so every
	// rackConfig must give the same answer.
	t12 := topicsOf("topic1", "topic2")
	static := func(ids ...string) []Member {
		var out []Member
		for i, id := range ids {
			m := Member{ID: id, Topics: t12}
			if i < 3 {
				m.InstanceID = "instance" + string(rune('1'+i))
			}
			out = append(out, m)
		}
		return out
	}
	vectors := []basicVector{
		{"one consumer no topic", nil, []Member{{ID: "consumer"}}, map[string]string{"consumer": ""}},
		{"one consumer nonexistent topic", nil, []Member{{ID: "consumer", Topics: topicsOf("topic")}}, map[string]string{"consumer": ""}},
		{"one consumer one topic", []decl{{"topic", 3}}, []Member{{ID: "consumer", Topics: topicsOf("topic")}},
			map[string]string{"consumer": "topic-0, topic-1, topic-2"}},
		{"only assigns partitions from subscribed topics", []decl{{"topic", 3}, {"other", 3}},
			[]Member{{ID: "consumer", Topics: topicsOf("topic")}},
			map[string]string{"consumer": "topic-0, topic-1, topic-2"}},
		{"one consumer multiple topics", []decl{{"topic1", 1}, {"topic2", 2}}, []Member{{ID: "consumer", Topics: t12}},
			map[string]string{"consumer": "topic1-0, topic2-0, topic2-1"}},
		{"two consumers one topic one partition", []decl{{"topic", 1}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic")}, {ID: "consumer2", Topics: topicsOf("topic")}},
			map[string]string{"consumer1": "topic-0", "consumer2": ""}},
		{"two consumers one topic two partitions", []decl{{"topic", 2}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic")}, {ID: "consumer2", Topics: topicsOf("topic")}},
			map[string]string{"consumer1": "topic-0", "consumer2": "topic-1"}},
		{"multiple consumers mixed topics", []decl{{"topic1", 3}, {"topic2", 2}},
			[]Member{{ID: "consumer1", Topics: topicsOf("topic1")}, {ID: "consumer2", Topics: t12}, {ID: "consumer3", Topics: topicsOf("topic1")}},
			map[string]string{"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-0, topic2-1", "consumer3": "topic1-2"}},
		{"two dynamic consumers two topics six partitions", []decl{{"topic1", 3}, {"topic2", 3}},
			[]Member{{ID: "consumer1", Topics: t12}, {ID: "consumer2", Topics: t12}},
			map[string]string{"consumer1": "topic1-0, topic1-2, topic2-1", "consumer2": "topic1-1, topic2-0, topic2-2"}},
		{"two static consumers", []decl{{"topic1", 3}, {"topic2", 3}},
			[]Member{{ID: "consumer-b", InstanceID: "instance1", Topics: t12}, {ID: "consumer-a", InstanceID: "instance2", Topics: t12}},
			map[string]string{"consumer-b": "topic1-0, topic1-2, topic2-1", "consumer-a": "topic1-1, topic2-0, topic2-2"}},
		{"one static one dynamic", []decl{{"topic1", 3}, {"topic2", 3}},
			[]Member{{ID: "consumer-b", InstanceID: "instance1", Topics: t12}, {ID: "consumer-a", Topics: t12}},
			map[string]string{"consumer-b": "topic1-0, topic1-2, topic2-1", "consumer-a": "topic1-1, topic2-0, topic2-2"}},
		{"static members persistent", []decl{{"topic1", 3}, {"topic2", 3}},
			static("consumer1", "consumer2", "consumer3", "consumer4"),
			map[string]string{"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic1-2", "consumer4": "topic2-0"}},
		{"static members persistent after dynamic member replaced", []decl{{"topic1", 3}, {"topic2", 3}},
			static("consumer1", "consumer2", "consumer3", "consumer5"),
			map[string]string{"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic1-2", "consumer5": "topic2-0"}},
		{"static members before member id change", []decl{{"topic1", 5}, {"topic2", 5}},
			static("consumer1", "consumer2", "consumer3"),
			map[string]string{"consumer1": "topic1-0, topic1-3, topic2-1, topic2-4", "consumer2": "topic1-1, topic1-4, topic2-2",
				"consumer3": "topic1-2, topic2-0, topic2-3"}},
		{"static members after member id change", []decl{{"topic1", 5}, {"topic2", 5}},
			static("consumer1", "consumer5", "consumer4"),
			map[string]string{"consumer1": "topic1-0, topic1-3, topic2-1, topic2-4", "consumer5": "topic1-1, topic1-4, topic2-2",
				"consumer4": "topic1-2, topic2-0, topic2-3"}},
		// The RoundRobinAssignor javadoc: unequal subscriptions are not balanced.
		{"javadoc example", []decl{{"t0", 1}, {"t1", 2}, {"t2", 3}},
			[]Member{{ID: "C0", Topics: topicsOf("t0")}, {ID: "C1", Topics: topicsOf("t0", "t1")}, {ID: "C2", Topics: topicsOf("t0", "t1", "t2")}},
			map[string]string{"C0": "t0-0", "C1": "t1-0", "C2": "t1-1, t2-0, t2-1, t2-2"}},
	}
	for _, v := range vectors {
		v.run(t, RoundRobin)
	}
}
