package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// consumerHarness is a coordinator whose cluster has topic "t" of six
// partitions.
func consumerHarness(t *testing.T) *harness {
	return newHarness(t, Config{InitialRebalanceDelay: -1, Partitions: func(topic string) int32 { return map[string]int32{"t": 6}[topic] }})
}

func (h *harness) cgh(req ConsumerGroupHeartbeatRequest) *ConsumerGroupHeartbeatResponse {
	if req.GroupID == "" {
		req.GroupID = "g"
	}
	id := h.id()
	h.c.ConsumerGroupHeartbeat(id, req)
	h.drain()
	return h.resps[id].(*ConsumerGroupHeartbeatResponse)
}

// joinConsumer is a member's first heartbeat, subscribed to "t" with the
// range assignor.
func (h *harness) joinConsumer(memberID, instance string) *ConsumerGroupHeartbeatResponse {
	return h.cgh(ConsumerGroupHeartbeatRequest{MemberID: memberID, InstanceID: instance, RebalanceTimeout: time.Minute,
		SubscribedTopicNames: []string{"t"}, ServerAssignor: "range", Owned: &Assignment{}})
}

func owns(ps ...int32) *Assignment { return &Assignment{Partitions: map[string][]int32{"t": ps}} }

// checkExclusive checks that no partition is held by two members.
func checkExclusive(t *testing.T, g *consumerGroup) {
	t.Helper()
	seen := map[int32]string{}
	for _, m := range g.members {
		for _, ps := range []partitions{m.assigned, m.pendingRevocation} {
			for _, p := range ps["t"] {
				require.NotContains(t, seen, p, "partition %d held by %s and %s", p, seen[p], m.id)
				seen[p] = m.id
			}
		}
	}
}

