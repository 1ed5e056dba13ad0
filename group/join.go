package group

import (
	"math"
	"time"
)

// This file is the classic protocol's join phase: JoinGroup, the rebalance
// it starts and the timers that end it. The rules and their order follow
// Kafka's GroupMetadataManager (classicGroupJoin and what it calls); the
// comments name the Java method each function stands for.

// maxStringLen is the longest string Kafka's protocol can carry (an int16
// length), and so the longest id a record of the offsets log can hold.
const maxStringLen = math.MaxInt16

// checkGroupID rejects the group ids Kafka rejects (an empty one, in
// GroupCoordinatorService) and those no record could hold.
func checkGroupID(id string) error {
	if id == "" {
		return errorf(ErrInvalidGroupID, "empty group id")
	}
	if len(id) > maxStringLen {
		return errorf(ErrInvalidGroupID, "group id of %d bytes, longer than %d", len(id), maxStringLen)
	}
	return nil
}

// checkStrings rejects strings longer than the protocol can carry.
func checkStrings(fields map[string]string) error {
	for name, s := range fields {
		if len(s) > maxStringLen {
			return errorf(ErrInvalidRequest, "%s of %d bytes, longer than %d", name, len(s), maxStringLen)
		}
	}
	return nil
}

// checkJoin returns what JoinGroup refuses req for before it looks at the
// group: the group id, the session timeout outside the configured range,
// the rebalance timeout out of range, strings too long for the protocol,
// a protocol listed twice.
func (cfg Config) checkJoin(req JoinGroupRequest) error {
	if err := checkGroupID(req.GroupID); err != nil {
		return err
	}
	if req.SessionTimeout < cfg.MinSessionTimeout || req.SessionTimeout > cfg.MaxSessionTimeout {
		return errorf(ErrInvalidSessionTimeout, "group %q: session timeout %v outside [%v, %v]",
			req.GroupID, req.SessionTimeout, cfg.MinSessionTimeout, cfg.MaxSessionTimeout)
	}
	if req.RebalanceTimeout < 0 || req.RebalanceTimeout.Milliseconds() > math.MaxInt32 {
		return errorf(ErrInvalidRequest, "group %q: rebalance timeout %v out of range", req.GroupID, req.RebalanceTimeout)
	}
	fields := map[string]string{"member id": req.MemberID, "group instance id": req.GroupInstanceID,
		"client id": req.ClientID, "client host": req.ClientHost, "protocol type": req.ProtocolType}
	seen := make(map[string]bool, len(req.Protocols))
	for _, p := range req.Protocols {
		if seen[p.Name] {
			// Kafka's clients never send one twice; counting it twice
			// would leave the group without a protocol all members support.
			return errorf(ErrInvalidRequest, "group %q: protocol %q listed twice", req.GroupID, p.Name)
		}
		seen[p.Name] = true
		fields["protocol name"] = p.Name
		if err := checkStrings(fields); err != nil {
			return err
		}
	}
	return checkStrings(fields)
}

// group returns the group a request names, or the error to answer when the
// coordinator cannot serve it: still loading, or unloaded and the group gone.
func (c *Coordinator) group(id string) (*classicGroup, error) {
	if !c.loaded {
		return nil, errorf(ErrCoordinatorLoadInProgress, "group %q: offsets log still loading", id)
	}
	g := c.groups[id]
	if g == nil && c.unloaded {
		return nil, errorf(ErrNotCoordinator, "group %q: coordinator unloaded", id)
	}
	return g, nil
}

func durationMs(d time.Duration) int64 { return d.Milliseconds() }

