package group

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
)

// The rules of Kafka's classic group protocol (ClassicGroup and
// GroupMetadataManager's JoinGroup, SyncGroup, Heartbeat and LeaveGroup,
// KIP-394, KIP-345), G1-G24, each a subtest named after its rule. Where a rule comes from one of Kafka's tests
// (GroupMetadataManagerTest), the comment names it.
func TestClassicGroupRules(t *testing.T) {
	rules := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"G1 a v4 join without member id gets MEMBER_ID_REQUIRED and an id, is pending, and the group stays Empty", func(t *testing.T) {
			h := newHarness(t, Config{})
			r := h.joined(h.join(joinReq("g", "")))
			require.ErrorIs(t, r.Err, ErrMemberIDRequired)
			assert.Equal(t, kafkaerr.Code(79), kafkaerr.CodeOf(r.Err))
			assert.True(t, strings.HasPrefix(r.MemberID, "client-"), r.MemberID)
			g := h.group("g")
			assert.Equal(t, Empty, g.state)
			assert.True(t, g.pending[r.MemberID])
			assert.Empty(t, g.members)
			// The new group is made durable with Kafka's empty record.
			v, ok := h.lastGroupRecord("g")
			require.True(t, ok)
			assert.Equal(t, &GroupMetadataValue{CurrentStateTimestamp: epoch.UnixMilli(), Members: nil}, v)
		}},
		{"G2 the rejoin with that id adds the member, starts the initial rebalance, and the delay completes it", func(t *testing.T) {
			h := newHarness(t, Config{})
			id, req := h.newMember("g")
			g := h.group("g")
			assert.Equal(t, PreparingRebalance, g.state)
			assert.Empty(t, g.pending)
			h.advance(DefaultInitialRebalanceDelay - time.Millisecond)
			assert.Nil(t, h.joined(req), "parked during the initial delay")
			h.advance(time.Millisecond)
			r := h.joined(req)
			require.NotNil(t, r)
			require.NoError(t, r.Err)
			assert.Equal(t, int32(1), r.GenerationID)
			assert.Equal(t, id, r.Leader)
			assert.Equal(t, "range", r.ProtocolName)
			assert.Equal(t, []JoinGroupMember{{MemberID: id, Metadata: []byte("sub-" + id)}}, r.Members)
			assert.Equal(t, CompletingRebalance, g.state)
		}},
		{"G3 a v3 join without member id is added at once", func(t *testing.T) {
			h := newHarness(t, Config{})
			req := joinReq("g", "")
			req.Version = 3
			id := h.join(req)
			assert.Nil(t, h.joined(id), "parked, not MEMBER_ID_REQUIRED")
			g := h.group("g")
			assert.Len(t, g.members, 1)
			assert.Equal(t, PreparingRebalance, g.state)
		}},
		{"G4 a static member's first v4 join is accepted at once, its id prefixed by its instance id", func(t *testing.T) {
			h := newHarness(t, noDelay)
			id := h.join(staticJoinReq("g", "", "inst-a"))
			assert.Nil(t, h.joined(id))
			h.advance(0)
			r := h.joined(id)
			require.NoError(t, r.Err)
			assert.True(t, strings.HasPrefix(r.MemberID, "inst-a-"), r.MemberID)
			assert.Equal(t, r.MemberID, h.group("g").static["inst-a"])
		}},
		{"G5 a pending member that does not rejoin within its session timeout is dropped and the join completes", func(t *testing.T) {
			// testJoinGroupCompletionWhenPendingMemberTimesOut
			h := newHarness(t, noDelay)
			ids := h.stable("g", 2)
			pending := h.joined(h.join(joinReq("g", ""))).MemberID
			h.advance(time.Second)
			j0 := h.join(joinReq("g", ids[0])) // the leader's join starts a rebalance
			j1 := h.join(joinReq("g", ids[1]))
			assert.Nil(t, h.joined(j0), "the pending member holds the join phase")
			h.advance(9*time.Second - time.Millisecond)
			assert.Nil(t, h.joined(j0))
			h.advance(time.Millisecond) // 10 s after the pending member's first join
			require.NotNil(t, h.joined(j0))
			assert.NoError(t, h.joined(j1).Err)
			assert.False(t, h.group("g").pending[pending])
			assert.Equal(t, int32(2), h.joined(j0).GenerationID)
		}},
		{"G6 a dynamic member that does not rejoin within the rebalance timeout is removed; the survivor leads the next generation", func(t *testing.T) {
			h := newHarness(t, noDelay)
			ids := h.stable("g", 2)
			j0 := h.join(joinReq("g", ids[0]))
			for range 5 { // the other member heartbeats but does not rejoin
				h.advance(5 * time.Second)
				require.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[1]}), ErrRebalanceInProgress)
			}
			h.advance(5*time.Second - time.Millisecond)
			assert.Nil(t, h.joined(j0))
			h.advance(time.Millisecond) // the rebalance timeout, 30 s
			r := h.joined(j0)
			require.NotNil(t, r)
			assert.Equal(t, int32(2), r.GenerationID)
			assert.Equal(t, []JoinGroupMember{{MemberID: ids[0], Metadata: []byte("sub-" + ids[0])}}, r.Members)
			assert.Nil(t, h.group("g").byID[ids[1]])
		}},
		{"G7 a static member that does not rejoin within the rebalance timeout stays in the group", func(t *testing.T) {
			// testStaticMemberFollowerFailToRejoinBeforeRebalanceTimeout
			h, ids := staticStable(t)
			j0 := h.join(staticJoinReq("g", ids[0], "inst-0"))
			for range 6 {
				h.advance(5 * time.Second)
				h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[1], GroupInstanceID: "inst-1"})
			}
			r := h.joined(j0)
			require.NotNil(t, r)
			assert.Equal(t, int32(2), r.GenerationID)
			assert.Len(t, r.Members, 2, "the leader assigns to the absent static member too")
			assert.NotNil(t, h.group("g").byID[ids[1]])
		}},
		{"G8 when the leader does not rejoin, the first member that did leads", func(t *testing.T) {
			t.Run("dynamic leader removed", func(t *testing.T) {
				h := newHarness(t, noDelay)
				ids := h.stable("g", 2)
				changed := joinReq("g", ids[1])
				changed.Protocols[0].Metadata = []byte("new subscription")
				j1 := h.join(changed)
				for range 6 {
					h.advance(5 * time.Second)
					h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[0]})
				}
				r := h.joined(j1)
				require.NotNil(t, r)
				assert.Equal(t, ids[1], r.Leader)
				assert.Nil(t, h.group("g").byID[ids[0]])
			})
			t.Run("static leader kept", func(t *testing.T) {
				// testStaticMemberLeaderFailToRejoinBeforeRebalanceTimeout
				h, ids := staticStable(t)
				changed := staticJoinReq("g", ids[1], "inst-1")
				changed.Protocols[0].Metadata = []byte("new subscription")
				j1 := h.join(changed)
				for range 6 {
					h.advance(5 * time.Second)
					h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[0], GroupInstanceID: "inst-0"})
				}
				r := h.joined(j1)
				require.NotNil(t, r)
				assert.Equal(t, ids[1], r.Leader)
				assert.NotNil(t, h.group("g").byID[ids[0]])
			})
		}},
		{"G9 a follower's SyncGroup before the leader's is parked; the leader's answers both and the group is Stable", func(t *testing.T) {
			// testSyncGroupLeaderAfterFollower
			h := newHarness(t, noDelay)
			ids, gen := completing(h, 2)
			s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
			assert.Nil(t, h.synced(s1))
			s0 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0], Assignments: []SyncGroupAssignment{
				{MemberID: ids[0], Assignment: []byte("p0")}, {MemberID: ids[1], Assignment: []byte("p1")}}})
			assert.Equal(t, &SyncGroupResponse{ID: s0, ProtocolType: "consumer", ProtocolName: "range", Assignment: []byte("p0")}, h.synced(s0))
			assert.Equal(t, &SyncGroupResponse{ID: s1, ProtocolType: "consumer", ProtocolName: "range", Assignment: []byte("p1")}, h.synced(s1))
			assert.Equal(t, Stable, h.group("g").state)
			d, ok := h.c.DescribeGroup("g")
			require.True(t, ok)
			sessionEnd := epoch.Add(10 * time.Second).Local() // the last heartbeats' (the syncs') session
			assert.Equal(t, GroupDescription{State: Stable, ProtocolType: "consumer", Protocol: "range", Generation: gen, Leader: ids[0],
				Members: []MemberDescription{
					{MemberID: ids[0], ClientID: "client", ClientHost: "/127.0.0.1", Metadata: []byte("sub-" + ids[0]), Assignment: []byte("p0"), SessionDeadline: sessionEnd},
					{MemberID: ids[1], ClientID: "client", ClientHost: "/127.0.0.1", Metadata: []byte("sub-" + ids[1]), Assignment: []byte("p1"), SessionDeadline: sessionEnd},
				}}, d)
			// A follower syncing after the leader gets its assignment at once.
			s1 = h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
			assert.Equal(t, []byte("p1"), h.synced(s1).Assignment)
		}},
		{"G10 a member the leader's assignment leaves out gets empty assignment bytes", func(t *testing.T) {
			// testSyncGroupEmptyAssignment
			h := newHarness(t, noDelay)
			ids, gen := completing(h, 2)
			s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
			h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0], Assignments: []SyncGroupAssignment{
				{MemberID: ids[0], Assignment: []byte("p0")}}})
			r := h.synced(s1)
			require.NoError(t, r.Err)
			assert.Equal(t, []byte{}, r.Assignment)
			v, _ := h.lastGroupRecord("g")
			assert.Equal(t, []byte{}, v.Members[1].Assignment)
		}},
		{"G11 SyncGroup with a wrong generation, during PreparingRebalance, or from an unknown member fails", func(t *testing.T) {
			h := newHarness(t, noDelay)
			ids, gen := completing(h, 2)
			wrong := h.synced(h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen + 1, MemberID: ids[1]}))
			assert.ErrorIs(t, wrong.Err, ErrIllegalGeneration)
			unknown := h.synced(h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: "nobody"}))
			assert.ErrorIs(t, unknown.Err, ErrUnknownMemberID)
			missing := h.synced(h.sync(SyncGroupRequest{GroupID: "other", GenerationID: gen, MemberID: ids[0]}))
			assert.ErrorIs(t, missing.Err, ErrUnknownMemberID)
			resent := h.joined(h.join(joinReq("g", ids[1])))
			assert.Equal(t, gen, resent.GenerationID, "an unchanged join while CompletingRebalance gets the response again")
			h.newMember("g") // a new member starts a rebalance
			require.Equal(t, PreparingRebalance, h.group("g").state)
			preparing := h.synced(h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0]}))
			assert.ErrorIs(t, preparing.Err, ErrRebalanceInProgress)
			inconsistent := h.synced(h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0], ProtocolType: "connect"}))
			assert.ErrorIs(t, inconsistent.Err, ErrInconsistentGroupProtocol)
		}},
		{"G12 members that got a JoinGroup response but send no SyncGroup are removed after the rebalance timeout", func(t *testing.T) {
			t.Run("follower", func(t *testing.T) {
				// testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromFollowers
				h := newHarness(t, noDelay)
				ids, gen := completing(h, 2)
				h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0], Assignments: []SyncGroupAssignment{{MemberID: ids[0]}}})
				require.Equal(t, Stable, h.group("g").state)
				for range 6 {
					h.advance(5 * time.Second)
					h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
					h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0]})
				}
				g := h.group("g")
				assert.Nil(t, g.byID[ids[1]])
				assert.Equal(t, PreparingRebalance, g.state)
			})
			t.Run("leader", func(t *testing.T) {
				// testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromLeaders
				h := newHarness(t, noDelay)
				ids, gen := completing(h, 2)
				s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
				for range 6 { // the leader heartbeats but sends no SyncGroup
					h.advance(5 * time.Second)
					h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: gen, MemberID: ids[0]})
				}
				g := h.group("g")
				assert.Nil(t, g.byID[ids[0]])
				assert.ErrorIs(t, h.synced(s1).Err, ErrRebalanceInProgress)
				// The survivor was parked in a sync, so rejoining ends the phase.
				r := h.joined(h.join(joinReq("g", ids[1])))
				require.NotNil(t, r)
				assert.Equal(t, gen+1, r.GenerationID)
				assert.Equal(t, ids[1], r.Leader)
			})
		}},
		{"G13 a heartbeat during PreparingRebalance gets REBALANCE_IN_PROGRESS and resets the session timer", func(t *testing.T) {
			// testHeartbeatDuringPreparingRebalance, testClassicGroupMemberSessionTimeoutDuringRebalance
			h := newHarness(t, noDelay)
			ids := h.stable("g", 2)
			h.join(joinReq("g", ids[0]))
			h.advance(8 * time.Second)
			err := h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[1]})
			assert.ErrorIs(t, err, ErrRebalanceInProgress)
			h.advance(10*time.Second - time.Millisecond)
			assert.NotNil(t, h.group("g").byID[ids[1]], "the session timer restarted at the heartbeat")
			h.advance(time.Millisecond)
			assert.Nil(t, h.group("g").byID[ids[1]])
			assert.Equal(t, CompletingRebalance, h.group("g").state, "the expiry completed the join phase")
		}},
		{"G14 a heartbeat to an Empty group, a Dead group, or with a bad generation fails", func(t *testing.T) {
			// testHeartbeatEmptyGroup, testHeartbeatDeadGroup, testHeartbeatIllegalGeneration
			h := newHarness(t, noDelay)
			pending := h.joined(h.join(joinReq("empty", ""))).MemberID
			assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "empty", MemberID: pending}), ErrUnknownMemberID)
			assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "missing", MemberID: "m"}), ErrUnknownMemberID)
			ids := h.stable("g", 1)
			assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 2, MemberID: ids[0]}), ErrIllegalGeneration)
			assert.NoError(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[0]}))
			h.c.Unload()
			h.drain()
			assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[0]}), ErrCoordinatorNotAvailable)
			assert.ErrorIs(t, h.heartbeat(HeartbeatRequest{GroupID: "missing", MemberID: "m"}), ErrNotCoordinator)
		}},
		{"G15 a member without heartbeats for its session timeout in Stable is removed and the group rebalances", func(t *testing.T) {
			// testClassicGroupMemberSessionTimeout
			h := newHarness(t, noDelay)
			ids := h.stable("g", 2)
			h.advance(5 * time.Second)
			require.NoError(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[0]}))
			h.advance(5*time.Second - time.Millisecond)
			assert.Equal(t, Stable, h.group("g").state)
			h.advance(time.Millisecond)
			g := h.group("g")
			assert.Nil(t, g.byID[ids[1]])
			assert.NotNil(t, g.byID[ids[0]])
			assert.Equal(t, PreparingRebalance, g.state)
		}},
		{"G16 the leader's join in Stable rebalances; a follower's unchanged join gets the current generation", func(t *testing.T) {
			// testJoinGroupFromUnchangedLeaderShouldRebalance, testJoinGroupFromUnchangedFollowerDoesNotRebalance
			h := newHarness(t, noDelay)
			ids := h.stable("g", 2)
			f := h.joined(h.join(joinReq("g", ids[1])))
			require.NotNil(t, f)
			assert.Equal(t, &JoinGroupResponse{ID: f.ID, GenerationID: 1, ProtocolType: "consumer", ProtocolName: "range", Leader: ids[0], MemberID: ids[1]}, f)
			assert.Equal(t, Stable, h.group("g").state)
			l := h.join(joinReq("g", ids[0]))
			assert.Nil(t, h.joined(l))
			assert.Equal(t, PreparingRebalance, h.group("g").state)
		}},
		{"G17 a new member joining during CompletingRebalance fails the parked SyncGroups with REBALANCE_IN_PROGRESS", func(t *testing.T) {
			h := newHarness(t, noDelay)
			ids, gen := completing(h, 2)
			s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
			h.newMember("g")
			assert.ErrorIs(t, h.synced(s1).Err, ErrRebalanceInProgress)
			assert.Equal(t, PreparingRebalance, h.group("g").state)
		}},
		{"G18 when the last member leaves, the group moves to Empty at the next generation and is persisted", func(t *testing.T) {
			// testValidLeaveGroup
			h := newHarness(t, noDelay)
			ids := h.stable("g", 1)
			h.advance(time.Second)
			r := h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: ids[0]}}})
			require.NoError(t, r.Err)
			assert.Equal(t, []LeaveGroupMemberResult{{MemberID: ids[0]}}, r.Members)
			g := h.group("g")
			assert.Equal(t, Empty, g.state)
			assert.Equal(t, int32(2), g.generation)
			v, _ := h.lastGroupRecord("g")
			assert.Equal(t, &GroupMetadataValue{ProtocolType: "consumer", Generation: 2, CurrentStateTimestamp: h.now.UnixMilli()}, v)
		}},
		{"G19 a static member restarting in Stable with the same protocols keeps its assignment without a rebalance", func(t *testing.T) {
			// testStaticMemberRejoinAsFollowerWithUnknownMemberId, testStaticMemberRejoinWithLeaderIdAndUnknownMemberId
			h, ids := staticStable(t)
			records := len(h.log)
			r := h.joined(h.join(staticJoinReq("g", "", "inst-1")))
			require.NotNil(t, r, "answered at once")
			require.NoError(t, r.Err)
			assert.NotEqual(t, ids[1], r.MemberID)
			assert.Equal(t, int32(1), r.GenerationID)
			assert.False(t, r.SkipAssignment)
			assert.Empty(t, r.Members)
			g := h.group("g")
			assert.Equal(t, Stable, g.state)
			require.Len(t, h.log, records+1, "the new member id is persisted")
			v, _ := h.lastGroupRecord("g")
			assert.Equal(t, r.MemberID, v.Members[1].MemberID)
			s := h.synced(h.sync(SyncGroupRequest{GroupID: "g", GenerationID: 1, MemberID: r.MemberID, GroupInstanceID: "inst-1"}))
			assert.Equal(t, []byte("a-"+ids[1]), s.Assignment, "the assignment of the old id")
			old := h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[1], GroupInstanceID: "inst-1"})
			assert.ErrorIs(t, old, ErrFencedInstanceID)

			// The leader restarting gets the members and is told to skip the assignment (KIP-814).
			l := h.joined(h.join(staticJoinReq("g", "", "inst-0")))
			require.NoError(t, l.Err)
			assert.True(t, l.SkipAssignment)
			assert.Equal(t, l.MemberID, l.Leader)
			assert.Len(t, l.Members, 2)
			assert.Equal(t, Stable, g.state)

			// Before JoinGroup v9, the restarted leader is told the old leader id
			// leads, so that it acts as a follower and keeps the assignment.
			req := staticJoinReq("g", "", "inst-0")
			req.Version = 8
			l8 := h.joined(h.join(req))
			require.NoError(t, l8.Err)
			assert.False(t, l8.SkipAssignment)
			assert.Equal(t, l.MemberID, l8.Leader)
			assert.Empty(t, l8.Members)
			assert.Equal(t, l8.MemberID, g.leader)
		}},
		{"G20 a static member restarting during CompletingRebalance forces a new rebalance", func(t *testing.T) {
			// testReplaceStaticMemberInCompletingRebalanceStateTriggersRebalance
			h, ids := staticStable(t)
			j0 := h.join(staticJoinReq("g", ids[0], "inst-0"))
			j1 := h.join(staticJoinReq("g", ids[1], "inst-1"))
			require.NotNil(t, h.joined(j0))
			require.NotNil(t, h.joined(j1))
			s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: 2, MemberID: ids[1], GroupInstanceID: "inst-1"})
			r := h.join(staticJoinReq("g", "", "inst-1"))
			assert.ErrorIs(t, h.synced(s1).Err, ErrFencedInstanceID, "the old id's parked sync is fenced")
			assert.Nil(t, h.joined(r))
			assert.Equal(t, PreparingRebalance, h.group("g").state)
		}},
		{"G21 LeaveGroup with only an instance id removes that static member", func(t *testing.T) {
			// testStaticMembersValidBatchLeaveGroup, testStaticMembersUnknownInstanceBatchLeaveGroup
			h, ids := staticStable(t)
			r := h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{
				{GroupInstanceID: "inst-1"}, {GroupInstanceID: "inst-9"}, {MemberID: ids[0], GroupInstanceID: "inst-1"}}})
			require.NoError(t, r.Err)
			require.Len(t, r.Members, 3)
			assert.NoError(t, r.Members[0].Err)
			assert.ErrorIs(t, r.Members[1].Err, ErrUnknownMemberID)
			assert.ErrorIs(t, r.Members[2].Err, ErrUnknownMemberID, "inst-1 is gone by then")
			g := h.group("g")
			assert.Nil(t, g.byID[ids[1]])
			assert.NotContains(t, g.static, "inst-1")
			assert.Equal(t, PreparingRebalance, g.state)
		}},
		{"G22 a session timeout outside the broker's bounds is INVALID_SESSION_TIMEOUT", func(t *testing.T) {
			h := newHarness(t, Config{})
			for _, d := range []time.Duration{5 * time.Second, DefaultMinSessionTimeout - time.Millisecond, DefaultMaxSessionTimeout + time.Millisecond} {
				req := joinReq("g", "")
				req.SessionTimeout = d
				r := h.joined(h.join(req))
				assert.ErrorIs(t, r.Err, ErrInvalidSessionTimeout, "%v", d)
				assert.Equal(t, kafkaerr.Code(26), kafkaerr.CodeOf(r.Err))
			}
			assert.Empty(t, h.c.groups)
			assert.Empty(t, h.log)
		}},
		{"G23 a different protocol type, or no protocol in common, is INCONSISTENT_GROUP_PROTOCOL", func(t *testing.T) {
			// testJoinGroupInconsistentProtocolType, testJoinGroupInconsistentGroupProtocol
			h := newHarness(t, noDelay)
			ids := h.stable("g", 1)
			other := joinReq("g", "")
			other.ProtocolType = "connect"
			assert.ErrorIs(t, h.joined(h.join(other)).Err, ErrInconsistentGroupProtocol)
			noCommon := joinReq("g", "")
			noCommon.Protocols = []Protocol{{Name: "roundrobin"}}
			assert.ErrorIs(t, h.joined(h.join(noCommon)).Err, ErrInconsistentGroupProtocol)
			existing := joinReq("g", ids[0])
			existing.Protocols = []Protocol{{Name: "roundrobin"}}
			assert.ErrorIs(t, h.joined(h.join(existing)).Err, ErrInconsistentGroupProtocol)
			empty := joinReq("new", "")
			empty.Protocols = nil
			assert.ErrorIs(t, h.joined(h.join(empty)).Err, ErrInconsistentGroupProtocol)
			assert.Len(t, h.group("g").members, 1)
		}},
		{"G24 the protocol vote picks, among the protocols all members support, the most first choices", func(t *testing.T) {
			h := newHarness(t, noDelay)
			reqs := []JoinGroupRequest{joinReq("g", ""), joinReq("g", ""), joinReq("g", "")}
			reqs[0].Protocols = []Protocol{{Name: "range"}, {Name: "roundrobin"}}
			reqs[1].Protocols = []Protocol{{Name: "roundrobin"}, {Name: "range"}}
			reqs[2].Protocols = []Protocol{{Name: "roundrobin"}}
			var joins []RequestID
			for _, r := range reqs {
				r.Version = 3
				joins = append(joins, h.join(r))
			}
			h.advance(0)
			for _, j := range joins {
				assert.Equal(t, "roundrobin", h.joined(j).ProtocolName)
			}
		}},
		{"G25 a follower whose SyncGroup waits on a leader that expires gets a new session to rejoin in", func(t *testing.T) {
			// Kafka's propagateAssignment reschedules the heartbeat of
			// every member whose parked sync it answers: the follower's
			// session, started with the leader's when the join phase
			// completed, ran out while it waited. Without it, every member
			// waiting on a crashed leader was removed with it, and lost its
			// partitions (TestConsumerMembersChurn failed so).
			h := newHarness(t, noDelay)
			ids, gen := completing(h, 2)
			s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
			require.Nil(t, h.synced(s1))
			h.advance(10 * time.Second) // both sessions, 10 s; only the leader did not sync
			g := h.group("g")
			assert.Nil(t, g.byID[ids[0]], "the leader expired")
			require.NotNil(t, h.synced(s1))
			assert.ErrorIs(t, h.synced(s1).Err, ErrRebalanceInProgress)
			require.NotNil(t, g.byID[ids[1]], "the follower is still a member")
			h.advance(10*time.Second - time.Millisecond)
			require.NotNil(t, g.byID[ids[1]], "within its new session")
			h.advance(time.Millisecond)
			assert.Nil(t, g.byID[ids[1]], "its new session, without a heartbeat or a join, ran out")
		}},
	}
	for _, r := range rules {
		t.Run(r.name, r.run)
	}
}

