package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// A partition's leader and the transaction coordinators talk over the
// nodes' HTTP transport: the leader asks a transactional id's coordinator
// to add its partition to the producer's transaction (AddPartitionsToTxn as
// Kafka's AddPartitionsToTxnManager sends it, KIP-890), and the
// coordinator asks the leader to write a marker (WriteTxnMarkers).

// txnAddRequest is the body of POST /txn/add.
type txnAddRequest struct {
	TxnID      string `json:"txn_id"`
	ProducerID int64  `json:"producer_id"`
	Epoch      int16  `json:"epoch"`
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	// VerifyOnly checks that the partition is in the transaction instead
	// of adding it (KIP-890 part 1).
	VerifyOnly bool `json:"verify_only"`
}

// txnRoutes serve the transaction requests between nodes; a node that
// serves no Kafka answers COORDINATOR_NOT_AVAILABLE.
func (n *node) txnRoutes(mux *http.ServeMux) {
	handle := func(pattern string, fn func(ctx context.Context, kc *kafkaCluster, r *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			err := fmt.Errorf("%w: node %d serves no Kafka", kerr.CoordinatorNotAvailable, n.cfg.id)
			if kc := n.kafka.Load(); kc != nil {
				err = fn(r.Context(), kc, r)
			}
			rep := &reply{}
			if err != nil {
				rep.Code, rep.Error = replica.Code(broker.ErrorCode(err)), err.Error()
			}
			writeJSON(w, rep)
		})
	}
	handle("POST /txn/add", func(ctx context.Context, kc *kafkaCluster, r *http.Request) error {
		var req txnAddRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return fmt.Errorf("%w: /txn/add: %w", kerr.InvalidRequest, err)
		}
		return kc.addAtCoordinator(req)
	})
	handle("POST /txn/marker", func(ctx context.Context, kc *kafkaCluster, r *http.Request) error {
		q := r.URL.Query()
		id, err := strconv.ParseInt(q.Get("partition"), 10, 32)
		if err != nil {
			return fmt.Errorf("%w: /txn/marker: partition: %w", kerr.InvalidRequest, err)
		}
		epoch, err := strconv.ParseInt(q.Get("leader_epoch"), 10, 32)
		if err != nil {
			return fmt.Errorf("%w: /txn/marker: leader_epoch: %w", kerr.InvalidRequest, err)
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return err
		}
		return kc.appendMarker(ctx, controller.TopicPartition{Topic: q.Get("topic"), Partition: int32(id)}, int32(epoch), segment.Batch(b))
	})
}

// addAtCoordinator adds a partition to a transaction of this node's
// coordinator, or checks that it is in it.
func (kc *kafkaCluster) addAtCoordinator(req txnAddRequest) error {
	producer := idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.Epoch}
	tp := idempotence.TopicPartition{Topic: req.Topic, Partition: req.Partition}
	if req.VerifyOnly {
		return kc.txn.verify(req.TxnID, producer, tp)
	}
	return kc.txn.AddPartitions(req.TxnID, producer, tp)
}

// AppendTransactional appends a producer's transactional batch as the
// partition's leader. Unless the producer's transaction is open on the
// partition already (its batches are in the producer state), txnID's
// coordinator first adds the partition to it, or checks that it has it;
// a marker between that and the append carries a newer epoch, and the
// append then refuses the batch (INVALID_PRODUCER_EPOCH), so no batch opens
// a transaction the coordinator does not know.
func (kc *kafkaCluster) AppendTransactional(ctx context.Context, txnID string, addPartition bool, topic string, id int32, acks int16, batch segment.Batch) (log.AppendResult, error) {
	plog, err := kc.Log(topic, id)
	if err != nil {
		return log.AppendResult{}, err
	}
	producer := idempotence.ProducerIDAndEpoch{ProducerID: batch.ProducerID(), Epoch: batch.ProducerEpoch()}
	open, err := txnOpen(plog, producer)
	if err != nil {
		return log.AppendResult{}, err
	}
	if !open {
		req := txnAddRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch, Topic: topic, Partition: id, VerifyOnly: !addPartition}
		if err := kc.askCoordinator(ctx, req, kerr.NotEnoughReplicas); err != nil {
			return log.AppendResult{}, err
		}
	}
	return kc.appendAsLeader(ctx, controller.TopicPartition{Topic: topic, Partition: id}, acks, batch)
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
// coordinator, or checks that it is in it, for a TxnOffsetCommit: the
// coordinator's absence is answered COORDINATOR_NOT_AVAILABLE, as Kafka's
// group coordinator answers a failed append of the offsets.
func (kc *kafkaCluster) AddToTransaction(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, tp idempotence.TopicPartition, verifyOnly bool) error {
	req := txnAddRequest{TxnID: txnID, ProducerID: producer.ProducerID, Epoch: producer.Epoch, Topic: tp.Topic, Partition: tp.Partition, VerifyOnly: verifyOnly}
	return kc.askCoordinator(ctx, req, kerr.CoordinatorNotAvailable)
}

