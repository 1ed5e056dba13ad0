package group

import (
	"cmp"
	"slices"

	"github.com/strandlog/strand"
)

// committed is a committed offset with the log offset of its record, which
// decides between a plain and a transactional commit of one partition
// (OffsetMetadataManager.replayEndTransactionMarker).
type committed struct {
	OffsetCommitValue
	recordOffset int64
}

// offsetStore holds committed offsets: group -> topic -> partition.
type offsetStore struct {
	byGroup map[string]map[string]map[int32]committed
}

func (s *offsetStore) get(k OffsetCommitKey) (committed, bool) {
	v, ok := s.byGroup[k.Group][k.Topic][k.Partition]
	return v, ok
}

func (s *offsetStore) put(k OffsetCommitKey, v committed) {
	if s.byGroup == nil {
		s.byGroup = map[string]map[string]map[int32]committed{}
	}
	topics := s.byGroup[k.Group]
	if topics == nil {
		topics = map[string]map[int32]committed{}
		s.byGroup[k.Group] = topics
	}
	parts := topics[k.Topic]
	if parts == nil {
		parts = map[int32]committed{}
		topics[k.Topic] = parts
	}
	parts[k.Partition] = v
}

func (s *offsetStore) remove(k OffsetCommitKey) {
	topics := s.byGroup[k.Group]
	parts := topics[k.Topic]
	if _, ok := parts[k.Partition]; !ok {
		return
	}
	delete(parts, k.Partition)
	if len(parts) == 0 {
		delete(topics, k.Topic)
	}
	if len(topics) == 0 {
		delete(s.byGroup, k.Group)
	}
}

