package group

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
)

// classicJoin is a Kafka consumer's JoinGroup speaking the classic
// protocol: its subscription to "t" (consumer protocol v3) reports what it
// owns, as a cooperative consumer's does.
func classicJoin(group, memberID string, owned ...int32) JoinGroupRequest {
	r := joinReq(group, memberID)
	sub := Subscription{Topics: []string{"t"}, GenerationID: -1}
	if len(owned) > 0 {
		sub.Owned = map[string][]int32{"t": owned}
	}
	r.Protocols = []Protocol{{Name: "cooperative-sticky", Metadata: sub.Encode(3)}}
	return r
}

// classicClient is a consumer speaking the classic protocol, as the
// coordinator sees it: it owns what its last SyncGroup assigned, joins
// again when a heartbeat says so, and reports what it owns when it does.
// As a classic group's leader it assigns t's six partitions round robin.
type classicClient struct {
	id      string
	gen     int32
	owned   []int32
	eager   bool      // gives up what it owns before it rejoins
	joining RequestID // a JoinGroup parked in a classic group's join phase
	syncing RequestID // a SyncGroup parked until the leader's
}

// rejoin sends the client's JoinGroup and, if it is answered, its
// SyncGroup; a cooperative client keeps its partitions until the
// assignment it syncs takes some away.
func (h *harness) rejoin(group string, c *classicClient) error {
	h.t.Helper()
	if c.eager {
		c.owned = nil
	}
	c.joining, c.syncing = h.join(classicJoin(group, c.id, c.owned...)), 0
	if jr := h.joined(c.joining); jr != nil && errorsIs(jr.Err, ErrMemberIDRequired) {
		c.id = jr.MemberID
		c.joining = h.join(classicJoin(group, c.id, c.owned...))
	}
	return h.progress(group, c)
}

// progress reads the answers to the client's parked requests, and syncs
// once its join is answered.
func (h *harness) progress(group string, c *classicClient) error {
	h.t.Helper()
	if c.joining != 0 {
		jr := h.joined(c.joining)
		if jr == nil {
			return nil
		}
		c.joining = 0
		if jr.Err != nil {
			return jr.Err
		}
		c.id, c.gen = jr.MemberID, jr.GenerationID
		req := SyncGroupRequest{GroupID: group, GenerationID: c.gen, MemberID: c.id,
			ProtocolType: "consumer", ProtocolName: "cooperative-sticky"}
		if jr.Leader == c.id {
			for i, m := range jr.Members {
				var ps []int32
				for p := int32(i); p < 6; p += int32(len(jr.Members)) {
					ps = append(ps, p)
				}
				req.Assignments = append(req.Assignments, SyncGroupAssignment{MemberID: m.MemberID,
					Assignment: Assignment{Partitions: map[string][]int32{"t": ps}}.Encode(3)})
			}
		}
		c.syncing = h.sync(req)
	}
	if c.syncing != 0 {
		sr := h.synced(c.syncing)
		if sr == nil {
			return nil
		}
		c.syncing = 0
		if sr.Err != nil {
			return sr.Err
		}
		a, _, err := DecodeAssignment(sr.Assignment)
		require.NoError(h.t, err)
		c.owned = a.Partitions["t"]
	}
	return nil
}

// beat heartbeats a classic client, or waits for its parked request: on
// REBALANCE_IN_PROGRESS it rejoins.
func (h *harness) beat(group string, c *classicClient) error {
	h.t.Helper()
	if c.joining != 0 || c.syncing != 0 {
		return h.progress(group, c)
	}
	err := h.heartbeat(HeartbeatRequest{GroupID: group, GenerationID: c.gen, MemberID: c.id})
	if errorsIs(err, ErrRebalanceInProgress) {
		return h.rejoin(group, c)
	}
	return err
}

func errorsIs(err error, target kafkaerr.Code) bool {
	return err != nil && kafkaerr.CodeOf(err) == target
}

