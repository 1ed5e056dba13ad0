package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
)

// consumerGroupDescribe describes KIP-848 consumer groups (Kafka's
// ConsumerGroupDescribe, kafka-consumer-groups --describe): epochs, state,
// assignor, and each member's subscription, assignment and target
// assignment, topics named by id and name. A group id that names no
// consumer group (none, or a classic one) is GROUP_ID_NOT_FOUND, as Kafka
// answers. Members that heartbeat with ConsumerGroupHeartbeat have no client
// id and host: the group coordinator's request does not carry them.
func (b *Broker) consumerGroupDescribe(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = id
		if err := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, id); err != nil {
			rg.ErrorCode, rg.ErrorMessage = code(err), message(err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		d, ok, err := b.groups.DescribeConsumerGroup(ctx, id)
		if err == nil && !ok {
			err = fmt.Errorf("%w: group %s is not a consumer group", kafkaerr.ErrGroupIDNotFound, id)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = code(err), message(err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = d.State, d.Epoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.SubscribedTopics = m.MemberID, m.MemberEpoch, m.SubscribedTopicNames
			rm.InstanceID, rm.RackID, rm.SubscribedTopicRegex = optional(m.InstanceID), optional(m.RackID), optional(m.SubscribedTopicRegex)
			rm.ClientID, rm.ClientHost = m.ClientID, m.ClientHost
			rm.MemberType = 1 // a member of the consumer protocol
			if m.Classic {
				rm.MemberType = 0
			}
			rm.Assignment, rm.TargetAssignment = b.describedAssignment(m.Assignment), b.describedAssignment(m.TargetAssignment)
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (b *Broker) describedAssignment(ps map[string][]int32) kmsg.Assignment {
	a := kmsg.NewAssignment()
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		a.TopicPartitions = append(a.TopicPartitions, kmsg.AssignmentTopicPartition{Topic: name, TopicID: b.topicID(name), Partitions: ps[name]})
	}
	return a
}

// optional is s, or null for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
