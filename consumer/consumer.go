package consumer

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/strandlog/strand"
	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// Defaults of Options, Kafka's consumer configuration where it has
// one.
const (
	consumerClientID             = "strand"
	consumerSessionTimeout       = 45 * time.Second // session.timeout.ms (Kafka 3.0+)
	consumerRebalanceTimeout     = 5 * time.Minute  // max.poll.interval.ms
	consumerHeartbeatInterval    = 3 * time.Second  // heartbeat.interval.ms
	consumerAutoCommitInterval   = 5 * time.Second  // auto.commit.interval.ms
	consumerMetadataInterval     = time.Second      // in process, a look at the Dir is cheap
	consumerMaxPartitionBytes    = 1 << 20          // max.partition.fetch.bytes
	maxConsumerWaitBetweenDuties = time.Second
)

// ErrClosed reports a call on a closed Consumer.
var ErrClosed = errors.New("consumer: closed")

// ErrNotAssigned reports a Seek, Pause, Resume or Position of a partition
// the consumer does not own (Kafka's IllegalStateException "No current
// assignment for partition").
var ErrNotAssigned = errors.New("consumer: partition not assigned to this consumer")

// Options configure a Consumer. Zero fields take the defaults
// given, Kafka's where Kafka has the setting.
type Options struct {
	Group    string // group.id
	ClientID string // client.id; default "strand"
	// InstanceID makes the member static (group.instance.id, KIP-345): a
	// consumer that closes does not leave the group, and one that starts
	// again with the same InstanceID within SessionTimeout takes its place
	// and its partitions without a rebalance. Two running consumers with
	// one InstanceID fence each other (FENCED_INSTANCE_ID).
	InstanceID string
	// Topics is the subscription; every topic must exist. Pattern
	// subscribes instead to every topic of the Dir whose name it matches,
	// the offsets topic aside, and picks up new ones (checked every
	// MetadataInterval). Exactly one of the two is set.
	Topics  []string
	Pattern *regexp.Regexp
	// Assignor is the assignment strategy the group's leader runs (default
	// assign.Range). assign.CooperativeSticky rebalances cooperatively
	// (KIP-429): a member keeps its partitions through a rebalance and
	// stops only those it gives up; with the others every rebalance revokes
	// every partition first (eager).
	Assignor assign.Assignor
	// SessionTimeout (default 45 s) is how long the coordinator waits for
	// a heartbeat before it removes the member; it must lie within the
	// Service's MinSessionTimeout and MaxSessionTimeout. HeartbeatInterval
	// (default 3 s), below it, is how often a background goroutine
	// heartbeats, so that a slow handler does not lose the membership.
	// RebalanceTimeout (default 5 min, max.poll.interval.ms) is how long a
	// rebalance waits for the member to call Poll and rejoin, and how long
	// the consumer may go without calling Poll: past it, as Kafka's
	// consumer does, the heartbeat goroutine leaves the group (a static
	// member, whose leave would end its session, only stops heartbeating),
	// so that its partitions go to members that poll, and the next Poll
	// finds them lost (OnLost) and joins again.
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RebalanceTimeout  time.Duration
	// AutoCommitInterval (default 5 s) is how often Poll commits the
	// positions of what earlier Polls returned; DisableAutoCommit leaves commits to
	// CommitSync, CommitAsync and CommitOffsets. With auto commit, a
	// revocation and Close commit too, so delivery is at least once.
	AutoCommitInterval time.Duration
	DisableAutoCommit  bool
	// MetadataInterval (default 1 s) is how often the consumer looks for
	// new topics (Pattern) and partitions; a change rebalances the group.
	MetadataInterval time.Duration
	// Isolation is how far Poll reads: log.ReadCommitted (the zero value)
	// up to the last stable offset, skipping aborted transactions, or
	// log.ReadUncommitted up to the high watermark.
	Isolation log.Isolation
	// MaxPartitionBytes (default 1 MiB) bounds what one Poll reads of each
	// partition; a batch larger than it is still read whole.
	MaxPartitionBytes int

	// OnAssigned is called with the partitions the consumer gets, once
	// their positions are set (from the committed offsets, or the log start
	// where none is); OnRevoked with those it gives up, before another
	// member can get them (with auto commit, after their positions are
	// committed); OnLost with those it lost without giving them up (it was
	// removed from the group), which another member may already own: nil
	// calls OnRevoked. They run in Poll or Close, on the caller's goroutine,
	// and may call the Consumer's methods (commit, seek, pause).
	OnAssigned func(ctx context.Context, c *Consumer, tps []TopicPartition)
	OnRevoked  func(ctx context.Context, c *Consumer, tps []TopicPartition)
	OnLost     func(ctx context.Context, c *Consumer, tps []TopicPartition)
}

