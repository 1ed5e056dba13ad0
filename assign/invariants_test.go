package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// checkInvariants asserts what Kafka's AbstractStickyAssignorTest.verifyValidityAndBalance
// asserts of every sticky plan, in its stronger form (Kafka's isBalanced):
// every member is in the plan; members get only partitions of topics they
// subscribe to, that exist, in ascending order; no partition goes to two
// members; and no member holds a partition that a member with at least two
// fewer partitions subscribes to.
func checkInvariants(t *testing.T, members []Member, topics map[string]Topic, plan Plan) {
	t.Helper()
	if err := invariantError(members, topics, plan); err != nil {
		t.Fatal(err)
	}
}

func invariantError(members []Member, topics map[string]Topic, plan Plan) error {
	if err := validPlan(members, topics, plan); err != nil {
		return err
	}
	size := map[string]int{}
	for _, m := range members {
		for _, ps := range plan[m.ID] {
			size[m.ID] += len(ps)
		}
	}
	for _, a := range members {
		for _, b := range members {
			if size[a.ID] < size[b.ID]+2 {
				continue
			}
			for topic := range plan[a.ID] {
				if slices.Contains(b.Topics, topic) {
					return fmt.Errorf("unbalanced: %s has %d partitions including %s, %s subscribes to it and has %d",
						a.ID, size[a.ID], topic, b.ID, size[b.ID])
				}
			}
		}
	}
	return nil
}

// validPlan checks that every member is in the plan, with partitions of
// topics it subscribes to, that exist, ascending, and none given twice.
func validPlan(members []Member, topics map[string]Topic, plan Plan) error {
	if len(plan) != len(members) {
		return fmt.Errorf("plan has %d members, group %d", len(plan), len(members))
	}
	owner := map[string]string{}
	for _, m := range members {
		got, ok := plan[m.ID]
		if !ok {
			return fmt.Errorf("member %s missing from plan", m.ID)
		}
		for topic, ps := range got {
			if !slices.Contains(m.Topics, topic) {
				return fmt.Errorf("member %s got %s-%v without subscribing to it", m.ID, topic, ps)
			}
			if len(ps) == 0 || !slices.IsSorted(ps) {
				return fmt.Errorf("member %s: partitions of %s %v not ascending and non-empty", m.ID, topic, ps)
			}
			for _, p := range ps {
				if p < 0 || p >= topics[topic].Partitions {
					return fmt.Errorf("member %s got %s-%d, which does not exist", m.ID, topic, p)
				}
				tp := topic + "-" + strconv.Itoa(int(p))
				if o, dup := owner[tp]; dup {
					return fmt.Errorf("%s assigned to %s and %s", tp, o, m.ID)
				}
				owner[tp] = m.ID
			}
		}
	}
	return nil
}

// checkCooperative asserts that nothing is revoked from a member and given to
// another in the same rebalance, and reports whether anything was revoked
// (CooperativeStickyAssignorTest.verifyCooperativeValidity).
func checkCooperative(t *testing.T, members []Member, plan Plan) bool {
	t.Helper()
	added, revoked := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		for topic, ps := range plan[m.ID] {
			for _, p := range ps {
				if !slices.Contains(m.Owned[topic], p) {
					added[topic+"-"+strconv.Itoa(int(p))] = true
				}
			}
		}
		for topic, ps := range m.Owned {
			for _, p := range ps {
				if !slices.Contains(plan[m.ID][topic], p) {
					revoked[topic+"-"+strconv.Itoa(int(p))] = true
				}
			}
		}
	}
	for tp := range added {
		if revoked[tp] {
			t.Fatalf("%s revoked and assigned in the same rebalance", tp)
		}
	}
	return len(revoked) > 0
}

// movedBothWays reports a topic whose partitions moved from one member to
// another and from that one back to the first in one rebalance, which
// Kafka's isSticky forbids.
func movedBothWays(before, after Plan) string {
	type pair struct{ topic, from, to string }
	moved := map[pair]bool{}
	for from, tps := range before {
		for topic, ps := range tps {
			for _, p := range ps {
				for to, now := range after {
					if to != from && slices.Contains(now[topic], p) {
						moved[pair{topic, from, to}] = true
					}
				}
			}
		}
	}
	for p := range moved {
		if moved[pair{p.topic, p.to, p.from}] {
			return fmt.Sprintf("%s moved between %s and %s both ways", p.topic, p.from, p.to)
		}
	}
	return ""
}

