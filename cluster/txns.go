package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// Transactions live in the replicated topic log.TransactionStateTopic, as
// in Kafka (KIP-98): a transactional id's coordinator is the leader of the
// state partition its id hashes to (group.PartitionFor's rule, Kafka's
// partitionFor), which loads that partition when its replica takes up the
// lead and every record it holds is committed (NOT_COORDINATOR until
// then), and gives it up when it stops leading. The rules are
// idempotence.TxnRuntime's, the same a Dir runs; the node supplies where
// the records go (the state partitions' replicas, acks=all) and where the
// markers go (each partition's leader, over the Transport). A
// transactional produce reaches a partition's leader, which adds the
// partition to the transaction at the coordinator first (KIP-890 part 2's
// implicit AddPartitionsToTxn).

const (
	// txnTickEvery is how often a coordinator writes again the markers
	// it could not write and aborts the transactions open past their
	// timeout (Kafka checks timeouts every 10 s and retries markers as
	// soon as a leader is known).
	txnTickEvery = 100 * time.Millisecond
	// markerTimeout bounds one attempt at writing a marker.
	markerTimeout = 5 * time.Second
	// Kafka's add.partitions.to.txn.retry.backoff.ms and
	// add.partitions.to.txn.retry.backoff.max.ms: a leader retries a
	// CONCURRENT_TRANSACTIONS answer for that long before its producer
	// gets it.
	addRetryBackoff = 20 * time.Millisecond
	addRetryMax     = 100 * time.Millisecond
	// producerIDBits leaves room, below a node's id, for the producer ids
	// the node hands out itself, so that no two nodes hand out the same.
	producerIDBits = 40
)

// txnHost is the node as its TxnRuntime's idempotence.TxnHost.
type txnHost struct{ n *Node }

func (h txnHost) ReadTxns(partition int32, fn func(idempotence.TxnRecord)) error {
	p := h.n.partition(controller.TopicPartition{Topic: log.TransactionStateTopic, Partition: partition})
	if p == nil {
		return fmt.Errorf("%w: node %d has no replica of %s-%d", replica.ErrUnknownTopicOrPartition, h.n.cfg.ID, log.TransactionStateTopic, partition)
	}
	return log.ReadTxnRecords(p, fn)
}

// PersistTxn appends a record to a state partition as its leader,
// acks=all; the runtime answers its error as Kafka's coordinator does.
func (h txnHost) PersistTxn(ctx context.Context, partition int32, rec idempotence.TxnRecord) error {
	key, value := idempotence.MarshalTxnRecord(rec)
	b, err := segment.AppendBatch(nil, []segment.Record{{Key: key, Value: value}}, segment.BuildOptions{})
	if err != nil {
		return err
	}
	_, err = h.n.appendCoordinator(ctx, log.TransactionStateTopic, partition, b)
	return err
}

// WriteMarker writes a transaction marker through its partition's leader.
// A partition the cluster no longer has has nothing left to mark.
func (h txnHost) WriteMarker(ctx context.Context, m idempotence.MarkerRequest) error {
	n := h.n
	b, err := idempotence.AppendMarkerBatch(nil, m.ProducerID, m.ProducerEpoch,
		idempotence.Marker{Type: m.Type, CoordinatorEpoch: m.CoordinatorEpoch}, time.Now().UnixMilli())
	if err != nil {
		return err
	}
	p := n.Metadata().Partition(m.Partition.Topic, m.Partition.Partition)
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	req := &markerRequest{Topic: m.Partition.Topic, Partition: m.Partition.Partition, LeaderEpoch: p.LeaderEpoch, Batch: b}
	switch leader := n.liveLeader(m.Partition.Topic, m.Partition.Partition); leader {
	case replica.NoNode:
		return fmt.Errorf("%w: %s-%d has no live leader", replica.ErrNotLeaderOrFollower, m.Partition.Topic, m.Partition.Partition)
	case n.cfg.ID:
		return req.serve(ctx, n)
	default:
		_, err := n.call(ctx, leader, req)
		return err
	}
}

