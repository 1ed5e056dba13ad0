package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strandlog/strand/consumer"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// Defaults of ConsumerOptions, Kafka's consumer configuration's.
const (
	consumerRebalanceTimeout  = 5 * time.Minute // max.poll.interval.ms
	consumerMaxPartitionBytes = 1 << 20         // max.partition.fetch.bytes
)

// pollWait is how long Poll waits before it reads again partitions that
// had nothing to read (a Kafka broker holds the fetch instead, up to
// fetch.max.wait.ms).
const pollWait = 20 * time.Millisecond

// ConsumerOptions configure a Consumer. Zero fields take the defaults
// given.
type ConsumerOptions struct {
	Group  string   // group.id
	Topics []string // the subscription
	// Isolation is how far Poll reads: log.ReadCommitted (the zero value)
	// up to the last stable offset, without the records of aborted
	// transactions, or log.ReadUncommitted up to the high watermark.
	Isolation log.Isolation
	// RebalanceTimeout (default 5 min, max.poll.interval.ms) is how long
	// the coordinator waits for the consumer to give up partitions it
	// revokes before it fences the consumer.
	RebalanceTimeout time.Duration
	// MaxPartitionBytes (default 1 MiB) bounds what Poll reads of each
	// partition at a time; a batch larger than it is still read whole.
	MaxPartitionBytes int
}

// Consumer is a member of a consumer group (KIP-848) over a Node, for an
// application that does not speak Kafka: the group's coordinator, on
// whichever node it is, assigns it partitions, which it reads from their
// leaders. A goroutine of its own heartbeats at the interval the
// coordinator gives and follows the assignment: it commits the position
// of each partition revoked before it gives the partition up, so that the
// next owner starts where it stopped, and starts each partition assigned
// at the group's committed offset, or at the log start if there is none.
// Commits are the application's (Commit): what Poll returned after the
// last commit is delivered again to the next owner of its partition.
//
// Poll, Commit and Close are called from one goroutine; Close ends every
// goroutine the Consumer started.
type Consumer struct {
	n        *Node
	opts     ConsumerOptions
	memberID string // the consumer's own (KIP-1082), so that it can always leave
	stop     context.CancelFunc
	done     chan struct{} // closed when the heartbeat goroutine returns
	wake     chan struct{} // capacity 1: partitions were assigned
	closed   bool          // used by the caller's goroutine only
	// commitMu orders commits, so that an older position never lands
	// after a revoked partition's last one.
	commitMu sync.Mutex

	mu       sync.Mutex // guards what follows, shared with the heartbeat goroutine
	epoch    int32      // the member epoch; 0 while joining
	interval time.Duration
	target   map[consumer.TopicPartition]bool  // the assignment the coordinator last sent
	owned    map[consumer.TopicPartition]int64 // the partitions the consumer reads, and their positions
	err      error                             // a heartbeat's failure, for Poll to return
}

// NewConsumer returns a member of opts.Group that talks to the cluster
// through n; it joins at once, from a goroutine of its own. Options out
// of range are ErrInvalidConfig.
func NewConsumer(n *Node, opts ConsumerOptions) (*Consumer, error) {
	switch {
	case opts.Group == "":
		return nil, fmt.Errorf("%w: ConsumerOptions.Group is empty", ErrInvalidConfig)
	case len(opts.Topics) == 0:
		return nil, fmt.Errorf("%w: group %q: ConsumerOptions.Topics is empty", ErrInvalidConfig, opts.Group)
	case opts.Isolation != log.ReadCommitted && opts.Isolation != log.ReadUncommitted:
		return nil, fmt.Errorf("%w: group %q: ConsumerOptions.Isolation %d: a consumer reads committed or uncommitted",
			ErrInvalidConfig, opts.Group, opts.Isolation)
	case opts.RebalanceTimeout < 0 || opts.MaxPartitionBytes < 0:
		return nil, fmt.Errorf("%w: group %q: ConsumerOptions.RebalanceTimeout %v and MaxPartitionBytes %d must not be negative",
			ErrInvalidConfig, opts.Group, opts.RebalanceTimeout, opts.MaxPartitionBytes)
	}
	if opts.RebalanceTimeout == 0 {
		opts.RebalanceTimeout = consumerRebalanceTimeout
	}
	if opts.MaxPartitionBytes == 0 {
		opts.MaxPartitionBytes = consumerMaxPartitionBytes
	}
	opts.Topics = slices.Clone(opts.Topics)
	ctx, stop := context.WithCancel(context.Background())
	c := &Consumer{n: n, opts: opts, memberID: rand.Text(), stop: stop, done: make(chan struct{}),
		wake: make(chan struct{}, 1), owned: map[consumer.TopicPartition]int64{}}
	go c.heartbeats(ctx)
	return c, nil
}

