package group

import (
	"maps"
	"slices"
	"time"

	"github.com/strandlog/strand/assign"
)

// This file is the consumer group protocol of KIP-848: members heartbeat
// with ConsumerGroupHeartbeat, the coordinator computes the target
// assignment with a server-side assignor, and every member reconciles
// towards it one heartbeat at a time (reconcile.go), each partition going
// to a new member only after the old one let it go. The rules follow
// Kafka's GroupMetadataManager.consumerGroupHeartbeat and ConsumerGroup.
//
// The records of these groups (key versions 3-8) are written by
// records_image.go after each heartbeat. Members speaking the classic
// protocol and the conversions between a classic group and a consumer group
// are in migrate.go; subscriptions by regular expression in
// consumer_regex.go.

// Member epochs with a meaning in a ConsumerGroupHeartbeat
// (ConsumerGroupHeartbeatRequest).
const (
	JoinMemberEpoch        = 0  // joins, or rejoins after being fenced
	LeaveMemberEpoch       = -1 // leaves the group
	StaticLeaveMemberEpoch = -2 // a static member leaves for a while, keeping its assignment
)

// Defaults of a consumer group (group.consumer.*).
const (
	DefaultConsumerSessionTimeout    = 45 * time.Second
	DefaultConsumerHeartbeatInterval = 5 * time.Second
)

// consumerAssignors are the server-side assignors, by Kafka's names; the
// first is the default (group.consumer.assignors).
var consumerAssignors = []assign.Assignor{assign.Uniform, assign.ServerRange}

// ConsumerGroupHeartbeatRequest is a member's heartbeat. Fields left at
// their zero value (nil, 0, "") are unchanged since the last heartbeat;
// a join (MemberEpoch 0) must give RebalanceTimeout, SubscribedTopicNames
// and an empty Owned.
type ConsumerGroupHeartbeatRequest struct {
	GroupID              string
	MemberID             string // "" on a first join: the coordinator picks one
	MemberEpoch          int32
	InstanceID           string
	RackID               string
	RebalanceTimeout     time.Duration
	SubscribedTopicNames []string
	// SubscribedTopicRegex subscribes to every topic whose whole name
	// the regular expression (Go's RE2 syntax, as Kafka's RE2/J) matches,
	// as topics come and go; nil when unchanged, "" for none.
	SubscribedTopicRegex *string
	ServerAssignor       string      // "uniform" or "range"
	Owned                *Assignment // the partitions the member owns; nil when not sent
}

// ConsumerGroupHeartbeatResponse answers a heartbeat. Assignment is set when
// it changed or when the request was a full one.
type ConsumerGroupHeartbeatResponse struct {
	ID                RequestID
	Err               error
	MemberID          string
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	Assignment        *Assignment
}

// Request returns the id of the request r answers.
func (r *ConsumerGroupHeartbeatResponse) Request() RequestID { return r.ID }

// consumerGroup is one KIP-848 group (Kafka's ConsumerGroup).
type consumerGroup struct {
	id          string
	epoch       int32 // group epoch: bumped by membership and subscription changes
	targetEpoch int32 // epoch of target
	members     []*consumerMember
	byID        map[string]*consumerMember
	static      map[string]string          // instance id -> member id
	target      map[string]partitions      // member id -> target assignment
	owners      map[string]map[int32]int32 // topic -> partition -> epoch of the member that has it
	topics      map[string]int32           // subscribed topics -> partitions, as last seen
}

type consumerMember struct {
	id, instanceID, rackID string
	clientID, clientHost   string
	rebalanceTimeoutMs     int32
	assignor               string
	topics                 []string // sorted
	regex                  topicRegex
	// classic is set for a member that speaks the classic protocol
	// (migrate.go).
	classic *ClassicMemberMetadata
	memberAssignment
}

func newConsumerGroup(id string) *consumerGroup {
	return &consumerGroup{id: id, byID: map[string]*consumerMember{}, static: map[string]string{},
		target: map[string]partitions{}, owners: map[string]map[int32]int32{}, topics: map[string]int32{}}
}

