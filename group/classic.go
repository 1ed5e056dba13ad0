package group

import (
	"bytes"
	"slices"
	"time"
)

// State is the state of a classic group (Kafka's ClassicGroupState).
type State uint8

// The states of a classic group and, in ValidPrevious, the states each may be
// entered from (ClassicGroupState.validPreviousStates).
const (
	Empty               State = iota // no members; offsets may still exist
	PreparingRebalance               // waiting for members to (re)join
	CompletingRebalance              // waiting for the leader's assignment
	Stable                           // assignment handed out; heartbeats keep members
	Dead                             // unloaded or removed; answers COORDINATOR_NOT_AVAILABLE
)

func (s State) String() string {
	switch s {
	case Empty:
		return "Empty"
	case PreparingRebalance:
		return "PreparingRebalance"
	case CompletingRebalance:
		return "CompletingRebalance"
	case Stable:
		return "Stable"
	case Dead:
		return "Dead"
	}
	return "State(?)"
}

// validPrevious reports whether a group may move from s to next.
func (next State) validPrevious(s State) bool {
	switch next {
	case Empty:
		return s == PreparingRebalance
	case PreparingRebalance:
		return s == Stable || s == CompletingRebalance || s == Empty
	case CompletingRebalance:
		return s == PreparingRebalance
	case Stable:
		return s == CompletingRebalance
	case Dead:
		return true
	}
	return false
}

// consumerProtocolType is the protocol type of Kafka's consumers.
const consumerProtocolType = "consumer"

// classicGroup is one classic group (Kafka's ClassicGroup). Members are kept
// in the order they joined: Kafka picks a new leader and lists members in
// java.util.HashMap order, which is arbitrary; join order makes our choices
// reproducible.
type classicGroup struct {
	id           string
	state        State
	prevState    State
	stateTime    int64  // when state was entered, milliseconds; -1 unknown
	protocolType string // "" until the first member joins (or for a simple group)
	protocolName string // "" when no generation is running
	generation   int32
	leader       string // "" when none

	members  []*member          // in join order
	byID     map[string]*member // member id -> member
	static   map[string]string  // group.instance.id -> member id
	pending  map[string]bool    // KIP-394 member ids handed out but not yet joined
	syncWait map[string]bool    // members that got a JoinGroup response and owe a SyncGroup

	awaitingJoin   int            // members with a parked JoinGroup
	supported      map[string]int // protocol name -> members supporting it
	newMemberAdded bool           // a member joined during the initial delay

	// subscribed holds the topics the members of a consumer group
	// subscribe to, when subscribedKnown; it decides which offsets expire.
	subscribed      map[string]bool
	subscribedKnown bool
}

// member is one member of a classic group (Kafka's ClassicGroupMember).
type member struct {
	id, instanceID       string
	clientID, clientHost string
	rebalanceTimeoutMs   int32
	sessionTimeoutMs     int32
	protocolType         string
	protocols            []Protocol // in the member's order of preference
	assignment           []byte

	joinParked bool // a JoinGroup waits for the join phase to complete
	joinID     RequestID
	syncParked bool // a SyncGroup waits for the leader's assignment
	syncID     RequestID
	isNew      bool // joined during this rebalance and has not yet had a JoinGroup response
}

func newClassicGroup(id string, state State, now int64) *classicGroup {
	return &classicGroup{
		id: id, state: state, prevState: Dead, stateTime: now,
		byID: map[string]*member{}, static: map[string]string{},
		pending: map[string]bool{}, syncWait: map[string]bool{},
		supported: map[string]int{},
	}
}

func (g *classicGroup) is(s State) bool { return g.state == s }

func (g *classicGroup) transition(to State, now int64) {
	if !to.validPrevious(g.state) {
		// A transition the state table forbids is a bug of this package,
		// not of its input: every caller checks the state first.
		panic("group " + g.id + ": illegal transition " + g.state.String() + " -> " + to.String())
	}
	g.prevState, g.state, g.stateTime = g.state, to, now
}

// canRebalance reports whether a rebalance may start now.
func (g *classicGroup) canRebalance() bool { return PreparingRebalance.validPrevious(g.state) }