// completing builds a group of n dynamic members in CompletingRebalance and
// returns the member ids, leader first, and the generation.
func completing(h *harness, n int) ([]string, int32) {
	h.t.Helper()
	ids := make([]string, n)
	reqs := make([]RequestID, n)
	for i := range ids {
		ids[i], reqs[i] = h.newMember("g")
	}
	h.advance(0)
	for i := range ids {
		if h.joined(reqs[i]).Leader == ids[i] {
			ids[0], ids[i] = ids[i], ids[0]
		}
	}
	g := h.group("g")
	require.Equal(h.t, CompletingRebalance, g.state)
	return ids, g.generation
}

// staticStable builds a Stable group "g" of two static members, inst-0
// (the leader) and inst-1, at generation 1.
func staticStable(t *testing.T) (*harness, []string) {
	h := newHarness(t, noDelay)
	j0 := h.join(staticJoinReq("g", "", "inst-0"))
	j1 := h.join(staticJoinReq("g", "", "inst-1"))
	h.advance(0)
	ids := []string{h.joined(j0).MemberID, h.joined(j1).MemberID}
	require.Equal(t, ids[0], h.joined(j0).Leader)
	h.syncAll("g", ids)
	require.Equal(t, Stable, h.group("g").state)
	return h, ids
}
