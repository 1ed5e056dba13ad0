package assign

import (
	"strconv"
	"testing"
)

// benchGroup builds members m0000.. subscribed to all of topics t0.. of
// parts partitions each; with mixed, the last member subscribes to t0 only
// (Kafka's testLargeAssignmentAndGroupWithNonEqualSubscription).
func benchGroup(members, topics, parts int, mixed bool) ([]Member, map[string]Topic) {
	tm := make(map[string]Topic, topics)
	names := make([]string, topics)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
		tm[names[i]] = Topic{Partitions: int32(parts)}
	}
	ms := make([]Member, members)
	for i := range ms {
		ms[i] = Member{ID: "m" + strconv.Itoa(10000+i), Topics: names, Generation: -1}
	}
	if mixed {
		ms[members-1].Topics = names[:1]
	}
	return ms, tm
}

// afterLeave returns the group without its first member, each other member
// owning what plan gave it.
func afterLeave(members []Member, plan Plan) []Member {
	out := make([]Member, len(members)-1)
	for i, m := range members[1:] {
		m.Owned, m.Generation = plan[m.ID], 1
		out[i] = m
	}
	return out
}

func BenchmarkAssign(b *testing.B) {
	for _, shape := range []struct {
		name                   string
		members, topics, parts int
		mixed                  bool
	}{
		{"200x50x200", 200, 50, 200, false},
		{"200x50x200-mixed", 200, 50, 200, true},
	} {
		members, topics := benchGroup(shape.members, shape.topics, shape.parts, shape.mixed)
		for _, a := range []Assignor{Range, RoundRobin, Sticky, CooperativeSticky, Uniform} {
			b.Run(shape.name+"/fresh/"+a.Name(), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := a.Assign(members, topics); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		plan, err := Sticky.Assign(members, topics)
		if err != nil {
			b.Fatal(err)
		}
		left := afterLeave(members, plan)
		for _, a := range []Assignor{Sticky, CooperativeSticky, Uniform} {
			b.Run(shape.name+"/leave/"+a.Name(), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := a.Assign(left, topics); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPlaceReplicas(b *testing.B) {
	brokers := make([]Broker, 12)
	for i := range brokers {
		brokers[i] = Broker{ID: int32(i), Rack: "r" + strconv.Itoa(i%3)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlaceReplicas(brokers, 1000, 3, 1, 2, -1); err != nil {
			b.Fatal(err)
		}
	}
}

func TestLargeGroupStaysValid(t *testing.T) {
	// Kafka's testLargeAssignmentAndGroupWithUniformSubscription and
	// ...NonEqualSubscription, scaled down: fresh, then after a member leaves,
	// plans are valid and balanced and members keep what they had.
	for _, mixed := range []bool{false, true} {
		members, topics := benchGroup(100, 20, 100, mixed)
		plan, err := Sticky.Assign(members, topics)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, members, topics, plan)
		left := afterLeave(members, plan)
		again, err := Sticky.Assign(left, topics)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, left, topics, again)
		for _, m := range left {
			for topic, ps := range plan[m.ID] {
				if len(again[m.ID][topic]) < len(ps) {
					t.Fatalf("mixed=%v: %s lost %s partitions: %v -> %v", mixed, m.ID, topic, ps, again[m.ID][topic])
				}
			}
		}
	}
}
