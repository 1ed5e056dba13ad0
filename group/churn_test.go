package group

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
)

// TestChurn runs consumers against the coordinator the way Kafka's consumer
// runs (ConsumerCoordinator): they join, sync, heartbeat, commit, and on a
// rebalance revoke everything before rejoining (eager) or keep what they own
// and give up only what the new assignment takes away, rejoining once more
// if they gave something up (cooperative, KIP-429). Members join, leave and
// crash (static ones also restart), and the coordinator itself restarts from
// its log, for thousands of steps, and throughout:
//
//   - no partition is owned by two consumers at once, even between the two
//     rebalances of a cooperative handover;
//   - no committed offset moves backwards, unless its consumer seeked
//     back (a user's seek, which a consumer commits as any position);
//   - replaying the log gives the live committed offsets.
//
// Subscriptions and assignments are Kafka's consumer protocol; the
// coordinator reads only the subscribed topics from them, and the
// difference between the protocols lives in the clients, as in Kafka.
var churnSteps = flag.Int("group.churn-steps", 0, "steps of each churn run (default 600 with -short, 3000 without)")

func churnRunSteps() int {
	switch {
	case *churnSteps > 0:
		return *churnSteps
	case testing.Short():
		return 600
	}
	return 3000
}

func TestChurn(t *testing.T) {
	steps := churnRunSteps()
	for _, protocol := range []assign.Assignor{assign.Range, assign.CooperativeSticky} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s seed %d", protocol.Name(), seed), func(t *testing.T) {
				s := newChurn(t, protocol, seed)
				for i := range steps {
					s.step()
					if i == steps/3 || i == 2*steps/3 {
						s.restartCoordinator() // twice at least, whatever the seed
					}
				}
				require.Greater(t, s.rebalances, 10, "the churn made rebalances")
				require.Greater(t, s.commits, 100, "consumers committed")
				require.Greater(t, s.restarts, 1, "the coordinator restarted")
				require.Positive(t, s.seeks, "consumers seeked back")
				checkReplay(t, s.h)
			})
		}
	}
}

const (
	churnTopic      = "t"
	churnPartitions = 12
	churnTick       = 500 * time.Millisecond
)

type churnState int

const (
	needJoin churnState = iota
	joining
	needSync
	syncing
	stable
)

type consumer struct {
	name       string
	memberID   string
	instance   string
	generation int32
	state      churnState
	req        RequestID
	leader     []JoinGroupMember // the members, when this consumer leads
	skip       bool              // KIP-814: the leader keeps the current assignment
	owned      []int32
	position   map[int32]int64
	lastBeat   time.Time
	lastCommit time.Time
}

type churn struct {
	t          *testing.T
	h          *harness
	rnd        *rand.Rand
	assignor   assign.Assignor
	cooperate  bool
	consumers  []*consumer
	crashed    []string // instance ids of crashed static consumers
	owner      map[int32]string
	committed  map[int32]int64
	rebalances int
	commits    int
	restarts   int
	seeks      int
	cfg        Config
	next       int
}

func newChurn(t *testing.T, a assign.Assignor, seed uint64) *churn {
	cfg := Config{Rand: rand.New(rand.NewPCG(seed, 7)), InitialRebalanceDelay: time.Second}
	s := &churn{
		t: t, h: newHarness(t, cfg), cfg: cfg,
		rnd: rand.New(rand.NewPCG(seed, 8)), assignor: a, cooperate: a == assign.CooperativeSticky,
		owner: map[int32]string{}, committed: map[int32]int64{},
	}
	for range 3 {
		s.start("")
	}
	return s
}

func (s *churn) start(instance string) {
	s.next++
	s.consumers = append(s.consumers, &consumer{name: fmt.Sprint("c", s.next), instance: instance, position: map[int32]int64{}})
}

