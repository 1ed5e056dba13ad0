package idempotence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/strandlog/strand/internal/coordinator"
	"github.com/strandlog/strand/kafkaerr"
)

// TxnHost is where a TxnRuntime keeps its transaction state partitions
// and writes its markers: a Dir's own partition, or a cluster's
// replicated topic whose partitions this node leads.
type TxnHost interface {
	// ReadTxns calls fn with the records of a state partition, from its
	// log start to its end, in order.
	ReadTxns(partition int32, fn func(TxnRecord)) error
	// PersistTxn appends rec to a state partition and returns once it is
	// durable (in a cluster: committed, acks=all). Its error, which
	// carries Kafka's code, is answered to the request whose transition
	// rec is as Kafka's coordinator answers it
	// (kafkaerr.CoordinatorWriteError: a replica that no longer leads is
	// NOT_COORDINATOR, one short of in-sync replicas
	// COORDINATOR_NOT_AVAILABLE).
	PersistTxn(ctx context.Context, partition int32, rec TxnRecord) error
	// WriteMarker writes a transaction's marker on one of its partitions
	// (in a cluster: through that partition's leader, Kafka's
	// WriteTxnMarkers). A partition deleted since needs no marker: nil.
	WriteMarker(ctx context.Context, m MarkerRequest) error
}

// TxnRuntimeOptions configure a TxnRuntime.
type TxnRuntimeOptions struct {
	// Host holds the state partitions. Required.
	Host TxnHost
	// Partitions is the state topic's partition count; default 1.
	Partitions int32
	// PartitionFor maps a transactional id to its state partition (Kafka's
	// abs(hashCode) mod Partitions); required with more than one.
	PartitionFor func(txnID string) int32
	// Coordinator configures each partition's TxnCoordinator; its
	// CoordinatorEpoch is the leader epoch the partition is loaded in.
	Coordinator TxnCoordinatorConfig
	// Now is the clock; default time.Now.
	Now func() time.Time
	// ParallelMarkers writes a transaction's markers at once, and those of
	// different transactions at once, as a cluster does, whose markers go
	// to other nodes; without it they are written one after another, in
	// order, as a Dir's local appends are, so that its writes come in an
	// order its crash tests can replay.
	ParallelMarkers bool
	// OnError hears what no request returns: the markers of a decision
	// made durable that could not be written yet (Tick writes them
	// again).
	OnError func(error)
}

// TxnRuntime is a transaction coordinator over partitions of a state
// topic (Kafka's TransactionCoordinator with its TransactionStateManager
// and TransactionMarkerChannelManager): one TxnCoordinator per partition
// loaded here, each transition persisted through the TxnHost before it
// takes effect, and markers written for every transaction that ends. A
// Dir runs one over its single state partition, always loaded; a cluster
// node loads a partition when its replica becomes the partition's leader
// (Follow; COORDINATOR_LOAD_IN_PROGRESS meanwhile) and gives it up when it
// stops (NOT_COORDINATOR), so that the rules are written once.
//
// Requests of different transactional ids run concurrently: a partition's
// lock is held only to step its TxnCoordinator, never across the host's
// writes. A request that finds its id completing (CONCURRENT_TRANSACTIONS)
// writes the markers still to write and is made again, so that the
// producer's retry is not needed for markers that could be written at
// once. TxnRuntime is safe for concurrent use.
type TxnRuntime struct {
	opts  TxnRuntimeOptions
	rt    *coordinator.Runtime // the partitions' life, by leadership
	parts []*txnPartition
	ctx   context.Context // ended by Close: the host's writes in flight give up
	stop  context.CancelFunc
}

// txnPartition is the coordinator of one state partition. Its lock is
// the runtime's partition lock; its Epoch is the coordinator epoch of its
// markers (Kafka's coordinatorEpoch).
type txnPartition struct {
	*coordinator.Partition
	// c coordinates the partition's ids while it is Active; nil while it
	// is not.
	c *TxnCoordinator
	// sending are the transactional ids whose markers are being written.
	sending map[string]bool
}

