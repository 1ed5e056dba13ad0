package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/group"
)

// This file is the Consumer's membership: the heartbeat goroutine (KIP-62:
// heartbeats apart from polls, so that a slow handler keeps its session),
// the join goroutine (JoinGroup, the leader's assignment, SyncGroup), and
// the rebalance steps Poll takes, eager or cooperative (KIP-429).

// joinResult is a generation the join goroutine reached.
type joinResult struct {
	gen      int32
	assigned []TopicPartition // sorted
}

// heartbeats heartbeats every HeartbeatInterval while the consumer is in a
// generation and not joining, and tells Poll what the answers mean.
func (c *Consumer) heartbeats() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		memberID, gen, skip := c.memberID, c.gen, c.gen < 0 || c.joining || c.lost || c.closing
		expired := !skip && time.Since(c.polled) > c.opts.RebalanceTimeout
		if expired {
			// max.poll.interval.ms passed without a Poll
			// (AbstractCoordinator's HeartbeatThread): the member
			// leaves, and the next Poll finds its partitions lost.
			c.lost = true
		}
		c.mu.Unlock()
		if expired {
			c.pollTimeout(memberID)
			continue
		}
		if skip {
			continue
		}
		r, err := c.s.Heartbeat(c.ctx, group.HeartbeatRequest{GroupID: c.opts.Group, GenerationID: gen, MemberID: memberID,
			GroupInstanceID: c.opts.InstanceID})
		if err == nil {
			err = r.Err
		}
		c.mu.Lock()
		if c.gen == gen && !c.joining {
			switch {
			case err == nil:
			case errors.Is(err, group.ErrRebalanceInProgress):
				c.rejoin = true
			case errors.Is(err, group.ErrFencedInstanceID):
				c.lost, c.fenced = true, err
			case errors.Is(err, group.ErrUnknownMemberID), errors.Is(err, group.ErrIllegalGeneration):
				c.lost = true
			case errors.Is(err, group.ErrServiceClosed):
				c.err = err
			}
			// Other errors (COORDINATOR_NOT_AVAILABLE after a failed
			// append, NOT_COORDINATOR while a partition moves) are
			// retried at the next tick.
		}
		c.mu.Unlock()
		if err != nil {
			c.signal()
		}
	}
}

// pollTimeout leaves the group for a consumer that stopped polling: a
// dynamic member sends LeaveGroup, so that the group rebalances at once; a
// static member does not, as Kafka's does not, and the coordinator removes
// it when its session expires, unless it polls and rejoins first.
func (c *Consumer) pollTimeout(memberID string) {
	if c.opts.InstanceID != "" {
		return
	}
	// A failed leave is no worse than none: the session expires.
	_, _ = c.s.LeaveGroup(c.ctx, group.LeaveGroupRequest{GroupID: c.opts.Group, Members: []group.LeaveGroupMember{{MemberID: memberID}}})
}