// classicStable builds a Stable classic group of n consumers speaking the
// classic protocol; its leader splits t's six partitions round robin.
func (h *harness) classicStable(group string, n int) []*classicClient {
	h.t.Helper()
	clients := make([]*classicClient, n)
	joins := make([]RequestID, n)
	for i := range clients {
		first := h.joined(h.join(classicJoin(group, "")))
		require.ErrorIs(h.t, first.Err, ErrMemberIDRequired)
		clients[i] = &classicClient{id: first.MemberID}
		joins[i] = h.join(classicJoin(group, first.MemberID))
	}
	h.advance(0)
	g := h.group(group)
	var asg []SyncGroupAssignment
	for i, c := range clients {
		c.gen = h.joined(joins[i]).GenerationID
		var ps []int32
		for p := int32(i); p < 6; p += int32(n) {
			ps = append(ps, p)
		}
		asg = append(asg, SyncGroupAssignment{MemberID: c.id, Assignment: Assignment{Partitions: map[string][]int32{"t": ps}}.Encode(3)})
	}
	for _, c := range clients {
		if !g.isLeader(c.id) {
			h.sync(SyncGroupRequest{GroupID: group, GenerationID: c.gen, MemberID: c.id})
		}
	}
	h.sync(SyncGroupRequest{GroupID: group, GenerationID: g.generation, MemberID: g.leader, Assignments: asg})
	for i, c := range clients {
		a, _, err := DecodeAssignment(asg[i].Assignment)
		require.NoError(h.t, err)
		c.owned = a.Partitions["t"]
	}
	require.Equal(h.t, Stable, g.state)
	return clients
}

// consumerClient is a consumer speaking the consumer protocol.
type consumerClient struct {
	id    string
	epoch int32
	owned []int32
}

func (h *harness) consumerBeat(c *consumerClient) error {
	h.t.Helper()
	req := ConsumerGroupHeartbeatRequest{MemberID: c.id, MemberEpoch: c.epoch, Owned: owns(c.owned...)}
	if c.epoch == 0 {
		req.RebalanceTimeout, req.SubscribedTopicNames, req.ServerAssignor, req.Owned = time.Minute, []string{"t"}, "range", &Assignment{}
	}
	r := h.cgh(req)
	if r.Err != nil {
		c.epoch, c.owned = 0, nil
		return r.Err
	}
	c.epoch = r.MemberEpoch
	if r.Assignment != nil {
		c.owned = r.Assignment.Partitions["t"]
	}
	return nil
}

// checkOwners checks that no partition is owned by two clients, as the
// clients see it, and returns how many partitions they own.
func checkOwners(t *testing.T, classic []*classicClient, consumers []*consumerClient) int {
	t.Helper()
	seen := map[int32]string{}
	own := func(id string, ps []int32) {
		for _, p := range ps {
			require.NotContains(t, seen, p, "partition %d owned by %s and %s", p, seen[p], id)
			seen[p] = id
		}
	}
	for _, c := range classic {
		own(c.id, c.owned)
	}
	for _, c := range consumers {
		own(c.id, c.owned)
	}
	return len(seen)
}

// Kafka 3.8+ (KIP-848's online upgrade): a member joining a classic group
// with ConsumerGroupHeartbeat converts it into a consumer group, in which
// the classic members stay, at their generation, with what they were
// assigned. They learn of the new group epoch from their heartbeats
// (REBALANCE_IN_PROGRESS), rejoin, give up what the target moves away, and
// the new member gets it only then.
func TestUpgradeKeepsLiveClassicMembers(t *testing.T) {
	h := consumerHarness(t)
	classic := h.classicStable("g", 2)
	gen := h.group("g").generation
	before := len(h.log)

	c := &consumerClient{id: "c"}
	require.NoError(t, h.consumerBeat(c))
	cg := h.c.consumerGroups["g"]
	require.NotNil(t, cg, "the group is a consumer group")
	assert.Nil(t, h.c.groups["g"])
	assert.Equal(t, gen+1, cg.epoch, "the join bumps the epoch of the converted group")
	for _, cl := range classic {
		m := cg.byID[cl.id]
		require.NotNil(t, m, "classic member %s kept", cl.id)
		assert.NotNil(t, m.classic)
		assert.Equal(t, gen, m.epoch)
		assert.Equal(t, cl.owned, m.assigned["t"], "classic member %s keeps its partitions", cl.id)
		assert.Equal(t, int32(10000), m.classic.SessionTimeoutMs)
	}
	assert.Empty(t, c.owned, "the new member waits for the partitions the classic members hold")
	first, err := Decode(h.log[before])
	require.NoError(t, err)
	require.NotNil(t, first.GroupKey, "the conversion starts with the classic group's tombstone")
	assert.Nil(t, first.GroupValue)
	checkReplay(t, h)

	require.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: gen, MemberID: classic[0].id}), ErrRebalanceInProgress,
		"a classic member behind the group epoch must rejoin")
	for range 6 {
		for _, cl := range classic {
			require.NoError(t, h.beat("g", cl))
			checkOwners(t, classic, []*consumerClient{c})
			checkExclusive(t, cg)
		}
		require.NoError(t, h.consumerBeat(c))
		checkOwners(t, classic, []*consumerClient{c})
		checkExclusive(t, cg)
		checkReplay(t, h)
	}
	assert.Equal(t, "Stable", cg.state())
	assert.Equal(t, 6, checkOwners(t, classic, []*consumerClient{c}))
	for _, cl := range classic {
		assert.Len(t, cl.owned, 2)
		assert.Equal(t, cg.epoch, cl.gen, "a reconciled classic member's generation is its member epoch")
	}
	assert.Len(t, c.owned, 2)
}