// TopicPartition names a partition of a topic.
type TopicPartition = strand.TopicPartition

func compareTP(a, b TopicPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition) - int(b.Partition)
}

// Message is a record Poll returns, with where it came from. Its key,
// value and header values are its own, unlike those log.Partition.Records
// yields: the caller may keep them.
type Message struct {
	TopicPartition
	segment.Record
}

// Consumer is a member of a classic consumer group served by a Service,
// reading the partitions assigned to it from the Service's Dir, as Kafka's
// consumer does: it joins on the first Poll, heartbeats from a goroutine of
// its own, rebalances (eagerly, or cooperatively with
// assign.CooperativeSticky) in Poll, commits, and leaves on Close.
//
// Its methods are called from one goroutine (the callbacks run on it), as
// Kafka's consumer is; Close ends every goroutine it started.
type Consumer struct {
	s           *group.Service
	d           *log.Dir
	opts        Options
	cooperative bool
	ctx         context.Context // ends with Close
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	commits     chan asyncCommit
	commitsDone chan struct{}

	// Used by the caller's goroutine only.
	assigned     []TopicPartition // sorted
	pos          map[TopicPartition]int64
	paused       map[TopicPartition]bool
	topics       map[string]int32 // the subscription as last matched: topic -> partitions
	nextCommit   time.Time
	nextMetadata time.Time
	closeBegun   bool // Close runs or ran: callbacks may still commit
	closed       bool // Close returned

	mu        sync.Mutex // guards what follows, shared with the background goroutines
	memberID  string
	gen       int32 // -1 when not in a generation
	joining   bool  // a join goroutine runs
	closing   bool  // Close has begun: no more joins
	joined    *joinResult
	rejoin    bool      // the group rebalances, or the subscription changed
	lost      bool      // the member was removed from the group, or left it
	polled    time.Time // when Poll last ran; zero before the first Poll
	fenced    error     // another consumer took this one's InstanceID: final
	err       error
	committed map[TopicPartition]int64 // what this consumer last committed
	wake      chan struct{}            // capacity 1: something for Poll to do
}

// New returns a consumer of s's group opts.Group, reading the partitions
// assigned to it from s's Dir. It joins on its first Poll. Bad options
// are typed errors: an empty or too long group id is
// group.ErrInvalidGroupID, a subscription to a missing topic
// group.ErrUnknownTopicOrPartition (and log.ErrUnknownTopic), a session
// timeout outside the Service's range group.ErrInvalidSessionTimeout, a
// client or instance id too long for the protocol group.ErrInvalidRequest,
// and anything else group.ErrInvalidConfig, a nil s too.
func New(s *group.Service, opts Options) (*Consumer, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: consumer.New of group %q needs a group.Service", group.ErrInvalidConfig, opts.Group)
	}
	d := s.Dir()
	opts, err := opts.withDefaults(s, d)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		s: s, d: d, opts: opts,
		cooperative: opts.Assignor.Name() == assign.CooperativeSticky.Name(),
		commits:     make(chan asyncCommit, 16), commitsDone: make(chan struct{}),
		pos: map[TopicPartition]int64{}, paused: map[TopicPartition]bool{},
		gen: -1, committed: map[TopicPartition]int64{}, wake: make(chan struct{}, 1),
	}
	if c.topics, err = c.subscription(); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.heartbeats()
	go c.asyncCommits()
	return c, nil
}

