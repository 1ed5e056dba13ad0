package assign

import (
	"container/heap"
	"fmt"
	"slices"
)

// general assigns a group whose members subscribe to different topics as
// Kafka's GeneralAssignmentBuilder does (see Sticky and balance for where
// Strand parts from it).
func (st *sticky) general() error {
	g := st.g
	// Kafka keeps every valid owned partition, however many, and then
	// balances; dropping one for a topic no longer subscribed or on another
	// rack means a revocation.
	wasOwned := make([]bool, g.total)
	revocationRequired := false
	for m, list := range st.owned {
		for _, fp := range list {
			// Unlike the constrained builder, Kafka's general builder keeps a
			// contested partition that a higher generation won afterwards.
			switch {
			case !g.subscribes(m, st.topic[fp]) || st.racks.mismatch(m, fp):
				revocationRequired = true
			default:
				st.own[fp] = int32(m)
				st.count[m]++
				wasOwned[fp] = true
			}
		}
	}
	// Kafka's initializing: no member kept anything.
	initializing := !slices.ContainsFunc(st.count, func(n int32) bool { return n > 0 })
	subscribers := subscribersInOrder(g, st.byRank())
	order := make([]int32, len(g.names))
	for t := range order {
		order[t] = int32(t)
	}
	// Topics with fewer potential consumers first, then by name (TopicComparator).
	slices.SortStableFunc(order, func(a, b int32) int { return len(subscribers[a]) - len(subscribers[b]) })
	if st.racks != nil {
		for _, t := range order {
			st.fillRackAware(t, subscribers[t])
		}
	}
	f := &filler{st: st}
	for _, t := range order {
		f.fill(t, subscribers[t])
	}
	// Kafka first passes over the partitions it just assigned (unless owned
	// partitions had to be dropped), then over all, in first-fill order.
	var all, fresh []int32
	for _, t := range order {
		for fp := int32(st.g.base[t]); fp < int32(st.g.base[t])+st.g.counts[t]; fp++ {
			all = append(all, fp)
			if !wasOwned[fp] {
				fresh = append(fresh, fp)
			}
		}
	}
	return st.balance(fresh, all, initializing, revocationRequired)
}

