package group

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
)

// This file keeps the offsets log in step with the consumer groups of
// KIP-848. Kafka's coordinator builds each change as records and applies
// them (GroupMetadataManager.consumerGroupHeartbeat returns the records it
// replays). Here the rules of consumer.go change the live group, and after
// each request or timer the group is compared with what the log holds of
// it, its image: a record for every value that differs, a tombstone for
// every key the group no longer has. Replaying those records rebuilds the
// group with applyConsumerRecord, so live and replayed state agree by
// construction of one canonical form, consumerGroupRecords, which tests
// compare.

// consumerImage is what the offsets log holds of one consumer group.
type consumerImage struct {
	values map[string][]byte // record key -> value of every key not tombstoned
	// members are the member ids in the order a replay adds them to the
	// group: the order their records first appeared.
	members []string
}

func (c *Coordinator) consumerImage(group string) *consumerImage {
	if c.consumerImages == nil {
		c.consumerImages = map[string]*consumerImage{}
	}
	img := c.consumerImages[group]
	if img == nil {
		img = &consumerImage{values: map[string][]byte{}}
		c.consumerImages[group] = img
	}
	return img
}

// LearnTopics tells the coordinator names of topics, so that it can read
// the topic ids of consumer group records (TopicID) back to names. It
// learns by itself every name its records hold (committed offsets,
// subscriptions, subscribed topics' metadata); compaction may leave a
// member's assignment of a topic whose other records are gone, and an
// owner that knows its topics (Service: the Dir's) tells them before
// replaying.
func (c *Coordinator) LearnTopics(names ...string) {
	if c.topicNames == nil {
		c.topicNames = map[[16]byte]string{}
	}
	for _, n := range names {
		c.topicNames[TopicID(n)] = n
	}
}

// note records in the image that a record was written or replayed.
func (img *consumerImage) note(k ConsumerGroupKey, r Record) {
	key := string(r.Key)
	if r.Value == nil {
		delete(img.values, key)
		if k.Type == ConsumerGroupMemberMetadataType {
			img.members = slices.DeleteFunc(img.members, func(id string) bool { return id == k.Member })
		}
		return
	}
	img.values[key] = r.Value
	if k.hasMember() && k.Type != ConsumerGroupTargetAssignmentType && !slices.Contains(img.members, k.Member) {
		img.members = append(img.members, k.Member)
	}
}

// consumerRecord is one record of a group's canonical form.
type consumerRecord struct {
	key ConsumerGroupKey
	rec Record
}

// consumerGroupRecords returns the records that describe g, in the order
// Kafka writes them when a group changes: members' subscriptions, the
// subscribed topics' metadata, the group epoch, the target assignment of
// each member and its epoch, and each member's current assignment.
func consumerGroupRecords(g *consumerGroup) []consumerRecord {
	var out []consumerRecord
	add := func(typ int16, member string, v any) {
		k := ConsumerGroupKey{Type: typ, Group: g.id, Member: member}
		out = append(out, consumerRecord{k, EncodeConsumerGroup(k, v)})
	}
	for _, m := range g.members {
		add(ConsumerGroupMemberMetadataType, m.id, ConsumerGroupMemberMetadataValue{InstanceID: m.instanceID, RackID: m.rackID,
			ClientID: m.clientID, ClientHost: m.clientHost, SubscribedTopics: m.topics, SubscribedRegex: m.regex.String(),
			RebalanceTimeoutMs: m.rebalanceTimeoutMs, ServerAssignor: m.assignor, Classic: m.classic})
	}
	pm := ConsumerGroupPartitionMetadataValue{Epoch: g.epoch}
	for _, t := range slices.Sorted(maps.Keys(g.topics)) {
		pm.Topics = append(pm.Topics, ConsumerTopicMetadata{ID: TopicID(t), Name: t, Partitions: g.topics[t]})
	}
	add(ConsumerGroupPartitionMetadataType, "", pm)
	add(ConsumerGroupMetadataType, "", ConsumerGroupMetadataValue{Epoch: g.epoch})
	for _, m := range g.members {
		if t, ok := g.target[m.id]; ok {
			add(ConsumerGroupTargetAssignmentType, m.id, ConsumerGroupTargetAssignmentMemberValue{Partitions: topicIDPartitions(t)})
		}
	}
	add(ConsumerGroupTargetAssignmentMetaType, "", ConsumerGroupTargetAssignmentMetadataValue{AssignmentEpoch: g.targetEpoch})
	for _, m := range g.members {
		add(ConsumerGroupCurrentAssignmentType, m.id, ConsumerGroupCurrentMemberAssignmentValue{
			MemberEpoch: m.epoch, PreviousMemberEpoch: m.prevEpoch, State: int8(m.state),
			Assigned: topicIDPartitions(m.assigned), PendingRevocation: topicIDPartitions(m.pendingRevocation)})
	}
	return out
}

