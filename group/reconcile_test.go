package group

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Kafka's CurrentAssignmentBuilderTest, one row per test, with topic names
// for its topic ids. "owned" is what the heartbeat reports; nil when it
// reports nothing.
func TestReconcile(t *testing.T) {
	two := func(a, b []int32) partitions { return partitions{"t1": a, "t2": b} }
	epochOf := func(e int32) func(string, int32) int32 { return func(string, int32) int32 { return e } }
	member := func(s memberState, epoch, prev int32, assigned, pending partitions) memberAssignment {
		return memberAssignment{state: s, epoch: epoch, prevEpoch: prev, assigned: assigned, pendingRevocation: pending}
	}
	cases := []struct {
		name        string
		from        memberAssignment
		targetEpoch int32
		target      partitions
		epoch       func(string, int32) int32
		owned       partitions
		want        memberAssignment
	}{
		{"StableToStable",
			member(memberStable, 10, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil),
			11, two([]int32{1, 2, 3}, []int32{4, 5, 6}), epochOf(10), nil,
			member(memberStable, 11, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil)},
		{"StableToStableWithNewPartitions",
			member(memberStable, 10, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil),
			11, two([]int32{1, 2, 3, 4}, []int32{4, 5, 6, 7}), epochOf(-1), nil,
			member(memberStable, 11, 10, two([]int32{1, 2, 3, 4}, []int32{4, 5, 6, 7}), nil)},
		{"StableToUnrevokedPartitions",
			member(memberStable, 10, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil),
			11, two([]int32{2, 3, 4}, []int32{5, 6, 7}), epochOf(-1), nil,
			member(memberUnrevokedPartitions, 10, 10, two([]int32{2, 3}, []int32{5, 6}), two([]int32{1}, []int32{4}))},
		{"StableToUnreleasedPartitions",
			member(memberStable, 10, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil),
			11, two([]int32{1, 2, 3, 4}, []int32{4, 5, 6, 7}), epochOf(10), nil,
			member(memberUnreleasedPartitions, 11, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil)},
		{"StableToUnreleasedPartitionsWithOwnedPartitionsNotHavingRevokedPartitions",
			member(memberStable, 10, 10, two([]int32{1, 2, 3}, []int32{4, 5, 6}), nil),
			11, two([]int32{1, 2, 3}, []int32{4, 5, 7}),
			func(topic string, _ int32) int32 {
				if topic == "t2" {
					return 10
				}
				return -1
			}, partitions{},
			member(memberUnreleasedPartitions, 11, 10, two([]int32{1, 2, 3}, []int32{4, 5}), nil)},
		{"UnrevokedPartitionsToStable",
			member(memberUnrevokedPartitions, 10, 10, two([]int32{2, 3}, []int32{5, 6}), two([]int32{1}, []int32{4})),
			11, two([]int32{2, 3}, []int32{5, 6}), epochOf(-1), two([]int32{2, 3}, []int32{5, 6}),
			member(memberStable, 11, 10, two([]int32{2, 3}, []int32{5, 6}), nil)},
		{"UnrevokedPartitionsToUnrevokedPartitions",
			member(memberUnrevokedPartitions, 10, 10, two([]int32{2, 3}, []int32{5, 6}), two([]int32{1}, []int32{4})),
			12, two([]int32{3}, []int32{6}), epochOf(-1), two([]int32{2, 3}, []int32{5, 6}),
			member(memberUnrevokedPartitions, 11, 10, two([]int32{3}, []int32{6}), two([]int32{2}, []int32{5}))},
		{"UnrevokedPartitionsToUnreleasedPartitions",
			member(memberUnrevokedPartitions, 11, 10, two([]int32{2, 3}, []int32{5, 6}), nil),
			11, two([]int32{2, 3, 4}, []int32{5, 6, 7}), epochOf(10), two([]int32{2, 3}, []int32{5, 6}),
			member(memberUnreleasedPartitions, 11, 11, two([]int32{2, 3}, []int32{5, 6}), nil)},
		{"UnreleasedPartitionsToStable",
			member(memberUnreleasedPartitions, 11, 11, two([]int32{2, 3}, []int32{5, 6}), nil),
			12, two([]int32{2, 3}, []int32{5, 6}), epochOf(10), nil,
			member(memberStable, 12, 11, two([]int32{2, 3}, []int32{5, 6}), nil)},
		{"UnreleasedPartitionsToStableWithNewPartitions",
			member(memberUnreleasedPartitions, 11, 11, two([]int32{2, 3}, []int32{5, 6}), nil),
			11, two([]int32{2, 3, 4}, []int32{5, 6, 7}), epochOf(-1), nil,
			member(memberStable, 11, 11, two([]int32{2, 3, 4}, []int32{5, 6, 7}), nil)},
		{"UnreleasedPartitionsToUnreleasedPartitions",
			member(memberUnreleasedPartitions, 11, 11, two([]int32{2, 3}, []int32{5, 6}), nil),
			11, two([]int32{2, 3, 4}, []int32{5, 6, 7}), epochOf(10), nil,
			member(memberUnreleasedPartitions, 11, 11, two([]int32{2, 3}, []int32{5, 6}), nil)},
		{"UnreleasedPartitionsToUnrevokedPartitions",
			member(memberUnreleasedPartitions, 11, 11, two([]int32{2, 3}, []int32{5, 6}), nil),
			12, two([]int32{3}, []int32{6}), epochOf(10), nil,
			member(memberUnrevokedPartitions, 11, 11, two([]int32{3}, []int32{6}), two([]int32{2}, []int32{5}))},
		{"UnknownState after the member rejoined owning nothing",
			member(memberUnknown, 11, 11, two([]int32{3}, []int32{6}), two([]int32{2}, []int32{5})),
			12, two([]int32{3}, []int32{6}), epochOf(11), partitions{},
			member(memberStable, 12, 11, two([]int32{3}, []int32{6}), nil)},
	}
	for _, c := range cases {
		got, err := reconcile(c.from, c.targetEpoch, c.target, c.epoch, c.owned)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
}

// A member stays UNREVOKED_PARTITIONS while it may still own a partition it
// must revoke: when it does not say what it owns, or says it owns one
// (testRemainsInUnrevokedPartitions). A member in an unknown state is fenced
// until it owns nothing (testUnknownState).
func TestReconcileWaits(t *testing.T) {
	m := memberAssignment{state: memberUnrevokedPartitions, epoch: 10, prevEpoch: 10,
		assigned: partitions{"t1": {2, 3}, "t2": {5, 6}}, pendingRevocation: partitions{"t1": {1}, "t2": {4}}}
	target := partitions{"t1": {3}, "t2": {6}}
	free := func(string, int32) int32 { return -1 }
	for _, owned := range []partitions{nil, {"t1": {1, 2, 3}, "t2": {5, 6}}, {"t1": {2, 3}, "t2": {4, 5, 6}}} {
		got, err := reconcile(m, 12, target, free, owned)
		require.NoError(t, err)
		assert.Equal(t, m, got, "owned %v", owned)
	}
	unknown := memberAssignment{state: memberUnknown, epoch: 11, prevEpoch: 11, assigned: partitions{"t1": {3}}}
	for _, owned := range []partitions{nil, {"t1": {3}}} {
		_, err := reconcile(unknown, 12, target, free, owned)
		assert.ErrorIs(t, err, ErrFencedMemberEpoch, "owned %v", owned)
	}
}
