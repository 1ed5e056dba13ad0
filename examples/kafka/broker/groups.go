package broker

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
)

// The group APIs are served by the group.Service: this file only translates
// between kmsg's structs and the coordinator's.

func (b *Broker) findCoordinator(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	if req.Version < 4 {
		coordinator, err := b.coordinator(r, req.CoordinatorType, req.CoordinatorKey)
		resp.ErrorCode, resp.ErrorMessage = code(err), message(err)
		if err == nil {
			resp.NodeID, resp.Host, resp.Port = coordinator.ID, coordinator.Host, coordinator.Port
		}
		return resp
	}
	for _, key := range req.CoordinatorKeys {
		coordinator, err := b.coordinator(r, req.CoordinatorType, key)
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.ErrorCode, c.ErrorMessage = key, code(err), message(err)
		c.NodeID, c.Host, c.Port = -1, "", -1
		if err == nil {
			c.NodeID, c.Host, c.Port = coordinator.ID, coordinator.Host, coordinator.Port
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func ms(n int32) time.Duration { return time.Duration(n) * time.Millisecond }

func (b *Broker) joinGroup(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	jr := group.JoinGroupRequest{
		Version: req.Version, GroupID: req.Group, MemberID: req.MemberID, GroupInstanceID: str(req.InstanceID),
		ClientID: r.clientID, ClientHost: "/" + r.clientHost,
		SessionTimeout: ms(req.SessionTimeoutMillis), RebalanceTimeout: ms(req.RebalanceTimeoutMillis),
		ProtocolType: req.ProtocolType,
	}
	if req.Version == 0 {
		jr.RebalanceTimeout = 0 // v0 has none: the session timeout
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	if err := b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group); err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	g, err := b.groups.JoinGroup(ctx, jr)
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	resp.ErrorCode = code(g.Err)
	resp.Generation, resp.LeaderID, resp.MemberID, resp.SkipAssignment = g.GenerationID, g.Leader, g.MemberID, g.SkipAssignment
	resp.ProtocolType, resp.Protocol = ptr(g.ProtocolType), ptr(g.ProtocolName)
	for _, m := range g.Members {
		resp.Members = append(resp.Members, kmsg.JoinGroupResponseMember{MemberID: m.MemberID, InstanceID: ptr(m.GroupInstanceID), ProtocolMetadata: m.Metadata})
	}
	return resp
}

func (b *Broker) syncGroup(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	sr := group.SyncGroupRequest{
		GroupID: req.Group, GenerationID: req.Generation, MemberID: req.MemberID, GroupInstanceID: str(req.InstanceID),
		ProtocolType: str(req.ProtocolType), ProtocolName: str(req.Protocol),
	}
	for _, a := range req.GroupAssignment {
		sr.Assignments = append(sr.Assignments, group.SyncGroupAssignment{MemberID: a.MemberID, Assignment: a.MemberAssignment})
	}
	if err := b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group); err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	g, err := b.groups.SyncGroup(ctx, sr)
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	resp.ErrorCode, resp.MemberAssignment = code(g.Err), g.Assignment
	resp.ProtocolType, resp.Protocol = ptr(g.ProtocolType), ptr(g.ProtocolName)
	return resp
}

func (b *Broker) heartbeat(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	err := b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group)
	if err == nil {
		var g *group.HeartbeatResponse
		if g, err = b.groups.Heartbeat(ctx, group.HeartbeatRequest{GroupID: req.Group, GenerationID: req.Generation, MemberID: req.MemberID, GroupInstanceID: str(req.InstanceID)}); err == nil {
			err = g.Err
		}
	}
	resp.ErrorCode = code(err)
	return resp
}

func (b *Broker) leaveGroup(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	lr := group.LeaveGroupRequest{GroupID: req.Group}
	if req.Version < 3 {
		lr.Members = []group.LeaveGroupMember{{MemberID: req.MemberID}}
	}
	for _, m := range req.Members {
		lr.Members = append(lr.Members, group.LeaveGroupMember{MemberID: m.MemberID, GroupInstanceID: str(m.InstanceID)})
	}
	if err := b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group); err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	g, err := b.groups.LeaveGroup(ctx, lr)
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	resp.ErrorCode = code(g.Err)
	if req.Version < 3 && g.Err == nil && len(g.Members) == 1 {
		// Before v3 the one member's outcome is the response's.
		resp.ErrorCode = code(g.Members[0].Err)
	}
	for _, m := range g.Members {
		resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: m.MemberID, InstanceID: ptr(m.GroupInstanceID), ErrorCode: code(m.Err)})
	}
	return resp
}

