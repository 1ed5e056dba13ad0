package assign

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
)

// Uniform is the "uniform" assignor of KIP-848's group coordinator, the
// default of the new consumer protocol (group-coordinator UniformAssignor),
// bit for bit as Kafka's current code computes it. It ignores generations
// and racks: the coordinator knows what each member owns, and Kafka removed
// rack awareness from it (KAFKA-16694).
//
// Like the coordinator, it takes the group as homogeneous when every member
// subscribes to the same topic names, counting names of topics that do not
// exist (ModernGroup.subscriptionType), and then runs
// UniformHomogeneousAssignmentBuilder: N partitions over M members, N/M each
// and one more for N%M of them; a member keeps what it owns up to its quota,
// and any member may keep the one extra partition unless the members after
// it are needed to take the extras left (KAFKA-18688, so that a balanced
// group does not move); the rest is dealt to the members in turn. Otherwise
// it runs UniformHeterogeneousAssignmentBuilder: members keep every owned
// partition they still subscribe to, the rest go topic by topic (most
// partitions per subscriber first) to the least loaded subscribers, and up
// to 16 rounds over the topics move partitions from the most to the least
// loaded subscribers of each topic.
//
// Kafka's result depends on orders Strand reproduces as the coordinator
// builds them (TargetAssignmentBuilder): members in java.util.HashMap order of
// their ids, put in the order given; topics in HashSet order of their ids
// (Topic.ID; a zero ID is replaced by the first 16 bytes of the FNV-1a 128
// hash of the name), put in the HashSet order of the first member's
// subscribed names, themselves put in the order listed; a member's owned
// topics in HashMap order, put in name order, and its partitions of a topic
// in HashSet<Integer> order, put in ascending order.
//
// Where Kafka's input cannot be what Strand is given, Strand keeps the
// result valid: a partition that two members claim stays with the first in
// the coordinator's member order, and owned partitions that do not exist are
// dropped (Kafka's coordinator never builds either).
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
	u := newUniform(g)
	if len(members) > 0 {
		if g.classes <= 1 {
			err = u.homogeneous()
		} else {
			err = u.heterogeneous()
		}
		if err != nil {
			return nil, err
		}
	}
	return planFromOwners(g, u.own, u.topic), nil
}

// uniform is the state of one uniform assignment. Members are numbered by
// their position in the coordinator's member order ("index"); partitions
// are flat numbers as in sticky.
type uniform struct {
	g      *group
	member []int      // index -> member
	index  []int      // member -> index
	ids    [][16]byte // topic -> id
	topic  []int32    // flat partition -> topic
	own    []int32    // flat partition -> member (not index), -1 when unassigned
	// owned[i] is what the member at index i owns, topic by topic in the
	// order Kafka iterates its assignment map, each topic's partitions in
	// its HashSet order.
	owned [][]ownedTopic
}

type ownedTopic struct {
	t     int32
	parts []int32 // partition numbers
}

func newUniform(g *group) *uniform {
	ids := make([]string, len(g.members))
	for i := range g.members {
		ids[i] = g.members[i].ID
	}
	u := &uniform{
		g:      g,
		member: javaHashMapOrder(ids),
		index:  make([]int, len(g.members)),
		ids:    make([][16]byte, len(g.names)),
		topic:  make([]int32, g.total),
		own:    make([]int32, g.total),
		owned:  make([][]ownedTopic, len(g.members)),
	}
	for i, m := range u.member {
		u.index[m] = i
	}
	for t, name := range g.names {
		u.ids[t] = g.ids[t]
		if u.ids[t] == [16]byte{} {
			h := fnv.New128a()
			h.Write([]byte(name))
			copy(u.ids[t][:], h.Sum(nil))
		}
		for p := range int(g.counts[t]) {
			u.topic[g.base[t]+p] = int32(t)
		}
	}
	for i := range u.own {
		u.own[i] = -1
	}
	u.readOwned()
	return u
}