func (g *classicGroup) isLeader(id string) bool { return g.leader != "" && g.leader == id }

func (g *classicGroup) add(m *member) {
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	if g.leader == "" {
		g.leader = m.id
	}
	g.members = append(g.members, m)
	g.byID[m.id] = m
	g.countProtocols(m, 1)
	if m.joinParked {
		g.awaitingJoin++
	}
	delete(g.pending, m.id)
}

// remove removes a member or a pending member id. A removed leader hands
// leadership to the earliest-joined remaining member.
func (g *classicGroup) remove(id string) {
	if m, ok := g.byID[id]; ok {
		g.countProtocols(m, -1)
		if m.joinParked {
			g.awaitingJoin--
		}
		if m.instanceID != "" {
			delete(g.static, m.instanceID)
		}
		delete(g.byID, id)
		g.members = slices.DeleteFunc(g.members, func(x *member) bool { return x == m })
	}
	if g.isLeader(id) {
		g.leader = ""
		if len(g.members) > 0 {
			g.leader = g.members[0].id
		}
	}
	delete(g.pending, id)
	delete(g.syncWait, id)
}

func (g *classicGroup) countProtocols(m *member, delta int) {
	for _, p := range m.protocols {
		g.supported[p.Name] += delta
		if g.supported[p.Name] == 0 {
			delete(g.supported, p.Name)
		}
	}
}

// replaceStatic gives a static member a new member id, keeping its place,
// leadership and assignment (ClassicGroup.replaceStaticMember). The caller
// answers the old id's parked requests first.
func (g *classicGroup) replaceStatic(old *member, newID string) *member {
	m := *old
	m.id = newID
	m.joinParked, m.syncParked, m.isNew = false, false, false
	if old.joinParked {
		g.awaitingJoin--
	}
	i := slices.Index(g.members, old)
	g.members[i] = &m
	delete(g.byID, old.id)
	g.byID[newID] = &m
	g.static[m.instanceID] = newID
	if g.isLeader(old.id) {
		g.leader = newID
	}
	return &m
}

// hasAllJoined reports whether every member and pending member has joined.
func (g *classicGroup) hasAllJoined() bool {
	return len(g.members) == g.awaitingJoin && len(g.pending) == 0
}

// rebalanceTimeoutMs is the largest rebalance timeout of the members.
func (g *classicGroup) rebalanceTimeoutMs() int64 {
	var t int32
	for _, m := range g.members {
		t = max(t, m.rebalanceTimeoutMs)
	}
	return int64(t)
}

// supports reports whether a member of protocolType with these protocols
// may join: any protocol in an Empty group, else the same protocol type and
// at least one protocol every member supports (ClassicGroup.supportsProtocols).
func (g *classicGroup) supports(protocolType string, protocols []Protocol) bool {
	if g.is(Empty) {
		return protocolType != "" && len(protocols) > 0
	}
	if g.protocolType != protocolType {
		return false
	}
	for _, p := range protocols {
		if g.supported[p.Name] == len(g.members) {
			return true
		}
	}
	return false
}

