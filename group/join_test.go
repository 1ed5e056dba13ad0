package group

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
)

// Kafka's initial-delay vectors (testResetRebalanceDelayWhenNewMemberJoins
// GroupDuringInitialRebalance, testDelayRebalanceUptoRebalanceTimeout), with
// the 3 s delay. Kafka's mock timer fires a timer at the clock of the sleep
// that passed it, so its re-armed deadlines are late by that sleep's excess;
// ours fire at their deadline, so the second vector completes at exactly
// twice the delay where Kafka's test sees it 1 ms later.
func TestInitialRebalanceDelay(t *testing.T) {
	const d = DefaultInitialRebalanceDelay
	v3 := func(rebalance time.Duration) JoinGroupRequest {
		r := joinReq("g", "")
		r.Version = 3
		r.RebalanceTimeout = rebalance
		return r
	}
	t.Run("a member joining during the delay extends it by another delay", func(t *testing.T) {
		h := newHarness(t, Config{})
		j1 := h.join(v3(3 * d))
		h.advance(d - time.Millisecond)
		j2 := h.join(v3(3 * d))
		h.advance(2 * time.Millisecond)
		h.advance(d/2 + time.Millisecond)
		assert.Nil(t, h.joined(j1))
		assert.Nil(t, h.joined(j2))
		h.advance(d / 2)
		require.NotNil(t, h.joined(j1))
		require.NotNil(t, h.joined(j2))
		assert.NoError(t, h.joined(j1).Err)
		assert.NoError(t, h.joined(j2).Err)
	})
	t.Run("the extensions end at the rebalance timeout", func(t *testing.T) {
		h := newHarness(t, Config{})
		j1 := h.join(v3(2 * d))
		j2 := h.join(v3(2 * d))
		h.advance(d + time.Millisecond)
		j3 := h.join(v3(2 * d))
		h.advance(d - 2*time.Millisecond)
		for _, j := range []RequestID{j1, j2, j3} {
			assert.Nil(t, h.joined(j))
		}
		h.advance(time.Millisecond) // twice the delay: the group's rebalance timeout
		for _, j := range []RequestID{j1, j2, j3} {
			require.NotNil(t, h.joined(j))
			assert.NoError(t, h.joined(j).Err)
		}
	})
}

// A group loaded with more members than group.max.size rebalances at once
// (testOnLoadedExceedGroupMaxSizeTriggersRebalance), and the members that
// rejoin last are turned away (testLastJoiningMembersAreKickedOutWhen
// RejoiningGroupWithMaxSize).
func TestGroupMaxSizeOnLoad(t *testing.T) {
	const maxSize = 10
	c, err := NewCoordinator(Config{MaxSize: maxSize, InitialRebalanceDelay: 50 * time.Millisecond, MinSessionTimeout: time.Second}, epoch)
	require.NoError(t, err)
	v := GroupMetadataValue{ProtocolType: "consumer", Generation: 1, Protocol: "range", CurrentStateTimestamp: 1}
	for i := range maxSize + 2 {
		v.Members = append(v.Members, MemberMetadata{MemberID: fmt.Sprintf("m%02d", i), ClientID: "client-id",
			ClientHost: "client-host", RebalanceTimeout: 10000, SessionTimeout: 5000, Subscription: []byte{}, Assignment: []byte{}})
	}
	v.Leader = "m00"
	require.NoError(t, c.Replay(0, EncodeGroupMetadata(GroupMetadataKey{Group: "g"}, v)))
	c.Loaded()
	h := &harness{t: t, c: c, now: epoch, resps: map[RequestID]Response{}, markers: map[int]txnMarker{}}
	g := h.group("g")
	require.Equal(t, PreparingRebalance, g.state)

	var joins []RequestID
	for _, m := range v.Members {
		r := joinReq("g", m.MemberID)
		r.SessionTimeout, r.RebalanceTimeout = 5*time.Second, 10*time.Second
		joins = append(joins, h.join(r))
	}
	assert.Len(t, g.members, maxSize)
	assert.Equal(t, maxSize, g.awaitingJoin)
	for _, j := range joins[maxSize:] {
		assert.ErrorIs(t, h.joined(j).Err, ErrGroupMaxSizeReached)
	}
	h.advance(10 * time.Second)
	assert.Equal(t, CompletingRebalance, g.state)
	for i, j := range joins[:maxSize] {
		require.NotNil(t, h.joined(j), "member %d", i)
		assert.NoError(t, h.joined(j).Err)
	}
}