// openTxns makes the node's transaction coordinator, with no partition
// loaded.
func (n *Node) openTxns() (*idempotence.TxnRuntime, error) {
	opts := n.cfg.Transactions
	opts.AllocateProducerID = n.NewProducerID
	return idempotence.NewTxnRuntime(idempotence.TxnRuntimeOptions{
		Host: txnHost{n}, Partitions: n.cfg.TransactionPartitions,
		PartitionFor:    func(txnID string) int32 { return group.PartitionFor(txnID, n.cfg.TransactionPartitions) },
		Coordinator:     opts,
		ParallelMarkers: true,
		OnError:         func(err error) { n.log.Info("transaction markers", "err", err) },
	})
}

// tickTxns aborts the transactions open past their timeout and writes the
// markers still to write, until ctx ends.
func (n *Node) tickTxns(ctx context.Context) {
	tick := time.NewTicker(txnTickEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := n.txns.Tick(); err != nil {
			n.log.Debug("transaction coordinator", "err", err)
		}
	}
}

// Transactions returns the node's transaction coordinator. It answers the
// transactional ids whose state partition this node leads, and
// NOT_COORDINATOR for the others: TransactionCoordinator says which node
// to ask.
func (n *Node) Transactions() *idempotence.TxnRuntime { return n.txns }

// TransactionCoordinator returns the node that coordinates a
// transactional id (the leader of its state partition), or NoNode if the
// partition has no live leader.
func (n *Node) TransactionCoordinator(txnID string) replica.NodeID {
	return n.liveLeader(log.TransactionStateTopic, group.PartitionFor(txnID, n.cfg.TransactionPartitions))
}

// NewProducerID returns a producer id no node of the cluster handed out
// before: the node's id above a counter its data directory keeps.
func (n *Node) NewProducerID() (int64, error) {
	id, err := n.dir.NewProducerID()
	if err != nil {
		return 0, err
	}
	if id >= 1<<producerIDBits {
		return 0, fmt.Errorf("%w: node %d has handed out all its producer ids", replica.ErrKafkaStorageError, n.cfg.ID)
	}
	return int64(n.cfg.ID)<<producerIDBits | id, nil
}

// PartitionBatch is one partition's batch of a produce.
type PartitionBatch struct {
	Topic     string
	Partition int32
	Batch     []byte
}

// ProduceTransactional appends a transactional producer's batch to a
// partition this node leads, as ProduceTransactionalBatches appends
// several.
func (n *Node) ProduceTransactional(ctx context.Context, txnID string, addPartition bool, topic string, partition int32, acks replica.Acks, batch []byte) (replica.ProduceResult, error) {
	r := n.ProduceTransactionalBatches(ctx, txnID, addPartition, acks, PartitionBatch{Topic: topic, Partition: partition, Batch: batch})[0]
	return r, r.Err
}

// ProduceTransactionalBatches appends batches of one transactional
// producer to partitions this node leads, each as Produce does, once
// txnID's coordinator has each partition in the producer's transaction:
// the partitions the transaction is not open on yet are added to it
// (addPartitions, transactions version 2) or checked to be in it (KIP-890
// part 1) in one request, as Kafka's ReplicaManager verifies a produce's
// partitions together through its AddPartitionsToTxnManager, so that the
// partitions of one produce are one transition at the coordinator and do
// not refuse each other with CONCURRENT_TRANSACTIONS. A marker between
// that and an append carries a newer epoch, and the append then refuses
// the batch (INVALID_PRODUCER_EPOCH), so no batch opens a transaction the
// coordinator does not know. What keeps the coordinator from answering
// (its absence, its loading, another transition of the id in flight) is
// answered NOT_ENOUGH_REPLICAS, which a producer retries, as Kafka's
// ReplicaManager translates it. It returns each batch's result, in order,
// a refused one with its Err set.
func (n *Node) ProduceTransactionalBatches(ctx context.Context, txnID string, addPartitions bool, acks replica.Acks, batches ...PartitionBatch) []replica.ProduceResult {
	results := make([]replica.ProduceResult, len(batches))
	var producer *idempotence.ProducerIDAndEpoch
	var join []int // the batches whose partition joins the transaction first
	for i, pb := range batches {
		b := segment.Batch(pb.Batch)
		if !b.Transactional() || b.Control() {
			results[i].Err = fmt.Errorf("%w: a transactional produce of a batch that is not transactional data", replica.ErrInvalidRequest)
			continue
		}
		p := idempotence.ProducerIDAndEpoch{ProducerID: b.ProducerID(), Epoch: b.ProducerEpoch()}
		if producer == nil {
			producer = &p
		} else if p != *producer {
			results[i].Err = fmt.Errorf("%w: a transactional produce of producers %v and %v", idempotence.ErrInvalidProducerIDMapping, *producer, p)
			continue
		}
		plog, err := n.leaderLog(ctx, pb.Topic, pb.Partition)
		if err != nil {
			results[i].Err = err
			continue
		}
		switch open, err := txnOpen(plog, p); {
		case err != nil:
			results[i].Err = err
		case !open:
			join = append(join, i)
		}
	}
	if len(join) > 0 {
		if err := n.joinTransaction(ctx, txnID, *producer, !addPartitions, batches, join); err != nil {
			for _, i := range join {
				results[i].Err = err
			}
		}
	}
	var wg sync.WaitGroup
	for i, pb := range batches {
		if results[i].Err != nil {
			continue
		}
		wg.Go(func() {
			r, err := n.Produce(ctx, pb.Topic, pb.Partition, acks, pb.Batch)
			r.Err = err
			results[i] = r
		})
	}
	wg.Wait()
	return results
}

