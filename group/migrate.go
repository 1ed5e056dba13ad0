package group

import (
	"slices"
)

// This file is the online migration between the two protocols (KIP-848's
// upgrade and downgrade, Kafka 3.8+): a classic group whose members are
// live becomes a consumer group when a member joins it with
// ConsumerGroupHeartbeat, its members staying as members of the consumer
// group that speak the classic protocol; and a consumer group whose last
// member speaking the consumer protocol leaves becomes a classic group
// again. The rules follow Kafka's GroupMetadataManager (validateOnline
// Upgrade, convertToConsumerGroup, classicGroup{Join,Sync,Heartbeat,Leave}
// ToConsumerGroup, validateOnlineDowngradeWithFencedMember,
// convertToClassicGroup) and ConsumerGroup.fromClassicGroup,
// ClassicGroup.fromConsumerGroup. Each conversion is records, as every
// change is: the tombstones of the old group's records and the records of
// the new group, so that a replay of the log converts too.

// MigrationPolicy says which conversions a group with members may go
// through (group.consumer.migration.policy). An empty group changes type
// whatever the policy.
type MigrationPolicy uint8

// The migration policies; the zero value is Kafka 4.0's default.
const (
	MigrationBidirectional MigrationPolicy = iota // upgrade and downgrade
	MigrationUpgrade                              // classic to consumer group only
	MigrationDowngrade                            // consumer to classic group only
	MigrationDisabled                             // neither
)

func (p MigrationPolicy) String() string {
	switch p {
	case MigrationBidirectional:
		return "bidirectional"
	case MigrationUpgrade:
		return "upgrade"
	case MigrationDowngrade:
		return "downgrade"
	case MigrationDisabled:
		return "disabled"
	}
	return "MigrationPolicy(?)"
}

func (p MigrationPolicy) upgrades() bool { return p == MigrationBidirectional || p == MigrationUpgrade }
func (p MigrationPolicy) downgrades() bool {
	return p == MigrationBidirectional || p == MigrationDowngrade
}

// upgrade converts a classic group with members into a consumer group for
// a member joining with ConsumerGroupHeartbeat (validateOnlineUpgrade and
// convertToConsumerGroup). A group the policy, its protocol type or its
// size keeps classic answers GROUP_ID_NOT_FOUND, as Kafka does; nothing
// changes then.
func (c *Coordinator) upgrade(classic *classicGroup) (*consumerGroup, error) {
	id := classic.id
	switch {
	case !c.cfg.MigrationPolicy.upgrades():
		return nil, errorf(ErrGroupIDNotFound, "group %q is a classic group, and migration policy %v does not upgrade it", id, c.cfg.MigrationPolicy)
	case classic.protocolType != consumerProtocolType:
		return nil, errorf(ErrGroupIDNotFound, "group %q is a classic group of protocol type %q, not %q", id, classic.protocolType, consumerProtocolType)
	case c.cfg.MaxSize > 0 && len(classic.members) > c.cfg.MaxSize:
		return nil, errorf(ErrGroupIDNotFound, "group %q: its %d members are more than a consumer group may have", id, len(classic.members))
	case c.cfg.MaxSize > 0 && len(classic.members) == c.cfg.MaxSize:
		// Kafka converts, then turns the joining member away and drops
		// the conversion's records with it.
		return nil, errorf(ErrGroupMaxSizeReached, "group %q already has %d members", id, c.cfg.MaxSize)
	}
	g, err := c.consumerGroupFromClassic(classic)
	if err != nil {
		return nil, err
	}
	// The joining member bumps the group epoch: members parked in a join
	// or a sync must join again, into the consumer group.
	rejoin := errorf(ErrRebalanceInProgress, "group %q is upgraded to a consumer group", id)
	for _, m := range classic.members {
		c.completeJoin(classic, m, &JoinGroupResponse{GenerationID: -1, MemberID: m.id, Err: rejoin})
		c.completeSync(classic, m, &SyncGroupResponse{Err: rejoin})
		c.timers.cancel(timerKey{timerHeartbeat, id, m.id})
	}
	c.timers.cancel(timerKey{kind: timerJoin, group: id})
	c.timers.cancel(timerKey{kind: timerSync, group: id})
	c.removeGroup(classic)
	c.consumerGroups[id] = g
	for _, m := range g.members {
		c.scheduleConsumerSession(g, m)
	}
	// The converted group's records come before the join's changes, as
	// Kafka writes them.
	c.syncConsumerGroup(id)
	return g, nil
}