// selectProtocol runs Kafka's vote: among the protocols every member
// supports, each member votes for the first in its own order, and the most
// votes win (ClassicGroup.selectProtocol). Kafka breaks ties by HashMap
// order; we break them by the vote of the earliest-joined member.
func (g *classicGroup) selectProtocol() string {
	votes := map[string]int{}
	var order []string // protocols in the order they got their first vote
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.supported[p.Name] == len(g.members) {
				if votes[p.Name] == 0 {
					order = append(order, p.Name)
				}
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, name := range order {
		if best == "" || votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

// metadata returns the member's metadata for a protocol.
func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// matches reports whether protocols are exactly the member's, in order.
func (m *member) matches(protocols []Protocol) bool {
	return slices.EqualFunc(m.protocols, protocols, func(a, b Protocol) bool {
		return a.Name == b.Name && bytes.Equal(a.Metadata, b.Metadata)
	})
}

// hasSatisfiedHeartbeat reports whether a session expiry spares the member:
// members parked in a join or sync are waiting on the group, not gone,
// unless they are new (ClassicGroupMember.hasSatisfiedHeartbeat).
func (m *member) hasSatisfiedHeartbeat() bool {
	return !m.isNew && (m.joinParked || m.syncParked)
}

// metadataValue is the group as persisted (GroupCoordinatorRecordHelpers.
// newGroupMetadataRecord).
func (g *classicGroup) metadataValue() GroupMetadataValue {
	v := GroupMetadataValue{
		ProtocolType:          g.protocolType,
		Generation:            g.generation,
		Protocol:              g.protocolName,
		Leader:                g.leader,
		CurrentStateTimestamp: g.stateTime,
	}
	for _, m := range g.members {
		v.Members = append(v.Members, MemberMetadata{
			MemberID:         m.id,
			GroupInstanceID:  m.instanceID,
			ClientID:         m.clientID,
			ClientHost:       m.clientHost,
			RebalanceTimeout: m.rebalanceTimeoutMs,
			SessionTimeout:   m.sessionTimeoutMs,
			Subscription:     nonNil(m.metadata(g.protocolName)),
			Assignment:       nonNil(m.assignment),
		})
	}
	return v
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// loadClassicGroup rebuilds a group from its persisted value
// (GroupMetadataManager.replay(GroupMetadataKey, GroupMetadataValue)): Stable
// with its members, or Empty.
func loadClassicGroup(id string, v GroupMetadataValue) *classicGroup {
	state := Empty
	if len(v.Members) > 0 {
		state = Stable
	}
	g := newClassicGroup(id, state, v.CurrentStateTimestamp)
	g.generation = v.Generation
	g.protocolName = v.Protocol
	g.leader = v.Leader
	for _, mm := range v.Members {
		rebalance := mm.RebalanceTimeout
		if rebalance == -1 {
			rebalance = mm.SessionTimeout
		}
		g.add(&member{
			id: mm.MemberID, instanceID: mm.GroupInstanceID,
			clientID: mm.ClientID, clientHost: mm.ClientHost,
			rebalanceTimeoutMs: rebalance, sessionTimeoutMs: mm.SessionTimeout,
			protocolType: v.ProtocolType,
			protocols:    []Protocol{{Name: v.Protocol, Metadata: mm.Subscription}},
			assignment:   mm.Assignment,
		})
	}
	g.protocolType = v.ProtocolType
	g.computeSubscribed()
	return g
}

// GroupDescription is a classic group as DescribeGroups shows it.
type GroupDescription struct {
	State        State
	ProtocolType string
	Protocol     string // "" unless CompletingRebalance or Stable
	Generation   int32
	Leader       string
	Members      []MemberDescription // in join order
}

// MemberDescription is one member of a GroupDescription. Metadata is the
// member's for the group's protocol.
type MemberDescription struct {
	MemberID        string
	GroupInstanceID string
	ClientID        string
	ClientHost      string
	Metadata        []byte
	Assignment      []byte
	// SessionDeadline is when the coordinator removes the member unless
	// it heartbeats (or joins) first; zero while no session timer runs.
	SessionDeadline time.Time
}

// DescribeGroup returns a classic group's state and members; ok is false
// when no classic group has that id.
func (c *Coordinator) DescribeGroup(groupID string) (d GroupDescription, ok bool) {
	g := c.groups[groupID]
	if g == nil {
		return d, false
	}
	d = GroupDescription{State: g.state, ProtocolType: g.protocolType, Protocol: g.protocolName, Generation: g.generation, Leader: g.leader}
	for _, m := range g.members {
		md := MemberDescription{MemberID: m.id, GroupInstanceID: m.instanceID, ClientID: m.clientID,
			ClientHost: m.clientHost, Metadata: m.metadata(g.protocolName), Assignment: m.assignment}
		if tm := c.timers.byKey[timerKey{timerHeartbeat, groupID, m.id}]; tm != nil {
			md.SessionDeadline = time.UnixMilli(tm.deadline)
		}
		d.Members = append(d.Members, md)
	}
	return d, true
}