// partitionEpoch returns the epoch of the member that has a partition, or -1.
func (g *consumerGroup) partitionEpoch(topic string, p int32) int32 {
	if e, ok := g.owners[topic][p]; ok {
		return e
	}
	return -1
}

// setOwnership records a member's partitions (assigned and pending
// revocation) at its epoch, replacing what it had before.
func (g *consumerGroup) setOwnership(before, after *memberAssignment) {
	if before != nil {
		for _, ps := range []partitions{before.assigned, before.pendingRevocation} {
			for t, list := range ps {
				for _, p := range list {
					delete(g.owners[t], p)
				}
			}
		}
	}
	if after != nil {
		for _, ps := range []partitions{after.assigned, after.pendingRevocation} {
			for t, list := range ps {
				if g.owners[t] == nil {
					g.owners[t] = map[int32]int32{}
				}
				for _, p := range list {
					g.owners[t][p] = after.epoch
				}
			}
		}
	}
}

// ConsumerGroupHeartbeat handles a ConsumerGroupHeartbeat request.
func (c *Coordinator) ConsumerGroupHeartbeat(id RequestID, req ConsumerGroupHeartbeatRequest) {
	resp, err := c.consumerHeartbeat(req)
	if err != nil {
		resp = &ConsumerGroupHeartbeatResponse{MemberID: req.MemberID, MemberEpoch: req.MemberEpoch, Err: err}
	}
	resp.ID = id
	c.syncConsumerGroup(req.GroupID)
	c.respond(resp)
}

func validConsumerHeartbeat(req ConsumerGroupHeartbeatRequest) error {
	bad := func(why string) error { return errorf(ErrInvalidRequest, "group %q: %s", req.GroupID, why) }
	switch {
	case req.MemberEpoch > 0 || req.MemberEpoch == LeaveMemberEpoch:
		if req.MemberID == "" {
			return bad("member id can't be empty")
		}
	case req.MemberEpoch == JoinMemberEpoch:
		switch {
		case req.RebalanceTimeout <= 0:
			return bad("rebalance timeout must be given when joining")
		case req.Owned == nil || len(req.Owned.Partitions) > 0:
			return bad("owned partitions must be empty when joining")
		case len(req.SubscribedTopicNames) == 0 && (req.SubscribedTopicRegex == nil || *req.SubscribedTopicRegex == ""):
			return bad("subscribed topic names or a topic regex must be given when joining")
		}
	case req.MemberEpoch == StaticLeaveMemberEpoch:
		if req.MemberID == "" || req.InstanceID == "" {
			return bad("a static member leaving must give its member id and instance id")
		}
	default:
		return bad("member epoch is invalid")
	}
	if req.SubscribedTopicRegex != nil {
		if _, err := compileTopicRegex(*req.SubscribedTopicRegex); err != nil {
			return errorf(ErrInvalidRegularExpression, "group %q: subscribed topic regex %q: %v", req.GroupID, *req.SubscribedTopicRegex, err)
		}
	}
	if req.ServerAssignor != "" && consumerAssignor(req.ServerAssignor) == nil {
		return errorf(ErrUnsupportedAssignor, "group %q: server assignor %q is not supported", req.GroupID, req.ServerAssignor)
	}
	return nil
}

func consumerAssignor(name string) assign.Assignor {
	for _, a := range consumerAssignors {
		if a.Name() == name {
			return a
		}
	}
	return nil
}