// consumerGroupFromClassic builds the consumer group a classic group
// becomes (ConsumerGroup.fromClassicGroup): at its generation, each member
// Stable at that epoch with the assignment it had, which is also its
// target. A partition the leader assigned twice stays with the first
// member, and one of a topic that does not exist is dropped, so that no
// partition has two owners (Kafka trusts the leader's assignment).
func (c *Coordinator) consumerGroupFromClassic(classic *classicGroup) (*consumerGroup, error) {
	g := newConsumerGroup(classic.id)
	g.epoch, g.targetEpoch = classic.generation, classic.generation
	for _, cm := range classic.members {
		meta := cm.metadata(classic.protocolName)
		if meta == nil && len(cm.protocols) > 0 {
			meta = cm.protocols[0].Metadata
		}
		sub, _, err := DecodeSubscription(meta)
		if err != nil {
			return nil, errorf(ErrGroupIDNotFound, "group %q: member %q: cannot upgrade: %v", classic.id, cm.id, err)
		}
		var asg Assignment
		if len(cm.assignment) > 0 {
			if asg, _, err = DecodeAssignment(cm.assignment); err != nil {
				return nil, errorf(ErrGroupIDNotFound, "group %q: member %q: cannot upgrade: %v", classic.id, cm.id, err)
			}
		}
		assigned := partitions{}
		for t, ps := range asg.Partitions {
			n := c.partitions(t)
			for _, p := range ps {
				if p >= 0 && p < n && g.partitionEpoch(t, p) == -1 && !slices.Contains(assigned[t], p) {
					assigned[t] = append(assigned[t], p)
				}
			}
			slices.Sort(assigned[t])
		}
		m := &consumerMember{id: cm.id, instanceID: cm.instanceID, rackID: sub.RackID,
			clientID: cm.clientID, clientHost: cm.clientHost, rebalanceTimeoutMs: cm.rebalanceTimeoutMs,
			topics:  slices.Compact(slices.Sorted(slices.Values(sub.Topics))),
			classic: &ClassicMemberMetadata{SessionTimeoutMs: cm.sessionTimeoutMs, SupportedProtocols: slices.Clone(cm.protocols)},
			memberAssignment: memberAssignment{state: memberStable, epoch: classic.generation, prevEpoch: classic.generation,
				assigned: assigned},
		}
		c.addConsumer(g, m)
		g.target[m.id] = clonePartitions(assigned)
	}
	g.topics = c.subscribedTopics(g)
	return g, nil
}

// leaveConsumer removes a member that leaves or is fenced. If it was the
// last member speaking the consumer protocol and members speaking the
// classic protocol remain, the group becomes a classic group, as the
// policy allows (validateOnlineDowngradeWithFencedMember).
func (c *Coordinator) leaveConsumer(g *consumerGroup, m *consumerMember) {
	if c.mayDowngrade(g, m) {
		c.downgrade(g, m)
		return
	}
	c.fenceConsumer(g, m)
}

// mayDowngrade reports whether the group becomes a classic group as
// leaving leaves, or, with leaving nil, as it is (a member speaking the
// classic protocol just replaced the last one speaking the consumer
// protocol, validateOnlineDowngradeWithReplacedMemberId): every other
// member speaks the classic protocol, and the policy and the size allow.
func (c *Coordinator) mayDowngrade(g *consumerGroup, leaving *consumerMember) bool {
	n := len(g.members)
	if leaving != nil {
		if leaving.classic != nil || n <= 1 {
			return false
		}
		n--
	}
	if !c.cfg.MigrationPolicy.downgrades() || c.cfg.MaxSize > 0 && n > c.cfg.MaxSize {
		return false
	}
	for _, m := range g.members {
		if m != leaving && m.classic == nil {
			return false
		}
	}
	return true
}

