package controller

import (
	"fmt"
	"slices"

	"github.com/strandlog/strand/replica"
)

// Reassign starts moving a partition to the target replicas (the execute
// step of kafka-reassign-partitions; assign.GenerateReassignment plans the
// targets). As KRaft's controller does it, in steps, each a record:
//
//   - grow: Replicas becomes the target followed by the replicas to remove;
//     the new ones are Adding and start fetching. The ISR does not change:
//     the controller never adds to it, only the leader does, with an
//     AlterPartition, once a new replica has caught up.
//   - switch and shrink, as soon as every target replica is in the ISR:
//     Replicas becomes the target, the removed replicas leave the ISR and
//     ELR, a leader being removed hands over to the first target replica in
//     the ISR, and the leader epoch moves on so that the removed replicas
//     learn that they are out. The shrink waits while it would leave fewer
//     than MinInsyncReplicas in the ISR.
//
// A reassignment started while another is in progress starts from the
// current replicas: the replicas the earlier one was adding are removed if
// the new target does not hold them.
func (c *Controller) Reassign(tp TopicPartition, target []replica.NodeID) error {
	p := c.s.Partitions[tp]
	if p == nil {
		return fmt.Errorf("%w: %v", replica.ErrUnknownPartition, tp)
	}
	if len(target) == 0 || len(target) > maxNodes || hasDuplicate(target) {
		return fmt.Errorf("%w: %v target replicas %v", replica.ErrInvalidReplicaAssignment, tp, target)
	}
	for _, n := range target {
		if c.s.Brokers[n] == nil {
			return fmt.Errorf("%w: %v: broker %d is not registered", replica.ErrInvalidReplicaAssignment, tp, n)
		}
	}
	removing := minus(p.Replicas, target)
	return c.change(tp, change{isr: p.ISR, layout: &layout{
		replicas: slices.Concat(target, removing),
		adding:   minus(target, p.Replicas),
		removing: removing,
	}})
}

// CancelReassignment returns a partition to its replicas before the
// reassignment in progress: the replicas being added leave the replicas
// and the ISR, in a new leader epoch (KAFKA-13972: without it the
// replicas being dropped would ignore the change and stay as strays).
func (c *Controller) CancelReassignment(tp TopicPartition) error {
	p := c.s.Partitions[tp]
	if p == nil {
		return fmt.Errorf("%w: %v", replica.ErrUnknownPartition, tp)
	}
	if len(p.Adding)+len(p.Removing) == 0 {
		return fmt.Errorf("%w: %v", replica.ErrNoReassignmentInProgress, tp)
	}
	isr := minus(p.ISR, p.Adding)
	if len(isr) == 0 {
		return fmt.Errorf("%w: %v: cancelling would empty the ISR %v", replica.ErrInvalidRequest, tp, p.ISR)
	}
	return c.change(tp, change{isr: isr, bumpLeaderEpoch: true,
		layout: &layout{replicas: minus(p.Replicas, p.Adding)}})
}

func (c *Controller) maybeCompleteReassignment(tp TopicPartition) error {
	p := c.s.Partitions[tp]
	if len(p.Adding)+len(p.Removing) == 0 {
		return nil
	}
	target := minus(p.Replicas, p.Removing)
	isr := minus(p.ISR, p.Removing)
	if !subset(target, isr) {
		return nil // catching up
	}
	if len(isr) < c.cfg.MinInsyncReplicas && len(isr) < len(p.ISR) {
		return nil // never shrink the ISR below MinInsyncReplicas
	}
	return c.change(tp, change{isr: isr, bumpLeaderEpoch: true, layout: &layout{replicas: target}})
}

// ReassignmentStatus is what Verify reports of a partition.
type ReassignmentStatus int

// The outcomes of kafka-reassign-partitions --verify.
const (
	// ReassignmentComplete: no reassignment in progress and the replicas
	// are the target.
	ReassignmentComplete ReassignmentStatus = iota
	// ReassignmentInProgress: a reassignment is in progress.
	ReassignmentInProgress
	// ReassignmentDiffers: no reassignment in progress, but the replicas
	// are not the target (it was cancelled or superseded).
	ReassignmentDiffers
)

func (s ReassignmentStatus) String() string {
	switch s {
	case ReassignmentComplete:
		return "complete"
	case ReassignmentInProgress:
		return "in progress"
	default:
		return "differs"
	}
}

// Verify reports where a partition stands against a reassignment target.
func (c *Controller) Verify(tp TopicPartition, target []replica.NodeID) (ReassignmentStatus, error) {
	p := c.s.Partitions[tp]
	switch {
	case p == nil:
		return 0, fmt.Errorf("%w: %v", replica.ErrUnknownPartition, tp)
	case len(p.Adding)+len(p.Removing) > 0:
		return ReassignmentInProgress, nil
	case slices.Equal(p.Replicas, target):
		return ReassignmentComplete, nil
	}
	return ReassignmentDiffers, nil
}
