package assign

import (
	"encoding/binary"
	"slices"
)

// Range is Kafka's client-side "range" assignor (RangeAssignor): for each
// topic, the members subscribed to it, in MemberInfo order, get consecutive
// ranges of partitions and the first n%members of them one partition more.
//
// With KIP-881 rack awareness (members and partition replicas with racks, and
// some partition not on every rack), partitions first go to members on a rack
// that holds a replica, topics with the same subscribers and partition count
// stay co-partitioned where racks allow, and the per-topic balance is kept.
// Results are bit-exact with Kafka's.
var Range Assignor = rangeAssignor{}

type rangeAssignor struct{}

func (rangeAssignor) Name() string { return "range" }

// rangeTopic is RangeAssignor.TopicAssignmentState: one topic's consumers and
// what they may still take.
type rangeTopic struct {
	t        int32
	n        int32
	members  []int      // subscribers in MemberInfo order
	racks    [][]string // per partition, nil unless some subscriber has a rack
	needRack bool
	assigned []bool  // per partition
	left     int32   // partitions not yet assigned
	count    []int32 // per subscriber position: partitions assigned
	per      int32
	extra    int32 // subscribers that may still get per+1
}

func (s *rangeTopic) maxAssignable(i int) int32 {
	limit := s.per
	if s.extra > 0 {
		limit++
	}
	return max(0, limit-s.count[i])
}

func (s *rangeTopic) assign(b *planBuilder, i int, p int32) {
	b.add(s.members[i], s.t, p)
	s.assigned[p] = true
	s.left--
	s.count[i]++
	if s.count[i] == s.per+1 {
		s.extra--
	}
}

// racksMatch is RangeAssignor.TopicAssignmentState.racksMatch: a member
// without a rack matches every partition.
func (s *rangeTopic) racksMatch(g *group, i int, p int32) bool {
	rack := g.members[s.members[i]].Rack
	return rack == "" || slices.Contains(s.racks[p], rack)
}

// assignRanges gives each subscriber, in order, the lowest unassigned
// partitions it may take, up to its quota.
func (s *rangeTopic) assignRanges(g *group, b *planBuilder, rackOnly bool) {
	for i := range s.members {
		if s.left == 0 {
			return
		}
		quota := s.maxAssignable(i)
		for p := int32(0); p < s.n && quota > 0; p++ {
			if s.assigned[p] || rackOnly && !s.racksMatch(g, i, p) {
				continue
			}
			s.assign(b, i, p)
			quota--
		}
	}
}

func (rangeAssignor) Assign(members []Member, topics map[string]Topic) (Plan, error) {
	g, err := newGroup(members, topics)
	if err != nil {
		return nil, err
	}
	subscribers := subscribersInOrder(g, g.memberOrder())
	b := newPlanBuilder(g)
	if !rangeNeedsRacks(g, subscribers) {
		assignRangesPlain(g, b, subscribers)
		return b.plan(true), nil
	}
	states := make([]*rangeTopic, len(g.names))
	for t := range states {
		states[t] = newRangeTopic(g, int32(t), subscribers[t])
	}
	assignWithRackMatching(g, b, states)
	for _, s := range states {
		s.assignRanges(g, b, false)
	}
	return b.plan(false), nil
}

