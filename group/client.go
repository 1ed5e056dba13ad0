package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// ConsumerOptions configure a Consumer.
type ConsumerOptions struct {
	Group    string
	ClientID string   // default "strand"
	Topics   []string // the subscription
	// SessionTimeout is the member's session (default 10 s, Kafka's
	// session.timeout.ms before 3.0); RebalanceTimeout how long a rebalance
	// waits for it (default 5 min, max.poll.interval.ms).
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// Isolation is how far Poll reads: ReadCommitted (the default) up to
	// the last stable offset, ReadUncommitted up to the high watermark.
	Isolation log.Isolation
	// MaxBytes bounds what Poll reads of each partition (default 1 MiB).
	MaxBytes int
}

// TopicPartition names a partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Message is a record Poll returns, with where it came from.
type Message struct {
	TopicPartition
	segment.Record
}

// Consumer is a member of a classic group served by a Service, reading the
// partitions assigned to it from the Service's Dir, as Kafka's consumer does
// with the "range" protocol and eager rebalancing. It heartbeats in Poll, as
// consumers did before KIP-62, so it must be polled more often than its
// session timeout. A Consumer is used from one goroutine.
//
// It is the start of the in-process consumer: there are no callbacks,
// patterns, automatic commits, seeks or pauses yet.
type Consumer struct {
	s        *Service
	d        *log.Dir
	opts     ConsumerOptions
	memberID string
	gen      int32
	assigned []TopicPartition
	pos      map[TopicPartition]int64 // next offset to read
}

// NewConsumer returns a consumer of s's group opts.Group over d, which must
// be the Dir of s. It joins on its first Poll.
func NewConsumer(s *Service, d *log.Dir, opts ConsumerOptions) (*Consumer, error) {
	if err := checkGroupID(opts.Group); err != nil {
		return nil, err
	}
	if len(opts.Topics) == 0 {
		return nil, fmt.Errorf("%w: ConsumerOptions.Topics is empty", ErrInvalidConfig)
	}
	if opts.ClientID == "" {
		opts.ClientID = "strand"
	}
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 10 * time.Second
	}
	if opts.RebalanceTimeout == 0 {
		opts.RebalanceTimeout = 5 * time.Minute
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = 1 << 20
	}
	return &Consumer{s: s, d: d, opts: opts, gen: -1}, nil
}

// Assigned returns the partitions the consumer owns in its generation.
func (c *Consumer) Assigned() []TopicPartition { return slices.Clone(c.assigned) }

// join runs a rebalance: JoinGroup (again with the member id on
// MEMBER_ID_REQUIRED), the leader's range assignment over the Dir's
// partitions, SyncGroup, and the committed offsets of what it gets.
func (c *Consumer) join(ctx context.Context) error {
	c.assigned, c.pos = nil, nil
	sub := Subscription{Topics: slices.Sorted(slices.Values(c.opts.Topics))}
	req := JoinGroupRequest{
		Version: JoinVersionLatest, GroupID: c.opts.Group, MemberID: c.memberID, ClientID: c.opts.ClientID,
		SessionTimeout: c.opts.SessionTimeout, RebalanceTimeout: c.opts.RebalanceTimeout, ProtocolType: "consumer",
		Protocols: []Protocol{{Name: assign.Range.Name(), Metadata: sub.Encode(3)}},
	}
	for {
		r, err := c.s.JoinGroup(ctx, req)
		if err != nil {
			return err
		}
		switch {
		case errors.Is(r.Err, ErrMemberIDRequired):
			req.MemberID = r.MemberID
			continue
		case errors.Is(r.Err, ErrUnknownMemberID):
			req.MemberID = ""
			continue
		case r.Err != nil:
			return r.Err
		}
		c.memberID, c.gen = r.MemberID, r.GenerationID
		sync := SyncGroupRequest{GroupID: c.opts.Group, GenerationID: r.GenerationID, MemberID: r.MemberID}
		if r.Leader == r.MemberID {
			if sync.Assignments, err = c.assign(r.Members); err != nil {
				return err
			}
		}
		sr, err := c.s.SyncGroup(ctx, sync)
		if err != nil {
			return err
		}
		if errors.Is(sr.Err, ErrRebalanceInProgress) {
			continue
		}
		if sr.Err != nil {
			return sr.Err
		}
		a, _, err := DecodeAssignment(sr.Assignment)
		if err != nil {
			return err
		}
		return c.take(ctx, a)
	}
}

// assign is the leader's range assignment of the members' subscriptions.
func (c *Consumer) assign(members []JoinGroupMember) ([]SyncGroupAssignment, error) {
	ms := make([]assign.Member, len(members))
	topics := map[string]assign.Topic{}
	for i, m := range members {
		sub, _, err := DecodeSubscription(m.Metadata)
		if err != nil {
			return nil, err
		}
		ms[i] = assign.Member{ID: m.MemberID, InstanceID: m.GroupInstanceID, Topics: sub.Topics, Generation: -1}
		for _, t := range sub.Topics {
			if tc, err := c.d.TopicConfig(t); err == nil {
				topics[t] = assign.Topic{Partitions: tc.Partitions}
			}
		}
	}
	plan, err := assign.Range.Assign(ms, topics)
	if err != nil {
		return nil, err
	}
	out := make([]SyncGroupAssignment, 0, len(plan))
	for _, m := range members {
		out = append(out, SyncGroupAssignment{MemberID: m.MemberID, Assignment: Assignment{Partitions: plan[m.MemberID]}.Encode(3)})
	}
	return out, nil
}