// readOwned fills owned: a member's owned partitions, put in name order
// into a HashMap keyed by topic id, each topic's put in ascending order into
// a HashSet<Integer>, both iterating by bucket, then in the order put.
func (u *uniform) readOwned() {
	g := u.g
	claimed := make([]bool, g.total)
	var packed, keys []int64
	idHash := make([]int32, len(g.names))
	for t := range idHash {
		idHash[t] = uuidHash(u.ids[t])
	}
	for i, m := range u.member {
		packed = packed[:0]
		for name, ps := range g.members[m].Owned {
			t, ok := g.index[name]
			if !ok {
				continue
			}
			for _, p := range ps {
				if fp := u.flat(t, p); fp >= 0 && !claimed[fp] {
					claimed[fp] = true
					packed = append(packed, pack(t, p))
				}
			}
		}
		if len(packed) == 0 {
			continue
		}
		slices.Sort(packed)
		parts := make([]int32, len(packed))
		topics := 0
		for k := range packed {
			if k == 0 || packed[k]>>32 != packed[k-1]>>32 {
				topics++
			}
		}
		list := make([]ownedTopic, 0, topics)
		for k := 0; k < len(packed); {
			t, _ := unpack(packed[k])
			start := k
			for ; k < len(packed) && int32(packed[k]>>32) == t; k++ {
				_, parts[k] = unpack(packed[k])
			}
			set := parts[start:k:k]
			capacity := int32(javaCopyCapacity(len(set)))
			if set[len(set)-1] >= capacity {
				slices.SortFunc(set, func(a, b int32) int {
					if ba, bb := javaBucket(a, capacity), javaBucket(b, capacity); ba != bb {
						return int(ba - bb)
					}
					return int(a - b)
				})
			}
			list = append(list, ownedTopic{t, set})
		}
		// Sort by bucket, then by position in name order.
		capacity := int32(javaGrownCapacity(len(list)))
		keys = keys[:0]
		for k, o := range list {
			keys = append(keys, int64(javaBucket(idHash[o.t], capacity))<<32|int64(k))
		}
		slices.Sort(keys)
		u.owned[i] = make([]ownedTopic, len(list))
		for k, key := range keys {
			u.owned[i][k] = list[int32(key)]
		}
	}
}

// flat returns the flat number of partition p of topic t, or -1 when there
// is no such partition.
func (u *uniform) flat(t int32, p int32) int32 {
	if p < 0 || p >= u.g.counts[t] {
		return -1
	}
	return int32(u.g.base[t]) + p
}

// subscribed reports whether the member at index i subscribes to topic t.
func (u *uniform) subscribed(i int, t int32) bool { return u.g.subscribes(u.member[i], t) }

// homogeneous is UniformHomogeneousAssignmentBuilder as of KAFKA-18688.
func (u *uniform) homogeneous() error {
	g := u.g
	topics := u.homogeneousTopics()
	if len(topics) == 0 {
		return nil
	}
	assigned := make([]bool, g.total)
	for _, list := range u.owned {
		for _, o := range list {
			for _, p := range o.parts {
				assigned[u.flat(o.t, p)] = true
			}
		}
	}
	var unassigned []int32 // flat partitions
	total := 0
	inSubscription := make([]bool, len(g.names))
	for _, t := range topics {
		inSubscription[t] = true
		total += int(g.counts[t])
		for fp := int32(g.base[t]); fp < int32(g.base[t])+g.counts[t]; fp++ {
			if !assigned[fp] {
				unassigned = append(unassigned, fp)
			}
		}
	}
	numMembers := len(u.member)
	minQuota, extra := total/numMembers, total%numMembers
	type unfilled struct{ i, quota int }
	var fill []unfilled
	for i, m := range u.member {
		quota, hasExtra := minQuota, false
		if extra > 0 {
			quota, hasExtra = quota+1, true
		}
		for _, o := range u.owned[i] {
			if !inSubscription[o.t] {
				continue // the whole topic is revoked
			}
			for _, p := range o.parts {
				fp := u.flat(o.t, p)
				if quota > 0 {
					quota--
					u.own[fp] = int32(m)
				} else {
					unassigned = append(unassigned, fp)
				}
			}
		}
		// The extra partition goes to another member, unless too few members
		// are left for the extras still to give.
		if quota > 0 && hasExtra && numMembers-i > extra {
			quota, hasExtra = quota-1, false
		}
		if quota > 0 {
			fill = append(fill, unfilled{i, quota})
		}
		if hasExtra {
			extra--
		}
	}
	next := 0
	for _, f := range fill {
		for k := 0; k < f.quota && next < len(unassigned); k++ {
			u.own[unassigned[next]] = int32(u.member[f.i])
			next++
		}
	}
	if next < len(unassigned) {
		return fmt.Errorf("%w: uniform assignor left %d partitions unassigned", ErrInternal, len(unassigned)-next)
	}
	return nil
}