func (s *churn) step() {
	s.h.advance(churnTick)
	switch n := s.rnd.IntN(200); {
	case n < 3 && len(s.consumers) < 8:
		instance := ""
		if s.rnd.IntN(3) == 0 {
			instance = fmt.Sprint("pod-", s.next)
		}
		s.start(instance)
	case n < 4 && len(s.crashed) > 0:
		s.start(s.crashed[0]) // a static consumer restarts under its instance id
		s.crashed = s.crashed[1:]
	case n < 6 && len(s.consumers) > 1:
		s.leave(s.consumers[s.rnd.IntN(len(s.consumers))])
	case n < 8 && len(s.consumers) > 1:
		s.crash(s.consumers[s.rnd.IntN(len(s.consumers))])
	case n < 9 && s.rnd.IntN(4) == 0:
		s.restartCoordinator()
	case n < 12 && len(s.consumers) > 0:
		s.seek(s.consumers[s.rnd.IntN(len(s.consumers))])
	}
	for _, c := range slices.Clone(s.consumers) {
		s.run(c)
	}
}

// coordinatorMoved reports the errors after which Kafka's consumer looks up
// the coordinator and retries, keeping what it owns.
func coordinatorMoved(err error) bool {
	return errors.Is(err, ErrNotCoordinator) || errors.Is(err, ErrCoordinatorNotAvailable)
}

// restartCoordinator replaces the coordinator with one loaded from the log,
// as after a crash of its owner or a move of the offsets partition: parked
// requests are answered NOT_COORDINATOR, and the groups come back as
// persisted.
func (s *churn) restartCoordinator() {
	s.h.c.Unload()
	s.h.drain()
	c, err := NewCoordinator(s.cfg, s.h.now)
	require.NoError(s.t, err)
	s.h.replayInto(c, 0)
	c.Loaded()
	s.h.c = c
	s.restarts++
}

func (s *churn) remove(c *consumer) {
	s.consumers = slices.DeleteFunc(s.consumers, func(x *consumer) bool { return x == c })
}

// crash stops a consumer at once: what it owned is no longer processed, and
// the coordinator finds out only when its session expires.
func (s *churn) crash(c *consumer) {
	s.release(c, c.owned)
	s.remove(c)
	if c.instance != "" {
		s.crashed = append(s.crashed, c.instance)
	}
}

// leave closes a consumer: commit, revoke, LeaveGroup (dynamic members only;
// a static member's leaving is its session timeout).
func (s *churn) leave(c *consumer) {
	if c.state == stable {
		s.commit(c)
	}
	s.release(c, c.owned)
	s.remove(c)
	if c.memberID != "" && c.instance == "" {
		s.h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: c.memberID}}})
	}
}

func (s *churn) release(c *consumer, parts []int32) {
	for _, p := range parts {
		require.Equal(s.t, c.name, s.owner[p], "partition %d released by %s", p, c.name)
		delete(s.owner, p)
		delete(c.position, p)
	}
	c.owned = slices.DeleteFunc(c.owned, func(p int32) bool { return slices.Contains(parts, p) })
}

// acquire takes partitions, which must be free, and starts from their
// committed offsets.
func (s *churn) acquire(c *consumer, parts []int32) {
	f := s.h.fetch(OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: churnTopic, Partitions: parts}}})
	require.NoError(s.t, f.Err)
	for i, p := range parts {
		if other, ok := s.owner[p]; ok {
			s.t.Fatalf("%s acquires partition %d still owned by %s", c.name, p, other)
		}
		s.owner[p] = c.name
		c.owned = append(c.owned, p)
		c.position[p] = max(f.Topics[0].Partitions[i].Offset, 0)
	}
}

// lose drops everything after the coordinator forgot the member
// (onPartitionsLost): no commit, which would be refused anyway.
func (s *churn) lose(c *consumer, resetID bool) {
	s.release(c, slices.Clone(c.owned))
	if resetID {
		c.memberID = ""
	}
	c.generation = -1
	c.state = needJoin
}

// rejoin starts a new rebalance from the consumer's side: an eager consumer
// commits and revokes everything first.
func (s *churn) rejoin(c *consumer) {
	if !s.cooperate {
		s.commit(c)
		s.release(c, slices.Clone(c.owned))
	}
	c.state = needJoin
}

