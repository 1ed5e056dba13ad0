package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// ProducerOptions configure a Producer. Zero fields take the defaults
// given.
type ProducerOptions struct {
	// TransactionalID makes the producer transactional (Kafka's
	// transactional.id): its records are produced in transactions, which
	// Commit and Abort end, and a new Producer with the same id fences this
	// one. Empty: an idempotent producer.
	TransactionalID string
	// TransactionTimeout is how long a transaction may stay open before
	// its coordinator aborts it; default log.DefaultTransactionTimeout.
	TransactionTimeout time.Duration
}

// Producer produces records to a cluster's partitions through a Node, for
// an application that does not speak Kafka, as Kafka's idempotent producer
// does: one producer id, a sequence per partition, and every batch tried
// again, with the same sequences, until its partition's leader of the
// moment answers, so that a retry the partition has is answered with the
// offsets it got and nothing is appended twice. Each Produce is one batch,
// acks=all, and a Producer has one batch in flight at a time; an
// application that pipelines uses Node.ProduceAsync.
//
// A transactional Producer opens a transaction with the first Produce
// after NewProducer, Commit or Abort; each partition joins it with its
// first batch (KIP-890). Its methods are safe for concurrent use.
type Producer struct {
	n    *Node
	opts ProducerOptions

	mu       sync.Mutex
	producer idempotence.ProducerIDAndEpoch
	seqs     map[idempotence.TopicPartition]int32 // the next sequence of each partition
	inTxn    bool                                 // a batch of the open transaction was tried
	failed   error                                // a batch of the open transaction failed
}

// NewProducer returns a producer over n. A transactional one gets its
// producer id and epoch from its transactional id's coordinator, which
// aborts the transaction a predecessor of the same id left open.
func NewProducer(ctx context.Context, n *Node, opts ProducerOptions) (*Producer, error) {
	p := &Producer{n: n, opts: opts}
	if opts.TransactionalID == "" {
		return p, p.newProducerID()
	}
	p.opts.TransactionTimeout = cmp.Or(opts.TransactionTimeout, log.DefaultTransactionTimeout)
	pe, err := n.InitProducerID(ctx, opts.TransactionalID, p.opts.TransactionTimeout)
	if err != nil {
		return nil, fmt.Errorf("cluster: producer of transactional id %q: %w", opts.TransactionalID, err)
	}
	p.begin(pe)
	return p, nil
}

// newProducerID starts an idempotent producer over under a producer id no
// one used.
func (p *Producer) newProducerID() error {
	id, err := p.n.NewProducerID()
	if err != nil {
		return fmt.Errorf("cluster: a producer id from node %d: %w", p.n.cfg.ID, err)
	}
	p.begin(idempotence.ProducerIDAndEpoch{ProducerID: id})
	return nil
}

// begin starts the sequences over for producer.
func (p *Producer) begin(producer idempotence.ProducerIDAndEpoch) {
	p.producer, p.seqs, p.inTxn, p.failed = producer, map[idempotence.TopicPartition]int32{}, false, nil
}

// Produce appends records as one batch to a partition, at its leader, and
// returns once the batch is committed (acks=all): the leader of the moment
// is asked again, with the same sequences, while it moves, fails to answer,
// has too few replicas in sync or times out, until ctx ends.
//
// A batch that failed may still have been appended; its sequences can be
// neither used again nor skipped. An idempotent producer therefore goes on
// under a new producer id, and a transactional one's transaction can only
// be aborted: Produce and Commit answer log.ErrTransactionAbortable until
// Abort.
func (p *Producer) Produce(ctx context.Context, topic string, partition int32, records ...log.Record) (replica.ProduceResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return replica.ProduceResult{}, p.failed
	}
	tp := idempotence.TopicPartition{Topic: topic, Partition: partition}
	seq := p.seqs[tp]
	b, err := segment.AppendBatch(nil, records, segment.BuildOptions{Transactional: p.opts.TransactionalID != "",
		Producer: &segment.ProducerFields{ID: p.producer.ProducerID, Epoch: p.producer.Epoch, BaseSequence: seq}})
	if err != nil {
		return replica.ProduceResult{}, fmt.Errorf("%w: a batch for %s-%d: %w", replica.ErrInvalidRequest, topic, partition, err)
	}
	p.inTxn = p.opts.TransactionalID != ""
	res, err := p.produce(ctx, topic, partition, b)
	switch {
	case err == nil:
		p.seqs[tp] = idempotence.IncrementSequence(seq, int32(len(records)))
	case p.opts.TransactionalID != "":
		p.failed = fmt.Errorf("%w: transactional id %q: %w", log.ErrTransactionAbortable, p.opts.TransactionalID, err)
		err = p.failed
	default:
		err = errors.Join(err, p.newProducerID())
	}
	return res, err
}

// produce asks the partition's leader for b until it is committed, or
// ctx ends, or the answer is one no retry changes.
func (p *Producer) produce(ctx context.Context, topic string, partition int32, b []byte) (replica.ProduceResult, error) {
	for {
		res, err := p.n.ProduceAtLeader(ctx, topic, partition, replica.AcksAll, b, p.opts.TransactionalID)
		retry := errorsIsAny(err, replica.ErrRequestTimedOut, replica.ErrNotEnoughReplicas, replica.ErrNotEnoughReplicasAfterAppend)
		if !retry || !p.n.backOff(ctx) {
			return res, err
		}
	}
}

// Commit commits the open transaction at its coordinator: once it
// returns, its records are read committed in every partition it wrote.
// A transaction whose batch failed is not committed: Commit answers
// log.ErrTransactionAbortable. If ctx ends first, the transaction may or
// may not have committed, and Commit asked again is answered as the first
// would have been.
func (p *Producer) Commit(ctx context.Context) error {
	return p.end(ctx, true)
}

// Abort aborts the open transaction at its coordinator: its records are
// never read committed.
func (p *Producer) Abort(ctx context.Context) error {
	return p.end(ctx, false)
}

func (p *Producer) end(ctx context.Context, commit bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.opts.TransactionalID == "":
		return fmt.Errorf("%w: an idempotent producer has no transactions to end", log.ErrTransactionState)
	case commit && p.failed != nil:
		return p.failed
	case !p.inTxn:
		return nil // no batch: the coordinator has nothing open
	}
	next, err := p.n.EndTxn(ctx, p.opts.TransactionalID, p.producer, commit)
	if err != nil {
		return fmt.Errorf("cluster: ending the transaction of %q: %w", p.opts.TransactionalID, err)
	}
	p.begin(next)
	return nil
}