// balance is the end of Kafka's GeneralAssignmentBuilder.balance: the
// passes of performReassignments, then the return to the state before them
// when they did not lower the balance score.
//
// Kafka's passes can run forever (issue 16 has a group on which its
// StickyAssignor never returns): when a partition that already moved in this
// rebalance moves on, Kafka moves instead a partition of the same topic that
// went the opposite way, from whichever member holds it now, even when that
// member is not more loaded than the receiver. Every other move goes from a
// member to one with at least two fewer partitions, which lowers the sum of
// the squares of the members' sizes by at least two, so there can only be
// finitely many of them; a run that does not end makes unboundedly many of
// the others. Strand follows Kafka move for move while it has made at most
// as many such non-improving moves as the group has partitions; past that it
// starts again from the state before the passes and makes only improving
// moves, which ends after at most half the sum of squares moves. Both counts
// are checked.
func (st *sticky) balance(fresh, all []int32, initializing, revocationRequired bool) error {
	lo, hi := st.count[0], st.count[0]
	for _, n := range st.count {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo <= 1 {
		return nil // nothing can move
	}
	own, count := slices.Clone(st.own), slices.Clone(st.count)
	for _, safe := range []bool{false, true} {
		if safe {
			copy(st.own, own)
			copy(st.count, count)
		}
		b := newBalancer(st, safe)
		if !revocationRequired {
			b.pass(fresh)
		}
		moved := b.pass(all)
		if b.err != nil {
			return b.err
		}
		if b.failed {
			continue
		}
		if !initializing && moved && b.nonImproving > 0 && b.score(st.count) >= b.score(count) {
			// Kafka keeps the assignment before the passes when they did
			// not balance it better.
			copy(st.own, own)
			copy(st.count, count)
		}
		return nil
	}
	return nil
}

// score is Kafka's getBalanceScore of the members that take part in the
// balancing: the sum over all pairs of the difference of their sizes.
func (b *balancer) score(count []int32) int64 {
	var sizes []int64
	for m, n := range count {
		if !b.parked[m] {
			sizes = append(sizes, int64(n))
		}
	}
	slices.Sort(sizes)
	var score, prefix int64
	for i, n := range sizes {
		score += int64(i)*n - prefix
		prefix += n
	}
	return score
}

// byRank returns the members in member id order.
func (st *sticky) byRank() []int {
	out := make([]int, len(st.rank))
	for m, r := range st.rank {
		out[r] = m
	}
	return out
}

// less orders members as Kafka's SubscriptionComparator: by partitions
// assigned, then member id.
func (st *sticky) less(a, b int) bool {
	if st.count[a] != st.count[b] {
		return st.count[a] < st.count[b]
	}
	return st.rank[a] < st.rank[b]
}

// fillRackAware is Kafka's first maybeAssign pass with racks: each unassigned
// partition of topic t goes to the least loaded subscriber whose rack does not
// mismatch it, if any.
func (st *sticky) fillRackAware(t int32, subs []int) {
	base := int32(st.g.base[t])
	for fp := base; fp < base+st.g.counts[t]; fp++ {
		if st.own[fp] >= 0 {
			continue
		}
		best := -1
		for _, m := range subs {
			if !st.racks.mismatch(m, fp) && (best < 0 || st.less(m, best)) {
				best = m
			}
		}
		if best >= 0 {
			st.own[fp] = int32(best)
			st.count[best]++
		}
	}
}

// filler is Kafka's maybeAssign without racks, computed per topic in time
// linear in partitions and subscribers: giving each partition to the least
// loaded subscriber (by size, then member id) takes the members of the lowest
// level in id order, each rising one level, and a level, once exhausted, is
// followed by the merge of the members it raised and those already there.
type filler struct {
	st                   *sticky
	sorted, level, raise []int
}

func (f *filler) fill(t int32, subs []int) {
	st := f.st
	base := int32(st.g.base[t])
	end := base + st.g.counts[t]
	fp := base
	for fp < end && st.own[fp] >= 0 {
		fp++
	}
	if fp == end || len(subs) == 0 {
		return
	}
	f.sorted = append(f.sorted[:0], subs...)
	slices.SortStableFunc(f.sorted, func(a, b int) int { return int(st.count[a] - st.count[b]) })
	rest := f.sorted
	cur := st.count[rest[0]]
	f.level, f.raise = f.level[:0], f.raise[:0]
	for len(rest) > 0 && st.count[rest[0]] == cur {
		f.level = append(f.level, rest[0])
		rest = rest[1:]
	}
	next := 0
	for ; fp < end; fp++ {
		if st.own[fp] >= 0 {
			continue
		}
		if next == len(f.level) {
			cur++
			var same []int
			for len(rest) > 0 && st.count[rest[0]] == cur {
				same = append(same, rest[0])
				rest = rest[1:]
			}
			f.level = mergeByRank(st, f.level[:0], f.raise, same)
			f.raise, next = f.raise[:0], 0
		}
		m := f.level[next]
		next++
		st.own[fp] = int32(m)
		st.count[m]++
		f.raise = append(f.raise, m)
	}
}

// mergeByRank appends to dst the merge of a and b, both in member id order.
// dst must not share memory with a or b beyond what it has consumed.
func mergeByRank(st *sticky, dst, a, b []int) []int {
	merged := make([]int, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if st.rank[a[0]] < st.rank[b[0]] {
			merged, a = append(merged, a[0]), a[1:]
		} else {
			merged, b = append(merged, b[0]), b[1:]
		}
	}
	merged = append(append(merged, a...), b...)
	return append(dst, merged...)
}

// balancer is Kafka's GeneralAssignmentBuilder.performReassignments: passes
// over partitions, in the order of the first fill, moving each partition
// whose owner has at least two more partitions than the least loaded member
// subscribed to its topic, to that member (or back to its owner of an earlier
// generation), until a pass moves nothing. Members with the same
// subscription form a class whose members a heap keeps least loaded first,
// so the least loaded subscriber of a topic is the best top of the classes
// subscribed to it.
type balancer struct {
	st      *sticky
	class   []int32   // member -> class, -1 when subscribed to nothing
	byTopic [][]int32 // topic -> classes subscribed to it
	heaps   []*classHeap
	pos     []int                // member -> index in its class heap
	prev    []int32              // flat partition -> owner of an older generation, or -1
	parked  []bool               // member -> left out of Kafka's balancing (canConsumerParticipateInReassignment)
	moves   map[int32]move       // flat partition -> net move so far
	byPair  map[pairKey]*pairSet // partitions of a topic moved from one member to another
	tpHash  []int32              // topic -> String.hashCode of its name

	// safe makes only moves that lower the sum of squares of the sizes.
	safe bool
	// nonImproving counts Kafka's moves that do not; past limit the
	// balancer gives up following Kafka and sets failed.
	nonImproving, limit int
	failed              bool
	err                 error
	// made counts moves; bound is the most the argument in balance allows.
	made, bound int64
}

type move struct{ src, dst int32 }

type pairKey struct{ topic, src, dst int32 }

func newBalancer(st *sticky, safe bool) *balancer {
	g := st.g
	b := &balancer{
		st:      st,
		class:   make([]int32, len(g.members)),
		byTopic: make([][]int32, len(g.names)),
		pos:     make([]int, len(g.members)),
		parked:  make([]bool, len(g.members)),
		moves:   map[int32]move{},
		byPair:  map[pairKey]*pairSet{},
		tpHash:  make([]int32, len(g.names)),
		safe:    safe,
		limit:   g.total,
	}
	ids := map[*int32]int32{}
	subscribers := make([]int, len(g.names))
	for m, subs := range g.subs {
		for _, t := range subs {
			subscribers[t]++
		}
		if len(subs) == 0 {
			b.class[m] = -1
			continue
		}
		id, ok := ids[&subs[0]] // members with equal subscriptions share the resolved slice
		if !ok {
			id = int32(len(b.heaps))
			ids[&subs[0]] = id
			for _, t := range subs {
				b.byTopic[t] = append(b.byTopic[t], id)
			}
			b.heaps = append(b.heaps, &classHeap{b: b})
		}
		b.class[m] = id
		b.heaps[id].members = append(b.heaps[id].members, m)
	}
	for _, h := range b.heaps {
		for i, m := range h.members {
			b.pos[m] = i
		}
		heap.Init(h)
	}
	for t, name := range g.names {
		b.tpHash[t] = javaHash(name)
	}
	// A member that holds every partition it could and none of a topic with
	// two subscribers or more takes no part.
	movable := make([]bool, len(g.members))
	for fp, m := range st.own {
		if m >= 0 && subscribers[st.topic[fp]] >= 2 {
			movable[m] = true
		}
	}
	var sumSq int64
	for m, subs := range g.subs {
		potential := int32(0)
		for _, t := range subs {
			potential += g.counts[t]
		}
		b.parked[m] = st.count[m] == potential && !movable[m]
		sumSq += int64(st.count[m]) * int64(st.count[m])
	}
	// Each improving move lowers the sum of squares by two at least; each
	// other raises it by 2*(total+1) at most and is itself one move.
	total := int64(g.total)
	b.bound = sumSq/2 + int64(b.limit)*(total+2)
	b.prev = st.previousOwners()
	return b
}

// previousOwners is Kafka's prepopulateCurrentAssignments: for each partition
// claimed by members of a generation older than the newest, the claimant of
// the highest such generation (the first in HashMap order on a tie).
func (st *sticky) previousOwners() []int32 {
	g := st.g
	maxGen := int32(-1)
	for i := range g.members {
		maxGen = max(maxGen, g.members[i].Generation)
	}
	prev := make([]int32, g.total)
	for i := range prev {
		prev[i] = -1
	}
	for _, m := range st.hash {
		mem := &g.members[m]
		if mem.Generation >= maxGen {
			continue
		}
		for name, ps := range mem.Owned {
			for _, p := range ps {
				if fp := st.flat(name, p); fp >= 0 && (prev[fp] < 0 || mem.Generation > g.members[prev[fp]].Generation) {
					prev[fp] = int32(m)
				}
			}
		}
	}
	return prev
}

// least returns the least loaded member subscribed to topic t.
func (b *balancer) least(t int32) int {
	best := -1
	for _, c := range b.byTopic[t] {
		if top := b.heaps[c].members[0]; best < 0 || b.st.less(top, best) {
			best = top
		}
	}
	return best
}

// pass runs performReassignments over list and reports whether it moved anything.
func (b *balancer) pass(list []int32) bool {
	st := b.st
	moved := false
	for modified := true; modified && !b.failed; {
		modified = false
		for _, fp := range list {
			c := int(st.own[fp])
			if c < 0 {
				continue
			}
			t := st.topic[fp]
			// Kafka returns a partition to its owner of an older generation
			// even when that member no longer subscribes to the topic
			// (AbstractStickyAssignor.java performReassignments, "if
			// (prevAssignment.containsKey(partition) && ..."), or fails with
			// a NullPointerException when that member takes no part in the
			// balancing; Strand returns it only to a subscriber.
			if p := int(b.prev[fp]); p >= 0 && p != c && st.g.subscribes(p, t) && st.count[c] > st.count[p]+1 {
				b.reassign(fp, c, p)
				modified = true
			} else if to := b.least(t); st.count[c] > st.count[to]+1 {
				b.reassign(fp, c, to)
				modified = true
			}
			if b.failed {
				return moved
			}
		}
		moved = moved || modified
	}
	return moved
}

// reassign is Kafka's reassignPartition: fp, owned by from, goes to to, or
// rather the partition getTheActualPartitionToBeMoved picks instead.
func (b *balancer) reassign(fp int32, from, to int) {
	st := b.st
	actual := b.actual(fp, from, to)
	if x := st.own[actual]; st.count[x] <= st.count[to]+1 {
		if b.safe {
			actual = fp
		} else if b.nonImproving++; b.nonImproving > b.limit {
			b.failed = true
			return
		}
	}
	if b.made++; b.made > b.bound {
		// The argument in balance says this cannot happen.
		b.err = fmt.Errorf("%w: sticky balancing made %d moves, more than its bound %d", ErrInternal, b.made, b.bound)
		b.failed = true
		return
	}
	b.move(actual, to)
}

// actual is Kafka's getTheActualPartitionToBeMoved: when a partition of the
// same topic moved the opposite way before, that one moves back instead, so
// that no topic's partitions swap between two members. Kafka takes the first
// of a java.util.HashSet<TopicPartition>, which Strand reproduces.
func (b *balancer) actual(fp int32, from, to int) int32 {
	if m, ok := b.moves[fp]; ok {
		from = int(m.src)
	}
	back := b.byPair[pairKey{b.st.topic[fp], int32(to), int32(from)}]
	if back == nil {
		return fp
	}
	return back.first()
}

// move gives fp to to, recording the net movement.
func (b *balancer) move(fp int32, to int) {
	st := b.st
	from := int(st.own[fp])
	src := int32(from)
	if m, ok := b.moves[fp]; ok {
		b.forget(fp, m)
		src = m.src
	}
	if src != int32(to) {
		m := move{src, int32(to)}
		b.moves[fp] = m
		k := pairKey{st.topic[fp], m.src, m.dst}
		set := b.byPair[k]
		if set == nil {
			set = newPairSet()
			b.byPair[k] = set
		}
		set.add(fp, b.partitionHash(fp))
	}
	st.own[fp] = int32(to)
	// One count at a time: heap.Fix repairs a single changed element.
	st.count[from]--
	heap.Fix(b.heaps[b.class[from]], b.pos[from])
	st.count[to]++
	heap.Fix(b.heaps[b.class[to]], b.pos[to])
}

func (b *balancer) forget(fp int32, m move) {
	delete(b.moves, fp)
	k := pairKey{b.st.topic[fp], m.src, m.dst}
	if set := b.byPair[k]; set.remove(fp) {
		delete(b.byPair, k)
	}
}

// partitionHash is TopicPartition.hashCode.
func (b *balancer) partitionHash(fp int32) int32 {
	t := b.st.topic[fp]
	p := fp - int32(b.st.g.base[t])
	return 31*(31+p) + b.tpHash[t]
}

// pairSet is a java.util.HashSet<TopicPartition> made with new HashSet<>()
// as far as its iteration order goes: by bucket of the spread hash in a
// table that starts at 16 and doubles when more than three quarters full,
// then by insertion within a bucket (resizes keep that order, removals never
// shrink the table).
type pairSet struct {
	capacity int32
	elems    []pairElem // in insertion order
}

type pairElem struct {
	fp   int32
	hash int32
}

func newPairSet() *pairSet { return &pairSet{capacity: 16} }

func (s *pairSet) add(fp, hash int32) {
	s.elems = append(s.elems, pairElem{fp, hash})
	if int32(len(s.elems)) > s.capacity*3/4 {
		s.capacity *= 2
	}
}

// remove removes fp and reports whether the set is now empty.
func (s *pairSet) remove(fp int32) bool {
	if i := slices.IndexFunc(s.elems, func(e pairElem) bool { return e.fp == fp }); i >= 0 {
		s.elems = slices.Delete(s.elems, i, i+1)
	}
	return len(s.elems) == 0
}

// first is iterator().next().
func (s *pairSet) first() int32 {
	best, bestBucket := int32(-1), int32(0)
	for _, e := range s.elems {
		if bk := javaBucket(e.hash, s.capacity); best < 0 || bk < bestBucket {
			best, bestBucket = e.fp, bk
		}
	}
	return best
}

// classHeap holds the members of one class, least loaded (then lowest member
// id) on top.
type classHeap struct {
	b       *balancer
	members []int
}

func (h *classHeap) Len() int           { return len(h.members) }
func (h *classHeap) Less(i, j int) bool { return h.b.st.less(h.members[i], h.members[j]) }
func (h *classHeap) Swap(i, j int) {
	h.members[i], h.members[j] = h.members[j], h.members[i]
	h.b.pos[h.members[i]] = i
	h.b.pos[h.members[j]] = j
}
func (h *classHeap) Push(any) {}
func (h *classHeap) Pop() any { return nil }

// holdBackTransfers is CooperativeStickyAssignor.computePartitionsTransferringOwnership
// and adjustAssignment for the general case: a partition given to a member
// that did not own it, and no longer given to a member that did, is left out
// until that member has revoked it.
func (st *sticky) holdBackTransfers() {
	g := st.g
	revoked := make([]bool, g.total)
	kept := make([]bool, g.total)
	for m := range g.members {
		for name, ps := range g.members[m].Owned {
			for _, p := range ps {
				if fp := st.flat(name, p); fp >= 0 {
					if st.own[fp] == int32(m) {
						kept[fp] = true
					} else {
						revoked[fp] = true
					}
				}
			}
		}
	}
	for fp, m := range st.own {
		if m >= 0 && !kept[fp] && revoked[fp] {
			st.own[fp] = -1
		}
	}
}

// planFromOwners builds a Plan from the owner of each flat partition.
// Walking partitions in order lays each member's out, sorted, in one shared
// array; each member's map is then built in one go, which keeps the map
// writes of a large group cache friendly.
func planFromOwners(g *group, own []int32, topic []int32) Plan {
	n := len(g.members)
	start := make([]int32, n+1) // member m's partitions are backing[start[m]:start[m+1]]
	for _, m := range own {
		if m >= 0 {
			start[m+1]++
		}
	}
	for m := range n {
		start[m+1] += start[m]
	}
	backing := make([]int32, start[n])
	fill := slices.Clone(start[:n])
	for fp, m := range own {
		if m >= 0 {
			backing[fill[m]] = int32(fp)
			fill[m]++
		}
	}
	plan := make(Plan, n)
	for m := range n {
		part := backing[start[m]:start[m+1]]
		topics := 0
		for i, fp := range part {
			if i == 0 || topic[fp] != topic[part[i-1]] {
				topics++
			}
		}
		mp := make(map[string][]int32, topics)
		for i := 0; i < len(part); {
			t := topic[part[i]]
			j := i
			for ; j < len(part) && topic[part[j]] == t; j++ {
				part[j] -= int32(g.base[t])
			}
			mp[g.names[t]] = part[i:j:j]
			i = j
		}
		plan[g.members[m].ID] = mp
	}
	return plan
}
