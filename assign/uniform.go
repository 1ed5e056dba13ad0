package assign

import "slices"

// Uniform is the "uniform" assignor of KIP-848's group coordinator, the
// default of the new consumer protocol. It ignores generations: the
// coordinator knows what each member owns.
//
// When all members subscribe to the same topics it is Kafka's
// UniformHomogeneousAssignmentBuilder: N partitions over M members, M taken
// in the order given, N/M each and one more for N%M of them; a member keeps
// what it owns up to its quota, members owning more than N/M keep the extra
// partition first (the KAFKA-18688 fix, so a balanced group does not move),
// and the rest is dealt in topic and partition order to the members in order.
// Kafka iterates topics in HashSet order of their ids; Strand, which has
// names, iterates them by name.
//
// With different subscriptions it keeps what members own where they are
// subscribed, gives the rest to the least loaded subscriber and balances
// so that no member holds a partition a member with two fewer subscribes to,
// as Sticky does; it does not reproduce the choices of Kafka's
// UniformHeterogeneousAssignmentBuilder partition for partition.
var Uniform Assignor = uniformAssignor{}

// ServerRange is the "range" assignor of KIP-848's group coordinator
// (group-coordinator RangeAssignor): per topic, the subscribers in MemberInfo
// order get consecutive ranges, the first n%k of them one more. It is
// stateless and ignores racks, so it equals Range without racks.
var ServerRange Assignor = serverRangeAssignor{}

type uniformAssignor struct{}

func (uniformAssignor) Name() string { return "uniform" }

type serverRangeAssignor struct{}

func (serverRangeAssignor) Name() string { return "range" }

func (serverRangeAssignor) Assign(members []Member, topics map[string]Topic) (Plan, error) {
	g, err := newGroup(members, topics)
	if err != nil {
		return nil, err
	}
	b := newPlanBuilder(g)
	assignRangesPlain(g, b, subscribersInOrder(g, g.memberOrder()))
	return b.plan(true), nil
}

func (uniformAssignor) Assign(members []Member, topics map[string]Topic) (Plan, error) {
	g, err := newGroup(members, topics)
	if err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return Plan{}, nil
	}
	homogeneous := true
	for m := range g.subs {
		if !slices.Equal(g.subs[m], g.subs[0]) {
			homogeneous = false
			break
		}
	}
	if !homogeneous {
		// The coordinator's view: no generations.
		flat := make([]Member, len(members))
		for i, m := range members {
			m.Generation = -1
			m.Rack = ""
			flat[i] = m
		}
		g, _ := newGroup(flat, topics)
		st := newSticky(g)
		st.general()
		return planFromOwners(g, st.own, st.topic), nil
	}
	return uniformHomogeneous(g), nil
}

// uniformHomogeneous is UniformHomogeneousAssignmentBuilder with the
// KAFKA-18688 rule for the extra partitions.
func uniformHomogeneous(g *group) Plan {
	own := make([]int32, g.total)
	topic := make([]int32, g.total)
	for t := range g.names {
		for p := range int(g.counts[t]) {
			topic[g.base[t]+p] = int32(t)
		}
	}
	for i := range own {
		own[i] = -1
	}
	// Owned partitions, first claim wins, in topic then partition order.
	owned := make([][]int32, len(g.members))
	for m := range g.members {
		for t := range g.names {
			for _, p := range g.members[m].Owned[g.names[t]] {
				if p < 0 || p >= g.counts[t] {
					continue
				}
				if fp := int32(g.base[t]) + p; own[fp] < 0 {
					own[fp] = int32(m)
					owned[m] = append(owned[m], fp)
				}
			}
		}
	}
	numMembers := int32(len(g.members))
	minQ, extra := int32(g.total)/numMembers, int32(g.total)%numMembers
	quota := make([]int32, len(g.members))
	for m := range quota {
		quota[m] = -1
		if int32(len(owned[m])) > minQ && extra > 0 {
			quota[m] = minQ + 1
			extra--
		}
	}
	for m := range quota {
		if quota[m] < 0 {
			quota[m] = minQ
			if extra > 0 {
				quota[m]++
				extra--
			}
		}
	}
	// Kafka deals partitions nobody owned first, then those members gave up.
	var unassigned, revoked []int32
	for fp, m := range own {
		if m < 0 {
			unassigned = append(unassigned, int32(fp))
		}
	}
	for m := range owned {
		if int32(len(owned[m])) > quota[m] {
			for _, fp := range owned[m][quota[m]:] {
				own[fp] = -1
				revoked = append(revoked, fp)
			}
			owned[m] = owned[m][:quota[m]]
		}
	}
	unassigned = append(unassigned, revoked...)
	next := 0
	for m := range g.members {
		for n := int32(len(owned[m])); n < quota[m] && next < len(unassigned); n++ {
			own[unassigned[next]] = int32(m)
			next++
		}
	}
	return planFromOwners(g, own, topic)
}