// The KIP-848 rules of ConsumerGroupHeartbeat (GroupMetadataManager
// .consumerGroupHeartbeat and its tests in GroupMetadataManagerTest).
func TestConsumerGroupHeartbeat(t *testing.T) {
	t.Run("C1 a join must give a rebalance timeout, topics and no owned partitions", func(t *testing.T) {
		h := consumerHarness(t)
		good := ConsumerGroupHeartbeatRequest{GroupID: "g", RebalanceTimeout: time.Minute, SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}}
		bad := []struct {
			change func(*ConsumerGroupHeartbeatRequest)
			want   error
		}{
			{func(r *ConsumerGroupHeartbeatRequest) { r.RebalanceTimeout = 0 }, ErrInvalidRequest},
			{func(r *ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, ErrInvalidRequest},
			{func(r *ConsumerGroupHeartbeatRequest) { r.Owned = nil }, ErrInvalidRequest},
			{func(r *ConsumerGroupHeartbeatRequest) { r.Owned = owns(1) }, ErrInvalidRequest},
			{func(r *ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, ErrInvalidRequest},
			{func(r *ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 4 }, ErrInvalidRequest},
			{func(r *ConsumerGroupHeartbeatRequest) { r.MemberEpoch, r.MemberID = 4, "m" }, ErrGroupIDNotFound},
			{func(r *ConsumerGroupHeartbeatRequest) { r.ServerAssignor = "sticky" }, ErrUnsupportedAssignor},
			{func(r *ConsumerGroupHeartbeatRequest) { r.GroupID = string(make([]byte, maxStringLen+1)) }, ErrInvalidGroupID},
		}
		for i, b := range bad {
			req := good
			b.change(&req)
			assert.ErrorIs(t, h.cgh(req).Err, b.want, "case %d", i)
		}
		assert.Empty(t, h.c.consumerGroups)
		r := h.cgh(good)
		require.NoError(t, r.Err)
		assert.NotEmpty(t, r.MemberID)
		assert.Equal(t, int32(1), r.MemberEpoch)
		assert.Equal(t, owns(0, 1, 2, 3, 4, 5), r.Assignment)
		assert.Equal(t, "Stable", h.c.consumerGroups["g"].state())
		unknown := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "stranger", MemberEpoch: 1})
		assert.ErrorIs(t, unknown.Err, ErrUnknownMemberID)
	})
	t.Run("C2 a member ahead of its epoch, or behind it other than by a lost response, is fenced", func(t *testing.T) {
		h := consumerHarness(t)
		a := h.joinConsumer("a", "")
		require.NoError(t, a.Err)
		assert.ErrorIs(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 2}).Err, ErrFencedMemberEpoch)
		h.joinConsumer("b", "")
		r := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1, 2)})
		require.NoError(t, r.Err)
		// a revoked 3-5 and moved to epoch 2; a heartbeat of epoch 1 that
		// owns no more than a's assignment is a lost response, not a zombie.
		require.Equal(t, int32(2), r.MemberEpoch)
		assert.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1)}).Err)
		assert.ErrorIs(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 5)}).Err, ErrFencedMemberEpoch)
		assert.ErrorIs(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1}).Err, ErrFencedMemberEpoch)
	})
	t.Run("C3 a partition moves only after its owner revoked it", func(t *testing.T) {
		h := consumerHarness(t)
		require.Equal(t, owns(0, 1, 2, 3, 4, 5), h.joinConsumer("a", "").Assignment)
		g := h.c.consumerGroups["g"]
		b := h.joinConsumer("b", "")
		require.NoError(t, b.Err)
		assert.Equal(t, int32(2), b.MemberEpoch)
		assert.Equal(t, &Assignment{Partitions: map[string][]int32{}}, b.Assignment, "b waits for a to release 3-5")
		assert.Equal(t, memberUnreleasedPartitions, g.byID["b"].state)
		checkExclusive(t, g)

		a := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1, 2, 3, 4, 5)})
		require.NoError(t, a.Err)
		assert.Equal(t, int32(1), a.MemberEpoch, "a stays at its epoch until it revokes")
		assert.Equal(t, owns(0, 1, 2), a.Assignment)
		assert.Equal(t, memberUnrevokedPartitions, g.byID["a"].state)
		assert.Equal(t, "Reconciling", g.state())
		checkExclusive(t, g)

		b = h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2, Owned: owns()})
		assert.Nil(t, b.Assignment, "still nothing for b")

		a = h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1, 2)})
		assert.Equal(t, int32(2), a.MemberEpoch)
		b = h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2, Owned: owns()})
		assert.Equal(t, owns(3, 4, 5), b.Assignment)
		assert.Equal(t, "Stable", g.state())
		checkExclusive(t, g)
	})
	t.Run("C4 a member that does not revoke within its rebalance timeout is fenced", func(t *testing.T) {
		h := consumerHarness(t)
		h.joinConsumer("a", "")
		h.joinConsumer("b", "")
		h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1, 2, 3, 4, 5)})
		for range 11 {
			h.advance(5 * time.Second)
			h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2})
			h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1, 2, 3, 4, 5)})
		}
		g := h.c.consumerGroups["g"]
		require.NotNil(t, g.byID["a"])
		h.advance(5 * time.Second) // the minute since a was asked to revoke
		assert.Nil(t, g.byID["a"])
		b := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2})
		assert.Equal(t, owns(0, 1, 2, 3, 4, 5), b.Assignment)
		assert.ErrorIs(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1}).Err, ErrUnknownMemberID)
	})
	t.Run("C5 a static member that leaves with epoch -2 keeps its partitions and gets them back when it rejoins", func(t *testing.T) {
		h := consumerHarness(t)
		h.joinConsumer("a1", "pod-a")
		h.joinConsumer("b", "")
		h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a1", MemberEpoch: 1, Owned: owns(0, 1, 2, 3, 4, 5)})
		h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a1", MemberEpoch: 1, Owned: owns(0, 1, 2)})
		h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2, Owned: owns()})
		g := h.c.consumerGroups["g"]
		require.Equal(t, "Stable", g.state())
		epoch := g.epoch

		left := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a1", InstanceID: "pod-a", MemberEpoch: StaticLeaveMemberEpoch})
		require.NoError(t, left.Err)
		assert.Equal(t, int32(StaticLeaveMemberEpoch), left.MemberEpoch)
		assert.Equal(t, epoch, g.epoch, "no rebalance")
		assert.Nil(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2}).Assignment, "b does not get a's partitions")

		back := h.joinConsumer("a2", "pod-a")
		require.NoError(t, back.Err)
		assert.Equal(t, owns(0, 1, 2), back.Assignment)
		assert.Nil(t, g.byID["a1"])
		checkExclusive(t, g)
	})
	t.Run("C6 an instance id in use is UNRELEASED_INSTANCE_ID to a new member and FENCED_INSTANCE_ID to another id", func(t *testing.T) {
		h := consumerHarness(t)
		require.NoError(t, h.joinConsumer("a1", "pod-a").Err)
		assert.ErrorIs(t, h.joinConsumer("a2", "pod-a").Err, ErrUnreleasedInstanceID)
		assert.ErrorIs(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a2", InstanceID: "pod-a", MemberEpoch: 1}).Err, ErrFencedInstanceID)
		assert.ErrorIs(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a1", InstanceID: "pod-b", MemberEpoch: 1}).Err, ErrUnknownMemberID)
	})
	t.Run("a member that stops heartbeating is removed after the session timeout", func(t *testing.T) {
		h := consumerHarness(t)
		h.joinConsumer("a", "")
		h.advance(DefaultConsumerSessionTimeout - time.Millisecond)
		assert.NotNil(t, h.c.consumerGroups["g"].byID["a"])
		h.advance(time.Millisecond)
		assert.Equal(t, "Empty", h.c.consumerGroups["g"].state())
	})
	t.Run("a member leaves with epoch -1", func(t *testing.T) {
		h := consumerHarness(t)
		h.joinConsumer("a", "")
		h.joinConsumer("b", "")
		r := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: LeaveMemberEpoch})
		require.NoError(t, r.Err)
		assert.Equal(t, int32(LeaveMemberEpoch), r.MemberEpoch)
		b := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2})
		assert.Equal(t, owns(0, 1, 2, 3, 4, 5), b.Assignment)
	})
}