// JoinGroup handles a JoinGroup request. Its response may come at once or
// when the join phase completes.
func (c *Coordinator) JoinGroup(id RequestID, req JoinGroupRequest) {
	fail := func(err error) {
		c.respond(&JoinGroupResponse{ID: id, Err: err, GenerationID: -1, MemberID: req.MemberID})
	}
	if err := c.cfg.checkJoin(req); err != nil {
		fail(err)
		return
	}
	if req.RebalanceTimeout == 0 {
		req.RebalanceTimeout = req.SessionTimeout
	}
	g, err := c.group(req.GroupID)
	if err != nil {
		fail(err)
		return
	}
	if cg := c.consumerGroups[req.GroupID]; cg != nil {
		if len(cg.members) > 0 {
			c.classicJoinToConsumerGroup(cg, id, req)
			c.syncConsumerGroup(req.GroupID)
			return
		}
		// An empty consumer group becomes a classic group; its offsets
		// stay.
		delete(c.consumerGroups, req.GroupID)
		c.syncConsumerGroup(req.GroupID)
	}
	isNewGroup := g == nil
	if isNewGroup {
		// A group is created by a first join only; a member id for a group
		// that does not exist is unknown (classicGroupJoinToClassicGroup).
		if req.MemberID != "" {
			fail(errorf(ErrUnknownMemberID, "group %q does not exist", req.GroupID))
			return
		}
		g = newClassicGroup(req.GroupID, Empty, c.now)
		c.groups[req.GroupID] = g
	}
	records := len(c.ready.Records)
	switch {
	case !c.acceptJoiningMember(g, req.MemberID):
		// Kafka removes a member it turns away: rejoining members beyond
		// the maximum are the ones kicked out.
		if m := g.byID[req.MemberID]; m != nil {
			c.removeMember(g, m)
		} else {
			g.remove(req.MemberID)
		}
		c.respond(&JoinGroupResponse{ID: id, GenerationID: -1,
			Err: errorf(ErrGroupMaxSizeReached, "group %q already has %d members", req.GroupID, c.cfg.MaxSize)})
	case req.MemberID == "":
		c.joinNewMember(g, id, req)
	default:
		c.joinExistingMember(g, id, req)
	}
	if isNewGroup && len(g.members) == 0 && len(g.pending) == 0 {
		// The join was turned away (an unsupported protocol, the size
		// limit): the group it would have created leaves no trace. Kafka
		// writes the empty group anyway; bad input changing nothing in
		// the offsets log is this package's rule.
		delete(c.groups, g.id)
		return
	}
	if isNewGroup && len(c.ready.Records) == records {
		// A new group is made durable at once, with Kafka's empty record
		// (newEmptyGroupMetadataRecord).
		c.emit(EncodeGroupMetadata(GroupMetadataKey{Group: g.id},
			GroupMetadataValue{Generation: 0, CurrentStateTimestamp: g.stateTime}))
	}
}

// acceptJoiningMember applies group.max.size (acceptJoiningMember): while
// preparing a rebalance, parked joins count, so that the last members to
// rejoin are the ones turned away.
func (c *Coordinator) acceptJoiningMember(g *classicGroup, memberID string) bool {
	if c.cfg.MaxSize == 0 {
		return true
	}
	m := g.byID[memberID]
	switch g.state {
	case PreparingRebalance:
		return m != nil && m.joinParked || g.awaitingJoin < c.cfg.MaxSize
	case CompletingRebalance, Stable:
		return m != nil || len(g.members) < c.cfg.MaxSize
	}
	return true
}

// joinNewMember handles a join without a member id (classicGroupJoinNewMember).
func (c *Coordinator) joinNewMember(g *classicGroup, id RequestID, req JoinGroupRequest) {
	switch {
	case g.is(Dead):
		c.respond(&JoinGroupResponse{ID: id, GenerationID: -1, Err: errorf(ErrCoordinatorNotAvailable, "group %q is dead", g.id)})
		return
	case !g.supports(req.ProtocolType, req.Protocols):
		c.respond(&JoinGroupResponse{ID: id, GenerationID: -1, Err: errorf(ErrInconsistentGroupProtocol,
			"group %q: protocol type %q with %d protocols does not match the group's %q", g.id, req.ProtocolType, len(req.Protocols), g.protocolType)})
		return
	}
	prefix := req.ClientID
	if req.GroupInstanceID != "" {
		prefix = req.GroupInstanceID
	}
	newID := c.newMemberID(prefix)
	switch {
	case req.GroupInstanceID != "" && g.static[req.GroupInstanceID] != "":
		c.replaceStaticMember(g, id, req, newID)
	case req.GroupInstanceID != "" || req.Version < JoinVersionMemberIDRequired:
		c.addMember(g, id, req, newID)
	default:
		// KIP-394: the member must come back with the id; until then it is
		// pending, and its session timeout bounds the wait.
		g.pending[newID] = true
		c.timers.schedule(timerKey{timerHeartbeat, g.id, newID}, c.now+durationMs(req.SessionTimeout),
			func() { c.expireHeartbeat(g, newID) })
		c.respond(&JoinGroupResponse{ID: id, GenerationID: -1, MemberID: newID,
			Err: errorf(ErrMemberIDRequired, "group %q: rejoin with the member id given", g.id)})
	}
}