// syncConsumerGroups writes what changed in a consumer group, or in all of
// them when group is "".
func (c *Coordinator) syncConsumerGroups(group string) {
	if group != "" {
		c.syncConsumerGroup(group)
		return
	}
	ids := slices.Collect(maps.Keys(c.consumerGroups))
	for id := range c.consumerImages {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		c.syncConsumerGroup(id)
	}
}

// syncConsumerGroup writes the records that make the log's image of a
// consumer group the live group: tombstones first, for the keys the group
// no longer has, then the values that changed. A member whose place in the
// group's order a replay would not give it (it left and came back under
// the same id) is written anew: tombstones, then all of its records.
func (c *Coordinator) syncConsumerGroup(group string) {
	g := c.consumerGroups[group]
	img := c.consumerImages[group]
	if img == nil && g == nil {
		return
	}
	img = c.consumerImage(group)
	var want []consumerRecord
	renew := map[string]bool{}
	if g != nil {
		want = consumerGroupRecords(g)
		var kept []string
		for _, id := range img.members {
			if g.byID[id] != nil {
				kept = append(kept, id)
			}
		}
		moved := false
		for i, m := range g.members {
			moved = moved || i >= len(kept) || kept[i] != m.id
			if moved && slices.Contains(img.members, m.id) {
				renew[m.id] = true
			}
		}
	}
	wanted := map[string][]byte{}
	for _, r := range want {
		wanted[string(r.rec.Key)] = r.rec.Value
	}
	var gone []consumerRecord
	for key := range img.values {
		d, _ := Decode(Record{Key: []byte(key)})
		k := *d.ConsumerKey
		if _, ok := wanted[key]; !ok || renew[k.Member] && k.hasMember() {
			gone = append(gone, consumerRecord{k, Record{Key: []byte(key)}})
		}
	}
	// Members' records before the group's, the current assignment first,
	// as Kafka removes a member (and the group epoch's record last).
	slices.SortFunc(gone, func(a, b consumerRecord) int {
		return cmp.Or(cmp.Compare(b.key.Type, a.key.Type), cmp.Compare(a.key.Member, b.key.Member))
	})
	for _, r := range append(gone, want...) {
		if old, ok := img.values[string(r.rec.Key)]; ok && r.rec.Value != nil && bytes.Equal(old, r.rec.Value) {
			continue
		}
		c.emit(r.rec)
		img.note(r.key, r.rec)
	}
	if g == nil && len(img.values) == 0 {
		delete(c.consumerImages, group)
	}
}

