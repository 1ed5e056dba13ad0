package group

import (
	"context"
	"slices"

	"github.com/strandlog/strand/assign"
)

// ConsumerGroupDescription is a KIP-848 consumer group as Kafka's
// ConsumerGroupDescribe shows it.
type ConsumerGroupDescription struct {
	// State is Kafka's ConsumerGroupState: "Empty" without members,
	// "Assigning" while the target assignment is older than the group
	// epoch, "Reconciling" while a member has not reached it, else
	// "Stable".
	State           string
	Epoch           int32  // the group epoch
	AssignmentEpoch int32  // the epoch of the target assignment
	Assignor        string // the server-side assignor the group uses
	Members         []ConsumerMemberDescription
}

// ConsumerMemberDescription is one member of a ConsumerGroupDescription.
// Assignment is what the member has (not the partitions it is still to
// revoke), TargetAssignment what it is to have. Classic marks a member
// that speaks the classic protocol (JoinGroup), whose client id and host
// its JoinGroup gave.
type ConsumerMemberDescription struct {
	MemberID, InstanceID, RackID string
	ClientID, ClientHost         string
	Classic                      bool
	MemberEpoch                  int32
	SubscribedTopicNames         []string
	SubscribedTopicRegex         string
	Assignment, TargetAssignment map[string][]int32
}

// DescribeConsumerGroup returns a KIP-848 group's state and members, in
// join order; ok is false when no consumer group has that id.
func (c *Coordinator) DescribeConsumerGroup(groupID string) (d ConsumerGroupDescription, ok bool) {
	g := c.consumerGroups[groupID]
	if g == nil {
		return d, false
	}
	d = ConsumerGroupDescription{State: g.stateName(), Epoch: g.epoch, AssignmentEpoch: g.targetEpoch, Assignor: g.preferredAssignor().Name()}
	for _, m := range g.members {
		d.Members = append(d.Members, ConsumerMemberDescription{MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID,
			ClientID: m.clientID, ClientHost: m.clientHost, Classic: m.classic != nil,
			MemberEpoch: m.epoch, SubscribedTopicNames: slices.Clone(m.topics), SubscribedTopicRegex: m.regex.String(),
			Assignment: clonePartitions(m.assigned), TargetAssignment: clonePartitions(g.target[m.id])})
	}
	return d, true
}

// stateName is Kafka's ConsumerGroupState of g (ConsumerGroup.maybeUpdateGroupState).
func (g *consumerGroup) stateName() string {
	switch {
	case len(g.members) == 0:
		return "Empty"
	case g.epoch > g.targetEpoch:
		return "Assigning"
	}
	for _, m := range g.members {
		if m.state != memberStable || m.epoch != g.targetEpoch {
			return "Reconciling"
		}
	}
	return "Stable"
}

// preferredAssignor is the assignor most members ask for, ties to the
// earlier in consumerAssignors (ConsumerGroup.preferredServerAssignor).
func (g *consumerGroup) preferredAssignor() assign.Assignor {
	votes := map[string]int{}
	for _, m := range g.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	a := consumerAssignors[0]
	for _, x := range consumerAssignors {
		if votes[x.Name()] > votes[a.Name()] {
			a = x
		}
	}
	return a
}

// DescribeConsumerGroup returns a KIP-848 group's state and members (Kafka's
// ConsumerGroupDescribe); ok is false when no consumer group has that id.
// See Coordinator.DescribeConsumerGroup.
func (s *Service) DescribeConsumerGroup(ctx context.Context, groupID string) (d ConsumerGroupDescription, ok bool, err error) {
	r, err := do[*consumerDescribeResponse](ctx, s, groupID, func(c *Coordinator, id RequestID) {
		d, ok := c.DescribeConsumerGroup(groupID)
		c.respond(&consumerDescribeResponse{id: id, d: d, ok: ok})
	})
	if err != nil {
		return d, false, err
	}
	return r.d, r.ok, nil
}

// consumerDescribeResponse carries DescribeConsumerGroup's answer to its
// caller.
type consumerDescribeResponse struct {
	id RequestID
	d  ConsumerGroupDescription
	ok bool
}

func (r *consumerDescribeResponse) Request() RequestID { return r.id }