func (o Options) withDefaults(s *group.Service, d *log.Dir) (Options, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: consumer of group %q: consumer.Options.%s", group.ErrInvalidConfig, o.Group, fmt.Sprintf(format, args...))
	}
	if (len(o.Topics) == 0) == (o.Pattern == nil) {
		return o, bad("Topics or Pattern: exactly one must be set")
	}
	for _, t := range o.Topics {
		if _, err := d.TopicConfig(t); err != nil {
			return o, fmt.Errorf("consumer of group %q: consumer.Options.Topics: topic %q: %w: %w", o.Group, t, err, group.ErrUnknownTopicOrPartition)
		}
	}
	def := func(v *time.Duration, name string, d time.Duration) error {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			return bad("%s %v is negative", name, *v)
		case v.Milliseconds() > 1<<31-1:
			return bad("%s %v exceeds an int32 of milliseconds", name, *v)
		}
		return nil
	}
	if o.ClientID == "" {
		o.ClientID = consumerClientID
	}
	if o.Assignor == nil {
		o.Assignor = assign.Range
	}
	if o.MaxPartitionBytes == 0 {
		o.MaxPartitionBytes = consumerMaxPartitionBytes
	}
	err := errors.Join(
		def(&o.SessionTimeout, "SessionTimeout", consumerSessionTimeout),
		def(&o.HeartbeatInterval, "HeartbeatInterval", consumerHeartbeatInterval),
		def(&o.RebalanceTimeout, "RebalanceTimeout", consumerRebalanceTimeout),
		def(&o.AutoCommitInterval, "AutoCommitInterval", consumerAutoCommitInterval),
		def(&o.MetadataInterval, "MetadataInterval", consumerMetadataInterval))
	switch {
	case err != nil:
		return o, err
	case o.MaxPartitionBytes < 0:
		return o, bad("MaxPartitionBytes %d is negative", o.MaxPartitionBytes)
	case o.Isolation != log.ReadCommitted && o.Isolation != log.ReadUncommitted:
		return o, bad("Isolation %v: a consumer reads committed or uncommitted", o.Isolation)
	case o.HeartbeatInterval >= o.SessionTimeout:
		return o, bad("HeartbeatInterval %v must be below SessionTimeout %v", o.HeartbeatInterval, o.SessionTimeout)
	}
	// What the coordinator would answer the first join with (G22, a
	// session timeout outside its range, among others), said now.
	if err := s.CheckJoin(o.joinRequest("", nil)); err != nil {
		return o, fmt.Errorf("consumer of group %q: consumer.Options: %w", o.Group, err)
	}
	return o, nil
}

// subscription returns the topics the consumer subscribes to as the Dir
// has them now, with their partition counts; a named topic deleted since
// is left out, as Kafka's consumer leaves out a topic the metadata lacks.
func (c *Consumer) subscription() (map[string]int32, error) {
	names := c.opts.Topics
	if c.opts.Pattern != nil {
		all, err := c.d.Topics()
		if err != nil {
			return nil, err
		}
		names = slices.DeleteFunc(all, func(t string) bool { return t == c.s.Topic() || !c.opts.Pattern.MatchString(t) })
	}
	out := map[string]int32{}
	for _, t := range names {
		if tc, err := c.d.TopicConfig(t); err == nil {
			out[t] = tc.Partitions
		}
	}
	return out, nil
}