func (s *churn) run(c *consumer) {
	h := s.h
	switch c.state {
	case needJoin:
		meta := Subscription{Topics: []string{churnTopic}, Owned: map[string][]int32{churnTopic: c.owned},
			GenerationID: c.generation}.Encode(ConsumerProtocolVersion)
		req := joinReq("g", c.memberID)
		req.GroupInstanceID, req.ClientID = c.instance, c.name
		req.Protocols = []Protocol{{Name: s.assignor.Name(), Metadata: meta}}
		c.req, c.state = h.join(req), joining
	case joining:
		r := h.joined(c.req)
		switch {
		case r == nil:
		case errors.Is(r.Err, ErrMemberIDRequired):
			c.memberID, c.state = r.MemberID, needJoin
		case coordinatorMoved(r.Err):
			c.state = needJoin // find the coordinator and join again
		case r.Err != nil:
			s.lose(c, errors.Is(r.Err, ErrUnknownMemberID) || errors.Is(r.Err, ErrFencedInstanceID))
		default:
			c.memberID, c.generation, c.state = r.MemberID, r.GenerationID, needSync
			c.leader, c.skip = nil, r.SkipAssignment
			if r.Leader == r.MemberID {
				c.leader = r.Members
			}
			s.rebalances++
		}
	case needSync:
		req := SyncGroupRequest{GroupID: "g", GenerationID: c.generation, MemberID: c.memberID, GroupInstanceID: c.instance}
		if c.leader != nil && !c.skip {
			req.Assignments = s.assign(c.leader)
		}
		c.req, c.state = h.sync(req), syncing
	case syncing:
		r := h.synced(c.req)
		switch {
		case r == nil:
		case errors.Is(r.Err, ErrRebalanceInProgress) || coordinatorMoved(r.Err):
			s.rejoin(c)
		case r.Err != nil:
			s.lose(c, true)
		default:
			a, _, err := DecodeAssignment(r.Assignment)
			require.NoError(s.t, err)
			assigned := a.Partitions[churnTopic]
			revoked := slices.DeleteFunc(slices.Clone(c.owned), func(p int32) bool { return slices.Contains(assigned, p) })
			added := slices.DeleteFunc(assigned, func(p int32) bool { return slices.Contains(c.owned, p) })
			if len(revoked) > 0 {
				require.True(s.t, s.cooperate, "an eager consumer owns nothing when it syncs")
				s.commit(c)
				s.release(c, revoked)
			}
			s.acquire(c, added)
			c.state, c.lastBeat, c.lastCommit = stable, h.now, h.now
			if len(revoked) > 0 {
				c.state = needJoin // KIP-429: the second rebalance hands them out
			}
		}
	case stable:
		for _, p := range c.owned {
			c.position[p] += int64(s.rnd.IntN(5))
		}
		if h.now.Sub(c.lastCommit) >= 2*time.Second {
			s.commit(c)
		}
		if h.now.Sub(c.lastBeat) >= 3*time.Second {
			c.lastBeat = h.now
			err := h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: c.generation, MemberID: c.memberID, GroupInstanceID: c.instance})
			switch {
			case errors.Is(err, ErrRebalanceInProgress):
				s.rejoin(c)
			case coordinatorMoved(err):
			case err != nil:
				s.lose(c, !errors.Is(err, ErrIllegalGeneration))
			}
		}
	}
}

// assign is the leader's assignment: the protocol's assignor over the
// members' subscriptions.
func (s *churn) assign(members []JoinGroupMember) []SyncGroupAssignment {
	in := make([]assign.Member, len(members))
	for i, m := range members {
		sub, _, err := DecodeSubscription(m.Metadata)
		require.NoError(s.t, err)
		in[i] = assign.Member{ID: m.MemberID, InstanceID: m.GroupInstanceID, Topics: sub.Topics, Owned: sub.Owned, Generation: sub.GenerationID}
	}
	plan, err := s.assignor.Assign(in, map[string]assign.Topic{churnTopic: {Partitions: churnPartitions}})
	require.NoError(s.t, err)
	out := make([]SyncGroupAssignment, len(members))
	for i, m := range members {
		out[i] = SyncGroupAssignment{MemberID: m.MemberID, Assignment: Assignment{Partitions: plan[m.MemberID]}.Encode(ConsumerProtocolVersion)}
	}
	return out
}

// seek moves one of a consumer's partitions back, as a user's Seek does:
// its next commit may move the committed offset back to there.
func (s *churn) seek(c *consumer) {
	if len(c.owned) == 0 {
		return
	}
	p := c.owned[s.rnd.IntN(len(c.owned))]
	c.position[p] = s.rnd.Int64N(c.position[p] + 1)
	s.committed[p] = min(s.committed[p], c.position[p])
	s.seeks++
}