// A new member beyond group.max.size is turned away from a Stable group
// (testJoinGroupShouldReceiveErrorIfGroupOverMaxSize); a pending member id
// does not count until it joins.
func TestGroupMaxSizeNewMember(t *testing.T) {
	h := newHarness(t, Config{MaxSize: 2, InitialRebalanceDelay: -1})
	h.stable("g", 2)
	r := h.joined(h.join(joinReq("g", "")))
	assert.ErrorIs(t, r.Err, ErrGroupMaxSizeReached)
	assert.Equal(t, kafkaerr.Code(81), kafkaerr.CodeOf(r.Err))
	assert.Len(t, h.group("g").members, 2)
	assert.Empty(t, h.group("g").pending)
}

// A new member's JoinGroup is parked at most NewMemberJoinTimeout, even when
// the rebalance timeout is longer (testNewMemberJoinExpiration).
func TestNewMemberJoinTimeout(t *testing.T) {
	h := newHarness(t, noDelay)
	ids := h.stable("g", 1)
	slow := joinReq("g", "")
	slow.Version = 3
	slow.RebalanceTimeout = 2 * DefaultNewMemberJoinTimeout
	j := h.join(slow)
	require.Equal(t, PreparingRebalance, h.group("g").state)
	for elapsed := time.Duration(0); elapsed < DefaultNewMemberJoinTimeout; elapsed += 5 * time.Second {
		require.Nil(t, h.joined(j))
		h.advance(5 * time.Second)
		h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: ids[0]})
	}
	r := h.joined(j)
	require.NotNil(t, r)
	assert.ErrorIs(t, r.Err, ErrUnknownMemberID)
	assert.Len(t, h.group("g").members, 1)
}

// Requests that are wrong in themselves get Kafka's error and leave no trace:
// no group, no record.
func TestBadRequests(t *testing.T) {
	long := strings.Repeat("x", maxStringLen+1)
	h := newHarness(t, Config{})
	cases := []struct {
		name string
		send func() error
		want error
	}{
		{"join with an empty group id", func() error { return h.joined(h.join(joinReq("", ""))).Err }, ErrInvalidGroupID},
		{"join with a group id too long for a record", func() error { return h.joined(h.join(joinReq(long, ""))).Err }, ErrInvalidGroupID},
		{"join with a client id too long for a record", func() error {
			r := joinReq("g", "")
			r.ClientID = long
			return h.joined(h.join(r)).Err
		}, ErrInvalidRequest},
		{"join with a member id to a group that does not exist", func() error { return h.joined(h.join(joinReq("g", "m"))).Err }, ErrUnknownMemberID},
		{"join listing a protocol twice", func() error {
			r := joinReq("g", "")
			r.Protocols = append(r.Protocols, Protocol{Name: "range"})
			return h.joined(h.join(r)).Err
		}, ErrInvalidRequest},
		{"join with a negative rebalance timeout", func() error {
			r := joinReq("g", "")
			r.RebalanceTimeout = -time.Second
			return h.joined(h.join(r)).Err
		}, ErrInvalidRequest},
		{"sync with an empty group id", func() error { return h.synced(h.sync(SyncGroupRequest{MemberID: "m"})).Err }, ErrInvalidGroupID},
		{"heartbeat with an empty group id", func() error { return h.heartbeat(HeartbeatRequest{MemberID: "m"}) }, ErrInvalidGroupID},
		{"leave with an empty group id", func() error { return h.leave(LeaveGroupRequest{}).Err }, ErrInvalidGroupID},
		{"leave of a group that does not exist", func() error { return h.leave(LeaveGroupRequest{GroupID: "g"}).Err }, ErrUnknownMemberID},
		{"commit with an empty group id", func() error { return h.commit(OffsetCommitRequest{GenerationID: -1}).Err }, ErrInvalidGroupID},
		{"commit with a generation to a group that does not exist", func() error {
			return h.commit(OffsetCommitRequest{Version: 9, GroupID: "g", GenerationID: 1, MemberID: "m"}).Err
		}, ErrGroupIDNotFound},
		{"commit before OffsetCommit v9 with a generation to a group that does not exist", func() error {
			return h.commit(OffsetCommitRequest{Version: 8, GroupID: "g", GenerationID: 1, MemberID: "m"}).Err
		}, ErrIllegalGeneration},
		{"fetch with a group id too long", func() error { return h.fetch(OffsetFetchRequest{GroupID: long}).Err }, ErrInvalidGroupID},
	}
	for _, c := range cases {
		err := c.send()
		assert.ErrorIs(t, err, c.want, c.name)
		assert.Equal(t, kafkaerr.CodeOf(c.want), kafkaerr.CodeOf(err), c.name)
		assert.Contains(t, err.Error(), c.want.Error(), c.name)
	}
	assert.Empty(t, h.c.groups)
	assert.Empty(t, h.log)
}