func (c *Coordinator) consumerHeartbeat(req ConsumerGroupHeartbeatRequest) (*ConsumerGroupHeartbeatResponse, error) {
	if err := checkGroupID(req.GroupID); err != nil {
		return nil, err
	}
	if err := validConsumerHeartbeat(req); err != nil {
		return nil, err
	}
	if _, err := c.group(req.GroupID); err != nil {
		return nil, err
	}
	g, err := c.consumerGroupFor(req)
	if err != nil {
		return nil, err
	}
	join := req.MemberEpoch == JoinMemberEpoch
	if c.cfg.MaxSize > 0 && len(g.members) >= c.cfg.MaxSize && g.byID[req.MemberID] == nil {
		return nil, errorf(ErrGroupMaxSizeReached, "group %q already has %d members", g.id, c.cfg.MaxSize)
	}
	switch req.MemberEpoch {
	case LeaveMemberEpoch, StaticLeaveMemberEpoch:
		return c.consumerLeave(g, req)
	}
	if req.MemberID == "" {
		req.MemberID = c.newUUID()
	}
	m, err := c.consumerMember(g, req)
	if err != nil {
		return nil, err
	}
	before := m.memberAssignment
	if err := c.updateConsumerGroup(g, m.update(req)); err != nil {
		return nil, err
	}
	var owned partitions
	if req.Owned != nil {
		owned = partitions(req.Owned.Partitions)
		if owned == nil {
			owned = partitions{}
		}
	}
	if err := c.reconcileConsumer(g, m, owned); err != nil {
		return nil, err
	}
	c.scheduleConsumerSession(g, m)
	resp := &ConsumerGroupHeartbeatResponse{MemberID: m.id, MemberEpoch: m.epoch, HeartbeatInterval: c.cfg.ConsumerHeartbeatInterval}
	full := join || req.RebalanceTimeout > 0 && req.SubscribedTopicNames != nil && req.Owned != nil
	if full || !maps.EqualFunc(before.assigned, m.assigned, slices.Equal) {
		resp.Assignment = &Assignment{Partitions: map[string][]int32(clonePartitions(m.assigned))}
	}
	return resp, nil
}

// consumerGroupFor returns the consumer group a heartbeat is for: a join
// creates it, replacing an Empty classic group of that id, or converts a
// classic group with members (migrate.go).
func (c *Coordinator) consumerGroupFor(req ConsumerGroupHeartbeatRequest) (*consumerGroup, error) {
	join := req.MemberEpoch == JoinMemberEpoch
	classic := c.groups[req.GroupID]
	if classic != nil && !(classic.is(Empty) && len(classic.pending) == 0) {
		switch {
		case !join:
			return nil, errorf(ErrGroupIDNotFound, "group %q is a classic group", req.GroupID)
		case req.InstanceID != "" && classic.static[req.InstanceID] != "":
			// The converted group would refuse the join (its member of
			// that instance id has not left), and Kafka drops the
			// conversion with it.
			return nil, errorf(ErrUnreleasedInstanceID, "group %q: instance id %q is still used by member %q",
				req.GroupID, req.InstanceID, classic.static[req.InstanceID])
		}
		return c.upgrade(classic)
	}
	if g := c.consumerGroups[req.GroupID]; g != nil {
		return g, nil
	}
	if !join {
		return nil, errorf(ErrGroupIDNotFound, "group %q does not exist", req.GroupID)
	}
	if classic != nil {
		// An Empty classic group becomes a consumer group; its offsets
		// stay.
		c.removeGroup(classic)
	}
	g := newConsumerGroup(req.GroupID)
	c.consumerGroups[req.GroupID] = g
	return g, nil
}

// updateConsumerGroup moves the group epoch on when a member's subscription
// changed (bump) or the subscribed topics did, and computes the target
// assignment of a new group epoch.
func (c *Coordinator) updateConsumerGroup(g *consumerGroup, bump bool) error {
	if topics := c.subscribedTopics(g); !maps.Equal(g.topics, topics) {
		g.topics = topics
		bump = true
	}
	if bump {
		g.epoch++
	}
	if g.epoch > g.targetEpoch {
		return c.computeTarget(g)
	}
	return nil
}

// reconcileConsumer moves a member that is not at its target towards it,
// given what it reports owning (nil: not reported); a member this version
// cannot reconcile is fenced.
func (c *Coordinator) reconcileConsumer(g *consumerGroup, m *consumerMember, owned partitions) error {
	if m.state == memberStable && m.epoch == g.targetEpoch {
		return nil
	}
	next, err := reconcile(m.memberAssignment, g.targetEpoch, g.target[m.id], g.partitionEpoch, owned)
	if err != nil {
		c.fenceConsumer(g, m)
		return err
	}
	changed := !next.equal(m.memberAssignment)
	g.setOwnership(&m.memberAssignment, &next)
	m.memberAssignment = next
	switch {
	case !changed:
		// The revocation deadline runs from when it was asked for.
	case m.state == memberUnrevokedPartitions:
		c.scheduleRevocation(g, m)
	default:
		c.timers.cancel(timerKey{timerRebalance, g.id, m.id})
	}
	return nil
}

