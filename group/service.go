package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/internal/coordinator"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// OffsetsTopic is the name of the offsets log's topic, as in Kafka.
const OffsetsTopic = "__consumer_offsets"

// DefaultOffsetsPartitions is the partition count of an offsets topic that
// Service creates (offsets.topic.num.partitions; 50).
const DefaultOffsetsPartitions = 50

// InProcessHost is the client host of the members that an in-process
// consumer (package consumer) registers, which no Kafka client's address
// can be: a Service over a Dir ends at once the sessions of the dynamic
// members of this host the Dir's previous holder left, since the Dir's
// lock proves that process gone.
const InProcessHost = "strand:in-process"

// ErrServiceClosed reports a request to a closed Service.
var ErrServiceClosed = errors.New("group: service closed")

// ServiceOptions configure a Service.
type ServiceOptions struct {
	// Config is the configuration of every partition's Coordinator. Left
	// nil, its Partitions (a subscribed topic's partition count) and
	// Topics (what a pattern subscription matches) read the Dir's topics.
	Config Config
	// Topic is the offsets topic; default OffsetsTopic.
	Topic string
	// Partitions is the partition count of the offsets topic when Service
	// creates it (DefaultOffsetsPartitions if zero); an existing topic
	// keeps its own.
	Partitions int32
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Append, if set, makes the offsets topic one a cluster replicates:
	// every batch the Service writes (its records, a transactional
	// producer's offsets, the markers that end a transaction) is written
	// through it, and a partition is coordinated only while Follow says
	// this broker leads it, whatever its appends fail with (see
	// AppendFunc).
	Append AppendFunc
	// Unloaded opens the Service with no partition loaded.
	Unloaded bool
}

// Service is the group coordinator of a data directory: the owner of one
// Coordinator per partition of the compacted offsets topic, each driven by
// one goroutine at a time, as Kafka runs an event loop per partition of
// __consumer_offsets. A group belongs to the partition PartitionFor picks.
// A request runs on its caller's goroutine; the caller that finds its
// partition not writing writes what the coordinator made, and goes on
// writing, for everyone, what the requests that came meanwhile made (group
// commit, as the log does it for its appenders). Once an append has its
// place in the log, the next may start, so that one is written while the
// one before it syncs (pipeline.go). A goroutine of the Service fires the
// coordinators' timers.
// On open it replays every partition into its coordinator; each Ready's
// records are appended to the group's partition in order and made durable
// (the topic's fsync policy, and a Sync when that policy does not sync every
// append) before that Ready's responses are delivered, so a response that
// acknowledges a commit is never lost to a crash. Its methods are safe for
// concurrent use and block until their request is answered.
type Service struct {
	dir    *log.Dir
	repl   AppendFunc // ServiceOptions.Append
	topic  string
	now    func() time.Time
	cfg    Config
	rt     *coordinator.Runtime // the partitions' life, by leadership
	parts  []*servicePartition
	closed chan struct{} // closed by Close
	wake   chan struct{} // tells the clock a request armed an earlier timer
	ticked chan struct{} // closed when the clock has returned
	// fireAt is when the clock wakes next (Unix nanoseconds); the largest
	// int64 while it looks for the next deadline, so that a request that
	// arms a timer meanwhile wakes it.
	fireAt atomic.Int64

	// unroute stops the Dir's markers of the offsets topic coming here.
	unroute func()
}

// servicePartition is one partition of the offsets topic and its
// coordinator. The runtime's partition it embeds holds its lock, which
// guards what follows, and its State: c coordinates only while it is
// Active.
type servicePartition struct {
	*coordinator.Partition
	p    *log.Partition
	sync bool // the topic's fsync policy does not sync each append

	idle    sync.Cond // signalled when writing ends and when a write is answered
	writing bool      // a goroutine is writing a Ready, without the lock
	// c is the partition's coordinator; nil until it is first loaded.
	c *Coordinator
	// loadedTo is where the log ended that a replicated partition's
	// coordinator was loaded from, while its high watermark had not
	// reached it (uncommitted); zero once it has.
	loadedTo int64
	// inflight are the Readys being appended, in log order, each
	// answered once its records and those before it are durable
	// (pipeline.go).
	inflight []*pendingWrite
	// failed is set when an in-flight write failed: the writes after it
	// fail too, and once none is in flight the coordinator is loaded
	// again from the log.
	failed error
	nextID RequestID
	// waiting are the requests taken and not answered yet.
	waiting map[RequestID]chan serviceResponse

	// producers are the transactional producers that wrote to the
	// partition (service_txn.go); the writer uses them without mu.
	pmu       sync.Mutex
	producers map[int64]*txnProducer
}