// NewTxnRuntime returns a runtime with no partition loaded.
func NewTxnRuntime(opts TxnRuntimeOptions) (*TxnRuntime, error) {
	if opts.Host == nil {
		return nil, errors.New("idempotence: TxnRuntimeOptions.Host is required")
	}
	if opts.Partitions == 0 {
		opts.Partitions = 1
	}
	if opts.Partitions < 0 || (opts.Partitions > 1 && opts.PartitionFor == nil) {
		return nil, fmt.Errorf("idempotence: TxnRuntimeOptions: %d partitions need a PartitionFor", opts.Partitions)
	}
	if opts.PartitionFor == nil {
		opts.PartitionFor = func(string) int32 { return 0 }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OnError == nil {
		opts.OnError = func(error) {}
	}
	if _, err := opts.Coordinator.withDefaults(); err != nil {
		return nil, err
	}
	r := &TxnRuntime{opts: opts}
	r.ctx, r.stop = context.WithCancel(context.Background())
	rt, err := coordinator.New(coordinator.Options{
		Partitions: opts.Partitions,
		Name:       func(id int32) string { return fmt.Sprintf("transaction state partition %d", id) },
		Load:       r.load,
		Unload:     func(id int32) { r.parts[id].c = nil },
		Closed:     ErrInvalidRequest, // never: a TxnRuntime closes no partition
	})
	if err != nil {
		return nil, err
	}
	r.rt = rt
	for _, p := range rt.Partitions() {
		r.parts = append(r.parts, &txnPartition{Partition: p, sending: map[string]bool{}})
	}
	return r, nil
}

// Close makes the host's writes in flight give up, and later requests
// with them.
func (r *TxnRuntime) Close() { r.stop() }

func (r *TxnRuntime) partition(txnID string) (*txnPartition, error) {
	id := r.opts.PartitionFor(txnID)
	if id < 0 || int(id) >= len(r.parts) {
		return nil, fmt.Errorf("%w: transactional id %q maps to state partition %d of %d", ErrInvalidRequest, txnID, id, len(r.parts))
	}
	return r.parts[id], nil
}

// Follow tells the runtime that this node leads a state partition in
// leaderEpoch, or, with -1, that it does not: a partition loaded in
// another epoch is unloaded (Kafka's onResignation), and one led now and
// not loaded is loaded from the host (onElection), which Follow waits
// for. Requests meanwhile are answered COORDINATOR_LOAD_IN_PROGRESS.
func (r *TxnRuntime) Follow(partition, leaderEpoch int32) error {
	return r.rt.Follow(partition, leaderEpoch)
}

// Loaded reports the leader epoch a partition is loaded in.
func (r *TxnRuntime) Loaded(partition int32) (int32, bool) { return r.rt.Loaded(partition) }

// load reads a state partition into a new coordinator whose markers
// carry epoch.
func (r *TxnRuntime) load(partition, epoch int32) (install func(), err error) {
	opts := r.opts.Coordinator
	opts.CoordinatorEpoch = epoch
	c, err := NewTxnCoordinator(opts)
	if err != nil {
		return nil, err
	}
	if err := r.opts.Host.ReadTxns(partition, c.Replay); err != nil {
		return nil, err
	}
	return func() { r.parts[partition].c = c }, nil
}

// coordinatorLocked returns the partition's coordinator, or the error a
// request for one of its ids is answered with.
func (p *txnPartition) coordinatorLocked() (*TxnCoordinator, error) {
	if err := p.Refusal(); err != nil {
		return nil, err
	}
	return p.c, nil
}

// request steps txnID's coordinator with fn and returns the step with the
// coordinator it ran on.
func (r *TxnRuntime) request(txnID string, fn func(c *TxnCoordinator, now time.Time) (Step, error)) (*txnPartition, *TxnCoordinator, Step, error) {
	p, err := r.partition(txnID)
	if err != nil {
		return nil, nil, Step{}, err
	}
	p.Lock()
	defer p.Unlock()
	c, err := p.coordinatorLocked()
	if err != nil {
		return p, nil, Step{}, err
	}
	s, err := fn(c, r.opts.Now())
	return p, c, s, err
}

// run persists rec, the pending transition of its id on c, and makes it
// take effect, then the transition that follows at once, if any. Markers
// it calls for are left to finish.
func (r *TxnRuntime) run(p *txnPartition, c *TxnCoordinator, rec *TxnRecord) error {
	for rec != nil {
		err := r.opts.Host.PersistTxn(r.ctx, p.ID(), *rec)
		p.Lock()
		if p.c != c {
			moved := fmt.Errorf("%w: transaction state partition %d moved while %q was written", ErrNotCoordinator, p.ID(), rec.TransactionalID)
			if err == nil {
				// Written after the partition was loaded again, which may
				// have missed it: it is loaded once more at the next Follow.
				p.c = nil
				p.Fail(moved)
			}
			p.Unlock()
			return moved
		}
		if err != nil {
			err = errors.Join(fmt.Errorf("persisting %q %v: %w", rec.TransactionalID, rec.State, kafkaerr.CoordinatorWriteError(err)),
				c.Abandon(rec.TransactionalID))
			p.Unlock()
			return err
		}
		f, err := c.Complete(*rec)
		p.Unlock()
		if err != nil {
			return err
		}
		rec = f.Next
	}
	return nil
}

// finish writes the markers of txnID's completing transaction, all at
// once, then its Complete record. It returns at once if another finish is
// writing them (errMarkersInFlight), and leaves those it could not write
// to the next Tick; its error says which.
func (r *TxnRuntime) finish(p *txnPartition, c *TxnCoordinator, txnID string) error {
	p.Lock()
	if p.c != c {
		p.Unlock()
		return fmt.Errorf("%w: transaction state partition %d moved", ErrNotCoordinator, p.ID())
	}
	if p.sending[txnID] {
		p.Unlock()
		return errMarkersInFlight
	}
	var ms []MarkerRequest
	for _, m := range c.Markers() {
		if m.TransactionalID == txnID {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		p.Unlock()
		return nil
	}
	p.sending[txnID] = true
	p.Unlock()
	defer func() {
		p.Lock()
		delete(p.sending, txnID)
		p.Unlock()
	}()

	written := make([]error, len(ms))
	r.each(len(ms), func(i int) { written[i] = r.opts.Host.WriteMarker(r.ctx, ms[i]) })
	var next *TxnRecord
	var errs []error
	p.Lock()
	for i, m := range ms {
		if err := written[i]; err != nil {
			errs = append(errs, fmt.Errorf("%v marker of %q on %s-%d not written yet: %w", m.Type, txnID, m.Partition.Topic, m.Partition.Partition, err))
			continue
		}
		if p.c != c {
			errs = append(errs, fmt.Errorf("%w: transaction state partition %d moved", ErrNotCoordinator, p.ID()))
			break
		}
		n, err := c.MarkerWritten(txnID, m.Partition, r.opts.Now())
		if err != nil {
			errs = append(errs, fmt.Errorf("marker of %q on %s-%d: %w", txnID, m.Partition.Topic, m.Partition.Partition, err))
		}
		if n != nil {
			next = n
		}
	}
	p.Unlock()
	if next != nil {
		if err := r.run(p, c, next); err != nil {
			errs = append(errs, fmt.Errorf("completing the transaction of %q: %w", txnID, err))
		}
	}
	return errors.Join(errs...)
}

// errMarkersInFlight is finish's answer when another finish of the same
// transaction is writing its markers.
var errMarkersInFlight = errors.New("idempotence: the transaction's markers are being written")

// Tick carries out, for every loaded partition, the transitions the
// clock makes due (the abort of a transaction open past its timeout, with
// the producer epoch bumped to fence its producer; the expiry of an idle
// id), and writes the markers of every completing transaction, those of
// different transactions at once; it returns once they are written or
// failed, with what failed. Kafka checks timeouts every 10 s
// (transaction.abort.timed.out.transaction.cleanup.interval.ms).
func (r *TxnRuntime) Tick() error {
	var errs []error
	for _, p := range r.parts {
		errs = append(errs, r.tick(p))
	}
	return errors.Join(errs...)
}

func (r *TxnRuntime) tick(p *txnPartition) error {
	p.Lock()
	c := p.c
	if c == nil {
		p.Unlock()
		return nil
	}
	recs, err := c.Tick(r.opts.Now())
	p.Unlock()
	errs := []error{err}
	for _, rec := range recs {
		if err := r.run(p, c, rec); err != nil {
			errs = append(errs, fmt.Errorf("transaction timeout of %q: %w", rec.TransactionalID, err))
		}
	}
	return errors.Join(append(errs, r.flush(p, c))...)
}

// Flush writes the markers of every completing transaction of the loaded
// partitions, those of different transactions at once, and returns once
// they are written or failed. A Dir calls it when it opens, so that a
// commit decided before a crash completes after it.
func (r *TxnRuntime) Flush() error {
	var errs []error
	for _, p := range r.parts {
		p.Lock()
		c := p.c
		p.Unlock()
		if c != nil {
			errs = append(errs, r.flush(p, c))
		}
	}
	return errors.Join(errs...)
}

func (r *TxnRuntime) flush(p *txnPartition, c *TxnCoordinator) error {
	p.Lock()
	var ids []string
	for _, m := range c.Markers() { // sorted by transactional id
		if !p.sending[m.TransactionalID] && (len(ids) == 0 || ids[len(ids)-1] != m.TransactionalID) {
			ids = append(ids, m.TransactionalID)
		}
	}
	p.Unlock()
	errs := make([]error, len(ids))
	r.each(len(ids), func(i int) {
		if err := r.finish(p, c, ids[i]); !errors.Is(err, errMarkersInFlight) {
			errs[i] = err
		}
	})
	return errors.Join(errs...)
}

// each calls fn for 0 to n-1, at once under ParallelMarkers, else in
// order.
func (r *TxnRuntime) each(n int, fn func(i int)) {
	if !r.opts.ParallelMarkers {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// step makes a request's transition and writes the markers it calls for;
// a request that finds its id completing is made again once the markers
// are written.
func (r *TxnRuntime) step(txnID string, fn func(c *TxnCoordinator, now time.Time) (Step, error)) (Step, error) {
	p, c, s, err := r.request(txnID, fn)
	if errors.Is(err, ErrConcurrentTransactions) && r.finish(p, c, txnID) == nil {
		p, c, s, err = r.request(txnID, fn)
	}
	if err != nil {
		return s, err
	}
	if err := r.run(p, c, s.Record); err != nil {
		return s, err
	}
	if s.Record != nil {
		// The decision is durable: markers not written now are written
		// again by Tick.
		if err := r.finish(p, c, txnID); err != nil && !errors.Is(err, errMarkersInFlight) {
			r.opts.OnError(fmt.Errorf("idempotence: %w", err))
		}
	}
	return s, nil
}

// InitProducerID gives transactional id txnID a producer id and epoch
// (Kafka's InitProducerId): a new id gets a new producer id; a known one
// gets its epoch bumped, which fences the producer that had it. A
// transaction the id has open is aborted first. timeout is how long its
// transactions may stay open (transaction.timeout.ms), at most
// TxnCoordinatorConfig.MaxTransactionTimeout.
func (r *TxnRuntime) InitProducerID(txnID string, timeout time.Duration) (ProducerIDAndEpoch, error) {
	return r.initProducerID(txnID, timeout, nil)
}

// ReinitProducerID is InitProducerID for a producer that has a producer id
// and epoch already, current (InitProducerId v3+ carrying them, KIP-360):
// it is ErrProducerFenced unless current is txnID's producer at its epoch,
// or at the epoch before if this repeats a call whose answer was lost.
func (r *TxnRuntime) ReinitProducerID(txnID string, timeout time.Duration, current ProducerIDAndEpoch) (ProducerIDAndEpoch, error) {
	return r.initProducerID(txnID, timeout, &current)
}

func (r *TxnRuntime) initProducerID(txnID string, timeout time.Duration, expected *ProducerIDAndEpoch) (ProducerIDAndEpoch, error) {
	ms := timeout.Milliseconds()
	if ms > math.MaxInt32 {
		ms = -1 // refused by the coordinator as out of range
	}
	// An open transaction is aborted first (CONCURRENT_TRANSACTIONS once
	// its abort is written); the request made again then succeeds unless
	// its markers could not be written.
	for range 2 {
		s, err := r.step(txnID, func(c *TxnCoordinator, now time.Time) (Step, error) {
			return c.InitProducerID(txnID, int32(ms), expected, now)
		})
		if err != nil {
			return ProducerIDAndEpoch{}, err
		}
		if s.Err == nil {
			return ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, nil
		}
	}
	return ProducerIDAndEpoch{}, fmt.Errorf("%w: the open transaction of %q is still being aborted", ErrConcurrentTransactions, txnID)
}

// AddPartitions adds partitions to the transaction of producer, which has
// transactional id txnID, beginning one if none is open (Kafka's
// AddPartitionsToTxn, which under transactions version 2 the partition
// leader sends when the producer first writes to a partition). The caller
// checks that the partitions exist.
func (r *TxnRuntime) AddPartitions(txnID string, producer ProducerIDAndEpoch, partitions ...TopicPartition) error {
	_, err := r.step(txnID, func(c *TxnCoordinator, now time.Time) (Step, error) {
		return c.AddPartitions(txnID, producer.ProducerID, producer.Epoch, partitions, now)
	})
	return err
}

// EndTxn commits or aborts the transaction of producer (Kafka's EndTxn,
// version 5). It returns once the decision is durable, after one attempt
// at its markers (those not written are written again by Tick), with the
// producer id and epoch of the producer's next transaction.
func (r *TxnRuntime) EndTxn(txnID string, producer ProducerIDAndEpoch, commit bool) (ProducerIDAndEpoch, error) {
	s, err := r.step(txnID, func(c *TxnCoordinator, now time.Time) (Step, error) {
		return c.EndTxn(txnID, producer.ProducerID, producer.Epoch, commit, now)
	})
	if err != nil {
		return ProducerIDAndEpoch{}, err
	}
	return ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, nil
}

// Describe returns txnID's durable state if its partition is loaded here
// (Kafka's DescribeTransactions).
func (r *TxnRuntime) Describe(txnID string) (TxnRecord, bool) {
	p, err := r.partition(txnID)
	if err != nil {
		return TxnRecord{}, false
	}
	p.Lock()
	defer p.Unlock()
	if p.c == nil {
		return TxnRecord{}, false
	}
	return p.c.Transaction(txnID)
}

// List returns the durable state of every transactional id of the loaded
// partitions, by id (Kafka's ListTransactions).
func (r *TxnRuntime) List() []TxnRecord {
	var out []TxnRecord
	for _, p := range r.parts {
		p.Lock()
		if p.c != nil {
			out = append(out, p.c.Transactions()...)
		}
		p.Unlock()
	}
	slices.SortFunc(out, func(a, b TxnRecord) int { return cmp.Compare(a.TransactionalID, b.TransactionalID) })
	return out
}

// Verify checks that the partitions are in the open transaction of
// producer, txnID's current producer (KIP-890 part 1's verification, which a partition's
// leader asks before it appends a transactional batch).
func (r *TxnRuntime) Verify(txnID string, producer ProducerIDAndEpoch, partitions ...TopicPartition) error {
	p, err := r.partition(txnID)
	if err != nil {
		return err
	}
	p.Lock()
	defer p.Unlock()
	c, err := p.coordinatorLocked()
	if err != nil {
		return err
	}
	rec, ok := c.Transaction(txnID)
	switch {
	case !ok || rec.ProducerID != producer.ProducerID:
		return fmt.Errorf("%w: producer %d is not transactional id %q's", ErrInvalidTxnState, producer.ProducerID, txnID)
	case rec.ProducerEpoch != producer.Epoch:
		return fmt.Errorf("%w: epoch %d, transactional id %q is at %d", ErrInvalidProducerEpoch, producer.Epoch, txnID, rec.ProducerEpoch)
	case rec.State != TxnOngoing:
		return fmt.Errorf("%w: %q has no open transaction", ErrInvalidTxnState, txnID)
	}
	for _, tp := range partitions {
		if !slices.Contains(rec.Partitions, tp) {
			return fmt.Errorf("%w: %s is not in the open transaction of %q", ErrInvalidTxnState, tp, txnID)
		}
	}
	return nil
}
