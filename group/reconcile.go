package group

import (
	"maps"
	"slices"
)

// This file is the reconciliation of a KIP-848 consumer group member: how a
// member moves from the partitions it has towards the target assignment the
// server-side assignor computed, one heartbeat at a time, so that no
// partition is given to a member before the member that had it has let it
// go (Kafka's CurrentAssignmentBuilder). The consumer group state machine
// that calls it is to come; the function is pure and tested on its own.

// memberState is a consumer group member's reconciliation state, with
// Kafka's values (MemberState, persisted in
// ConsumerGroupCurrentMemberAssignmentValue).
type memberState int8

const (
	memberStable               memberState = 0   // has its target, or waits for a new one
	memberUnrevokedPartitions  memberState = 1   // must give up partitions first
	memberUnreleasedPartitions memberState = 2   // waits for partitions others still have
	memberUnknown              memberState = 127 // a state of a newer version
)

// partitions maps a topic to partition numbers in ascending order; topics
// without partitions are absent.
type partitions map[string][]int32

// memberAssignment is what reconciliation knows of a member.
type memberAssignment struct {
	state             memberState
	epoch, prevEpoch  int32
	assigned          partitions
	pendingRevocation partitions
}

// reconcile computes a member's next assignment (CurrentAssignmentBuilder.
// build). target is the member's target assignment at targetEpoch;
// partitionEpoch returns the epoch of the member that has a partition, or -1
// when no member has it; owned is what the member reported owning in its
// heartbeat, nil when it did not report. A member in a state this version
// does not know is fenced unless it reports owning nothing.
func reconcile(m memberAssignment, targetEpoch int32, target partitions, partitionEpoch func(string, int32) int32, owned partitions) (memberAssignment, error) {
	switch m.state {
	case memberStable:
		if m.epoch == targetEpoch {
			return m, nil
		}
		return m.next(m.epoch, targetEpoch, target, partitionEpoch, owned), nil
	case memberUnrevokedPartitions:
		if ownsAny(owned, m.pendingRevocation) {
			return m, nil
		}
		// Revoked: the member moves to the next epoch and on towards the
		// target.
		return m.next(m.epoch+1, targetEpoch, target, partitionEpoch, owned), nil
	case memberUnreleasedPartitions:
		return m.next(m.epoch, targetEpoch, target, partitionEpoch, owned), nil
	}
	if owned == nil || len(owned) > 0 {
		return m, errorf(ErrFencedMemberEpoch, "member in unknown state %d must give up its partitions and rejoin", m.state)
	}
	return m.next(targetEpoch, targetEpoch, target, partitionEpoch, owned), nil
}

// ownsAny reports whether the member may still own any of these partitions;
// a member that did not report what it owns may.
func ownsAny(owned, these partitions) bool {
	if owned == nil {
		return true
	}
	for topic, ps := range owned {
		for _, p := range ps {
			if slices.Contains(these[topic], p) {
				return true
			}
		}
	}
	return false
}

// next is CurrentAssignmentBuilder.computeNextAssignment. Per topic: the
// member keeps what it has of the target, must revoke the rest, and may get
// the target partitions no other member has. Revocation comes first: a
// member with partitions to revoke that it may still own stays at epoch, in
// UNREVOKED_PARTITIONS; otherwise it moves to the target epoch, waiting in
// UNRELEASED_PARTITIONS while another member still has some of its target.
func (m memberAssignment) next(epoch, targetEpoch int32, target partitions, partitionEpoch func(string, int32) int32, owned partitions) memberAssignment {
	assigned, revoke, add := partitions{}, partitions{}, partitions{}
	unreleased := false
	topics := slices.Sorted(maps.Keys(target))
	for topic := range m.assigned {
		if _, ok := target[topic]; !ok {
			topics = append(topics, topic)
		}
	}
	for _, topic := range topics {
		have, want := m.assigned[topic], target[topic]
		keep := slices.DeleteFunc(slices.Clone(have), func(p int32) bool { return !slices.Contains(want, p) })
		gone := slices.DeleteFunc(slices.Clone(have), func(p int32) bool { return slices.Contains(keep, p) })
		free := slices.DeleteFunc(slices.Clone(want), func(p int32) bool {
			if slices.Contains(keep, p) {
				return true
			}
			if partitionEpoch(topic, p) != -1 {
				unreleased = true
				return true
			}
			return false
		})
		setNonEmpty(assigned, topic, keep)
		setNonEmpty(revoke, topic, gone)
		setNonEmpty(add, topic, free)
	}
	out := m
	out.prevEpoch, out.pendingRevocation = m.epoch, nil
	switch {
	case len(revoke) > 0 && ownsAny(owned, revoke):
		out.state, out.epoch = memberUnrevokedPartitions, epoch
		out.assigned, out.pendingRevocation = assigned, revoke
		return out
	case len(add) > 0:
		for topic, ps := range add {
			assigned[topic] = slices.Sorted(slices.Values(append(assigned[topic], ps...)))
		}
	}
	out.state, out.epoch, out.assigned = memberStable, targetEpoch, assigned
	if unreleased {
		out.state = memberUnreleasedPartitions
	}
	return out
}

func (m memberAssignment) equal(o memberAssignment) bool {
	return m.state == o.state && m.epoch == o.epoch && m.prevEpoch == o.prevEpoch &&
		maps.EqualFunc(m.assigned, o.assigned, slices.Equal[[]int32]) &&
		maps.EqualFunc(m.pendingRevocation, o.pendingRevocation, slices.Equal[[]int32])
}

func setNonEmpty(p partitions, topic string, ps []int32) {
	if len(ps) > 0 {
		p[topic] = ps
	}
}
