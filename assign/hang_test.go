package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// issue16Group is the group of issue 16 on which the sticky assignor looped
// forever (and on which Kafka's own StickyAssignor loops too): racked brokers
// 0@r0, 1@r1, 2@r0, heterogeneous subscriptions, ten members after one left
// and one joined.
func issue16Group() ([]Member, map[string]Topic) {
	rackOf := map[string]string{"0": "r0", "1": "r1", "2": "r0"}
	topic := func(replicas string) Topic {
		parts := strings.Fields(replicas)
		t := Topic{Partitions: int32(len(parts))}
		for _, p := range parts {
			var racks []string
			for _, b := range strings.Split(strings.Trim(p, "[]"), ",") {
				racks = append(racks, rackOf[b])
			}
			t.Racks = append(t.Racks, racks)
		}
		return t
	}
	topics := map[string]Topic{
		"b":      topic("[2,1] [2,1] [1,0] [2,1] [1,2] [0,2] [0,2] [2,0] [2,0] [2,1] [1,0] [1,0]"),
		"audit":  topic("[0,2] [2,0] [0,1] [2,1] [0,2] [0,1] [1,2] [2,1] [2,1] [2,0] [0,1]"),
		"events": topic("[0,2,1] [2,0,1] [2,1,0] [2,1,0] [1,0,2] [1,2,0] [0,1,2] [2,0,1] [2,0,1]"),
		"orders": topic("[0,1] [2,0] [0,1] [2,1] [0,2] [2,1] [1,2] [0,1] [0,1] [2,0]"),
		"B":      topic("[2,0] [1,2] [1,2] [0,2]"),
	}
	m := func(id, rack string, gen int32, subs, owned string) Member {
		return Member{ID: id, Rack: rack, Generation: gen, Topics: strings.Fields(subs), Owned: parsePartitions(owned)}
	}
	members := []Member{
		m("consumer-etl-3-8296e5d8-acc6-efe4-472e-7683a1bf2296", "r1", 1, "audit", ""),
		m("consumer-etl-9-867513aa-6a1f-4480-abef-d3b55e7e96a6", "r1", 1, "events audit B", "audit-3, events-0, events-5"),
		m("consumer-etl-9-25bc9774-daa0-3fe8-8d6e-4e32d48a505f", "r1", 1, "B", ""),
		m("consumer-etl-2-19153478-e266-e0d1-e209-e2574a3f581d", "r1", 1, "events b audit B",
			"B-1, audit-1, audit-7, audit-9, b-0, b-1, b-2, b-3, b-4, b-5, b-6, b-7, b-8, b-9, b-10, b-11, events-2, events-4"),
		m("consumer-etl-8-954d0496-195e-5b85-2817-525c40fb0743", "r0", 1, "orders events audit",
			"audit-4, audit-10, events-6, events-7, events-8, orders-0, orders-1, orders-2, orders-5, orders-6, orders-7"),
		m("consumer-etl-7-9b5cd3b2-61c2-c6c0-0d2f-e10f0f2f0c11", "r0", 1, "B", ""),
		m("consumer-etl-3-e43b29a7-f0b4-1d10-70b4-35ed5785a5a6", "r1", 1, "audit", "audit-5, audit-6, audit-8"),
		m("consumer-etl-7-b07e4f71-83d8-d326-ced7-75035ae10a11", "r1", -1, "events orders b audit", ""),
		m("consumer-etl-6-f80f0777-73ef-34a7-df5b-a2f741111c60", "r0", 1, "events", "events-3"),
		m("consumer-etl-8-ef5d5a0d-4971-cf73-b0f6-dd01966b3e9c", "r0", 1, "events audit orders B",
			"B-0, B-2, audit-2, events-1, orders-3, orders-4, orders-8, orders-9"),
	}
	return members, topics
}

func TestStickyIssue16GroupEnds(t *testing.T) {
	members, topics := issue16Group()
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		done := make(chan error, 1)
		var plan Plan
		go func() {
			var err error
			plan, err = a.Assign(members, topics)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", a.Name(), err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Assign has not returned after 10 s", a.Name())
		}
		if a == Sticky {
			checkInvariants(t, members, topics, plan)
		}
	}
}