// joinExistingMember handles a join with a member id (classicGroupJoinExistingMember).
func (c *Coordinator) joinExistingMember(g *classicGroup, id RequestID, req JoinGroupRequest) {
	fail := func(err error) {
		c.respond(&JoinGroupResponse{ID: id, Err: err, GenerationID: -1, MemberID: req.MemberID})
	}
	switch {
	case g.is(Dead):
		fail(errorf(ErrCoordinatorNotAvailable, "group %q is dead", g.id))
		return
	case !g.supports(req.ProtocolType, req.Protocols):
		fail(errorf(ErrInconsistentGroupProtocol, "group %q: protocol type %q with %d protocols does not match the group's %q",
			g.id, req.ProtocolType, len(req.Protocols), g.protocolType))
		return
	case g.pending[req.MemberID]:
		if req.GroupInstanceID != "" {
			// Pending ids are only handed to dynamic members; Kafka treats
			// this as an illegal state.
			fail(errorf(ErrInvalidRequest, "group %q: pending member %q joins with group instance id %q",
				g.id, req.MemberID, req.GroupInstanceID))
			return
		}
		c.addMember(g, id, req, req.MemberID)
		return
	}
	m, err := g.validateMember(req.MemberID, req.GroupInstanceID)
	if err != nil {
		fail(err)
		return
	}
	switch g.state {
	case PreparingRebalance:
		c.updateMember(g, m, req, id)
		c.maybePrepareRebalanceOrCompleteJoin(g)
	case CompletingRebalance:
		if !m.matches(req.Protocols) {
			c.updateMember(g, m, req, id)
			c.maybePrepareRebalanceOrCompleteJoin(g)
			return
		}
		// The member lost its JoinGroup response: send it again.
		c.respond(c.joinResponse(g, m, id, g.isLeader(m.id), false))
	case Stable:
		// A leader's join forces a rebalance, so that it can react to
		// changes members do not see (topic metadata); a follower's join
		// rebalances only if its protocols changed.
		if g.isLeader(m.id) || !m.matches(req.Protocols) {
			c.updateMember(g, m, req, id)
			c.maybePrepareRebalanceOrCompleteJoin(g)
			return
		}
		c.respond(c.joinResponse(g, m, id, false, false))
	default:
		fail(errorf(ErrUnknownMemberID, "group %q is %v", g.id, g.state))
	}
}

// validateMember checks a request's member (ClassicGroup.validateMember): a
// static member's instance id must map to this member id.
func (g *classicGroup) validateMember(memberID, instanceID string) (*member, error) {
	if instanceID != "" {
		switch current := g.static[instanceID]; current {
		case "":
			return nil, errorf(ErrUnknownMemberID, "group %q: unknown group instance id %q", g.id, instanceID)
		case memberID:
		default:
			return nil, errorf(ErrFencedInstanceID, "group %q: group instance id %q belongs to member %q, not %q",
				g.id, instanceID, current, memberID)
		}
	}
	m := g.byID[memberID]
	if m == nil {
		return nil, errorf(ErrUnknownMemberID, "group %q: unknown member id %q", g.id, memberID)
	}
	return m, nil
}

// joinResponse is a successful JoinGroup response for the current
// generation; the leader's lists every member with its metadata.
func (c *Coordinator) joinResponse(g *classicGroup, m *member, id RequestID, withMembers, skip bool) *JoinGroupResponse {
	r := &JoinGroupResponse{
		ID: id, GenerationID: g.generation, ProtocolType: g.protocolType, ProtocolName: g.protocolName,
		Leader: g.leader, SkipAssignment: skip, MemberID: m.id,
	}
	if withMembers {
		r.Members = make([]JoinGroupMember, 0, len(g.members))
		for _, x := range g.members {
			r.Members = append(r.Members, JoinGroupMember{MemberID: x.id, GroupInstanceID: x.instanceID, Metadata: x.metadata(g.protocolName)})
		}
	}
	return r
}