// signal tells a waiting Poll that there is something to do.
func (c *Consumer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Assigned returns the partitions the consumer owns, sorted.
func (c *Consumer) Assigned() []TopicPartition { return slices.Clone(c.assigned) }

// Generation returns the consumer's member id and generation; -1 when it
// is not a member of a generation.
func (c *Consumer) Generation() (memberID string, generation int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.memberID, c.gen
}

func (c *Consumer) owns(tp TopicPartition) error {
	if _, ok := slices.BinarySearchFunc(c.assigned, tp, compareTP); !ok {
		return fmt.Errorf("%w: %v", ErrNotAssigned, tp)
	}
	return nil
}

// Position returns the offset of the next record Poll returns of tp.
func (c *Consumer) Position(tp TopicPartition) (int64, error) {
	if err := c.owns(tp); err != nil {
		return 0, err
	}
	return c.pos[tp], nil
}

// Seek makes Poll read tp from offset on. An offset below the log start
// reads from the log start, one beyond the log end from the log end.
func (c *Consumer) Seek(tp TopicPartition, offset int64) error {
	if err := c.owns(tp); err != nil {
		return err
	}
	c.pos[tp] = offset
	return nil
}

// SeekToTime makes Poll read tp from its first record with a timestamp at
// or after t (Kafka's offsetsForTimes), or from the log end if none is.
func (c *Consumer) SeekToTime(tp TopicPartition, t time.Time) error {
	if err := c.owns(tp); err != nil {
		return err
	}
	p, err := c.d.Partition(tp.Topic, tp.Partition)
	if err != nil {
		return err
	}
	offset, ok, err := p.OffsetForTimestamp(t.UnixMilli())
	if err != nil {
		return err
	}
	if !ok {
		if _, offset, _, err = p.Offsets(); err != nil {
			return err
		}
	}
	c.pos[tp] = offset
	return nil
}

// Pause stops Poll returning records of the partitions until Resume; they
// stay assigned, and a rebalance that keeps them keeps them paused.
func (c *Consumer) Pause(tps ...TopicPartition) error {
	for _, tp := range tps {
		if err := c.owns(tp); err != nil {
			return err
		}
	}
	for _, tp := range tps {
		c.paused[tp] = true
	}
	return nil
}

// Resume lets Poll return records of paused partitions again.
func (c *Consumer) Resume(tps ...TopicPartition) error {
	for _, tp := range tps {
		if err := c.owns(tp); err != nil {
			return err
		}
	}
	for _, tp := range tps {
		delete(c.paused, tp)
	}
	return nil
}

// Paused returns the paused partitions, sorted.
func (c *Consumer) Paused() []TopicPartition {
	return slices.SortedFunc(maps.Keys(c.paused), compareTP)
}

// Poll returns records of the consumer's unpaused partitions from their
// positions, which move past them, waiting until there are some or ctx
// ends. Before it reads, it does what the group needs: it joins or
// rejoins (running OnRevoked and OnAssigned), commits when auto commit is
// due, and looks for new topics and partitions. An error from the group
// (a failed join, a Service closed) is returned once; Poll may be called
// again to retry.
func (c *Consumer) Poll(ctx context.Context) ([]Message, error) {
	if c.closeBegun {
		return nil, ErrClosed
	}
	for {
		c.mu.Lock()
		c.polled = time.Now()
		c.mu.Unlock()
		if err := c.step(ctx); err != nil {
			return nil, err
		}
		ms, err := c.fetch()
		if err != nil || len(ms) > 0 {
			return ms, err
		}
		if err := c.waitForWork(ctx); err != nil {
			return nil, err
		}
	}
}

// Records is an iterator over what Poll returns, until ctx ends (which ends
// the iteration without an error) or Poll fails. If the loop stops early,
// the partitions of the records it did not take are sought back to them,
// so that a commit does not pass records that were never processed.
func (c *Consumer) Records(ctx context.Context) iter.Seq2[Message, error] {
	return func(yield func(Message, error) bool) {
		for {
			ms, err := c.Poll(ctx)
			if err != nil {
				if ctx.Err() == nil {
					yield(Message{}, err)
				}
				return
			}
			for i, m := range ms {
				if !yield(m, nil) {
					c.rewind(ms[i+1:])
					return
				}
			}
		}
	}
}

// rewind seeks each partition of ms back to its first record there.
func (c *Consumer) rewind(ms []Message) {
	done := map[TopicPartition]bool{}
	for _, m := range ms {
		if !done[m.TopicPartition] {
			done[m.TopicPartition] = true
			_ = c.Seek(m.TopicPartition, m.Offset) // still assigned: no Poll ran since
		}
	}
}

// fetch reads what is there of each unpaused partition.
func (c *Consumer) fetch() ([]Message, error) {
	var out []Message
	for _, tp := range c.assigned {
		if c.paused[tp] {
			continue
		}
		var err error
		if out, err = c.fetchPartition(tp, out); err != nil {
			return out, fmt.Errorf("consumer of group %q: reading %v at offset %d: %w", c.opts.Group, tp, c.pos[tp], err)
		}
	}
	return out, nil
}

// fetchPartition appends what one read of tp returns to out. Control
// batches and, when reading committed, the batches of aborted transactions
// move the position without being returned, as in Kafka's consumer.
func (c *Consumer) fetchPartition(tp TopicPartition, out []Message) ([]Message, error) {
	part, err := c.d.Partition(tp.Topic, tp.Partition)
	if err != nil {
		return out, err
	}
	bs, err := part.Read(c.pos[tp], c.opts.MaxPartitionBytes, c.opts.Isolation)
	if errors.Is(err, log.ErrOffsetOutOfRange) {
		// auto.offset.reset: earliest below the log, latest beyond it.
		start, _, end, oerr := part.Offsets()
		if oerr != nil {
			return out, oerr
		}
		c.pos[tp] = min(max(c.pos[tp], start), end)
		bs, err = part.Read(c.pos[tp], c.opts.MaxPartitionBytes, c.opts.Isolation)
	}
	if err != nil {
		return out, err
	}
	defer bs.Close()
	for r, err := range bs.Records(c.pos[tp]) {
		if err != nil {
			return out, err
		}
		out = append(out, Message{tp, r})
	}
	c.pos[tp] = max(c.pos[tp], bs.NextOffset())
	return out, nil
}

// waitForWork waits until one of the consumer's partitions has a record to
// read, the group needs Poll, a timed duty is due, or ctx ends.
func (c *Consumer) waitForWork(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{}, 1)
	var waiters sync.WaitGroup
	for _, tp := range c.assigned {
		if c.paused[tp] {
			continue
		}
		part, err := c.d.Partition(tp.Topic, tp.Partition)
		if err != nil {
			cancel()
			waiters.Wait()
			return err
		}
		from := c.pos[tp]
		waiters.Go(func() {
			if part.Wait(wctx, from, c.opts.Isolation) == nil {
				select {
				case ready <- struct{}{}:
				default:
				}
			}
		})
	}
	// Poll comes back within half the rebalance timeout, to note that it
	// still polls.
	wait := min(time.Until(c.nextMetadata), maxConsumerWaitBetweenDuties, c.opts.RebalanceTimeout/2)
	if !c.opts.DisableAutoCommit && len(c.assigned) > 0 {
		wait = min(wait, time.Until(c.nextCommit))
	}
	timer := time.NewTimer(wait)
	select {
	case <-ctx.Done():
	case <-c.wake:
	case <-ready:
	case <-timer.C:
	}
	timer.Stop()
	cancel()
	waiters.Wait()
	return ctx.Err()
}