// take adopts an assignment: positions start at the committed offsets, or
// at the log start where nothing is committed (auto.offset.reset=earliest).
func (c *Consumer) take(ctx context.Context, a Assignment) error {
	req := OffsetFetchRequest{GroupID: c.opts.Group}
	c.pos = map[TopicPartition]int64{}
	for _, t := range slices.Sorted(maps.Keys(a.Partitions)) {
		req.Topics = append(req.Topics, OffsetFetchTopic{Name: t, Partitions: a.Partitions[t]})
		for _, p := range a.Partitions[t] {
			c.assigned = append(c.assigned, TopicPartition{t, p})
		}
	}
	r, err := c.s.OffsetFetch(ctx, req)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			tp := TopicPartition{t.Name, p.Partition}
			if p.Err != nil {
				return p.Err
			}
			if p.Offset >= 0 {
				c.pos[tp] = p.Offset
				continue
			}
			part, err := c.d.Partition(tp.Topic, tp.Partition)
			if err != nil {
				return err
			}
			start, _, _, err := part.Offsets()
			if err != nil {
				return err
			}
			c.pos[tp] = start
		}
	}
	return nil
}

// Poll heartbeats, rejoining when the group rebalances (after committing
// what it consumed, as an eager consumer does), and returns the records
// available on its partitions from its positions, which move past them.
func (c *Consumer) Poll(ctx context.Context) ([]Message, error) {
	if c.gen < 0 {
		if err := c.join(ctx); err != nil {
			return nil, err
		}
	} else {
		r, err := c.s.Heartbeat(ctx, HeartbeatRequest{GroupID: c.opts.Group, GenerationID: c.gen, MemberID: c.memberID})
		if err != nil {
			return nil, err
		}
		switch {
		case errors.Is(r.Err, ErrRebalanceInProgress):
			if err := c.Commit(ctx); err != nil && !errors.Is(err, ErrRebalanceInProgress) {
				return nil, err
			}
			if err := c.join(ctx); err != nil {
				return nil, err
			}
		case errors.Is(r.Err, ErrUnknownMemberID), errors.Is(r.Err, ErrIllegalGeneration):
			c.memberID, c.gen = "", -1
			if err := c.join(ctx); err != nil {
				return nil, err
			}
		case r.Err != nil:
			return nil, r.Err
		}
	}
	var out []Message
	for _, tp := range c.assigned {
		part, err := c.d.Partition(tp.Topic, tp.Partition)
		if err != nil {
			return out, err
		}
		bs, err := part.Read(c.pos[tp], c.opts.MaxBytes, c.opts.Isolation)
		if err != nil {
			return out, err
		}
		for b, err := range bs.All() {
			if err != nil {
				_ = bs.Close()
				return out, err
			}
			if b.Control() {
				c.pos[tp] = b.LastOffset() + 1
				continue
			}
			for r, err := range b.Records() {
				if err != nil {
					_ = bs.Close()
					return out, err
				}
				if r.Offset >= c.pos[tp] {
					out = append(out, Message{tp, r})
				}
			}
			c.pos[tp] = b.LastOffset() + 1
		}
		_ = bs.Close()
	}
	return out, nil
}

// Commit commits the positions of the consumer's partitions: the offsets of
// the next records it will read.
func (c *Consumer) Commit(ctx context.Context) error {
	if c.gen < 0 || len(c.assigned) == 0 {
		return nil
	}
	req := OffsetCommitRequest{Version: OffsetCommitVersionGroupIDNotFound, GroupID: c.opts.Group, GenerationID: c.gen, MemberID: c.memberID}
	for _, tp := range c.assigned {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != tp.Topic {
			req.Topics = append(req.Topics, OffsetCommitTopic{Name: tp.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, OffsetCommitPartition{Partition: tp.Partition, Offset: c.pos[tp], LeaderEpoch: -1})
	}
	r, err := c.s.OffsetCommit(ctx, req)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if p.Err != nil {
				return fmt.Errorf("commit of %s-%d: %w", t.Name, p.Partition, p.Err)
			}
		}
	}
	return nil
}

// Close commits and leaves the group, so that the others take its
// partitions over at once.
func (c *Consumer) Close(ctx context.Context) error {
	if c.gen < 0 {
		return nil
	}
	err := c.Commit(ctx)
	r, lerr := c.s.LeaveGroup(ctx, LeaveGroupRequest{GroupID: c.opts.Group, Members: []LeaveGroupMember{{MemberID: c.memberID}}})
	if lerr == nil {
		lerr = r.Err
	}
	c.gen, c.assigned, c.pos = -1, nil, nil
	return errors.Join(err, lerr)
}
