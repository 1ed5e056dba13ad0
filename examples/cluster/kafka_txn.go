package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
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

// Transactions live in the replicated topic __transaction_state, as in
// Kafka (TransactionCoordinator, TransactionStateManager, KIP-98): a
// transactional id's coordinator is the leader of the state partition its
// id hashes to (Kafka's partitionFor: abs(hashCode) mod the partition
// count, the rule group.PartitionFor keeps), which loads that partition's
// records when it becomes leader (COORDINATOR_LOAD_IN_PROGRESS meanwhile)
// and gives them up when it stops (NOT_COORDINATOR). Each partition's
// transactional ids are an idempotence.Coordinator, whose records are
// appended as the partition's leader with acks=all before they take
// effect. When a transaction ends, the coordinator writes its markers
// through each partition's leader, over the nodes' HTTP transport (Kafka's
// TransactionMarkerChannelManager and WriteTxnMarkers), again until each is
// written, and then its Complete record. A transactional produce reaches a
// partition's leader, which adds the partition to the transaction at the
// coordinator first (KIP-890 part 2's implicit AddPartitionsToTxn).

const (
	// txnStatePartitions and txnStateReplicationFactor shape the
	// transaction state topic (transaction.state.log.num.partitions, 50 in
	// Kafka; transaction.state.log.replication.factor, 3 as in Kafka).
	txnStatePartitions        = 3
	txnStateReplicationFactor = 3
	// txnRetryInterval is how often a coordinator writes again the markers
	// it could not write and aborts the transactions open past their
	// timeout (Kafka checks timeouts every 10 s,
	// transaction.abort.timed.out.transaction.cleanup.interval.ms; retries
	// markers as soon as a leader is known).
	txnRetryInterval = 100 * time.Millisecond
	// markerTimeout bounds one attempt at writing a marker.
	markerTimeout = 5 * time.Second
)