// serviceRequest is a request for partition part: call makes it on the
// coordinator. A request that needs more than the coordinator has run
// instead, which is called once every Ready of the partition is written,
// and whose response is delivered at once.
type serviceRequest struct {
	part int
	call func(c *Coordinator, id RequestID)
	run  func(id RequestID) Response
}

type serviceResponse struct {
	r   Response
	err error
}

// PartitionFor returns the partition of an offsets topic of n partitions
// that holds a group, as Kafka picks it (GroupCoordinator.partitionFor):
// Utils.abs(groupId.hashCode()) % n, with Java's String.hashCode over the
// UTF-16 code units of the id and Utils.abs, which maps MinInt32 to 0.
func PartitionFor(groupID string, n int32) int32 {
	var h int32
	for _, r := range groupID {
		if r >= 0x10000 { // a surrogate pair in UTF-16
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return h % n
}

// OpenService opens the group coordinator over d's offsets topic, creating
// it (compacted, FsyncAlways) if it does not exist, and replays every
// partition of it. The Dir must outlive the Service.
func OpenService(d *log.Dir, opts ServiceOptions) (*Service, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: OpenService of a nil Dir", ErrInvalidConfig)
	}
	s := &Service{
		dir:    d,
		repl:   opts.Append,
		topic:  opts.Topic,
		now:    opts.Now,
		cfg:    opts.Config,
		closed: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		ticked: make(chan struct{}),
	}
	if s.topic == "" {
		s.topic = OffsetsTopic
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.cfg.Partitions == nil {
		s.cfg.Partitions = func(topic string) int32 {
			tc, err := d.TopicConfig(topic)
			if err != nil {
				return 0
			}
			return tc.Partitions
		}
	}
	if s.cfg.Topics == nil {
		s.cfg.Topics = func() []string {
			topics, _ := d.Topics() // a closed Dir: the group is closing too
			// Internal topics are no subscription's, as a client's own
			// pattern subscription skips them.
			return slices.DeleteFunc(topics, func(t string) bool { return t == s.topic || t == log.TransactionStateTopic })
		}
	}
	if _, err := s.cfg.withDefaults(); err != nil {
		return nil, err
	}
	n := opts.Partitions
	if n == 0 {
		n = DefaultOffsetsPartitions
	}
	// Committed offsets never go by age or size, whatever the Dir's
	// defaults: compaction alone keeps each key's latest (Kafka's
	// __consumer_offsets is cleanup.policy=compact), and offsets expire by
	// their own rules (see Config). An offsets topic made before this rule
	// gets it on open.
	keep := log.Retention{Age: log.Unlimited, Bytes: log.Unlimited}
	err := d.CreateTopic(s.topic, log.TopicConfig{Partitions: n, Compact: log.Compacted, Fsync: log.FsyncAlways(), Retention: keep})
	if err != nil && !errors.Is(err, log.ErrTopicExists) {
		return nil, fmt.Errorf("group: offsets topic %s: %w", s.topic, err)
	}
	tc, err := d.TopicConfig(s.topic)
	if err == nil && tc.Compact == log.Compacted && tc.Retention != keep {
		tc, err = d.AlterTopicConfig(s.topic, func(c *log.TopicConfig) { c.Retention = keep })
	}
	if err != nil {
		return nil, fmt.Errorf("group: offsets topic %s: %w", s.topic, err)
	}
	if tc.Compact != log.Compacted {
		return nil, fmt.Errorf("%w: offsets topic %s is not compacted", ErrInvalidConfig, s.topic)
	}
	s.rt, err = coordinator.New(coordinator.Options{
		Partitions: tc.Partitions,
		Name:       func(id int32) string { return fmt.Sprintf("offsets log %s-%d", s.topic, id) },
		Load:       s.loadIn,
		Unload:     s.unload,
		Closed:     ErrServiceClosed,
	})
	if err != nil {
		return nil, err
	}
	for _, rp := range s.rt.Partitions() {
		p, err := d.Partition(s.topic, rp.ID())
		if err != nil {
			return nil, fmt.Errorf("group: offsets topic %s: %w", s.topic, err)
		}
		sp := &servicePartition{Partition: rp, p: p, sync: tc.Fsync != log.FsyncAlways() && tc.Fsync != log.FsyncPolicy{},
			waiting: map[RequestID]chan serviceResponse{}}
		sp.idle.L = rp
		s.parts = append(s.parts, sp)
	}
	if !opts.Unloaded {
		// A Dir's own offsets partitions are always its to coordinate, in
		// one epoch, as its transaction state partition is: the lifecycle
		// a cluster drives by leadership, here at once.
		for i := range s.parts {
			if err := s.Follow(int32(i), 0); err != nil {
				return nil, err
			}
		}
	}
	s.unroute = func() {}
	if s.repl == nil {
		s.unroute = d.RouteMarkers(s.topic, s.TxnCommitter())
	}
	go s.clock()
	return s, nil
}

// load builds a partition's coordinator from its log.
func (s *Service) load(sp *servicePartition) error {
	c, err := NewCoordinator(s.cfg, s.now())
	if err != nil {
		return err
	}
	sp.producers = map[int64]*txnProducer{}
	if topics, err := s.dir.Topics(); err == nil {
		c.LearnTopics(topics...)
	}
	if err := load(c, sp.p, sp.seen); err != nil {
		return err
	}
	sp.c, sp.loadedTo = c, 0
	if s.repl != nil {
		sp.loadedTo = c.nextOffset
	} else {
		// The Dir's lock proves its previous holder gone, and with it
		// the Consumers it ran: waiting out their sessions would stall
		// their groups for as long. A replicated partition's coordinator
		// moved from another node, whose Consumers live on.
		c.endSessions(InProcessHost)
	}
	return nil
}

// Load replays a partition of the offsets topic into a new coordinator and
// calls Loaded: the records of every batch, those of transactional batches
// with their producer, and the transaction markers of control batches.
func Load(c *Coordinator, p *log.Partition) error { return load(c, p, nil) }

// load is Load, showing every batch to seen if it is set.
func load(c *Coordinator, p *log.Partition, seen func(segment.Batch)) error {
	start, _, end, err := p.Offsets()
	if err != nil {
		return err
	}
	where := func(offset int64, err error) error {
		return fmt.Errorf("group: loading %s-%d at offset %d: %w", p.Topic(), p.ID(), offset, err)
	}
	for offset := start; offset < end; {
		bs, err := p.Read(offset, 1<<20, log.ReadLogEnd)
		if err != nil {
			return where(offset, err)
		}
		next, err := replayBatches(c, bs, offset, seen)
		_ = bs.Close()
		if err != nil {
			return where(offset, err)
		}
		if next == offset { // nothing below the end: the rest was compacted away
			break
		}
		offset = next
	}
	c.nextOffset = max(c.nextOffset, end)
	c.Loaded()
	return nil
}

// replayBatches replays the batches of one read from offset on and returns
// the offset after the last.
func replayBatches(c *Coordinator, bs *log.Batches, offset int64, seen func(segment.Batch)) (int64, error) {
	next := offset
	for b, err := range bs.All() {
		if err != nil {
			return next, err
		}
		next = b.LastOffset() + 1
		if seen != nil {
			seen(b)
		}
		var producer *idempotence.ProducerIDAndEpoch
		if b.Transactional() {
			producer = &idempotence.ProducerIDAndEpoch{ProducerID: b.ProducerID(), Epoch: b.ProducerEpoch()}
		}
		for r, err := range b.Records() {
			if err != nil {
				return next, err
			}
			if r.Offset < offset {
				continue
			}
			if b.Control() {
				commit, err := markerType(r.Key)
				if err != nil {
					return next, err
				}
				if err := c.ReplayTxnMarker(r.Offset, b.ProducerID(), commit); err != nil {
					return next, err
				}
				continue
			}
			if err := c.Replay(r.Offset, Record{Key: r.Key, Value: r.Value, Producer: producer}); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// markerType reads a control record's key (version int16, type int16: 0
// ABORT, 1 COMMIT, as Kafka's ControlRecordType) and reports a COMMIT.
func markerType(key []byte) (commit bool, err error) {
	if len(key) < 4 {
		return false, fmt.Errorf("%w: control record key of %d bytes", ErrCorruptRecord, len(key))
	}
	switch t := binary.BigEndian.Uint16(key[2:]); t {
	case 0:
		return false, nil
	case 1:
		return true, nil
	default:
		return false, fmt.Errorf("%w: control record type %d", ErrCorruptRecord, t)
	}
}

// clock fires the coordinators' timers when they are due, until Close.
func (s *Service) clock() {
	defer close(s.ticked)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// A timer armed on a partition already looked at would be missed
		// without a wake, which enter sends for any deadline before
		// fireAt; the wake makes the clock look again.
		s.fireAt.Store(math.MaxInt64)
		wait := time.Hour
		for _, sp := range s.parts {
			sp.Lock()
			if sp.State() != coordinator.Active {
				sp.Unlock()
				continue
			}
			if d, ok := sp.c.NextDeadline(); ok {
				wait = min(wait, d.Sub(s.now()))
			}
			sp.Unlock()
		}
		s.fireAt.Store(s.now().Add(wait).UnixNano())
		timer.Reset(max(wait, 0))
		select {
		case <-s.closed:
			return
		case <-timer.C:
		case <-s.wake:
			continue
		}
		for _, sp := range s.parts {
			_ = s.enter(sp, func() {}, nil)
		}
	}
}

// enter runs fn on the partition with its coordinator's clock advanced
// (which fires the timers due), then writes what the coordinator made
// unless another goroutine is writing, which will write it next.
func (s *Service) enter(sp *servicePartition, fn func(), own chan serviceResponse) error {
	sp.Lock()
	defer sp.Unlock()
	// Whatever fn and lead delivered, its waiters look.
	defer sp.idle.Broadcast()
	if err := sp.Refusal(); err != nil {
		return err
	}
	if err := s.uncommitted(sp); err != nil {
		return err
	}
	sp.c.Tick(s.now())
	fn()
	s.lead(sp, own)
	if d, ok := sp.c.NextDeadline(); ok && d.UnixNano() < s.fireAt.Load() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// lead writes the coordinator's Readys, one after the other; it is called
// with mu held, and releases it while it writes. If a goroutine is writing
// already, that one, or a waiter after it, writes them. A caller whose own
// response own has come stops and leaves the rest to the callers still
// waiting (wait), so that no caller writes for others for ever; one
// without a response of its own (the clock) writes until none is left.
func (s *Service) lead(sp *servicePartition, own chan serviceResponse) {
	for s.canLead(sp) {
		if len(own) > 0 && len(sp.waiting) > 0 {
			return
		}
		w := sp.pending()
		if len(w.rd.Records) == 0 && len(sp.inflight) == 0 {
			deliver(sp.waiting, w.rd.Responses, nil)
			continue
		}
		if s.pipelines(sp, w.rd) {
			s.pipeline(sp, w)
			continue
		}
		sp.writing = true
		sp.Unlock()
		err := s.write(sp, w)
		sp.Lock()
		sp.writing = false
		s.settle(sp, w.rd, err)
		sp.idle.Broadcast()
	}
}

// pendingWrite is a Ready on its way to the log: its records go at base
// on, stamped ts. In flight, queued says its append has its place in the
// log's order, and done that it returned, with err.
type pendingWrite struct {
	rd     Ready
	base   int64
	ts     int64
	queued bool
	done   bool
	err    error
}

// pending takes the coordinator's Ready for writing.
func (sp *servicePartition) pending() *pendingWrite {
	rd := sp.c.Ready()
	return &pendingWrite{rd: rd, base: sp.c.nextOffset - int64(len(rd.Records)), ts: sp.c.now}
}

// flush writes the coordinator's Readys and delivers their responses; it
// is called with mu held, and waits for the writes in flight first. It
// returns what ended the partition, if anything did.
func (s *Service) flush(sp *servicePartition) error {
	for sp.writing || len(sp.inflight) > 0 {
		sp.idle.Wait()
	}
	// A write that fails is its own requests' failure: the next goes on
	// from the coordinator rolled back, as long as it could be.
	for sp.State() == coordinator.Active && sp.c.HasReady() {
		w := sp.pending()
		s.settle(sp, w.rd, s.write(sp, w))
	}
	return sp.Refusal()
}

// write appends a Ready's records, durably. It touches the coordinator
// not at all, so it runs beside the loop.
func (s *Service) write(sp *servicePartition, w *pendingWrite) error {
	err := s.append(sp, w)
	if err == nil && sp.sync && len(w.rd.Records) > 0 {
		err = sp.p.Sync()
	}
	return err
}

// settle delivers the responses of a written Ready. If its write failed,
// they fail, with the coordinator error the append's error maps to
// (appendFailed), and the coordinator is rolled back to what its log
// holds (rollback).
func (s *Service) settle(sp *servicePartition, rd Ready, err error) {
	if err == nil {
		deliver(sp.waiting, rd.Responses, nil)
		return
	}
	err = s.appendFailed(sp, err)
	deliver(sp.waiting, rd.Responses, err)
	s.rollback(sp, err)
}

// appendFailed is what the requests of a write that failed with err are
// answered: the coordinator error Kafka answers them with
// (kafkaerr.CoordinatorWriteError), and the cause.
func (s *Service) appendFailed(sp *servicePartition, err error) error {
	return fmt.Errorf("%w: offsets log %s-%d: %w", kafkaerr.CodeOf(kafkaerr.CoordinatorWriteError(err)), s.topic, sp.p.ID(), err)
}

// rollback follows a failed write, with mu held and no write in flight.
// What the coordinator did since it made the write's Ready is no more in
// the log than the Ready's records: the requests still waiting on it are
// answered err, and the coordinator is loaded again from the log, as
// Kafka's CoordinatorRuntime reverts a coordinator whose append failed to
// its last written offset (failCurrentBatch, revertLastWrittenOffset).
// The partition is still coordinated here, whatever err was: only
// Follow gives it up, as only onResignation unloads a Kafka
// coordinator. A failure to load again ends the partition, a standalone
// Service's for good (Close reports it), a replicated one's until
// Follow loads it again.
func (s *Service) rollback(sp *servicePartition, err error) {
	sp.c.Unload()
	deliver(sp.waiting, sp.c.Ready().Responses, err)
	lerr := s.load(sp)
	if lerr == nil {
		return
	}
	sp.Fail(lerr)
	answerAll(sp.waiting)
}

// append writes records to the partition at the offsets the coordinator
// gave them: each run of plain records in one batch, each run of one
// producer's transactional records in a transactional batch of it.
func (s *Service) append(sp *servicePartition, w *pendingWrite) error {
	recs, want := w.rd.Records, w.base
	for len(recs) > 0 {
		n := 1
		for n < len(recs) && sameProducer(recs[n].Producer, recs[0].Producer) {
			n++
		}
		out := make([]segment.Record, n)
		for i, r := range recs[:n] {
			out[i] = segment.Record{Timestamp: w.ts, Key: r.Key, Value: r.Value}
		}
		res, err := s.appendRun(sp, recs[0].Producer, out)
		if err != nil {
			return err
		}
		if res.BaseOffset != want {
			return fmt.Errorf("records appended at offset %d, the coordinator expected %d", res.BaseOffset, want)
		}
		want += int64(n)
		recs = recs[n:]
	}
	return nil
}

func sameProducer(a, b *idempotence.ProducerIDAndEpoch) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// deliver answers the waiting requests of rs, with err instead when set.
func deliver(waiting map[RequestID]chan serviceResponse, rs []Response, err error) {
	for _, r := range rs {
		ch, ok := waiting[r.Request()]
		if !ok {
			continue
		}
		delete(waiting, r.Request())
		if err != nil {
			ch <- serviceResponse{err: err}
		} else {
			ch <- serviceResponse{r: r}
		}
	}
}

// answer answers request id, if it is still waiting, with err.
func answer(waiting map[RequestID]chan serviceResponse, id RequestID, err error) {
	if ch, ok := waiting[id]; ok {
		delete(waiting, id)
		ch <- serviceResponse{err: err}
	}
}

// answerAll answers every request still waiting, parked joins and syncs
// included, with NOT_COORDINATOR: the coordinators are dropped with the
// loop, as a broker drops them when it stops, and their clients find the
// coordinator again.
func answerAll(waiting map[RequestID]chan serviceResponse) {
	for id, ch := range waiting {
		ch <- serviceResponse{err: fmt.Errorf("%w: %w", ErrNotCoordinator, ErrServiceClosed)}
		delete(waiting, id)
	}
}

// wait waits until resp is answered, writing the partition's Readys
// whenever no one else is.
func (s *Service) wait(sp *servicePartition, resp chan serviceResponse) {
	sp.Lock()
	defer sp.Unlock()
	for len(resp) == 0 {
		if s.canLead(sp) {
			s.lead(sp, resp)
			sp.idle.Broadcast()
			continue
		}
		sp.idle.Wait()
	}
}

// Close stops the Service once the writes in flight are done, answering
// the requests still waiting with NOT_COORDINATOR, and returns the
// failures that ended partitions early. It does not close the Dir.
func (s *Service) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
		s.unroute()
	}
	<-s.ticked
	var errs []error
	for _, sp := range s.parts {
		sp.Lock()
		for sp.writing || len(sp.inflight) > 0 {
			sp.idle.Wait()
		}
		if sp.State() != coordinator.Closed {
			errs = append(errs, s.closeErr(sp))
			sp.Close()
			answerAll(sp.waiting)
		}
		sp.idle.Broadcast()
		sp.Unlock()
	}
	return errors.Join(errs...)
}

// do sends a request for a group to its coordinator and waits for the
// response.
func do[R Response](ctx context.Context, s *Service, groupID string, call func(c *Coordinator, id RequestID)) (R, error) {
	return send[R](ctx, s, serviceRequest{part: s.partitionOf(groupID), call: call})
}

func (s *Service) partitionOf(groupID string) int {
	return int(PartitionFor(groupID, int32(len(s.parts))))
}

// send makes a request on its partition and waits for its response.
func send[R Response](ctx context.Context, s *Service, req serviceRequest) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	resp := make(chan serviceResponse, 1) // never blocks a deliverer
	sp := s.parts[req.part]
	err := s.enter(sp, func() {
		sp.nextID++
		id := sp.nextID
		sp.waiting[id] = resp
		if req.run == nil {
			req.call(sp.c, id)
			return
		}
		// It needs every Ready written first.
		if err := s.flush(sp); err != nil {
			answer(sp.waiting, id, err)
			return
		}
		deliver(sp.waiting, []Response{req.run(id)}, nil)
	}, resp)
	if err != nil {
		return zero, err
	}
	s.wait(sp, resp)
	// Once taken, a request is answered, if only at Close.
	r := <-resp
	if r.err != nil {
		return zero, r.err
	}
	return r.r.(R), nil
}

// CheckJoin returns the error JoinGroup would answer req with before it
// looks at the group (ErrInvalidGroupID, ErrInvalidSessionTimeout against
// the Service's Config, ErrInvalidRequest for strings too long or a
// protocol listed twice), so that a client can refuse bad options before
// it joins.
func (s *Service) CheckJoin(req JoinGroupRequest) error {
	cfg, err := s.cfg.withDefaults() // checked by OpenService: no error
	if err != nil {
		return err
	}
	return cfg.checkJoin(req)
}

// Dir returns the Dir the Service keeps its offsets topic in.
func (s *Service) Dir() *log.Dir { return s.dir }

// JoinGroup joins a classic group; see Coordinator.JoinGroup. It returns when
// the join phase completes. A ctx done before the loop took the request
// returns ctx.Err(); after, the answer is awaited, since the coordinator has
// acted on it.
func (s *Service) JoinGroup(ctx context.Context, req JoinGroupRequest) (*JoinGroupResponse, error) {
	return do[*JoinGroupResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.JoinGroup(id, req) })
}

// SyncGroup hands a classic group's members their assignments; see
// Coordinator.SyncGroup.
func (s *Service) SyncGroup(ctx context.Context, req SyncGroupRequest) (*SyncGroupResponse, error) {
	return do[*SyncGroupResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.SyncGroup(id, req) })
}