// subscribersInOrder lists, per topic, the members subscribed to it in order.
func subscribersInOrder(g *group, order []int) [][]int {
	n := make([]int, len(g.names))
	for _, m := range order {
		for _, t := range g.subs[m] {
			n[t]++
		}
	}
	flat := make([]int, 0, sum(n))
	out := make([][]int, len(g.names))
	for t := range out {
		out[t] = flat[len(flat) : len(flat) : len(flat)+n[t]]
		flat = flat[:len(flat)+n[t]]
	}
	for _, m := range order {
		for _, t := range g.subs[m] {
			out[t] = append(out[t], m)
		}
	}
	return out
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// assignRangesPlain is the rack-less rule, computed directly: subscriber i of
// a topic with n partitions and k subscribers gets n/k partitions, plus one if
// i < n%k, starting where subscriber i-1 stopped.
func assignRangesPlain(g *group, b *planBuilder, subscribers [][]int) {
	size := make([]int, len(g.members))
	for t, subs := range subscribers {
		if len(subs) == 0 {
			continue
		}
		per, extra := int(g.counts[t])/len(subs), int(g.counts[t])%len(subs)
		for i, m := range subs {
			size[m] += per
			if i < extra {
				size[m]++
			}
		}
	}
	for m := range b.parts {
		b.parts[m] = make([]int64, 0, size[m])
	}
	for t, subs := range subscribers {
		if len(subs) == 0 {
			continue
		}
		n := g.counts[t]
		per, extra := n/int32(len(subs)), n%int32(len(subs))
		next := int32(0)
		for i, m := range subs {
			k := per
			if int32(i) < extra {
				k++
			}
			for p := next; p < next+k; p++ {
				b.add(m, int32(t), p)
			}
			next += k
		}
	}
}

// rangeNeedsRacks reports whether any topic needs rack-aware assignment
// (AbstractPartitionAssignor.useRackAwareAssignment, per topic).
func rangeNeedsRacks(g *group, subscribers [][]int) bool {
	for t, subs := range subscribers {
		if topicNeedsRacks(g, int32(t), subs) {
			return true
		}
	}
	return false
}

// topicNeedsRacks is useRackAwareAssignment for one topic: some subscriber
// has a rack, some subscriber's rack holds a replica of the topic, and not
// every partition has its replicas on the same set of racks.
func topicNeedsRacks(g *group, t int32, subs []int) bool {
	var consumerRacks []string
	for _, m := range subs {
		if r := g.members[m].Rack; r != "" && !slices.Contains(consumerRacks, r) {
			consumerRacks = append(consumerRacks, r)
		}
	}
	if len(consumerRacks) == 0 {
		return false
	}
	var all []string
	for p := range g.counts[t] {
		all = appendRacks(all, g.partitionRacks(t, p))
	}
	if !intersects(consumerRacks, all) {
		return false
	}
	for p := range g.counts[t] {
		if !sameRackSet(g.partitionRacks(t, p), all) {
			return true
		}
	}
	return false
}

// appendRacks adds the non-empty racks of r missing from set.
func appendRacks(set, r []string) []string {
	for _, rack := range r {
		if rack != "" && !slices.Contains(set, rack) {
			set = append(set, rack)
		}
	}
	return set
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// sameRackSet reports whether the non-empty racks of r are exactly set
// (which has no duplicates).
func sameRackSet(r, set []string) bool {
	n := 0
	for _, rack := range appendRacks(nil, r) {
		if !slices.Contains(set, rack) {
			return false
		}
		n++
	}
	return n == len(set)
}

func newRangeTopic(g *group, t int32, subs []int) *rangeTopic {
	s := &rangeTopic{
		t:        t,
		n:        g.counts[t],
		members:  subs,
		assigned: make([]bool, g.counts[t]),
		left:     g.counts[t],
		count:    make([]int32, len(subs)),
	}
	if len(subs) > 0 {
		s.per = s.n / int32(len(subs))
		s.extra = s.n % int32(len(subs))
	}
	for _, m := range subs {
		if g.members[m].Rack != "" {
			s.racks = make([][]string, s.n)
			for p := range s.n {
				s.racks[p] = g.partitionRacks(t, p)
			}
			break
		}
	}
	s.needRack = topicNeedsRacks(g, t, subs)
	return s
}

// assignWithRackMatching is RangeAssignor.assignWithRackMatching: topics with
// the same subscribers and the same number of partitions (when subscribers
// have racks) are assigned together so that they stay co-partitioned on
// matching racks; a topic alone is assigned on matching racks if it needs it.
func assignWithRackMatching(g *group, b *planBuilder, states []*rangeTopic) {
	type key struct {
		members string
		n       int32
	}
	var keys []key
	groups := make(map[key][]*rangeTopic)
	for _, s := range states {
		if len(s.members) == 0 || s.racks == nil {
			// Kafka groups such topics under partition count 0: nothing to do.
			continue
		}
		buf := make([]byte, 0, 4*len(s.members))
		for _, m := range s.members {
			buf = binary.AppendUvarint(buf, uint64(m))
		}
		k := key{string(buf), s.n}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	for _, k := range keys {
		co := groups[k]
		if len(co) > 1 {
			assignCoPartitioned(g, b, co)
		} else if co[0].needRack {
			co[0].assignRanges(g, b, true)
		}
	}
}

// assignCoPartitioned is RangeAssignor.assignCoPartitionedWithRackMatching:
// partition p of every topic goes to the first remaining subscriber whose rack
// matches p in all of them and that may take one more of each.
func assignCoPartitioned(g *group, b *planBuilder, co []*rangeTopic) {
	remaining := make([]int, len(co[0].members))
	for i := range remaining {
		remaining[i] = i
	}
	for p := int32(0); p < co[0].n && len(remaining) > 0; p++ {
		for ri, i := range remaining {
			if !allTopics(co, func(s *rangeTopic) bool { return s.racksMatch(g, i, p) && s.maxAssignable(i) > 0 }) {
				continue
			}
			for _, s := range co {
				s.assign(b, i, p)
			}
			if !anyTopic(co, func(s *rangeTopic) bool { return s.maxAssignable(i) > 0 }) {
				remaining = slices.Delete(remaining, ri, ri+1)
			}
			break
		}
	}
}

func allTopics(co []*rangeTopic, f func(*rangeTopic) bool) bool {
	for _, s := range co {
		if !f(s) {
			return false
		}
	}
	return true
}

func anyTopic(co []*rangeTopic, f func(*rangeTopic) bool) bool {
	return !allTopics(co, func(s *rangeTopic) bool { return !f(s) })
}
