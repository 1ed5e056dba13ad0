package log

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

// TransactionStateTopic is the compacted topic in which a Dir's transaction
// coordinator keeps the state of each transactional id, one record per
// transition, keyed by the id, in the bytes of Kafka's __transaction_state
// (idempotence.MarshalTxnRecord). It has one partition, syncs every
// append and has no retention.
const TransactionStateTopic = "__transaction_state"

// txnAbortInterval is how often the background maintenance looks for
// transactions open past their timeout (Kafka's
// transaction.abort.timed.out.transaction.cleanup.interval.ms).
const txnAbortInterval = 10 * time.Second

// dirTxns holds a Dir's transaction coordinator once it exists.
type dirTxns struct {
	mu sync.Mutex
	t  *Transactions
	// committers write the markers of their topics' partitions (see
	// RouteMarkers), whether or not the coordinator exists yet; under
	// their own lock, which the coordinator's load takes under mu.
	cmu        sync.Mutex
	committers map[string]TxnOffsetCommitter
}

// Transactions is a Dir's transaction coordinator: Kafka's, with
// transactions version 2 (KIP-890), made durable in TransactionStateTopic.
// Every transition of a transactional id is appended to that topic, and
// durable, before it takes effect (idempotence.TxnCoordinator holds the
// rules); OpenDir replays the topic into a new coordinator, which is then
// the one that ran before, and writes the markers of the transactions that
// were completing, so that a commit decided before a crash completes after
// it. A transaction ends with a COMMIT or ABORT marker written with
// Partition.AppendMarker to each of its partitions once its PrepareCommit
// or PrepareAbort record is durable, then a CompleteCommit or
// CompleteAbort record.
//
// Time is the Dir's clock (Options.Now). Maintain, and the background
// maintenance every 10 seconds unless DirOptions.MaintenanceInterval is
// negative, abort the transactions open past their timeout, with the
// producer epoch bumped so that their producer is fenced, and expire
// transactional ids idle for idempotence.DefaultTransactionalIDExpiration.
//
// Most embedders use a TransactionalProducer; Transactions' methods are
// Kafka's requests (InitProducerId, AddPartitionsToTxn, EndTxn), for a
// server that answers producers over a transport of its own. Their errors
// wrap the idempotence error Kafka answers with, and a refused request
// appends nothing. Transactions is safe for concurrent use.
type Transactions struct {
	d  *Dir
	p  *Partition // partition 0 of TransactionStateTopic
	rt *idempotence.TxnRuntime
}

// Transactions returns the Dir's transaction coordinator, creating
// TransactionStateTopic on first use. A Dir opened with
// DirOptions.Replicated has none: ErrReplicated.
func (d *Dir) Transactions() (*Transactions, error) {
	if d.opts.Replicated {
		return nil, fmt.Errorf("%w: Dir.Transactions: %s's transactions belong to the cluster's coordinator", ErrReplicated, TransactionStateTopic)
	}
	return d.transactions(true)
}

// recoverTransactions loads the transaction coordinator, if the Dir has
// one, so that the transactions a crash left completing are completed.
func (d *Dir) recoverTransactions() error {
	_, err := d.transactions(false)
	return err
}

// tickTransactions aborts the transactions open past their timeout and
// writes the markers still to write.
func (d *Dir) tickTransactions() error {
	d.txns.mu.Lock()
	t := d.txns.t
	d.txns.mu.Unlock()
	if t == nil {
		return nil
	}
	return t.tick()
}

