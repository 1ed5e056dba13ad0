package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
)

// A group's requests go to its coordinator, the node whose replica leads
// the group's offsets partition (GroupCoordinator): this node's Service
// directly, another's by a request over the Transport, whose answer's
// payload carries the response with its errors as Kafka's codes. A
// coordinator error Kafka's clients retry (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) makes the node
// look the coordinator up again and retry, until ctx ends.

// ConsumerGroupHeartbeat serves a member of a consumer group (KIP-848) at
// its group's coordinator, as group.Service.ConsumerGroupHeartbeat does:
// it joins (MemberEpoch 0), heartbeats, receives its assignment and
// leaves (MemberEpoch -1).
func (n *Node) ConsumerGroupHeartbeat(ctx context.Context, req group.ConsumerGroupHeartbeatRequest) (*group.ConsumerGroupHeartbeatResponse, error) {
	return askGroup(ctx, n, &consumerHeartbeatRequest{req})
}

// OffsetCommit commits a group's offsets at its coordinator, as
// group.Service.OffsetCommit does: a nil error and a nil Err per partition
// mean they are replicated.
func (n *Node) OffsetCommit(ctx context.Context, req group.OffsetCommitRequest) (*group.OffsetCommitResponse, error) {
	return askGroup(ctx, n, &offsetCommitRequest{req})
}

// OffsetFetch returns a group's committed offsets from its coordinator, as
// group.Service.OffsetFetch does.
func (n *Node) OffsetFetch(ctx context.Context, req group.OffsetFetchRequest) (*group.OffsetFetchResponse, error) {
	return askGroup(ctx, n, &offsetFetchRequest{req})
}

// groupRequest is a request of group.Service's that answers a response of
// type R.
type groupRequest[R any] interface {
	request
	groupID() string
	// run makes the request of a Service.
	run(ctx context.Context, s *group.Service) (R, error)
	// failure is the response's error for the whole request.
	failure(resp R) error
	encodeResponse(e *encoder, resp R)
	decodeResponse(d *decoder) R
}