// CommitSync commits the positions of the consumer's partitions that moved
// since its last commit: the offsets of the next records Poll returns.
func (c *Consumer) CommitSync(ctx context.Context) error {
	if c.closed {
		return ErrClosed
	}
	return c.commit(ctx, c.positions(c.assigned))
}

// CommitOffsets commits the given offsets, each the offset of the next
// record to process of its partition.
func (c *Consumer) CommitOffsets(ctx context.Context, offsets map[TopicPartition]int64) error {
	if c.closed {
		return ErrClosed
	}
	return c.commit(ctx, maps.Clone(offsets))
}

// CommitAsync commits the positions as CommitSync does, from another
// goroutine, and calls done (if not nil) there with the outcome. Commits
// complete in the order they were asked for; Close waits for them. Called
// from a callback that Close runs, it commits before it returns.
func (c *Consumer) CommitAsync(done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	switch {
	case c.closed:
		done(ErrClosed)
	case c.closeBegun:
		done(c.commit(context.Background(), c.positions(c.assigned)))
	default:
		c.commits <- asyncCommit{c.positions(c.assigned), done}
	}
}

type asyncCommit struct {
	offsets map[TopicPartition]int64
	done    func(error)
}

// asyncCommits runs CommitAsync's commits until Close closes the queue.
func (c *Consumer) asyncCommits() {
	defer close(c.commitsDone)
	for ac := range c.commits {
		ac.done(c.commit(c.ctx, ac.offsets))
	}
}

func (c *Consumer) positions(tps []TopicPartition) map[TopicPartition]int64 {
	out := make(map[TopicPartition]int64, len(tps))
	for _, tp := range tps {
		out[tp] = c.pos[tp]
	}
	return out
}

