package group

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func commitOne(group string, generation int32, memberID string, offset int64) OffsetCommitRequest {
	return OffsetCommitRequest{Version: 9, GroupID: group, GenerationID: generation, MemberID: memberID,
		Topics: []OffsetCommitTopic{{Name: "t", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: offset, LeaderEpoch: 3, Metadata: "m"}}}}}
}

// The rules for who may commit (ClassicGroup.validateOffsetCommit and
// OffsetMetadataManagerTest). A rejected commit
// writes nothing.
func TestOffsetCommitValidation(t *testing.T) {
	cases := []struct {
		name  string
		setup func(h *harness) []string // returns member ids, leader first
		req   func(ids []string) OffsetCommitRequest
		want  error // nil: accepted
	}{
		{"a commit without generation to a missing group creates a simple group",
			func(h *harness) []string { return nil },
			func([]string) OffsetCommitRequest { return commitOne("g", -1, "", 5) }, nil},
		{"G25 a commit without generation to an Empty group is accepted",
			func(h *harness) []string { h.join(joinReq("g", "")); return nil },
			func([]string) OffsetCommitRequest { return commitOne("g", -1, "", 5) }, nil},
		{"G25 a commit without member id to a Stable group is UNKNOWN_MEMBER_ID",
			func(h *harness) []string { return h.stable("g", 1) },
			func([]string) OffsetCommitRequest { return commitOne("g", -1, "", 5) }, ErrUnknownMemberID},
		{"a member commits at the group's generation",
			func(h *harness) []string { return h.stable("g", 2) },
			func(ids []string) OffsetCommitRequest { return commitOne("g", 1, ids[1], 5) }, nil},
		{"a commit at another generation is ILLEGAL_GENERATION",
			func(h *harness) []string { return h.stable("g", 2) },
			func(ids []string) OffsetCommitRequest { return commitOne("g", 2, ids[1], 5) }, ErrIllegalGeneration},
		{"a commit from an unknown member is UNKNOWN_MEMBER_ID",
			func(h *harness) []string { return h.stable("g", 2) },
			func([]string) OffsetCommitRequest { return commitOne("g", 1, "stranger", 5) }, ErrUnknownMemberID},
		{"a commit with a generation to an Empty group is UNKNOWN_MEMBER_ID",
			func(h *harness) []string { h.join(joinReq("g", "")); return nil },
			func([]string) OffsetCommitRequest { return commitOne("g", 0, "m", 5) }, ErrUnknownMemberID},
		{"a commit from a static member's old id is FENCED_INSTANCE_ID",
			func(h *harness) []string {
				h2, ids := staticStable(h.t.(*testing.T))
				*h = *h2
				h.join(staticJoinReq("g", "", "inst-1"))
				return ids
			},
			func(ids []string) OffsetCommitRequest {
				r := commitOne("g", 1, ids[1], 5)
				r.GroupInstanceID = "inst-1"
				return r
			}, ErrFencedInstanceID},
		{"G26 a commit while CompletingRebalance is REBALANCE_IN_PROGRESS",
			func(h *harness) []string { ids, _ := completing(h, 2); return ids },
			func(ids []string) OffsetCommitRequest { return commitOne("g", 1, ids[1], 5) }, ErrRebalanceInProgress},
		{"a commit of the previous generation's member while PreparingRebalance is accepted",
			func(h *harness) []string { ids := h.stable("g", 2); h.join(joinReq("g", ids[0])); return ids },
			func(ids []string) OffsetCommitRequest { return commitOne("g", 1, ids[1], 5) }, nil},
		{"a commit to a Dead group is COORDINATOR_NOT_AVAILABLE",
			func(h *harness) []string { ids := h.stable("g", 1); h.c.Unload(); h.drain(); return ids },
			func(ids []string) OffsetCommitRequest { return commitOne("g", 1, ids[0], 5) }, ErrCoordinatorNotAvailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, noDelay)
			ids := c.setup(h)
			before := len(h.log)
			r := h.commit(c.req(ids))
			if c.want != nil {
				assert.ErrorIs(t, r.Err, c.want)
				assert.Len(t, h.log, before, "nothing written")
				return
			}
			require.NoError(t, r.Err)
			require.NoError(t, r.Topics[0].Partitions[0].Err)
			require.Len(t, h.log, before+1)
			d := h.records()[before]
			assert.Equal(t, &OffsetCommitKey{Group: "g", Topic: "t", Partition: 0}, d.OffsetKey)
			assert.Equal(t, &OffsetCommitValue{Offset: 5, LeaderEpoch: 3, Metadata: "m", CommitTimestamp: h.now.UnixMilli(), ExpireTimestamp: -1}, d.OffsetValue)
			f := h.fetch(OffsetFetchRequest{GroupID: "g"})
			assert.Equal(t, []OffsetFetchTopicResult{{Name: "t", Partitions: []FetchedOffset{{Partition: 0, Offset: 5, LeaderEpoch: 3, Metadata: "m"}}}}, f.Topics)
		})
	}
}