func clonePartitions(p partitions) partitions {
	out := partitions{}
	for t, ps := range p {
		out[t] = slices.Clone(ps)
	}
	return out
}

// consumerMember finds or creates the heartbeat's member, checking its
// epoch and static identity (getOrMaybeSubscribe{Dynamic,Static}
// ConsumerGroupMember).
func (c *Coordinator) consumerMember(g *consumerGroup, req ConsumerGroupHeartbeatRequest) (*consumerMember, error) {
	join := req.MemberEpoch == JoinMemberEpoch
	if req.InstanceID != "" {
		existing := g.byID[g.static[req.InstanceID]]
		switch {
		case join && existing == nil:
		case join && existing.epoch != StaticLeaveMemberEpoch:
			return nil, errorf(ErrUnreleasedInstanceID, "group %q: instance id %q is still used by member %q", g.id, req.InstanceID, existing.id)
		case join:
			// The static member comes back: a new member id takes the old
			// one's place, target and assignment, from epoch 0.
			m := *existing
			m.id, m.epoch, m.prevEpoch = req.MemberID, 0, 0
			target := g.target[existing.id]
			c.removeConsumer(g, existing, false)
			g.target[m.id] = target
			c.addConsumer(g, &m)
			return &m, nil
		case existing == nil:
			return nil, errorf(ErrUnknownMemberID, "group %q: instance id %q is unknown", g.id, req.InstanceID)
		case existing.id != req.MemberID:
			return nil, errorf(ErrFencedInstanceID, "group %q: instance id %q belongs to member %q", g.id, req.InstanceID, existing.id)
		}
	}
	m := g.byID[req.MemberID]
	if m != nil && join {
		// A member rejoins after it was fenced, or after it lost track of
		// its epoch: it starts over as a new member. Kafka's coordinator
		// (as of its 2024 code) fences such a join again instead.
		c.fenceConsumer(g, m)
		m = nil
	}
	if m == nil {
		if !join {
			return nil, errorf(ErrUnknownMemberID, "group %q: unknown member id %q", g.id, req.MemberID)
		}
		m = &consumerMember{id: req.MemberID, instanceID: req.InstanceID}
		c.addConsumer(g, m)
		return m, nil
	}
	var owned partitions
	if req.Owned != nil {
		owned = req.Owned.Partitions
	}
	switch {
	case req.MemberEpoch > m.epoch:
		return nil, errorf(ErrFencedMemberEpoch, "group %q: member %q sent epoch %d, ahead of its epoch %d", g.id, m.id, req.MemberEpoch, m.epoch)
	case req.MemberEpoch < m.epoch && (req.MemberEpoch != m.prevEpoch || !subset(owned, m.assigned)):
		// The previous epoch is accepted from a member that owns no more
		// than it is assigned: the response that moved it on may be lost.
		return nil, errorf(ErrFencedMemberEpoch, "group %q: member %q sent epoch %d, behind its epoch %d", g.id, m.id, req.MemberEpoch, m.epoch)
	}
	return m, nil
}

// subset reports whether every owned partition is assigned; not reporting
// what one owns is not a subset (GroupMetadataManager.isSubset).
func subset(owned, assigned partitions) bool {
	if owned == nil {
		return false
	}
	for t, ps := range owned {
		for _, p := range ps {
			if !slices.Contains(assigned[t], p) {
				return false
			}
		}
	}
	return true
}

// update applies the heartbeat's changed fields and reports whether the
// group epoch must move (a new member or a new subscription).
func (m *consumerMember) update(req ConsumerGroupHeartbeatRequest) bool {
	if req.InstanceID != "" {
		m.instanceID = req.InstanceID
	}
	if req.RackID != "" {
		m.rackID = req.RackID
	}
	if req.RebalanceTimeout > 0 {
		m.rebalanceTimeoutMs = int32(req.RebalanceTimeout.Milliseconds())
	}
	if req.ServerAssignor != "" {
		m.assignor = req.ServerAssignor
	}
	changed := false
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != m.regex.String() {
		m.regex.set(*req.SubscribedTopicRegex)
		changed = true
	}
	if req.SubscribedTopicNames != nil {
		topics := slices.Sorted(slices.Values(req.SubscribedTopicNames))
		if !slices.Equal(topics, m.topics) {
			m.topics = topics
			changed = true
		}
	}
	return changed
}

