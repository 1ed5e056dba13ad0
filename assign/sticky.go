package assign

import (
	"fmt"
	"slices"
)

// Sticky is Kafka's eager "sticky" assignor (StickyAssignor) and
// CooperativeSticky its "cooperative-sticky" variant
// (CooperativeStickyAssignor). Both balance the group (sizes within one
// where subscriptions allow: no member holds a partition that a member with
// two fewer partitions subscribes to) while keeping as many owned partitions
// where they are as balance allows. A partition claimed by members of
// different generations belongs to the highest; one claimed twice in the same
// generation belongs to nobody and is assigned afresh.
//
// The result is the one Kafka's AbstractStickyAssignor computes: its
// ConstrainedAssignmentBuilder when every member subscribes to the same
// topics, walking members in java.util.HashMap order (emulated from member
// ids and JoinGroup order), and otherwise its GeneralAssignmentBuilder:
// unassigned partitions, topics with fewer subscribers first, each to the
// least loaded subscriber by size then member id, then passes that move a
// partition from a member to one with at least two fewer partitions (or
// back to its owner of an older generation), taking back first a partition
// of the same topic that moved the other way, in HashSet order. Racks
// (KIP-881) are honoured as Kafka does: owned partitions on another rack are
// given up, and partitions go first to members on a rack holding a replica.
// Where Kafka's result is wrong or never comes, Strand's is valid and
// balanced; the package documentation lists those cases.
//
// CooperativeSticky leaves out of the plan every partition that must first be
// revoked from its previous owner (Kafka's partitionsTransferringOwnership),
// so that nothing is revoked and handed out in the same rebalance; the next
// rebalance assigns it.
var (
	Sticky            Assignor = stickyAssignor{}
	CooperativeSticky Assignor = stickyAssignor{cooperative: true}
)

type stickyAssignor struct{ cooperative bool }

func (s stickyAssignor) Name() string {
	if s.cooperative {
		return "cooperative-sticky"
	}
	return "sticky"
}

// sticky is the state of one sticky assignment. Partitions are numbered flat:
// partition p of topic t is g.base[t]+p.
type sticky struct {
	g     *group
	hash  []int   // members in java.util.HashMap iteration order
	rank  []int32 // member -> position in member id order
	topic []int32 // flat partition -> topic number

	// claims, after the generation rules of AbstractStickyAssignor.allSubscriptionsEqual
	owned     [][]int32 // member -> partitions it keeps a claim on
	contested []bool    // flat partition -> claimed twice in one generation

	racks *stickyRacks // nil unless rack-aware assignment applies

	own   []int32 // flat partition -> member, -1 when unassigned
	count []int32 // member -> partitions assigned

	// transferring maps a partition to the member it goes to when it must
	// first be revoked from another (ConstrainedAssignmentBuilder only).
	transferring map[int32]int32
}

func (s stickyAssignor) Assign(members []Member, topics map[string]Topic) (Plan, error) {
	g, err := newGroup(members, topics)
	if err != nil {
		return nil, err
	}
	st := newSticky(g)
	if g.classes <= 1 {
		if err := st.constrained(); err != nil {
			return nil, err
		}
		if s.cooperative {
			for p, m := range st.transferring {
				if st.own[p] == m {
					st.own[p] = -1
				}
			}
		}
	} else {
		if err := st.general(); err != nil {
			return nil, err
		}
		if s.cooperative {
			st.holdBackTransfers()
		}
	}
	return planFromOwners(g, st.own, st.topic), nil
}

