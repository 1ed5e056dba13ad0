package group

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// harness drives a Coordinator as its owner would: it stamps requests with
// ids, appends each Ready's records to an in-memory log and keeps the
// responses by request id.
type harness struct {
	t      testing.TB
	c      *Coordinator
	now    time.Time
	nextID RequestID
	log    []Record
	resps  map[RequestID]Response
	// markers holds the transaction markers of the log, by offset; their
	// place in log is an empty Record.
	markers map[int]txnMarker
}

type txnMarker struct {
	producerID int64
	commit     bool
}

// marker appends a transaction marker to the log and reports it.
func (h *harness) marker(producerID int64, commit bool) {
	h.t.Helper()
	require.NoError(h.t, h.c.ReplayTxnMarker(int64(len(h.log)), producerID, commit))
	h.markers[len(h.log)] = txnMarker{producerID, commit}
	h.log = append(h.log, Record{})
}

// replayInto replays the harness's log from offset from into c.
func (h *harness) replayInto(c *Coordinator, from int) {
	h.t.Helper()
	for i := from; i < len(h.log); i++ {
		if m, ok := h.markers[i]; ok {
			require.NoError(h.t, c.ReplayTxnMarker(int64(i), m.producerID, m.commit))
		} else {
			require.NoError(h.t, c.Replay(int64(i), h.log[i]))
		}
	}
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	c, err := NewCoordinator(cfg, epoch)
	require.NoError(t, err)
	c.Loaded()
	return &harness{t: t, c: c, now: epoch, resps: map[RequestID]Response{}, markers: map[int]txnMarker{}}
}

// noDelay is a config without the initial rebalance delay, so that a
// group's first generation completes on the next tick.
var noDelay = Config{InitialRebalanceDelay: -1}

func (h *harness) drain() {
	rd := h.c.Ready()
	h.log = append(h.log, rd.Records...)
	for _, r := range rd.Responses {
		_, dup := h.resps[r.Request()]
		require.False(h.t, dup, "request %d answered twice", r.Request())
		h.resps[r.Request()] = r
	}
}

// advance moves the clock on and fires the timers due.
func (h *harness) advance(d time.Duration) {
	h.now = h.now.Add(d)
	h.c.Tick(h.now)
	h.drain()
}

func (h *harness) id() RequestID {
	h.nextID++
	return h.nextID
}

func (h *harness) join(req JoinGroupRequest) RequestID {
	id := h.id()
	h.c.JoinGroup(id, req)
	h.drain()
	return id
}

func (h *harness) sync(req SyncGroupRequest) RequestID {
	id := h.id()
	h.c.SyncGroup(id, req)
	h.drain()
	return id
}

func (h *harness) heartbeat(req HeartbeatRequest) error {
	id := h.id()
	h.c.Heartbeat(id, req)
	h.drain()
	return h.resps[id].(*HeartbeatResponse).Err
}

func (h *harness) leave(req LeaveGroupRequest) *LeaveGroupResponse {
	id := h.id()
	h.c.LeaveGroup(id, req)
	h.drain()
	return h.resps[id].(*LeaveGroupResponse)
}

func (h *harness) commit(req OffsetCommitRequest) *OffsetCommitResponse {
	id := h.id()
	h.c.OffsetCommit(id, req)
	h.drain()
	return h.resps[id].(*OffsetCommitResponse)
}

func (h *harness) fetch(req OffsetFetchRequest) *OffsetFetchResponse {
	id := h.id()
	h.c.OffsetFetch(id, req)
	h.drain()
	return h.resps[id].(*OffsetFetchResponse)
}

// joined returns the response to a JoinGroup, or nil while it is parked.
func (h *harness) joined(id RequestID) *JoinGroupResponse {
	r, ok := h.resps[id]
	if !ok {
		return nil
	}
	return r.(*JoinGroupResponse)
}

// synced returns the response to a SyncGroup, or nil while it is parked.
func (h *harness) synced(id RequestID) *SyncGroupResponse {
	r, ok := h.resps[id]
	if !ok {
		return nil
	}
	return r.(*SyncGroupResponse)
}

func (h *harness) group(id string) *classicGroup {
	g := h.c.groups[id]
	require.NotNil(h.t, g, "group %q", id)
	return g
}

// joinReq is a consumer's JoinGroup with Kafka's client defaults for the
// timeouts (10 s session, 30 s rebalance in these tests).
func joinReq(group, memberID string) JoinGroupRequest {
	return JoinGroupRequest{
		Version: JoinVersionLatest, GroupID: group, MemberID: memberID, ClientID: "client", ClientHost: "/127.0.0.1",
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: []byte("sub-" + memberID)}},
	}
}

func staticJoinReq(group, memberID, instance string) JoinGroupRequest {
	r := joinReq(group, memberID)
	r.GroupInstanceID = instance
	return r
}

// newMember joins a dynamic member the KIP-394 way: a first join for the id,
// then the join with it, which is left parked. It returns the member id and
// the parked request.
func (h *harness) newMember(group string) (string, RequestID) {
	h.t.Helper()
	first := h.joined(h.join(joinReq(group, "")))
	require.ErrorIs(h.t, first.Err, ErrMemberIDRequired)
	return first.MemberID, h.join(joinReq(group, first.MemberID))
}

// stable builds a Stable group of n dynamic members with noDelay's
// timing and returns the member ids, leader first.
func (h *harness) stable(group string, n int) []string {
	h.t.Helper()
	ids := make([]string, n)
	reqs := make([]RequestID, n)
	for i := range ids {
		ids[i], reqs[i] = h.newMember(group)
	}
	h.advance(0) // the initial delay
	g := h.group(group)
	require.Equal(h.t, CompletingRebalance, g.state)
	for i, id := range ids {
		r := h.joined(reqs[i])
		require.NotNil(h.t, r, "member %d parked", i)
		require.NoError(h.t, r.Err)
		if id == r.Leader {
			ids[0], ids[i] = ids[i], ids[0]
		}
	}
	h.syncAll(group, ids)
	require.Equal(h.t, Stable, g.state)
	return ids
}

// syncAll sends the followers' SyncGroups and then the leader's (ids[0]),
// which assigns "a-<member>" to every member.
func (h *harness) syncAll(group string, ids []string) {
	h.t.Helper()
	g := h.group(group)
	var asg []SyncGroupAssignment
	for _, id := range ids {
		asg = append(asg, SyncGroupAssignment{MemberID: id, Assignment: []byte("a-" + id)})
	}
	for _, id := range ids[1:] {
		h.sync(SyncGroupRequest{GroupID: group, GenerationID: g.generation, MemberID: id, GroupInstanceID: g.byID[id].instanceID})
	}
	h.sync(SyncGroupRequest{GroupID: group, GenerationID: g.generation, MemberID: ids[0], GroupInstanceID: g.byID[ids[0]].instanceID, Assignments: asg})
}

// records decodes the log.
func (h *harness) records() []Decoded {
	var out []Decoded
	for i, r := range h.log {
		if _, ok := h.markers[i]; ok {
			continue
		}
		d, err := Decode(r)
		require.NoError(h.t, err, "record %d", i)
		out = append(out, d)
	}
	return out
}

// lastGroupRecord returns the last GroupMetadata value written for a group
// (nil for a tombstone) and whether one was written.
func (h *harness) lastGroupRecord(group string) (*GroupMetadataValue, bool) {
	recs := h.records()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].GroupKey != nil && recs[i].GroupKey.Group == group {
			return recs[i].GroupValue, true
		}
	}
	return nil, false
}