// A classic member joining a consumer group: KIP-394's MEMBER_ID_REQUIRED
// first, then a member of the consumer group whose generation is its
// member epoch; never the leader, it gets its assignment from SyncGroup.
// Wrong generations, unknown members and members of the other protocol are
// Kafka's errors.
func TestClassicMemberInConsumerGroup(t *testing.T) {
	h := consumerHarness(t)
	c := &consumerClient{id: "c"}
	require.NoError(t, h.consumerBeat(c))
	require.Len(t, c.owned, 6)

	a := &classicClient{}
	require.NoError(t, h.rejoin("g", a))
	cg := h.c.consumerGroups["g"]
	require.NotNil(t, cg.byID[a.id].classic)
	assert.Empty(t, a.owned, "nothing is free yet")
	assert.Equal(t, cg.byID[a.id].epoch, a.gen)
	assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: a.gen + 1, MemberID: a.id}), ErrIllegalGeneration)
	assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: a.gen, MemberID: "nobody"}), ErrUnknownMemberID)
	assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: c.epoch, MemberID: c.id}), ErrUnknownMemberID,
		"a member of the consumer protocol is unknown to the classic one")
	bad := SyncGroupRequest{GroupID: "g", GenerationID: a.gen, MemberID: a.id, ProtocolType: "consumer", ProtocolName: "range"}
	assert.ErrorIs(t, h.synced(h.sync(bad)).Err, ErrInconsistentGroupProtocol)

	for range 4 {
		require.NoError(t, h.consumerBeat(c))
		require.NoError(t, h.beat("g", a))
		checkOwners(t, []*classicClient{a}, []*consumerClient{c})
		checkReplay(t, h)
	}
	assert.Len(t, a.owned, 3)
	assert.Len(t, c.owned, 3)
	d, ok := h.c.DescribeConsumerGroup("g")
	require.True(t, ok)
	protocols := map[string]bool{}
	for _, m := range d.Members {
		protocols[m.MemberID] = m.Classic
	}
	assert.Equal(t, map[string]bool{a.id: true, c.id: false}, protocols, "ConsumerGroupDescribe tells the protocols apart")
	// A classic member commits with its member epoch as generation, with
	// the OffsetCommit versions of the classic protocol, and a wrong one
	// is ILLEGAL_GENERATION, not STALE_MEMBER_EPOCH (ConsumerGroup.
	// validateOffsetCommit).
	commit := commitOne("g", a.gen, a.id, 5)
	commit.Version = 2
	assert.NoError(t, h.commit(commit).Err)
	commit.GenerationID++
	assert.ErrorIs(t, h.commit(commit).Err, ErrIllegalGeneration)

	// A member that does not rejoin within its rebalance timeout after it
	// was told to is removed, and its partitions go back to the others.
	require.NoError(t, h.consumerBeat(&consumerClient{id: "d"}))
	require.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: a.gen, MemberID: a.id}), ErrRebalanceInProgress)
	h.advance(30 * time.Second)
	assert.Nil(t, cg.byID[a.id], "removed after the rebalance timeout")
	checkReplay(t, h)

	// LeaveGroup of a classic member bumps the group epoch.
	b := &classicClient{}
	require.NoError(t, h.rejoin("g", b))
	epoch := cg.epoch
	lr := h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: b.id}, {MemberID: c.id}}})
	assert.NoError(t, lr.Members[0].Err)
	assert.ErrorIs(t, lr.Members[1].Err, ErrUnknownMemberID, "a consumer-protocol member leaves with ConsumerGroupHeartbeat")
	assert.Nil(t, cg.byID[b.id])
	assert.Equal(t, epoch+1, cg.epoch)
	checkReplay(t, h)
}