// randomRackedGroup is a group shaped like issue 16's: brokers on a few
// racks hold each partition's replicas; members on those racks subscribe to
// different topics and, in generation 1, own partitions that half the time a
// previous plan gave them (one member has left since and one joined) and
// otherwise fall to a few of them unevenly, some on the wrong rack.
func randomRackedGroup(r *rand.Rand) ([]Member, map[string]Topic) {
	rackNames := []string{"r0", "r1", "r2"}[:2+r.IntN(2)]
	brokers := make([]string, 2+r.IntN(4))
	for i := range brokers {
		brokers[i] = rackNames[i%len(rackNames)]
	}
	topics := map[string]Topic{}
	var names []string
	for i := range 1 + r.IntN(6) {
		name := "t" + strconv.Itoa(i)
		names = append(names, name)
		t := Topic{Partitions: int32(1 + r.IntN(16))}
		rf := 1 + r.IntN(min(3, len(brokers)))
		for range t.Partitions {
			var racks []string
			for _, b := range r.Perm(len(brokers))[:rf] {
				racks = append(racks, brokers[b])
			}
			t.Racks = append(t.Racks, racks)
		}
		topics[name] = t
	}
	subscription := func() []string {
		var subs []string
		for _, n := range names {
			if r.IntN(2) == 0 {
				subs = append(subs, n)
			}
		}
		return subs
	}
	member := func() Member {
		return Member{ID: fmt.Sprintf("consumer-etl-%d-%08x", r.IntN(10), r.Uint32()), Rack: rackNames[r.IntN(len(rackNames))],
			Topics: subscription(), Generation: -1}
	}
	members := make([]Member, 2+r.IntN(11))
	for i := range members {
		members[i] = member()
	}
	if r.IntN(2) == 0 {
		plan, err := Sticky.Assign(members, topics)
		if err != nil {
			panic(err)
		}
		left := r.IntN(len(members))
		next := make([]Member, 0, len(members))
		for i, m := range members {
			if i == left {
				continue
			}
			m.Owned, m.Generation = plan[m.ID], 1
			if r.IntN(5) == 0 {
				m.Topics = subscription()
			}
			next = append(next, m)
		}
		return slices.Insert(next, r.IntN(len(next)+1), member()), topics
	}
	for i := range members[1:] {
		members[i+1].Generation = 1
	}
	for _, name := range names {
		var owners []int
		for i, m := range members[1:] {
			if slices.Contains(m.Topics, name) {
				owners = append(owners, i+1)
			}
		}
		for p := range topics[name].Partitions {
			if len(owners) == 0 || r.IntN(6) == 0 {
				continue
			}
			m := &members[owners[min(r.IntN(len(owners)), r.IntN(len(owners)))]]
			if m.Owned == nil {
				m.Owned = map[string][]int32{}
			}
			m.Owned[name] = append(m.Owned[name], p)
		}
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return members, topics
}

func TestStickyRandomRackedGroupsEnd(t *testing.T) {
	// Every call ends (the balancing loops are bounded, see balance) and
	// gives a valid, balanced plan, on groups shaped like issue 16's.
	n := 5000
	if testing.Short() {
		n = 1000
	}
	r := rand.New(rand.NewPCG(16, 16))
	done := make(chan error, 1)
	var current atomic.Int64
	go func() {
		for i := range n {
			current.Store(int64(i))
			members, topics := randomRackedGroup(r)
			for _, a := range []Assignor{Sticky, CooperativeSticky} {
				plan, err := a.Assign(members, topics)
				if err != nil {
					done <- fmt.Errorf("group %d, %s: %w", i, a.Name(), err)
					return
				}
				if a == Sticky {
					if err := invariantError(members, topics, plan); err != nil {
						done <- fmt.Errorf("group %d: %w", i, err)
						return
					}
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("group %d has not been assigned after two minutes", current.Load())
	}
}