// Metadata beyond offset.metadata.max.bytes fails that partition alone
// (OFFSET_METADATA_TOO_LARGE); partitions the broker does not know fail with
// UNKNOWN_TOPIC_OR_PARTITION.
func TestOffsetCommitPartitionErrors(t *testing.T) {
	h := newHarness(t, Config{InitialRebalanceDelay: -1, OffsetMetadataMaxBytes: 8,
		Partitions: func(topic string) int32 { return map[string]int32{"t": 2}[topic] }})
	r := h.commit(OffsetCommitRequest{GroupID: "g", GenerationID: -1, Topics: []OffsetCommitTopic{
		{Name: "t", Partitions: []OffsetCommitPartition{
			{Partition: 0, Offset: 1, Metadata: "12345678"},
			{Partition: 1, Offset: 1, Metadata: "123456789"},
			{Partition: 2, Offset: 1},
		}},
		{Name: "missing", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: 1}}},
	}})
	require.NoError(t, r.Err)
	assert.NoError(t, r.Topics[0].Partitions[0].Err)
	assert.ErrorIs(t, r.Topics[0].Partitions[1].Err, ErrOffsetMetadataTooLarge)
	assert.ErrorIs(t, r.Topics[0].Partitions[2].Err, ErrUnknownTopicOrPartition)
	assert.ErrorIs(t, r.Topics[1].Partitions[0].Err, ErrUnknownTopicOrPartition)
	assert.Len(t, h.log, 1)
}

// A commit with its own retention (OffsetCommit v2-v4) is written as value
// version 1 with the expire timestamp.
func TestOffsetCommitRetention(t *testing.T) {
	h := newHarness(t, noDelay)
	req := commitOne("g", -1, "", 5)
	req.Retention = time.Hour
	require.NoError(t, h.commit(req).Err)
	d := h.records()[0]
	assert.Equal(t, int16(1), d.ValueVersion)
	assert.Equal(t, h.now.Add(time.Hour).UnixMilli(), d.OffsetValue.ExpireTimestamp)
}

// A classic member's commit while Stable counts as a heartbeat
// (OffsetMetadataManager.commitOffset).
func TestOffsetCommitKeepsSession(t *testing.T) {
	h := newHarness(t, noDelay)
	ids := h.stable("g", 1)
	for range 4 {
		h.advance(5 * time.Second)
		require.NoError(t, h.commit(commitOne("g", 1, ids[0], 5)).Err)
	}
	assert.Equal(t, Stable, h.group("g").state)
	h.advance(10 * time.Second)
	assert.Equal(t, Empty, h.group("g").state)
}

