package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/replica"
)

// commit commits offset for partition 0 of topic "t" in groupID at the
// group's coordinator, following it as it moves, until ctx ends.
func (c *testCluster) commit(ctx context.Context, groupID string, offset int64) error {
	req := group.OffsetCommitRequest{Version: 9, GroupID: groupID, GenerationID: -1,
		Topics: []group.OffsetCommitTopic{{Name: "t", Partitions: []group.OffsetCommitPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}}
	return c.retryGroup(ctx, func(n *Node) error {
		resp, err := n.Groups().OffsetCommit(ctx, req)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			err = resp.Topics[0].Partitions[0].Err
		}
		return err
	}, groupID)
}

// committed returns the group's committed offset of partition 0 of "t".
func (c *testCluster) committed(ctx context.Context, groupID string) (int64, error) {
	var off int64
	err := c.retryGroup(ctx, func(n *Node) error {
		resp, err := n.Groups().OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: groupID, RequireStable: true,
			Topics: []group.OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			p := resp.Topics[0].Partitions[0]
			off, err = p.Offset, p.Err
		}
		return err
	}, groupID)
	return off, err
}

// retryGroup runs fn at the group's coordinator until it answers other
// than a coordinator error Kafka's clients retry (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
func (c *testCluster) retryGroup(ctx context.Context, fn func(*Node) error, groupID string) error {
	for {
		var err error
		if n := c.nodes[c.any().GroupCoordinator(groupID)]; n != nil {
			err = fn(n)
			if !errorsIsAny(err, group.ErrNotCoordinator, group.ErrCoordinatorLoadInProgress, group.ErrCoordinatorNotAvailable) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestNodeGroupCommitsSurviveCoordinatorKill(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 3}))
	waitFor(t, 10*time.Second, "the offsets topic", func() bool {
		return c.any().Metadata().Topic(group.OffsetsTopic) != nil
	})
	require.Equal(t, int32(3), int32(len(c.any().Metadata().Partition(group.OffsetsTopic, 0).Replicas)),
		"the offsets topic takes the three voters")

	groups := []string{"g1", "g2", "g3", "g4"}
	for i, g := range groups {
		require.NoError(t, c.commit(ctx, g, int64(10+i)))
	}
	coordinator := c.any().GroupCoordinator("g1")
	require.NotEqual(t, replica.NoNode, coordinator)
	c.kill(coordinator)
	for i, g := range groups {
		off, err := c.committed(ctx, g)
		require.NoError(t, err)
		require.Equal(t, int64(10+i), off, "group %s after its coordinator's kill", g)
	}
	require.NotEqual(t, coordinator, c.any().GroupCoordinator("g1"))
	// The new coordinator takes commits, and the old one, back, serves
	// them once it leads again.
	require.NoError(t, c.commit(ctx, "g1", 99))
	c.start(coordinator)
	waitFor(t, 20*time.Second, "the restarted node in the offsets partition's ISR", func() bool {
		p := c.nodes[coordinator].Metadata().Partition(group.OffsetsTopic, group.PartitionFor("g1", c.nodes[coordinator].cfg.OffsetsPartitions))
		return p != nil && len(p.ISR) == 3
	})
	require.NoError(t, c.nodes[coordinator].ElectLeader(ctx, group.OffsetsTopic, group.PartitionFor("g1", c.nodes[coordinator].cfg.OffsetsPartitions), false))
	off, err := c.committed(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, int64(99), off)
}
