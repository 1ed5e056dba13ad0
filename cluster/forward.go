package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// A Kafka client finds a partition's leader and a transactional id's
// coordinator itself. An application that embeds a Node may ask any node
// instead, as it does for Fetch and the group calls: the node forwards
// the request to the node that serves it, and follows it as it moves.

// ProduceAtLeader appends batch to a partition at its leader, as Produce
// does there: on this node if it leads the partition, and otherwise by a
// request to the leader. A non-empty txnID makes it ProduceTransactional
// for that transactional id, the leader adding the partition to the
// transaction. A partition whose leader is not live, or moves, is looked
// up again after RetryBackoff until ctx ends; a leader that did not answer
// is asked again only for an idempotent producer's batch, which the
// partition does not append twice (Kafka's producer retries the others
// too, and may duplicate them).
func (n *Node) ProduceAtLeader(ctx context.Context, topic string, partition int32, acks replica.Acks, batch []byte, txnID string) (replica.ProduceResult, error) {
	r := &produceRequest{Topic: topic, Partition: partition, Acks: acks, TxnID: txnID, Batch: batch}
	retryUnanswered := len(batch) >= segment.HeaderSize && segment.Batch(batch).ProducerID() >= 0
	for {
		if n.Metadata().Partition(topic, partition) == nil {
			return replica.ProduceResult{}, fmt.Errorf("%w: produce to %s-%d: no such partition in the metadata of node %d",
				replica.ErrUnknownTopicOrPartition, topic, partition, n.cfg.ID)
		}
		var res replica.ProduceResult
		var err error
		switch leader := n.liveLeader(topic, partition); leader {
		case replica.NoNode:
			err = fmt.Errorf("%w: %s-%d has no live leader", replica.ErrNotLeaderOrFollower, topic, partition)
		case n.cfg.ID:
			res, err = r.produceHere(ctx, n)
		default:
			res, err = forward(ctx, n, leader, r, decodeProduceAnswer)
		}
		// A leader that has not applied the metadata naming it yet has no
		// replica of the partition.
		retry := errorsIsAny(err, replica.ErrNotLeaderOrFollower, replica.ErrUnknownTopicOrPartition, replica.ErrStopped) ||
			retryUnanswered && errors.Is(err, ErrUnreachable)
		if !retry || !n.backOff(ctx) {
			return res, err
		}
	}
}

// InitProducerID gives transactional id txnID a producer id and epoch at
// its coordinator, on whichever node it is (idempotence.TxnRuntime's
// InitProducerID there): following the coordinator as it moves, and
// asking again while it loads, while it is away, and while the id's last
// transaction completes (CONCURRENT_TRANSACTIONS), until ctx ends.
func (n *Node) InitProducerID(ctx context.Context, txnID string, timeout time.Duration) (idempotence.ProducerIDAndEpoch, error) {
	return n.atTxnCoordinator(ctx, &txnEndRequest{TxnID: txnID, Init: true, Timeout: timeout})
}

// EndTxn commits or aborts producer's transaction at txnID's coordinator,
// on whichever node it is (idempotence.TxnRuntime's EndTxn there), and
// returns the producer's id and epoch for its next transaction; it
// follows the coordinator as InitProducerID does. An end asked again
// after an answer was lost is answered as the first was.
func (n *Node) EndTxn(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, commit bool) (idempotence.ProducerIDAndEpoch, error) {
	return n.atTxnCoordinator(ctx, &txnEndRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch, Commit: commit})
}

func (n *Node) atTxnCoordinator(ctx context.Context, r *txnEndRequest) (idempotence.ProducerIDAndEpoch, error) {
	for {
		var pe idempotence.ProducerIDAndEpoch
		var err error
		switch c := n.TransactionCoordinator(r.TxnID); c {
		case replica.NoNode:
			err = fmt.Errorf("%w: no live coordinator of transactional id %q", idempotence.ErrCoordinatorNotAvailable, r.TxnID)
		case n.cfg.ID:
			pe, err = r.run(n)
		default:
			pe, err = forward(ctx, n, c, r, decodeTxnEndAnswer)
		}
		retry := errorsIsAny(err, idempotence.ErrNotCoordinator, idempotence.ErrCoordinatorLoadInProgress,
			idempotence.ErrCoordinatorNotAvailable, idempotence.ErrConcurrentTransactions, ErrUnreachable)
		if !retry || !n.backOff(ctx) {
			return pe, err
		}
	}
}

// backOff waits RetryBackoff, and reports false if ctx ended or the node
// closed meanwhile.
func (n *Node) backOff(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-n.closing:
		return false
	case <-time.After(n.cfg.RetryBackoff):
		return true
	}
}