// homogeneousTopics returns the topics of the group's subscription in the
// order Kafka's homogeneous builder iterates them: a HashSet<Uuid> made from
// the first member's subscribed ids, which iterate in the order of the
// HashSet<String> of its subscribed names.
func (u *uniform) homogeneousTopics() []int32 {
	names := u.g.members[u.member[0]].Topics
	var distinct []string
	var hashes []int32
	for _, name := range names {
		if !slices.Contains(distinct, name) {
			distinct = append(distinct, name)
			hashes = append(hashes, javaHash(name))
		}
	}
	var topics []int32
	var idHashes []int32
	for _, k := range javaHashOrder(hashes, javaCopyCapacity(len(names))) {
		if t, ok := u.g.index[distinct[k]]; ok {
			topics = append(topics, t)
			idHashes = append(idHashes, uuidHash(u.ids[t]))
		}
	}
	order := javaHashOrder(idHashes, javaCopyCapacity(len(distinct)))
	out := make([]int32, len(order))
	for k, j := range order {
		out[k] = topics[j]
	}
	return out
}

// heterogeneous is UniformHeterogeneousAssignmentBuilder (KAFKA-17710).
func (u *uniform) heterogeneous() error {
	g := u.g
	h := &hetero{u: u, size: make([]int32, len(u.member)), subscribers: make([][]int, len(g.names)),
		start: make([]int, len(u.member)), end: make([]int, len(u.member))}
	for i, m := range u.member {
		for _, t := range g.subs[m] {
			h.subscribers[t] = append(h.subscribers[t], i)
		}
	}
	// Members keep every owned partition of a topic they subscribe to.
	for i, m := range u.member {
		for _, o := range u.owned[i] {
			if u.subscribed(i, o.t) {
				h.size[i] += int32(len(o.parts))
				for _, p := range o.parts {
					u.own[u.flat(o.t, p)] = int32(m)
				}
			}
		}
	}
	var withUnassigned []int32
	for t := range g.names {
		if len(h.subscribers[t]) > 0 && slices.Contains(u.own[g.base[t]:g.base[t]+int(g.counts[t])], -1) {
			withUnassigned = append(withUnassigned, int32(t))
		}
	}
	slices.SortFunc(withUnassigned, h.compareTopics)
	b := &rangeBalancer{size: h.size}
	for _, t := range withUnassigned {
		b.initialize(h.subscribers[t])
		for fp := int32(g.base[t]); fp < int32(g.base[t])+g.counts[t]; fp++ {
			if u.own[fp] < 0 {
				h.assign(fp, b.nextLeast())
			}
		}
	}
	var shared []int32
	for t := range g.names {
		if len(h.subscribers[t]) >= 2 {
			shared = append(shared, int32(t))
		}
	}
	slices.SortFunc(shared, h.compareTopics)
	return h.balance(shared, b)
}