// randomGroup generates a small group: up to 12 topics of up to 12
// partitions, up to 10 members with random (or, half the time, equal)
// subscriptions, racks and static ids, and partitions owned at random.
func randomGroup(r *rand.Rand) ([]Member, map[string]Topic) {
	nt := 1 + r.IntN(12)
	topics := map[string]Topic{}
	var names []string
	rackNames := []string{"a", "b", "c"}
	withRacks := r.IntN(3) == 0
	for i := range nt {
		name := "t" + strconv.Itoa(i)
		names = append(names, name)
		topic := Topic{Partitions: int32(r.IntN(13))}
		if withRacks {
			for range topic.Partitions {
				topic.Racks = append(topic.Racks, []string{rackNames[r.IntN(3)]})
			}
		}
		topics[name] = topic
	}
	equal := r.IntN(2) == 0
	all := names[:1+r.IntN(nt)]
	nm := 1 + r.IntN(10)
	members := make([]Member, nm)
	for i := range members {
		m := Member{ID: "m" + strconv.Itoa(r.IntN(1000)) + "-" + strconv.Itoa(i), Generation: int32(r.IntN(3)) - 1}
		if r.IntN(4) == 0 {
			m.InstanceID = "i" + strconv.Itoa(r.IntN(100)) + "-" + strconv.Itoa(i)
		}
		if withRacks && r.IntN(4) > 0 {
			m.Rack = rackNames[r.IntN(3)]
		}
		if equal {
			m.Topics = all
		} else {
			for _, n := range names {
				if r.IntN(2) == 0 {
					m.Topics = append(m.Topics, n)
				}
			}
			if r.IntN(8) == 0 {
				m.Topics = append(m.Topics, "missing")
			}
		}
		m.Owned = map[string][]int32{}
		for _, n := range names {
			for p := range topics[n].Partitions {
				if r.IntN(nm+1) == 0 {
					m.Owned[n] = append(m.Owned[n], p)
				}
			}
		}
		members[i] = m
	}
	return members, topics
}

func hasRacks(members []Member) bool {
	return slices.ContainsFunc(members, func(m Member) bool { return m.Rack != "" })
}

func TestStickyInvariantsRandom(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		members, topics := randomGroup(r)
		for _, a := range []Assignor{Sticky, CooperativeSticky} {
			plan, err := a.Assign(members, topics)
			if err != nil {
				t.Fatalf("group %d, %s: %v", i, a.Name(), err)
			}
			if a == CooperativeSticky {
				if hasRacks(members) {
					// Kafka gives up an owned partition on another rack in every
					// rebalance, even when no member on its rack can take it,
					// so rack-aware groups need not settle; each rebalance must
					// still revoke before it reassigns.
					checkCooperative(t, members, plan)
					continue
				}
				converge(t, a, members, topics, plan, 5)
				continue
			}
			if err := invariantError(members, topics, plan); err != nil {
				t.Fatalf("group %d, %s: %v\nmembers %+v\ntopics %+v", i, a.Name(), err, members, topics)
			}
		}
	}
}

func TestStickyRebalanceSequences(t *testing.T) {
	// Kafka's testReassignmentWithRandomSubscriptionsAndChanges, over 100
	// rounds: members join and leave and change subscriptions; every plan is
	// valid and balanced, no topic's partitions swap between two members, and
	// a member that stays with the same subscription, while the partitions are
	// spread evenly, keeps what it had unless balance needs some of it.
	for _, a := range []Assignor{Sticky, CooperativeSticky} {
		t.Run(a.Name(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			topics := map[string]Topic{}
			var names []string
			for i := range 15 {
				name := "t" + strconv.Itoa(i)
				names = append(names, name)
				topics[name] = Topic{Partitions: int32(i + 1)}
			}
			var members []Member
			next := 0
			join := func() {
				m := Member{ID: fmt.Sprintf("c%03d", next), Generation: -1}
				next++
				if r.IntN(3) > 0 {
					m.Topics = names
				} else {
					for _, n := range names {
						if r.IntN(2) == 0 {
							m.Topics = append(m.Topics, n)
						}
					}
				}
				members = append(members, m)
			}
			for range 20 {
				join()
			}
			plan := Plan{}
			gen := int32(0)
			for round := range 100 {
				switch r.IntN(4) {
				case 0:
					join()
				case 1:
					if len(members) > 1 {
						i := r.IntN(len(members))
						members = slices.Delete(members, i, i+1)
					}
				}
				gen++
				for i := range members {
					members[i].Owned, members[i].Generation = plan[members[i].ID], gen
				}
				before := plan
				var err error
				if plan, err = a.Assign(members, topics); err != nil {
					t.Fatal(err)
				}
				if a == CooperativeSticky {
					plan = converge(t, a, members, topics, plan, gen)
				} else {
					checkInvariants(t, members, topics, plan)
				}
				if msg := movedBothWays(before, plan); msg != "" {
					t.Fatalf("round %d: %s", round, msg)
				}
				kept, had := 0, 0
				for _, m := range members {
					for topic, ps := range before[m.ID] {
						had += len(ps)
						for _, p := range ps {
							if slices.Contains(plan[m.ID][topic], p) {
								kept++
							}
						}
					}
				}
				if had > 0 && kept*2 < had {
					t.Fatalf("round %d: members kept %d of the %d partitions they owned", round, kept, had)
				}
			}
		})
	}
}