// step does what the group needs before Poll reads: it handles a lost
// membership, adopts a finished join, looks for subscription changes,
// commits when due, and starts a join when one is needed. Its requests to
// the Service run under the consumer's context, not Poll's: a Poll with a
// short deadline must not leave a generation half adopted.
func (c *Consumer) step(ctx context.Context) error {
	c.mu.Lock()
	err, joined, lost, fenced := c.err, c.joined, c.lost, c.fenced
	c.err, c.joined, c.lost = nil, nil, false
	if lost {
		// A generation the join reached before the loss is gone too.
		c.memberID, c.gen, c.rejoin, joined = "", -1, false, nil
	}
	c.mu.Unlock()
	if lost {
		// The coordinator removed the member: another may own its
		// partitions already, so nothing is committed.
		c.revoke(ctx, c.assigned, c.onLost())
	}
	if joined != nil {
		if err := c.adopt(ctx, joined); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if fenced != nil {
		// Another consumer runs with this InstanceID: rejoining would
		// fence it in turn, so this one stops, as Kafka's does.
		return fenced
	}
	now := time.Now()
	if !now.Before(c.nextMetadata) {
		c.nextMetadata = now.Add(c.opts.MetadataInterval)
		topics, err := c.subscription()
		if err != nil {
			return err
		}
		if !maps.Equal(topics, c.topics) {
			c.topics = topics
			c.mu.Lock()
			c.rejoin = true
			c.mu.Unlock()
		}
	}
	if !c.opts.DisableAutoCommit && !now.Before(c.nextCommit) {
		c.nextCommit = now.Add(c.opts.AutoCommitInterval)
		// A failed auto commit is tried again at the next one, as in
		// Kafka's consumer; the positions stay.
		_ = c.commit(c.ctx, c.positions(c.assigned))
	}
	c.mu.Lock()
	start := (c.gen < 0 || c.rejoin) && !c.joining
	c.mu.Unlock()
	if start {
		c.startJoin(ctx)
	}
	return nil
}

// startJoin starts a rebalance. An eager consumer first gives up every
// partition (committing it with auto commit), a cooperative one keeps them
// and tells the leader it owns them.
func (c *Consumer) startJoin(ctx context.Context) {
	if !c.cooperative {
		if !c.opts.DisableAutoCommit {
			_ = c.commit(c.ctx, c.positions(c.assigned))
		}
		c.revoke(ctx, c.assigned, c.opts.OnRevoked)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	owned := map[string][]int32{}
	for _, tp := range c.assigned {
		owned[tp.Topic] = append(owned[tp.Topic], tp.Partition)
	}
	sub := group.Subscription{Topics: slices.Sorted(maps.Keys(c.topics)), Owned: owned, GenerationID: c.gen}
	c.joining, c.rejoin = true, false
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		res, err := c.join(sub)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.joining = false
		switch {
		case err == nil:
			c.gen, c.joined = res.gen, res
		case c.ctx.Err() != nil || c.closing:
		case errors.Is(err, group.ErrFencedInstanceID):
			c.lost, c.fenced = true, err
		case errors.Is(err, group.ErrUnknownMemberID), errors.Is(err, group.ErrIllegalGeneration):
			c.lost = true
		default:
			c.err, c.rejoin = err, true
		}
		c.signal()
	}()
}

// joinRequest is the JoinGroup request of a member with these options.
func (o Options) joinRequest(memberID string, protocols []group.Protocol) group.JoinGroupRequest {
	return group.JoinGroupRequest{
		Version: group.JoinVersionLatest, GroupID: o.Group, MemberID: memberID, GroupInstanceID: o.InstanceID,
		ClientID: o.ClientID, ClientHost: group.InProcessHost,
		SessionTimeout: o.SessionTimeout, RebalanceTimeout: o.RebalanceTimeout, ProtocolType: "consumer",
		Protocols: protocols,
	}
}

// join runs JoinGroup and SyncGroup until the member is in a generation,
// the leader computing the assignment, and returns what it got.
func (c *Consumer) join(sub group.Subscription) (*joinResult, error) {
	protocol := []group.Protocol{{Name: c.opts.Assignor.Name(), Metadata: sub.Encode(group.ConsumerProtocolVersion)}}
	for {
		c.mu.Lock()
		memberID, closing := c.memberID, c.closing
		c.mu.Unlock()
		if closing {
			return nil, ErrClosed
		}
		r, err := c.s.JoinGroup(c.ctx, c.opts.joinRequest(memberID, protocol))
		if err == nil {
			err = r.Err
		}
		switch {
		case errors.Is(err, group.ErrMemberIDRequired):
			// KIP-394: join again with the id; Close must know it to
			// leave, so it is kept before the next request.
			c.mu.Lock()
			c.memberID = r.MemberID
			c.mu.Unlock()
			continue
		case err != nil:
			return nil, err
		}
		c.mu.Lock()
		c.memberID = r.MemberID // a static member's restart gets a new id
		c.mu.Unlock()
		sync := group.SyncGroupRequest{GroupID: c.opts.Group, GenerationID: r.GenerationID, MemberID: r.MemberID,
			GroupInstanceID: c.opts.InstanceID, ProtocolType: "consumer", ProtocolName: r.ProtocolName}
		if r.Leader == r.MemberID && !r.SkipAssignment {
			if sync.Assignments, err = c.assign(r.Members); err != nil {
				return nil, err
			}
		}
		sr, err := c.s.SyncGroup(c.ctx, sync)
		if err == nil {
			err = sr.Err
		}
		switch {
		case errors.Is(err, group.ErrRebalanceInProgress):
			continue
		case err != nil:
			return nil, err
		}
		a, _, err := group.DecodeAssignment(sr.Assignment)
		if err != nil {
			return nil, fmt.Errorf("group %q: assignment of generation %d: %w", c.opts.Group, r.GenerationID, err)
		}
		res := &joinResult{gen: r.GenerationID}
		for t, ps := range a.Partitions {
			for _, p := range ps {
				res.assigned = append(res.assigned, TopicPartition{Topic: t, Partition: p})
			}
		}
		slices.SortFunc(res.assigned, compareTP)
		return res, nil
	}
}

// assign is the leader's assignment of the members' subscriptions over the
// partitions of the Dir, with what each says it owns (cooperative-sticky
// holds back a partition another member still owns).
func (c *Consumer) assign(members []group.JoinGroupMember) ([]group.SyncGroupAssignment, error) {
	ms := make([]assign.Member, len(members))
	topics := map[string]assign.Topic{}
	for i, m := range members {
		sub, _, err := group.DecodeSubscription(m.Metadata)
		if err != nil {
			return nil, fmt.Errorf("group %q: subscription of member %q: %w", c.opts.Group, m.MemberID, err)
		}
		ms[i] = assign.Member{ID: m.MemberID, InstanceID: m.GroupInstanceID, Rack: sub.RackID, Topics: sub.Topics,
			Owned: sub.Owned, Generation: sub.GenerationID}
		for _, t := range sub.Topics {
			if tc, err := c.d.TopicConfig(t); err == nil {
				topics[t] = assign.Topic{Partitions: tc.Partitions}
			}
		}
	}
	plan, err := c.opts.Assignor.Assign(ms, topics)
	if err != nil {
		return nil, fmt.Errorf("group %q: assignor %s: %w", c.opts.Group, c.opts.Assignor.Name(), err)
	}
	out := make([]group.SyncGroupAssignment, 0, len(members))
	for _, m := range members {
		out = append(out, group.SyncGroupAssignment{MemberID: m.MemberID, Assignment: group.Assignment{Partitions: plan[m.MemberID]}.Encode(group.ConsumerProtocolVersion)})
	}
	return out, nil
}

// adopt takes a generation's assignment. Partitions it no longer has are
// revoked (only a cooperative consumer still has any: it then rejoins, so
// that the leader can give them away, KIP-429); new ones start at their
// committed offsets, or at the log start where none is
// (auto.offset.reset=earliest).
func (c *Consumer) adopt(ctx context.Context, res *joinResult) error {
	in := func(list []TopicPartition) func(TopicPartition) bool {
		return func(tp TopicPartition) bool {
			_, ok := slices.BinarySearchFunc(list, tp, compareTP)
			return ok
		}
	}
	revoked := slices.DeleteFunc(slices.Clone(c.assigned), in(res.assigned))
	added := slices.DeleteFunc(slices.Clone(res.assigned), in(c.assigned))
	if len(revoked) > 0 {
		if !c.opts.DisableAutoCommit {
			_ = c.commit(c.ctx, c.positions(revoked))
		}
		c.revoke(ctx, revoked, c.opts.OnRevoked)
		c.mu.Lock()
		c.rejoin = true
		c.mu.Unlock()
	}
	if len(added) == 0 {
		return nil
	}
	offsets, err := c.committedOffsets(c.ctx, added)
	if err != nil {
		// The partitions are the member's all the same; without their
		// offsets the member leaves them unread until it rejoins.
		c.mu.Lock()
		c.rejoin = true
		c.mu.Unlock()
		return err
	}
	maps.Copy(c.pos, offsets)
	c.assigned = slices.SortedFunc(slices.Values(append(c.assigned, added...)), compareTP)
	if c.opts.OnAssigned != nil {
		c.opts.OnAssigned(ctx, c, added)
	}
	return nil
}

// committedOffsets returns where reading tps starts: the group's committed
// offsets, or the log start.
func (c *Consumer) committedOffsets(ctx context.Context, tps []TopicPartition) (map[TopicPartition]int64, error) {
	req := group.OffsetFetchRequest{GroupID: c.opts.Group}
	for _, tp := range tps {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != tp.Topic {
			req.Topics = append(req.Topics, group.OffsetFetchTopic{Name: tp.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, tp.Partition)
	}
	r, err := c.s.OffsetFetch(ctx, req)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return nil, fmt.Errorf("group %q: committed offsets: %w", c.opts.Group, err)
	}
	out := map[TopicPartition]int64{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			tp := TopicPartition{Topic: t.Name, Partition: p.Partition}
			if p.Err != nil {
				return nil, fmt.Errorf("group %q: committed offset of %v: %w", c.opts.Group, tp, p.Err)
			}
			if p.Offset >= 0 {
				out[tp], c.committed[tp] = p.Offset, p.Offset
				continue
			}
			part, err := c.d.Partition(tp.Topic, tp.Partition)
			if err != nil {
				return nil, err
			}
			if out[tp], _, _, err = part.Offsets(); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
