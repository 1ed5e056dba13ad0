package log

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/segment"
)

// DefaultTransactionTimeout is how long a transaction may stay open before
// the coordinator aborts it, unless TransactionalOptions say otherwise
// (Kafka's transaction.timeout.ms).
const DefaultTransactionTimeout = time.Minute

var (
	// ErrTransactionState means a TransactionalProducer was asked for
	// something its transaction's state does not allow: to produce or end
	// a transaction with none begun, to begin one while one is open, or to
	// produce while one is ending.
	ErrTransactionState = errors.New("log: transactional producer in the wrong state")
	// ErrTransactionAbortable means a record of the open transaction failed,
	// so it cannot commit: the transaction must be aborted (Kafka's
	// TRANSACTION_ABORTABLE, and its producer's abortable error state).
	// The error also wraps the record's.
	ErrTransactionAbortable = kafkaerr.ErrTransactionAbortable
)

// TransactionalOptions configure a TransactionalProducer.
type TransactionalOptions struct {
	// ProducerOptions configure its batching and retries. Idempotence
	// cannot be disabled: a transaction needs it.
	ProducerOptions
	// TransactionTimeout is how long a transaction may stay open before the
	// Dir's coordinator aborts it; default DefaultTransactionTimeout, at
	// most idempotence.DefaultMaxTransactionTimeout.
	TransactionTimeout time.Duration
}

// TransactionalProducer produces records to several partitions of a Dir
// in transactions: those of a committed transaction become visible to
// ReadCommitted readers together, those of an aborted one never. Between
// Begin and Commit or Abort, Produce and ProduceAsync work as a Producer's
// (batching, idempotent retries); each partition joins the transaction
// when its first batch is appended (KIP-890), and CommitOffsets commits a
// consumer group's offsets inside it.
//
// A transactional id names the producer across restarts: a new
// TransactionalProducer with the same id aborts the transaction its
// predecessor left open and fences the predecessor, whose later records
// fail with an error wrapping idempotence.ErrInvalidProducerEpoch and
// whose Commit and Abort fail with idempotence.ErrProducerFenced; a fenced
// producer can only be closed. A transaction left open longer than
// TransactionTimeout is aborted by the Dir, which fences the producer
// likewise until it aborts.
//
// Its methods are safe for concurrent use, but one transaction is open at
// a time: Commit and Abort end the records produced before them.
type TransactionalProducer struct {
	id string
	t  *Transactions
	pr *Producer

	mu     sync.Mutex
	state  txnProducerState
	closed bool
	fatal  error // the producer was fenced
	// queuing counts the ProduceAsync calls queuing a record in the open
	// transaction: Commit and Abort wait for them before they flush.
	queuing sync.WaitGroup

	// jmu guards what the appends of the open transaction use.
	jmu      sync.Mutex
	producer idempotence.ProducerIDAndEpoch
	joined   map[*Partition]bool
	err      error // the first failure of the open transaction
}

type txnProducerState int8

const (
	txnIdle   txnProducerState = iota // no transaction open
	txnOpen                           // between Begin and Commit or Abort
	txnEnding                         // Commit or Abort in progress
)

// NewTransactionalProducer returns a transactional producer with
// transactional id id. If another producer had the id, its open
// transaction is aborted and it is fenced.
func (d *Dir) NewTransactionalProducer(id string, opts TransactionalOptions) (*TransactionalProducer, error) {
	if opts.DisableIdempotence {
		return nil, fmt.Errorf("%w: DisableIdempotence with a transactional producer; transactions need idempotence", ErrInvalidOption)
	}
	switch {
	case opts.TransactionTimeout == 0:
		opts.TransactionTimeout = DefaultTransactionTimeout
	case opts.TransactionTimeout < time.Millisecond:
		return nil, fmt.Errorf("%w: TransactionTimeout is %v, allowed 1ms or more", ErrInvalidOption, opts.TransactionTimeout)
	}
	t, err := d.Transactions()
	if err != nil {
		return nil, err
	}
	po := opts.ProducerOptions
	po.DisableIdempotence = true // its producer id comes from the coordinator
	pr, err := d.NewProducer(po)
	if err != nil {
		return nil, err
	}
	pe, err := t.InitProducerID(id, opts.TransactionTimeout)
	if err != nil {
		return nil, errors.Join(err, pr.Close())
	}
	tp := &TransactionalProducer{id: id, t: t, pr: pr}
	pr.txn, pr.seqs = tp, make(map[*Partition]*sequencer)
	pr.appendFn = func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
		bo := segment.BuildOptions{Producer: prod, Transactional: true}
		return with(p, true, func(l *Log) (AppendResult, error) { return l.appendBuilt(recs, bo, queued) })
	}
	tp.nextLocked(pe) // tp is not shared yet
	return tp, nil
}

