package idempotence

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/strandlog/strand"
)

// TxnState is the state of a transactional id at its coordinator, with
// the ids Kafka persists (TransactionState).
type TxnState int8

// The transaction states.
const (
	TxnEmpty          TxnState = 0
	TxnOngoing        TxnState = 1
	TxnPrepareCommit  TxnState = 2
	TxnPrepareAbort   TxnState = 3
	TxnCompleteCommit TxnState = 4
	TxnCompleteAbort  TxnState = 5
	// TxnDead is the state of an expired transactional id; its record is
	// the tombstone that removes it.
	TxnDead TxnState = 6
	// TxnPrepareEpochFence is transient: the coordinator bumps the epoch
	// of a transaction it aborts on its own (timeout, InitProducerId)
	// and moves straight on to TxnPrepareAbort. It is never persisted.
	TxnPrepareEpochFence TxnState = 7
)

var txnStateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

func (s TxnState) String() string {
	if s >= 0 && int(s) < len(txnStateNames) {
		return txnStateNames[s]
	}
	return fmt.Sprintf("TxnState(%d)", int8(s))
}

// validPrevious lists the states each state may be entered from
// (TransactionState.validPreviousStates).
var validPrevious = map[TxnState][]TxnState{
	TxnEmpty:             {TxnEmpty, TxnCompleteCommit, TxnCompleteAbort},
	TxnOngoing:           {TxnOngoing, TxnEmpty, TxnCompleteCommit, TxnCompleteAbort},
	TxnPrepareCommit:     {TxnOngoing},
	TxnPrepareAbort:      {TxnOngoing, TxnPrepareEpochFence, TxnEmpty, TxnCompleteCommit, TxnCompleteAbort},
	TxnCompleteCommit:    {TxnPrepareCommit},
	TxnCompleteAbort:     {TxnPrepareAbort},
	TxnDead:              {TxnEmpty, TxnCompleteCommit, TxnCompleteAbort},
	TxnPrepareEpochFence: {TxnOngoing},
}

// expirable reports whether a transactional id in state s may expire: no
// transaction is in progress.
func (s TxnState) expirable() bool {
	return s == TxnEmpty || s == TxnCompleteCommit || s == TxnCompleteAbort
}

// TopicPartition names a partition that takes part in a transaction.
type TopicPartition = strand.TopicPartition