// addMember adds a member whose JoinGroup is parked until the join phase
// completes (addMemberThenRebalanceOrCompleteJoin).
func (c *Coordinator) addMember(g *classicGroup, id RequestID, req JoinGroupRequest, memberID string) {
	m := &member{
		id: memberID, instanceID: req.GroupInstanceID, clientID: req.ClientID, clientHost: req.ClientHost,
		rebalanceTimeoutMs: int32(req.RebalanceTimeout.Milliseconds()), sessionTimeoutMs: int32(req.SessionTimeout.Milliseconds()),
		protocolType: req.ProtocolType, protocols: req.Protocols,
		joinParked: true, joinID: id, isNew: true,
	}
	if g.is(PreparingRebalance) && g.prevState == Empty {
		g.newMemberAdded = true // extends the initial delay
	}
	g.add(m)
	// A new member cannot heartbeat while its join is parked, and a client
	// that gave up would leave it behind: its join is bounded instead.
	c.scheduleHeartbeat(g, m, durationMs(c.cfg.NewMemberJoinTimeout))
	c.maybePrepareRebalanceOrCompleteJoin(g)
}

// updateMember records a rejoining member's protocols and timeouts and parks
// its JoinGroup (ClassicGroup.updateMember).
func (c *Coordinator) updateMember(g *classicGroup, m *member, req JoinGroupRequest, id RequestID) {
	g.countProtocols(m, -1)
	m.protocols = req.Protocols
	g.countProtocols(m, 1)
	m.rebalanceTimeoutMs = int32(req.RebalanceTimeout.Milliseconds())
	m.sessionTimeoutMs = int32(req.SessionTimeout.Milliseconds())
	if m.joinParked {
		// Kafka drops the earlier parked request; it is answered here so
		// that its owner is not left waiting.
		c.respond(&JoinGroupResponse{ID: m.joinID, GenerationID: -1, MemberID: m.id,
			Err: errorf(ErrRebalanceInProgress, "group %q: member %q joined again", g.id, m.id)})
	} else {
		g.awaitingJoin++
	}
	m.joinParked, m.joinID = true, id
}

// replaceStaticMember handles a static member that rejoins without its
// member id, i.e. restarted (updateStaticMemberThenRebalanceOrCompleteJoin).
// It takes a new id and the old member's place and assignment; requests of
// the old id are fenced.
func (c *Coordinator) replaceStaticMember(g *classicGroup, id RequestID, req JoinGroupRequest, newID string) {
	old := g.byID[g.static[req.GroupInstanceID]]
	oldLeader := g.leader
	fenced := errorf(ErrFencedInstanceID, "group %q: group instance id %q rejoined as %q", g.id, req.GroupInstanceID, newID)
	c.completeJoin(g, old, &JoinGroupResponse{GenerationID: -1, MemberID: old.id, Err: fenced})
	c.completeSync(g, old, &SyncGroupResponse{Err: fenced})
	c.timers.cancel(timerKey{timerHeartbeat, g.id, old.id})
	m := g.replaceStatic(old, newID)
	c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
	c.updateMember(g, m, req, id)

	switch g.state {
	case Stable:
		if g.protocolName != g.selectProtocol() {
			c.maybePrepareRebalanceOrCompleteJoin(g)
			return
		}
		// KIP-345: a restart that changes nothing needs no rebalance; the
		// new id is persisted and the member keeps its assignment.
		c.emitGroup(g)
		if req.Version >= JoinVersionSkipAssignment {
			// KIP-814: a static leader gets the members back but must not
			// run the assignor, since the group keeps its assignment.
			leader := g.isLeader(m.id)
			c.completeJoin(g, m, c.joinResponse(g, m, id, leader, leader))
		} else {
			r := c.joinResponse(g, m, id, false, false)
			r.Leader = oldLeader
			c.completeJoin(g, m, r)
		}
	case CompletingRebalance:
		// The leader may already have assigned to the old id: rebalance
		// so that the new id gets an assignment.
		c.prepareRebalance(g)
	default:
		c.maybeCompleteJoinPhase(g)
	}
}