// commit commits the consumer's positions at its generation; a commit the
// coordinator takes must not move an offset backwards.
func (s *churn) commit(c *consumer) {
	c.lastCommit = s.h.now
	if len(c.owned) == 0 {
		return
	}
	req := OffsetCommitRequest{Version: 9, GroupID: "g", GenerationID: c.generation, MemberID: c.memberID, GroupInstanceID: c.instance,
		Topics: []OffsetCommitTopic{{Name: churnTopic}}}
	for _, p := range c.owned {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, OffsetCommitPartition{Partition: p, Offset: c.position[p], LeaderEpoch: -1})
	}
	r := s.h.commit(req)
	if r.Err != nil {
		return
	}
	for _, p := range req.Topics[0].Partitions {
		require.GreaterOrEqual(s.t, p.Offset, s.committed[p.Partition], "partition %d committed backwards by %s", p.Partition, c.name)
		s.committed[p.Partition] = p.Offset
		s.commits++
	}
}

// TestConsumerProtocolChurn is TestChurn for KIP-848 groups: consumers
// heartbeat with ConsumerGroupHeartbeat and take the assignment the
// coordinator computes; they join, leave, crash, leave for a while (static
// members, epoch -2) and come back, seek back and commit at their member
// epoch, and the coordinator restarts from its log, which now holds the
// groups. Throughout, no partition is processed by two consumers (the
// coordinator hands one over only after its owner revoked it), no committed
// offset moves backwards except after a seek, and the replayed log is the
// live state. After a restart members go on at their epochs.
func TestConsumerProtocolChurn(t *testing.T) {
	steps := churnRunSteps()
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s := &cchurn{churn: churn{t: t, rnd: rand.New(rand.NewPCG(seed, 10)), owner: map[int32]string{}, committed: map[int32]int64{}}}
			s.cfg = Config{Rand: rand.New(rand.NewPCG(seed, 11)), Partitions: func(topic string) int32 {
				return map[string]int32{churnTopic: churnPartitions}[topic]
			}}
			s.h = newHarness(t, s.cfg)
			for i := range steps {
				s.step()
				checkInvariants(t, s.h.c)
				if i == steps/3 || i == 2*steps/3 {
					s.restartCoordinator()
				}
			}
			s.settle()
			t.Logf("%d commits, %d seeks, %d partitions handed over, %d coordinator restarts, %d members fenced at their first heartbeat after one",
				s.commits, s.seeks, s.handovers, s.restarts, s.fencedAfterRestart)
			require.Greater(t, s.commits, 100, "consumers committed")
			require.Positive(t, s.seeks, "consumers seeked back")
			require.Greater(t, s.handovers, 10, "partitions changed hands")
			require.Less(t, s.fencedAfterRestart, s.restarts, "members go on at their epochs after a restart")
			checkReplay(t, s.h)
		})
	}
}

// cchurn is a churn of consumer-protocol clients.
type cchurn struct {
	churn
	clients            []*cclient
	handovers          int
	fencedAfterRestart int
	restarted          bool
}

type cclient struct {
	consumer
	epoch int32
	away  bool // a static member that left with epoch -2
	beat  time.Time
}

