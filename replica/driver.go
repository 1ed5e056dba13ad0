package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Transport carries a driver's messages to other nodes and to the
// controller (To is NoNode); the application implements it over its own
// RPC, and hands the messages it receives to Driver.Receive. Send is
// called from the driver's loop: it should queue the message and return,
// not wait for the network. Losing a message is allowed; the protocol
// sends again what matters.
type Transport interface {
	Send(m Message)
}

// DriverOptions configures a Driver.
type DriverOptions struct {
	Node      *Node
	Transport Transport
	// TickInterval is how often the node ticks; default 100 ms, the
	// interval Config's defaults assume.
	TickInterval time.Duration
	// OnError, if set, hears the errors of stepping received messages
	// (most are stale messages, which the protocol expects).
	OnError func(error)
	// SyncWrites has each partition's writer sync its log once after it
	// applied a Ready's writes, and tell the partition (Partition.Synced)
	// after it has advanced it: a group commit of the Ready's appends,
	// meant to let the partition go on (a leader serve its followers, a
	// follower fetch) while the sync runs. It is for logs that do not
	// sync their appends themselves (FsyncNever) and partitions under
	// Config.SyncedAcks, where only what is synced counts: an AcksAll
	// result then means on disk on every ISR member, as under
	// FsyncAlways, with one fsync per Ready rather than per batch.
	//
	// log.Log.Sync holds the log's writer lock while it syncs, and the
	// partition's reads of the log (SyncedEndOffset, EndOffsetForEpoch)
	// take that lock: today they wait for the sync, so the overlap is
	// lost (examples/benchmarks/REPLICA.md).
	SyncWrites bool
}

// ErrStopped is returned by a Driver that was stopped.
var ErrStopped = errors.New("replica: driver stopped")

// Driver runs a Node with goroutines, in the style of etcd raft's node.go:
// one loop steps messages, ticks and produces and sends what the node
// emits, and each partition has a writer goroutine that applies its writes
// in order, so that a slow fsync holds up only its own partition. The
// application supplies the Transport and hands received messages to
// Receive; Produce blocks until a produce's result.
type Driver struct {
	cfg     DriverOptions
	node    *Node
	inbox   chan func() // unbuffered: a send succeeds only into a running loop
	done    chan writeDone
	stop    chan struct{}
	exiting chan struct{} // closed when the loop takes no more work
	stopped chan struct{} // closed when Run returns
	wg      sync.WaitGroup

	// Owned by the loop.
	writers map[*Partition]*writer
	waiting map[produceKey]chan ProduceResult
	nextID  uint64
}

type produceKey struct {
	topic     string
	partition int32
	id        uint64
}

type writeDone struct {
	p   *Partition
	rd  Ready
	err error
	// synced: not the end of a Ready's writes but of the sync after
	// them (SyncWrites).
	synced bool
}

// NewDriver returns a driver of cfg.Node; Run starts it. From then on the
// node belongs to the driver's loop: add partitions with AddPartition.
func NewDriver(cfg DriverOptions) (*Driver, error) {
	if cfg.Node == nil || cfg.Transport == nil {
		return nil, fmt.Errorf("%w: a driver needs a Node and a Transport", ErrInvalidConfig)
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	return &Driver{
		cfg: cfg, node: cfg.Node, inbox: make(chan func()), done: make(chan writeDone),
		stop: make(chan struct{}), exiting: make(chan struct{}), stopped: make(chan struct{}),
		writers: map[*Partition]*writer{}, waiting: map[produceKey]chan ProduceResult{},
	}, nil
}

// Run runs the loop until Stop or ctx ends; it returns once every
// goroutine of the driver has ended.
func (d *Driver) Run(ctx context.Context) error {
	defer close(d.stopped)
	ticker := time.NewTicker(d.cfg.TickInterval)
	defer ticker.Stop()
	defer d.shutdown()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.stop:
			return nil
		case <-ticker.C:
			d.node.Tick()
		case fn := <-d.inbox:
			fn()
		case wd := <-d.done:
			d.completed(wd)
		}
		d.flush()
	}
}

// completed takes a writer's news: a Ready's writes applied, or the sync
// after them.
func (d *Driver) completed(wd writeDone) {
	if wd.err != nil {
		wd.p.Fail(wd.err)
	}
	if wd.synced {
		wd.p.Synced()
		return
	}
	if err := wd.p.Advance(wd.rd); err != nil {
		d.report(err)
	}
}