// Heartbeat keeps a classic member's session alive and tells it of a
// rebalance; see Coordinator.Heartbeat.
func (s *Service) Heartbeat(ctx context.Context, req HeartbeatRequest) (*HeartbeatResponse, error) {
	return do[*HeartbeatResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.Heartbeat(id, req) })
}

// LeaveGroup removes members from a classic group; see
// Coordinator.LeaveGroup.
func (s *Service) LeaveGroup(ctx context.Context, req LeaveGroupRequest) (*LeaveGroupResponse, error) {
	return do[*LeaveGroupResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.LeaveGroup(id, req) })
}

// OffsetCommit commits offsets; a nil error and a nil Err per partition
// mean they are durable. See Coordinator.OffsetCommit.
func (s *Service) OffsetCommit(ctx context.Context, req OffsetCommitRequest) (*OffsetCommitResponse, error) {
	return do[*OffsetCommitResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.OffsetCommit(id, req) })
}

// OffsetFetch returns a group's committed offsets; see
// Coordinator.OffsetFetch.
func (s *Service) OffsetFetch(ctx context.Context, req OffsetFetchRequest) (*OffsetFetchResponse, error) {
	return do[*OffsetFetchResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.OffsetFetch(id, req) })
}

// OffsetDelete deletes a group's committed offsets of partitions it no
// longer consumes; see Coordinator.OffsetDelete.
func (s *Service) OffsetDelete(ctx context.Context, req OffsetDeleteRequest) (*OffsetDeleteResponse, error) {
	return do[*OffsetDeleteResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.OffsetDelete(id, req) })
}