// completeJoin answers a member's parked JoinGroup, if any.
func (c *Coordinator) completeJoin(g *classicGroup, m *member, r *JoinGroupResponse) bool {
	if !m.joinParked {
		return false
	}
	r.ID = m.joinID
	c.respond(r)
	m.joinParked = false
	g.awaitingJoin--
	return true
}

// completeSync answers a member's parked SyncGroup, if any.
func (c *Coordinator) completeSync(g *classicGroup, m *member, r *SyncGroupResponse) bool {
	if !m.syncParked {
		return false
	}
	r.ID = m.syncID
	c.respond(r)
	m.syncParked = false
	return true
}

// removeMember removes a member, answering its parked requests with
// UNKNOWN_MEMBER_ID so that a client still there rejoins.
func (c *Coordinator) removeMember(g *classicGroup, m *member) {
	gone := errorf(ErrUnknownMemberID, "group %q: member %q removed", g.id, m.id)
	c.completeJoin(g, m, &JoinGroupResponse{GenerationID: -1, Err: gone})
	c.completeSync(g, m, &SyncGroupResponse{Err: gone})
	c.timers.cancel(timerKey{timerHeartbeat, g.id, m.id})
	g.remove(m.id)
}

func (c *Coordinator) maybePrepareRebalanceOrCompleteJoin(g *classicGroup) {
	if g.canRebalance() {
		c.prepareRebalance(g)
	} else {
		c.maybeCompleteJoinPhase(g)
	}
}

// maybeCompleteJoinPhase completes the join phase once every member has
// joined, except during the initial rebalance, which only its delay ends.
func (c *Coordinator) maybeCompleteJoinPhase(g *classicGroup) {
	if g.is(PreparingRebalance) && g.prevState != Empty && g.hasAllJoined() {
		c.completeJoinPhase(g)
	}
}

// prepareRebalance starts a rebalance (GroupMetadataManager.prepareRebalance).
func (c *Coordinator) prepareRebalance(g *classicGroup) {
	if g.is(CompletingRebalance) {
		// Members waiting for the leader's assignment must rejoin instead,
		// each in a new session (propagateAssignment): the one started
		// when the join phase completed may have run out while it waited.
		for _, m := range g.members {
			m.assignment = nil
			if c.completeSync(g, m, &SyncGroupResponse{Err: errorf(ErrRebalanceInProgress, "group %q rebalances", g.id)}) {
				c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
			}
		}
	}
	clear(g.syncWait)
	c.timers.cancel(timerKey{kind: timerSync, group: g.id})

	initial := g.is(Empty)
	if initial {
		// An empty group waits for more members before its first
		// generation: by the initial delay, extended while members keep
		// coming, up to the rebalance timeout.
		delay := durationMs(c.cfg.InitialRebalanceDelay)
		remaining := max(g.rebalanceTimeoutMs()-delay, 0)
		c.timers.schedule(timerKey{kind: timerJoin, group: g.id}, c.now+delay,
			func() { c.completeInitialRebalance(g, delay, remaining) })
	}
	g.transition(PreparingRebalance, c.now)
	if initial {
		return
	}
	if g.hasAllJoined() {
		c.completeJoinPhase(g)
		return
	}
	c.timers.schedule(timerKey{kind: timerJoin, group: g.id}, c.now+g.rebalanceTimeoutMs(),
		func() { c.completeJoinPhase(g) })
}

// completeInitialRebalance ends the initial delay, or extends it when a
// member joined during it (tryCompleteInitialRebalanceElseSchedule).
func (c *Coordinator) completeInitialRebalance(g *classicGroup, delay, remaining int64) {
	if g.newMemberAdded && remaining != 0 {
		g.newMemberAdded = false
		next := min(durationMs(c.cfg.InitialRebalanceDelay), remaining)
		left := max(remaining-delay, 0)
		c.timers.schedule(timerKey{kind: timerJoin, group: g.id}, c.now+next,
			func() { c.completeInitialRebalance(g, next, left) })
		return
	}
	c.completeJoinPhase(g)
}