// downgrade replaces a consumer group by the classic group of its members
// but leaving (convertToClassicGroup, ClassicGroup.fromConsumerGroup): at
// the group epoch as generation, each member assigned its target
// assignment, Stable, and rebalancing if a member left.
func (c *Coordinator) downgrade(g *consumerGroup, leaving *consumerMember) {
	for _, m := range g.members {
		c.cancelConsumerTimers(g, m)
	}
	delete(c.consumerGroups, g.id)
	c.syncConsumerGroup(g.id) // the consumer group's tombstones
	classic := newClassicGroup(g.id, Stable, c.now)
	classic.generation = g.epoch
	for _, m := range g.members {
		if m == leaving {
			continue
		}
		classic.add(&member{id: m.id, instanceID: m.instanceID, clientID: m.clientID, clientHost: m.clientHost,
			rebalanceTimeoutMs: m.rebalanceTimeoutMs, sessionTimeoutMs: m.classic.SessionTimeoutMs,
			protocolType: consumerProtocolType, protocols: slices.Clone(m.classic.SupportedProtocols)})
	}
	classic.protocolName = classic.selectProtocol()
	for _, m := range classic.members {
		// In the version of the member's own subscription, as Kafka's
		// consumer reads what it wrote.
		_, version, err := DecodeSubscription(m.metadata(classic.protocolName))
		if err != nil {
			version = 0
		}
		m.assignment = Assignment{Partitions: g.target[m.id]}.Encode(version)
	}
	c.groups[g.id] = classic
	c.emitGroup(classic)
	for _, m := range classic.members {
		c.scheduleHeartbeat(classic, m, int64(m.sessionTimeoutMs))
	}
	if leaving != nil {
		c.prepareRebalance(classic)
	}
}

