package controller

import (
	"fmt"
	"slices"

	"github.com/strandlog/strand/assign"
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
//   - switch and shrink, as soon as every replica being added is in the
//     ISR, and, for a move to fewer replicas than before, every target
//     replica (KAFKA-19975: a target replica that was already a replica
//     and is out of sync does not hold the move up while completing it
//     cannot shrink the ISR): Replicas becomes the target, the removed
//     replicas leave the ISR and ELR, a leader being removed hands over to
//     the first target replica in the ISR, and the leader epoch moves on so
//     that the removed replicas learn that they are out. The shrink waits
//     while it would leave fewer than MinInsyncReplicas in the ISR, or than
//     the replicas before the move if they are fewer (Kafka's effective
//     min.insync.replicas).
//
// As in KRaft's PartitionReassignmentReplicas, Adding and Removing are
// sorted by node id and the removed replicas follow the target in that
// order.
//
// A reassignment started while another is in progress starts from the
// current replicas: the replicas the earlier one was adding are removed if
// the new target does not hold them, and are still being added if it does
// (they are new to the replicas before either reassignment, as the
// ZooKeeper controller's ReplicaAssignment.reassignTo counts them).
func (c *Controller) Reassign(tp TopicPartition, target []replica.NodeID) error {
	p := c.s.Partitions[tp]
	if p == nil {
		return fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	}
	if len(target) == 0 || len(target) > maxNodes || hasDuplicate(target) {
		return fmt.Errorf("%w: %v target replicas %v", replica.ErrInvalidReplicaAssignment, tp, target)
	}
	for _, n := range target {
		if c.s.Brokers[n] == nil {
			return fmt.Errorf("%w: %v: broker %d is not registered", replica.ErrInvalidReplicaAssignment, tp, n)
		}
	}
	removing := slices.Sorted(slices.Values(minus(p.Replicas, target)))
	return c.change(tp, change{isr: p.ISR, layout: &layout{
		replicas: slices.Concat(target, removing),
		adding:   slices.Sorted(slices.Values(minus(target, minus(p.Replicas, p.Adding)))),
		removing: removing,
	}})
}

// CancelReassignment returns a partition to its replicas before the
// reassignment in progress: the replicas being added leave the replicas
// and the ISR, in a new leader epoch (KAFKA-13972: without it the
// replicas being dropped would ignore the change and stay as strays).
//
// When every ISR member is a replica being added, the original replicas
// hold none of the ISR, and the revert elects a leader outside it (KRaft's
// PartitionReassignmentRevert): from the ELR if a member of it is among
// them and live (KIP-966), which is clean; else, only if the topic allows
// unclean election, uncleanly (a RECOVERING leader, in Ready.Unclean).
// Otherwise the cancel is refused with ErrInvalidReplicaAssignment, as
// Kafka refuses it, and nothing changes.
func (c *Controller) CancelReassignment(tp TopicPartition) error {
	p := c.s.Partitions[tp]
	if p == nil {
		return fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	}
	if len(p.Adding)+len(p.Removing) == 0 {
		return fmt.Errorf("%w: %v", replica.ErrNoReassignmentInProgress, tp)
	}
	replicas, isr := minus(p.Replicas, p.Adding), minus(p.ISR, p.Adding)
	if len(isr) == 0 && c.first(tp, replicas, p.ELR) == replica.NoNode && !c.s.Topics[tp.Topic].Unclean {
		return fmt.Errorf("%w: %v: reverting to replicas %v needs an unclean leader election: the ISR %v holds only replicas being added, and the topic does not allow one",
			replica.ErrInvalidReplicaAssignment, tp, replicas, p.ISR)
	}
	return c.change(tp, change{isr: isr, bumpLeaderEpoch: true, layout: &layout{replicas: replicas}})
}

func (c *Controller) maybeCompleteReassignment(tp TopicPartition) error {
	p := c.s.Partitions[tp]
	if len(p.Adding)+len(p.Removing) == 0 {
		return nil
	}
	target := minus(p.Replicas, p.Removing)
	isr := minus(p.ISR, p.Removing)
	before := len(p.Replicas) - len(p.Adding) // the replicas before the move
	if len(isr) == 0 || !subset(p.Adding, isr) {
		return nil // catching up
	}
	if len(target) < before && !subset(target, isr) {
		return nil // fewer replicas than before: every one of them in sync first
	}
	// Never shrink the ISR below the topic's min ISR, counted as Kafka
	// counts a topic's: at most its replication factor, the replicas
	// before the move (ReplicationControlManager.getTopicEffectiveMinIsr).
	// Above it, a move of as many replicas would wait for an ISR they
	// never reach.
	if minISR := min(c.minISR(tp.Topic), before); len(isr) < minISR && len(isr) < len(p.ISR) {
		return nil
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
		return 0, fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	case len(p.Adding)+len(p.Removing) > 0:
		return ReassignmentInProgress, nil
	case slices.Equal(p.Replicas, target):
		return ReassignmentComplete, nil
	}
	return ReassignmentDiffers, nil
}

// Assignment returns the current replicas of the topics' partitions (all
// topics if none is named) as kafka-reassign-partitions prints them: the
// current input of assign.GenerateReassignment. A partition being
// reassigned shows its target replicas.
func (c *Controller) Assignment(topics ...string) assign.Reassignment {
	r := assign.Reassignment{Version: 1}
	for _, tp := range c.partitions(func(*Partition) bool { return true }) {
		if len(topics) > 0 && !slices.Contains(topics, tp.Topic) {
			continue
		}
		p := c.s.Partitions[tp]
		var rs []int32
		for _, n := range minus(p.Replicas, p.Removing) {
			rs = append(rs, int32(n))
		}
		r.Partitions = append(r.Partitions, assign.PartitionReplicas{Topic: tp.Topic, Partition: tp.Partition, Replicas: rs})
	}
	return r
}

// targets checks a reassignment file (kafka-reassign-partitions
// --reassignment-json-file) whole, so that a bad one changes nothing: the
// version is 1, every partition exists and is named once, every replica
// list is non-empty, without duplicates, of registered brokers.
func (c *Controller) targets(r assign.Reassignment) (map[TopicPartition][]replica.NodeID, []TopicPartition, error) {
	if r.Version != 1 {
		return nil, nil, fmt.Errorf("%w: reassignment version %d, want 1", replica.ErrInvalidRequest, r.Version)
	}
	if len(r.Partitions) == 0 {
		return nil, nil, fmt.Errorf("%w: a reassignment without partitions", replica.ErrInvalidRequest)
	}
	targets := map[TopicPartition][]replica.NodeID{}
	var order []TopicPartition
	for i, pr := range r.Partitions {
		tp := TopicPartition{Topic: pr.Topic, Partition: pr.Partition}
		where := fmt.Sprintf("partitions[%d] (%v)", i, tp)
		if c.s.Partitions[tp] == nil {
			return nil, nil, fmt.Errorf("%w: %s: no such partition", replica.ErrUnknownTopicOrPartition, where)
		}
		if _, ok := targets[tp]; ok {
			return nil, nil, fmt.Errorf("%w: %s named twice", replica.ErrInvalidReplicaAssignment, where)
		}
		if len(pr.Replicas) == 0 || len(pr.Replicas) > maxNodes {
			return nil, nil, fmt.Errorf("%w: %s: %d replicas", replica.ErrInvalidReplicaAssignment, where, len(pr.Replicas))
		}
		if len(pr.LogDirs) > 0 && len(pr.LogDirs) != len(pr.Replicas) {
			return nil, nil, fmt.Errorf("%w: %s: %d log dirs for %d replicas",
				replica.ErrInvalidReplicaAssignment, where, len(pr.LogDirs), len(pr.Replicas))
		}
		var target []replica.NodeID
		for _, id := range pr.Replicas {
			n := replica.NodeID(id)
			if slices.Contains(target, n) {
				return nil, nil, fmt.Errorf("%w: %s: broker %d twice in %v", replica.ErrInvalidReplicaAssignment, where, id, pr.Replicas)
			}
			if c.s.Brokers[n] == nil {
				return nil, nil, fmt.Errorf("%w: %s: broker %d is not registered", replica.ErrInvalidReplicaAssignment, where, id)
			}
			target = append(target, n)
		}
		targets[tp] = target
		order = append(order, tp)
	}
	return targets, order, nil
}

// Execute starts every reassignment of a kafka-reassign-partitions file
// (--execute), or none if any entry is wrong.
func (c *Controller) Execute(r assign.Reassignment) error {
	targets, order, err := c.targets(r)
	if err != nil {
		return err
	}
	for _, tp := range order {
		if err := c.Reassign(tp, targets[tp]); err != nil {
			return err
		}
	}
	return nil
}

// PartitionStatus is one partition's line of VerifyAll.
type PartitionStatus struct {
	TopicPartition
	Status ReassignmentStatus
}

// VerifyAll is kafka-reassign-partitions --verify: each partition of the
// file, in its order, with where it stands against its target.
func (c *Controller) VerifyAll(r assign.Reassignment) ([]PartitionStatus, error) {
	targets, order, err := c.targets(r)
	if err != nil {
		return nil, err
	}
	out := make([]PartitionStatus, 0, len(order))
	for _, tp := range order {
		st, err := c.Verify(tp, targets[tp])
		if err != nil {
			return nil, err
		}
		out = append(out, PartitionStatus{tp, st})
	}
	return out, nil
}