// completeJoinPhase ends the join phase (completeClassicGroupJoin): dynamic
// members that did not rejoin are removed (static ones stay), and the next
// generation starts with the members that joined.
func (c *Coordinator) completeJoinPhase(g *classicGroup) {
	c.timers.cancel(timerKey{kind: timerJoin, group: g.id})
	for _, m := range append([]*member(nil), g.members...) {
		if !m.joinParked && m.instanceID == "" {
			c.removeMember(g, m)
		}
	}
	if g.is(Dead) {
		return
	}
	if !g.electJoinedLeader() && len(g.members) > 0 {
		// Only static members that did not rejoin are left: wait another
		// rebalance timeout for them to rejoin or expire.
		c.timers.schedule(timerKey{kind: timerJoin, group: g.id}, c.now+g.rebalanceTimeoutMs(),
			func() { c.completeJoinPhase(g) })
		return
	}
	g.generation++
	clear(g.syncWait)
	if len(g.members) == 0 {
		g.protocolName = ""
		g.transition(Empty, c.now)
		c.emitGroup(g)
		return
	}
	g.protocolName = g.selectProtocol()
	g.computeSubscribed()
	g.transition(CompletingRebalance, c.now)
	for _, m := range g.members {
		c.completeJoin(g, m, c.joinResponse(g, m, 0, g.isLeader(m.id), false))
		c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
		m.isNew = false
		g.syncWait[m.id] = true
	}
	gen := g.generation
	c.timers.schedule(timerKey{kind: timerSync, group: g.id}, c.now+g.rebalanceTimeoutMs(),
		func() { c.expirePendingSync(g, gen) })
}

// electJoinedLeader keeps the leader if it rejoined, else makes the earliest
// member that rejoined the leader; false if no member rejoined
// (ClassicGroup.maybeElectNewJoinedLeader).
func (g *classicGroup) electJoinedLeader() bool {
	if g.leader == "" {
		return false
	}
	if g.byID[g.leader].joinParked {
		return true
	}
	for _, m := range g.members {
		if m.joinParked {
			g.leader = m.id
			return true
		}
	}
	return false
}

// scheduleHeartbeat (re)arms a member's session timer.
func (c *Coordinator) scheduleHeartbeat(g *classicGroup, m *member, timeoutMs int64) {
	id := m.id
	c.timers.schedule(timerKey{timerHeartbeat, g.id, id}, c.now+timeoutMs, func() { c.expireHeartbeat(g, id) })
}

// endSessions ends the sessions of the dynamic members whose client
// host is host at once: the members that a process which held the Dir
// before registered in-process, and which died with it.
func (c *Coordinator) endSessions(host string) {
	for _, g := range c.sortedGroups() {
		for _, m := range g.members {
			if m.clientHost == host && m.instanceID == "" {
				c.scheduleHeartbeat(g, m, 0)
			}
		}
	}
}

// expireHeartbeat handles a session timeout (expireClassicGroupMemberHeartbeat).
func (c *Coordinator) expireHeartbeat(g *classicGroup, memberID string) {
	switch {
	case g.is(Dead):
	case g.pending[memberID]:
		g.remove(memberID)
		if g.is(PreparingRebalance) && g.hasAllJoined() {
			c.completeJoinPhase(g)
		}
	case g.byID[memberID] == nil:
	case !g.byID[memberID].hasSatisfiedHeartbeat():
		c.removeMember(g, g.byID[memberID])
		c.afterRemoval(g)
	}
}

// afterRemoval moves the group on after members left or expired: a group
// with an assignment rebalances; a join phase may now be complete.
func (c *Coordinator) afterRemoval(g *classicGroup) {
	switch g.state {
	case Stable, CompletingRebalance:
		c.maybePrepareRebalanceOrCompleteJoin(g)
	case PreparingRebalance:
		if g.hasAllJoined() {
			c.completeJoinPhase(g)
		}
	}
}

// expirePendingSync removes the members that got their JoinGroup response
// but sent no SyncGroup within the rebalance timeout (expirePendingSync).
func (c *Coordinator) expirePendingSync(g *classicGroup, generation int32) {
	if generation != g.generation || !(g.is(CompletingRebalance) || g.is(Stable)) || len(g.syncWait) == 0 {
		return
	}
	for _, m := range append([]*member(nil), g.members...) {
		if g.syncWait[m.id] {
			c.removeMember(g, m)
		}
	}
	c.prepareRebalance(g)
}
