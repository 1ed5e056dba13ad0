package group

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
)

var replaySteps = flag.Int("group.replay-steps", 0, "steps of each randomized replay run (default 300, 2000 without -short)")

// TestReplayEqualsLive drives coordinators with random requests and clock
// jumps (G32) and checks after every step that replaying the records written
// so far into a new coordinator gives the live state: the same committed
// offsets, with the same record offsets, the same groups, and every group
// that is at rest (Stable or Empty) the same in every persisted field. It
// also checks the group invariants after every step, and at the end that
// every request was answered exactly once.
func TestReplayEqualsLive(t *testing.T) {
	steps := *replaySteps
	if steps == 0 {
		steps = 2000
		if testing.Short() {
			steps = 300
		}
	}
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			d := newDriver(t, seed)
			// replica follows the log record by record, as a standby
			// would; every 100 steps a coordinator is also built from
			// the whole log.
			replica, err := NewCoordinator(Config{}, epoch)
			require.NoError(t, err)
			for i := range steps {
				d.step()
				checkInvariants(t, d.h.c)
				d.h.replayInto(replica, int(replica.nextOffset))
				compareReplayed(t, d.h.c, replica)
				if i%100 == 99 {
					checkReplay(t, d.h)
				}
			}
			d.h.c.Unload()
			d.h.drain()
			for id := RequestID(1); id <= d.h.nextID; id++ {
				if _, ok := d.h.resps[id]; !ok {
					t.Errorf("request %d never answered", id)
				}
			}
		})
	}
}

// The coordinator is deterministic: the same seed gives the same records and
// responses.
func TestDeterministic(t *testing.T) {
	run := func() ([]Record, map[RequestID]Response) {
		d := newDriver(t, 42)
		for range 500 {
			d.step()
		}
		return d.h.log, d.h.resps
	}
	log1, resps1 := run()
	log2, resps2 := run()
	assert.Equal(t, log1, log2)
	assert.Equal(t, len(resps1), len(resps2))
	for id, r := range resps1 {
		assert.Equal(t, r, resps2[id], "response %d", id)
	}
}

// driver sends random, mostly plausible requests: it reads the live groups
// to pick member ids and generations as clients would know them, and now and
// then gets them wrong.
type driver struct {
	h   *harness
	rnd *rand.Rand
}

var (
	driverGroups    = []string{"a", "b", "c"}
	driverInstances = []string{"i0", "i1", "i2"}
	driverTopics    = []string{"t0", "t1"}
)

// driverPartitions are the topics of the driver's cluster.
var driverPartitions = map[string]int32{"t0": 2, "t1": 3}