// Every heartbeat answer tells the member when to heartbeat next:
// group.consumer.heartbeat.interval.ms, 5 s unless configured.
func TestConsumerGroupHeartbeatInterval(t *testing.T) {
	for _, tc := range []struct{ configured, want time.Duration }{
		{0, DefaultConsumerHeartbeatInterval},
		{250 * time.Millisecond, 250 * time.Millisecond},
	} {
		h := newHarness(t, Config{InitialRebalanceDelay: -1, ConsumerHeartbeatInterval: tc.configured,
			Partitions: func(string) int32 { return 6 }})
		r := h.joinConsumer("m", "")
		require.NoError(t, r.Err)
		assert.Equal(t, tc.want, r.HeartbeatInterval, "join")
		r = h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "m", MemberEpoch: r.MemberEpoch})
		require.NoError(t, r.Err)
		assert.Equal(t, tc.want, r.HeartbeatInterval, "heartbeat")
	}
}

// Commits of a consumer group's members carry their member epoch
// (ConsumerGroup.validateOffsetCommit); only consumers join a consumer
// group, and a classic group whose subscriptions do not decode cannot
// become one.
func TestConsumerGroupCommitsAndProtocols(t *testing.T) {
	h := consumerHarness(t)
	h.joinConsumer("a", "")
	commit := func(version int16, epoch int32, member string) error {
		r := commitOne("g", epoch, member, 5)
		r.Version = version
		return h.commit(r).Err
	}
	assert.NoError(t, commit(9, 1, "a"))
	assert.ErrorIs(t, commit(9, 2, "a"), ErrStaleMemberEpoch)
	assert.ErrorIs(t, commit(8, 1, "a"), ErrUnsupportedVersion)
	assert.ErrorIs(t, commit(9, 1, "b"), ErrUnknownMemberID)
	assert.ErrorIs(t, commit(9, -1, ""), ErrUnknownMemberID)
	assert.ErrorIs(t, h.txnCommit(txnOne(1, 2, "a", 0, 5)).Err, ErrIllegalGeneration)
	assert.NotContains(t, h.c.groups, "g", "no simple classic group beside the consumer group")

	connect := joinReq("g", "")
	connect.ProtocolType = "connect"
	assert.ErrorIs(t, h.joined(h.join(connect)).Err, ErrInconsistentGroupProtocol)
	h2 := consumerHarness(t)
	h2.stable("c", 1)
	r := h2.cgh(ConsumerGroupHeartbeatRequest{GroupID: "c", RebalanceTimeout: time.Minute, SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}})
	assert.ErrorIs(t, r.Err, ErrGroupIDNotFound)
}