// supportsClassic reports whether a member speaking the classic protocol
// may join: it speaks the consumer protocol type, with a protocol every
// member speaking the classic protocol supports
// (ConsumerGroup.supportsClassicProtocols).
func (g *consumerGroup) supportsClassic(protocolType string, protocols []Protocol) bool {
	if protocolType != consumerProtocolType || len(protocols) == 0 {
		return false
	}
	for _, p := range protocols {
		all := true
		for _, m := range g.members {
			if m.classic != nil && !slices.ContainsFunc(m.classic.SupportedProtocols, func(x Protocol) bool { return x.Name == p.Name }) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// classicJoinToConsumerGroup handles a JoinGroup to a consumer group with
// members (classicGroupJoinToConsumerGroup): the member joins, or rejoins,
// as a member of the consumer group speaking the classic protocol, is
// reconciled at once with what its subscription says it owns, and gets its
// member epoch as generation. It is never the leader: the coordinator
// assigns, and its SyncGroup returns what it is assigned.
func (c *Coordinator) classicJoinToConsumerGroup(g *consumerGroup, id RequestID, req JoinGroupRequest) {
	fail := func(err error) {
		c.respond(&JoinGroupResponse{ID: id, Err: err, GenerationID: -1, MemberID: req.MemberID})
	}
	memberID := req.MemberID
	if memberID == "" {
		memberID = c.newUUID()
	}
	existing := g.byID[memberID]
	if req.GroupInstanceID != "" {
		existing = g.byID[g.static[req.GroupInstanceID]]
	}
	switch {
	case c.cfg.MaxSize > 0 && len(g.members) >= c.cfg.MaxSize && existing == nil:
		fail(errorf(ErrGroupMaxSizeReached, "group %q already has %d members", g.id, c.cfg.MaxSize))
		return
	case !g.supportsClassic(req.ProtocolType, req.Protocols):
		fail(errorf(ErrInconsistentGroupProtocol, "group %q: protocol type %q with %d protocols is not supported by its members",
			g.id, req.ProtocolType, len(req.Protocols)))
		return
	case req.MemberID == "" && req.GroupInstanceID == "" && req.Version >= JoinVersionMemberIDRequired:
		// KIP-394, without a pending set: the id comes back as a new member.
		c.respond(&JoinGroupResponse{ID: id, GenerationID: -1, MemberID: memberID,
			Err: errorf(ErrMemberIDRequired, "group %q: rejoin with the member id given", g.id)})
		return
	case existing != nil && req.MemberID != "" && existing.id != req.MemberID:
		fail(errorf(ErrFencedInstanceID, "group %q: instance id %q belongs to member %q", g.id, req.GroupInstanceID, existing.id))
		return
	}
	sub, _, err := DecodeSubscription(req.Protocols[0].Metadata)
	if err != nil {
		// Kafka fails such a join with an IllegalStateException.
		fail(errorf(ErrUnknownServerError, "group %q: member %q: %v", g.id, memberID, err))
		return
	}
	m := existing
	replacedConsumer := false
	switch {
	case m == nil:
		m = &consumerMember{id: memberID, instanceID: req.GroupInstanceID}
		c.addConsumer(g, m)
	case m.id != memberID:
		// A static member restarts: the new member id takes its place,
		// target and assignment (KIP-345).
		replacedConsumer = m.classic == nil
		replaced := *m
		replaced.id = memberID
		target := g.target[m.id]
		c.removeConsumer(g, m, false)
		g.target[memberID] = target
		m = &replaced
		c.addConsumer(g, m)
	}
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	m.classic = &ClassicMemberMetadata{SessionTimeoutMs: int32(req.SessionTimeout.Milliseconds()), SupportedProtocols: slices.Clone(req.Protocols)}
	bump := m.update(ConsumerGroupHeartbeatRequest{InstanceID: req.GroupInstanceID, RackID: sub.RackID,
		RebalanceTimeout: req.RebalanceTimeout, SubscribedTopicNames: append([]string{}, sub.Topics...)})
	if err := c.updateConsumerGroup(g, bump); err != nil {
		fail(err)
		return
	}
	owned := partitions{}
	for t, ps := range sub.Owned {
		owned[t] = slices.Sorted(slices.Values(ps))
	}
	if err := c.reconcileConsumer(g, m, owned); err != nil {
		fail(err)
		return
	}
	resp := &JoinGroupResponse{ID: id, GenerationID: m.epoch, ProtocolType: consumerProtocolType,
		ProtocolName: req.Protocols[0].Name, MemberID: m.id}
	if replacedConsumer && c.mayDowngrade(g, nil) {
		// The static member that spoke the consumer protocol restarted
		// speaking the classic one: the group is classic again, and
		// Stable, the member in its predecessor's place.
		c.downgrade(g, nil)
		classic := c.groups[g.id]
		resp.GenerationID, resp.ProtocolName = classic.generation, classic.protocolName
		c.respond(resp)
		return
	}
	c.timers.cancel(timerKey{timerJoin, g.id, m.id})
	c.scheduleConsumerSession(g, m)
	c.scheduleConsumerTimer(g, m, timerSync, int64(m.rebalanceTimeoutMs))
	c.respond(resp)
}

// classicMember finds the member a classic request names
// (validateConsumerGroupMember); a member speaking the consumer protocol is
// unknown to the classic protocol (throwIfMemberDoesNotUseClassicProtocol).
func (g *consumerGroup) classicMember(memberID, instanceID string) (*consumerMember, error) {
	m := g.byID[memberID]
	if instanceID != "" {
		m = g.byID[g.static[instanceID]]
		switch {
		case m == nil:
			return nil, errorf(ErrUnknownMemberID, "group %q: unknown group instance id %q", g.id, instanceID)
		case memberID != "" && m.id != memberID:
			return nil, errorf(ErrFencedInstanceID, "group %q: group instance id %q belongs to member %q, not %q", g.id, instanceID, m.id, memberID)
		}
	}
	switch {
	case m == nil:
		return nil, errorf(ErrUnknownMemberID, "group %q: unknown member id %q", g.id, memberID)
	case m.classic == nil:
		return nil, errorf(ErrUnknownMemberID, "group %q: member %q does not speak the classic protocol", g.id, m.id)
	}
	return m, nil
}

// classicGeneration checks a classic request's generation against the
// member's epoch (throwIfGenerationIdUnmatched).
func (g *consumerGroup) classicGeneration(m *consumerMember, generation int32) error {
	if generation != m.epoch {
		return errorf(ErrIllegalGeneration, "group %q: generation %d, member %q is at epoch %d", g.id, generation, m.id, m.epoch)
	}
	return nil
}

// mustRejoin asks a member speaking the classic protocol to rejoin, and
// gives it its rebalance timeout to do so (scheduleConsumerGroupJoin
// TimeoutIfAbsent).
func (c *Coordinator) mustRejoin(g *consumerGroup, m *consumerMember) error {
	if _, armed := c.timers.byKey[timerKey{timerJoin, g.id, m.id}]; !armed {
		c.scheduleConsumerTimer(g, m, timerJoin, int64(m.rebalanceTimeoutMs))
	}
	return errorf(ErrRebalanceInProgress, "group %q is at epoch %d: member %q at %d must rejoin", g.id, g.epoch, m.id, m.epoch)
}

// classicSyncToConsumerGroup handles a SyncGroup to a consumer group
// (classicGroupSyncToConsumerGroup): the member gets what it is assigned,
// unless the group moved on and it must rejoin first. A member that must
// revoke partitions gets what it keeps, and rejoins once it revoked them.
func (c *Coordinator) classicSyncToConsumerGroup(g *consumerGroup, req SyncGroupRequest) (*SyncGroupResponse, error) {
	m, err := g.classicMember(req.MemberID, req.GroupInstanceID)
	if err != nil {
		return nil, err
	}
	if err := g.classicGeneration(m, req.GenerationID); err != nil {
		return nil, err
	}
	name := m.classic.SupportedProtocols[0].Name
	if inconsistent(req.ProtocolType, consumerProtocolType) || inconsistent(req.ProtocolName, name) {
		return nil, errorf(ErrInconsistentGroupProtocol, "group %q: protocol %q/%q, member %q joined with %q/%q",
			g.id, req.ProtocolType, req.ProtocolName, m.id, consumerProtocolType, name)
	}
	if g.epoch > m.epoch && m.state != memberUnrevokedPartitions {
		return nil, c.mustRejoin(g, m)
	}
	c.timers.cancel(timerKey{timerSync, g.id, m.id})
	c.scheduleConsumerSession(g, m)
	_, version, err := DecodeSubscription(m.classic.SupportedProtocols[0].Metadata)
	if err != nil {
		version = 0
	}
	return &SyncGroupResponse{ProtocolType: consumerProtocolType, ProtocolName: name,
		Assignment: Assignment{Partitions: clonePartitions(m.assigned)}.Encode(version)}, nil
}

// classicHeartbeatToConsumerGroup handles a Heartbeat to a consumer group
// (classicGroupHeartbeatToConsumerGroup): REBALANCE_IN_PROGRESS tells the
// member to rejoin when the group epoch moved past it, when it must revoke
// partitions, or when the partitions it waits for are free.
func (c *Coordinator) classicHeartbeatToConsumerGroup(g *consumerGroup, req HeartbeatRequest) error {
	m, err := g.classicMember(req.MemberID, req.GroupInstanceID)
	if err != nil {
		return err
	}
	if err := g.classicGeneration(m, req.GenerationID); err != nil {
		return err
	}
	c.scheduleConsumerSession(g, m)
	if m.epoch < g.epoch || m.state == memberUnrevokedPartitions ||
		m.state == memberUnreleasedPartitions && !g.waitingOnUnreleased(m) {
		return c.mustRejoin(g, m)
	}
	return nil
}

// waitingOnUnreleased reports whether a partition of the member's target
// is still another member's (ConsumerGroup.waitingOnUnreleasedPartition).
func (g *consumerGroup) waitingOnUnreleased(m *consumerMember) bool {
	for t, ps := range g.target[m.id] {
		for _, p := range ps {
			if !slices.Contains(m.assigned[t], p) && g.partitionEpoch(t, p) != -1 {
				return true
			}
		}
	}
	return false
}

// classicLeaveToConsumerGroup handles a LeaveGroup to a consumer group
// (classicGroupLeaveToConsumerGroup): members speaking the classic
// protocol leave, and the group epoch moves on once for all of them.
func (c *Coordinator) classicLeaveToConsumerGroup(g *consumerGroup, id RequestID, req LeaveGroupRequest) {
	resp := &LeaveGroupResponse{ID: id}
	left := false
	for _, lm := range req.Members {
		r := LeaveGroupMemberResult{MemberID: lm.MemberID, GroupInstanceID: lm.GroupInstanceID}
		if m, err := g.classicMember(lm.MemberID, lm.GroupInstanceID); err != nil {
			r.Err = err
		} else {
			r.MemberID = m.id
			c.removeConsumer(g, m, false)
			left = true
		}
		resp.Members = append(resp.Members, r)
	}
	if left {
		g.topics = c.subscribedTopics(g)
		g.epoch++
	}
	c.syncConsumerGroup(g.id)
	c.respond(resp)
}
