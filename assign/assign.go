package assign

import (
	"errors"
	"fmt"
	"slices"
)

// Member is one member of a consumer group as the group leader (or, for KIP-848
// server-side assignors, the group coordinator) sees it.
type Member struct {
	ID         string             // member id
	InstanceID string             // group.instance.id; "" for a dynamic member
	Rack       string             // client rack; "" for none
	Topics     []string           // subscription
	Owned      map[string][]int32 // partitions owned before this rebalance (sticky, cooperative)
	Generation int32              // generation of Owned; -1 when unknown
}

// Topic describes one topic of the cluster metadata.
type Topic struct {
	Partitions int32
	// Racks optionally holds the racks of the replicas of each partition,
	// indexed by partition. Partitions past the end of Racks have no known racks.
	Racks [][]string
	// ID is the topic id, Kafka's Uuid in its 16 bytes (most significant
	// first). Only Uniform reads it: Kafka's uniform assignor orders topics
	// by their ids, so its result is Kafka's only with the cluster's ids. A
	// zero ID stands for an id derived from the topic's name (see Uniform).
	ID [16]byte
}

// Plan is the result of an assignment: member id -> topic -> partitions in
// ascending order. Every member is present, with an empty map when it gets nothing.
type Plan map[string]map[string][]int32

// Assignor computes a Plan from a group's members and the topics that exist.
//
// members is in JoinGroup order. Topics a member subscribes to that are absent
// from topics, or that have no partitions, are ignored, as Kafka does.
type Assignor interface {
	Name() string // Kafka's protocol name
	Assign(members []Member, topics map[string]Topic) (Plan, error)
}

var (
	// ErrDuplicateMember reports two members with the same id.
	ErrDuplicateMember = errors.New("assign: duplicate member id")
	// ErrInvalidPartitions reports a negative partition count, or a partition
	// count of zero where partitions must be created.
	ErrInvalidPartitions = errors.New("assign: invalid number of partitions")
	// ErrInvalidReplicationFactor reports a replication factor below one or
	// above the number of brokers (Kafka's InvalidReplicationFactorException).
	ErrInvalidReplicationFactor = errors.New("assign: invalid replication factor")
	// ErrPartialRacks reports brokers of which some have a rack and some do not
	// (Kafka's AdminOperationException for rack-aware placement).
	ErrPartialRacks = errors.New("assign: not all brokers have rack information")
	// ErrInvalidArgument reports any other argument out of range.
	ErrInvalidArgument = errors.New("assign: invalid argument")
	// ErrInternal reports a broken internal invariant, such as a balancing
	// loop exceeding the bound on its moves that its termination argument
	// gives. It means a bug in this package.
	ErrInternal = errors.New("assign: internal error")
)

// group is the validated, indexed form of an assignor's input shared by every
// assignor: topics are numbered in Java string order and each member's
// subscription is resolved to topic numbers once.
type group struct {
	members []Member
	// names of the topics that exist with at least one partition and that some
	// member subscribes to, in Java String.compareTo order; index = topic number.
	names  []string
	index  map[string]int32 // topic name -> topic number
	counts []int32          // topic number -> partition count
	racks  [][][]string     // topic number -> Topic.Racks
	ids    [][16]byte       // topic number -> Topic.ID
	// subs[m] lists the topic numbers member m subscribes to, ascending, no duplicates.
	subs [][]int32
	// raw[m] is the class of member m's raw subscription (including topics
	// that do not exist): members with equal raw subscriptions share a class.
	raw     []int32
	classes int
	base    []int // topic number -> index of its partition 0 in a flat numbering
	total   int   // total partitions of all numbered topics
}

// newGroup validates members and topics and indexes them.
func newGroup(members []Member, topics map[string]Topic) (*group, error) {
	seen := make(map[string]struct{}, len(members))
	for i := range members {
		if members[i].ID == "" {
			return nil, fmt.Errorf("%w: member %d has an empty id", ErrInvalidArgument, i)
		}
		if _, dup := seen[members[i].ID]; dup {
			return nil, fmt.Errorf("%w: %q (member %d)", ErrDuplicateMember, members[i].ID, i)
		}
		seen[members[i].ID] = struct{}{}
	}
	for name, t := range topics {
		if t.Partitions < 0 {
			return nil, fmt.Errorf("%w: topic %q has %d partitions", ErrInvalidPartitions, name, t.Partitions)
		}
	}

	g := &group{members: members, index: make(map[string]int32)}
	for i := range members {
		for _, name := range members[i].Topics {
			if _, ok := g.index[name]; ok {
				continue
			}
			if t, ok := topics[name]; ok && t.Partitions > 0 {
				g.index[name] = 0
				g.names = append(g.names, name)
			}
		}
	}
	slices.SortFunc(g.names, compareJava)
	g.counts = make([]int32, len(g.names))
	g.racks = make([][][]string, len(g.names))
	g.ids = make([][16]byte, len(g.names))
	g.base = make([]int, len(g.names))
	for i, name := range g.names {
		g.index[name] = int32(i)
		t := topics[name]
		g.counts[i] = t.Partitions
		g.racks[i] = t.Racks
		g.ids[i] = t.ID
		g.base[i] = g.total
		g.total += int(t.Partitions)
	}
	g.resolveSubscriptions()
	return g, nil
}