// TestConsumerGroupChurn runs KIP-848 consumers that join, heartbeat, leave,
// leave for a while (static) and crash, and checks after every step that no
// partition is owned by two consumers, as the consumers see it: a consumer
// owns what its last response assigned. When the churn stops, the group
// settles to Stable with every partition assigned.
func TestConsumerGroupChurn(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 500
	}
	for seed := uint64(1); seed <= 4; seed++ {
		h := consumerHarness(t)
		rnd := rand.New(rand.NewPCG(seed, 9))
		type client struct {
			id, instance string
			epoch        int32
			owned        []int32
			away         bool // a static member that left with epoch -2
		}
		var clients []*client
		next := 0
		beat := func(c *client) {
			req := ConsumerGroupHeartbeatRequest{MemberID: c.id, InstanceID: c.instance, MemberEpoch: c.epoch, Owned: owns(c.owned...)}
			if c.epoch == 0 {
				req.RebalanceTimeout, req.SubscribedTopicNames, req.ServerAssignor, req.Owned = time.Minute, []string{"t"}, pick(rnd, []string{"uniform", "range"}), &Assignment{}
			}
			r := h.cgh(req)
			switch {
			case r.Err != nil:
				c.epoch, c.owned = 0, nil // fenced or unknown: give everything up and rejoin
			default:
				c.epoch = r.MemberEpoch
				if r.Assignment != nil {
					c.owned = r.Assignment.Partitions["t"]
				}
			}
		}
		checkClients := func() {
			seen := map[int32]string{}
			for _, c := range clients {
				for _, p := range c.owned {
					require.NotContains(t, seen, p, "seed %d: partition %d owned by %s and %s", seed, p, seen[p], c.id)
					seen[p] = c.id
				}
			}
		}
		for range steps {
			switch n := rnd.IntN(100); {
			case n < 4 && len(clients) < 6:
				next++
				c := &client{id: fmt.Sprint("m", next)}
				if rnd.IntN(2) == 0 {
					c.instance = fmt.Sprint("pod-", next)
				}
				clients = append(clients, c)
			case n < 6 && len(clients) > 0:
				c := clients[rnd.IntN(len(clients))]
				if c.instance != "" && !c.away && c.epoch > 0 {
					h.cgh(ConsumerGroupHeartbeatRequest{MemberID: c.id, InstanceID: c.instance, MemberEpoch: StaticLeaveMemberEpoch})
					c.away, c.owned = true, nil
				}
			case n < 8 && len(clients) > 0:
				i := rnd.IntN(len(clients))
				if c := clients[i]; c.epoch > 0 && rnd.IntN(2) == 0 {
					h.cgh(ConsumerGroupHeartbeatRequest{MemberID: c.id, InstanceID: c.instance, MemberEpoch: LeaveMemberEpoch})
				}
				clients = append(clients[:i], clients[i+1:]...) // left, or crashed
			case n < 30:
				h.advance(time.Duration(rnd.IntN(3000)) * time.Millisecond)
			default:
				if len(clients) > 0 {
					c := clients[rnd.IntN(len(clients))]
					if c.away && rnd.IntN(4) == 0 {
						// Back under the same instance id, as a new member.
						next++
						c.id, c.epoch, c.away = fmt.Sprint("m", next), 0, false
					}
					if !c.away {
						beat(c)
					}
				}
			}
			checkClients()
			if g := h.c.consumerGroups["g"]; g != nil {
				checkExclusive(t, g)
			}
		}
		for _, c := range clients {
			if c.away {
				next++
				c.id, c.epoch, c.away = fmt.Sprint("m", next), 0, false
			}
		}
		// The crashed members' sessions run out while the others heartbeat.
		for range 12 {
			h.advance(5 * time.Second)
			for _, c := range clients {
				beat(c)
			}
			checkClients()
		}
		if len(clients) > 0 {
			g := h.c.consumerGroups["g"]
			require.Equal(t, "Stable", g.state(), "seed %d", seed)
			total := 0
			for _, c := range clients {
				total += len(c.owned)
			}
			require.Equal(t, 6, total, "seed %d: every partition owned once the group is Stable", seed)
		}
	}
}