func (s *cchurn) step() {
	s.h.advance(churnTick)
	switch n := s.rnd.IntN(200); {
	case n < 4 && len(s.clients) < 8:
		s.next++
		c := &cclient{consumer: consumer{name: fmt.Sprint("c", s.next), memberID: fmt.Sprint("m", s.next), position: map[int32]int64{}}}
		if s.rnd.IntN(3) == 0 {
			c.instance = fmt.Sprint("pod-", s.next)
		}
		s.clients = append(s.clients, c)
	case n < 6 && len(s.clients) > 1:
		c := s.clients[s.rnd.IntN(len(s.clients))]
		s.ccommit(c)
		s.release(&c.consumer, slices.Clone(c.owned))
		s.clients = slices.DeleteFunc(s.clients, func(x *cclient) bool { return x == c })
		s.heartbeat(c, LeaveMemberEpoch)
	case n < 8 && len(s.clients) > 1:
		c := s.clients[s.rnd.IntN(len(s.clients))]
		s.release(&c.consumer, slices.Clone(c.owned)) // crashed: its session runs out
		s.clients = slices.DeleteFunc(s.clients, func(x *cclient) bool { return x == c })
	case n < 10 && len(s.clients) > 0:
		c := s.clients[s.rnd.IntN(len(s.clients))]
		switch {
		case c.instance != "" && !c.away && c.epoch > 0:
			s.ccommit(c)
			s.release(&c.consumer, slices.Clone(c.owned))
			s.heartbeat(c, StaticLeaveMemberEpoch)
			c.away = true
		case c.away:
			// Back under its instance id as a new member, within the
			// session: it takes the old member's place and assignment.
			s.next++
			c.memberID, c.epoch, c.away = fmt.Sprint("m", s.next), 0, false
		}
	case n < 11 && s.rnd.IntN(2) == 0:
		s.restartCoordinator()
		s.restarted = true
	case n < 14 && len(s.clients) > 0:
		c := s.clients[s.rnd.IntN(len(s.clients))]
		s.seek(&c.consumer)
	}
	for _, c := range slices.Clone(s.clients) {
		if c.away {
			continue
		}
		for _, p := range c.owned {
			c.position[p] += int64(s.rnd.IntN(5))
		}
		if c.epoch == 0 || s.h.now.Sub(c.beat) >= 3*time.Second {
			s.heartbeat(c, c.epoch)
		}
		if s.h.now.Sub(c.lastCommit) >= 2*time.Second {
			s.ccommit(c)
		}
	}
}

// heartbeat sends a heartbeat at epoch and applies its answer as Kafka's
// consumer does: revoke what is no longer assigned (committing first),
// then take what is new; fenced, it gives up everything and rejoins under
// the same member id (KIP-1082).
func (s *cchurn) heartbeat(c *cclient, epoch int32) {
	req := ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: c.memberID, InstanceID: c.instance, MemberEpoch: epoch,
		Owned: &Assignment{Partitions: map[string][]int32{churnTopic: slices.Clone(c.owned)}}}
	if epoch == JoinMemberEpoch {
		req.RebalanceTimeout, req.SubscribedTopicNames, req.Owned = time.Minute, []string{churnTopic}, &Assignment{}
		req.ServerAssignor = pick(s.rnd, []string{"uniform", "range"})
	}
	c.beat = s.h.now
	r := s.h.cgh(req)
	if epoch < 0 {
		return
	}
	if r.Err != nil {
		if s.restarted && errors.Is(r.Err, ErrFencedMemberEpoch) {
			s.fencedAfterRestart++
		}
		s.release(&c.consumer, slices.Clone(c.owned))
		c.epoch = 0
		return
	}
	s.restarted = false
	c.epoch = r.MemberEpoch
	if r.Assignment == nil {
		return
	}
	assigned := r.Assignment.Partitions[churnTopic]
	revoked := slices.DeleteFunc(slices.Clone(c.owned), func(p int32) bool { return slices.Contains(assigned, p) })
	added := slices.DeleteFunc(slices.Clone(assigned), func(p int32) bool { return slices.Contains(c.owned, p) })
	if len(revoked) > 0 {
		s.ccommit(c)
		s.release(&c.consumer, revoked)
	}
	if len(added) > 0 {
		s.acquire(&c.consumer, added)
		s.handovers += len(added)
	}
}

// ccommit commits a client's positions at its member epoch.
func (s *cchurn) ccommit(c *cclient) {
	c.generation = c.epoch
	s.commit(&c.consumer)
}

// settle lets the crashed members' sessions run out while the others
// heartbeat: every partition is then processed by exactly one consumer.
func (s *cchurn) settle() {
	for _, c := range s.clients {
		if c.away {
			s.next++
			c.memberID, c.epoch, c.away = fmt.Sprint("m", s.next), 0, false
		}
	}
	for range 24 {
		s.h.advance(5 * time.Second)
		for _, c := range s.clients {
			s.heartbeat(c, c.epoch)
		}
	}
	if len(s.clients) > 0 {
		require.Len(s.t, s.owner, churnPartitions, "every partition has a consumer once the group is Stable")
		require.Equal(s.t, "Stable", s.h.c.consumerGroups["g"].state())
	}
}
