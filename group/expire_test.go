package group

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// consumerSubscription is a consumer's protocol metadata for topics.
func consumerSubscription(topics ...string) []byte {
	return Subscription{Topics: topics, GenerationID: -1}.Encode(ConsumerProtocolVersion)
}

// expiring is a coordinator whose offsets are kept one hour, checked every
// minute.
func expiring(t *testing.T) *harness {
	return newHarness(t, Config{InitialRebalanceDelay: -1, OffsetsRetention: time.Hour, OffsetsRetentionCheckInterval: time.Minute})
}

// classicConsumer builds a Stable classic group of one consumer with this protocol
// metadata and a 20 minute session.
func classicConsumer(h *harness, metadata []byte) string {
	first := h.joined(h.join(joinReq("g", "")))
	req := joinReq("g", first.MemberID)
	req.SessionTimeout = 20 * time.Minute
	req.Protocols[0].Metadata = metadata
	j := h.join(req)
	h.advance(0)
	id := h.joined(j).MemberID
	h.syncAll("g", []string{id})
	require.Equal(h.t, Stable, h.group("g").state)
	return id
}

func commitTopics(h *harness, generation int32, memberID string, retention time.Duration, topics ...string) {
	req := OffsetCommitRequest{GroupID: "g", GenerationID: generation, MemberID: memberID, Retention: retention}
	for _, t := range topics {
		req.Topics = append(req.Topics, OffsetCommitTopic{Name: t, Partitions: []OffsetCommitPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}})
	}
	require.NoError(h.t, h.commit(req).Err)
}

func committedTopics(h *harness) []string {
	var out []string
	for _, t := range h.fetch(OffsetFetchRequest{GroupID: "g"}).Topics {
		out = append(out, t.Name)
	}
	return out
}

// The expiration rules of Kafka's group coordinator
// (OffsetExpirationConditionImpl, ClassicGroup.offsetExpirationCondition,
// KIP-211).
func TestOffsetExpiration(t *testing.T) {
	t.Run("G27 an Empty group's offsets expire a retention after it became Empty, then the group goes", func(t *testing.T) {
		h := expiring(t)
		id := classicConsumer(h, consumerSubscription("t"))
		commitTopics(h, 1, id, 0, "t")
		h.advance(15 * time.Minute)
		require.NoError(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: id}))
		h.advance(15 * time.Minute)
		h.leave(LeaveGroupRequest{GroupID: "g", Members: []LeaveGroupMember{{MemberID: id}}})
		require.Equal(t, Empty, h.group("g").state)
		h.advance(59 * time.Minute)
		assert.Equal(t, []string{"t"}, committedTopics(h), "the retention counts from Empty, not from the commit")
		h.advance(time.Minute)
		assert.Empty(t, committedTopics(h))
		assert.NotContains(t, h.c.groups, "g")
		recs := h.records()
		require.GreaterOrEqual(t, len(recs), 2)
		assert.Equal(t, &OffsetCommitKey{Group: "g", Topic: "t"}, recs[len(recs)-2].OffsetKey)
		assert.Nil(t, recs[len(recs)-2].OffsetValue)
		assert.Equal(t, &GroupMetadataKey{Group: "g"}, recs[len(recs)-1].GroupKey)
		assert.Nil(t, recs[len(recs)-1].GroupValue)
		checkReplay(t, h)
	})
	t.Run("G28 a Stable group's offsets of topics no member subscribes to expire a retention after their commit", func(t *testing.T) {
		h := expiring(t)
		id := classicConsumer(h, consumerSubscription("t"))
		commitTopics(h, 1, id, 0, "t", "u")
		for range 12 {
			h.advance(5 * time.Minute)
			require.NoError(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: id}))
		}
		assert.Equal(t, []string{"t"}, committedTopics(h))
		assert.Equal(t, Stable, h.group("g").state)
		checkReplay(t, h)
	})
	t.Run("a simple group's offsets expire each a retention after its commit", func(t *testing.T) {
		h := expiring(t)
		commitTopics(h, -1, "", 0, "t")
		h.advance(30 * time.Minute)
		commitTopics(h, -1, "", 0, "u")
		h.advance(30 * time.Minute)
		assert.Equal(t, []string{"u"}, committedTopics(h))
		h.advance(30 * time.Minute)
		assert.NotContains(t, h.c.groups, "g")
	})
	t.Run("an offset committed with its own retention expires then", func(t *testing.T) {
		h := expiring(t)
		commitTopics(h, -1, "", 10*time.Minute, "t")
		h.advance(9 * time.Minute)
		assert.Equal(t, []string{"t"}, committedTopics(h))
		h.advance(time.Minute)
		assert.Empty(t, committedTopics(h))
	})
	t.Run("nothing expires in a consumer group that is rebalancing, or whose subscriptions are unknown", func(t *testing.T) {
		h := expiring(t)
		id := classicConsumer(h, []byte("not a ConsumerProtocolSubscription"))
		commitTopics(h, 1, id, 0, "t")
		for range 24 {
			h.advance(5 * time.Minute)
			require.NoError(t, h.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: id}))
		}
		assert.Equal(t, []string{"t"}, committedTopics(h))

		h2 := expiring(t)
		id = classicConsumer(h2, consumerSubscription("t"))
		commitTopics(h2, 1, id, 0, "u")
		slow := joinReq("g", "")
		slow.Version, slow.RebalanceTimeout = 3, 2*time.Hour
		h2.join(slow) // a rebalance that waits up to two hours for the first member
		for range 18 {
			h2.advance(5 * time.Minute)
			require.ErrorIs(t, h2.heartbeat(HeartbeatRequest{GroupID: "g", GenerationID: 1, MemberID: id}), ErrRebalanceInProgress)
		}
		assert.Equal(t, []string{"u"}, committedTopics(h2), "nothing expires while PreparingRebalance")
	})
	t.Run("an Empty group without offsets is deleted at the next check", func(t *testing.T) {
		h := expiring(t)
		h.join(joinReq("g", "")) // created, with a pending member
		h.advance(time.Minute)
		assert.NotContains(t, h.c.groups, "g")
		v, ok := h.lastGroupRecord("g")
		assert.True(t, ok)
		assert.Nil(t, v, "a tombstone")
	})
}