// flush hands out everything the node has to do.
func (d *Driver) flush() {
	for d.node.HasReady() {
		rd := d.node.Ready()
		for _, m := range rd.Messages {
			d.cfg.Transport.Send(m)
		}
		for _, r := range rd.Results {
			key := produceKey{r.Topic, r.Partition, r.ID}
			if ch, ok := d.waiting[key]; ok && r.To == d.node.id {
				delete(d.waiting, key)
				ch <- r
				continue
			}
			d.cfg.Transport.Send(&r)
		}
		for _, pr := range rd.Partitions {
			d.writer(pr.Partition).push(pr.Ready)
		}
	}
}

func (d *Driver) writer(p *Partition) *writer {
	w, ok := d.writers[p]
	if !ok {
		w = &writer{p: p, wake: make(chan struct{}, 1)}
		d.writers[p] = w
		d.wg.Add(1)
		go w.run(d)
	}
	return w
}

func (d *Driver) report(err error) {
	if err != nil && d.cfg.OnError != nil {
		d.cfg.OnError(err)
	}
}

// shutdown stops the writers and fails the produces still waiting.
// Callers are refused from its start: a writer may be in a sync that
// takes as long as the disk does.
func (d *Driver) shutdown() {
	close(d.exiting)
	for _, w := range d.writers {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		w.signal()
	}
	// Writers may be blocked handing a completion to the loop.
	finished := make(chan struct{})
	go func() { d.wg.Wait(); close(finished) }()
	for {
		select {
		case <-d.done:
		case <-finished:
			for key, ch := range d.waiting {
				ch <- ProduceResult{ID: key.id, Err: ErrStopped}
			}
			return
		}
	}
}

