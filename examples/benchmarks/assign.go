package main

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/assign"
)

// assignShape is a consumer group: members subscribed to topics of parts
// partitions each; mixed makes the last member subscribe to one topic only
// (Kafka's testLargeAssignmentAndGroupWithNonEqualSubscription); leave
// assigns once, then measures the rebalance after the first member left.
type assignShape struct {
	name                   string
	members, topics, parts int
	mixed, leave           bool
	sarama                 bool // sarama ends within a minute on this shape
}

func assignShapes(quick bool) []assignShape {
	if quick {
		return []assignShape{
			{"100x10x100", 100, 10, 100, false, false, true},
			{"100x10x100 leave", 100, 10, 100, false, true, true},
			{"100x10x100 mixed", 100, 10, 100, true, false, true},
		}
	}
	return []assignShape{
		{"2000x500x2000", 2000, 500, 2000, false, false, false},
		{"2000x500x2000 leave", 2000, 500, 2000, false, true, false},
		{"1000x50x1000", 1000, 50, 1000, false, false, false},
		{"2000x500x2000 mixed", 2000, 500, 2000, true, false, false},
	}
}

// group is one shape in every library's input form.
type group struct {
	members []assign.Member
	topics  map[string]assign.Topic
	counts  map[string]int32
	kgo     []kmsg.JoinGroupResponseMember
	sarama  map[string]sarama.ConsumerGroupMemberMetadata
	parts   map[string][]int32
}

func buildGroup(s assignShape) (*group, error) {
	g := &group{topics: map[string]assign.Topic{}, counts: map[string]int32{}, parts: map[string][]int32{}}
	names := make([]string, s.topics)
	for i := range names {
		names[i] = "topic" + strconv.Itoa(i)
		g.topics[names[i]] = assign.Topic{Partitions: int32(s.parts)}
		g.counts[names[i]] = int32(s.parts)
		ps := make([]int32, s.parts)
		for p := range ps {
			ps[p] = int32(p)
		}
		g.parts[names[i]] = ps
	}
	for i := range s.members {
		m := assign.Member{ID: "member" + strconv.Itoa(100000+i), Topics: names, Generation: -1}
		if s.mixed && i == s.members-1 {
			m.Topics = names[:1]
		}
		g.members = append(g.members, m)
	}
	if s.leave {
		plan, err := assign.CooperativeSticky.Assign(g.members, g.topics)
		if err != nil {
			return nil, err
		}
		g.members = g.members[1:]
		for i := range g.members {
			g.members[i].Owned, g.members[i].Generation = plan[g.members[i].ID], 1
		}
	}
	for _, m := range g.members {
		meta := kmsg.NewConsumerMemberMetadata()
		meta.Version = 3
		meta.Topics = m.Topics
		meta.Generation = m.Generation
		for t, ps := range m.Owned {
			meta.OwnedPartitions = append(meta.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: t, Partitions: ps})
		}
		g.kgo = append(g.kgo, kmsg.JoinGroupResponseMember{MemberID: m.ID, ProtocolMetadata: meta.AppendTo(nil)})
	}
	if s.sarama {
		g.sarama = map[string]sarama.ConsumerGroupMemberMetadata{}
		for _, m := range g.members {
			md := sarama.ConsumerGroupMemberMetadata{Version: 2, Topics: m.Topics, GenerationID: m.Generation}
			for t, ps := range m.Owned {
				md.OwnedPartitions = append(md.OwnedPartitions, &sarama.OwnedPartition{Topic: t, Partitions: ps})
			}
			g.sarama[m.ID] = md
		}
	}
	return g, nil
}

func strandRun(a assign.Assignor, g *group) func() error {
	return func() error { _, err := a.Assign(g.members, g.topics); return err }
}

func kgoRun(b kgo.GroupBalancer, g *group) func() error {
	return func() error {
		mb, _, err := b.MemberBalancer(g.kgo)
		if err != nil {
			return err
		}
		into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(g.counts)
		if err != nil {
			return err
		}
		if plan, ok := into.(interface {
			AsMemberIDMap() map[string]map[string][]int32
		}); ok {
			_ = plan.AsMemberIDMap()
		}
		return nil
	}
}

func saramaRun(s sarama.BalanceStrategy, g *group) func() error {
	return func() error { _, err := s.Plan(g.sarama, g.parts); return err }
}

// allocs counts the allocations of one run of f.
func allocs(f func() error) (uint64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := f()
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, err
}

func assignSuite(quick bool) error {
	runs := 5
	if !quick {
		runs = 3
	}
	fmt.Printf("%-22s %-34s %12s %12s\n", "shape", "assignor", "median", "allocs")
	for _, s := range assignShapes(quick) {
		g, err := buildGroup(s)
		if err != nil {
			return err
		}
		type entry struct {
			name string
			run  func() error
		}
		strandSticky, kgoSticky := assign.Sticky, kgo.StickyBalancer()
		if s.leave {
			// Owned partitions travel in the cooperative protocol fields.
			strandSticky, kgoSticky = assign.CooperativeSticky, kgo.CooperativeStickyBalancer()
		}
		entries := []entry{
			{"strand " + strandSticky.Name(), strandRun(strandSticky, g)},
			{"franz-go " + kgoSticky.ProtocolName(), kgoRun(kgoSticky, g)},
			{"strand range", strandRun(assign.Range, g)},
			{"franz-go range", kgoRun(kgo.RangeBalancer(), g)},
			// KIP-848's server-side default, which franz-go and sarama lack.
			{"strand uniform", strandRun(assign.Uniform, g)},
		}
		if s.sarama {
			entries = append(entries,
				entry{"sarama sticky", saramaRun(sarama.NewBalanceStrategySticky(), g)},
				entry{"sarama range", saramaRun(sarama.NewBalanceStrategyRange(), g)})
		}
		// The runs of all entries take turns, so that a change in the load
		// of a shared machine falls on all of them alike, after one round
		// that is not timed: the first run of a process pays for growing
		// its heap to the shape's size.
		samples := make([][]time.Duration, len(entries))
		for round := range runs + 1 {
			for i, e := range entries {
				// Collect the garbage of the run before, which the next
				// would otherwise pay for in GC assists.
				runtime.GC()
				start := time.Now()
				if err := e.run(); err != nil {
					return fmt.Errorf("%s %s: %w", s.name, e.name, err)
				}
				if round > 0 {
					samples[i] = append(samples[i], time.Since(start))
				}
			}
		}
		times := map[string]time.Duration{}
		for i, e := range entries {
			n, err := allocs(e.run)
			if err != nil {
				return err
			}
			slices.Sort(samples[i])
			d := samples[i][len(samples[i])/2]
			times[e.name] = d
			fmt.Printf("%-22s %-34s %12s %12d\n", s.name, e.name, d.Round(10*time.Microsecond), n)
		}
		key := func(s string) string {
			out := []byte{}
			for _, c := range []byte(s) {
				if c == ' ' {
					c = '_'
				}
				out = append(out, c)
			}
			return string(out)
		}
		ratio := func(peer, strand string) {
			fmt.Printf("ratio %s/%s %.2f\n", key(s.name), key(peer), float64(times[peer])/float64(times[strand]))
		}
		ratio("franz-go "+kgoSticky.ProtocolName(), "strand "+strandSticky.Name())
		ratio("franz-go range", "strand range")
		if s.sarama {
			ratio("sarama sticky", "strand "+strandSticky.Name())
			ratio("sarama range", "strand range")
		}
	}
	return nil
}