func (b *Broker) offsetCommit(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	cr := group.OffsetCommitRequest{
		Version: req.Version, GroupID: req.Group, GenerationID: req.Generation, MemberID: req.MemberID,
		GroupInstanceID: str(req.InstanceID),
	}
	if req.Version == 0 {
		cr.GenerationID = -1 // v0 commits outside group management
	}
	if req.RetentionTimeMillis > 0 {
		cr.Retention = time.Duration(req.RetentionTimeMillis) * time.Millisecond
	}
	names, err := b.namesOf(req.Version >= 10, len(req.Topics), func(i int) ([16]byte, string) { return req.Topics[i].TopicID, req.Topics[i].Topic })
	err = cmp.Or(b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group), err)
	denied := b.denyTopics(r, kmsg.ACLOperationRead, names)
	var g *group.OffsetCommitResponse
	if err == nil {
		cr.Topics = commitTopics(names, req.Topics, func(t kmsg.OffsetCommitRequestTopic) []group.OffsetCommitPartition {
			ps := make([]group.OffsetCommitPartition, len(t.Partitions))
			for i, p := range t.Partitions {
				ps[i] = group.OffsetCommitPartition{Partition: p.Partition, Offset: p.Offset, LeaderEpoch: since(req.Version, 6, p.LeaderEpoch), Metadata: str(p.Metadata)}
			}
			return ps
		})
		if g, err = b.groups.OffsetCommit(ctx, cr); err == nil {
			err = g.Err
		}
	}
	results := topicResults(names, denied, err, func() []group.TopicResult { return g.Topics })
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for j, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: code(results(i, j))})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// commitTopics returns the topics of a commit request named by names,
// leaving out those of an unknown topic id, with their partitions.
func commitTopics[T any](names []string, topics []T, partitions func(T) []group.OffsetCommitPartition) []group.OffsetCommitTopic {
	var out []group.OffsetCommitTopic
	for i, t := range topics {
		if names[i] != "" {
			out = append(out, group.OffsetCommitTopic{Name: names[i], Partitions: partitions(t)})
		}
	}
	return out
}

// since returns a partition's leader epoch from the version of the request
// that added it, -1 before.
func since(version, added int16, epoch int32) int32 {
	if version < added {
		return -1
	}
	return epoch
}

// describable are the topics of an OffsetFetch answer the request may
// describe; one it may not is answered TOPIC_AUTHORIZATION_FAILED if the
// request named it, and left out if it asked for all.
func (b *Broker) describable(r *request, topics []group.OffsetFetchTopicResult, named bool) []group.OffsetFetchTopicResult {
	var out []group.OffsetFetchTopicResult
	for _, t := range topics {
		err := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Name)
		switch {
		case err == nil:
		case !named:
			continue
		default:
			ps := make([]group.FetchedOffset, len(t.Partitions))
			for i, p := range t.Partitions {
				ps[i] = group.FetchedOffset{Partition: p.Partition, Offset: -1, LeaderEpoch: -1, Err: err}
			}
			t.Partitions = ps
		}
		out = append(out, t)
	}
	return out
}

// denyTopics blanks the names of the topics the request may not op, as
// commitTopics leaves out, and returns why, by topic.
func (b *Broker) denyTopics(r *request, op kmsg.ACLOperation, names []string) []error {
	denied := make([]error, len(names))
	for i, name := range names {
		if name == "" {
			continue
		}
		if denied[i] = b.deny(r, op, kmsg.ACLResourceTypeTopic, name); denied[i] != nil {
			names[i] = ""
		}
	}
	return denied
}

// topicResults returns the error of each partition of a commit's request
// topics: err if the commit failed as a whole, the topic's denial
// (denyTopics), UNKNOWN_TOPIC_ID for a topic of an id no topic has (left
// out of the commit), else the commit's own result for the partition.
func topicResults(names []string, denied []error, err error, results func() []group.TopicResult) func(topic, partition int) error {
	var byTopic []group.TopicResult
	if err == nil {
		byTopic = results()
	}
	index := make([]int, len(names))
	k := 0
	for i, n := range names {
		index[i] = k
		if n != "" {
			k++
		}
	}
	return func(topic, partition int) error {
		switch {
		case err != nil:
			return err
		case denied[topic] != nil:
			return denied[topic]
		case names[topic] == "":
			return kafkaerr.ErrUnknownTopicID
		}
		return byTopic[index[topic]].Partitions[partition].Err
	}
}