// Kafka's downgrade: when the last member speaking the consumer protocol
// leaves a consumer group whose other members speak the classic protocol,
// the group becomes a classic group at the group epoch, each member
// assigned its target, and rebalances, since a member left.
func TestDowngradeWhenLastConsumerMemberLeaves(t *testing.T) {
	h := consumerHarness(t)
	classic := h.classicStable("g", 2)
	c := &consumerClient{id: "c"}
	require.NoError(t, h.consumerBeat(c))
	for range 6 {
		for _, cl := range classic {
			require.NoError(t, h.beat("g", cl))
		}
		require.NoError(t, h.consumerBeat(c))
	}
	cg := h.c.consumerGroups["g"]
	require.Equal(t, "Stable", cg.state())
	epoch := cg.epoch
	before := len(h.log)

	require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "c", MemberEpoch: LeaveMemberEpoch}).Err)
	c.owned = nil
	assert.Nil(t, h.c.consumerGroups["g"])
	g := h.group("g")
	assert.Equal(t, PreparingRebalance, g.state)
	assert.Equal(t, epoch, g.generation)
	assert.Equal(t, "consumer", g.protocolType)
	assert.Equal(t, "cooperative-sticky", g.protocolName)
	require.Len(t, g.members, 2)
	for _, cl := range classic {
		a, _, err := DecodeAssignment(g.byID[cl.id].assignment)
		require.NoError(t, err)
		assert.Equal(t, cl.owned, a.Partitions["t"], "member %s assigned its target", cl.id)
	}
	// The consumer group's tombstones, then the classic group.
	recs := h.log[before:]
	last, err := Decode(recs[len(recs)-1])
	require.NoError(t, err)
	require.NotNil(t, last.GroupValue)
	assert.Len(t, last.GroupValue.Members, 2)
	for _, r := range recs[:len(recs)-1] {
		d, err := Decode(r)
		require.NoError(t, err)
		require.NotNil(t, d.ConsumerKey)
		assert.Nil(t, r.Value, "tombstone of %+v", *d.ConsumerKey)
	}
	checkReplay(t, h)

	// The classic members rejoin the classic group.
	for _, cl := range classic {
		require.NoError(t, h.beat("g", cl))
	}
	require.Equal(t, CompletingRebalance, g.state)
	checkReplay(t, h)
}

