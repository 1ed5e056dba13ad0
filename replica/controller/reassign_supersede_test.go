package controller

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A reassignment that replaces one in progress still waits for the
// replicas the first was adding: they are new to the partition's original
// replicas whichever reassignment names them (the ZooKeeper controller's
// ReplicaAssignment.reassignTo computes the adding replicas from the
// original ones; KRaft keeps the adding replicas when the new target adds
// none). Found by the simulator (TestSimulatorReassignments, seed 1): a
// target that only reordered the replicas being grown completed at once,
// the replica still catching up out of the ISR.
func TestReassignmentReplacingOneInProgressWaitsForItsNewReplicas(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("t", false, nodes(2, 1))
	tp := TopicPartition{Topic: "t", Partition: 0}
	require.NoError(t, h.c.Reassign(tp, nodes(2, 1, 3)))
	h.drain()
	require.Equal(t, nodes(3), h.part("t", 0).Adding)

	require.NoError(t, h.c.Reassign(tp, nodes(1, 3, 2)))
	h.drain()
	p := h.part("t", 0)
	require.Equal(t, nodes(1, 3, 2), p.Replicas)
	require.Equal(t, nodes(3), p.Adding, "3 has not caught up: the reassignment is in progress")
	require.Equal(t, nodes(2, 1), p.ISR)
	status, err := h.c.Verify(tp, nodes(1, 3, 2))
	require.NoError(t, err)
	require.Equal(t, ReassignmentInProgress, status)

	require.NoError(t, h.alter("t", 2, 1, 3))
	p = h.part("t", 0)
	require.Equal(t, nodes(1, 3, 2), p.Replicas)
	require.Empty(t, p.Adding, "complete once 3 is in the ISR")
	status, err = h.c.Verify(tp, nodes(1, 3, 2))
	require.NoError(t, err)
	require.Equal(t, ReassignmentComplete, status)
}

// Cancelling the replacing reassignment returns to the replicas before
// both: the replica the first was adding leaves.
func TestCancellingAReplacingReassignmentReturnsToTheOriginalReplicas(t *testing.T) {
	h := newHarness(t, 2, 1, 2, 3)
	h.topic("t", false, nodes(2, 1))
	tp := TopicPartition{Topic: "t", Partition: 0}
	require.NoError(t, h.c.Reassign(tp, nodes(2, 1, 3)))
	require.NoError(t, h.c.Reassign(tp, nodes(1, 3, 2)))
	require.NoError(t, h.c.CancelReassignment(tp))
	h.drain()
	p := h.part("t", 0)
	require.ElementsMatch(t, nodes(2, 1), p.Replicas)
	require.Empty(t, p.Adding)
	require.Empty(t, p.Removing)
}
