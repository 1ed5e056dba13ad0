package group

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDescribeConsumerGroup: the description follows the group through
// Kafka's ConsumerGroupState: Stable with one member that has its target;
// Reconciling when a second member joins and the first must give up
// partitions it still owns; Stable again once both have their targets;
// Empty when the last member leaves. Unknown ids are not found.
func TestDescribeConsumerGroup(t *testing.T) {
	h := consumerHarness(t)
	_, ok := h.c.DescribeConsumerGroup("g")
	require.False(t, ok)

	a := h.joinConsumer("a", "")
	require.NoError(t, a.Err)
	d, ok := h.c.DescribeConsumerGroup("g")
	require.True(t, ok)
	require.Equal(t, "Stable", d.State)
	require.Equal(t, "range", d.Assignor)
	require.Equal(t, []ConsumerMemberDescription{{MemberID: "a", MemberEpoch: 1, SubscribedTopicNames: []string{"t"},
		Assignment: map[string][]int32{"t": {0, 1, 2, 3, 4, 5}}, TargetAssignment: map[string][]int32{"t": {0, 1, 2, 3, 4, 5}}}}, d.Members)

	b := h.joinConsumer("b", "")
	require.NoError(t, b.Err)
	d, _ = h.c.DescribeConsumerGroup("g")
	require.Equal(t, "Reconciling", d.State, "a still owns what is b's now")
	require.Equal(t, [2]int32{2, 2}, [2]int32{d.Epoch, d.AssignmentEpoch})
	require.Len(t, d.Members, 2)
	require.Equal(t, map[string][]int32{"t": {0, 1, 2}}, d.Members[0].TargetAssignment)
	require.Equal(t, map[string][]int32{"t": {3, 4, 5}}, d.Members[1].TargetAssignment)
	require.Empty(t, d.Members[1].Assignment["t"], "b waits for a's partitions")

	// a gives up 3-5, then b takes them.
	require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: 1, Owned: owns(0, 1, 2)}).Err)
	require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: 2, Owned: owns()}).Err)
	d, _ = h.c.DescribeConsumerGroup("g")
	require.Equal(t, "Stable", d.State)
	require.Equal(t, map[string][]int32{"t": {0, 1, 2}}, d.Members[0].Assignment)
	require.Equal(t, map[string][]int32{"t": {3, 4, 5}}, d.Members[1].Assignment)

	for _, m := range []string{"a", "b"} {
		require.NoError(t, h.cgh(ConsumerGroupHeartbeatRequest{MemberID: m, MemberEpoch: LeaveMemberEpoch}).Err)
	}
	d, ok = h.c.DescribeConsumerGroup("g")
	require.True(t, ok)
	require.Equal(t, "Empty", d.State)
	require.Empty(t, d.Members)
}