// The migration policy (group.consumer.migration.policy): an upgrade it
// forbids answers GROUP_ID_NOT_FOUND and changes nothing; a downgrade it
// forbids leaves a consumer group of classic members. A classic group of
// another protocol type, or one that would be too large, never upgrades.
func TestMigrationPolicy(t *testing.T) {
	for _, policy := range []MigrationPolicy{MigrationBidirectional, MigrationUpgrade, MigrationDowngrade, MigrationDisabled} {
		t.Run(policy.String(), func(t *testing.T) {
			cfg := Config{InitialRebalanceDelay: -1, MigrationPolicy: policy, Partitions: func(string) int32 { return 6 }}

			h := newHarness(t, cfg)
			h.classicStable("g", 2)
			before := slices.Clone(h.log)
			err := h.consumerBeat(&consumerClient{id: "c"})
			if policy == MigrationBidirectional || policy == MigrationUpgrade {
				require.NoError(t, err)
				assert.NotNil(t, h.c.consumerGroups["g"], "upgraded")
			} else {
				require.ErrorIs(t, err, ErrGroupIDNotFound)
				assert.Equal(t, before, h.log, "the offsets log changed")
				assert.Equal(t, Stable, h.group("g").state)
			}

			h = newHarness(t, cfg)
			c := &consumerClient{id: "c"}
			require.NoError(t, h.consumerBeat(c))
			require.NoError(t, h.rejoin("g", &classicClient{}), "a classic member may join a consumer group under any policy")
			require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "c", MemberEpoch: LeaveMemberEpoch}).Err)
			if policy == MigrationBidirectional || policy == MigrationDowngrade {
				assert.NotNil(t, h.c.groups["g"], "downgraded")
				assert.Nil(t, h.c.consumerGroups["g"])
			} else {
				assert.Nil(t, h.c.groups["g"])
				require.NotNil(t, h.c.consumerGroups["g"], "still a consumer group")
				assert.Len(t, h.c.consumerGroups["g"].members, 1)
			}
			checkReplay(t, h)
		})
	}
	t.Run("a policy that does not exist", func(t *testing.T) {
		_, err := NewCoordinator(Config{MigrationPolicy: MigrationDisabled + 1}, epoch)
		assert.ErrorIs(t, err, ErrInvalidConfig)
	})
	t.Run("another protocol type", func(t *testing.T) {
		h := consumerHarness(t)
		h.stable("g", 1)
		h.c.groups["g"].protocolType = "connect"
		assert.ErrorIs(t, h.consumerBeat(&consumerClient{id: "c"}), ErrGroupIDNotFound)
	})
	t.Run("subscriptions that do not decode", func(t *testing.T) {
		h := consumerHarness(t)
		h.stable("g", 1) // metadata "sub-<id>"
		before := slices.Clone(h.log)
		assert.ErrorIs(t, h.consumerBeat(&consumerClient{id: "c"}), ErrGroupIDNotFound)
		assert.Equal(t, before, h.log)
	})
	t.Run("group.max.size", func(t *testing.T) {
		h := newHarness(t, Config{InitialRebalanceDelay: -1, MaxSize: 2, Partitions: func(string) int32 { return 6 }})
		h.classicStable("g", 2)
		before := slices.Clone(h.log)
		assert.ErrorIs(t, h.consumerBeat(&consumerClient{id: "c"}), ErrGroupMaxSizeReached)
		assert.Equal(t, before, h.log)
		assert.Equal(t, Stable, h.group("g").state)
	})
	t.Run("a join the converted group would refuse", func(t *testing.T) {
		h := consumerHarness(t)
		h.classicStable("g", 1)
		h.join(func() JoinGroupRequest { r := classicJoin("g", ""); r.GroupInstanceID = "pod"; return r }())
		before := slices.Clone(h.log)
		r := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "c", InstanceID: "pod", RebalanceTimeout: time.Minute,
			SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}})
		assert.ErrorIs(t, r.Err, ErrUnreleasedInstanceID)
		assert.Equal(t, before, h.log, "no conversion")
		assert.NotNil(t, h.c.groups["g"])
	})
	t.Run("a parked join is answered", func(t *testing.T) {
		h := consumerHarness(t)
		classic := h.classicStable("g", 2)
		parked := h.join(classicJoin("g", classic[0].id, classic[0].owned...)) // the leader's rejoin rebalances
		require.Nil(t, h.joined(parked))
		require.NoError(t, h.consumerBeat(&consumerClient{id: "c"}))
		assert.ErrorIs(t, h.joined(parked).Err, ErrRebalanceInProgress)
		assert.Nil(t, h.c.timers.byKey[timerKey{kind: timerJoin, group: "g"}], "the classic group's timers stop")
		checkReplay(t, h)
	})
}