// DeleteGroup deletes an empty group and its offsets; see
// Coordinator.DeleteGroup.
func (s *Service) DeleteGroup(ctx context.Context, groupID string) (*DeleteGroupResponse, error) {
	return do[*DeleteGroupResponse](ctx, s, groupID, func(c *Coordinator, id RequestID) { c.DeleteGroup(id, groupID) })
}

// Lag returns a group's lag on each partition (see Coordinator.Lag) against
// the partitions of the Service's Dir: up to the high watermark for
// ReadUncommitted consumers, up to the last stable offset for ReadCommitted
// ones (KAFKA-6607).
func (s *Service) Lag(ctx context.Context, groupID string, iso log.Isolation) ([]PartitionLag, error) {
	r, err := do[*lagResponse](ctx, s, groupID, func(c *Coordinator, id RequestID) {
		c.respond(&lagResponse{id: id, lag: c.Lag(groupID, DirOffsets(s.dir, iso))})
	})
	if err != nil {
		return nil, err
	}
	return r.lag, nil
}

// lagResponse carries Lag's answer through the loop.
type lagResponse struct {
	id  RequestID
	lag []PartitionLag
}

func (r *lagResponse) Request() RequestID { return r.id }

// DirOffsets returns the Offsets of the partitions of d for consumers of
// isolation iso: the log start offset, and the high watermark
// (ReadUncommitted), the last stable offset (ReadCommitted) or the log end
// (ReadLogEnd).
func DirOffsets(d *log.Dir, iso log.Isolation) Offsets {
	return func(topic string, partition int32) (start, end int64, ok bool) {
		p, err := d.Partition(topic, partition)
		if err != nil {
			return 0, 0, false
		}
		start, hw, leo, err := p.Offsets()
		if err != nil {
			return 0, 0, false
		}
		switch iso {
		case log.ReadUncommitted:
			return start, hw, true
		case log.ReadLogEnd:
			return start, leo, true
		}
		lso, err := p.LastStableOffset()
		return start, lso, err == nil
	}
}

