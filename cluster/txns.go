package cluster

import (
	"context"
	"errors"
	"fmt"
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

// ProduceTransactional appends a transactional producer's batch to a
// partition this node leads, as Produce does. Unless the producer's
// transaction is open on the partition already, txnID's coordinator first
// adds the partition to it (addPartition, transactions version 2) or
// checks that it has it (KIP-890 part 1); a marker between that and the
// append carries a newer epoch, and the append then refuses the batch
// (INVALID_PRODUCER_EPOCH), so no batch opens a transaction the
// coordinator does not know. The coordinator's absence is answered
// NOT_ENOUGH_REPLICAS, which a producer retries, as Kafka's
// AddPartitionsToTxnManager answers it.
func (n *Node) ProduceTransactional(ctx context.Context, txnID string, addPartition bool, topic string, partition int32, acks replica.Acks, batch []byte) (replica.ProduceResult, error) {
	b := segment.Batch(batch)
	if !b.Transactional() || b.Control() {
		return replica.ProduceResult{}, fmt.Errorf("%w: a transactional produce of a batch that is not transactional data", replica.ErrInvalidRequest)
	}
	plog, err := n.leaderLog(ctx, topic, partition)
	if err != nil {
		return replica.ProduceResult{}, err
	}
	producer := idempotence.ProducerIDAndEpoch{ProducerID: b.ProducerID(), Epoch: b.ProducerEpoch()}
	open, err := txnOpen(plog, producer)
	if err != nil {
		return replica.ProduceResult{}, err
	}
	if !open {
		req := &txnAddRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch,
			Topic: topic, Partition: partition, VerifyOnly: !addPartition}
		if err := n.askCoordinator(ctx, req, replica.ErrNotEnoughReplicas); err != nil {
			return replica.ProduceResult{}, err
		}
	}
	return n.Produce(ctx, topic, partition, acks, batch)
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
	req := &txnAddRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch, Topic: tp.Topic, Partition: tp.Partition, VerifyOnly: verifyOnly}
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

// txnAddRequest asks a transactional id's coordinator to add a partition
// to a producer's transaction, or to check that it has it.
type txnAddRequest struct {
	TxnID      string
	ProducerID int64
	Epoch      int16
	Topic      string
	Partition  int32
	VerifyOnly bool
}

func (*txnAddRequest) kind() requestKind { return kindTxnAdd }
func (r *txnAddRequest) encode(e *encoder) {
	e.string(r.TxnID)
	e.int(r.ProducerID)
	e.int(int64(r.Epoch))
	e.string(r.Topic)
	e.int(int64(r.Partition))
	e.bool(r.VerifyOnly)
}
func (r *txnAddRequest) decode(d *decoder) {
	r.TxnID, r.ProducerID, r.Epoch = d.string(), d.int(), int16(d.int32())
	r.Topic, r.Partition, r.VerifyOnly = d.string(), d.int32(), d.bool()
}
func (r *txnAddRequest) serve(_ context.Context, n *Node) error {
	producer := idempotence.ProducerIDAndEpoch{ProducerID: r.ProducerID, Epoch: r.Epoch}
	tp := idempotence.TopicPartition{Topic: r.Topic, Partition: r.Partition}
	if r.VerifyOnly {
		return n.txns.Verify(r.TxnID, producer, tp)
	}
	if n.Metadata().Partition(r.Topic, r.Partition) == nil {
		return fmt.Errorf("%w: %s-%d", replica.ErrUnknownTopicOrPartition, r.Topic, r.Partition)
	}
	return n.txns.AddPartitions(r.TxnID, producer, tp)
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