// A coordinator serves nothing while its log loads; when unloaded it answers
// the requests it parked with NOT_COORDINATOR, so that clients look for the
// new coordinator (GroupMetadataManager.onUnloaded).
func TestLoadAndUnload(t *testing.T) {
	c, err := NewCoordinator(noDelay, epoch)
	require.NoError(t, err)
	c.JoinGroup(1, joinReq("g", ""))
	rd := c.Ready()
	require.Len(t, rd.Responses, 1)
	assert.ErrorIs(t, rd.Responses[0].(*JoinGroupResponse).Err, ErrCoordinatorLoadInProgress)

	h := newHarness(t, noDelay)
	ids, gen := completing(h, 2)
	s1 := h.sync(SyncGroupRequest{GroupID: "g", GenerationID: gen, MemberID: ids[1]})
	_, j := h.newMember("other")
	h.c.Unload()
	h.drain()
	assert.ErrorIs(t, h.synced(s1).Err, ErrNotCoordinator)
	assert.ErrorIs(t, h.joined(j).Err, ErrNotCoordinator)
	_, ok := h.c.NextDeadline()
	assert.False(t, ok, "no timer outlives Unload")
	assert.ErrorIs(t, h.joined(h.join(joinReq("g", ids[0]))).Err, ErrCoordinatorNotAvailable, "a Dead group")
	assert.ErrorIs(t, h.joined(h.join(joinReq("new", ""))).Err, ErrNotCoordinator)
}

// Replay rejects records once loading is over, and reports a corrupt record
// with its offset.
func TestReplayErrors(t *testing.T) {
	c, err := NewCoordinator(Config{}, epoch)
	require.NoError(t, err)
	err = c.Replay(7, Record{Key: []byte{0, 2, 0}})
	assert.ErrorIs(t, err, ErrCorruptRecord)
	assert.Contains(t, err.Error(), "offset 7")
	require.NoError(t, c.Replay(8, Record{Key: []byte{0, 9, 1, 2, 3}}), "unknown record types are skipped")
	c.Loaded()
	assert.Error(t, c.Replay(9, EncodeGroupTombstone(GroupMetadataKey{Group: "g"})))
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{MinSessionTimeout: time.Minute, MaxSessionTimeout: time.Second},
		{MaxSessionTimeout: 1000 * time.Hour},
		{MaxSize: -1},
		{NewMemberJoinTimeout: -time.Second},
		{OffsetMetadataMaxBytes: -1},
		{OffsetMetadataMaxBytes: maxStringLen + 1},
		{OffsetsRetentionCheckInterval: -time.Minute},
		{ConsumerHeartbeatInterval: -time.Second},
		{ConsumerHeartbeatInterval: DefaultConsumerSessionTimeout},
	} {
		_, err := NewCoordinator(cfg, epoch)
		assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
	}
}