// txnCoordinator is a node's transaction coordinator: one
// idempotence.Coordinator per state partition this node leads.
type txnCoordinator struct {
	kc    *kafkaCluster
	parts []*txnPartition
	ctx   context.Context // ended by close
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// txnPartition is the coordinator of one state partition's transactional
// ids.
type txnPartition struct {
	id int32

	mu sync.Mutex
	// c coordinates the partition's ids while this node leads it; nil
	// while it does not, or while it loads.
	c       *idempotence.Coordinator
	loading bool
	// epoch is the leader epoch the partition was loaded in, the
	// coordinator epoch of its markers (Kafka's coordinatorEpoch).
	epoch int32
	// sending are the transactional ids whose markers are being written.
	sending map[string]bool
}

// openTxns starts the node's transaction coordinator: it creates the state
// topic if the metadata has none, and loads and unloads partitions as
// their leader moves.
func (kc *kafkaCluster) openTxns() {
	ctx, cancel := context.WithCancel(context.Background())
	t := &txnCoordinator{kc: kc, ctx: ctx, stop: cancel}
	for id := range int32(txnStatePartitions) {
		t.parts = append(t.parts, &txnPartition{id: id, sending: map[string]bool{}})
	}
	kc.txn = t
	t.wg.Go(t.follow)
}

// closeTxns stops the transaction coordinator and waits for its writes.
func (kc *kafkaCluster) closeTxns() {
	if kc.txn != nil {
		kc.txn.stop()
		kc.txn.wg.Wait()
	}
}

// Transactions is the node's transaction coordinator.
func (kc *kafkaCluster) Transactions() broker.TxnCoordinator { return kc.txn }

// TransactionCoordinatorFor is the leader of the id's state partition, if
// it is live.
func (kc *kafkaCluster) TransactionCoordinatorFor(txnID string) int32 {
	return kc.liveLeader(controller.TopicPartition{Topic: log.TransactionStateTopic, Partition: txnPartitionFor(txnID)})
}

// liveLeader returns a partition's leader if it is live, else -1.
func (kc *kafkaCluster) liveLeader(tp controller.TopicPartition) int32 {
	v := kc.current()
	p := v.partitions[tp]
	if p == nil || p.Leader == replica.NoNode || !v.live[p.Leader] {
		return -1
	}
	return int32(p.Leader)
}

func txnPartitionFor(txnID string) int32 { return group.PartitionFor(txnID, txnStatePartitions) }

func (t *txnCoordinator) partition(txnID string) *txnPartition {
	return t.parts[txnPartitionFor(txnID)]
}

// follow loads each state partition this node leads (again if its leader
// epoch moved) and unloads each it no longer leads, and writes the
// pending markers and aborts the timed-out transactions of the loaded
// ones, until close.
func (t *txnCoordinator) follow() {
	t.kc.createInternalTopic(t.ctx, log.TransactionStateTopic, txnStatePartitions, txnStateReplicationFactor)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var retried time.Time
	for {
		v := t.kc.current()
		for _, p := range t.parts {
			tp := controller.TopicPartition{Topic: log.TransactionStateTopic, Partition: p.id}
			pv, leads := t.kc.leadsNow(v, tp)
			epoch := int32(-1)
			if leads {
				epoch = pv.LeaderEpoch
			}
			if p.resign(epoch) && leads {
				t.load(p, epoch)
			}
		}
		if time.Since(retried) >= txnRetryInterval {
			retried = time.Now()
			for _, p := range t.parts {
				t.retry(p)
			}
		}
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// resign unloads the partition unless it is loaded, or loading, in epoch
// (-1: this node does not lead it), and reports whether it is to be
// loaded (Kafka's onResignation).
func (p *txnPartition) resign(epoch int32) (load bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if (p.c != nil || p.loading) && p.epoch == epoch {
		return false
	}
	p.c, p.loading, p.epoch = nil, epoch >= 0, epoch
	return epoch >= 0
}

// load rebuilds the partition's coordinator from this node's replica,
// which leads in epoch (Kafka's loadTransactionsForTxnTopicPartition,
// which reads to the log end).
func (t *txnCoordinator) load(p *txnPartition, epoch int32) {
	c, err := t.read(p.id, epoch)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loading || p.epoch != epoch {
		return // resigned meanwhile
	}
	if err != nil {
		// Loaded again at the next round.
		p.loading, p.epoch = false, -1
		t.kc.n.log.Warn("kafka: loading a transaction state partition", "partition", p.id, "epoch", epoch, "err", err)
		return
	}
	p.c, p.loading = c, false
	t.kc.n.log.Info("kafka: transaction state partition loaded", "partition", p.id, "epoch", epoch, "ids", len(c.Transactions()))
}

func (t *txnCoordinator) read(partition, epoch int32) (*idempotence.Coordinator, error) {
	c, err := idempotence.NewCoordinator(idempotence.CoordinatorOptions{AllocateProducerID: t.kc.NewProducerID, CoordinatorEpoch: epoch})
	if err != nil {
		return nil, err
	}
	plog := t.kc.n.partition(controller.TopicPartition{Topic: log.TransactionStateTopic, Partition: partition})
	if plog == nil {
		return nil, fmt.Errorf("%s-%d: no replica here", log.TransactionStateTopic, partition)
	}
	start, _, _, err := plog.Offsets()
	if err != nil {
		return nil, err
	}
	for r, err := range plog.Records(start, log.ReadLogEnd) {
		if err != nil {
			return nil, fmt.Errorf("%s-%d: %w", log.TransactionStateTopic, partition, err)
		}
		rec, err := idempotence.UnmarshalTxnRecord(r.Key, r.Value)
		if err != nil {
			return nil, fmt.Errorf("%s-%d offset %d: %w", log.TransactionStateTopic, partition, r.Offset, err)
		}
		c.Replay(rec)
	}
	return c, nil
}

// coordinatorLocked returns the partition's coordinator, or the error a request
// for one of its ids is answered with.
func (p *txnPartition) coordinatorLocked() (*idempotence.Coordinator, error) {
	switch {
	case p.c != nil:
		return p.c, nil
	case p.loading:
		return nil, fmt.Errorf("%w: %s-%d is being loaded", kerr.CoordinatorLoadInProgress, log.TransactionStateTopic, p.id)
	}
	return nil, fmt.Errorf("%w: this node does not lead %s-%d", kerr.NotCoordinator, log.TransactionStateTopic, p.id)
}

// request runs a request against txnID's coordinator and returns its step
// with the coordinator it ran on.
func (t *txnCoordinator) request(txnID string, fn func(c *idempotence.Coordinator, nowMs int64) (idempotence.Step, error)) (*txnPartition, *idempotence.Coordinator, idempotence.Step, error) {
	p := t.partition(txnID)
	p.mu.Lock()
	defer p.mu.Unlock()
	c, err := p.coordinatorLocked()
	if err != nil {
		return p, nil, idempotence.Step{}, err
	}
	s, err := fn(c, time.Now().UnixMilli())
	return p, c, s, err
}

// run appends rec, the pending transition of its id on c, and makes it
// take effect, then the transition that follows at once, if any.
// Markers it calls for are left to finish.
func (t *txnCoordinator) run(p *txnPartition, c *idempotence.Coordinator, rec *idempotence.TxnRecord) error {
	for rec != nil {
		err := t.persist(p.id, rec)
		p.mu.Lock()
		if p.c != c {
			if err == nil && (p.c != nil || p.loading) {
				// Written after the partition was loaded again,
				// which may have missed it: it is loaded once more.
				p.c, p.loading, p.epoch = nil, false, -1
			}
			p.mu.Unlock()
			return fmt.Errorf("%w: %s-%d moved while %q was written", kerr.NotCoordinator, log.TransactionStateTopic, p.id, rec.TransactionalID)
		}
		if err != nil {
			err = errors.Join(err, c.Abandon(rec.TransactionalID))
			p.mu.Unlock()
			return err
		}
		f, err := c.Complete(*rec)
		p.mu.Unlock()
		if err != nil {
			return err
		}
		rec = f.Next
	}
	return nil
}

// persist appends a record to a state partition as its leader, acks=all.
// The append's errors are answered as Kafka's appendTransactionToLog
// answers them (txnLogError).
func (t *txnCoordinator) persist(partition int32, rec *idempotence.TxnRecord) error {
	key, value := idempotence.MarshalTxnRecord(*rec)
	b, err := segment.AppendBatch(nil, []segment.Record{{Key: key, Value: value}}, segment.BuildOptions{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.kc.produceTimeout())
	defer cancel()
	_, err = t.kc.produceCommitted(ctx, log.TransactionStateTopic, partition, b)
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("%s-%d: writing %q %v", log.TransactionStateTopic, partition, rec.TransactionalID, rec.State)
	if ke := txnLogError(err); ke != nil {
		return fmt.Errorf("%w: %s: %w", ke, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// txnLogError returns the coordinator error Kafka answers a request with
// whose record failed to append to the transaction state log with err
// (TransactionStateManager.appendTransactionToLog): the partition short
// of replicas or slow to commit, COORDINATOR_NOT_AVAILABLE, which the
// producer retries here; led elsewhere or its log failed, NOT_COORDINATOR;
// the record too large, UNKNOWN_SERVER_ERROR. Nil means err is answered
// as it is. Either way the request's pending transition is abandoned and
// the partition stays loaded until this node stops leading it.
func txnLogError(err error) *kerr.Error {
	switch {
	case errors.Is(err, kerr.NotEnoughReplicas), errors.Is(err, kerr.NotEnoughReplicasAfterAppend),
		errors.Is(err, kerr.RequestTimedOut), errors.Is(err, kerr.UnknownTopicOrPartition):
		return kerr.CoordinatorNotAvailable
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.KafkaStorageError):
		return kerr.NotCoordinator
	case errors.Is(err, kerr.MessageTooLarge):
		return kerr.UnknownServerError
	}
	return nil
}

// produceTimeout is how long an acks=all append may wait: past the
// replica's own produce timeout.
func (kc *kafkaCluster) produceTimeout() time.Duration {
	return time.Duration(11*kc.n.cfg.lag) * kc.n.cfg.tick
}

// finish writes the markers of txnID's completing transaction, each
// through its partition's leader, then its Complete record. It returns at
// once if another finish is writing them, and leaves those it could not
// write to the next retry.
func (t *txnCoordinator) finish(p *txnPartition, c *idempotence.Coordinator, txnID string) {
	p.mu.Lock()
	if p.c != c || p.sending[txnID] {
		p.mu.Unlock()
		return
	}
	var ms []idempotence.MarkerRequest
	for _, m := range c.Markers() {
		if m.TransactionalID == txnID {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		p.mu.Unlock()
		return
	}
	p.sending[txnID] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.sending, txnID)
		p.mu.Unlock()
	}()

	written := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { written[i] = t.kc.sendMarker(t.ctx, m) })
	}
	wg.Wait()
	var next *idempotence.TxnRecord
	p.mu.Lock()
	for i, m := range ms {
		if err := written[i]; err != nil {
			t.kc.n.log.Info("kafka: transaction marker not written yet", "txn", txnID, "partition", m.Partition, "type", m.Type, "err", err)
			continue
		}
		if p.c != c {
			break
		}
		n, err := c.MarkerWritten(txnID, m.Partition, time.Now().UnixMilli())
		if err != nil {
			t.kc.n.log.Warn("kafka: transaction marker", "txn", txnID, "partition", m.Partition, "err", err)
		}
		if n != nil {
			next = n
		}
	}
	p.mu.Unlock()
	if next != nil {
		if err := t.run(p, c, next); err != nil {
			t.kc.n.log.Warn("kafka: completing a transaction", "txn", txnID, "err", err)
		}
	}
}

// retry carries out, for a loaded partition, the transitions the clock
// makes due (the abort of a transaction past its timeout, the expiry of an
// idle id) and writes the markers of every completing transaction.
func (t *txnCoordinator) retry(p *txnPartition) {
	p.mu.Lock()
	c := p.c
	if c == nil {
		p.mu.Unlock()
		return
	}
	recs, err := c.Tick(time.Now().UnixMilli())
	ids := map[string]bool{}
	for _, m := range c.Markers() {
		if !p.sending[m.TransactionalID] {
			ids[m.TransactionalID] = true
		}
	}
	p.mu.Unlock()
	if err != nil {
		t.kc.n.log.Warn("kafka: transaction timeouts", "partition", p.id, "err", err)
	}
	for _, rec := range recs {
		if err := t.run(p, c, rec); err != nil {
			t.kc.n.log.Warn("kafka: transaction timeout", "txn", rec.TransactionalID, "err", err)
			continue
		}
		ids[rec.TransactionalID] = true
	}
	for id := range ids {
		t.wg.Go(func() { t.finish(p, c, id) })
	}
}

// step makes a request's transition and writes the markers it calls for.
// A request that finds its id completing (CONCURRENT_TRANSACTIONS) is made
// again once the markers are written, as log.Transactions does, so that
// the producer's retry is not needed for markers that could be written at
// once.
func (t *txnCoordinator) step(txnID string, fn func(c *idempotence.Coordinator, nowMs int64) (idempotence.Step, error)) (idempotence.Step, error) {
	p, c, s, err := t.request(txnID, fn)
	if errors.Is(err, idempotence.ErrConcurrentTransactions) {
		t.finish(p, c, txnID)
		p, c, s, err = t.request(txnID, fn)
	}
	if err != nil {
		return s, err
	}
	if err := t.run(p, c, s.Record); err != nil {
		return s, err
	}
	if s.Record != nil {
		t.finish(p, c, txnID)
	}
	return s, nil
}

// InitProducerID gives txnID a producer id or bumps its epoch
// (TransactionCoordinator.handleInitProducerId); see
// log.Transactions.InitProducerID.
func (t *txnCoordinator) InitProducerID(txnID string, timeout time.Duration) (idempotence.ProducerIDAndEpoch, error) {
	return t.initProducerID(txnID, timeout, nil)
}

// ReinitProducerID is InitProducerID for a producer that has an id and
// epoch (KIP-360).
func (t *txnCoordinator) ReinitProducerID(txnID string, timeout time.Duration, current idempotence.ProducerIDAndEpoch) (idempotence.ProducerIDAndEpoch, error) {
	return t.initProducerID(txnID, timeout, &current)
}

func (t *txnCoordinator) initProducerID(txnID string, timeout time.Duration, expected *idempotence.ProducerIDAndEpoch) (idempotence.ProducerIDAndEpoch, error) {
	ms := timeout.Milliseconds()
	if ms > math.MaxInt32 {
		ms = -1 // refused by the coordinator as out of range
	}
	// An open transaction is aborted first (CONCURRENT_TRANSACTIONS once
	// its abort is written); the request made again then succeeds unless
	// its markers could not be written.
	for range 2 {
		s, err := t.step(txnID, func(c *idempotence.Coordinator, now int64) (idempotence.Step, error) {
			return c.InitProducerID(txnID, int32(ms), expected, now)
		})
		if err != nil {
			return idempotence.ProducerIDAndEpoch{}, err
		}
		if s.Err == nil {
			return idempotence.ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, nil
		}
	}
	return idempotence.ProducerIDAndEpoch{}, fmt.Errorf("%w: the open transaction of %q is still being aborted", idempotence.ErrConcurrentTransactions, txnID)
}

// AddPartitions adds partitions, which must exist, to the producer's
// transaction.
func (t *txnCoordinator) AddPartitions(txnID string, producer idempotence.ProducerIDAndEpoch, partitions ...idempotence.TopicPartition) error {
	v := t.kc.current()
	for _, tp := range partitions {
		if v.partitions[controller.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] == nil {
			return fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, tp.Topic, tp.Partition)
		}
	}
	_, err := t.step(txnID, func(c *idempotence.Coordinator, now int64) (idempotence.Step, error) {
		return c.AddPartitions(txnID, producer.ProducerID, producer.Epoch, partitions, now)
	})
	return err
}

// EndTxn commits or aborts the producer's transaction (EndTxn v5): it
// answers once the decision is durable, after one attempt at its markers;
// the ones not written then are written again until they are.
func (t *txnCoordinator) EndTxn(txnID string, producer idempotence.ProducerIDAndEpoch, commit bool) (idempotence.ProducerIDAndEpoch, error) {
	s, err := t.step(txnID, func(c *idempotence.Coordinator, now int64) (idempotence.Step, error) {
		return c.EndTxn(txnID, producer.ProducerID, producer.Epoch, commit, now)
	})
	if err != nil {
		return idempotence.ProducerIDAndEpoch{}, err
	}
	return idempotence.ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, nil
}

// Describe returns txnID's state if this node coordinates it.
func (t *txnCoordinator) Describe(txnID string) (idempotence.TxnRecord, bool) {
	p := t.partition(txnID)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return idempotence.TxnRecord{}, false
	}
	return p.c.Transaction(txnID)
}

// List returns the state of every transactional id this node coordinates.
func (t *txnCoordinator) List() []idempotence.TxnRecord {
	var out []idempotence.TxnRecord
	for _, p := range t.parts {
		p.mu.Lock()
		if p.c != nil {
			out = append(out, p.c.Transactions()...)
		}
		p.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b idempotence.TxnRecord) int { return cmp.Compare(a.TransactionalID, b.TransactionalID) })
	return out
}

// verify checks that tp is in the open transaction of producer, txnID's
// current producer (KIP-890 part 1's verification).
func (t *txnCoordinator) verify(txnID string, producer idempotence.ProducerIDAndEpoch, tp idempotence.TopicPartition) error {
	p := t.partition(txnID)
	p.mu.Lock()
	defer p.mu.Unlock()
	c, err := p.coordinatorLocked()
	if err != nil {
		return err
	}
	rec, ok := c.Transaction(txnID)
	switch {
	case !ok || rec.ProducerID != producer.ProducerID:
		return fmt.Errorf("%w: producer %d is not transactional id %q's", kerr.InvalidTxnState, producer.ProducerID, txnID)
	case rec.ProducerEpoch != producer.Epoch:
		return fmt.Errorf("%w: epoch %d, transactional id %q is at %d", kerr.InvalidProducerEpoch, producer.Epoch, txnID, rec.ProducerEpoch)
	case rec.State != idempotence.TxnOngoing || !slices.Contains(rec.Partitions, tp):
		return fmt.Errorf("%w: %s-%d is not in the open transaction of %q", kerr.InvalidTxnState, tp.Topic, tp.Partition, txnID)
	}
	return nil
}