// subscribedTopics returns the partition counts of the topics the members
// subscribe to that exist, matching the members' regular expressions
// against the topics first.
func (c *Coordinator) subscribedTopics(g *consumerGroup) map[string]int32 {
	c.resolveRegexes(g)
	out := map[string]int32{}
	for _, m := range g.members {
		for _, t := range m.subscription() {
			if n := c.partitions(t); n > 0 {
				out[t] = n
			}
		}
	}
	return out
}

func (c *Coordinator) partitions(topic string) int32 {
	if c.cfg.Partitions == nil {
		return 0
	}
	return c.cfg.Partitions(topic)
}

// computeTarget computes the target assignment of the group epoch with the
// assignor most members ask for (ties to the earlier in consumerAssignors),
// keeping each member's current target as what it owns, for stickiness.
func (c *Coordinator) computeTarget(g *consumerGroup) error {
	a := g.preferredAssignor()
	members := make([]assign.Member, len(g.members))
	for i, m := range g.members {
		members[i] = assign.Member{ID: m.id, InstanceID: m.instanceID, Rack: m.rackID, Topics: m.subscription(),
			Owned: g.target[m.id], Generation: g.targetEpoch}
	}
	topics := map[string]assign.Topic{}
	for t, n := range g.topics {
		topics[t] = assign.Topic{Partitions: n}
	}
	plan, err := a.Assign(members, topics)
	if err != nil {
		return errorf(ErrUnknownServerError, "group %q: assignor %s: %v", g.id, a.Name(), err)
	}
	g.target = map[string]partitions{}
	for id, p := range plan {
		g.target[id] = partitions(p)
	}
	g.targetEpoch = g.epoch
	return nil
}

func (c *Coordinator) addConsumer(g *consumerGroup, m *consumerMember) {
	g.members = append(g.members, m)
	g.byID[m.id] = m
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	g.setOwnership(nil, &m.memberAssignment)
}

// removeConsumer removes a member and what it has; bump moves the group
// epoch so that its partitions are assigned again.
func (c *Coordinator) removeConsumer(g *consumerGroup, m *consumerMember, bump bool) {
	g.setOwnership(&m.memberAssignment, nil)
	g.members = slices.DeleteFunc(g.members, func(x *consumerMember) bool { return x == m })
	delete(g.byID, m.id)
	delete(g.target, m.id)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	c.cancelConsumerTimers(g, m)
	if bump {
		g.epoch++
	}
}

// fenceConsumer removes a member that missed its session or rebalance
// timeout, or whose state this version cannot reconcile.
func (c *Coordinator) fenceConsumer(g *consumerGroup, m *consumerMember) {
	c.removeConsumer(g, m, true)
	g.topics = c.subscribedTopics(g)
}

// scheduleRevocation gives a member that must revoke partitions its
// rebalance timeout to do so, from now; a member still at that epoch and
// state then is fenced.
func (c *Coordinator) scheduleRevocation(g *consumerGroup, m *consumerMember) {
	epoch := m.epoch
	c.timers.schedule(timerKey{timerRebalance, g.id, m.id}, c.now+int64(m.rebalanceTimeoutMs), func() {
		if g.byID[m.id] == m && m.epoch == epoch && m.state == memberUnrevokedPartitions {
			c.leaveConsumer(g, m)
		}
	})
}

// scheduleConsumerSession (re)arms a member's session timer: the
// group's session timeout, or the one a member speaking the classic
// protocol asked for in its JoinGroup.
func (c *Coordinator) scheduleConsumerSession(g *consumerGroup, m *consumerMember) {
	timeout := durationMs(DefaultConsumerSessionTimeout)
	if m.classic != nil {
		timeout = int64(m.classic.SessionTimeoutMs)
	}
	c.scheduleConsumerTimer(g, m, timerHeartbeat, timeout)
}

