package group

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsumerGroupRegexSubscription: a member subscribed by regular
// expression (KIP-848's SubscribedTopicRegex) is assigned the topics whose
// whole name it matches; a topic created later joins the subscription at
// the next heartbeat, with a new group epoch; a bad expression is
// INVALID_REGULAR_EXPRESSION; "" with names goes back to names; the
// expression is in the member's record, and a coordinator that replays the
// log matches it again.
func TestConsumerGroupRegexSubscription(t *testing.T) {
	partitions := map[string]int32{"orders-eu": 2, "orders-us": 1, "payments": 3, "orders": 1}
	h := newHarness(t, Config{InitialRebalanceDelay: -1,
		Partitions: func(topic string) int32 { return partitions[topic] },
		Topics: func() []string {
			var out []string
			for t := range partitions {
				out = append(out, t)
			}
			return out
		}})
	regex := func(s string) *string { return &s }
	join := func(group, member string, re *string, names ...string) *ConsumerGroupHeartbeatResponse {
		return h.cgh(ConsumerGroupHeartbeatRequest{GroupID: group, MemberID: member, RebalanceTimeout: time.Minute,
			SubscribedTopicNames: names, SubscribedTopicRegex: re, Owned: &Assignment{}})
	}

	bad := join("g", "m", regex(`orders-(`))
	require.ErrorIs(t, bad.Err, ErrInvalidRegularExpression)
	require.ErrorIs(t, join("g", "m", regex("")).Err, ErrInvalidRequest, "a join needs names or an expression")

	r := join("g", "m", regex(`orders-.*`))
	require.NoError(t, r.Err)
	require.Equal(t, map[string][]int32{"orders-eu": {0, 1}, "orders-us": {0}}, r.Assignment.Partitions,
		`the whole name must match: not "orders"`)
	epoch := r.MemberEpoch

	partitions["orders-asia"] = 1
	r = h.cgh(ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: epoch, Owned: r.Assignment})
	require.NoError(t, r.Err)
	require.Greater(t, r.MemberEpoch, epoch, "a new group epoch for the new topic")
	require.Equal(t, map[string][]int32{"orders-asia": {0}, "orders-eu": {0, 1}, "orders-us": {0}}, r.Assignment.Partitions)

	d, _ := h.c.DescribeConsumerGroup("g")
	require.Equal(t, "orders-.*", d.Members[0].SubscribedTopicRegex)
	checkReplay(t, h) // the member's record holds the expression
	replayed, err := NewCoordinator(h.c.cfg, h.now)
	require.NoError(t, err)
	h.replayInto(replayed, 0)
	replayed.Loaded()
	m := replayed.consumerGroups["g"].byID["m"]
	replayed.resolveRegexes(replayed.consumerGroups["g"])
	require.Equal(t, []string{"orders-asia", "orders-eu", "orders-us"}, m.subscription(), "matched again after a replay")

	r = h.cgh(ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: r.MemberEpoch, Owned: r.Assignment,
		SubscribedTopicRegex: regex(""), SubscribedTopicNames: []string{"payments"}})
	require.NoError(t, r.Err)
	owned := r.Assignment
	for i := 0; r.Assignment == nil || !slices.Equal(r.Assignment.Partitions["payments"], []int32{0, 1, 2}); i++ {
		require.Less(t, i, 5, "the member reconciles in a few heartbeats")
		r = h.cgh(ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: r.MemberEpoch, Owned: owned})
		require.NoError(t, r.Err)
		if r.Assignment != nil {
			owned = r.Assignment
		}
	}
	require.Equal(t, map[string][]int32{"payments": {0, 1, 2}}, r.Assignment.Partitions, "back to names")
}