func newSticky(g *group) *sticky {
	ids := make([]string, len(g.members))
	for i := range g.members {
		ids[i] = g.members[i].ID
	}
	st := &sticky{
		g:     g,
		hash:  javaHashMapOrder(ids),
		rank:  make([]int32, len(g.members)),
		topic: make([]int32, g.total),
		own:   make([]int32, g.total),
		count: make([]int32, len(g.members)),
	}
	byID := make([]int, len(g.members))
	for i := range byID {
		byID[i] = i
	}
	slices.SortFunc(byID, func(a, b int) int { return compareJava(ids[a], ids[b]) })
	for r, m := range byID {
		st.rank[m] = int32(r)
	}
	for t := range g.names {
		for p := range int(g.counts[t]) {
			st.topic[g.base[t]+p] = int32(t)
		}
	}
	for i := range st.own {
		st.own[i] = -1
	}
	st.resolveClaims()
	st.racks = newStickyRacks(g, st.topic)
	return st
}

// flat returns the flat number of partition p of the named topic, or -1 when
// the topic is not assigned or p is out of range.
func (st *sticky) flat(name string, p int32) int32 {
	t, ok := st.g.index[name]
	if !ok || p < 0 || p >= st.g.counts[t] {
		return -1
	}
	return int32(st.g.base[t]) + p
}

// resolveClaims applies Kafka's rules for partitions owned before the
// rebalance, walking members in HashMap order as Kafka does: the first claim
// stands; a later claim of a higher generation takes the partition over; a
// claim of the same generation as the standing one voids both.
func (st *sticky) resolveClaims() {
	g := st.g
	st.contested = make([]bool, g.total)
	st.owned = make([][]int32, len(g.members))
	if !slices.ContainsFunc(g.members, func(m Member) bool { return len(m.Owned) > 0 }) {
		return // a fresh group: nothing to resolve
	}
	holder := make([]int32, g.total) // member whose list holds the partition
	claim := make([]int32, g.total)  // Kafka's allPreviousPartitionsToOwner
	for i := range holder {
		holder[i], claim[i] = -1, -1
	}
	for _, m := range st.hash {
		mem := &g.members[m]
		if len(mem.Owned) == 0 {
			continue
		}
		n := 0
		for _, ps := range mem.Owned {
			n += len(ps)
		}
		list := make([]int32, 0, n)
		for name, ps := range mem.Owned {
			for _, p := range ps {
				if fp := st.flat(name, p); fp >= 0 {
					list = append(list, fp)
				}
			}
		}
		slices.Sort(list)
		list = slices.Compact(list)
		for _, fp := range list {
			other := claim[fp]
			switch {
			case other < 0:
				holder[fp], claim[fp] = int32(m), int32(m)
			case mem.Generation == g.members[other].Generation:
				st.contested[fp] = true
				holder[fp], claim[fp] = -1, int32(m)
			case mem.Generation > g.members[other].Generation:
				holder[fp], claim[fp] = int32(m), int32(m)
			}
		}
		st.owned[m] = list
	}
	for m, list := range st.owned {
		st.owned[m] = slices.DeleteFunc(list, func(fp int32) bool { return holder[fp] != int32(m) })
	}
}

// stickyRacks is AbstractStickyAssignor.RackInfo when rack-aware assignment
// applies: some member has a rack, some member's rack holds a replica, and not
// every partition is on the same racks.
type stickyRacks struct {
	member []string   // member -> rack, "" for none
	part   [][]string // flat partition -> racks of its replicas
	// consumers is, per flat partition, how many members (subscribed or not)
	// are on racks holding a replica; unassigned partitions with fewer go first.
	consumers []int32
}

func newStickyRacks(g *group, topic []int32) *stickyRacks {
	perRack := map[string]int32{}
	for i := range g.members {
		if r := g.members[i].Rack; r != "" {
			perRack[r]++
		}
	}
	if len(perRack) == 0 {
		return nil
	}
	part := make([][]string, g.total)
	var all []string
	for fp := range part {
		t := topic[fp]
		part[fp] = appendRacks(nil, g.partitionRacks(t, int32(fp-g.base[t])))
		all = appendRacks(all, part[fp])
	}
	matches := false
	for _, r := range all {
		if perRack[r] > 0 {
			matches = true
		}
	}
	if !matches || !slices.ContainsFunc(part, func(r []string) bool { return !sameRackSet(r, all) }) {
		return nil
	}
	rs := &stickyRacks{member: make([]string, len(g.members)), part: part, consumers: make([]int32, g.total)}
	for i := range g.members {
		rs.member[i] = g.members[i].Rack
	}
	for fp, racks := range part {
		for _, r := range racks {
			rs.consumers[fp] += perRack[r]
		}
	}
	return rs
}

