package group

// This file is the rest of the classic protocol: SyncGroup, Heartbeat and
// LeaveGroup (GroupMetadataManager.classicGroup{Sync,Heartbeat,Leave}).

// consumerGroupOf returns the consumer group a classic request names, nil
// if there is none (the group may be a classic one), or the error to answer.
func (c *Coordinator) consumerGroupOf(groupID string) (*consumerGroup, error) {
	if err := checkGroupID(groupID); err != nil {
		return nil, err
	}
	if _, err := c.group(groupID); err != nil {
		return nil, err
	}
	return c.consumerGroups[groupID], nil
}

// liveGroup returns the classic group a member's request names: it must
// exist and not be dead.
func (c *Coordinator) liveGroup(groupID string) (*classicGroup, error) {
	if err := checkGroupID(groupID); err != nil {
		return nil, err
	}
	g, err := c.group(groupID)
	switch {
	case err != nil:
		return nil, err
	case g == nil:
		return nil, errorf(ErrUnknownMemberID, "group %q does not exist", groupID)
	case g.is(Dead):
		return nil, errorf(ErrCoordinatorNotAvailable, "group %q is dead", g.id)
	}
	return g, nil
}

// SyncGroup handles a SyncGroup request. A follower's is parked until the
// leader's arrives; the leader's hands out the assignment.
func (c *Coordinator) SyncGroup(id RequestID, req SyncGroupRequest) {
	fail := func(err error) { c.respond(&SyncGroupResponse{ID: id, Err: err}) }
	cg, err := c.consumerGroupOf(req.GroupID)
	if err == nil && cg != nil {
		var r *SyncGroupResponse
		if r, err = c.classicSyncToConsumerGroup(cg, req); err == nil {
			r.ID = id
			c.respond(r)
			return
		}
	}
	if err != nil {
		fail(err)
		return
	}
	g, err := c.liveGroup(req.GroupID)
	switch {
	case err != nil:
		fail(err)
		return
	case g.is(Empty):
		fail(errorf(ErrUnknownMemberID, "group %q is empty", req.GroupID))
		return
	}
	m, err := g.validateMember(req.MemberID, req.GroupInstanceID)
	switch {
	case err != nil:
		fail(err)
		return
	case req.GenerationID != g.generation:
		fail(errorf(ErrIllegalGeneration, "group %q: generation %d, the group is at %d", g.id, req.GenerationID, g.generation))
		return
	case inconsistent(req.ProtocolType, g.protocolType) || inconsistent(req.ProtocolName, g.protocolName):
		fail(errorf(ErrInconsistentGroupProtocol, "group %q: protocol %q/%q, the group's is %q/%q",
			g.id, req.ProtocolType, req.ProtocolName, g.protocolType, g.protocolName))
		return
	}
	switch g.state {
	case PreparingRebalance:
		fail(errorf(ErrRebalanceInProgress, "group %q rebalances", g.id))
	case CompletingRebalance:
		if m.syncParked {
			c.completeSync(g, m, &SyncGroupResponse{Err: errorf(ErrRebalanceInProgress, "group %q: member %q synced again", g.id, m.id)})
		}
		m.syncParked, m.syncID = true, id
		c.syncReceived(g, m.id)
		if g.isLeader(m.id) {
			c.completeSyncPhase(g, req.Assignments)
		}
	case Stable:
		c.syncReceived(g, m.id)
		c.respond(&SyncGroupResponse{ID: id, ProtocolType: g.protocolType, ProtocolName: g.protocolName, Assignment: nonNil(m.assignment)})
	}
}

// inconsistent reports a protocol type or name a request gives that differs
// from the group's; a request that gives none is not checked.
func inconsistent(requested, group string) bool {
	return requested != "" && group != "" && requested != group
}

// syncReceived notes a member's SyncGroup; once every member has sent one
// the pending-sync timer stops (removePendingSyncMember).
func (c *Coordinator) syncReceived(g *classicGroup, memberID string) {
	delete(g.syncWait, memberID)
	if len(g.syncWait) == 0 {
		c.timers.cancel(timerKey{kind: timerSync, group: g.id})
	}
}