// applyConsumerRecord changes the consumer groups by a record of types 3-8
// read back from the log (GroupMetadataManager.replay of the
// ConsumerGroup* records). A record of a group that does not exist creates
// it, replacing a classic group of that id whose tombstone compaction may
// have removed; a member's subscription or current assignment creates the
// member.
func (c *Coordinator) applyConsumerRecord(k ConsumerGroupKey, r Record, v any) {
	img := c.consumerImage(k.Group)
	img.note(k, r)
	g := c.consumerGroups[k.Group]
	if v == nil {
		if g != nil {
			c.removeConsumerRecord(g, k)
		}
		if len(img.values) == 0 {
			delete(c.consumerImages, k.Group)
		}
		return
	}
	if g == nil {
		delete(c.groups, k.Group)
		g = newConsumerGroup(k.Group)
		c.consumerGroups[k.Group] = g
	}
	member := func() *consumerMember {
		m := g.byID[k.Member]
		if m == nil {
			m = &consumerMember{id: k.Member}
			c.addConsumer(g, m)
		}
		return m
	}
	switch v := v.(type) {
	case ConsumerGroupMetadataValue:
		g.epoch = v.Epoch
	case ConsumerGroupPartitionMetadataValue:
		g.topics = map[string]int32{}
		for _, t := range v.Topics {
			g.topics[t.Name] = t.Partitions
			c.LearnTopics(t.Name)
		}
	case ConsumerGroupMemberMetadataValue:
		m := member()
		m.instanceID, m.rackID, m.rebalanceTimeoutMs, m.assignor = v.InstanceID, v.RackID, v.RebalanceTimeoutMs, v.ServerAssignor
		m.clientID, m.clientHost, m.classic = v.ClientID, v.ClientHost, v.Classic
		m.topics = slices.Clone(v.SubscribedTopics)
		m.regex.set(v.SubscribedRegex)
		c.LearnTopics(v.SubscribedTopics...)
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
	case ConsumerGroupTargetAssignmentMetadataValue:
		g.targetEpoch = v.AssignmentEpoch
	case ConsumerGroupTargetAssignmentMemberValue:
		g.target[k.Member] = c.topicPartitions(v.Partitions)
	case ConsumerGroupCurrentMemberAssignmentValue:
		m := member()
		next := memberAssignment{state: memberState(v.State), epoch: v.MemberEpoch, prevEpoch: v.PreviousMemberEpoch,
			assigned: c.topicPartitions(v.Assigned), pendingRevocation: c.topicPartitions(v.PendingRevocation)}
		g.setOwnership(&m.memberAssignment, &next)
		m.memberAssignment = next
	}
}

// removeConsumerRecord applies a tombstone of a consumer group record.
func (c *Coordinator) removeConsumerRecord(g *consumerGroup, k ConsumerGroupKey) {
	m := g.byID[k.Member]
	switch k.Type {
	case ConsumerGroupMetadataType:
		delete(c.consumerGroups, g.id)
	case ConsumerGroupPartitionMetadataType:
		g.topics = map[string]int32{}
	case ConsumerGroupTargetAssignmentType:
		delete(g.target, k.Member)
	case ConsumerGroupCurrentAssignmentType:
		if m != nil {
			g.setOwnership(&m.memberAssignment, nil)
			m.memberAssignment = memberAssignment{}
		}
	case ConsumerGroupMemberMetadataType:
		if m != nil {
			g.setOwnership(&m.memberAssignment, nil)
			g.members = slices.DeleteFunc(g.members, func(x *consumerMember) bool { return x == m })
			delete(g.byID, m.id)
			if m.instanceID != "" && g.static[m.instanceID] == m.id {
				delete(g.static, m.instanceID)
			}
		}
	}
}

// topicPartitions resolves the topic ids of a record. An id no name known
// resolves is a topic Kafka would find deleted: its partitions are
// dropped, as Kafka drops those of deleted topics.
func (c *Coordinator) topicPartitions(ts []TopicIDPartitions) partitions {
	out := partitions{}
	for _, t := range ts {
		if name, ok := c.topicNames[t.TopicID]; ok && len(t.Partitions) > 0 {
			out[name] = slices.Clone(t.Partitions)
		}
	}
	return out
}

// loadedConsumerGroups ends the replay of consumer groups. The assignments
// are read again, now that every topic name of the group's records is
// known: compaction may have left a member's assignment before the
// subscription that names its topics. Every member then gets a session
// starting now, and one that must revoke partitions its rebalance timeout
// to do so, as Kafka gives them when it loads a consumer group.
func (c *Coordinator) loadedConsumerGroups() {
	for _, id := range slices.Sorted(maps.Keys(c.consumerGroups)) {
		g := c.consumerGroups[id]
		img := c.consumerImage(id)
		for _, key := range slices.Sorted(maps.Keys(img.values)) {
			d, err := Decode(Record{Key: []byte(key), Value: img.values[key]})
			if err == nil && (d.ConsumerKey.Type == ConsumerGroupTargetAssignmentType || d.ConsumerKey.Type == ConsumerGroupCurrentAssignmentType) {
				c.applyConsumerRecord(*d.ConsumerKey, Record{Key: []byte(key), Value: img.values[key]}, d.ConsumerValue)
			}
		}
		for _, m := range g.members {
			c.scheduleConsumerSession(g, m)
			if m.state == memberUnrevokedPartitions {
				c.scheduleRevocation(g, m)
			}
		}
	}
}