// txnOffsetCommit stages a group's offsets in a producer's transaction
// (TxnOffsetCommit, KIP-98 and KIP-447). The group's partition of the
// offsets topic must be in the transaction, so that the transaction's
// marker resolves them: a v5 request adds it itself (KIP-890 part 2, in
// place of AddOffsetsToTxn); an older one must find it added by
// AddOffsetsToTxn, or every partition is refused and nothing is staged
// (KIP-890 part 1's verification).
func (b *Broker) txnOffsetCommit(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	producer := idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.ProducerEpoch}
	err := cmp.Or(b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID),
		b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group))
	if err == nil {
		err = b.offsetsPartitionToTxn(ctx, req.TransactionalID, producer, req.Group, req.Version < 5)
	}
	var g *group.TxnOffsetCommitResponse
	var names []string
	var denied []error
	if err == nil {
		names, err = b.namesOf(req.Version >= 6, len(req.Topics), func(i int) ([16]byte, string) { return req.Topics[i].TopicID, req.Topics[i].Topic })
		denied = b.denyTopics(r, kmsg.ACLOperationRead, names)
	}
	if err == nil {
		cr := group.TxnOffsetCommitRequest{GroupID: req.Group, Producer: idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.ProducerEpoch},
			GenerationID: -1} // before v3 a commit is not fenced by generation
		if req.Version >= 3 {
			cr.GenerationID, cr.MemberID, cr.GroupInstanceID = req.Generation, req.MemberID, str(req.InstanceID)
		}
		cr.Topics = commitTopics(names, req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) []group.OffsetCommitPartition {
			ps := make([]group.OffsetCommitPartition, len(t.Partitions))
			for i, p := range t.Partitions {
				ps[i] = group.OffsetCommitPartition{Partition: p.Partition, Offset: p.Offset, LeaderEpoch: since(req.Version, 2, p.LeaderEpoch), Metadata: str(p.Metadata)}
			}
			return ps
		})
		if g, err = b.groups.TxnCommitOffsets(ctx, cr); err == nil {
			err = g.Err
		}
	}
	if err != nil {
		b.logger.Info("broker: TxnOffsetCommit refused", "txn", req.TransactionalID, "group", req.Group, "client", r.clientID, "err", err)
	}
	results := topicResults(names, denied, err, func() []group.TopicResult { return g.Topics })
	for i, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for j, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.Partition, ErrorCode: code(results(i, j))})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (b *Broker) offsetFetch(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version < 8 {
		var topics []group.OffsetFetchTopic
		if req.Topics != nil {
			topics = []group.OffsetFetchTopic{}
			for _, t := range req.Topics {
				topics = append(topics, group.OffsetFetchTopic{Name: t.Topic, Partitions: t.Partitions})
			}
		}
		err := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, req.Group)
		var g *group.OffsetFetchResponse
		if err == nil {
			g, err = b.groups.OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: req.Group, Topics: topics, RequireStable: req.RequireStable})
		}
		if err == nil {
			err = g.Err
		}
		resp.ErrorCode = code(err)
		if err != nil {
			return resp
		}
		for _, t := range b.describable(r, g.Topics, req.Topics != nil) {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Name
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, &p.Metadata, code(p.Err)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, rg := range req.Groups {
		og := kmsg.NewOffsetFetchResponseGroup()
		og.Group = rg.Group
		var topics []group.OffsetFetchTopic
		names, err := b.namesOf(req.Version >= 10, len(rg.Topics), func(i int) ([16]byte, string) { return rg.Topics[i].TopicID, rg.Topics[i].Topic })
		if err == nil && rg.Topics != nil {
			topics = []group.OffsetFetchTopic{}
			for i, t := range rg.Topics {
				if names[i] != "" {
					topics = append(topics, group.OffsetFetchTopic{Name: names[i], Partitions: t.Partitions})
					continue
				}
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.TopicID = t.TopicID
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, int16(kafkaerr.ErrUnknownTopicID)
					rt.Partitions = append(rt.Partitions, rp)
				}
				og.Topics = append(og.Topics, rt)
			}
		}
		var g *group.OffsetFetchResponse
		if err == nil {
			err = b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, rg.Group)
		}
		if err == nil {
			g, err = b.groups.OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: rg.Group, Topics: topics, RequireStable: req.RequireStable,
				MemberID: str(rg.MemberID), MemberEpoch: rg.MemberEpoch})
		}
		if err == nil {
			err = g.Err
		}
		og.ErrorCode = code(err)
		if err == nil {
			for _, t := range b.describable(r, g.Topics, rg.Topics != nil) {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic, rt.TopicID = t.Name, b.topicID(t.Name)
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, &p.Metadata, code(p.Err)
					rt.Partitions = append(rt.Partitions, rp)
				}
				og.Topics = append(og.Topics, rt)
			}
		}
		resp.Groups = append(resp.Groups, og)
	}
	return resp
}