// hetero is the heterogeneous builder's state.
type hetero struct {
	u           *uniform
	size        []int32 // index -> partitions assigned
	subscribers [][]int // topic -> indexes of its subscribers, ascending
	start, end  []int   // balanceTopic's ranges, zero between calls
}

// compareTopics orders topics by partitions per subscriber, most first, then
// by subscribers, fewest first, then by id.
func (h *hetero) compareTopics(a, b int32) int {
	g := h.u.g
	na, nb := int64(g.counts[a]), int64(g.counts[b])
	sa, sb := int64(len(h.subscribers[a])), int64(len(h.subscribers[b]))
	// na/sa > nb/sb, exactly, as Double.compare of the quotients is for
	// counts below 2^53.
	if c := cmp.Compare(nb*sa, na*sb); c != 0 {
		return c
	}
	if c := cmp.Compare(sa, sb); c != 0 {
		return c
	}
	return compareUUID(h.u.ids[a], h.u.ids[b])
}

// assign gives flat partition fp to the member at index i.
func (h *hetero) assign(fp int32, i int) {
	u := h.u
	if old := u.own[fp]; old >= 0 {
		h.size[u.index[old]]--
	}
	u.own[fp] = int32(u.member[i])
	h.size[i]++
}

// maxBalanceRounds is MAX_ITERATION_COUNT of Kafka's heterogeneous builder.
const maxBalanceRounds = 16

// balance is balanceTopics: rounds over the topics until a whole round moves
// nothing, 16 rounds at most.
func (h *hetero) balance(topics []int32, b *rangeBalancer) error {
	if len(topics) == 0 {
		return nil
	}
	last := -1 // the last topic that moved a partition
	var parts []int32
	for range maxBalanceRounds {
		for k, t := range topics {
			if k == last {
				return nil
			}
			moved, err := h.balanceTopic(t, b, parts[:0])
			if err != nil {
				return err
			}
			if moved > 0 || last == -1 {
				last = k
			}
		}
	}
	return nil
}

// balanceTopic is Kafka's balanceTopic: it moves the last partitions of the
// most loaded subscribers of topic t to the least loaded ones until the two
// ranges differ by one at most, and returns how many it moved. Every turn of
// its loop either drops a member from the most loaded range or takes a
// partition from a member's range of the topic, so it ends within
// subscribers + partitions + 1 turns, which it checks.
func (h *hetero) balanceTopic(t int32, b *rangeBalancer, parts []int32) (int, error) {
	u := h.u
	g := u.g
	subs := h.subscribers[t]
	if b.initialize(subs) <= 1 {
		return 0, nil
	}
	base := int32(g.base[t])
	for p := range g.counts[t] {
		parts = append(parts, p)
	}
	ownerIndex := func(p int32) int {
		if m := u.own[base+p]; m >= 0 {
			return u.index[m]
		}
		return -1
	}
	slices.SortFunc(parts, func(a, c int32) int {
		if oa, oc := ownerIndex(a), ownerIndex(c); oa != oc {
			return oa - oc
		}
		return int(a - c)
	})
	// The partitions of the owner at index i are parts[start[i]:end[i]],
	// empty for a member that owns none.
	start, end := h.start, h.end
	for _, p := range parts {
		o := ownerIndex(p)
		start[o], end[o] = 0, 0
	}
	for k, p := range parts {
		o := ownerIndex(p)
		if end[o] == 0 {
			start[o] = k
		}
		end[o] = k + 1
	}
	defer func() {
		for _, i := range subs {
			start[i], end[i] = 0, 0
		}
	}()
	moved := 0
	bound := len(subs) + len(parts) + 1
	for turns := 0; !b.balanced(); turns++ {
		if turns > bound {
			return moved, fmt.Errorf("%w: uniform balancing of a topic took more than %d turns", ErrInternal, bound)
		}
		most := -1
		for {
			if most = b.nextMost(); most < 0 {
				break
			}
			if end[most]-start[most] <= 0 {
				b.excludeMost()
				turns++
				continue
			}
			break
		}
		if most < 0 {
			break
		}
		end[most]--
		p := parts[end[most]]
		least := b.nextLeast()
		if b.balanced() {
			break
		}
		h.assign(base+p, least)
		moved++
	}
	return moved, nil
}