// nextLocked makes pe the producer's id and epoch, for a new transaction:
// every partition's sequences start again at 0, as a new epoch's must.
func (tp *TransactionalProducer) nextLocked(pe idempotence.ProducerIDAndEpoch) {
	tp.producer, tp.joined, tp.err = pe, map[*Partition]bool{}, nil
	pr := tp.pr
	pr.mu.Lock()
	pr.id, pr.epoch = pe.ProducerID, pe.Epoch
	clear(pr.seqs)
	pr.mu.Unlock()
}

// TransactionalID returns the producer's transactional id.
func (tp *TransactionalProducer) TransactionalID() string { return tp.id }

// checkLocked returns why the producer cannot do what needs state want.
func (tp *TransactionalProducer) checkLocked(want txnProducerState, what string) error {
	switch {
	case tp.closed:
		return ErrClosed
	case tp.fatal != nil:
		return tp.fatal
	case tp.state != want:
		names := [...]string{"no transaction is open", "a transaction is open", "the transaction is ending"}
		return fmt.Errorf("%w: %s of %q while %s", ErrTransactionState, what, tp.id, names[tp.state])
	}
	return nil
}

// Begin begins a transaction.
func (tp *TransactionalProducer) Begin() error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if err := tp.checkLocked(txnIdle, "Begin"); err != nil {
		return err
	}
	tp.state = txnOpen
	return nil
}

// Produce produces rec in the open transaction as Producer.Produce does,
// and waits until it is appended. Its record is readable by ReadCommitted
// readers once the transaction commits.
func (tp *TransactionalProducer) Produce(ctx context.Context, topicName string, partition int32, rec Record) (Produced, error) {
	var (
		res  Produced
		err  error
		done = make(chan struct{})
	)
	if err := tp.ProduceAsync(ctx, topicName, partition, rec, func(p Produced, e error) { res, err = p, e; close(done) }); err != nil {
		return Produced{}, err
	}
	select {
	case <-done:
		return res, err
	case <-ctx.Done():
		return Produced{}, ctx.Err()
	}
}

// ProduceAsync produces rec in the open transaction as
// Producer.ProduceAsync does. A record that fails makes the transaction
// abortable: Commit refuses it. Commit and Abort take in the records of
// the ProduceAsync calls that began before them; a call made while they
// run, from a callback say, fails with ErrTransactionState.
func (tp *TransactionalProducer) ProduceAsync(ctx context.Context, topicName string, partition int32, rec Record, done func(Produced, error)) error {
	if err := tp.enter("Produce"); err != nil {
		return err
	}
	defer tp.queuing.Done()
	return tp.pr.ProduceAsync(ctx, topicName, partition, rec, done)
}

// enter counts a call that adds to the open transaction in queuing, or
// says why there is none to add to.
func (tp *TransactionalProducer) enter(what string) error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	err := tp.checkLocked(txnOpen, what)
	if err == nil {
		tp.queuing.Add(1)
	}
	return err
}