// forward makes r at node to and decodes its answer; an answer that did
// not come within RequestTimeout is ErrUnreachable.
func forward[R any](ctx context.Context, n *Node, to replica.NodeID, r request, decode func([]byte) (R, error)) (R, error) {
	call, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	var zero R
	a, err := n.call(call, to, r)
	if err == nil {
		if res, err := decode(a.Payload); err == nil || call.Err() == nil {
			return res, err
		}
	}
	if call.Err() != nil && !errors.Is(err, ErrUnreachable) {
		err = fmt.Errorf("%w: node %d answered the end of the call: %w", ErrUnreachable, to, err)
	}
	return zero, err
}

// produceRequest asks a partition's leader to append a batch.
type produceRequest struct {
	Topic     string
	Partition int32
	Acks      replica.Acks
	TxnID     string
	Batch     []byte
}

func (*produceRequest) kind() requestKind { return kindProduce }
func (r *produceRequest) encode(e *encoder) {
	e.string(r.Topic)
	e.int(int64(r.Partition))
	e.int(int64(r.Acks))
	e.string(r.TxnID)
	e.bytes(r.Batch)
}
func (r *produceRequest) decode(d *decoder) {
	r.Topic, r.Partition = d.string(), d.int32()
	if acks := d.int(); acks == int64(replica.Acks(acks)) {
		r.Acks = replica.Acks(acks)
	} else {
		d.fail("acks")
	}
	r.TxnID, r.Batch = d.string(), d.bytes()
}

func (r *produceRequest) produceHere(ctx context.Context, n *Node) (replica.ProduceResult, error) {
	if r.TxnID != "" {
		return n.ProduceTransactional(ctx, r.TxnID, true, r.Topic, r.Partition, r.Acks, r.Batch)
	}
	return n.Produce(ctx, r.Topic, r.Partition, r.Acks, r.Batch)
}

func (r *produceRequest) answer(ctx context.Context, n *Node) []byte {
	res, err := r.produceHere(ctx, n)
	e := &encoder{}
	e.codedError(int64(replica.CodeOf(err)), err)
	e.int(res.BaseOffset)
	e.int(res.LastOffset)
	e.bool(res.Duplicate)
	return e.b
}

func decodeProduceAnswer(b []byte) (replica.ProduceResult, error) {
	d := &decoder{b: b}
	err := d.remoteError()
	res := replica.ProduceResult{BaseOffset: d.int(), LastOffset: d.int(), Duplicate: d.bool()}
	if derr := d.finish(); derr != nil {
		return replica.ProduceResult{}, fmt.Errorf("%w (a produce's answer)", derr)
	}
	return res, err
}

// txnEndRequest asks a transactional id's coordinator for a producer id
// and epoch (Init), or to end a transaction.
type txnEndRequest struct {
	TxnID      string
	Init       bool
	Timeout    time.Duration // Init's
	ProducerID int64
	Epoch      int16
	Commit     bool
}

func (*txnEndRequest) kind() requestKind { return kindTxnEnd }
func (r *txnEndRequest) encode(e *encoder) {
	e.string(r.TxnID)
	e.bool(r.Init)
	e.duration(r.Timeout)
	e.int(r.ProducerID)
	e.int(int64(r.Epoch))
	e.bool(r.Commit)
}
func (r *txnEndRequest) decode(d *decoder) {
	r.TxnID, r.Init, r.Timeout, r.ProducerID, r.Epoch, r.Commit = d.string(), d.bool(), d.duration(), d.int(), d.int16(), d.bool()
}

func (r *txnEndRequest) run(n *Node) (idempotence.ProducerIDAndEpoch, error) {
	if r.Init {
		return n.txns.InitProducerID(r.TxnID, r.Timeout)
	}
	return n.txns.EndTxn(r.TxnID, idempotence.ProducerIDAndEpoch{ProducerID: r.ProducerID, Epoch: r.Epoch}, r.Commit)
}

func (r *txnEndRequest) answer(_ context.Context, n *Node) []byte {
	pe, err := r.run(n)
	e := &encoder{}
	e.codedError(int64(replica.CodeOf(err)), err)
	e.int(pe.ProducerID)
	e.int(int64(pe.Epoch))
	return e.b
}

func decodeTxnEndAnswer(b []byte) (idempotence.ProducerIDAndEpoch, error) {
	d := &decoder{b: b}
	err := d.remoteError()
	pe := idempotence.ProducerIDAndEpoch{ProducerID: d.int(), Epoch: d.int16()}
	if derr := d.finish(); derr != nil {
		return idempotence.ProducerIDAndEpoch{}, fmt.Errorf("%w (a transaction end's answer)", derr)
	}
	return pe, err
}

// remoteError decodes an error codedError encoded: nil, the code itself if
// the message was only its name, or a *RemoteError.
func (d *decoder) remoteError() error {
	code, msg := kafkaerr.Code(d.int16()), d.string()
	switch {
	case code == kafkaerr.None:
		return nil
	case msg == code.Error():
		return code
	}
	return &RemoteError{Code: code, Message: msg}
}