// do runs fn on the loop, or fails with ErrStopped.
func (d *Driver) do(ctx context.Context, fn func()) error {
	select {
	case d.inbox <- fn:
		return nil
	case <-d.exiting:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AddPartition adds a partition to the node while the driver runs; see
// Node.Add.
func (d *Driver) AddPartition(ctx context.Context, cfg Config) error {
	return d.call(ctx, func() error { _, err := d.node.Add(cfg); return err })
}

// RemovePartition takes a partition off the node while the driver runs
// (Node.Remove; Kafka's StopReplica with deletion, for a deleted topic)
// and reports whether the node had it. The produces waiting on it end
// with ErrUnknownTopicOrPartition; its writer drops the writes still queued and
// stops after the one it applies, if any. The application deletes the
// log after: the partition no longer writes to it but for that one.
func (d *Driver) RemovePartition(ctx context.Context, topic string, partition int32) (bool, error) {
	var had bool
	err := d.call(ctx, func() error {
		p := d.node.Partition(topic, partition)
		if p == nil {
			return nil
		}
		had = d.node.Remove(topic, partition)
		for key, ch := range d.waiting {
			if key.topic == topic && key.partition == partition {
				delete(d.waiting, key)
				ch <- ProduceResult{ID: key.id, Err: fmt.Errorf("%w: %s-%d was removed", ErrUnknownTopicOrPartition, topic, partition)}
			}
		}
		if w := d.writers[p]; w != nil {
			delete(d.writers, p)
			w.mu.Lock()
			w.closed, w.queue = true, nil
			w.mu.Unlock()
			w.signal()
		}
		return nil
	})
	return had, err
}

// Status returns a partition's state as the loop has it now
// (Partition.Status), or ErrUnknownTopicOrPartition if the node has none. An
// application asks it before it acts as the partition's leader, as when
// it loads a coordinator from the partition: Kafka's coordinators follow
// their replica's election, not the metadata alone, which a restarted
// node may replay before its replicas take any of it up.
func (d *Driver) Status(ctx context.Context, topic string, partition int32) (Status, error) {
	var st Status
	err := d.call(ctx, func() error {
		p := d.node.Partition(topic, partition)
		if p == nil {
			return fmt.Errorf("%w: %s-%d", ErrUnknownTopicOrPartition, topic, partition)
		}
		st = p.Status()
		return nil
	})
	return st, err
}

// SetBrokerEpoch tells the node the broker epoch the controller
// registered it in; see Node.SetBrokerEpoch.
func (d *Driver) SetBrokerEpoch(ctx context.Context, epoch int64) error {
	return d.call(ctx, func() error { return d.node.SetBrokerEpoch(epoch) })
}

// call runs fn on the loop and returns its error, or ErrStopped.
func (d *Driver) call(ctx context.Context, fn func() error) error {
	errc := make(chan error, 1)
	if err := d.do(ctx, func() { errc <- fn() }); err != nil {
		return err
	}
	return <-errc
}

// Receive hands the driver a message that arrived for its node. It waits
// only while the loop is busy.
func (d *Driver) Receive(ctx context.Context, m Message) error {
	return d.do(ctx, func() { d.report(d.node.Step(m)) })
}

// Produce appends batch to a partition this node leads and waits for its
// result: a ProduceResult whose Err says how it ended, or the refusal.
// The partition takes a copy of batch: the caller may send the same bytes
// again, as an idempotent producer retries.
func (d *Driver) Produce(ctx context.Context, topic string, partition int32, acks Acks, batch []byte) (ProduceResult, error) {
	return d.produce(ctx, Produce{Header: Header{Topic: topic, Partition: partition}, Acks: acks, Batch: batch})
}

// ProduceAsCoordinator is Produce for a coordinator's batch
// (Produce.Coordinator): a transaction marker, or a group or transaction
// coordinator's records.
func (d *Driver) ProduceAsCoordinator(ctx context.Context, topic string, partition int32, acks Acks, batch []byte) (ProduceResult, error) {
	return d.produce(ctx, Produce{Header: Header{Topic: topic, Partition: partition}, Acks: acks, Batch: batch, Coordinator: true})
}

// ProduceAsync is Produce without the wait: it returns once the
// partition has stepped the batch, so that the batches of successive
// calls from one goroutine reach the partition in that order (an
// idempotent producer's pipeline, up to Kafka's five in flight), with a
// channel that receives the result once (Err ErrStopped if the driver
// stops first).
func (d *Driver) ProduceAsync(ctx context.Context, topic string, partition int32, acks Acks, batch []byte) (<-chan ProduceResult, error) {
	return d.submit(ctx, Produce{Header: Header{Topic: topic, Partition: partition}, Acks: acks, Batch: batch})
}

// produce steps m and waits for its result.
func (d *Driver) produce(ctx context.Context, m Produce) (ProduceResult, error) {
	ch, err := d.submit(ctx, m)
	if err != nil {
		return ProduceResult{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		// The result still comes, to a channel nobody reads.
		return ProduceResult{}, ctx.Err()
	}
}

// submit steps m, from and to this node under an id of the driver's, and
// returns the channel its result comes to.
//
// The partition stamps its offsets and epoch into the batch it takes
// (Produce), and its writer reads the batch while the caller may already
// send the same bytes again: an idempotent producer's retry, to this
// driver or another after a timeout. So the partition gets a copy, and
// the caller keeps its batch as it was.
func (d *Driver) submit(ctx context.Context, m Produce) (<-chan ProduceResult, error) {
	m.Batch = slices.Clone(m.Batch)
	ch := make(chan ProduceResult, 1)
	errc := make(chan error, 1)
	topic, partition := m.Topic, m.Partition
	err := d.do(ctx, func() {
		d.nextID++
		id := d.nextID
		m.From, m.To, m.ID = d.node.id, d.node.id, id
		err := d.node.Step(&m)
		if err == nil {
			d.waiting[produceKey{topic, partition, id}] = ch
		}
		errc <- err
	})
	if err != nil {
		return nil, err
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	return ch, nil
}

// Stop stops the loop and waits for Run to return; call it only once Run
// was started.
func (d *Driver) Stop() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.stopped
}

// writer applies one partition's writes in order.
type writer struct {
	p      *Partition
	wake   chan struct{}
	mu     sync.Mutex
	queue  []Ready
	closed bool
}

func (w *writer) push(rd Ready) {
	w.mu.Lock()
	w.queue = append(w.queue, rd)
	w.mu.Unlock()
	w.signal()
}

func (w *writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *writer) run(d *Driver) {
	defer d.wg.Done()
	for range w.wake {
		for {
			w.mu.Lock()
			if w.closed {
				w.mu.Unlock()
				return
			}
			if len(w.queue) == 0 {
				w.mu.Unlock()
				break
			}
			rd := w.queue[0]
			w.queue = w.queue[1:]
			w.mu.Unlock()
			err := ApplyWrites(w.p.cfg.Log, rd.Writes)
			if !w.report(d, writeDone{p: w.p, rd: rd, err: err}) {
				return
			}
			if err != nil || !d.cfg.SyncWrites || len(rd.Writes) == 0 {
				continue
			}
			if err := w.p.cfg.Log.Sync(); err != nil {
				err = fmt.Errorf("replica: sync: %w", err)
				if !w.report(d, writeDone{p: w.p, err: err, synced: true}) {
					return
				}
				continue
			}
			if !w.report(d, writeDone{p: w.p, synced: true}) {
				return
			}
		}
	}
}

// report hands a completion to the loop; false if the driver stopped.
func (w *writer) report(d *Driver, wd writeDone) bool {
	select {
	case d.done <- wd:
		return true
	case <-d.stop:
		return false
	}
}