// A consumer group is deleted, with its offsets, only once it has no
// members.
func TestConsumerGroupDelete(t *testing.T) {
	h := consumerHarness(t)
	h.joinConsumer("a", "")
	require.NoError(t, h.commit(commitOne("g", 1, "a", 5)).Err)
	del := func() error {
		id := h.id()
		h.c.DeleteGroup(id, "g")
		h.drain()
		return h.resps[id].(*DeleteGroupResponse).Err
	}
	assert.ErrorIs(t, del(), ErrNonEmptyGroup)
	h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: LeaveMemberEpoch})
	require.NoError(t, del())
	assert.Empty(t, h.c.consumerGroups)
	assert.Empty(t, h.fetch(OffsetFetchRequest{GroupID: "g"}).Topics)
	assert.ErrorIs(t, del(), ErrGroupIDNotFound)
}

// A consumer group's offsets expire a retention after their commit when no
// member subscribes to their topic; an Empty consumer group goes with its
// last offset.
func TestConsumerGroupOffsetExpiration(t *testing.T) {
	h := newHarness(t, Config{OffsetsRetention: time.Hour, OffsetsRetentionCheckInterval: time.Minute,
		Partitions: func(string) int32 { return 6 }})
	h.joinConsumer("a", "")
	commit := func(topic string) {
		r := commitOne("g", 1, "a", 5)
		r.Topics[0].Name = topic
		require.NoError(t, h.commit(r).Err)
	}
	commit("t")
	commit("u")
	for range 120 {
		h.advance(30 * time.Second)
		require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1}).Err)
	}
	assert.Equal(t, []string{"t"}, committedTopics(h))
	h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: LeaveMemberEpoch})
	h.advance(time.Hour)
	assert.Empty(t, committedTopics(h))
	assert.Empty(t, h.c.consumerGroups)
}

// A consumer group member's OffsetFetch is checked against its epoch
// (ConsumerGroup.validateOffsetFetch).
func TestConsumerGroupOffsetFetch(t *testing.T) {
	h := consumerHarness(t)
	h.joinConsumer("a", "")
	require.NoError(t, h.commit(commitOne("g", 1, "a", 5)).Err)
	fetch := func(member string, epoch int32) *OffsetFetchResponse {
		return h.fetch(OffsetFetchRequest{GroupID: "g", MemberID: member, MemberEpoch: epoch})
	}
	assert.NoError(t, fetch("a", 1).Err)
	assert.Equal(t, int64(5), fetch("a", 1).Topics[0].Partitions[0].Offset)
	assert.ErrorIs(t, fetch("a", 2).Err, ErrStaleMemberEpoch)
	assert.ErrorIs(t, fetch("b", 1).Err, ErrUnknownMemberID)
	assert.NoError(t, fetch("", -1).Err, "an admin's fetch")
}