// The churn of TestConsumerGroupChurn with members of both protocols: the
// group converts back and forth as consumer-protocol members come and go,
// and no partition is ever owned by two members, as they see it.
func TestMixedProtocolChurn(t *testing.T) {
	steps := 5000
	if testing.Short() {
		steps = 1000
	}
	upgrades, downgrades := 0, 0
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			h := consumerHarness(t)
			rnd := rand.New(rand.NewPCG(seed, 9))
			var classic []*classicClient
			var consumers []*consumerClient
			next := 0
			for range steps {
				wasConsumer := h.c.consumerGroups["g"] != nil
				wasClassic := h.c.groups["g"] != nil && len(h.c.groups["g"].members) > 0
				switch n := rnd.IntN(100); {
				case n < 8 && len(classic)+len(consumers) < 6:
					next++
					if rnd.IntN(3) > 0 {
						classic = append(classic, &classicClient{eager: true})
					} else {
						consumers = append(consumers, &consumerClient{id: fmt.Sprint("c", next)})
					}
				case n < 12 && len(consumers) > 0:
					i := rnd.IntN(len(consumers))
					if c := consumers[i]; c.epoch > 0 && rnd.IntN(5) > 0 {
						h.cgh(ConsumerGroupHeartbeatRequest{MemberID: c.id, MemberEpoch: LeaveMemberEpoch})
					}
					consumers = slices.Delete(consumers, i, i+1) // left, or crashed
				case n < 14 && len(classic) > 0:
					i := rnd.IntN(len(classic))
					if c := classic[i]; c.id != "" && rnd.IntN(2) == 0 {
						h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: c.id}}})
					}
					classic = slices.Delete(classic, i, i+1)
				case n < 30:
					// Time passes; the members still there heartbeat
					// within their sessions, as their heartbeat threads do.
					h.advance(time.Duration(rnd.IntN(3000)) * time.Millisecond)
					for _, c := range classic {
						if c.gen >= 0 && c.id != "" {
							if err := h.beat("g", c); err != nil && !errorsIs(err, ErrRebalanceInProgress) {
								c.gen, c.owned, c.joining, c.syncing = -1, nil, 0, 0
							}
						}
					}
					for _, c := range consumers {
						_ = h.consumerBeat(c)
					}
				case n < 65 && len(classic) > 0:
					c := classic[rnd.IntN(len(classic))]
					var err error
					if c.id == "" || c.gen < 0 {
						err = h.rejoin("g", c)
					} else {
						err = h.beat("g", c)
					}
					if err != nil && !errorsIs(err, ErrRebalanceInProgress) {
						// Fenced or removed: it gives everything up and rejoins.
						c.gen, c.owned, c.joining, c.syncing = -1, nil, 0, 0
					}
				case len(consumers) > 0:
					_ = h.consumerBeat(consumers[rnd.IntN(len(consumers))])
				}
				checkOwners(t, classic, consumers)
				checkInvariants(t, h.c)
				if cg := h.c.consumerGroups["g"]; cg != nil && wasClassic {
					upgrades++
				}
				if g := h.c.groups["g"]; g != nil && len(g.members) > 0 && wasConsumer {
					downgrades++
				}
			}
			checkReplay(t, h)
		})
	}
	t.Logf("%d upgrades, %d downgrades", upgrades, downgrades)
	require.NotZero(t, upgrades, "the churn upgraded the group")
	require.NotZero(t, downgrades, "the churn downgraded the group")
}

// A static member speaking the consumer protocol that restarts speaking the
// classic one, the last of the consumer protocol, takes its own place in a
// classic group again, Stable, without a rebalance
// (validateOnlineDowngradeWithReplacedMemberId), as the policy allows.
func TestDowngradeWhenStaticMemberRestartsClassic(t *testing.T) {
	for _, policy := range []MigrationPolicy{MigrationBidirectional, MigrationUpgrade} {
		t.Run(policy.String(), func(t *testing.T) {
			h := newHarness(t, Config{InitialRebalanceDelay: -1, MigrationPolicy: policy, Partitions: func(string) int32 { return 6 }})
			s := &consumerClient{id: "s"}
			r := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "s", InstanceID: "pod-s", RebalanceTimeout: time.Minute,
				SubscribedTopicNames: []string{"t"}, ServerAssignor: "range", Owned: &Assignment{}})
			require.NoError(t, r.Err)
			s.epoch, s.owned = r.MemberEpoch, r.Assignment.Partitions["t"]
			a := &classicClient{}
			require.NoError(t, h.rejoin("g", a))
			for range 4 {
				require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "s", InstanceID: "pod-s", MemberEpoch: s.epoch, Owned: owns(s.owned...)}).Err)
				cg := h.c.consumerGroups["g"]
				s.epoch, s.owned = cg.byID["s"].epoch, cg.byID["s"].assigned["t"]
				require.NoError(t, h.beat("g", a))
			}
			cg := h.c.consumerGroups["g"]
			require.Equal(t, "Stable", cg.state())
			sTarget := cg.target["s"]["t"]

			restart := classicJoin("g", "")
			restart.GroupInstanceID = "pod-s"
			jr := h.joined(h.join(restart))
			require.NoError(t, jr.Err)
			if policy == MigrationUpgrade {
				assert.NotNil(t, h.c.consumerGroups["g"], "the policy keeps the consumer group")
				checkReplay(t, h)
				return
			}
			g := h.group("g")
			assert.Equal(t, Stable, g.state, "no rebalance")
			assert.Equal(t, jr.GenerationID, g.generation)
			require.Len(t, g.members, 2)
			sr := h.synced(h.sync(SyncGroupRequest{GroupID: "g", GenerationID: jr.GenerationID, MemberID: jr.MemberID, GroupInstanceID: "pod-s"}))
			require.NoError(t, sr.Err)
			got, _, err := DecodeAssignment(sr.Assignment)
			require.NoError(t, err)
			assert.Equal(t, sTarget, got.Partitions["t"], "the restarted member has its predecessor's partitions")
			checkReplay(t, h)
		})
	}
}