// join adds p to the open transaction before its first batch, and refuses
// every batch once one failed.
func (tp *TransactionalProducer) join(p *Partition) error {
	tp.mu.Lock()
	err := tp.fatal
	tp.mu.Unlock()
	if err != nil {
		return err
	}
	tp.jmu.Lock()
	defer tp.jmu.Unlock()
	if tp.err != nil {
		return fmt.Errorf("%w: an earlier record of the transaction failed: %w", ErrTransactionAbortable, tp.err)
	}
	if tp.joined[p] {
		return nil
	}
	err = tp.t.AddPartitions(tp.id, tp.producer, idempotence.TopicPartition{Topic: p.Topic(), Partition: p.ID()})
	if err != nil {
		tp.err = err
		return err
	}
	tp.joined[p] = true
	return nil
}

// batchFailed makes the open transaction abortable.
func (tp *TransactionalProducer) batchFailed(err error) {
	tp.jmu.Lock()
	defer tp.jmu.Unlock()
	if tp.err == nil {
		tp.err = err
	}
}

// Commit commits the open transaction: it waits until every record
// produced in it is appended, then asks the coordinator to commit, which
// writes a COMMIT marker to each partition. It returns once the commit is
// durable and, unless a marker could not be written (the Dir writes it
// again), every marker is: the transaction's records are then readable by
// ReadCommitted readers in every partition. If a record failed, Commit
// fails with ErrTransactionAbortable and the transaction stays open, to
// be aborted. If ctx ends before the records are appended, Commit returns
// its error and the transaction stays open.
func (tp *TransactionalProducer) Commit(ctx context.Context) error { return tp.end(ctx, true) }

// Abort aborts the open transaction: it waits until every record produced
// in it is appended or failed, then asks the coordinator to abort, which
// writes an ABORT marker to each partition. ReadCommitted readers never see
// the transaction's records.
func (tp *TransactionalProducer) Abort(ctx context.Context) error { return tp.end(ctx, false) }

func (tp *TransactionalProducer) end(ctx context.Context, commit bool) error {
	if ctx == nil {
		return ErrNilContext
	}
	what := "Abort"
	if commit {
		what = "Commit"
	}
	tp.mu.Lock()
	if err := tp.checkLocked(txnOpen, what); err != nil {
		tp.mu.Unlock()
		return err
	}
	tp.state = txnEnding
	tp.mu.Unlock()

	err := tp.finish(ctx, commit)

	tp.mu.Lock()
	defer tp.mu.Unlock()
	switch {
	case errors.Is(err, idempotence.ErrProducerFenced) && !commit:
		tp.fatal = fmt.Errorf("log: transactional producer %q: %w", tp.id, err)
		tp.state = txnIdle
	case err != nil:
		// The transaction stays open to be aborted, even after a commit
		// refused as fenced: the coordinator may have aborted it on its
		// own, past its timeout (KAFKA-20785). Abort tells: a retry of
		// that abort succeeds, a fenced producer is fenced again.
		tp.state = txnOpen
	default:
		tp.state = txnIdle
	}
	return err
}

// finish flushes the transaction's records and ends it at the coordinator.
func (tp *TransactionalProducer) finish(ctx context.Context, commit bool) error {
	tp.queuing.Wait()
	if err := tp.pr.Flush(ctx); err != nil {
		return err
	}
	// Flush may find every batch appended and return nil although ctx has
	// ended: the transaction is then not ended either, so that a Commit
	// given an ended context never commits.
	if err := ctx.Err(); err != nil {
		return err
	}
	tp.jmu.Lock()
	defer tp.jmu.Unlock()
	if commit && tp.err != nil {
		return fmt.Errorf("%w: transaction of %q: %w", ErrTransactionAbortable, tp.id, tp.err)
	}
	if errors.Is(tp.err, idempotence.ErrProducerFenced) {
		return tp.err
	}
	if len(tp.joined) == 0 {
		// Nothing reached a partition: nothing to end (Kafka's producer
		// sends no EndTxn either).
		tp.err = nil
		return nil
	}
	pe, err := tp.t.EndTxn(tp.id, tp.producer, commit)
	if err != nil {
		return err
	}
	tp.nextLocked(pe)
	return nil
}