func compareTopicPartitions(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// TxnRecord is the state of one transactional id after a transition: what
// the coordinator's owner persists, keyed by TransactionalID, before the
// transition takes effect. It carries the fields of Kafka's
// TransactionLogValue (v1, with the tagged previous and next producer ids)
// and also LastProducerEpoch, which Kafka keeps in memory only, so that a
// coordinator rebuilt from its records recognises an InitProducerId retry
// exactly as the live one does. A record in state TxnDead is a tombstone.
type TxnRecord struct {
	TransactionalID string
	State           TxnState
	ProducerID      int64
	// PreviousProducerID is the producer id of the state this record
	// replaced, or -1 for none (TransactionMetadata.prepareTransitionTo
	// sets prevProducerId so): after a rotation it is the old id, which a
	// retry from before the rotation carries, until the next transition.
	PreviousProducerID int64
	NextProducerID     int64 // the id to switch to when the transaction completes, or -1
	ProducerEpoch      int16
	LastProducerEpoch  int16
	TimeoutMs          int32
	// Partitions in the transaction, sorted; empty unless Ongoing or
	// Prepare*.
	Partitions   []TopicPartition
	StartMs      int64 // when the transaction began, or -1
	LastUpdateMs int64
}

func (r *TxnRecord) clone() TxnRecord {
	c := *r
	c.Partitions = slices.Clone(r.Partitions)
	return c
}

// ProducerIDAndEpoch is a producer's identity as an InitProducerId request
// carries it (KIP-360) and as answers give it.
type ProducerIDAndEpoch = strand.ProducerIDAndEpoch

// MarkerRequest asks the owner to write a transaction marker to a
// partition (Kafka's WriteTxnMarkers) and to report it with MarkerWritten.
type MarkerRequest struct {
	TransactionalID  string
	Partition        TopicPartition
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Type             MarkerType
}

// Step is a coordinator's answer to a request. If Record is not nil the
// answer holds only once the owner has persisted Record and passed it to
// Complete; if persisting fails the owner calls Abandon and answers with
// its failure instead.
type Step struct {
	Record *TxnRecord
	// ProducerID and ProducerEpoch answer InitProducerId and EndTxn.
	ProducerID    int64
	ProducerEpoch int16
	// Err is the Kafka error to answer with once Record is persisted:
	// CONCURRENT_TRANSACTIONS when InitProducerId had to abort an open
	// transaction first.
	Err error
}

// Followup is what the owner does after Complete.
type Followup struct {
	// Markers to write, after a transition to PrepareCommit or
	// PrepareAbort.
	Markers []MarkerRequest
	// Next, if not nil, is the record of the transition that follows at
	// once (CompleteAbort after an abort that had no partition to mark):
	// persist it and pass it to Complete in turn.
	Next *TxnRecord
}

// ErrNoPendingTransition means Complete or Abandon was called with a record
// the coordinator is not waiting for.
var ErrNoPendingTransition = errors.New("idempotence: no such pending transaction transition")

// Defaults of TxnCoordinatorConfig, Kafka's.
const (
	// DefaultMaxTransactionTimeout is transaction.max.timeout.ms.
	DefaultMaxTransactionTimeout = 15 * time.Minute
	// DefaultTransactionalIDExpiration is transactional.id.expiration.ms.
	DefaultTransactionalIDExpiration = 7 * 24 * time.Hour
)

// TxnCoordinatorConfig configures a TxnCoordinator.
type TxnCoordinatorConfig struct {
	// AllocateProducerID returns a producer id never handed out before
	// (Kafka's ProducerIdManager). Required.
	AllocateProducerID func() (int64, error)
	// CoordinatorEpoch is written into every marker; partitions refuse
	// markers from an older coordinator epoch.
	CoordinatorEpoch int32
	// MaxTransactionTimeout bounds the timeout a producer may ask for.
	// Zero means DefaultMaxTransactionTimeout.
	MaxTransactionTimeout time.Duration
	// TransactionalIDExpiration is how long a transactional id with no
	// transaction in progress lives after its last update. Zero means
	// DefaultTransactionalIDExpiration.
	TransactionalIDExpiration time.Duration
}

func (o TxnCoordinatorConfig) withDefaults() (TxnCoordinatorConfig, error) {
	if o.AllocateProducerID == nil {
		return o, errors.New("idempotence: TxnCoordinatorConfig.AllocateProducerID is required")
	}
	if o.MaxTransactionTimeout == 0 {
		o.MaxTransactionTimeout = DefaultMaxTransactionTimeout
	}
	if o.TransactionalIDExpiration == 0 {
		o.TransactionalIDExpiration = DefaultTransactionalIDExpiration
	}
	if o.MaxTransactionTimeout < time.Millisecond || o.TransactionalIDExpiration < time.Millisecond {
		return o, fmt.Errorf("idempotence: TxnCoordinatorConfig.MaxTransactionTimeout (%v) and TransactionalIDExpiration (%v) must be at least 1ms",
			o.MaxTransactionTimeout, o.TransactionalIDExpiration)
	}
	return o, nil
}

// TxnCoordinator is the transaction coordinator of Kafka's transactions
// version 2 (KIP-890) as a pure state machine: requests return the record
// of the transition they make, the owner persists it (in a compacted topic
// of its own, or any replicated store) and passes it to Complete, and only
// then does the transition take effect. Replaying the persisted records
// into a new TxnCoordinator with Replay rebuilds the same state. Time is
// passed in; it is not safe for concurrent use.
//
// Under version 2 every EndTxn bumps the producer epoch, so a producer id
// and epoch name one transaction, and a partition adds itself to the
// transaction when the producer first writes to it (AddPartitions, called
// by the partition leader).
type TxnCoordinator struct {
	opts TxnCoordinatorConfig
	txns map[string]*txnMeta
}

type txnMeta struct {
	cur TxnRecord
	// known is false for a transactional id created by a request whose
	// first record is not yet persisted.
	known   bool
	pending *TxnRecord
	// unmarked are the partitions whose marker is not yet written, while
	// Prepare*.
	unmarked []TopicPartition
}

// NewTxnCoordinator returns a coordinator with no transactional ids.
func NewTxnCoordinator(opts TxnCoordinatorConfig) (*TxnCoordinator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &TxnCoordinator{opts: opts, txns: map[string]*txnMeta{}}, nil
}

// epochExhausted reports whether a producer id has no epoch left to hand out:
// the coordinator keeps 32767 to fence with (TransactionMetadata.isEpochExhausted).
func epochExhausted(epoch int16) bool { return epoch >= math.MaxInt16-1 }

// Transaction returns the persisted state of transactional id.
func (c *TxnCoordinator) Transaction(id string) (TxnRecord, bool) {
	m, ok := c.txns[id]
	if !ok || !m.known {
		return TxnRecord{}, false
	}
	return m.cur.clone(), true
}

// Transactions returns the persisted state of every transactional id, by
// id.
func (c *TxnCoordinator) Transactions() []TxnRecord {
	var out []TxnRecord
	for _, m := range c.txns {
		if m.known {
			out = append(out, m.cur.clone())
		}
	}
	slices.SortFunc(out, func(a, b TxnRecord) int { return cmp.Compare(a.TransactionalID, b.TransactionalID) })
	return out
}

// prepare records next as m's pending transition, after checking that
// Kafka allows it from m's state. Callers check the state first, so the
// error means a bug here, not bad input.
func (m *txnMeta) prepare(next TxnRecord) (*TxnRecord, error) {
	if !slices.Contains(validPrevious[next.State], m.cur.State) {
		return nil, fmt.Errorf("%w: %q cannot move from %v to %v", ErrInvalidTxnState, m.cur.TransactionalID, m.cur.State, next.State)
	}
	next.PreviousProducerID = m.cur.ProducerID
	m.pending = &next
	return m.pending, nil
}

// busy reports whether m is between two persisted states: a transition
// is pending, or its transaction's markers are being written (Kafka sets
// the pending CompleteCommit or CompleteAbort as it sends the markers).
// Requests then get CONCURRENT_TRANSACTIONS and retry.
func (m *txnMeta) busy() bool {
	return m.pending != nil || m.cur.State == TxnPrepareCommit || m.cur.State == TxnPrepareAbort
}

// step prepares next and answers with its producer id and epoch.
func (m *txnMeta) step(next TxnRecord) (Step, error) {
	rec, err := m.prepare(next)
	if err != nil {
		return Step{}, err
	}
	return Step{Record: rec, ProducerID: rec.ProducerID, ProducerEpoch: rec.ProducerEpoch}, nil
}

// InitProducerID handles InitProducerId for transactional id txnID
// (TransactionCoordinator.handleInitProducerId). A new id gets a new
// producer id at epoch 0; a known one gets its epoch bumped, or a new
// producer id once the epoch is exhausted. If a transaction is open it is
// aborted first with a bumped epoch and the answer, once that is
// persisted, is CONCURRENT_TRANSACTIONS: the producer retries. expected is
// the producer's current id and epoch when it re-initialises (KIP-360), nil
// otherwise.
func (c *TxnCoordinator) InitProducerID(txnID string, timeoutMs int32, expected *ProducerIDAndEpoch, now time.Time) (Step, error) {
	nowMs := now.UnixMilli()
	switch {
	case txnID == "":
		return Step{}, fmt.Errorf("%w: InitProducerId with an empty transactional id", ErrInvalidRequest)
	case timeoutMs <= 0 || int64(timeoutMs) > c.opts.MaxTransactionTimeout.Milliseconds():
		return Step{}, fmt.Errorf("%w: %dms for %q, the maximum is %v", ErrInvalidTransactionTimeout, timeoutMs, txnID, c.opts.MaxTransactionTimeout)
	}
	m, ok := c.txns[txnID]
	if !ok {
		pid, err := c.opts.AllocateProducerID()
		if err != nil {
			return Step{}, fmt.Errorf("idempotence: allocating a producer id for %q: %w", txnID, err)
		}
		m = &txnMeta{cur: TxnRecord{
			TransactionalID: txnID, State: TxnEmpty, ProducerID: pid, PreviousProducerID: NoProducerID,
			NextProducerID: NoProducerID, ProducerEpoch: NoProducerEpoch, LastProducerEpoch: NoProducerEpoch,
			TimeoutMs: timeoutMs, StartMs: -1, LastUpdateMs: nowMs,
		}}
		c.txns[txnID] = m
	}
	cur := &m.cur
	if m.busy() {
		return Step{}, fmt.Errorf("%w: %q is completing a transition", ErrConcurrentTransactions, txnID)
	}
	if expected != nil && !(cur.ProducerEpoch == NoProducerEpoch || expected.ProducerID == cur.ProducerID ||
		(expected.ProducerID == cur.PreviousProducerID && epochExhausted(expected.Epoch))) {
		return Step{}, fmt.Errorf("%w: %q belongs to producer %d, not %d", ErrProducerFenced, txnID, cur.ProducerID, expected.ProducerID)
	}
	if cur.State == TxnOngoing {
		rec, err := c.fence(m, nowMs)
		if err != nil {
			return Step{}, err
		}
		return Step{Record: rec, Err: fmt.Errorf("%w: %q had a transaction open, now being aborted", ErrConcurrentTransactions, txnID)}, nil
	}
	next := cur.clone()
	next.TimeoutMs, next.Partitions, next.StartMs, next.LastUpdateMs = timeoutMs, nil, -1, nowMs
	next.State = TxnEmpty
	switch {
	case epochExhausted(cur.ProducerEpoch) && (expected == nil || expected.Epoch == cur.ProducerEpoch):
		pid, err := c.opts.AllocateProducerID()
		if err != nil {
			return Step{}, fmt.Errorf("idempotence: allocating a producer id for %q: %w", txnID, err)
		}
		next.ProducerID, next.ProducerEpoch = pid, 0
		next.LastProducerEpoch = NoProducerEpoch
		if expected != nil {
			next.LastProducerEpoch = cur.ProducerEpoch
		}
	case expected == nil:
		next.ProducerEpoch, next.LastProducerEpoch = cur.ProducerEpoch+1, NoProducerEpoch
	case cur.ProducerEpoch == NoProducerEpoch || expected.Epoch == cur.ProducerEpoch:
		next.ProducerEpoch, next.LastProducerEpoch = cur.ProducerEpoch+1, cur.ProducerEpoch
	case expected.Epoch == cur.LastProducerEpoch:
		// A retry of a call that succeeded: the same answer again.
	default:
		return Step{}, fmt.Errorf("%w: %q has epoch %d (last %d), the producer has %d",
			ErrProducerFenced, txnID, cur.ProducerEpoch, cur.LastProducerEpoch, expected.Epoch)
	}
	return m.step(next)
}

// fence aborts m's open transaction on the coordinator's own initiative
// (a timeout, or InitProducerId while it is open), with the epoch bumped
// so that its producer is fenced. Under version 2 that is the abort's own
// bump (prepareFenceProducerEpoch's is not applied since KAFKA-19367), so
// the fence is an EndTxn abort: it remembers the epoch it bumped from,
// which lets the fenced producer re-initialise with it (KIP-360) and its
// retries be recognised
// (shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyAndRetryInitProducerIdTV2),
// and it rotates the producer id when that epoch was the last
// (KAFKA-20090). A new producer's InitProducerId bumps again and forgets
// it.
//
// Kafka bumps its in-memory epoch before the record is written and so must
// not bump again after a failed write (KAFKA-9666); here nothing changes
// until the record is persisted, so a fence retried after Abandon bumps
// from the same epoch to the same one.
func (c *TxnCoordinator) fence(m *txnMeta, nowMs int64) (*TxnRecord, error) {
	s, err := c.prepareEnd(m, TxnPrepareAbort, false, nowMs)
	return s.Record, err
}

// AddPartitions adds partitions to the producer's transaction, beginning it
// if none is open (AddPartitionsToTxn; under version 2 the partition leader
// calls it when a transactional batch first reaches the partition). Nothing
// is persisted if the partitions are already in the open transaction.
func (c *TxnCoordinator) AddPartitions(txnID string, producerID int64, epoch int16, partitions []TopicPartition, now time.Time) (Step, error) {
	nowMs := now.UnixMilli()
	m, err := c.lookup(txnID)
	if err != nil {
		return Step{}, err
	}
	cur := &m.cur
	switch {
	case m.busy():
		// Before the producer id check (KAFKA-18660): when the epochs ran
		// out, the producer's next transaction already runs on the next
		// producer id while the last one completes on the old.
		return Step{}, fmt.Errorf("%w: %q is completing a transition", ErrConcurrentTransactions, txnID)
	case producerID != cur.ProducerID:
		return Step{}, fmt.Errorf("%w: %q belongs to producer %d, not %d", ErrInvalidProducerIDMapping, txnID, cur.ProducerID, producerID)
	case epoch != cur.ProducerEpoch:
		return Step{}, fmt.Errorf("%w: %q is at epoch %d, the producer sent %d", ErrProducerFenced, txnID, cur.ProducerEpoch, epoch)
	}
	next := cur.clone()
	for _, tp := range partitions {
		if i, found := slices.BinarySearchFunc(next.Partitions, tp, compareTopicPartitions); !found {
			next.Partitions = slices.Insert(next.Partitions, i, tp)
		}
	}
	if cur.State == TxnOngoing && len(next.Partitions) == len(cur.Partitions) {
		return Step{ProducerID: cur.ProducerID, ProducerEpoch: cur.ProducerEpoch}, nil
	}
	if cur.State != TxnOngoing {
		next.StartMs = nowMs
	}
	next.State, next.LastUpdateMs = TxnOngoing, nowMs
	return m.step(next)
}

// lookup returns the transactional id txnID, which must be known.
func (c *TxnCoordinator) lookup(txnID string) (*txnMeta, error) {
	if txnID == "" {
		return nil, fmt.Errorf("%w: empty transactional id", ErrInvalidRequest)
	}
	m, ok := c.txns[txnID]
	if !ok || !m.known {
		return nil, fmt.Errorf("%w: no transactional id %q", ErrInvalidProducerIDMapping, txnID)
	}
	return m, nil
}

// EndTxn commits or aborts the producer's transaction
// (TransactionCoordinator.endTransaction, version 2). The answer carries the
// producer's id and epoch for its next transaction: every EndTxn bumps the
// epoch, and a retry is recognised by the epoch one below the
// coordinator's. An abort with no transaction open is allowed and bumps
// the epoch too. A commit one epoch below a CompleteAbort is a commit the
// coordinator's own abort overtook, and is fenced (KAFKA-20785).
func (c *TxnCoordinator) EndTxn(txnID string, producerID int64, epoch int16, commit bool, now time.Time) (Step, error) {
	nowMs := now.UnixMilli()
	m, err := c.lookup(txnID)
	if err != nil {
		return Step{}, err
	}
	cur := &m.cur
	retryOnOverflow := cur.PreviousProducerID == producerID && epoch == math.MaxInt16-1 && cur.ProducerEpoch == 0
	retryOnBump := int32(cur.ProducerEpoch) == int32(epoch)+1
	retry := retryOnBump || retryOnOverflow
	// With the epoch bumped by every EndTxn, the same epoch means the next
	// transaction's EndTxn, and one below it a retry of the last one.
	validEpoch := epoch == cur.ProducerEpoch
	if cur.State == TxnCompleteCommit || cur.State == TxnCompleteAbort {
		validEpoch = validEpoch || retry
	}
	result := "abort"
	if commit {
		result = "commit"
	}
	switch {
	case cur.ProducerID != producerID && !retryOnOverflow:
		return Step{}, fmt.Errorf("%w: %q belongs to producer %d, not %d", ErrInvalidProducerIDMapping, txnID, cur.ProducerID, producerID)
	case m.busy():
		// Before the epoch check (KAFKA-18464): a producer whose commit
		// is completing must not be told it is fenced. This also answers
		// any EndTxn while Prepare*, whichever its direction.
		return Step{}, fmt.Errorf("%w: %q is completing a transition", ErrConcurrentTransactions, txnID)
	case !validEpoch:
		return Step{}, fmt.Errorf("%w: %q is at epoch %d, the producer sent %d", ErrProducerFenced, txnID, cur.ProducerEpoch, epoch)
	}
	invalid := fmt.Errorf("%w: %s of %q in state %v", ErrInvalidTxnState, result, txnID, cur.State)
	done := Step{ProducerID: cur.ProducerID, ProducerEpoch: cur.ProducerEpoch}
	switch cur.State {
	case TxnOngoing:
		if commit {
			return c.prepareEnd(m, TxnPrepareCommit, false, nowMs)
		}
		return c.prepareEnd(m, TxnPrepareAbort, false, nowMs)
	case TxnCompleteCommit:
		switch {
		case commit && retry:
			return done, nil
		case !commit && !retry:
			return c.prepareEnd(m, TxnPrepareAbort, true, nowMs)
		}
		return Step{}, invalid
	case TxnCompleteAbort:
		switch {
		case !commit && retry:
			return done, nil
		case !commit:
			return c.prepareEnd(m, TxnPrepareAbort, true, nowMs)
		case retry:
			// Only the coordinator's own abort leaves a producer's
			// commit one epoch behind: it was fenced, which a producer
			// recovers from, unlike INVALID_TXN_STATE (KAFKA-20785).
			return Step{}, fmt.Errorf("%w: %q was aborted by the coordinator at epoch %d, the producer committed at %d",
				ErrProducerFenced, txnID, cur.ProducerEpoch, epoch)
		}
		return Step{}, invalid
	case TxnEmpty:
		if !commit {
			return c.prepareEnd(m, TxnPrepareAbort, true, nowMs)
		}
	}
	return Step{}, invalid
}

// prepareEnd moves m to PrepareCommit or PrepareAbort with the epoch bumped
// (prepareAbortOrCommit). empty marks an abort with no transaction open:
// no partitions, and it starts now.
func (c *TxnCoordinator) prepareEnd(m *txnMeta, state TxnState, empty bool, nowMs int64) (Step, error) {
	cur := &m.cur
	next := cur.clone()
	next.State = state
	next.LastProducerEpoch = cur.ProducerEpoch
	// An epoch already at Short.MaxValue, which only a bug leaves, is not
	// bumped past it: an abort goes through and the rotation below
	// recovers, a commit cannot (KAFKA-20090, prepareAbortOrCommit).
	switch {
	case cur.ProducerEpoch < math.MaxInt16:
		next.ProducerEpoch = cur.ProducerEpoch + 1
	case state == TxnPrepareCommit:
		return Step{}, fmt.Errorf("%w: %q is at epoch %d, which cannot be bumped: its transaction can only be aborted",
			ErrInvalidTxnState, cur.TransactionalID, cur.ProducerEpoch)
	}
	next.LastUpdateMs = nowMs
	if empty {
		next.Partitions, next.StartMs = nil, nowMs
	}
	if epochExhausted(cur.ProducerEpoch) {
		pid, err := c.opts.AllocateProducerID()
		if err != nil {
			return Step{}, fmt.Errorf("idempotence: allocating a producer id for %q: %w", cur.TransactionalID, err)
		}
		next.NextProducerID = pid
	}
	s, err := m.step(next)
	if err != nil {
		return Step{}, err
	}
	if rec := s.Record; rec.NextProducerID != NoProducerID {
		// The producer moves to the new id with epoch 0 when the
		// transaction completes.
		s.ProducerID, s.ProducerEpoch = rec.NextProducerID, 0
	}
	return s, nil
}

// Complete makes the pending transition whose record the owner has
// persisted take effect, and says what follows: markers to write after a
// Prepare*, or at once the Complete* record when there is nothing to mark.
func (c *TxnCoordinator) Complete(rec TxnRecord) (Followup, error) {
	m, ok := c.txns[rec.TransactionalID]
	if !ok || m.pending == nil || !sameRecord(m.pending, &rec) {
		return Followup{}, fmt.Errorf("%w: %q to %v", ErrNoPendingTransition, rec.TransactionalID, rec.State)
	}
	m.pending = nil
	c.apply(rec)
	return c.followup(rec.TransactionalID, rec.LastUpdateMs)
}

func sameRecord(a, b *TxnRecord) bool {
	x, y := *a, *b
	x.Partitions, y.Partitions = nil, nil
	return reflect.DeepEqual(x, y) && slices.Equal(a.Partitions, b.Partitions)
}

// followup returns what the owner must do for a transactional id now in
// a Prepare* state.
func (c *TxnCoordinator) followup(txnID string, nowMs int64) (Followup, error) {
	m, ok := c.txns[txnID]
	if !ok || (m.cur.State != TxnPrepareCommit && m.cur.State != TxnPrepareAbort) {
		return Followup{}, nil
	}
	if len(m.unmarked) == 0 {
		next, err := c.prepareComplete(m, nowMs)
		return Followup{Next: next}, err
	}
	return Followup{Markers: c.markers(m)}, nil
}

func (c *TxnCoordinator) markers(m *txnMeta) []MarkerRequest {
	typ := MarkerAbort
	if m.cur.State == TxnPrepareCommit {
		typ = MarkerCommit
	}
	out := make([]MarkerRequest, len(m.unmarked))
	for i, tp := range m.unmarked {
		out[i] = MarkerRequest{TransactionalID: m.cur.TransactionalID, Partition: tp, ProducerID: m.cur.ProducerID,
			ProducerEpoch: m.cur.ProducerEpoch, CoordinatorEpoch: c.opts.CoordinatorEpoch, Type: typ}
	}
	return out
}

// prepareComplete records the move from Prepare* to Complete*
// (prepareComplete): the partitions are forgotten, and a producer id whose
// epochs ran out is replaced by the next one at epoch 0.
func (c *TxnCoordinator) prepareComplete(m *txnMeta, nowMs int64) (*TxnRecord, error) {
	cur := &m.cur
	next := cur.clone()
	next.State = TxnCompleteAbort
	if cur.State == TxnPrepareCommit {
		next.State = TxnCompleteCommit
	}
	// LastProducerEpoch stays the epoch before the bump, the last one
	// the producer used.
	if cur.NextProducerID != NoProducerID {
		next.ProducerID, next.ProducerEpoch = cur.NextProducerID, 0
	}
	next.NextProducerID, next.Partitions, next.LastUpdateMs = NoProducerID, nil, nowMs
	return m.prepare(next)
}

// Abandon drops the pending transition of txnID because the owner could not
// persist its record: the state stays as it was. A transactional id whose
// first record failed is forgotten.
func (c *TxnCoordinator) Abandon(txnID string) error {
	m, ok := c.txns[txnID]
	if !ok || m.pending == nil {
		return fmt.Errorf("%w: %q", ErrNoPendingTransition, txnID)
	}
	m.pending = nil
	if !m.known {
		delete(c.txns, txnID)
	}
	return nil
}

// MarkerWritten reports that the marker of txnID's completing transaction
// is written to partition tp. When it is the last, it returns the record of
// the move to CompleteCommit or CompleteAbort, to persist and Complete.
func (c *TxnCoordinator) MarkerWritten(txnID string, tp TopicPartition, now time.Time) (*TxnRecord, error) {
	nowMs := now.UnixMilli()
	m, ok := c.txns[txnID]
	if !ok || (m.cur.State != TxnPrepareCommit && m.cur.State != TxnPrepareAbort) {
		return nil, fmt.Errorf("%w: %q has no transaction completing", ErrInvalidTxnState, txnID)
	}
	i, found := slices.BinarySearchFunc(m.unmarked, tp, compareTopicPartitions)
	if !found {
		return nil, nil // a repeated acknowledgement
	}
	m.unmarked = slices.Delete(m.unmarked, i, i+1)
	if len(m.unmarked) > 0 || m.pending != nil {
		return nil, nil
	}
	return c.prepareComplete(m, nowMs)
}

// Markers returns the markers still to write for every completing
// transaction: after a restart the owner sends them all again, as Kafka's
// coordinator does when it loads its partition.
func (c *TxnCoordinator) Markers() []MarkerRequest {
	var out []MarkerRequest
	for _, id := range c.sortedIDs() {
		m := c.txns[id]
		if m.known && m.pending == nil && (m.cur.State == TxnPrepareCommit || m.cur.State == TxnPrepareAbort) {
			out = append(out, c.markers(m)...)
		}
	}
	return out
}

func (c *TxnCoordinator) sortedIDs() []string {
	ids := make([]string, 0, len(c.txns))
	for id := range c.txns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Tick returns the records of the transitions the clock makes due at now,
// in transactional id order: the abort of every transaction open longer
// than its timeout (with the epoch bumped, so that its producer is fenced),
// the expiry (TxnDead) of every transactional id idle for
// TransactionalIDExpiration, and the completion of every transaction whose
// markers are all written but whose completing record is not persisted:
// its write failed, or it was an abort with nothing to mark persisted just
// before a restart (Kafka completes every Prepare state it loads,
// TransactionStateManager.loadTransactionsForTxnTopicPartition). Each is
// pending like a request's: persist it and Complete it, or Abandon it.
func (c *TxnCoordinator) Tick(now time.Time) ([]*TxnRecord, error) {
	nowMs := now.UnixMilli()
	var out []*TxnRecord
	for _, id := range c.sortedIDs() {
		m := c.txns[id]
		if !m.known || m.pending != nil {
			continue
		}
		rec, err := c.due(m, nowMs)
		if err != nil {
			return out, err
		}
		if rec != nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// due prepares the transition the clock makes due for m at nowMs, if any.
func (c *TxnCoordinator) due(m *txnMeta, nowMs int64) (*TxnRecord, error) {
	cur := &m.cur
	switch {
	case cur.State == TxnOngoing && cur.StartMs+int64(cur.TimeoutMs) < nowMs:
		return c.fence(m, nowMs)
	case (cur.State == TxnPrepareCommit || cur.State == TxnPrepareAbort) && len(m.unmarked) == 0:
		return c.prepareComplete(m, nowMs)
	case cur.State.expirable() && cur.LastUpdateMs <= nowMs-c.opts.TransactionalIDExpiration.Milliseconds():
		next := cur.clone()
		next.State, next.Partitions = TxnDead, nil
		return m.prepare(next)
	}
	return nil, nil
}

// Replay applies a persisted record to a coordinator being rebuilt from its
// records, in the order they were persisted. It applies them as Complete
// does, without checking them: they were checked when they were made.
func (c *TxnCoordinator) Replay(rec TxnRecord) { c.apply(rec) }

// apply makes rec the state of its transactional id.
func (c *TxnCoordinator) apply(rec TxnRecord) {
	if rec.State == TxnDead {
		delete(c.txns, rec.TransactionalID)
		return
	}
	m, ok := c.txns[rec.TransactionalID]
	if !ok {
		m = &txnMeta{}
		c.txns[rec.TransactionalID] = m
	}
	m.cur, m.known = rec.clone(), true
	m.unmarked = nil
	if rec.State == TxnPrepareCommit || rec.State == TxnPrepareAbort {
		m.unmarked = slices.Clone(rec.Partitions)
	}
}
