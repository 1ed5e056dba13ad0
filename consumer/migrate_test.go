package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/group"
)

// The in-process Consumer, which speaks the classic protocol, through an
// upgrade and a downgrade of its group on a Service: a member joining with
// ConsumerGroupHeartbeat gets half of the partitions once the Consumer has
// given them up, never before; when it leaves, the group is classic again
// and the Consumer gets them all back.
func TestConsumerThroughUpgradeAndDowngrade(t *testing.T) {
	for _, assignor := range []assign.Assignor{assign.Range, assign.CooperativeSticky} {
		t.Run(assignor.Name(), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": 4})
			a := e.consumer(Options{Topics: []string{"t"}, Assignor: assignor})
			pollAll(t, func() bool { return len(a.Assigned()) == 4 }, a)

			ctx := context.Background()
			var owned []int32
			epoch := int32(0)
			beat := func(req group.ConsumerGroupHeartbeatRequest) {
				req.GroupID, req.MemberID = "g", "n"
				r, err := e.s.ConsumerGroupHeartbeat(ctx, req)
				require.NoError(t, err)
				require.NoError(t, r.Err)
				epoch = r.MemberEpoch
				if r.Assignment != nil {
					owned = r.Assignment.Partitions["t"]
				}
			}
			exclusive := func() {
				for _, tp := range a.Assigned() {
					require.NotContains(t, owned, tp.Partition, "partition %d owned by both", tp.Partition)
				}
			}
			beat(group.ConsumerGroupHeartbeatRequest{RebalanceTimeout: time.Minute, SubscribedTopicNames: []string{"t"}, Owned: &group.Assignment{}})
			_, classic, err := e.s.DescribeGroup(ctx, "g")
			require.NoError(t, err)
			require.False(t, classic, "upgraded: no classic group of that id")
			pollInto(t, func() bool { return len(owned) == 2 && len(a.Assigned()) == 2 }, func(int, []Message) {
				exclusive()
				beat(group.ConsumerGroupHeartbeatRequest{MemberEpoch: epoch, Owned: owns(owned...)})
				exclusive()
			}, a)

			beat(group.ConsumerGroupHeartbeatRequest{MemberEpoch: group.LeaveMemberEpoch})
			owned = nil
			pollAll(t, func() bool { return len(a.Assigned()) == 4 }, a)
			d, ok, err := e.s.DescribeGroup(ctx, "g")
			require.NoError(t, err)
			require.True(t, ok, "downgraded")
			require.Equal(t, group.Stable, d.State)
		})
	}
}

// owns is an assignment of partitions ps of topic t.
func owns(ps ...int32) *group.Assignment {
	return &group.Assignment{Partitions: map[string][]int32{"t": ps}}
}