// ConsumerGroupHeartbeat serves a member of a consumer group (KIP-848):
// it joins, heartbeats, receives its assignment and leaves; see
// Coordinator.ConsumerGroupHeartbeat.
func (s *Service) ConsumerGroupHeartbeat(ctx context.Context, req ConsumerGroupHeartbeatRequest) (*ConsumerGroupHeartbeatResponse, error) {
	return do[*ConsumerGroupHeartbeatResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) { c.ConsumerGroupHeartbeat(id, req) })
}

// DescribeGroup returns a classic group's state and members (Kafka's
// DescribeGroups); ok is false when no classic group has that id. See
// Coordinator.DescribeGroup.
func (s *Service) DescribeGroup(ctx context.Context, groupID string) (d GroupDescription, ok bool, err error) {
	r, err := do[*describeResponse](ctx, s, groupID, func(c *Coordinator, id RequestID) {
		d, ok := c.DescribeGroup(groupID)
		c.respond(&describeResponse{id: id, d: d, ok: ok})
	})
	if err != nil {
		return d, false, err
	}
	return r.d, r.ok, nil
}

// describeResponse carries DescribeGroup's answer to its caller.
type describeResponse struct {
	id RequestID
	d  GroupDescription
	ok bool
}

func (r *describeResponse) Request() RequestID { return r.id }