// CommitOffsets commits a consumer group's offsets in the open
// transaction (Kafka's AddOffsetsToTxn then TxnOffsetCommit): c's
// partition for req.Group joins the transaction, and c writes the offsets
// there with the producer's id and epoch; they count when the transaction
// commits. req's TransactionalID and Producer are filled in. A failure
// makes the transaction abortable.
func (tp *TransactionalProducer) CommitOffsets(ctx context.Context, c TxnOffsetCommitter, req TxnOffsetCommit) error {
	if ctx == nil {
		return ErrNilContext
	}
	if err := tp.enter("CommitOffsets"); err != nil {
		return err
	}
	defer tp.queuing.Done()
	topic, partition, err := c.TxnOffsetsPartition(req.Group)
	if err == nil {
		var p *Partition
		if p, err = tp.t.d.Partition(topic, partition); err == nil {
			tp.t.d.RouteMarkers(topic, c)
			err = tp.join(p)
		}
	}
	if err != nil {
		return fmt.Errorf("log: offsets of group %s in the transaction of %q: %w", req.Group, tp.id, err)
	}
	tp.jmu.Lock()
	req.TransactionalID, req.Producer = tp.id, tp.producer
	tp.jmu.Unlock()
	if err := c.TxnOffsetCommit(ctx, req); err != nil {
		tp.batchFailed(err)
		return fmt.Errorf("log: offsets of group %s in the transaction of %q: %w", req.Group, tp.id, err)
	}
	return nil
}

// Close closes the producer. A transaction still open is aborted, unless
// the producer was fenced.
func (tp *TransactionalProducer) Close() error {
	tp.mu.Lock()
	if tp.closed {
		tp.mu.Unlock()
		return ErrClosed
	}
	open := tp.state == txnOpen && tp.fatal == nil
	tp.state = txnEnding
	tp.mu.Unlock()
	var err error
	if open {
		err = tp.finish(context.Background(), false)
	}
	tp.mu.Lock()
	tp.closed = true
	tp.mu.Unlock()
	return errors.Join(err, tp.pr.Close())
}

// TxnOffsetCommit is a consumer group's offsets committed in a transaction
// (Kafka's TxnOffsetCommit request, version 3 and later: with the member's
// generation, so that the group can fence a zombie consumer, KIP-447).
type TxnOffsetCommit struct {
	TransactionalID string
	Producer        idempotence.ProducerIDAndEpoch
	Group           string
	MemberID        string
	GenerationID    int32
	GroupInstanceID string
	Offsets         []TxnOffset
}

// TxnOffset is the committed position of one partition.
type TxnOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// TxnOffsetCommitter is what stores consumer groups' offsets for
// transactions: the seam through which a group coordinator (package
// group's Service) takes part in a TransactionalProducer's transactions,
// as Kafka's group coordinator does in KIP-98 and KIP-447. The offsets live
// in a partition of the Dir that the committer owns (its offsets topic);
// the transaction takes that partition in, and the coordinator's COMMIT or
// ABORT marker for it goes through the committer, which appends it in its
// own order and applies it: on COMMIT the staged offsets become the
// group's committed ones, on ABORT they are dropped
// (OffsetMetadataManager.replayEndTransactionMarker).
//
// After a crash the Dir writes the markers of a transaction that was
// completing with Partition.AppendMarker, before any committer exists; a
// committer that rebuilds its state from its partition sees them there.
type TxnOffsetCommitter interface {
	// TxnOffsetsPartition returns the topic and partition where group's
	// offsets are stored.
	TxnOffsetsPartition(group string) (topic string, partition int32, err error)
	// TxnOffsetCommit checks req's member and generation, writes its
	// offsets to the group's partition as a transactional batch of
	// req.Producer (Partition.AppendCoordinatorBatch), and stages them
	// until the marker.
	TxnOffsetCommit(ctx context.Context, req TxnOffsetCommit) error
	// WriteTxnMarker appends marker, a control batch built by
	// idempotence.AppendMarkerBatch, to a partition TxnOffsetsPartition
	// named, with Partition.AppendMarker, and applies it to the offsets
	// staged by its producer. The coordinator calls it with its own lock
	// held: it must not call the Dir's Transactions.
	WriteTxnMarker(ctx context.Context, topic string, partition int32, marker segment.Batch) error
}