// OffsetFetch answers -1 for partitions without a commit and for groups that
// do not exist.
func TestOffsetFetch(t *testing.T) {
	h := newHarness(t, noDelay)
	require.NoError(t, h.commit(commitOne("g", -1, "", 7)).Err)
	f := h.fetch(OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0, 1}}}})
	assert.Equal(t, []FetchedOffset{{Partition: 0, Offset: 7, LeaderEpoch: 3, Metadata: "m"}, {Partition: 1, Offset: -1, LeaderEpoch: -1}},
		f.Topics[0].Partitions)
	none := h.fetch(OffsetFetchRequest{GroupID: "nobody"})
	assert.NoError(t, none.Err)
	assert.Empty(t, none.Topics)
}

// DeleteGroup deletes an Empty group with its offsets, and refuses a group
// with members (NON_EMPTY_GROUP).
func TestDeleteGroup(t *testing.T) {
	h := newHarness(t, noDelay)
	ids := h.stable("g", 1)
	require.NoError(t, h.commit(commitOne("g", 1, ids[0], 7)).Err)
	id := h.id()
	h.c.DeleteGroup(id, "g")
	h.drain()
	assert.ErrorIs(t, h.resps[id].(*DeleteGroupResponse).Err, ErrNonEmptyGroup)

	h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: ids[0]}}})
	before := len(h.log)
	id = h.id()
	h.c.DeleteGroup(id, "g")
	h.drain()
	require.NoError(t, h.resps[id].(*DeleteGroupResponse).Err)
	recs := h.records()[before:]
	require.Len(t, recs, 2)
	assert.Nil(t, recs[0].OffsetValue, "offset tombstone")
	assert.Nil(t, recs[1].GroupValue, "group tombstone")
	assert.NotContains(t, h.c.groups, "g")
	assert.Empty(t, h.fetch(OffsetFetchRequest{GroupID: "g"}).Topics)

	id = h.id()
	h.c.DeleteGroup(id, "g")
	h.drain()
	assert.ErrorIs(t, h.resps[id].(*DeleteGroupResponse).Err, ErrGroupIDNotFound)
	assert.True(t, strings.Contains(h.resps[id].(*DeleteGroupResponse).Err.Error(), `"g"`))
}

// OffsetDelete removes offsets of an Empty group, and of a consumer group
// only those of topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC);
// a group of another protocol with members refuses (NON_EMPTY_GROUP).
func TestOffsetDelete(t *testing.T) {
	del := func(h *harness, topics ...string) *OffsetDeleteResponse {
		req := OffsetDeleteRequest{GroupID: "g"}
		for _, topic := range topics {
			req.Topics = append(req.Topics, OffsetFetchTopic{Name: topic, Partitions: []int32{0}})
		}
		id := h.id()
		h.c.OffsetDelete(id, req)
		h.drain()
		return h.resps[id].(*OffsetDeleteResponse)
	}
	h := expiring(t)
	assert.ErrorIs(t, del(h, "t").Err, ErrGroupIDNotFound)
	id := classicConsumer(h, consumerSubscription("t"))
	commitTopics(h, 1, id, 0, "t", "u")
	r := del(h, "t", "u")
	require.NoError(t, r.Err)
	assert.ErrorIs(t, r.Topics[0].Partitions[0].Err, ErrGroupSubscribedToTopic)
	assert.NoError(t, r.Topics[1].Partitions[0].Err)
	assert.Equal(t, []string{"t"}, committedTopics(h))

	h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: id}}})
	r = del(h, "t")
	require.NoError(t, r.Err)
	assert.NoError(t, r.Topics[0].Partitions[0].Err)
	assert.Empty(t, committedTopics(h))
	checkReplay(t, h)

	unknown := newHarness(t, noDelay)
	unknown.stable("g", 1) // subscriptions that do not parse: every topic counts as consumed
	r = del(unknown, "x")
	require.NoError(t, r.Err)
	assert.ErrorIs(t, r.Topics[0].Partitions[0].Err, ErrGroupSubscribedToTopic)
	connect := newHarness(t, noDelay)
	req := joinReq("g", "")
	req.Version, req.ProtocolType = 3, "connect"
	connect.join(req)
	assert.ErrorIs(t, del(connect, "t").Err, ErrNonEmptyGroup)
}