// scheduleConsumerTimer arms a member's timer of kind to remove the member
// after timeoutMs, if it is still in the group then.
func (c *Coordinator) scheduleConsumerTimer(g *consumerGroup, m *consumerMember, kind timerKind, timeoutMs int64) {
	c.timers.schedule(timerKey{kind, g.id, m.id}, c.now+timeoutMs, func() {
		if g.byID[m.id] == m {
			c.leaveConsumer(g, m)
		}
	})
}

// cancelConsumerTimers stops every timer of a member.
func (c *Coordinator) cancelConsumerTimers(g *consumerGroup, m *consumerMember) {
	for _, kind := range []timerKind{timerHeartbeat, timerRebalance, timerJoin, timerSync} {
		c.timers.cancel(timerKey{kind, g.id, m.id})
	}
}

// consumerLeave handles epochs -1 (leave) and -2 (a static member's
// temporary leave, which keeps its assignment until its session expires).
func (c *Coordinator) consumerLeave(g *consumerGroup, req ConsumerGroupHeartbeatRequest) (*ConsumerGroupHeartbeatResponse, error) {
	m := g.byID[req.MemberID]
	if req.InstanceID != "" {
		existing := g.byID[g.static[req.InstanceID]]
		switch {
		case existing == nil:
			return nil, errorf(ErrUnknownMemberID, "group %q: instance id %q is unknown", g.id, req.InstanceID)
		case existing.id != req.MemberID:
			return nil, errorf(ErrFencedInstanceID, "group %q: instance id %q belongs to member %q", g.id, req.InstanceID, existing.id)
		}
	}
	if m == nil {
		return nil, errorf(ErrUnknownMemberID, "group %q: unknown member id %q", g.id, req.MemberID)
	}
	if req.MemberEpoch == StaticLeaveMemberEpoch {
		next := m.memberAssignment
		next.epoch, next.pendingRevocation = StaticLeaveMemberEpoch, nil
		g.setOwnership(&m.memberAssignment, &next)
		m.memberAssignment = next
		c.timers.cancel(timerKey{timerRebalance, g.id, m.id})
	} else {
		c.leaveConsumer(g, m)
	}
	return &ConsumerGroupHeartbeatResponse{MemberID: m.id, MemberEpoch: req.MemberEpoch}, nil
}

// consumerGroupState is the state Kafka derives for a consumer group
// (ConsumerGroup.maybeUpdateGroupState).
func (g *consumerGroup) state() string {
	switch {
	case len(g.members) == 0:
		return "Empty"
	case g.epoch > g.targetEpoch:
		return "Assigning"
	}
	for _, m := range g.members {
		if m.epoch != g.targetEpoch || m.state != memberStable {
			return "Reconciling"
		}
	}
	return "Stable"
}

// validateCommit applies a consumer group's rules for who may commit
// (ConsumerGroup.validateOffsetCommit): anyone while it has no members,
// else a member at its current epoch, which for a plain commit needs
// OffsetCommit v9 or later.
func (g *consumerGroup) validateCommit(w committer, txn bool) error {
	if w.generation < 0 && len(g.members) == 0 {
		return nil
	}
	m := g.byID[w.memberID]
	switch {
	case m == nil:
		return errorf(ErrUnknownMemberID, "group %q: unknown member id %q", g.id, w.memberID)
	case !txn && m.classic == nil && w.version < OffsetCommitVersionGroupIDNotFound:
		return errorf(ErrUnsupportedVersion, "group %q: a consumer group member commits with OffsetCommit v9 or later, not v%d", g.id, w.version)
	case w.generation != m.epoch && (txn || m.classic != nil):
		return errorf(ErrIllegalGeneration, "group %q: member %q is at epoch %d, not %d", g.id, m.id, m.epoch, w.generation)
	case w.generation != m.epoch:
		return errorf(ErrStaleMemberEpoch, "group %q: member %q is at epoch %d, not %d", g.id, m.id, m.epoch, w.generation)
	}
	return nil
}