// resolveSubscriptions fills subs and raw. Large groups usually repeat a few
// subscriptions many times, so a member whose topic list equals a recent one
// reuses its resolution instead of looking every name up again.
func (g *group) resolveSubscriptions() {
	type class struct {
		topics []string
		subs   []int32
		id     int32
	}
	var recent []class // most recently used first, a handful at most
	rawIDs := make(map[string]int32)
	g.subs = make([][]int32, len(g.members))
	g.raw = make([]int32, len(g.members))
	for m := range g.members {
		topics := g.members[m].Topics
		hit := -1
		for i := range recent {
			if slices.Equal(recent[i].topics, topics) {
				hit = i
				break
			}
		}
		if hit < 0 {
			c := class{topics: topics, subs: g.resolve(topics), id: g.rawClass(rawIDs, topics)}
			recent = slices.Insert(recent, 0, c)
			if len(recent) > 8 {
				recent = recent[:8]
			}
			hit = 0
		}
		g.subs[m] = recent[hit].subs
		g.raw[m] = recent[hit].id
	}
	g.classes = len(rawIDs)
}

// resolve maps topic names to sorted, unique topic numbers, dropping unknown topics.
func (g *group) resolve(topics []string) []int32 {
	out := make([]int32, 0, len(topics))
	for _, name := range topics {
		if t, ok := g.index[name]; ok {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rawClass numbers the set of names in topics, unknown topics included, as
// Kafka's sticky assignor compares raw subscriptions to choose its algorithm.
func (g *group) rawClass(ids map[string]int32, topics []string) int32 {
	set := slices.Clone(topics)
	slices.Sort(set)
	set = slices.Compact(set)
	n := 0
	for _, s := range set {
		n += len(s) + 1
	}
	key := make([]byte, 0, n)
	for _, s := range set {
		key = append(key, s...)
		key = append(key, 0)
	}
	if id, ok := ids[string(key)]; ok {
		return id
	}
	id := int32(len(ids))
	ids[string(key)] = id
	return id
}

// subscribes reports whether member m subscribes to topic t.
func (g *group) subscribes(m int, t int32) bool {
	_, ok := slices.BinarySearch(g.subs[m], t)
	return ok
}

// partitionRacks returns the racks of the replicas of partition p of topic t.
func (g *group) partitionRacks(t int32, p int32) []string {
	if r := g.racks[t]; int(p) < len(r) {
		return r[p]
	}
	return nil
}

// memberOrder returns member indexes in Kafka's MemberInfo order: members with
// a group.instance.id first, by instance id, then dynamic members by member id
// (AbstractPartitionAssignor.MemberInfo.compareTo).
func (g *group) memberOrder() []int {
	order := make([]int, len(g.members))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ma, mb := &g.members[a], &g.members[b]
		switch {
		case ma.InstanceID != "" && mb.InstanceID != "":
			return compareJava(ma.InstanceID, mb.InstanceID)
		case ma.InstanceID != "":
			return -1
		case mb.InstanceID != "":
			return 1
		}
		return compareJava(ma.ID, mb.ID)
	})
	return order
}

// planBuilder accumulates per-member partition lists and turns them into a
// Plan with few allocations: all partition slices share one backing array.
type planBuilder struct {
	g     *group
	parts [][]int64 // member -> packed (topic<<32 | partition)
}

func newPlanBuilder(g *group) *planBuilder {
	return &planBuilder{g: g, parts: make([][]int64, len(g.members))}
}

func pack(t, p int32) int64       { return int64(t)<<32 | int64(uint32(p)) }
func unpack(x int64) (t, p int32) { return int32(x >> 32), int32(uint32(x)) }

func (b *planBuilder) add(m int, t, p int32) { b.parts[m] = append(b.parts[m], pack(t, p)) }

// plan builds the Plan. sorted says whether every member's list is already
// in (topic, partition) order.
func (b *planBuilder) plan(sorted bool) Plan {
	lists := make([][]int64, len(b.parts))
	for m, l := range b.parts {
		if !sorted {
			slices.Sort(l)
		}
		lists[m] = l
	}
	return buildPlan(b.g, lists)
}

// buildPlan converts sorted packed lists (member -> (topic, partition) in
// order) into a Plan.
func buildPlan(g *group, lists [][]int64) Plan {
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	backing := make([]int32, total)
	plan := make(Plan, len(g.members))
	for m, l := range lists {
		topics := 0
		for i := range l {
			if i == 0 || l[i]>>32 != l[i-1]>>32 {
				topics++
			}
		}
		mp := make(map[string][]int32, topics)
		for i := 0; i < len(l); {
			t := int32(l[i] >> 32)
			j := i
			for j < len(l) && int32(l[j]>>32) == t {
				_, backing[j-i] = unpack(l[j])
				j++
			}
			mp[g.names[t]] = backing[: j-i : j-i]
			backing = backing[j-i:]
			i = j
		}
		plan[g.members[m].ID] = mp
	}
	return plan
}