// keys returns a group's committed partitions in (topic, partition) order.
func (s *offsetStore) keys(group string) []OffsetCommitKey {
	var out []OffsetCommitKey
	for topic, parts := range s.byGroup[group] {
		for p := range parts {
			out = append(out, OffsetCommitKey{Group: group, Topic: topic, Partition: p})
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

// compareKeys orders a group's offsets by topic, then partition.
func compareKeys(a, b OffsetCommitKey) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// OffsetCommit handles an OffsetCommit request.
func (c *Coordinator) OffsetCommit(id RequestID, req OffsetCommitRequest) {
	resp := &OffsetCommitResponse{ID: id}
	defer c.respond(resp)
	g, err := c.validateCommit(committer{req.Version, req.GroupID, req.GenerationID, req.MemberID, req.GroupInstanceID}, false)
	if err != nil {
		resp.Err = err
		return
	}
	if g != nil && (g.is(Stable) || g.is(PreparingRebalance)) {
		// A classic member's commit counts as a heartbeat.
		if m := g.byID[req.MemberID]; m != nil {
			c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
		}
	}
	expire := int64(-1)
	if req.Retention > 0 {
		expire = c.now + durationMs(req.Retention)
	}
	resp.Topics = c.commit(req.GroupID, req.Topics, expire, nil)
}

// commit writes the offsets of a validated commit, plain or transactional,
// and returns the outcome per partition.
func (c *Coordinator) commit(group string, topics []OffsetCommitTopic, expire int64, producer *strand.ProducerIDAndEpoch) []TopicResult {
	var out []TopicResult
	for _, t := range topics {
		tr := TopicResult{Name: t.Name}
		n := int32(-1) // the topic's partitions, read once a commit
		for _, p := range t.Partitions {
			pr := PartitionResult{Partition: p.Partition}
			if n < 0 && c.cfg.Partitions != nil {
				n = c.cfg.Partitions(t.Name)
			}
			switch {
			case len(t.Name) > maxStringLen || t.Name == "":
				pr.Err = errorf(ErrUnknownTopicOrPartition, "group %q: topic name of %d bytes", group, len(t.Name))
			case c.cfg.Partitions != nil && (p.Partition < 0 || p.Partition >= n):
				pr.Err = errorf(ErrUnknownTopicOrPartition, "group %q: no partition %s-%d", group, t.Name, p.Partition)
			case len(p.Metadata) > c.cfg.OffsetMetadataMaxBytes:
				pr.Err = errorf(ErrOffsetMetadataTooLarge, "group %q: %s-%d: metadata of %d bytes, more than %d",
					group, t.Name, p.Partition, len(p.Metadata), c.cfg.OffsetMetadataMaxBytes)
			default:
				k := OffsetCommitKey{Group: group, Topic: t.Name, Partition: p.Partition}
				v := OffsetCommitValue{Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata,
					CommitTimestamp: c.now, ExpireTimestamp: expire}
				r := EncodeOffsetCommit(k, v)
				r.Producer = producer
				off := c.emit(r)
				c.apply(off, Decoded{OffsetKey: &k, OffsetValue: &v}, producer)
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		out = append(out, tr)
	}
	return out
}

// committer is who commits: the fields OffsetCommit and TxnOffsetCommit
// share.
type committer struct {
	version    int16
	group      string
	generation int32
	memberID   string
	instanceID string
}

// validateCommit applies Kafka's rules for who may commit
// (OffsetMetadataManager.validate{,Transactional}OffsetCommit, ClassicGroup.
// validateOffsetCommit). It returns the group, or nil for a commit that
// will create a simple group. A transactional commit is not held to the
// group's state: it may come while CompletingRebalance, or without member.
func (c *Coordinator) validateCommit(w committer, txn bool) (*classicGroup, error) {
	if err := checkGroupID(w.group); err != nil {
		return nil, err
	}
	if err := checkStrings(map[string]string{"member id": w.memberID, "group instance id": w.instanceID}); err != nil {
		return nil, err
	}
	g, err := c.group(w.group)
	if cg := c.consumerGroups[w.group]; err == nil && cg != nil {
		return nil, cg.validateCommit(w, txn)
	}
	switch {
	case err != nil:
		return nil, err
	case g == nil && w.generation < 0:
		return nil, nil // a simple group, created by the commit
	case g == nil && !txn && w.version >= OffsetCommitVersionGroupIDNotFound:
		return nil, errorf(ErrGroupIDNotFound, "group %q does not exist", w.group)
	case g == nil:
		return nil, errorf(ErrIllegalGeneration, "group %q does not exist", w.group)
	case g.is(Dead):
		return nil, errorf(ErrCoordinatorNotAvailable, "group %q is dead", g.id)
	case w.generation < 0 && g.is(Empty):
		return g, nil // an admin or a consumer without group management
	case w.generation >= 0 || w.memberID != "" || w.instanceID != "":
		if _, err := g.validateMember(w.memberID, w.instanceID); err != nil {
			return nil, err
		}
		if w.generation != g.generation {
			return nil, errorf(ErrIllegalGeneration, "group %q: generation %d, the group is at %d", g.id, w.generation, g.generation)
		}
	case !txn && !g.is(Empty):
		return nil, errorf(ErrUnknownMemberID, "group %q is %v: a commit without member id is only taken while it is Empty", g.id, g.state)
	}
	if !txn && g.is(CompletingRebalance) {
		// The member knows the new generation but not its assignment yet.
		return nil, errorf(ErrRebalanceInProgress, "group %q is waiting for its assignment", g.id)
	}
	return g, nil
}

// OffsetFetch handles an OffsetFetch request: committed offsets, with -1 for
// partitions that have none.
func (c *Coordinator) OffsetFetch(id RequestID, req OffsetFetchRequest) {
	resp := &OffsetFetchResponse{ID: id}
	if err := checkGroupID(req.GroupID); err != nil {
		resp.Err = err
		c.respond(resp)
		return
	}
	g, err := c.group(req.GroupID)
	if cg := c.consumerGroups[req.GroupID]; err == nil && cg != nil && req.MemberID != "" {
		err = cg.validateCommit(committer{OffsetCommitVersionGroupIDNotFound, req.GroupID, req.MemberEpoch, req.MemberID, ""}, false)
	}
	if err != nil {
		resp.Err = err
		c.respond(resp)
		return
	}
	dead := g != nil && g.is(Dead) // Kafka treats a Dead group as missing
	topics := req.Topics
	if topics == nil && !dead {
		for _, k := range c.offsets.keys(req.GroupID) {
			if len(topics) == 0 || topics[len(topics)-1].Name != k.Topic {
				topics = append(topics, OffsetFetchTopic{Name: k.Topic})
			}
			topics[len(topics)-1].Partitions = append(topics[len(topics)-1].Partitions, k.Partition)
		}
	}
	for _, t := range topics {
		tr := OffsetFetchTopicResult{Name: t.Name}
		for _, p := range t.Partitions {
			f := FetchedOffset{Partition: p, Offset: -1, LeaderEpoch: -1}
			k := OffsetCommitKey{Group: req.GroupID, Topic: t.Name, Partition: p}
			if req.RequireStable && c.txns.has(k) {
				f.Err = errorf(ErrUnstableOffsetCommit, "group %q: %s-%d has a transactional commit pending", req.GroupID, t.Name, p)
			} else if v, ok := c.offsets.get(k); ok && !dead {
				f.Offset, f.LeaderEpoch, f.Metadata = v.Offset, v.LeaderEpoch, v.Metadata
			}
			tr.Partitions = append(tr.Partitions, f)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	c.respond(resp)
}

// DeleteGroup deletes an Empty group and its committed offsets
// (DeleteGroups): tombstones for every offset, then for the group.
func (c *Coordinator) DeleteGroup(id RequestID, groupID string) {
	resp := &DeleteGroupResponse{ID: id}
	defer c.respond(resp)
	if resp.Err = checkGroupID(groupID); resp.Err != nil {
		return
	}
	g, err := c.group(groupID)
	cg := c.consumerGroups[groupID]
	switch {
	case err != nil:
		resp.Err = err
		return
	case cg != nil && len(cg.members) > 0:
		resp.Err = errorf(ErrNonEmptyGroup, "consumer group %q has %d members", groupID, len(cg.members))
		return
	case cg != nil:
		for _, k := range c.offsets.keys(groupID) {
			c.deleteOffset(k)
		}
		delete(c.consumerGroups, groupID)
		c.syncConsumerGroup(groupID)
		return
	case g == nil || g.is(Dead):
		resp.Err = errorf(ErrGroupIDNotFound, "group %q does not exist", groupID)
		return
	case !g.is(Empty):
		resp.Err = errorf(ErrNonEmptyGroup, "group %q is %v with %d members", groupID, g.state, len(g.members))
		return
	}
	for _, k := range c.offsets.keys(groupID) {
		c.deleteOffset(k)
	}
	// Partitions only open transactions have offsets for get a tombstone
	// too (deleteAllOffsets), which drops what they staged.
	for _, k := range c.txns.keys(groupID) {
		c.deleteOffset(k)
	}
	c.removeGroup(g)
}

// OffsetDelete deletes committed offsets (OffsetMetadataManager.
// deleteOffsets): of any topic while the group is Empty, and, in a group of
// consumers, of topics no member subscribes to.
func (c *Coordinator) OffsetDelete(id RequestID, req OffsetDeleteRequest) {
	resp := &OffsetDeleteResponse{ID: id}
	defer c.respond(resp)
	if resp.Err = checkGroupID(req.GroupID); resp.Err != nil {
		return
	}
	g, err := c.group(req.GroupID)
	switch {
	case err != nil:
		resp.Err = err
		return
	case g == nil || g.is(Dead):
		resp.Err = errorf(ErrGroupIDNotFound, "group %q does not exist", req.GroupID)
		return
	case !g.is(Empty) && g.protocolType != consumerProtocolType:
		resp.Err = errorf(ErrNonEmptyGroup, "group %q is %v with protocol type %q", g.id, g.state, g.protocolType)
		return
	}
	for _, t := range req.Topics {
		tr := TopicResult{Name: t.Name}
		for _, p := range t.Partitions {
			pr := PartitionResult{Partition: p}
			k := OffsetCommitKey{Group: g.id, Topic: t.Name, Partition: p}
			if g.subscribes(t.Name) {
				pr.Err = errorf(ErrGroupSubscribedToTopic, "group %q consumes topic %q", g.id, t.Name)
			} else if _, ok := c.offsets.get(k); ok || c.txns.has(k) {
				c.deleteOffset(k)
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
}