// GroupListing is one group as ListGroups shows it.
type GroupListing struct {
	GroupID      string
	ProtocolType string // "consumer" for every consumer group
	// Type is Kafka's group type (ListGroups v5): "classic" or "consumer".
	Type string
	// State is Kafka's name of the group's state: a classic group's State,
	// or a consumer group's state as ConsumerGroupDescription.State says.
	State string
}

// ListGroups returns the classic and consumer groups of every partition of
// the offsets topic (Kafka's ListGroups), by partition and then by id.
func (s *Service) ListGroups(ctx context.Context) ([]GroupListing, error) {
	var all []GroupListing
	for part := range s.parts {
		r, err := send[*listResponse](ctx, s, serviceRequest{part: part, call: func(c *Coordinator, id RequestID) {
			c.respond(&listResponse{id: id, groups: c.listGroups()})
		}})
		if s.notLoaded(err) {
			continue // another broker leads it
		}
		if err != nil {
			return nil, err
		}
		all = append(all, r.groups...)
	}
	return all, nil
}

// listGroups lists the coordinator's groups by id.
func (c *Coordinator) listGroups() []GroupListing {
	var out []GroupListing
	for _, g := range c.sortedGroups() {
		out = append(out, GroupListing{GroupID: g.id, ProtocolType: g.protocolType, Type: "classic", State: g.state.String()})
	}
	for _, id := range slices.Sorted(maps.Keys(c.consumerGroups)) {
		out = append(out, GroupListing{GroupID: id, ProtocolType: "consumer", Type: "consumer", State: c.consumerGroups[id].stateName()})
	}
	slices.SortFunc(out, func(a, b GroupListing) int { return strings.Compare(a.GroupID, b.GroupID) })
	return out
}

// listResponse carries one partition's part of ListGroups to its caller.
type listResponse struct {
	id     RequestID
	groups []GroupListing
}

func (r *listResponse) Request() RequestID { return r.id }