func newDriver(t *testing.T, seed uint64) *driver {
	cfg := Config{Rand: rand.New(rand.NewPCG(seed, 0)), MaxSize: 4,
		Partitions: func(topic string) int32 { return driverPartitions[topic] }}
	if seed%2 == 0 {
		cfg.InitialRebalanceDelay = -1
	}
	return &driver{h: newHarness(t, cfg), rnd: rand.New(rand.NewPCG(seed, 1))}
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// memberOf returns a member id of the group as a client would send it: a
// member's, a pending one, a replaced static member's, or a wrong one.
func (d *driver) memberOf(g *classicGroup) (id, instance string) {
	if g == nil || d.rnd.IntN(10) == 0 {
		return pick(d.rnd, []string{"", "stranger"}), ""
	}
	if len(g.pending) > 0 && d.rnd.IntN(3) == 0 {
		ids := make([]string, 0, len(g.pending))
		for p := range g.pending {
			ids = append(ids, p)
		}
		slices.Sort(ids)
		return pick(d.rnd, ids), ""
	}
	if len(g.members) == 0 {
		return "", ""
	}
	m := pick(d.rnd, g.members)
	return m.id, m.instanceID
}

func (d *driver) step() {
	h, r := d.h, d.rnd
	gid := pick(r, driverGroups)
	g := h.c.groups[gid]
	gen := int32(-1)
	if g != nil {
		gen = g.generation
		if r.IntN(10) == 0 {
			gen += int32(r.IntN(3)) - 1
		}
	}
	memberID, instance := d.memberOf(g)
	if cg := h.c.consumerGroups[gid]; cg != nil && r.IntN(2) == 0 {
		// A member of the consumer group that speaks the classic protocol.
		for _, m := range cg.members {
			if m.classic != nil && r.IntN(2) == 0 {
				memberID, instance, gen = m.id, m.instanceID, m.epoch
			}
		}
	}
	// Group "a" stays classic; the others are classic or consumer
	// groups, converted whenever they are empty.
	if gid != "a" && r.IntN(2) == 0 {
		d.consumerStep(gid)
		return
	}
	switch n := r.IntN(100); {
	case n < 12:
		h.advance(time.Duration(r.IntN(12000)) * time.Millisecond)
	case n < 32:
		req := joinReq(gid, memberID)
		req.GroupInstanceID = instance
		if memberID == "" && r.IntN(2) == 0 {
			req.GroupInstanceID = pick(r, driverInstances)
		}
		if r.IntN(4) == 0 {
			req.Version = 3
		}
		switch r.IntN(4) {
		case 0:
			req.Protocols = []Protocol{{Name: pick(r, []string{"range", "roundrobin"}), Metadata: []byte{byte(r.IntN(3))}}, {Name: "sticky"}}
		case 1, 2:
			// A consumer's subscription, which a conversion reads.
			sub := Subscription{Topics: pick(r, [][]string{{"t0"}, {"t1"}, {"t0", "t1"}}), GenerationID: -1}
			if r.IntN(2) == 0 {
				sub.Owned = map[string][]int32{"t0": {int32(r.IntN(2))}}
			}
			req.Protocols = []Protocol{{Name: "range", Metadata: sub.Encode(int16(r.IntN(4)))}}
		}
		req.RebalanceTimeout = time.Duration(10+r.IntN(30)) * time.Second
		h.join(req)
	case n < 48:
		req := SyncGroupRequest{GroupID: gid, GenerationID: gen, MemberID: memberID, GroupInstanceID: instance}
		if g != nil && r.IntN(2) == 0 && g.leader != "" {
			req.MemberID, req.GroupInstanceID = g.leader, g.byID[g.leader].instanceID
			for _, m := range g.members {
				asg := []byte{byte(r.IntN(256))}
				if r.IntN(2) == 0 {
					asg = Assignment{Partitions: map[string][]int32{pick(r, driverTopics): {int32(r.IntN(3))}}}.Encode(3)
				}
				if r.IntN(5) > 0 {
					req.Assignments = append(req.Assignments, SyncGroupAssignment{MemberID: m.id, Assignment: asg})
				}
			}
		}
		h.sync(req)
	case n < 65:
		h.heartbeat(HeartbeatRequest{GroupID: gid, GenerationID: gen, MemberID: memberID, GroupInstanceID: instance})
	case n < 72:
		lm := LeaveGroupMember{MemberID: memberID, GroupInstanceID: instance}
		if r.IntN(4) == 0 {
			lm = LeaveGroupMember{GroupInstanceID: pick(r, driverInstances)}
		}
		h.leave(LeaveGroupRequest{GroupID: gid, Members: []LeaveGroupMember{lm}})
	case n < 84:
		req := OffsetCommitRequest{Version: 9, GroupID: gid, GenerationID: gen, MemberID: memberID, GroupInstanceID: instance}
		if r.IntN(3) == 0 {
			req.GenerationID, req.MemberID, req.GroupInstanceID = -1, "", ""
		}
		if r.IntN(5) == 0 {
			req.Retention = time.Hour
		}
		if cg := h.c.consumerGroups[gid]; cg != nil && len(cg.members) > 0 && r.IntN(4) > 0 {
			m := pick(r, cg.members)
			req.MemberID, req.GroupInstanceID, req.GenerationID = m.id, "", m.epoch
		}
		for _, topic := range driverTopics {
			ct := OffsetCommitTopic{Name: topic}
			for p := range int32(r.IntN(3)) {
				ct.Partitions = append(ct.Partitions, OffsetCommitPartition{Partition: p, Offset: int64(r.IntN(1000)), LeaderEpoch: -1})
			}
			req.Topics = append(req.Topics, ct)
		}
		h.commit(req)
	case n < 90:
		req := TxnOffsetCommitRequest{GroupID: gid, Producer: idempotence.ProducerIDAndEpoch{ProducerID: int64(1 + r.IntN(2))}, GenerationID: gen,
			MemberID: memberID, GroupInstanceID: instance,
			Topics: []OffsetCommitTopic{{Name: pick(r, driverTopics), Partitions: []OffsetCommitPartition{{Partition: int32(r.IntN(2)), Offset: int64(r.IntN(1000)), LeaderEpoch: -1}}}}}
		if r.IntN(2) == 0 {
			req.GenerationID, req.MemberID, req.GroupInstanceID = -1, "", ""
		}
		id := h.id()
		h.c.TxnOffsetCommit(id, req)
		h.drain()
	case n < 93:
		h.marker(int64(1+r.IntN(2)), r.IntN(3) > 0)
	case n < 97:
		id := h.id()
		h.c.OffsetDelete(id, OffsetDeleteRequest{GroupID: gid, Topics: []OffsetFetchTopic{{Name: pick(r, driverTopics), Partitions: []int32{0, 1}}}})
		h.drain()
	default:
		id := h.id()
		h.c.DeleteGroup(id, gid)
		h.drain()
	}
}

// consumerStep sends a ConsumerGroupHeartbeat to the group, which may be a
// classic group (to convert, if Empty) or none yet. Members mostly behave:
// they send their epoch and own what they were assigned, having revoked
// what they were asked to; now and then they have not revoked yet, send
// a stale epoch, leave, leave for a while (static members) or rejoin.
func (d *driver) consumerStep(gid string) {
	h, r := d.h, d.rnd
	g := h.c.consumerGroups[gid]
	req := ConsumerGroupHeartbeatRequest{GroupID: gid, MemberEpoch: JoinMemberEpoch, RebalanceTimeout: time.Duration(5+r.IntN(60)) * time.Second,
		Owned: &Assignment{}, SubscribedTopicNames: [][]string{{"t0"}, {"t1"}, {"t0", "t1"}, {"t2"}}[r.IntN(4)]}
	if r.IntN(3) == 0 {
		req.ServerAssignor = pick(r, []string{"uniform", "range"})
	}
	if r.IntN(3) == 0 {
		req.InstanceID = pick(r, driverInstances)
	}
	if g != nil && len(g.members) > 0 && r.IntN(5) > 0 {
		m := pick(r, g.members)
		req = ConsumerGroupHeartbeatRequest{GroupID: gid, MemberID: m.id, MemberEpoch: m.epoch, InstanceID: m.instanceID}
		owned := clonePartitions(m.assigned)
		if r.IntN(4) == 0 {
			for t, ps := range m.pendingRevocation {
				owned[t] = append(owned[t], ps...)
			}
		}
		if r.IntN(6) > 0 {
			req.Owned = &Assignment{Partitions: owned}
		}
		switch n := r.IntN(20); {
		case n < 3:
			req.MemberEpoch = LeaveMemberEpoch
		case n == 3 && m.instanceID != "":
			req.MemberEpoch = StaticLeaveMemberEpoch
		case n == 4:
			req.MemberEpoch += int32(r.IntN(3)) - 1
		case n == 5:
			req.SubscribedTopicNames = [][]string{{"t0"}, {"t1"}, {"t0", "t1"}}[r.IntN(3)]
		case n == 7:
			// Fenced, it rejoins with its own id (KIP-1082).
			req.MemberEpoch, req.RebalanceTimeout, req.Owned, req.SubscribedTopicNames = JoinMemberEpoch, time.Minute, &Assignment{}, m.topics
		case n == 6 && m.epoch == StaticLeaveMemberEpoch:
			req.MemberID, req.MemberEpoch, req.RebalanceTimeout, req.Owned = "", JoinMemberEpoch, time.Minute, &Assignment{}
			req.SubscribedTopicNames = m.topics
		}
	}
	h.cgh(req)
}

// checkReplay rebuilds a coordinator from the harness's log and compares it
// with the live one.
func checkReplay(t *testing.T, h *harness) {
	t.Helper()
	c, err := NewCoordinator(Config{}, h.now.Add(time.Hour))
	require.NoError(t, err)
	h.replayInto(c, 0)
	c.Loaded()
	compareReplayed(t, h.c, c)
}

// compareReplayed compares a live coordinator with one that replayed its log.
func compareReplayed(t *testing.T, live, c *Coordinator) {
	t.Helper()
	require.Equal(t, live.offsets.byGroup, c.offsets.byGroup, "committed offsets")
	require.Equal(t, live.txns, c.txns, "transactional commits pending")
	require.Equal(t, live.nextOffset, c.nextOffset)
	require.Equal(t, slices.Sorted(maps.Keys(live.groups)), slices.Sorted(maps.Keys(c.groups)), "groups")
	compareConsumerGroups(t, live, c)
	for id, g := range live.groups {
		if !g.is(Stable) && !g.is(Empty) {
			continue
		}
		rg := c.groups[id]
		require.Equal(t, g.state, rg.state, "group %q", id)
		require.Equal(t, g.metadataValue(), rg.metadataValue(), "group %q", id)
		require.Equal(t, g.static, rg.static, "group %q", id)
		require.Equal(t, g.subscribedKnown, rg.subscribedKnown, "group %q", id)
		require.Equal(t, len(g.subscribed), len(rg.subscribed), "group %q", id)
		for topic := range g.subscribed {
			require.True(t, rg.subscribed[topic], "group %q topic %q", id, topic)
		}
	}
}

// compareConsumerGroups compares the KIP-848 groups of a live coordinator
// and of one that replayed its log: the same groups, members in the same
// order, and the same canonical records (every persisted field), the same
// static members and the same owner of every partition.
func compareConsumerGroups(t *testing.T, live, c *Coordinator) {
	t.Helper()
	require.Equal(t, slices.Sorted(maps.Keys(live.consumerGroups)), slices.Sorted(maps.Keys(c.consumerGroups)), "consumer groups")
	for id, g := range live.consumerGroups {
		rg := c.consumerGroups[id]
		require.Equal(t, consumerGroupRecords(g), consumerGroupRecords(rg), "consumer group %q", id)
		require.Equal(t, g.static, rg.static, "consumer group %q", id)
		require.Equal(t, owners(g), owners(rg), "consumer group %q", id)
	}
}

// owners lists who has each partition, and at which epoch.
func owners(g *consumerGroup) map[string]int32 {
	out := map[string]int32{}
	for topic, ps := range g.owners {
		for p, e := range ps {
			out[fmt.Sprintf("%s-%d", topic, p)] = e
		}
	}
	return out
}

// checkInvariants checks what must hold of every group between requests.
func checkInvariants(t *testing.T, c *Coordinator) {
	t.Helper()
	for id, g := range c.consumerGroups {
		require.Nil(t, c.groups[id], "group %q is both classic and consumer group", id)
		held := map[string]string{}
		for _, m := range g.members {
			for _, ps := range []partitions{m.assigned, m.pendingRevocation} {
				for topic, list := range ps {
					for _, p := range list {
						tp := fmt.Sprintf("%s-%d", topic, p)
						require.NotContains(t, held, tp, "consumer group %q: %s held by %s and %s", id, tp, held[tp], m.id)
						held[tp] = m.id
					}
				}
			}
		}
	}
	for id, g := range c.groups {
		awaiting := 0
		supported := map[string]int{}
		for _, m := range g.members {
			require.Same(t, m, g.byID[m.id], "group %q member %q", id, m.id)
			require.False(t, g.pending[m.id], "group %q: member %q also pending", id, m.id)
			if m.joinParked {
				awaiting++
			}
			if m.instanceID != "" {
				require.Equal(t, m.id, g.static[m.instanceID], "group %q", id)
			}
			for _, p := range m.protocols {
				supported[p.Name]++
			}
			require.False(t, m.syncParked && !g.is(CompletingRebalance), "group %q: sync parked while %v", id, g.state)
			require.False(t, m.joinParked && !g.is(PreparingRebalance), "group %q: join parked while %v", id, g.state)
		}
		require.Len(t, g.byID, len(g.members), "group %q", id)
		require.Equal(t, awaiting, g.awaitingJoin, "group %q", id)
		require.Equal(t, supported, g.supported, "group %q", id)
		if len(g.members) == 0 {
			require.Empty(t, g.leader, "group %q", id)
			require.Contains(t, []State{Empty, PreparingRebalance, Dead}, g.state, "group %q", id)
		} else {
			require.NotNil(t, g.byID[g.leader], "group %q: leader %q", id, g.leader)
			require.NotEqual(t, Empty, g.state, "group %q", id)
		}
		if g.is(Stable) || g.is(CompletingRebalance) {
			require.NotEmpty(t, g.protocolName, "group %q %v %+v", id, g.state, g.supported)
		}
	}
}

// Compaction keeps the last record of each key, so a KIP-848 group's
// records come back in another order than they were written: a member's
// assignment may come before the subscription naming its topics, and a
// member's first record after another's. A coordinator loaded from the
// compacted log has the live consumer groups all the same, the order of
// their members aside (which only the range assignor's ties read).
func TestConsumerGroupsReplayFromACompactedLog(t *testing.T) {
	steps := 1000
	if testing.Short() {
		steps = 300
	}
	for seed := uint64(1); seed <= 6; seed++ {
		d := newDriver(t, seed)
		for range steps {
			d.step()
		}
		last := map[string]int{}
		for i, r := range d.h.log {
			if _, ok := d.h.markers[i]; !ok {
				last[string(r.Key)] = i
			}
		}
		c, err := NewCoordinator(Config{}, d.h.now)
		require.NoError(t, err)
		kept := 0
		for i, r := range d.h.log {
			if m, ok := d.h.markers[i]; ok {
				require.NoError(t, c.ReplayTxnMarker(int64(i), m.producerID, m.commit))
			} else if last[string(r.Key)] == i {
				require.NoError(t, c.Replay(int64(i), r))
				kept++
			}
		}
		c.Loaded()
		require.Less(t, kept, len(d.h.log), "seed %d: compaction removed records", seed)
		live := d.h.c
		require.Equal(t, slices.Sorted(maps.Keys(live.consumerGroups)), slices.Sorted(maps.Keys(c.consumerGroups)), "seed %d", seed)
		byKey := func(rs []consumerRecord) []consumerRecord {
			return slices.SortedFunc(slices.Values(rs), func(a, b consumerRecord) int {
				return strings.Compare(string(a.rec.Key), string(b.rec.Key))
			})
		}
		for id, g := range live.consumerGroups {
			rg := c.consumerGroups[id]
			require.Equal(t, byKey(consumerGroupRecords(g)), byKey(consumerGroupRecords(rg)), "seed %d: consumer group %q", seed, id)
			require.Equal(t, g.static, rg.static, "seed %d: consumer group %q", seed, id)
			require.Equal(t, owners(g), owners(rg), "seed %d: consumer group %q", seed, id)
		}
	}
}