// askGroup makes r at its group's coordinator, following the coordinator
// as it moves, until ctx ends or n closes (ErrClosed).
func askGroup[R any](ctx context.Context, n *Node, r groupRequest[R]) (R, error) {
	for {
		resp, err := askGroupOnce(ctx, n, r)
		if err != nil && ctx.Err() != nil {
			// The coordinator's error may be its answer to ctx's end.
			return resp, fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		failure := err
		if err == nil {
			failure = r.failure(resp)
		}
		if !errorsIsAny(failure, group.ErrNotCoordinator, group.ErrCoordinatorLoadInProgress, group.ErrCoordinatorNotAvailable) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			if err != nil {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return resp, err
		case <-n.closing:
			return resp, fmt.Errorf("%w: group %q: %w", ErrClosed, r.groupID(), failure)
		case <-time.After(n.cfg.RetryBackoff):
		}
	}
}

func askGroupOnce[R any](ctx context.Context, n *Node, r groupRequest[R]) (R, error) {
	var zero R
	switch c := n.GroupCoordinator(r.groupID()); c {
	case replica.NoNode:
		return zero, fmt.Errorf("%w: group %q has no live coordinator", group.ErrCoordinatorNotAvailable, r.groupID())
	case n.cfg.ID:
		return runGroup(ctx, n, r)
	default:
		call, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
		a, err := n.call(call, c, r)
		if err == nil {
			var resp R
			if resp, err = decodeGroupAnswer(a.Payload, r); err == nil {
				return resp, nil
			}
		}
		if errors.Is(err, ErrUnreachable) || call.Err() != nil && ctx.Err() == nil {
			// The coordinator's node is down, cut off or slower than
			// RequestTimeout: another may take over.
			return zero, fmt.Errorf("%w: group %q at node %d: %w", group.ErrCoordinatorNotAvailable, r.groupID(), c, err)
		}
		return zero, err
	}
}

// runGroup makes r at this node's coordinator. A Service closing (its
// node stopping) answers as a coordinator gone: another node takes over.
func runGroup[R any](ctx context.Context, n *Node, r groupRequest[R]) (R, error) {
	resp, err := r.run(ctx, n.Groups())
	if errors.Is(err, group.ErrServiceClosed) && !errors.Is(err, group.ErrNotCoordinator) {
		err = fmt.Errorf("%w: %w", group.ErrNotCoordinator, err)
	}
	return resp, err
}

// answerGroup answers r for another node: the Service's error, then the
// response if there was no error.
func answerGroup[R any](ctx context.Context, n *Node, r groupRequest[R]) []byte {
	resp, err := runGroup(ctx, n, r)
	return encodeGroupAnswer(r, resp, err)
}

func encodeGroupAnswer[R any](r groupRequest[R], resp R, err error) []byte {
	e := &encoder{}
	e.groupError(err)
	if err == nil {
		r.encodeResponse(e, resp)
	}
	return e.b
}

func decodeGroupAnswer[R any](payload []byte, r groupRequest[R]) (R, error) {
	var resp R
	d := &decoder{b: payload}
	err := d.remoteError()
	if err == nil {
		resp = r.decodeResponse(d)
	}
	if derr := d.finish(); derr != nil {
		var zero R
		return zero, fmt.Errorf("%w (the answer of group %q's coordinator)", derr, r.groupID())
	}
	return resp, err
}

// groupError encodes err as its Kafka code and message.
func (e *encoder) groupError(err error) { e.codedError(int64(kafkaerr.CodeOf(err)), err) }

// codedError encodes an error as code, which is 0 for nil, and its
// message.
func (e *encoder) codedError(code int64, err error) {
	e.int(code)
	if err != nil {
		e.string(err.Error())
	} else {
		e.string("")
	}
}

func (d *decoder) int16() int16 {
	v := d.int()
	if v != int64(int16(v)) {
		d.fail("a 16-bit integer")
		return 0
	}
	return int16(v)
}

func (e *encoder) duration(v time.Duration) { e.int(int64(v)) }
func (d *decoder) duration() time.Duration  { return time.Duration(d.int()) }

// optionalStrings encodes a list that may be nil, nil and empty apart.
func (e *encoder) optionalStrings(ss []string) {
	e.bool(ss != nil)
	if ss != nil {
		e.strings(ss)
	}
}

func (d *decoder) optionalStrings() []string {
	if !d.bool() {
		return nil
	}
	if ss := d.strings(); ss != nil {
		return ss
	}
	return []string{}
}

func (e *encoder) optionalString(s *string) {
	e.bool(s != nil)
	if s != nil {
		e.string(*s)
	}
}

func (d *decoder) optionalString() *string {
	if !d.bool() {
		return nil
	}
	s := d.string()
	return &s
}

func (e *encoder) int32s(vs []int32) {
	e.uint(uint64(len(vs)))
	for _, v := range vs {
		e.int(int64(v))
	}
}

func (d *decoder) int32s() []int32 {
	var vs []int32
	for range d.count(1) {
		vs = append(vs, d.int32())
	}
	return vs
}

// assignment encodes a consumer's assignment, which may be nil; its
// topics sorted.
func (e *encoder) assignment(a *group.Assignment) {
	e.bool(a != nil)
	if a == nil {
		return
	}
	e.uint(uint64(len(a.Partitions)))
	for _, t := range slices.Sorted(maps.Keys(a.Partitions)) {
		e.string(t)
		e.int32s(a.Partitions[t])
	}
	e.bool(a.UserData != nil)
	e.bytes(a.UserData)
}

// assignment decodes what assignment encoded; the partitions of one that
// is not nil are never a nil map.
func (d *decoder) assignment() *group.Assignment {
	if !d.bool() {
		return nil
	}
	n := d.count(2)
	a := &group.Assignment{Partitions: make(map[string][]int32, n)}
	for range n {
		t := d.string()
		a.Partitions[t] = d.int32s()
	}
	if d.bool() {
		a.UserData = d.bytes()
	} else {
		d.bytes()
	}
	return a
}

// consumerHeartbeatRequest is a ConsumerGroupHeartbeat for a group's
// coordinator.
type consumerHeartbeatRequest struct {
	group.ConsumerGroupHeartbeatRequest
}

func (*consumerHeartbeatRequest) kind() requestKind { return kindConsumerGroupHeartbeat }
func (r *consumerHeartbeatRequest) encode(e *encoder) {
	e.string(r.GroupID)
	e.string(r.MemberID)
	e.int(int64(r.MemberEpoch))
	e.string(r.InstanceID)
	e.string(r.RackID)
	e.duration(r.RebalanceTimeout)
	e.optionalStrings(r.SubscribedTopicNames)
	e.optionalString(r.SubscribedTopicRegex)
	e.string(r.ServerAssignor)
	e.assignment(r.Owned)
}
func (r *consumerHeartbeatRequest) decode(d *decoder) {
	r.GroupID, r.MemberID, r.MemberEpoch = d.string(), d.string(), d.int32()
	r.InstanceID, r.RackID, r.RebalanceTimeout = d.string(), d.string(), d.duration()
	r.SubscribedTopicNames, r.SubscribedTopicRegex = d.optionalStrings(), d.optionalString()
	r.ServerAssignor, r.Owned = d.string(), d.assignment()
}
func (r *consumerHeartbeatRequest) answer(ctx context.Context, n *Node) []byte {
	return answerGroup(ctx, n, r)
}
func (r *consumerHeartbeatRequest) groupID() string { return r.GroupID }
func (r *consumerHeartbeatRequest) run(ctx context.Context, s *group.Service) (*group.ConsumerGroupHeartbeatResponse, error) {
	return s.ConsumerGroupHeartbeat(ctx, r.ConsumerGroupHeartbeatRequest)
}
func (*consumerHeartbeatRequest) failure(resp *group.ConsumerGroupHeartbeatResponse) error {
	return resp.Err
}
func (*consumerHeartbeatRequest) encodeResponse(e *encoder, resp *group.ConsumerGroupHeartbeatResponse) {
	e.uint(uint64(resp.ID))
	e.groupError(resp.Err)
	e.string(resp.MemberID)
	e.int(int64(resp.MemberEpoch))
	e.duration(resp.HeartbeatInterval)
	e.assignment(resp.Assignment)
}
func (*consumerHeartbeatRequest) decodeResponse(d *decoder) *group.ConsumerGroupHeartbeatResponse {
	return &group.ConsumerGroupHeartbeatResponse{ID: group.RequestID(d.uint()), Err: d.remoteError(),
		MemberID: d.string(), MemberEpoch: d.int32(), HeartbeatInterval: d.duration(), Assignment: d.assignment()}
}

// offsetCommitRequest is an OffsetCommit for a group's coordinator.
type offsetCommitRequest struct {
	group.OffsetCommitRequest
}

func (*offsetCommitRequest) kind() requestKind { return kindOffsetCommit }
func (r *offsetCommitRequest) encode(e *encoder) {
	e.int(int64(r.Version))
	e.string(r.GroupID)
	e.int(int64(r.GenerationID))
	e.string(r.MemberID)
	e.string(r.GroupInstanceID)
	e.duration(r.Retention)
	e.uint(uint64(len(r.Topics)))
	for _, t := range r.Topics {
		e.string(t.Name)
		e.uint(uint64(len(t.Partitions)))
		for _, p := range t.Partitions {
			e.int(int64(p.Partition))
			e.int(p.Offset)
			e.int(int64(p.LeaderEpoch))
			e.string(p.Metadata)
		}
	}
}
func (r *offsetCommitRequest) decode(d *decoder) {
	r.Version, r.GroupID, r.GenerationID = d.int16(), d.string(), d.int32()
	r.MemberID, r.GroupInstanceID, r.Retention = d.string(), d.string(), d.duration()
	for range d.count(2) {
		t := group.OffsetCommitTopic{Name: d.string()}
		for range d.count(4) {
			t.Partitions = append(t.Partitions, group.OffsetCommitPartition{Partition: d.int32(), Offset: d.int(),
				LeaderEpoch: d.int32(), Metadata: d.string()})
		}
		r.Topics = append(r.Topics, t)
	}
}
func (r *offsetCommitRequest) answer(ctx context.Context, n *Node) []byte {
	return answerGroup(ctx, n, r)
}
func (r *offsetCommitRequest) groupID() string { return r.GroupID }
func (r *offsetCommitRequest) run(ctx context.Context, s *group.Service) (*group.OffsetCommitResponse, error) {
	return s.OffsetCommit(ctx, r.OffsetCommitRequest)
}
func (*offsetCommitRequest) failure(resp *group.OffsetCommitResponse) error { return resp.Err }
func (*offsetCommitRequest) encodeResponse(e *encoder, resp *group.OffsetCommitResponse) {
	e.uint(uint64(resp.ID))
	e.groupError(resp.Err)
	e.uint(uint64(len(resp.Topics)))
	for _, t := range resp.Topics {
		e.string(t.Name)
		e.uint(uint64(len(t.Partitions)))
		for _, p := range t.Partitions {
			e.int(int64(p.Partition))
			e.groupError(p.Err)
		}
	}
}
func (*offsetCommitRequest) decodeResponse(d *decoder) *group.OffsetCommitResponse {
	resp := &group.OffsetCommitResponse{ID: group.RequestID(d.uint()), Err: d.remoteError()}
	for range d.count(2) {
		t := group.TopicResult{Name: d.string()}
		for range d.count(3) {
			t.Partitions = append(t.Partitions, group.PartitionResult{Partition: d.int32(), Err: d.remoteError()})
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// offsetFetchRequest is an OffsetFetch for a group's coordinator.
type offsetFetchRequest struct {
	group.OffsetFetchRequest
}

func (*offsetFetchRequest) kind() requestKind { return kindOffsetFetch }
func (r *offsetFetchRequest) encode(e *encoder) {
	e.string(r.GroupID)
	// Nil topics read every committed offset of the group.
	e.bool(r.Topics != nil)
	e.uint(uint64(len(r.Topics)))
	for _, t := range r.Topics {
		e.string(t.Name)
		e.int32s(t.Partitions)
	}
	e.bool(r.RequireStable)
	e.string(r.MemberID)
	e.int(int64(r.MemberEpoch))
}
func (r *offsetFetchRequest) decode(d *decoder) {
	r.GroupID = d.string()
	if d.bool() {
		r.Topics = []group.OffsetFetchTopic{}
	}
	for range d.count(2) {
		r.Topics = append(r.Topics, group.OffsetFetchTopic{Name: d.string(), Partitions: d.int32s()})
	}
	r.RequireStable, r.MemberID, r.MemberEpoch = d.bool(), d.string(), d.int32()
}
func (r *offsetFetchRequest) answer(ctx context.Context, n *Node) []byte {
	return answerGroup(ctx, n, r)
}
func (r *offsetFetchRequest) groupID() string { return r.GroupID }
func (r *offsetFetchRequest) run(ctx context.Context, s *group.Service) (*group.OffsetFetchResponse, error) {
	return s.OffsetFetch(ctx, r.OffsetFetchRequest)
}
func (*offsetFetchRequest) failure(resp *group.OffsetFetchResponse) error { return resp.Err }
func (*offsetFetchRequest) encodeResponse(e *encoder, resp *group.OffsetFetchResponse) {
	e.uint(uint64(resp.ID))
	e.groupError(resp.Err)
	e.uint(uint64(len(resp.Topics)))
	for _, t := range resp.Topics {
		e.string(t.Name)
		e.uint(uint64(len(t.Partitions)))
		for _, p := range t.Partitions {
			e.int(int64(p.Partition))
			e.int(p.Offset)
			e.int(int64(p.LeaderEpoch))
			e.string(p.Metadata)
			e.groupError(p.Err)
		}
	}
}
func (*offsetFetchRequest) decodeResponse(d *decoder) *group.OffsetFetchResponse {
	resp := &group.OffsetFetchResponse{ID: group.RequestID(d.uint()), Err: d.remoteError()}
	for range d.count(2) {
		t := group.OffsetFetchTopicResult{Name: d.string()}
		for range d.count(6) {
			t.Partitions = append(t.Partitions, group.FetchedOffset{Partition: d.int32(), Offset: d.int(),
				LeaderEpoch: d.int32(), Metadata: d.string(), Err: d.remoteError()})
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}