// rangeBalancer is the heterogeneous builder's MemberAssignmentBalancer: the
// subscribers of a topic sorted by size, with a range of least loaded members
// that grows rightwards as it is filled and a range of most loaded members
// that grows leftwards as it is emptied.
type rangeBalancer struct {
	size   []int32 // index -> partitions assigned, shared with hetero
	sorted []int   // member indexes
	keys   []int64 // scratch for initialize

	leastEnd   int   // sorted[:leastEnd] is the least loaded range
	leastCount int32 // its size before this round of assignments
	nextL      int

	mostStart, mostEnd int   // sorted[mostStart:mostEnd] is the most loaded range
	mostCount          int32 // its size before this round of removals
	nextM              int
}

// initialize resets the balancer to members and returns the difference
// between the largest and the smallest of them.
func (b *rangeBalancer) initialize(members []int) int32 {
	// By size, then index: sorting the two packed in one integer is much
	// faster than a comparison function on large groups.
	b.keys = b.keys[:0]
	for _, m := range members {
		b.keys = append(b.keys, int64(b.size[m])<<32|int64(m))
	}
	slices.Sort(b.keys)
	b.sorted = b.sorted[:0]
	for _, k := range b.keys {
		b.sorted = append(b.sorted, int(int32(k)))
	}
	n := len(b.sorted)
	b.leastEnd, b.leastCount, b.nextL = 0, b.size[b.sorted[0]]-1, 0
	b.mostStart, b.mostEnd, b.mostCount, b.nextM = n, n, b.size[b.sorted[n-1]]+1, n-1
	return b.size[b.sorted[n-1]] - b.size[b.sorted[0]]
}

// nextLeast returns the member to give the next partition to, taking the
// least loaded range in turn and widening it one level up once all had one.
func (b *rangeBalancer) nextLeast() int {
	if b.nextL >= b.leastEnd {
		b.leastCount++
		for b.leastEnd < len(b.sorted) && b.size[b.sorted[b.leastEnd]] == b.leastCount {
			b.leastEnd++
		}
		b.nextL = 0
	}
	m := b.sorted[b.nextL]
	b.nextL++
	return m
}

// nextMost returns the member to take the next partition from, the most
// loaded range from its right end, widening it one level down once all gave
// one; -1 when no member is left.
func (b *rangeBalancer) nextMost() int {
	if b.nextM < b.mostStart {
		if b.mostEnd <= b.mostStart && b.mostStart > 0 {
			// Every member of the range was excluded: restart from the level
			// of the next one down.
			b.mostCount = b.size[b.sorted[b.mostStart-1]]
		} else {
			b.mostCount--
		}
		for b.mostStart > 0 && b.size[b.sorted[b.mostStart-1]] == b.mostCount {
			b.mostStart--
		}
		b.nextM = b.mostEnd - 1
	}
	if b.nextM < 0 {
		return -1
	}
	m := b.sorted[b.nextM]
	b.nextM--
	return m
}

// excludeMost drops the member nextMost returned last from the most loaded
// range, having nothing of the topic to give.
func (b *rangeBalancer) excludeMost() {
	k := b.nextM + 1
	b.sorted[k], b.sorted[b.mostEnd-1] = b.sorted[b.mostEnd-1], b.sorted[k]
	b.mostEnd--
}

// balanced reports whether the two ranges differ by one partition at most.
func (b *rangeBalancer) balanced() bool { return b.mostCount-b.leastCount <= 1 }