// joinTransaction adds the partitions of batches[join] to producer's
// transaction at txnID's coordinator, or checks that it has them, in one
// request.
func (n *Node) joinTransaction(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, verifyOnly bool, batches []PartitionBatch, join []int) error {
	req := &txnAddRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch, VerifyOnly: verifyOnly}
	for _, i := range join {
		req.Partitions = append(req.Partitions, idempotence.TopicPartition{Topic: batches[i].Topic, Partition: batches[i].Partition})
	}
	err := n.askCoordinator(ctx, req, replica.ErrNotEnoughReplicas)
	if errors.Is(err, idempotence.ErrConcurrentTransactions) {
		return fmt.Errorf("%w: %w", replica.ErrNotEnoughReplicas, err)
	}
	return err
}

// txnOpen reports whether producer has a transaction open on the
// partition in its epoch.
func txnOpen(plog *log.Partition, producer idempotence.ProducerIDAndEpoch) (bool, error) {
	entries, err := plog.Producers()
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.ProducerID == producer.ProducerID {
			return e.Epoch == producer.Epoch && e.TxnFirstOffset >= 0, nil
		}
	}
	return false, nil
}

// AddToTransaction adds tp to producer's transaction at txnID's
// coordinator, or checks that it is in it, for a group coordinator's
// TxnOffsetCommit: the coordinator's absence is answered
// COORDINATOR_NOT_AVAILABLE, as Kafka's group coordinator answers a failed
// append of the offsets.
func (n *Node) AddToTransaction(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, tp idempotence.TopicPartition, verifyOnly bool) error {
	req := &txnAddRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch,
		Partitions: []idempotence.TopicPartition{tp}, VerifyOnly: verifyOnly}
	return n.askCoordinator(ctx, req, idempotence.ErrCoordinatorNotAvailable)
}

// askCoordinator sends req to its transactional id's coordinator, this
// node's or another's; the coordinator's absence is answered unavailable.
// An answer of CONCURRENT_TRANSACTIONS (another leader's addition, or the
// last transaction's markers, in flight) is retried every addRetryBackoff
// for up to addRetryMax before the caller gets it, as Kafka's leader
// retries it.
func (n *Node) askCoordinator(ctx context.Context, req *txnAddRequest, unavailable error) error {
	deadline := time.Now().Add(addRetryMax)
	for {
		err := n.askCoordinatorOnce(ctx, req, unavailable)
		if !errors.Is(err, idempotence.ErrConcurrentTransactions) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(addRetryBackoff):
		}
	}
}