// Assigned returns the partitions the consumer reads, sorted. It is safe
// to call from any goroutine.
func (c *Consumer) Assigned() []consumer.TopicPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.SortedFunc(maps.Keys(c.owned), compareGroupTP)
}

func compareGroupTP(a, b consumer.TopicPartition) int {
	return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// Poll returns records of the consumer's partitions from their positions,
// which move past them, waiting until there are some or ctx ends. A
// position outside its partition's log moves to the log start, or to the
// high watermark if it is beyond it. The failure of a heartbeat since the
// last Poll is returned once; the consumer goes on heartbeating.
func (c *Consumer) Poll(ctx context.Context) ([]consumer.Message, error) {
	if c.closed {
		return nil, consumer.ErrClosed
	}
	for {
		c.mu.Lock()
		failed := c.err
		c.err = nil
		positions := maps.Clone(c.owned)
		c.mu.Unlock()
		if failed != nil {
			return nil, failed
		}
		var out []consumer.Message
		for _, tp := range slices.SortedFunc(maps.Keys(positions), compareGroupTP) {
			var err error
			if out, err = c.read(ctx, tp, positions[tp], out); err != nil {
				// What was read is delivered: its positions moved.
				if len(out) > 0 {
					return out, nil
				}
				return nil, err
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		t := time.NewTimer(pollWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-c.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// read appends to out what one fetch of tp from offset from returns, and
// moves its position past it, unless the partition was revoked or lost
// meanwhile.
func (c *Consumer) read(ctx context.Context, tp consumer.TopicPartition, from int64, out []consumer.Message) ([]consumer.Message, error) {
	res, err := c.n.Fetch(ctx, tp.Topic, tp.Partition, from, c.opts.MaxPartitionBytes, c.opts.Isolation)
	next := from
	var msgs []consumer.Message
	switch {
	case errors.Is(err, replica.ErrOffsetOutOfRange):
		next = min(max(from, res.LogStartOffset), res.HighWatermark)
	case err != nil:
		return out, fmt.Errorf("cluster: consumer of group %q reading %v at offset %d: %w", c.opts.Group, tp, from, err)
	default:
		if msgs, next, err = records(tp, from, res); err != nil {
			return out, fmt.Errorf("cluster: consumer of group %q reading %v at offset %d: %w", c.opts.Group, tp, from, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if pos, ok := c.owned[tp]; ok && pos == from {
		c.owned[tp] = next
		out = append(out, msgs...)
	}
	return out, nil
}

// records returns the records of a fetch of tp from offset from on that a
// consumer returns, and the offset after the last batch. Control batches
// and, when the fetch lists aborted transactions, the batches of those
// are dropped, as Kafka's consumer drops them.
func records(tp consumer.TopicPartition, from int64, res FetchResult) ([]consumer.Message, int64, error) {
	var aborted *idempotence.AbortedFilter
	if len(res.Aborted) > 0 {
		aborted = idempotence.NewAbortedFilter(res.Aborted)
	}
	var out []consumer.Message
	next := from
	for rest := res.Records; len(rest) > 0; {
		var b segment.Batch
		var err error
		if b, rest, err = segment.ParseBatch(rest); err == nil {
			err = b.Validate()
		}
		if err != nil {
			return nil, next, fmt.Errorf("the batch after offset %d: %w", next, err)
		}
		drop, err := aborted.Drop(b)
		if err != nil {
			return nil, next, fmt.Errorf("the batch at offset %d: %w", b.BaseOffset(), err)
		}
		if !drop {
			for r, err := range b.Records() {
				if err != nil {
					return nil, next, fmt.Errorf("the batch at offset %d: %w", b.BaseOffset(), err)
				}
				if r.Offset >= from {
					out = append(out, consumer.Message{TopicPartition: tp, Record: r})
				}
			}
		}
		next = max(next, b.LastOffset()+1)
	}
	return out, next, nil
}

// Commit commits the positions of the consumer's partitions at its member
// epoch: the offsets of the next records Poll returns. A commit the
// coordinator finds of an epoch older than the member's (the heartbeat
// that moved it on not answered yet, STALE_MEMBER_EPOCH) is made again at
// the newer epoch, until ctx ends.
func (c *Consumer) Commit(ctx context.Context) error {
	if c.closed {
		return consumer.ErrClosed
	}
	for {
		c.commitMu.Lock()
		c.mu.Lock()
		positions, epoch := maps.Clone(c.owned), c.epoch
		c.mu.Unlock()
		var err error
		if len(positions) > 0 {
			err = c.commit(ctx, positions, epoch)
		}
		c.commitMu.Unlock()
		if !errors.Is(err, group.ErrStaleMemberEpoch) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(c.n.cfg.RetryBackoff):
		}
	}
}

// commit commits positions at member epoch epoch; commitMu is held.
func (c *Consumer) commit(ctx context.Context, positions map[consumer.TopicPartition]int64, epoch int32) error {
	req := group.OffsetCommitRequest{Version: group.OffsetCommitVersionGroupIDNotFound, GroupID: c.opts.Group,
		GenerationID: epoch, MemberID: c.memberID}
	for _, tp := range slices.SortedFunc(maps.Keys(positions), compareGroupTP) {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != tp.Topic {
			req.Topics = append(req.Topics, group.OffsetCommitTopic{Name: tp.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, group.OffsetCommitPartition{Partition: tp.Partition, Offset: positions[tp], LeaderEpoch: -1})
	}
	resp, err := c.n.OffsetCommit(ctx, req)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("cluster: consumer of group %q: commit at member epoch %d: %w", c.opts.Group, epoch, err)
	}
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Err != nil {
				errs = append(errs, fmt.Errorf("cluster: consumer of group %q: commit of %s-%d: %w", c.opts.Group, t.Name, p.Partition, p.Err))
			}
		}
	}
	return errors.Join(errs...)
}

// Close leaves the group (a heartbeat of member epoch -1), so that the
// other members take its partitions over at once, and ends the heartbeat
// goroutine. It does not commit: call Commit first.
func (c *Consumer) Close(ctx context.Context) error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.stop()
	<-c.done
	c.mu.Lock()
	clear(c.owned)
	c.mu.Unlock()
	resp, err := c.n.ConsumerGroupHeartbeat(ctx, group.ConsumerGroupHeartbeatRequest{GroupID: c.opts.Group,
		MemberID: c.memberID, MemberEpoch: group.LeaveMemberEpoch})
	if err == nil {
		err = resp.Err
	}
	// A member the group does not have (it never joined, or was removed)
	// has left.
	if err != nil && !errorsIsAny(err, group.ErrUnknownMemberID, group.ErrGroupIDNotFound) {
		return fmt.Errorf("cluster: consumer of group %q leaving: %w", c.opts.Group, err)
	}
	return nil
}

// heartbeats heartbeats until ctx ends.
func (c *Consumer) heartbeats(ctx context.Context) {
	defer close(c.done)
	for {
		t := time.NewTimer(c.heartbeat(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// heartbeat sends one heartbeat, with the partitions the consumer owns,
// and reconciles with the assignment; it returns when to send the next:
// at once to acknowledge a change of what the consumer owns.
func (c *Consumer) heartbeat(ctx context.Context) time.Duration {
	c.mu.Lock()
	req := group.ConsumerGroupHeartbeatRequest{GroupID: c.opts.Group, MemberID: c.memberID, MemberEpoch: c.epoch,
		Owned: &group.Assignment{Partitions: map[string][]int32{}}}
	for _, tp := range slices.SortedFunc(maps.Keys(c.owned), compareGroupTP) {
		req.Owned.Partitions[tp.Topic] = append(req.Owned.Partitions[tp.Topic], tp.Partition)
	}
	if c.epoch == group.JoinMemberEpoch {
		req.RebalanceTimeout, req.SubscribedTopicNames = c.opts.RebalanceTimeout, c.opts.Topics
	}
	interval := cmp.Or(c.interval, group.DefaultConsumerHeartbeatInterval)
	c.mu.Unlock()
	resp, err := c.n.ConsumerGroupHeartbeat(ctx, req)
	if err == nil {
		err = resp.Err
	}
	switch {
	case ctx.Err() != nil:
		return 0
	case errorsIsAny(err, group.ErrFencedMemberEpoch, group.ErrUnknownMemberID):
		// Removed from the group: its partitions may be another's
		// already, so they are dropped uncommitted, and the consumer
		// joins again.
		c.mu.Lock()
		c.epoch, c.target = group.JoinMemberEpoch, nil
		clear(c.owned)
		c.mu.Unlock()
		return c.n.cfg.RetryBackoff
	case err != nil:
		c.fail(fmt.Errorf("cluster: consumer of group %q: heartbeat at member epoch %d: %w", c.opts.Group, req.MemberEpoch, err))
		return interval
	}
	c.mu.Lock()
	c.epoch, c.interval = resp.MemberEpoch, resp.HeartbeatInterval
	if resp.Assignment != nil {
		c.target = map[consumer.TopicPartition]bool{}
		for t, ps := range resp.Assignment.Partitions {
			for _, p := range ps {
				c.target[consumer.TopicPartition{Topic: t, Partition: p}] = true
			}
		}
	}
	c.mu.Unlock()
	if c.reconcile(ctx) {
		return 0
	}
	return cmp.Or(resp.HeartbeatInterval, interval)
}

func (c *Consumer) fail(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// reconcile moves what the consumer owns to the assignment, as KIP-848's
// member reconciles: it stops reading the partitions revoked and commits
// their positions before the next heartbeat gives them up, and starts the
// partitions assigned at the group's committed offsets. It reports
// whether what the consumer owns changed.
func (c *Consumer) reconcile(ctx context.Context) bool {
	c.mu.Lock()
	revoked := map[consumer.TopicPartition]int64{}
	for tp, pos := range c.owned {
		if !c.target[tp] {
			revoked[tp] = pos
			delete(c.owned, tp)
		}
	}
	var added []consumer.TopicPartition
	for tp := range c.target {
		if _, ok := c.owned[tp]; !ok {
			added = append(added, tp)
		}
	}
	epoch := c.epoch
	c.mu.Unlock()
	if len(revoked) > 0 {
		c.commitMu.Lock()
		err := c.commit(ctx, revoked, epoch)
		c.commitMu.Unlock()
		if err != nil && ctx.Err() == nil {
			// Given up all the same: the next owner reads again what was
			// not committed.
			c.fail(fmt.Errorf("committing the partitions revoked: %w", err))
		}
	}
	if len(added) == 0 {
		return len(revoked) > 0
	}
	start, err := c.committed(ctx, added)
	if err != nil && ctx.Err() == nil {
		c.fail(err)
	}
	c.mu.Lock()
	maps.Copy(c.owned, start)
	c.mu.Unlock()
	if len(start) > 0 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return len(revoked) > 0 || len(start) > 0
}

// committed returns where the consumer starts reading partitions: at the
// group's committed offsets, stable ones (none a transaction may still
// change), or, where none is committed, at offset 0, which Poll moves to
// the log start. A partition whose offset failed to fetch is left out,
// for the next heartbeat's reconciliation.
func (c *Consumer) committed(ctx context.Context, tps []consumer.TopicPartition) (map[consumer.TopicPartition]int64, error) {
	req := group.OffsetFetchRequest{GroupID: c.opts.Group, RequireStable: true, Topics: []group.OffsetFetchTopic{}}
	for _, tp := range slices.SortedFunc(slices.Values(tps), compareGroupTP) {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != tp.Topic {
			req.Topics = append(req.Topics, group.OffsetFetchTopic{Name: tp.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, tp.Partition)
	}
	resp, err := c.n.OffsetFetch(ctx, req)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: consumer of group %q: fetching its committed offsets: %w", c.opts.Group, err)
	}
	start := map[consumer.TopicPartition]int64{}
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			tp := consumer.TopicPartition{Topic: t.Name, Partition: p.Partition}
			switch {
			case errors.Is(p.Err, group.ErrUnstableOffsetCommit):
				// A transaction's commit to it is pending: the next
				// heartbeat's reconciliation asks again.
				continue
			case p.Err != nil:
				errs = append(errs, fmt.Errorf("cluster: consumer of group %q: the committed offset of %v: %w", c.opts.Group, tp, p.Err))
				continue
			}
			start[tp] = max(p.Offset, 0)
		}
	}
	return start, errors.Join(errs...)
}