// commit commits the offsets that differ from what this consumer last
// committed, at its generation.
func (c *Consumer) commit(ctx context.Context, offsets map[TopicPartition]int64) error {
	c.mu.Lock()
	memberID, gen := c.memberID, c.gen
	maps.DeleteFunc(offsets, func(tp TopicPartition, off int64) bool {
		prev, ok := c.committed[tp]
		return ok && prev == off
	})
	c.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	if gen < 0 {
		return fmt.Errorf("consumer: group %q: commit: the consumer is not a member of a generation: %w", c.opts.Group, group.ErrUnknownMemberID)
	}
	req := group.OffsetCommitRequest{Version: group.OffsetCommitVersionGroupIDNotFound, GroupID: c.opts.Group, GenerationID: gen,
		MemberID: memberID, GroupInstanceID: c.opts.InstanceID}
	for _, tp := range slices.SortedFunc(maps.Keys(offsets), compareTP) {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != tp.Topic {
			req.Topics = append(req.Topics, group.OffsetCommitTopic{Name: tp.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, group.OffsetCommitPartition{Partition: tp.Partition, Offset: offsets[tp], LeaderEpoch: -1})
	}
	r, err := c.s.OffsetCommit(ctx, req)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return fmt.Errorf("group %q: commit at generation %d: %w", c.opts.Group, gen, err)
	}
	var errs []error
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			tp := TopicPartition{Topic: t.Name, Partition: p.Partition}
			if p.Err != nil {
				errs = append(errs, fmt.Errorf("commit of %v: %w", tp, p.Err))
				continue
			}
			c.committed[tp] = offsets[tp]
		}
	}
	return errors.Join(errs...)
}

// Close ends the consumer: it waits for CommitAsync's commits, commits the
// positions (with auto commit), calls OnRevoked with its partitions, leaves
// the group so that the others take them over at once (unless it is a
// static member), and ends its goroutines. A commit the group refuses because it rebalances, or because
// it removed the member, is not an error of Close: those records are
// delivered again. It must not run concurrently with Poll. The callbacks
// it runs may commit.
func (c *Consumer) Close(ctx context.Context) error {
	if c.closeBegun {
		return nil
	}
	c.closeBegun = true
	defer func() { c.closed = true }()
	close(c.commits)
	<-c.commitsDone
	c.mu.Lock()
	c.closing = true
	memberID, lost, joining := c.memberID, c.lost || c.gen < 0, c.joining
	c.mu.Unlock()
	var errs []error
	if !lost {
		if !c.opts.DisableAutoCommit {
			errs = append(errs, membershipIgnored(c.commit(ctx, c.positions(c.assigned))))
		}
		c.revoke(ctx, c.assigned, c.opts.OnRevoked)
	} else {
		c.revoke(ctx, c.assigned, c.onLost())
	}
	// A static member stays in the group for its session, so that a restart
	// takes its place without a rebalance; but a join it has parked must be
	// answered, which only a leave does. Its first join parks before it
	// learns its member id (static members skip KIP-394's round trip): it
	// leaves by its instance id alone (KIP-345), or Close would wait for
	// the rebalance, as long as a dead member's session.
	if (memberID != "" || c.opts.InstanceID != "") && (c.opts.InstanceID == "" || joining) {
		r, err := c.s.LeaveGroup(ctx, group.LeaveGroupRequest{GroupID: c.opts.Group,
			Members: []group.LeaveGroupMember{{MemberID: memberID, GroupInstanceID: c.opts.InstanceID}}})
		if err == nil {
			err = r.Err
		}
		errs = append(errs, membershipIgnored(err))
	}
	c.cancel()
	c.wg.Wait()
	return errors.Join(errs...)
}

// membershipIgnored drops the errors with which the group refuses a
// leaving member's last commit or its leave because it is rebalancing or
// has removed the member already: the records are delivered again, or the
// member is gone, as Close wants.
func membershipIgnored(err error) error {
	for _, kind := range []error{group.ErrRebalanceInProgress, group.ErrIllegalGeneration, group.ErrUnknownMemberID} {
		if errors.Is(err, kind) {
			return nil
		}
	}
	return err
}

func (c *Consumer) onLost() func(context.Context, *Consumer, []TopicPartition) {
	if c.opts.OnLost != nil {
		return c.opts.OnLost
	}
	return c.opts.OnRevoked
}

// revoke calls a callback with tps (if any) and forgets them.
func (c *Consumer) revoke(ctx context.Context, tps []TopicPartition, callback func(context.Context, *Consumer, []TopicPartition)) {
	if len(tps) == 0 {
		return
	}
	tps = slices.Clone(tps)
	if callback != nil {
		callback(ctx, c, tps)
	}
	c.assigned = slices.DeleteFunc(c.assigned, func(tp TopicPartition) bool {
		_, gone := slices.BinarySearchFunc(tps, tp, compareTP)
		return gone
	})
	for _, tp := range tps {
		delete(c.pos, tp)
		delete(c.paused, tp)
	}
}