func (n *Node) askCoordinatorOnce(ctx context.Context, req *txnAddRequest, unavailable error) error {
	var err error
	switch c := n.TransactionCoordinator(req.TxnID); c {
	case replica.NoNode:
		err = fmt.Errorf("%w: no live coordinator of transactional id %q", idempotence.ErrCoordinatorNotAvailable, req.TxnID)
	case n.cfg.ID:
		err = req.serve(ctx, n)
	default:
		ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
		_, err = n.call(ctx, c, req)
	}
	if errorsIsAny(err, idempotence.ErrCoordinatorNotAvailable, idempotence.ErrNotCoordinator,
		idempotence.ErrCoordinatorLoadInProgress, replica.ErrRequestTimedOut, ErrUnreachable) {
		return fmt.Errorf("%w: the coordinator of %q: %w", unavailable, req.TxnID, err)
	}
	return err
}

// txnAddRequest asks a transactional id's coordinator to add partitions
// to a producer's transaction, or to check that it has them.
type txnAddRequest struct {
	TxnID      string
	ProducerID int64
	Epoch      int16
	Partitions []idempotence.TopicPartition
	VerifyOnly bool
}

func (*txnAddRequest) kind() requestKind { return kindTxnAdd }
func (r *txnAddRequest) encode(e *encoder) {
	e.string(r.TxnID)
	e.int(r.ProducerID)
	e.int(int64(r.Epoch))
	e.partitions(r.Partitions)
	e.bool(r.VerifyOnly)
}
func (r *txnAddRequest) decode(d *decoder) {
	r.TxnID, r.ProducerID, r.Epoch = d.string(), d.int(), int16(d.int32())
	r.Partitions, r.VerifyOnly = d.partitions(), d.bool()
}
func (r *txnAddRequest) serve(_ context.Context, n *Node) error {
	producer := idempotence.ProducerIDAndEpoch{ProducerID: r.ProducerID, Epoch: r.Epoch}
	if r.VerifyOnly {
		return n.txns.Verify(r.TxnID, producer, r.Partitions...)
	}
	md := n.Metadata()
	for _, tp := range r.Partitions {
		if md.Partition(tp.Topic, tp.Partition) == nil {
			return fmt.Errorf("%w: %s", replica.ErrUnknownTopicOrPartition, tp)
		}
	}
	return n.txns.AddPartitions(r.TxnID, producer, r.Partitions...)
}

// markerRequest asks a partition's leader to append a coordinator's
// transaction marker (Kafka's WriteTxnMarkers).
type markerRequest struct {
	Topic       string
	Partition   int32
	LeaderEpoch int32
	Batch       []byte
}

func (*markerRequest) kind() requestKind { return kindTxnMarker }
func (r *markerRequest) encode(e *encoder) {
	e.string(r.Topic)
	e.int(int64(r.Partition))
	e.int(int64(r.LeaderEpoch))
	e.bytes(r.Batch)
}
func (r *markerRequest) decode(d *decoder) {
	r.Topic, r.Partition, r.LeaderEpoch, r.Batch = d.string(), d.int32(), d.int32(), d.bytes()
}

// serve appends the marker to a partition this node leads in the leader
// epoch the coordinator found it led in, acks=all (through the group
// coordinator for the offsets topic, which applies it to the offsets the
// producer staged). The replica's leader checks it as a coordinator's
// batch: a marker older than the producer's epoch is
// INVALID_PRODUCER_EPOCH, one from an older coordinator epoch
// TRANSACTION_COORDINATOR_FENCED (Kafka's
// ProducerAppendInfo.appendEndTxnMarker). Another leader epoch is
// NOT_LEADER_OR_FOLLOWER: the coordinator looks the leader up again.
func (r *markerRequest) serve(ctx context.Context, n *Node) error {
	if p := n.Metadata().Partition(r.Topic, r.Partition); p == nil || p.Leader != n.cfg.ID || p.LeaderEpoch != r.LeaderEpoch {
		return fmt.Errorf("%w: node %d does not lead %s-%d in epoch %d", replica.ErrNotLeaderOrFollower, n.cfg.ID, r.Topic, r.Partition, r.LeaderEpoch)
	}
	b := segment.Batch(r.Batch)
	if !b.Control() {
		return fmt.Errorf("%w: a transaction marker that is not a control batch", replica.ErrInvalidRequest)
	}
	if r.Topic == group.OffsetsTopic {
		return n.groups.TxnCommitter().WriteTxnMarker(ctx, r.Topic, r.Partition, b)
	}
	_, err := n.appendCoordinator(ctx, r.Topic, r.Partition, b)
	return err
}