// mismatch is RackInfo.racksMismatch: the member has a rack and it holds no
// replica of the partition.
func (rs *stickyRacks) mismatch(m int, fp int32) bool {
	if rs == nil {
		return false
	}
	r := rs.member[m]
	return r != "" && !slices.Contains(rs.part[fp], r)
}

// onRack reports whether the member has a rack that holds a replica.
func (rs *stickyRacks) onRack(m int, fp int32) bool {
	r := rs.member[m]
	return r != "" && slices.Contains(rs.part[fp], r)
}

// constrained is Kafka's ConstrainedAssignmentBuilder, for groups whose
// members all subscribe to the same topics.
func (st *sticky) constrained() error {
	g := st.g
	numMembers := int32(len(g.members))
	if numMembers == 0 {
		return nil
	}
	q := &quota{min: int32(g.total) / numMembers, max: (int32(g.total) + numMembers - 1) / numMembers, expectedOver: int32(g.total) % numMembers}
	maybeRevoked := map[int32]int32{}

	// Kafka's assignOwnedPartitions, in HashMap order: keep owned partitions up
	// to the quota; the first expectedOver members that own enough keep maxQuota.
	for _, m := range st.hash {
		own := st.owned[m]
		if st.racks != nil || slices.ContainsFunc(own, func(fp int32) bool { return st.contested[fp] }) {
			own = slices.DeleteFunc(slices.Clone(own), func(fp int32) bool {
				if st.racks.mismatch(m, fp) {
					maybeRevoked[fp] = int32(m)
					return true
				}
				return st.contested[fp]
			})
		}
		n := int32(len(own))
		var keep int32
		switch {
		case n < q.min:
			keep = n
			q.under = append(q.under, m)
		case n >= q.max && q.over < q.expectedOver:
			keep = q.max
			q.addOver()
		default:
			keep = q.min
			if q.over < q.expectedOver {
				q.atMin = append(q.atMin, m)
			}
		}
		if keep < n {
			// Kafka trims by (partition, topic) so that a member keeps partitions
			// of many topics rather than whole topics (KAFKA-16277).
			own = slices.Clone(own)
			slices.SortFunc(own, func(a, b int32) int {
				pa, pb := a-int32(g.base[st.topic[a]]), b-int32(g.base[st.topic[b]])
				if pa != pb {
					return int(pa - pb)
				}
				return int(st.topic[a] - st.topic[b])
			})
			for _, fp := range own[keep:] {
				maybeRevoked[fp] = int32(m)
			}
		}
		for _, fp := range own[:keep] {
			st.own[fp] = int32(m)
		}
		st.count[m] = keep
	}

	byID := func(a, b int) int { return int(st.rank[a] - st.rank[b]) }
	slices.SortFunc(q.under, byID)
	slices.SortFunc(q.atMin, byID)
	unassigned := make([]int32, 0, g.total)
	for fp, m := range st.own {
		if m < 0 {
			unassigned = append(unassigned, int32(fp))
		}
	}
	assignNew := func(fp int32, m int) int32 {
		st.own[fp] = int32(m)
		st.count[m]++
		if prev, ok := maybeRevoked[fp]; ok && prev != int32(m) || st.contested[fp] {
			if st.transferring == nil {
				st.transferring = map[int32]int32{}
			}
			st.transferring[fp] = int32(m)
		}
		return st.count[m]
	}
	if st.racks != nil {
		slices.SortStableFunc(unassigned, func(a, b int32) int { return int(st.racks.consumers[a] - st.racks.consumers[b]) })
		unassigned = st.rackRoundRobin(q, unassigned, assignNew)
	}
	if err := q.roundRobin(unassigned, assignNew); err != nil {
		return fmt.Errorf("assign: sticky: %w", err)
	}
	for _, m := range q.under {
		if q.over != q.expectedOver || st.count[m] != q.min {
			return fmt.Errorf("assign: sticky: member %q ends with %d partitions, quota %d..%d", g.members[m].ID, st.count[m], q.min, q.max)
		}
	}
	return nil
}

