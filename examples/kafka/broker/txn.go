package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// The transaction APIs are served by the cluster's transaction
// coordinators (ReplicatedTransactions), which keep Kafka's rules of transactions version 2
// (KIP-890 part 2): every EndTxn bumps the producer epoch and answers the
// new one (EndTxn v5), and a Produce of version 12 or later adds its
// partition to the producer's transaction itself. The broker advertises the
// finalized feature transaction.version=2 in ApiVersions, which is how
// clients learn to use those versions. A client of version 1 (EndTxn v4 or
// older, which keeps its epoch across transactions) cannot be served by a
// coordinator that bumps it, so EndTxn is served at version 5 only.

// transactionVersion is the finalized transaction.version feature level.
const transactionVersion = 2

// errNoTransactions refuses the transaction requests of a Cluster that
// keeps no transaction coordinators.
var errNoTransactions = fmt.Errorf("%w: this cluster serves no transactions", kafkaerr.ErrInvalidRequest)

// txns returns the cluster's transaction coordinators.
func (b *Broker) txns() (ReplicatedTransactions, error) {
	rt, ok := b.cluster.(ReplicatedTransactions)
	if !ok {
		return nil, errNoTransactions
	}
	return rt, nil
}

// addOffsetsToTxn adds the partition of the offsets topic that holds a
// group to the producer's transaction (AddOffsetsToTxn, KIP-98), so that
// the transaction's marker is written there too, through the group
// coordinator, which then applies or drops the offsets TxnOffsetCommit
// staged.
func (b *Broker) addOffsetsToTxn(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	err := cmp.Or(b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID),
		b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeGroup, req.Group))
	if err == nil {
		err = b.offsetsPartitionToTxn(ctx, req.TransactionalID, idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.ProducerEpoch}, req.Group, false)
	}
	if err != nil {
		b.logger.Info("broker: AddOffsetsToTxn refused", "txn", req.TransactionalID, "group", req.Group, "client", r.clientID, "err", err)
		resp.ErrorCode = code(err)
	}
	return resp
}

// offsetsPartitionToTxn adds the offsets partition of groupID to the
// transaction of producer, which has transactional id txnID, or with
// verifyOnly checks that it is in it. The id's coordinator may be another
// broker (a TxnOffsetCommit reaches the group's coordinator).
func (b *Broker) offsetsPartitionToTxn(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, groupID string, verifyOnly bool) error {
	topic, partition, err := b.groups.TxnCommitter().TxnOffsetsPartition(groupID)
	if err != nil {
		return err
	}
	rt, err := b.txns()
	if err != nil {
		return err
	}
	return rt.AddToTransaction(ctx, txnID, producer, idempotence.TopicPartition{Topic: topic, Partition: partition}, verifyOnly)
}

// initTransactionalProducerID answers an InitProducerId that names a
// transactional id: the coordinator gives the id a producer id, or bumps
// the epoch of the one it has, which fences the producer that held it and
// aborts its open transaction (TransactionCoordinator.handleInitProducerId).
// A v3+ request may carry the producer id and epoch the producer has
// (KIP-360): then it is PRODUCER_FENCED unless they are still the
// coordinator's, so that a fenced producer cannot take the id back; one
// without the other is INVALID_REQUEST (KafkaApis).
func (b *Broker) initTransactionalProducerID(r *request, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) {
	txnID := *req.TransactionalID
	timeout := ms(req.TransactionTimeoutMillis)
	current := idempotence.ProducerIDAndEpoch{ProducerID: -1, Epoch: -1}
	if req.Version >= 3 {
		current = idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.ProducerEpoch}
	}
	var pe idempotence.ProducerIDAndEpoch
	rt, err := b.txns()
	switch {
	case err != nil:
	case txnID == "":
		err = fmt.Errorf("%w: an empty transactional id", kafkaerr.ErrInvalidRequest)
	case (current.ProducerID < 0) != (current.Epoch < 0):
		err = fmt.Errorf("%w: producer id %d with epoch %d: both or neither", kafkaerr.ErrInvalidRequest, current.ProducerID, current.Epoch)
	case current.ProducerID < 0:
		pe, err = rt.Transactions().InitProducerID(txnID, timeout)
	default:
		pe, err = rt.Transactions().ReinitProducerID(txnID, timeout, current)
	}
	if err != nil {
		b.logger.Info("broker: InitProducerId refused", "txn", txnID, "client", r.clientID, "err", err)
		resp.ErrorCode = code(err)
		return
	}
	resp.ProducerID, resp.ProducerEpoch = pe.ProducerID, pe.Epoch
}