// askCoordinator sends req to its transactional id's coordinator, this
// node's or another's. The coordinator's absence is answered unavailable:
// NOT_ENOUGH_REPLICAS to a producer, which cannot handle coordinator
// errors in a produce response, as Kafka's AddPartitionsToTxnManager
// answers it, and which it retries.
//
// An answer of CONCURRENT_TRANSACTIONS (another leader's addition, or the
// last transaction's markers, in flight) is retried here every
// addRetryBackoff for up to addRetryMax before the producer gets it, as
// Kafka's leader retries it (add.partitions.to.txn.retry.backoff.ms and
// add.partitions.to.txn.retry.backoff.max.ms).
func (kc *kafkaCluster) askCoordinator(ctx context.Context, req txnAddRequest, unavailable *kerr.Error) error {
	deadline := time.Now().Add(addRetryMax)
	for {
		err := kc.askCoordinatorOnce(ctx, req, unavailable)
		if broker.ErrorCode(err) != kerr.ConcurrentTransactions.Code || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(addRetryBackoff):
		}
	}
}

// Kafka's defaults of add.partitions.to.txn.retry.backoff.ms and
// add.partitions.to.txn.retry.backoff.max.ms.
const (
	addRetryBackoff = 20 * time.Millisecond
	addRetryMax     = 100 * time.Millisecond
)

func (kc *kafkaCluster) askCoordinatorOnce(ctx context.Context, req txnAddRequest, unavailable *kerr.Error) error {
	c := kc.TransactionCoordinatorFor(req.TxnID)
	var err error
	switch c {
	case -1:
		err = fmt.Errorf("%w: no live coordinator of transactional id %q", kerr.CoordinatorNotAvailable, req.TxnID)
	case int32(kc.n.cfg.id):
		err = kc.addAtCoordinator(req)
	default:
		var body []byte
		if body, err = json.Marshal(req); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, kc.produceTimeout())
		defer cancel()
		if err = kc.n.controllerClient().do(ctx, http.MethodPost, replica.NodeID(c), "/txn/add", body, nil); err != nil {
			err = kafkaError(err)
		}
	}
	if err == nil {
		return nil
	}
	switch broker.ErrorCode(err) {
	case kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code,
		kerr.RequestTimedOut.Code, kerr.UnknownServerError.Code:
		return fmt.Errorf("%w: the coordinator of %q: %w", unavailable, req.TxnID, err)
	}
	return err
}

// sendMarker writes a transaction marker through its partition's leader.
// A partition the cluster no longer has has nothing left to mark.
func (kc *kafkaCluster) sendMarker(ctx context.Context, m idempotence.MarkerRequest) error {
	b, err := idempotence.AppendMarkerBatch(nil, m.ProducerID, m.ProducerEpoch,
		idempotence.Marker{Type: m.Type, CoordinatorEpoch: m.CoordinatorEpoch}, time.Now().UnixMilli())
	if err != nil {
		return err
	}
	tp := controller.TopicPartition{Topic: m.Partition.Topic, Partition: m.Partition.Partition}
	pv := kc.current().partitions[tp]
	if pv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	switch leader := kc.liveLeader(tp); leader {
	case -1:
		return fmt.Errorf("%w: %s-%d has no live leader", kerr.NotLeaderForPartition, tp.Topic, tp.Partition)
	case int32(kc.n.cfg.id):
		return kc.appendMarker(ctx, tp, pv.LeaderEpoch, segment.Batch(b))
	default:
		path := "/txn/marker?topic=" + url.QueryEscape(tp.Topic) + "&partition=" + strconv.Itoa(int(tp.Partition)) +
			"&leader_epoch=" + strconv.Itoa(int(pv.LeaderEpoch))
		if err := kc.n.controllerClient().do(ctx, http.MethodPost, replica.NodeID(leader), path, b, nil); err != nil {
			return kafkaError(err)
		}
		return nil
	}
}

// appendMarker appends a coordinator's marker to a partition this node
// leads in leaderEpoch, the epoch the coordinator found it led in, acks=all
// (through the group coordinator for the offsets topic). The replica's
// leader checks it as a coordinator's batch: a marker older than the
// producer's epoch is INVALID_PRODUCER_EPOCH, one from an older
// coordinator epoch TRANSACTION_COORDINATOR_FENCED (Kafka's
// ProducerAppendInfo.appendEndTxnMarker). Another leader epoch is
// NOT_LEADER_OR_FOLLOWER: the coordinator looks the leader up again.
func (kc *kafkaCluster) appendMarker(ctx context.Context, tp controller.TopicPartition, leaderEpoch int32, b segment.Batch) error {
	if pv := kc.current().partitions[tp]; pv == nil || pv.Leader != kc.n.cfg.id || pv.LeaderEpoch != leaderEpoch {
		return fmt.Errorf("%w: node %d does not lead %s-%d in epoch %d", kerr.NotLeaderForPartition, kc.n.cfg.id, tp.Topic, tp.Partition, leaderEpoch)
	}
	if _, err := kc.Log(tp.Topic, tp.Partition); err != nil {
		return err
	}
	if !b.Control() {
		return fmt.Errorf("%w: a transaction marker that is not a control batch", kerr.InvalidRecord)
	}
	if tp.Topic == group.OffsetsTopic {
		// The group coordinator appends it (appendOffsetsBatch) and
		// applies it to the offsets the producer staged, or answers
		// NOT_COORDINATOR if it does not lead the partition.
		return kc.groupService.TxnCommitter().WriteTxnMarker(ctx, tp.Topic, tp.Partition, b)
	}
	_, err := kc.produceCommitted(ctx, tp.Topic, tp.Partition, b)
	return err
}