// quota is the bookkeeping of Kafka's ConstrainedAssignmentBuilder: every
// member gets min or max partitions, and exactly expectedOver of them max.
type quota struct {
	min, max           int32
	expectedOver, over int32
	under              []int // members below min, by member id
	atMin              []int // members at min that may still take one more
}

// addOver counts one more member at max; once all are, no member at min may
// take another.
func (q *quota) addOver() {
	q.over++
	if q.over == q.expectedOver {
		q.atMin = q.atMin[:0]
	}
}

// roundRobin is Kafka's assignRoundRobin: partitions are dealt to the members
// under min in turn, a member leaving the turn when it reaches min; once none
// is left, to the members at min, first come first served.
func (q *quota) roundRobin(unassigned []int32, assign func(int32, int) int32) error {
	// A pass over q.under keeps the members still under min in q.under[:kept]
	// and has q.under[next:] to visit.
	next, kept := 0, 0
	for _, fp := range unassigned {
		m, fromUnder := 0, true
		switch {
		case next < len(q.under):
		case kept > 0:
			q.under, next, kept = q.under[:kept], 0, 0
		case len(q.atMin) > 0:
			m, fromUnder = q.atMin[0], false
			q.atMin = q.atMin[1:]
		default:
			return fmt.Errorf("no member can take partition %d more", len(unassigned))
		}
		if fromUnder {
			m = q.under[next]
			next++
		}
		switch n := assign(fp, m); {
		case n == q.min:
			q.atMin = append(q.atMin, m)
			continue // and m leaves q.under
		case n == q.max:
			q.over++
		}
		if fromUnder {
			q.under[kept] = m
			kept++
		}
	}
	q.under = append(q.under[:kept], q.under[next:]...)
	return nil
}

// rackRoundRobin is Kafka's assignRackAwareRoundRobin: each partition goes to
// the next member under min, in turn, whose rack holds a replica, or else to
// the first such member at min. It returns the partitions left unassigned.
func (st *sticky) rackRoundRobin(q *quota, unassigned []int32, assign func(int32, int) int32) []int32 {
	next := 0
	left := unassigned[:0]
	for _, fp := range unassigned {
		if i := st.nextRackMember(fp, q.under, next); i >= 0 {
			m := q.under[i]
			if n := st.count[m] + 1; n >= q.min {
				q.under = slices.Delete(q.under, i, i+1)
				if n < q.max && q.over < q.expectedOver {
					q.atMin = append(q.atMin, m)
				}
			} else {
				i++
			}
			next = 0
			if len(q.under) > 0 {
				next = i % len(q.under)
			}
			assign(fp, m)
			continue
		}
		if i := st.nextRackMember(fp, q.atMin, 0); i >= 0 {
			m := q.atMin[i]
			if st.count[m]+1 == q.max {
				q.atMin = slices.Delete(q.atMin, i, i+1)
				q.addOver()
			}
			assign(fp, m)
			continue
		}
		left = append(left, fp)
	}
	return left
}

// nextRackMember is RackInfo.nextRackConsumer: the index of the first member
// of list, cyclically from first, whose rack holds a replica of fp, or -1.
func (st *sticky) nextRackMember(fp int32, list []int, first int) int {
	for i := range list {
		idx := (first + i) % len(list)
		if st.racks.onRack(list[idx], fp) {
			return idx
		}
	}
	return -1
}