func (d *Dir) transactions(create bool) (*Transactions, error) {
	d.txns.mu.Lock()
	defer d.txns.mu.Unlock()
	if d.txns.t != nil {
		return d.txns.t, nil
	}
	if create {
		// Compacted only, whatever the Dir's default retention: a
		// transactional id's state must stay until its tombstone.
		err := d.CreateTopic(TransactionStateTopic, TopicConfig{Partitions: 1, Compact: Compacted, Fsync: FsyncAlways(),
			Retention: Retention{Age: Unlimited, Bytes: Unlimited}})
		if err != nil && !errors.Is(err, ErrTopicExists) {
			return nil, fmt.Errorf("log: transaction coordinator: %w", err)
		}
	}
	p, err := d.Partition(TransactionStateTopic, 0)
	switch {
	case errors.Is(err, ErrUnknownTopic) && !create:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("log: transaction coordinator: %w", err)
	}
	t := &Transactions{d: d, p: p}
	now := time.Now
	if d.opts.Log.Now != nil {
		now = d.opts.Log.Now
	}
	t.rt, err = idempotence.NewTxnRuntime(idempotence.TxnRuntimeOptions{
		Host: t, Coordinator: idempotence.TxnCoordinatorConfig{AllocateProducerID: d.newProducerID}, Now: now,
		OnError: func(err error) {
			d.opts.Logger.Error("strand: writing transaction markers failed", "dir", d.path, "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	// The Dir's one state partition is always its own to coordinate.
	if err := t.rt.Follow(0, 0); err != nil {
		return nil, fmt.Errorf("log: transaction coordinator: %w", err)
	}
	if err := t.rt.Flush(); err != nil {
		// The decision is durable; the markers are written again at the
		// next tick.
		d.opts.Logger.Error("strand: writing transaction markers failed", "dir", d.path, "err", err)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if d.opts.MaintenanceInterval > 0 {
		d.done.Add(1)
		go t.tickEvery()
	}
	d.mu.Unlock()
	d.txns.t = t
	return t, nil
}

// ReadTxns replays TransactionStateTopic (idempotence.TxnHost).
// Compaction keeps at least the newest record of each transactional id,
// which is its state: replaying what it kept gives the state replaying
// everything would.
func (t *Transactions) ReadTxns(_ int32, fn func(idempotence.TxnRecord)) error {
	return ReadTxnRecords(t.p, fn)
}

// ReadTxnRecords calls fn with every transaction state record of p, a
// partition of TransactionStateTopic, from its log start to its end.
func ReadTxnRecords(p *Partition, fn func(idempotence.TxnRecord)) error {
	start, _, _, err := p.Offsets()
	if err != nil {
		return err
	}
	for r, err := range p.Records(start, ReadLogEnd) {
		if err != nil {
			return fmt.Errorf("replaying %s-%d: %w", p.Topic(), p.ID(), err)
		}
		rec, err := idempotence.UnmarshalTxnRecord(r.Key, r.Value)
		if err != nil {
			return fmt.Errorf("%s-%d offset %d: %w", p.Topic(), p.ID(), r.Offset, err)
		}
		fn(rec)
	}
	return nil
}

// PersistTxn appends rec to TransactionStateTopic, durably
// (idempotence.TxnHost).
func (t *Transactions) PersistTxn(_ context.Context, _ int32, rec idempotence.TxnRecord) error {
	key, value := idempotence.MarshalTxnRecord(rec)
	_, err := t.p.Append([]Record{{Key: key, Value: value}})
	return err
}

// WriteMarker appends a transaction's marker to its partition, or has
// the committer of its topic write it (idempotence.TxnHost).
func (t *Transactions) WriteMarker(ctx context.Context, m idempotence.MarkerRequest) error {
	b, err := idempotence.AppendMarkerBatch(nil, m.ProducerID, m.ProducerEpoch,
		idempotence.Marker{Type: m.Type, CoordinatorEpoch: m.CoordinatorEpoch}, t.nowMs())
	if err != nil {
		return err
	}
	if c := t.d.committer(m.Partition.Topic); c != nil {
		return c.WriteTxnMarker(ctx, m.Partition.Topic, m.Partition.Partition, segment.Batch(b))
	}
	p, err := t.d.Partition(m.Partition.Topic, m.Partition.Partition)
	if errors.Is(err, ErrUnknownTopic) || errors.Is(err, ErrUnknownPartition) {
		return nil // deleted since: nothing left to mark
	}
	if err != nil {
		return err
	}
	_, err = p.AppendMarker(segment.Batch(b))
	return err
}

func (t *Transactions) tickEvery() {
	defer t.d.done.Done()
	tick := time.NewTicker(txnAbortInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.d.stop:
			return
		case <-tick.C:
			if err := t.tick(); err != nil && !errors.Is(err, ErrClosed) {
				t.d.opts.Logger.Error("strand: transaction timeouts failed", "dir", t.d.path, "err", err)
			}
		}
	}
}

func (t *Transactions) nowMs() int64 {
	if now := t.d.opts.Log.Now; now != nil {
		return now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// tick carries out the transitions the clock makes due, then writes the
// markers that could not be written before.
func (t *Transactions) tick() error {
	if err := t.rt.Tick(); err != nil {
		return fmt.Errorf("log: transaction coordinator: %w", err)
	}
	return nil
}

// InitProducerID gives transactional id txnID a producer id and epoch
// (Kafka's InitProducerId): a new id gets a new producer id; a known one
// gets its epoch bumped, which fences the producer that had it. A
// transaction the id has open is aborted first. timeout is how long its
// transactions may stay open (Kafka's transaction.timeout.ms), at most
// idempotence.DefaultMaxTransactionTimeout.
func (t *Transactions) InitProducerID(txnID string, timeout time.Duration) (idempotence.ProducerIDAndEpoch, error) {
	pe, err := t.rt.InitProducerID(txnID, timeout)
	if err != nil {
		return pe, fmt.Errorf("log: InitProducerId: %w", err)
	}
	return pe, nil
}

// ReinitProducerID is InitProducerID for a producer that has a producer id
// and epoch already, current (Kafka's InitProducerId v3+ carrying them,
// KIP-360): it is ErrProducerFenced unless current is txnID's producer at
// its epoch, or at the epoch before if this repeats a call whose answer
// was lost, so that a producer fenced since cannot take txnID back.
func (t *Transactions) ReinitProducerID(txnID string, timeout time.Duration, current idempotence.ProducerIDAndEpoch) (idempotence.ProducerIDAndEpoch, error) {
	pe, err := t.rt.ReinitProducerID(txnID, timeout, current)
	if err != nil {
		return pe, fmt.Errorf("log: InitProducerId: %w", err)
	}
	return pe, nil
}

// AddPartitions adds partitions to the transaction of producer, which has
// transactional id txnID, beginning one if none is open (Kafka's
// AddPartitionsToTxn, which under transactions version 2 the partition
// leader sends when the producer first writes to a partition). The
// partitions must exist.
func (t *Transactions) AddPartitions(txnID string, producer idempotence.ProducerIDAndEpoch, partitions ...idempotence.TopicPartition) error {
	for _, tp := range partitions {
		if _, err := t.d.Partition(tp.Topic, tp.Partition); err != nil {
			return fmt.Errorf("log: AddPartitionsToTxn: %w", err)
		}
	}
	if err := t.rt.AddPartitions(txnID, producer, partitions...); err != nil {
		return fmt.Errorf("log: AddPartitionsToTxn: %w", err)
	}
	return nil
}

// EndTxn commits or aborts the transaction of producer, which has
// transactional id txnID (Kafka's EndTxn, version 5). It returns once the
// decision is durable and, unless writing one failed, the markers are
// written, with the producer id and epoch of the producer's next
// transaction: every EndTxn bumps the epoch. A commit with no transaction
// open, or of one being aborted, is ErrInvalidTxnState; an epoch older
// than the coordinator's is ErrProducerFenced, and so is a commit of a
// transaction the coordinator aborted on its own (KAFKA-20785); an
// unknown transactional id or a producer id that is not its own,
// ErrInvalidProducerIDMapping.
func (t *Transactions) EndTxn(txnID string, producer idempotence.ProducerIDAndEpoch, commit bool) (idempotence.ProducerIDAndEpoch, error) {
	pe, err := t.rt.EndTxn(txnID, producer, commit)
	if err != nil {
		return pe, fmt.Errorf("log: EndTxn: %w", err)
	}
	return pe, nil
}

// AppendBatch appends a producer's batch to p as a partition leader of
// transactions version 2 does for a produce request that carries
// transactional id txnID (KIP-890): a transactional batch first adds p to
// its producer's transaction, beginning one if none is open, so that no
// batch can open a transaction on a partition the coordinator does not
// know of; then the batch is appended as Partition.AppendBatch does. A
// batch whose producer is not txnID's current one is refused by the
// coordinator and appends nothing.
func (t *Transactions) AppendBatch(txnID string, p *Partition, b segment.Batch) (AppendResult, error) {
	if b.Transactional() && !b.Control() {
		pe := idempotence.ProducerIDAndEpoch{ProducerID: b.ProducerID(), Epoch: b.ProducerEpoch()}
		if err := t.AddPartitions(txnID, pe, idempotence.TopicPartition{Topic: p.Topic(), Partition: p.ID()}); err != nil {
			return AppendResult{}, err
		}
	}
	return p.AppendBatch(b)
}

// Describe returns the durable state of transactional id txnID (Kafka's
// DescribeTransactions).
func (t *Transactions) Describe(txnID string) (idempotence.TxnRecord, bool) {
	return t.rt.Describe(txnID)
}

// List returns the durable state of every transactional id, by id (Kafka's
// ListTransactions).
func (t *Transactions) List() []idempotence.TxnRecord {
	return t.rt.List()
}

// RouteMarkers sends the markers of topic's partitions through c from now
// on, rather than appending them to the partitions under it, until undo.
// A group.Service routes its offsets topic's markers to itself when it
// opens, so that a transaction it holds offsets of is ended in its state
// too: whether the transaction ends by a commit, by a producer's abort,
// by its timeout, or by the next producer of its transactional id after
// a restart. The markers of a transaction completing when the Dir opened
// are written before any committer exists, with Partition.AppendMarker,
// and the committer opened after replays them. undo removes the route if
// it is still c's.
func (d *Dir) RouteMarkers(topic string, c TxnOffsetCommitter) (undo func()) {
	d.txns.cmu.Lock()
	defer d.txns.cmu.Unlock()
	if d.txns.committers == nil {
		d.txns.committers = map[string]TxnOffsetCommitter{}
	}
	d.txns.committers[topic] = c
	return func() {
		d.txns.cmu.Lock()
		defer d.txns.cmu.Unlock()
		if d.txns.committers[topic] == c {
			delete(d.txns.committers, topic)
		}
	}
}

// committer returns the committer topic's markers are routed to, or nil.
func (d *Dir) committer(topic string) TxnOffsetCommitter {
	d.txns.cmu.Lock()
	defer d.txns.cmu.Unlock()
	return d.txns.committers[topic]
}

// AppendCoordinatorBatch appends a transactional batch that a coordinator
// writes on behalf of a producer, as a group coordinator writes the offsets
// of a TxnOffsetCommit (Kafka appends them with AppendOrigin.COORDINATOR):
// the producer's epoch is checked (ErrInvalidProducerEpoch), its sequence
// is not, and the batch carries none (idempotence.NoSequence). The batch
// joins the producer's transaction on this partition like the producer's
// own; its marker ends it.
func (l *Log) AppendCoordinatorBatch(b segment.Batch) (AppendResult, error) {
	if err := l.checkBatch(b); err != nil {
		return AppendResult{}, err
	}
	if b.Control() || !b.Transactional() || b.ProducerID() < 0 {
		return AppendResult{}, fmt.Errorf("log %s: %w: AppendCoordinatorBatch needs a transactional data batch with a producer id", l.dir, idempotence.ErrInvalidRecord)
	}
	return l.enqueue(pending{batch: b, origin: idempotence.OriginCoordinator})
}

// AppendCoordinatorBatch appends a coordinator's transactional batch; see
// Log.AppendCoordinatorBatch. A compacted topic's records need keys.
func (p *Partition) AppendCoordinatorBatch(b segment.Batch) (AppendResult, error) {
	if err := p.checkRecords(b); err != nil {
		return AppendResult{}, err
	}
	return with(p, true, func(l *Log) (AppendResult, error) { return l.AppendCoordinatorBatch(b) })
}
