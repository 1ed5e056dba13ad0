package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// A partition's replicas move (kafka-reassign-partitions' generate,
// execute, verify): the new replica catches up and joins the ISR, the
// removed one leaves, and every acknowledged record is on the new
// replicas.
func TestNodeReassignsAPartition(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := c.any()
	require.NoError(t, n.CreateTopic(ctx, "m", TopicSpec{Assignment: [][]replica.NodeID{{1, 2}}}))
	producer := &segment.ProducerFields{ID: 5}
	var acked []string
	for i := range 10 {
		v := fmt.Sprint("r", i)
		_, err := c.produce(ctx, "m", 0, replica.AcksAll, idempotentBatch(t, producer, v))
		require.NoError(t, err)
		acked = append(acked, v)
	}

	current, err := n.Assignment(ctx, "m")
	require.NoError(t, err)
	require.Equal(t, []assign.PartitionReplicas{{Topic: "m", Partition: 0, Replicas: []int32{1, 2}}}, current.Partitions)
	target := assign.Reassignment{Version: 1, Partitions: []assign.PartitionReplicas{{Topic: "m", Partition: 0, Replicas: []int32{3, 2}}}}
	require.NoError(t, n.Reassign(ctx, target))
	waitFor(t, 30*time.Second, "the reassignment complete", func() bool {
		lines, err := n.VerifyReassignment(ctx, target)
		return err == nil && len(lines) == 1 && lines[0].Status == controller.ReassignmentComplete
	})
	p := n.Metadata().Partition("m", 0)
	require.Equal(t, []replica.NodeID{3, 2}, p.Replicas)
	require.False(t, slices.Contains(p.ISR, 1))
	for i := range 5 {
		v := fmt.Sprint("s", i)
		_, err := c.produce(ctx, "m", 0, replica.AcksAll, idempotentBatch(t, producer, v))
		require.NoError(t, err)
		acked = append(acked, v)
	}
	require.Equal(t, acked, c.readAll(ctx, "m", 0))

	// A reassignment naming a broker that does not exist changes nothing.
	bad := assign.Reassignment{Version: 1, Partitions: []assign.PartitionReplicas{{Topic: "m", Partition: 0, Replicas: []int32{3, 9}}}}
	require.ErrorIs(t, n.Reassign(ctx, bad), replica.ErrInvalidReplicaAssignment)
	require.Equal(t, []replica.NodeID{3, 2}, n.Metadata().Partition("m", 0).Replicas)
}