// stateNames are Kafka's names of the classic group states.
var stateNames = map[group.State]string{
	group.Empty: "Empty", group.PreparingRebalance: "PreparingRebalance",
	group.CompletingRebalance: "CompletingRebalance", group.Stable: "Stable", group.Dead: "Dead",
}

func (b *Broker) describeGroups(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		var d group.GroupDescription
		ok, err := false, b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, id)
		if err == nil {
			d, ok, err = b.groups.DescribeGroup(ctx, id)
		}
		switch {
		case err != nil:
			rg.ErrorCode = code(err)
		case !ok:
			// Kafka describes a group it does not know as Dead, with
			// no error before v6 and GROUP_ID_NOT_FOUND from v6.
			rg.State = "Dead"
			if req.Version >= 6 {
				rg.ErrorCode = int16(kafkaerr.ErrGroupIDNotFound)
			}
		default:
			rg.State, rg.ProtocolType, rg.Protocol = stateNames[d.State], d.ProtocolType, d.Protocol
			for _, m := range d.Members {
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.MemberID, ptr(m.GroupInstanceID), m.ClientID, m.ClientHost
				rm.ProtocolMetadata, rm.MemberAssignment = m.Metadata, m.Assignment
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (b *Broker) listGroups(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	groups, err := b.groups.ListGroups(ctx)
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	all := b.allowed(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName)
	for _, g := range groups {
		if !filterAllows(req.StatesFilter, g.State) || !filterAllows(req.TypesFilter, g.Type) ||
			!all && !b.allowed(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, g.GroupID) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = g.GroupID, g.ProtocolType, g.State, g.Type
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// filterAllows says whether a ListGroups filter (of states or of types)
// lets value through: an empty filter lets everything through, and Kafka
// compares names without regard to case.
func filterAllows(filter []string, value string) bool {
	return len(filter) == 0 || slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, value) })
}

// consumerGroupHeartbeat serves KIP-848 consumer groups, whose assignments
// name topics by id (see topicID).
func (b *Broker) consumerGroupHeartbeat(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(err error) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = code(err), message(err)
		return resp
	}
	if err := b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group); err != nil {
		return fail(err)
	}
	for _, name := range req.SubscribedTopicNames {
		if err := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, name); err != nil {
			return fail(err)
		}
	}
	byID, err := b.topicNames()
	if err != nil {
		return fail(err)
	}
	hr := group.ConsumerGroupHeartbeatRequest{
		GroupID: req.Group, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
		InstanceID: str(req.InstanceID), RackID: str(req.RackID),
		RebalanceTimeout: ms(req.RebalanceTimeoutMillis), SubscribedTopicNames: req.SubscribedTopicNames, SubscribedTopicRegex: req.SubscribedTopicRegex,
		ServerAssignor: str(req.ServerAssignor),
	}
	if req.Topics != nil {
		hr.Owned = &group.Assignment{Partitions: map[string][]int32{}}
		for _, t := range req.Topics {
			name, ok := byID[t.TopicID]
			if !ok {
				continue // a topic deleted since: no longer owned
			}
			hr.Owned.Partitions[name] = t.Partitions
		}
	}
	g, err := b.groups.ConsumerGroupHeartbeat(ctx, hr)
	if err == nil {
		err = g.Err
	}
	if err != nil {
		return fail(err)
	}
	resp.MemberID, resp.MemberEpoch = &g.MemberID, g.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(g.HeartbeatInterval.Milliseconds())
	if g.Assignment != nil {
		resp.Assignment = &kmsg.ConsumerGroupHeartbeatResponseAssignment{}
		for _, name := range slices.Sorted(maps.Keys(g.Assignment.Partitions)) {
			t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			t.TopicID, t.Partitions = b.topicID(name), g.Assignment.Partitions[name]
			resp.Assignment.Topics = append(resp.Assignment.Topics, t)
		}
	}
	return resp
}