// completeSyncPhase takes the leader's assignment: members it leaves out get
// an empty one; the group is persisted, becomes Stable, and every parked
// SyncGroup is answered. Kafka moves to Stable when the record is appended;
// here the record is emitted with the Stable state, and Ready's contract
// holds the answers back until it is durable.
func (c *Coordinator) completeSyncPhase(g *classicGroup, assignments []SyncGroupAssignment) {
	byMember := make(map[string][]byte, len(assignments))
	for _, a := range assignments {
		byMember[a.MemberID] = a.Assignment
	}
	for _, m := range g.members {
		m.assignment = nonNil(byMember[m.id])
	}
	g.transition(Stable, c.now)
	c.emitGroup(g)
	for _, m := range g.members {
		if c.completeSync(g, m, &SyncGroupResponse{ProtocolType: g.protocolType, ProtocolName: g.protocolName, Assignment: m.assignment}) {
			c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
		}
	}
}

// Heartbeat handles a Heartbeat request.
func (c *Coordinator) Heartbeat(id RequestID, req HeartbeatRequest) {
	c.respond(&HeartbeatResponse{ID: id, Err: c.heartbeat(req)})
}

func (c *Coordinator) heartbeat(req HeartbeatRequest) error {
	if cg, err := c.consumerGroupOf(req.GroupID); err != nil {
		return err
	} else if cg != nil {
		return c.classicHeartbeatToConsumerGroup(cg, req)
	}
	g, err := c.liveGroup(req.GroupID)
	if err != nil {
		return err
	}
	m, err := g.validateMember(req.MemberID, req.GroupInstanceID)
	switch {
	case err != nil:
		return err
	case req.GenerationID != g.generation:
		return errorf(ErrIllegalGeneration, "group %q: generation %d, the group is at %d", g.id, req.GenerationID, g.generation)
	}
	switch g.state {
	case PreparingRebalance:
		c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
		return errorf(ErrRebalanceInProgress, "group %q rebalances", g.id)
	case CompletingRebalance, Stable:
		c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
		return nil
	}
	return errorf(ErrUnknownMemberID, "group %q is %v", g.id, g.state)
}

// LeaveGroup handles a LeaveGroup request.
func (c *Coordinator) LeaveGroup(id RequestID, req LeaveGroupRequest) {
	if cg, err := c.consumerGroupOf(req.GroupID); err == nil && cg != nil {
		c.classicLeaveToConsumerGroup(cg, id, req)
		return
	}
	g, err := c.liveGroup(req.GroupID)
	if err != nil {
		c.respond(&LeaveGroupResponse{ID: id, Err: err})
		return
	}
	resp := &LeaveGroupResponse{ID: id}
	left := 0
	for _, lm := range req.Members {
		r := LeaveGroupMemberResult{MemberID: lm.MemberID, GroupInstanceID: lm.GroupInstanceID}
		switch {
		case lm.MemberID == "":
			// Removal of a static member by its instance id alone.
			if m := g.byID[g.static[lm.GroupInstanceID]]; lm.GroupInstanceID != "" && m != nil {
				c.removeMember(g, m)
				left++
			} else {
				r.Err = errorf(ErrUnknownMemberID, "group %q: no static member %q", g.id, lm.GroupInstanceID)
			}
		case g.pending[lm.MemberID]:
			g.remove(lm.MemberID)
			c.timers.cancel(timerKey{timerHeartbeat, g.id, lm.MemberID})
			left++
		default:
			if m, err := g.validateMember(lm.MemberID, lm.GroupInstanceID); err != nil {
				r.Err = err
			} else {
				c.removeMember(g, m)
				left++
			}
		}
		resp.Members = append(resp.Members, r)
	}
	if left > 0 {
		switch g.state {
		case Stable, CompletingRebalance:
			c.maybePrepareRebalanceOrCompleteJoin(g)
		case PreparingRebalance:
			c.maybeCompleteJoinPhase(g)
		}
	}
	c.respond(resp)
}
