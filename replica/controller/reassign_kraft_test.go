package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// The layout a reassignment starts with, as KRaft's
// PartitionReassignmentReplicasTest has it: Adding and Removing sorted by
// node id, the target first in Replicas and the removed replicas after it
// in that order. A move that only reorders or only removes completes at
// once; the record before the completion shows the layout.
func TestReassignmentLayoutIsKRafts(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		current, target            []replica.NodeID
		replicas, adding, removing []replica.NodeID
	}{
		{"none added or removed", nodes(3, 2, 1), nodes(3, 2, 1), nodes(3, 2, 1), nil, nil},
		{"additions", nodes(3, 2, 1), nodes(3, 6, 2, 1, 5), nodes(3, 6, 2, 1, 5), nodes(5, 6), nil},
		{"removals", nodes(3, 2, 1, 0), nodes(3, 1), nodes(3, 1, 0, 2), nil, nodes(0, 2)},
		{"additions and removals", nodes(3, 2, 1, 0), nodes(7, 3, 1, 9), nodes(7, 3, 1, 9, 0, 2), nodes(7, 9), nodes(0, 2)},
		{"rearrangement", nodes(3, 2, 1, 0), nodes(0, 1, 3, 2), nodes(0, 1, 3, 2), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
			h.topic("t", false, tc.current)
			stored := len(h.store)
			require.NoError(t, h.c.Reassign(TopicPartition{Topic: "t", Partition: 0}, tc.target))
			h.drain()
			if len(h.store) == stored { // nothing to change: no record
				p := h.part("t", 0)
				require.Equal(t, tc.replicas, p.Replicas)
				require.Empty(t, append(p.Adding, p.Removing...))
				return
			}
			first := h.store[stored].(*PartitionRecord)
			require.Equal(t, tc.replicas, first.Replicas)
			require.Equal(t, tc.adding, first.Adding)
			require.Equal(t, tc.removing, first.Removing)
		})
	}
}

// When a reassignment completes (KRaft's maybeCompleteReassignment, with
// KAFKA-19975): once every replica being added is in the ISR; a target
// replica that was a replica before and is out of sync does not hold it
// up, unless the move leaves fewer replicas than before, which would
// shrink the ISR. The vectors are PartitionReassignmentReplicasTest's.
func TestReassignmentCompletesAsKRaft(t *testing.T) {
	for _, tc := range []struct {
		name            string
		current, target []replica.NodeID
		isr             []replica.NodeID // the leader's next ISR
		completes       bool
		finalISR        []replica.NodeID
	}{
		{"all new replicas in sync", nodes(0, 1, 2), nodes(3, 4, 5), nodes(0, 1, 2, 3, 4, 5), true, nodes(3, 4, 5)},
		{"a new replica out of sync", nodes(0, 1, 2), nodes(3, 4, 5), nodes(0, 1, 2, 3, 4), false, nil},
		{"some new replicas in sync", nodes(0, 1, 2), nodes(0, 1, 3), nodes(0, 1, 2, 3), true, nodes(0, 1, 3)},
		{"an existing target replica out of sync", nodes(0, 1, 2), nodes(0, 1, 3), nodes(0, 2, 3), true, nodes(0, 3)},
		{"the adding replica out of sync", nodes(0, 1, 2), nodes(0, 1, 3), nodes(0, 1, 2), false, nil},
		{"more replicas, an existing target one out of sync", nodes(0, 1, 2, 3), nodes(1, 2, 3, 4, 5), nodes(0, 1, 2, 4, 5), true, nodes(1, 2, 4, 5)},
		{"more replicas, an adding one out of sync", nodes(0, 1, 2, 3), nodes(1, 2, 3, 4, 5), nodes(0, 1, 2, 3, 5), false, nil},
		{"fewer replicas, an existing target one out of sync", nodes(0, 1, 2, 3, 4), nodes(2, 3, 4, 5), nodes(0, 1, 2, 3, 5), false, nil},
		{"fewer replicas, the adding one out of sync", nodes(0, 1, 2, 3, 4), nodes(2, 3, 4, 5), nodes(0, 1, 2, 3, 4), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, 0, 1, 2, 3, 4, 5)
			h.topic("t", false, tc.current)
			require.NoError(t, h.c.Reassign(TopicPartition{Topic: "t", Partition: 0}, tc.target))
			h.drain()
			require.NotEmpty(t, h.part("t", 0).Adding)
			leader := h.part("t", 0).Leader
			h.requireAltered(TopicPartition{Topic: "t", Partition: 0}, leader, h.alter("t", tc.isr...))
			p := h.part("t", 0)
			if !tc.completes {
				require.NotEmpty(t, p.Adding, "still in progress: replicas %v, ISR %v", p.Replicas, p.ISR)
				return
			}
			require.Empty(t, p.Adding)
			require.Empty(t, p.Removing)
			require.Equal(t, tc.target, p.Replicas)
			require.ElementsMatch(t, tc.finalISR, p.ISR)
		})
	}
}