// addPartitionsToTxn serves AddPartitionsToTxn as clients of transactions
// version 1 send it (v0-v3). Partitions that do not exist are answered
// UNKNOWN_TOPIC_OR_PARTITION, those of the coordinators' topics
// INVALID_TOPIC_EXCEPTION (as a produce to them), and the others
// OPERATION_NOT_ATTEMPTED, as Kafka answers a request it refuses before the
// coordinator sees it; otherwise every partition gets the coordinator's
// answer.
func (b *Broker) addPartitionsToTxn(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var tps []idempotence.TopicPartition
	refused := map[idempotence.TopicPartition]int16{}
	txnDenied := b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID)
	for _, rt := range req.Topics {
		topicDenied := b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, rt.Topic)
		for _, p := range rt.Partitions {
			tp := idempotence.TopicPartition{Topic: rt.Topic, Partition: p}
			tps = append(tps, tp)
			if txnDenied != nil {
				continue // every partition is answered the id's denial
			}
			err := cmp.Or(topicDenied, writable(rt.Topic))
			if err == nil {
				_, err = b.cluster.Partition(rt.Topic, p)
			}
			if err != nil {
				refused[tp] = code(err)
			}
		}
	}
	err := txnDenied
	switch {
	case err != nil:
	case len(refused) > 0:
		err = kafkaerr.ErrOperationNotAttempted
	default:
		var rt ReplicatedTransactions
		if rt, err = b.txns(); err == nil {
			err = rt.Transactions().AddPartitions(req.TransactionalID, idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.ProducerEpoch}, tps...)
		}
	}
	if err != nil {
		b.logger.Info("broker: AddPartitionsToTxn refused", "txn", req.TransactionalID, "client", r.clientID, "err", err)
	}
	for _, rt := range req.Topics {
		t := kmsg.NewAddPartitionsToTxnResponseTopic()
		t.Topic = rt.Topic
		for _, p := range rt.Partitions {
			c, ok := refused[idempotence.TopicPartition{Topic: rt.Topic, Partition: p}]
			if !ok {
				c = code(err)
			}
			t.Partitions = append(t.Partitions, kmsg.AddPartitionsToTxnResponseTopicPartition{Partition: p, ErrorCode: c})
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// endTxn commits or aborts a transaction (EndTxn v5): it returns once the
// decision is durable and the markers written, with the producer id and
// epoch of the producer's next transaction.
func (b *Broker) endTxn(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	rt, err := b.txns()
	err = cmp.Or(b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, req.TransactionalID), err)
	var next idempotence.ProducerIDAndEpoch
	if err == nil {
		next, err = rt.Transactions().EndTxn(req.TransactionalID, idempotence.ProducerIDAndEpoch{ProducerID: req.ProducerID, Epoch: req.ProducerEpoch}, req.Commit)
	}
	if err != nil {
		b.logger.Info("broker: EndTxn refused", "txn", req.TransactionalID, "commit", req.Commit, "client", r.clientID, "err", err)
		resp.ErrorCode = code(err)
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = next.ProducerID, next.Epoch
	return resp
}

// describeTransactions answers the durable state of each transactional id
// (DescribeTransactions, KIP-664); an id the coordinator does not know is
// TRANSACTIONAL_ID_NOT_FOUND.
func (b *Broker) describeTransactions(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	rt, err := b.txns()
	for _, id := range req.TransactionalIDs {
		s := kmsg.NewDescribeTransactionsResponseTransactionState()
		s.TransactionalID, s.ProducerID, s.ProducerEpoch, s.StartTimestamp = id, -1, -1, -1
		if err := cmp.Or(b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, id), err); err != nil {
			s.ErrorCode = code(err)
			resp.TransactionStates = append(resp.TransactionStates, s)
			continue
		}
		if rt.TransactionCoordinatorFor(id) != b.cfg.NodeID {
			// Another broker's coordinator has it (Kafka's
			// TransactionStateManager answers NOT_COORDINATOR).
			s.ErrorCode = int16(kafkaerr.ErrNotCoordinator)
			resp.TransactionStates = append(resp.TransactionStates, s)
			continue
		}
		rec, ok := rt.Transactions().Describe(id)
		if !ok || rec.State == idempotence.TxnDead {
			s.ErrorCode = int16(kafkaerr.ErrTransactionalIDNotFound)
			resp.TransactionStates = append(resp.TransactionStates, s)
			continue
		}
		s.State, s.TimeoutMillis, s.StartTimestamp = rec.State.String(), rec.TimeoutMs, rec.StartMs
		s.ProducerID, s.ProducerEpoch = rec.ProducerID, rec.ProducerEpoch
		for _, tp := range rec.Partitions { // sorted by topic, then partition
			if n := len(s.Topics); n == 0 || s.Topics[n-1].Topic != tp.Topic {
				st := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				st.Topic = tp.Topic
				s.Topics = append(s.Topics, st)
			}
			last := &s.Topics[len(s.Topics)-1]
			last.Partitions = append(last.Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return resp
}

// appendTransactional appends a transactional batch of a producer with
// transactional id txnID, with the request's other transactional batches
// (g): a Produce of version 12 or later adds their partitions to the
// producer's transaction first (KIP-890 part 2, through the coordinator,
// all in one request); an older one must find each partition in the
// producer's open transaction, added by AddPartitionsToTxn, or it is
// INVALID_TXN_STATE with nothing appended (KIP-890 part 1's verification).
// The coordinator's answers are given as a partition leader gives them to
// a producer (AddPartitionsToTxnManager and ReplicaManager): PRODUCER_FENCED
// is INVALID_PRODUCER_EPOCH (KIP-890 part 2); CONCURRENT_TRANSACTIONS and
// the coordinator's absence NOT_ENOUGH_REPLICAS, which every producer
// retries.
func (b *Broker) appendTransactional(req *kmsg.ProduceRequest, g *txnGather, p *log.Partition, batch segment.Batch) (log.AppendResult, error) {
	if req.TransactionID == nil {
		// Kafka checks the producer may write as txnID before anything
		// else, and a null id may not.
		return log.AppendResult{}, fmt.Errorf("%w: a transactional batch in a produce request without a transactional id", kafkaerr.ErrTransactionalIDAuthorizationFailed)
	}
	o := g.add(PartitionBatch{Topic: p.Topic(), Partition: p.ID(), Batch: batch})
	return o.Result, leaderAnswer(o.Err)
}

// txnGather collects the transactional batches of one produce request,
// which its partitions' goroutines check concurrently, and appends them in
// one call once every partition has reported, so that their partitions
// join the transaction together (Kafka's ReplicaManager verifies a
// produce's partitions in one AddPartitionsToTxnManager request). Each
// partition reports once: add for a transactional batch, skip for
// anything else.
type txnGather struct {
	mu       sync.Mutex
	waiting  int // partitions yet to report
	batches  []PartitionBatch
	outcomes []AppendOutcome
	done     chan struct{}
	append   func([]PartitionBatch) []AppendOutcome
}

// newTxnGather gathers n partitions' reports for a transactional produce.
func (b *Broker) newTxnGather(ctx context.Context, req *kmsg.ProduceRequest, n int) *txnGather {
	return &txnGather{waiting: n, done: make(chan struct{}), append: func(batches []PartitionBatch) []AppendOutcome {
		rt, err := b.txns()
		if err != nil {
			out := make([]AppendOutcome, len(batches))
			for i := range out {
				out[i].Err = err
			}
			return out
		}
		return rt.AppendTransactional(ctx, *req.TransactionID, req.Version >= 12, req.Acks, batches)
	}}
}

// add hands in a partition's batch and returns its outcome.
func (g *txnGather) add(pb PartitionBatch) AppendOutcome {
	g.mu.Lock()
	i := len(g.batches)
	g.batches = append(g.batches, pb)
	g.mu.Unlock()
	g.report()
	<-g.done
	return g.outcomes[i]
}

// skip reports a partition that gives no transactional batch.
func (g *txnGather) skip() { g.report() }

func (g *txnGather) report() {
	g.mu.Lock()
	g.waiting--
	last := g.waiting == 0
	g.mu.Unlock()
	if !last {
		return
	}
	if len(g.batches) > 0 {
		g.outcomes = g.append(g.batches)
	}
	close(g.done)
}

// leaderAnswer is the coordinator's answer err as a partition leader gives
// it to a producer: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH.
func leaderAnswer(err error) error {
	if errors.Is(err, idempotence.ErrProducerFenced) || errors.Is(err, kafkaerr.ErrProducerFenced) {
		return fmt.Errorf("%w: %v", kafkaerr.ErrInvalidProducerEpoch, err)
	}
	return err
}

// features are the finalized features ApiVersions v3+ announces.
func features(resp *kmsg.ApiVersionsResponse) {
	if resp.Version < 3 {
		return
	}
	resp.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{{Name: "transaction.version", MinVersion: 0, MaxVersion: transactionVersion}}
	resp.FinalizedFeaturesEpoch = 0
	resp.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{{Name: "transaction.version", MinVersionLevel: transactionVersion, MaxVersionLevel: transactionVersion}}
}
