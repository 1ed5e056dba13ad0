package idempotence

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The test vectors of Kafka's own transaction-coordinator tests
// (TransactionCoordinatorTest, TransactionMetadataTest and the timeout and
// expiration cases of TransactionStateManagerTest), each named after the
// Kafka test it comes from or, for a case those tests leave out, after the
// Kafka rule it checks. Kafka's tests build a TransactionMetadata and
// call one handler; here the state before is a persisted record replayed
// into a TxnCoordinator, the request is the TxnCoordinator's, and the state
// after is the record the request asks the owner to persist.
//
// Strand implements transactions version 2 only, so of the tests
// parameterized over TV_0 and TV_2 only the TV_2 case is ported, and a
// TV_0-only test is ported only where its rule does not depend on the
// version. Kafka's PrepareCommit and PrepareAbort come here with the
// pending CompleteCommit or CompleteAbort Kafka sets as soon as the
// Prepare record is written (the markers are being written): a Strand
// transactional id in a Prepare state is always completing.

// The values of TransactionCoordinatorTest.
const (
	kTxnID   = "known"
	kPid     = int64(10) // producerId
	kPid2    = int64(11) // producerId2: the next id the coordinator allocates
	kEpoch   = int16(1)  // producerEpoch
	kTimeout = int32(1)  // txnTimeoutMs
	kNow     = int64(1_000_000)
	// kMaxEpoch is Short.MaxValue; kMaxEpoch-1 is the last epoch a
	// producer may hold (TransactionMetadata.isEpochExhausted).
	kMaxEpoch = int16(math.MaxInt16)
)

var kTopic1 = TopicPartition{Topic: "topic1", Partition: 0}

// meta is a transactional id's state as Kafka's tests construct a
// TransactionMetadata: id "known", timeout 1ms, last updated now, no
// previous or next producer id, a transaction (if any) started now, and,
// while it is open or completing, partition topic1-0.
func meta(state TxnState, pid int64, epoch, lastEpoch int16, opts ...func(*TxnRecord)) TxnRecord {
	r := TxnRecord{TransactionalID: kTxnID, State: state, ProducerID: pid, PreviousProducerID: NoProducerID,
		NextProducerID: NoProducerID, ProducerEpoch: epoch, LastProducerEpoch: lastEpoch, TimeoutMs: kTimeout,
		StartMs: -1, LastUpdateMs: kNow}
	switch state {
	case TxnOngoing, TxnPrepareCommit, TxnPrepareAbort:
		r.Partitions, r.StartMs = []TopicPartition{kTopic1}, kNow
	case TxnCompleteCommit, TxnCompleteAbort:
		r.StartMs = kNow // a completed transaction keeps its start
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func prev(pid int64) func(*TxnRecord)   { return func(r *TxnRecord) { r.PreviousProducerID = pid } }
func next(pid int64) func(*TxnRecord)   { return func(r *TxnRecord) { r.NextProducerID = pid } }
func started(ms int64) func(*TxnRecord) { return func(r *TxnRecord) { r.StartMs = ms } }
func updated(ms int64) func(*TxnRecord) { return func(r *TxnRecord) { r.LastUpdateMs = ms } }
func timeout(ms int32) func(*TxnRecord) { return func(r *TxnRecord) { r.TimeoutMs = ms } }
func parts(tps ...TopicPartition) func(*TxnRecord) {
	return func(r *TxnRecord) { r.Partitions = tps }
}

func ptr[T any](v T) *T { return &v }

// op is a request to the coordinator at time now.
type op func(c *TxnCoordinator, now int64) (Step, error)

// initPID is InitProducerId for "known" with a 1ms timeout, and the
// producer's current id and epoch if given (KIP-360).
func initPID(expected ...ProducerIDAndEpoch) op {
	return initPIDTimeout(kTimeout, expected...)
}

func initPIDTimeout(ms int32, expected ...ProducerIDAndEpoch) op {
	return func(c *TxnCoordinator, now int64) (Step, error) {
		var e *ProducerIDAndEpoch
		if len(expected) > 0 {
			e = &expected[0]
		}
		return c.InitProducerID(kTxnID, ms, e, millis(now))
	}
}

func addPartitions(pid int64, epoch int16, tps ...TopicPartition) op {
	if len(tps) == 0 {
		tps = []TopicPartition{kTopic1}
	}
	return func(c *TxnCoordinator, now int64) (Step, error) {
		return c.AddPartitions(kTxnID, pid, epoch, tps, millis(now))
	}
}

func commitTxn(pid int64, epoch int16) op {
	return func(c *TxnCoordinator, now int64) (Step, error) {
		return c.EndTxn(kTxnID, pid, epoch, true, millis(now))
	}
}

func abortTxn(pid int64, epoch int16) op {
	return func(c *TxnCoordinator, now int64) (Step, error) {
		return c.EndTxn(kTxnID, pid, epoch, false, millis(now))
	}
}

// tick runs the clock; it expects at most one transition.
func tick(c *TxnCoordinator, now int64) (Step, error) {
	recs, err := c.Tick(millis(now))
	if err != nil || len(recs) == 0 {
		return Step{}, err
	}
	if len(recs) > 1 {
		return Step{}, ErrInvalidRequest
	}
	return Step{Record: recs[0]}, nil
}

// vector is one case of a Kafka test.
type vector struct {
	kafka string // the Kafka test it comes from, and the case
	// before is the persisted state, replayed; empty for an unknown
	// transactional id.
	before []TxnRecord
	// pending, if set, is a request made first and left pending: its
	// record is not yet persisted (Kafka's pendingState).
	pending op
	at      int64 // when the request is made; 0 means kNow
	req     op
	// err is Kafka's error, nil for NONE. A request that persists a
	// record before answering (InitProducerId aborting an open
	// transaction) answers with Step.Err.
	err error
	// record is the transition the request makes, the record to persist;
	// nil if it persists nothing.
	record *TxnRecord
	// answer is the producer id and epoch the answer carries, if checked.
	answer *ProducerIDAndEpoch
}

// kafkaCoordinator returns a coordinator whose producer ids are allocated
// from kPid2 up, as the tests' mocked ProducerIdManager does.
func kafkaCoordinator(t *testing.T) *TxnCoordinator {
	pid := kPid2 - 1
	c, err := NewTxnCoordinator(TxnCoordinatorConfig{AllocateProducerID: func() (int64, error) { pid++; return pid, nil }})
	require.NoError(t, err)
	return c
}

func (v vector) run(t *testing.T) {
	t.Helper()
	c := kafkaCoordinator(t)
	for _, r := range v.before {
		c.Replay(r)
	}
	now := v.at
	if now == 0 {
		now = kNow
	}
	if v.pending != nil {
		s, err := v.pending(c, now)
		require.NoError(t, err)
		require.NotNil(t, s.Record, "the pending request made no transition")
	}
	s, err := v.req(c, now)
	if err == nil {
		err = s.Err
	}
	if v.err == nil {
		require.NoError(t, err)
	} else {
		require.ErrorIs(t, err, v.err)
	}
	require.Equal(t, v.record, s.Record, "the transition persisted")
	if v.answer != nil {
		require.Equal(t, *v.answer, ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, "the answer")
	}
}

func runVectors(t *testing.T, vs []vector) {
	for _, v := range vs {
		t.Run(v.kafka, v.run)
	}
}

// TestKafkaInitProducerID: TransactionCoordinator.handleInitProducerId and
// TransactionMetadata.prepareIncrementProducerEpoch,
// prepareProducerIdRotation and prepareFenceProducerEpoch.
func TestKafkaInitProducerID(t *testing.T) {
	runVectors(t, []vector{
		{
			kafka: "shouldReturnInvalidRequestWhenTransactionalIdIsEmpty",
			req: func(c *TxnCoordinator, now int64) (Step, error) {
				return c.InitProducerID("", kTimeout, nil, millis(now))
			},
			err: ErrInvalidRequest,
		},
		{
			kafka:  "shouldInitPidWithEpochZeroForNewTransactionalId",
			req:    initPID(),
			record: ptr(meta(TxnEmpty, kPid2, 0, NoProducerEpoch, prev(kPid2))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			// The producer recovers from UNKNOWN_PRODUCER_ID with an id
			// the coordinator no longer knows: it gets a new one.
			kafka:  "shouldGenerateNewProducerIdIfNoStateAndProducerIdAndEpochProvided",
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch}),
			record: ptr(meta(TxnEmpty, kPid2, 0, NoProducerEpoch, prev(kPid2))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			kafka:  "TransactionMetadataTest.testAttemptedEpochBumpWithNewlyCreatedMetadata",
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 735}),
			record: ptr(meta(TxnEmpty, kPid2, 0, NoProducerEpoch, prev(kPid2))),
		},
		{
			kafka:  "shouldGenerateNewProducerIdIfEpochsExhausted",
			before: []TxnRecord{meta(TxnEmpty, kPid, kMaxEpoch-1, kMaxEpoch-2, prev(kPid))},
			req:    initPID(),
			record: ptr(meta(TxnEmpty, kPid2, 0, NoProducerEpoch, prev(kPid))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			// The producer's own epoch ran out: the rotation remembers
			// the epoch it had, so that its retry is recognised.
			kafka:  "TransactionMetadataTest.testRotateProducerId",
			before: []TxnRecord{meta(TxnEmpty, kPid, kMaxEpoch-1, NoProducerEpoch)},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}),
			record: ptr(meta(TxnEmpty, kPid2, 0, kMaxEpoch-1, prev(kPid))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateUpdateTimeResetDuringProducerIdRotation (at an exhausted epoch: Strand rotates only then)",
			before: []TxnRecord{meta(TxnEmpty, kPid, kMaxEpoch-1, NoProducerEpoch, started(1))},
			at:     kNow - 1,
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}),
			record: ptr(meta(TxnEmpty, kPid2, 0, kMaxEpoch-1, prev(kPid), updated(kNow-1))),
		},
		{
			kafka:  "shouldIncrementEpochAndUpdateMetadataOnHandleInitPidWhenExistingEmptyTransaction",
			before: []TxnRecord{meta(TxnEmpty, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			at:     kNow + 5,
			req:    initPIDTimeout(10),
			record: ptr(meta(TxnEmpty, kPid, kEpoch+1, NoProducerEpoch, prev(kPid), timeout(10), updated(kNow+5))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 1},
		},
		{
			kafka:  "shouldIncrementEpochAndUpdateMetadataOnHandleInitPidWhenExistingCompleteTransaction (TV_2)",
			before: []TxnRecord{meta(TxnCompleteAbort, kPid, kEpoch, NoProducerEpoch, prev(kPid), started(kNow))},
			req:    initPIDTimeout(10),
			record: ptr(meta(TxnEmpty, kPid, kEpoch+1, NoProducerEpoch, prev(kPid), timeout(10))),
		},
		{
			kafka:  "shouldIncrementEpochAndUpdateMetadataOnHandleInitPidWhenExistingCompleteCommitTransaction (TV_2)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, kEpoch, NoProducerEpoch, prev(kPid), started(kNow))},
			req:    initPIDTimeout(10),
			record: ptr(meta(TxnEmpty, kPid, kEpoch+1, NoProducerEpoch, prev(kPid), timeout(10))),
		},
		{
			kafka:  "TransactionMetadataTest.testNormalEpochBump",
			before: []TxnRecord{meta(TxnEmpty, kPid, 735, NoProducerEpoch)},
			req:    initPID(),
			record: ptr(meta(TxnEmpty, kPid, 736, NoProducerEpoch, prev(kPid))),
		},
		{
			kafka:  "TransactionMetadataTest.testEpochBumpWithCurrentEpochProvided",
			before: []TxnRecord{meta(TxnEmpty, kPid, 735, NoProducerEpoch)},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 735}),
			record: ptr(meta(TxnEmpty, kPid, 736, 735, prev(kPid))),
		},
		{
			// A retry of a call that succeeded gets the same epoch again.
			kafka:  "TransactionMetadataTest.testAttemptedEpochBumpWithLastEpoch",
			before: []TxnRecord{meta(TxnEmpty, kPid, 735, 734)},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 734}),
			record: ptr(meta(TxnEmpty, kPid, 735, 734, prev(kPid))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: 735},
		},
		{
			kafka:  "TransactionMetadataTest.testAttemptedEpochBumpWithFencedEpoch",
			before: []TxnRecord{meta(TxnEmpty, kPid, 735, 734, prev(kPid))},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 733}),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateUpdateTimeShiftDuringEpochBump",
			before: []TxnRecord{meta(TxnEmpty, kPid, 1, NoProducerEpoch, started(1))},
			at:     kNow - 1,
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 1}),
			record: ptr(meta(TxnEmpty, kPid, 2, 1, prev(kPid), updated(kNow-1))),
		},
		{
			// Metadata written without the last epoch (by an old broker):
			// an older epoch cannot be told from a fenced one.
			kafka:  "testInitProducerIdWithNoLastProducerData",
			before: []TxnRecord{meta(TxnEmpty, kPid, kEpoch+1, NoProducerEpoch)},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch}),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "testFenceProducerWhenMappingExistsWithDifferentProducerId",
			before: []TxnRecord{meta(TxnEmpty, kPid+1, kEpoch, kEpoch-1, prev(kPid))},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch}),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "testInitProducerIdWithInvalidEpochAfterProducerIdRotation",
			before: []TxnRecord{meta(TxnEmpty, kPid2, 0, kMaxEpoch-1, prev(kPid))},
			req:    initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 2}),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "shouldWaitForCommitToCompleteOnHandleInitPidAndExistingTransactionInPrepareCommitState",
			before: []TxnRecord{meta(TxnPrepareCommit, 0, 0, NoProducerEpoch, timeout(0), parts(TopicPartition{Topic: "topic", Partition: 1}))},
			req:    initPIDTimeout(10),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldWaitForCommitToCompleteOnHandleInitPidAndExistingTransactionInPrepareAbortState",
			before: []TxnRecord{meta(TxnPrepareAbort, 0, 0, NoProducerEpoch, timeout(0), parts(TopicPartition{Topic: "topic", Partition: 1}))},
			req:    initPIDTimeout(10),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:   "shouldNotBumpEpochWithPendingTransaction",
			before:  []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			pending: commitTxn(kPid, kEpoch),
			req:     initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 10}),
			err:     ErrConcurrentTransactions,
		},
		{
			// Version 2: the abort is the one epoch bump; it remembers
			// the epoch it bumped from (prepareAbortOrCommit), as any
			// version 2 EndTxn does.
			kafka:  "shouldAbortTransactionOnHandleInitPidWhenExistingTransactionInOngoingState (TV_2, KAFKA-19367: one bump)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, kEpoch-1, prev(kPid))},
			req:    initPID(),
			err:    ErrConcurrentTransactions,
			record: ptr(meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch, prev(kPid))),
		},
		{
			// KAFKA-19367: the fence must not bump twice, which would
			// overflow; KAFKA-20090: at the last epoch it rotates the
			// producer id for the next transaction.
			kafka:  "shouldNotCauseEpochOverflowWhenInitPidDuringOngoingTxnV2",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, kMaxEpoch-2, prev(kPid))},
			req:    initPID(),
			err:    ErrConcurrentTransactions,
			record: ptr(meta(TxnPrepareAbort, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid), next(kPid2))),
		},
	})
}

// TestKafkaAddPartitions: TransactionCoordinator.handleAddPartitionsToTransaction
// and TransactionMetadata.prepareAddPartitions.
func TestKafkaAddPartitions(t *testing.T) {
	runVectors(t, []vector{
		{
			kafka: "shouldRespondWithInvalidPidMappingOnAddPartitionsToTransactionWhenTransactionalIdNotPresent",
			req:   addPartitions(0, 1),
			err:   ErrInvalidProducerIDMapping,
		},
		{
			kafka: "shouldRespondWithInvalidRequestAddPartitionsToTransactionWhenTransactionalIdIsEmpty",
			req: func(c *TxnCoordinator, now int64) (Step, error) {
				return c.AddPartitions("", 0, 1, []TopicPartition{kTopic1}, millis(now))
			},
			err: ErrInvalidRequest,
		},
		{
			kafka:  "shouldRespondWithConcurrentTransactionsOnAddPartitionsWhenStateIsPrepareCommit",
			before: []TxnRecord{meta(TxnPrepareCommit, 0, 0, NoProducerEpoch, timeout(0))},
			req:    addPartitions(0, 0),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldRespondWithConcurrentTransactionOnAddPartitionsWhenStateIsPrepareAbort",
			before: []TxnRecord{meta(TxnPrepareAbort, 0, 0, NoProducerEpoch, timeout(0))},
			req:    addPartitions(0, 0),
			err:    ErrConcurrentTransactions,
		},
		{
			// Kafka's test has PrepareCommit without the pending
			// CompleteCommit, a state Kafka holds only between writing
			// the Prepare record and sending the markers; with it (as a
			// Strand Prepare state always is) the pending check comes
			// first (KAFKA-18660) and the answer is to retry.
			kafka:  "shouldRespondWithProducerFencedOnAddPartitionsWhenEpochsAreDifferent (with the pending CompleteCommit)",
			before: []TxnRecord{meta(TxnPrepareCommit, 0, 10, 9, timeout(0))},
			req:    addPartitions(0, 0),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "a stale epoch with no transaction completing (handleAddPartitionsToTransaction)",
			before: []TxnRecord{meta(TxnCompleteCommit, 0, 10, 9, timeout(0))},
			req:    addPartitions(0, 0),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "another producer id with no transaction completing (handleAddPartitionsToTransaction)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, kEpoch, kEpoch-1)},
			req:    addPartitions(kPid2, kEpoch),
			err:    ErrInvalidProducerIDMapping,
		},
		{
			kafka:  "shouldAppendNewMetadataToLogOnAddPartitionsWhenPartitionsAdded",
			before: []TxnRecord{meta(TxnEmpty, kPid, kEpoch, kEpoch-1, updated(kNow-10))},
			req:    addPartitions(kPid, kEpoch),
			record: ptr(meta(TxnOngoing, kPid, kEpoch, kEpoch-1, prev(kPid))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch},
		},
		{
			kafka:  "shouldRespondWithSuccessOnAddPartitionsWhenStateIsOngoing",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, kEpoch-1, parts(), started(kNow-10))},
			req:    addPartitions(kPid, kEpoch),
			record: ptr(meta(TxnOngoing, kPid, kEpoch, kEpoch-1, prev(kPid), started(kNow-10))),
		},
		{
			kafka:  "shouldRespondWithSuccessOnAddPartitionsWhenStateIsCompleteCommit (TV_2)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, kEpoch, kEpoch-1, started(kNow-10))},
			req:    addPartitions(kPid, kEpoch),
			record: ptr(meta(TxnOngoing, kPid, kEpoch, kEpoch-1, prev(kPid))),
		},
		{
			kafka:  "shouldRespondWithSuccessOnAddPartitionsWhenStateIsCompleteAbort (TV_2)",
			before: []TxnRecord{meta(TxnCompleteAbort, kPid, kEpoch, kEpoch-1, started(kNow-10))},
			req:    addPartitions(kPid, kEpoch),
			record: ptr(meta(TxnOngoing, kPid, kEpoch, kEpoch-1, prev(kPid))),
		},
		{
			// Kafka's test puts the partitions in an Empty metadata,
			// which Strand never holds: the rule is Ongoing's.
			kafka:  "shouldRespondWithErrorsNoneOnAddPartitionWhenNoErrorsAndPartitionsTheSame",
			before: []TxnRecord{meta(TxnOngoing, 0, 0, NoProducerEpoch, timeout(0))},
			req:    addPartitions(0, 0),
			answer: &ProducerIDAndEpoch{ProducerID: 0, Epoch: 0},
		},
	})
}

// TestKafkaEndTxn: TransactionCoordinator.endTransaction under version 2,
// where every EndTxn bumps the epoch and a retry carries the epoch one
// below the coordinator's (or, after a rotation, the old producer id at
// the last epoch).
func TestKafkaEndTxn(t *testing.T) {
	completeCommit := meta(TxnCompleteCommit, kPid, kEpoch, kEpoch-1, prev(kPid), started(kNow-10))
	completeAbort := meta(TxnCompleteAbort, kPid, kEpoch, kEpoch-1, prev(kPid), started(kNow-10))
	empty := meta(TxnEmpty, kPid, kEpoch, NoProducerEpoch, prev(kPid))
	runVectors(t, []vector{
		{
			kafka: "shouldReplyWithInvalidPidMappingOnEndTxnWhenTxnIdDoesntExist",
			req:   commitTxn(0, 0),
			err:   ErrInvalidProducerIDMapping,
		},
		{
			kafka: "shouldRespondWithInvalidRequestOnEndTxnWhenTransactionalIdIsEmpty",
			req: func(c *TxnCoordinator, now int64) (Step, error) {
				return c.EndTxn("", 0, 0, true, millis(now))
			},
			err: ErrInvalidRequest,
		},
		{
			kafka:  "shouldReplyWithInvalidPidMappingOnEndTxnWhenPidDoesntMatchMapped",
			before: []TxnRecord{meta(TxnOngoing, 10, 0, NoProducerEpoch, timeout(0), parts())},
			req:    commitTxn(0, 0),
			err:    ErrInvalidProducerIDMapping,
		},
		{
			kafka:  "shouldReplyWithProducerFencedOnEndTxnWhenEpochIsNotSameAsTransaction",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, kEpoch-1, parts())},
			req:    commitTxn(kPid, 0),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "shouldAppendPrepareCommitToLogOnEndTxnWhenStatusIsOngoingAndResultIsCommit (TV_2)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			at:     kNow + 3,
			req:    commitTxn(kPid, kEpoch),
			record: ptr(meta(TxnPrepareCommit, kPid, kEpoch+1, kEpoch, prev(kPid), updated(kNow+3))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 1},
		},
		{
			kafka:  "shouldAppendPrepareAbortToLogOnEndTxnWhenStatusIsOngoingAndResultIsAbort (TV_2)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			req:    abortTxn(kPid, kEpoch),
			record: ptr(meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch, prev(kPid))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 1},
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateTimeShiftDuringPrepareCommit (TV_2)",
			before: []TxnRecord{meta(TxnOngoing, kPid, 1, NoProducerEpoch, started(1))},
			at:     kNow - 1,
			req:    commitTxn(kPid, 1),
			record: ptr(meta(TxnPrepareCommit, kPid, 2, 1, prev(kPid), started(1), updated(kNow-1))),
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateTimeShiftDuringPrepareAbort (TV_2)",
			before: []TxnRecord{meta(TxnOngoing, kPid, 1, NoProducerEpoch, started(1))},
			at:     kNow - 1,
			req:    abortTxn(kPid, 1),
			record: ptr(meta(TxnPrepareAbort, kPid, 2, 1, prev(kPid), started(1), updated(kNow-1))),
		},
		{
			kafka:  "shouldGenerateNewProducerIdIfEpochsExhaustedV2",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, kMaxEpoch-2, prev(kPid), parts())},
			req:    commitTxn(kPid, kMaxEpoch-1),
			record: ptr(meta(TxnPrepareCommit, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid), next(kPid2), parts())),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			kafka:  "testEndTxnWhenStatusIsCompleteCommitAndResultIsCommitInV2 (retry)",
			before: []TxnRecord{completeCommit},
			req:    commitTxn(kPid, kEpoch-1),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch},
		},
		{
			// The same epoch is the next transaction's EndTxn, and it
			// has nothing to commit.
			kafka:  "testEndTxnWhenStatusIsCompleteCommitAndResultIsCommitInV2 (not a retry)",
			before: []TxnRecord{completeCommit},
			req:    commitTxn(kPid, kEpoch),
			err:    ErrInvalidTxnState,
		},
		{
			kafka:  "testEndTxnRequestWhenStatusIsCompleteCommitAndResultIsAbortInV2 (retry)",
			before: []TxnRecord{completeCommit},
			req:    abortTxn(kPid, kEpoch-1),
			err:    ErrInvalidTxnState,
		},
		{
			// Version 2 lets a producer abort without knowing whether a
			// partition added itself: the epoch is bumped, nothing is
			// marked, and the abort starts now.
			kafka:  "testEndTxnRequestWhenStatusIsCompleteCommitAndResultIsAbortInV2 (not a retry)",
			before: []TxnRecord{completeCommit},
			req:    abortTxn(kPid, kEpoch),
			record: ptr(meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch, prev(kPid), parts())),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 1},
		},
		{
			kafka:  "shouldReturnOkOnEndTxnWhenStatusIsCompleteAbortAndResultIsAbortInV2 (retry)",
			before: []TxnRecord{completeAbort},
			req:    abortTxn(kPid, kEpoch-1),
			answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch},
		},
		{
			kafka:  "shouldReturnOkOnEndTxnWhenStatusIsCompleteAbortAndResultIsAbortInV2 (not a retry)",
			before: []TxnRecord{completeAbort},
			req:    abortTxn(kPid, kEpoch),
			record: ptr(meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch, prev(kPid), parts())),
		},
		{
			// KAFKA-20785: only the coordinator's own abort (a timeout, or
			// InitProducerId fencing) leaves CompleteAbort one epoch above
			// a producer that then commits: it was fenced, a recoverable
			// error, not INVALID_TXN_STATE, which producers take as fatal.
			kafka:  "shouldReturnInvalidTxnRequestOnEndTxnRequestWhenStatusIsCompleteAbortAndResultIsNotAbort (TV_2, KAFKA-20785)",
			before: []TxnRecord{completeAbort},
			req:    commitTxn(kPid, kEpoch-1),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "a commit with nothing open after an abort, at the same epoch (endTransaction)",
			before: []TxnRecord{completeAbort},
			req:    commitTxn(kPid, kEpoch),
			err:    ErrInvalidTxnState,
		},
		{
			kafka:  "shouldReturnConcurrentTransactionsOnEndTxnRequestWhenStatusIsPrepareCommit (TV_2)",
			before: []TxnRecord{meta(TxnPrepareCommit, kPid, kEpoch, kEpoch-1, parts())},
			req:    commitTxn(kPid, kEpoch-1),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldReturnInvalidTxnRequestOnEndTxnRequestWhenStatusIsPrepareAbort (TV_2)",
			before: []TxnRecord{meta(TxnPrepareAbort, kPid, kEpoch, NoProducerEpoch, parts())},
			req:    commitTxn(kPid, kEpoch-1),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldHandleConcurrentTransactionsInPrepareStatesTV2 (PrepareCommit, abort)",
			before: []TxnRecord{meta(TxnPrepareCommit, kPid, kEpoch+1, kEpoch)},
			req:    abortTxn(kPid, kEpoch+1),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldHandleConcurrentTransactionsInPrepareStatesTV2 (PrepareAbort, abort)",
			before: []TxnRecord{meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch)},
			req:    abortTxn(kPid, kEpoch+1),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldReturnInvalidTxnRequestOnEndTxnV2IfNotEndTxnV2Retry (PrepareCommit)",
			before: []TxnRecord{meta(TxnPrepareCommit, kPid, kEpoch, NoProducerEpoch, parts())},
			req:    commitTxn(kPid, kEpoch),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldReturnInvalidTxnRequestOnEndTxnV2IfNotEndTxnV2Retry (CompleteCommit)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, kEpoch, NoProducerEpoch)},
			req:    commitTxn(kPid, kEpoch),
			err:    ErrInvalidTxnState,
		},
		{
			kafka:  "TestEndTxnRequestWhenEmptyTransactionStateForAbortInV2 (retry)",
			before: []TxnRecord{empty},
			req:    abortTxn(kPid, kEpoch-1),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "TestEndTxnRequestWhenEmptyTransactionStateForAbortInV2 (not a retry)",
			before: []TxnRecord{empty},
			req:    abortTxn(kPid, kEpoch),
			record: ptr(meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch, prev(kPid), parts())),
		},
		{
			kafka:  "TransactionMetadataTest.testTransitFromEmptyToPrepareAbortInV2",
			before: []TxnRecord{meta(TxnEmpty, kPid, 735, NoProducerEpoch)},
			at:     kNow + 1,
			req:    abortTxn(kPid, 735),
			record: ptr(meta(TxnPrepareAbort, kPid, 736, 735, prev(kPid), parts(), started(kNow+1), updated(kNow+1))),
		},
		{
			kafka:  "TransactionMetadataTest.testTransitFromCompleteAbortToPrepareAbortInV2",
			before: []TxnRecord{meta(TxnCompleteAbort, kPid, 735, NoProducerEpoch, started(kNow-1))},
			at:     kNow + 1,
			req:    abortTxn(kPid, 735),
			record: ptr(meta(TxnPrepareAbort, kPid, 736, 735, prev(kPid), parts(), started(kNow+1), updated(kNow+1))),
		},
		{
			kafka:  "TransactionMetadataTest.testTransitFromCompleteCommitToPrepareAbortInV2",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, 735, NoProducerEpoch, started(kNow-1))},
			at:     kNow + 1,
			req:    abortTxn(kPid, 735),
			record: ptr(meta(TxnPrepareAbort, kPid, 736, 735, prev(kPid), parts(), started(kNow+1), updated(kNow+1))),
		},
		{
			kafka:  "TestEndTxnRequestWhenEmptyTransactionStateForCommitInV2 (retry)",
			before: []TxnRecord{empty},
			req:    commitTxn(kPid, kEpoch-1),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "TestEndTxnRequestWhenEmptyTransactionStateForCommitInV2 (not a retry)",
			before: []TxnRecord{empty},
			req:    commitTxn(kPid, kEpoch),
			err:    ErrInvalidTxnState,
		},
		{
			kafka:  "shouldReturnInvalidEpochOnEndTxnWhenEpochIsLarger (TV_2)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, 1, 1)},
			req:    commitTxn(kPid, 2),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "shouldReturnInvalidEpochOnEndTxnWhenEpochIsSmaller (TV_2)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, 2, 1)},
			req:    commitTxn(kPid, kEpoch-1),
			err:    ErrProducerFenced,
		},
		{
			kafka:  "shouldReturnOkOnEndTxnV2IfEndTxnV2RetryEpochOverflow (while completing)",
			before: []TxnRecord{meta(TxnPrepareCommit, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid), next(kPid2), parts())},
			req:    commitTxn(kPid, kMaxEpoch-1),
			err:    ErrConcurrentTransactions,
		},
		{
			kafka:  "shouldReturnOkOnEndTxnV2IfEndTxnV2RetryEpochOverflow (completed)",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid2, 0, kMaxEpoch-1, prev(kPid))},
			req:    commitTxn(kPid, kMaxEpoch-1),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			// KAFKA-20090 (prepareAbortOrCommit): at Short.MaxValue, which
			// only a bug leaves, an abort goes through without a bump and
			// the producer moves to a new id; a commit cannot.
			kafka:  "an abort at Short.MaxValue (KAFKA-20090 recovery)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid))},
			req:    abortTxn(kPid, kMaxEpoch),
			record: ptr(meta(TxnPrepareAbort, kPid, kMaxEpoch, kMaxEpoch, prev(kPid), next(kPid2))),
			answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0},
		},
		{
			kafka:  "a commit at Short.MaxValue",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid))},
			req:    commitTxn(kPid, kMaxEpoch),
			err:    ErrInvalidTxnState,
		},
		{
			kafka:  "a commit retried on the old producer id after the coordinator's abort rotated it (KAFKA-20785)",
			before: []TxnRecord{meta(TxnCompleteAbort, kPid2, 0, kMaxEpoch-1, prev(kPid))},
			req:    commitTxn(kPid, kMaxEpoch-1),
			err:    ErrProducerFenced,
		},
	})
}

// TestKafkaTimeouts: TransactionCoordinator.abortTimedOutTransactions and
// TransactionStateManager.timedOutTransactions and
// removeExpiredTransactionalIds, as Tick makes them.
func TestKafkaTimeouts(t *testing.T) {
	const interval = 10_000 // transaction.abort.timed.out.transaction.cleanup.interval.ms
	expiry := DefaultTransactionalIDExpiration.Milliseconds()
	runVectors(t, []vector{
		{
			// Version 2: the abort remembers the epoch it fenced, as an
			// EndTxn does (prepareAbortOrCommit); the transaction keeps
			// its start.
			kafka:  "shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch (TV_2)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			at:     kNow + interval,
			req:    tick,
			record: ptr(meta(TxnPrepareAbort, kPid, kEpoch+1, kEpoch, prev(kPid), updated(kNow+interval))),
		},
		{
			kafka:   "shouldNotAbortExpiredTransactionsThatHaveAPendingStateTransition",
			before:  []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch)},
			pending: commitTxn(kPid, kEpoch),
			at:      kNow + interval,
			req:     tick,
		},
		{
			kafka:  "a transaction exactly at its timeout (timedOutTransactions: start + timeout < now)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, timeout(1000))},
			at:     kNow + 1000,
			req:    tick,
		},
		{
			// KAFKA-20090: the abort of a transaction at the last epoch
			// takes the epoch to Short.MaxValue and allocates the producer
			// id the next transaction runs on.
			kafka:  "shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyTV2",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, NoProducerEpoch)},
			at:     kNow + interval,
			req:    tick,
			record: ptr(meta(TxnPrepareAbort, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid), next(kPid2), updated(kNow+interval))),
		},
		{
			// The coordinator's abort is an EndTxn abort (KAFKA-19367):
			// it rotates the producer id only when the epoch it bumps
			// from is the last (generateTxnTransitMetadataForTxnCompletion),
			// so that the fenced producer's late abort is still a retry.
			kafka:  "a timeout one epoch before the last (generateTxnTransitMetadataForTxnCompletion)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-2, NoProducerEpoch)},
			at:     kNow + interval,
			req:    tick,
			record: ptr(meta(TxnPrepareAbort, kPid, kMaxEpoch-1, kMaxEpoch-2, prev(kPid), updated(kNow+interval))),
		},
		{
			// KAFKA-20090: an epoch already at Short.MaxValue is not
			// bumped past it; the abort still goes through.
			kafka:  "TransactionMetadataTest.testFenceProducerNotAllowedIfItWouldOverflow",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch, NoProducerEpoch)},
			at:     kNow + interval,
			req:    tick,
			record: ptr(meta(TxnPrepareAbort, kPid, kMaxEpoch, kMaxEpoch, prev(kPid), next(kPid2), updated(kNow+interval))),
		},
		{
			kafka:  "shouldRemoveCompleteCommitExpiredTransactionalIds",
			before: []TxnRecord{meta(TxnCompleteCommit, kPid, kEpoch, NoProducerEpoch, updated(kNow-expiry))},
			req:    tick,
			record: ptr(meta(TxnDead, kPid, kEpoch, NoProducerEpoch, prev(kPid), started(kNow), updated(kNow-expiry))),
		},
		{
			kafka:  "shouldRemoveCompleteAbortExpiredTransactionalIds",
			before: []TxnRecord{meta(TxnCompleteAbort, kPid, kEpoch, NoProducerEpoch, updated(kNow-expiry))},
			req:    tick,
			record: ptr(meta(TxnDead, kPid, kEpoch, NoProducerEpoch, prev(kPid), started(kNow), updated(kNow-expiry))),
		},
		{
			kafka:  "shouldRemoveEmptyExpiredTransactionalIds",
			before: []TxnRecord{meta(TxnEmpty, kPid, kEpoch, NoProducerEpoch, updated(kNow-expiry))},
			req:    tick,
			record: ptr(meta(TxnDead, kPid, kEpoch, NoProducerEpoch, prev(kPid), updated(kNow-expiry))),
		},
		{
			kafka:  "shouldRemoveEmptyExpiredTransactionalIds (the id updated since stays)",
			before: []TxnRecord{meta(TxnEmpty, kPid, kEpoch, NoProducerEpoch, updated(kNow-expiry+1))},
			req:    tick,
		},
		{
			kafka:  "shouldNotRemoveOngoingTransactionalIds",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, timeout(1000), updated(kNow-expiry))},
			req:    tick,
		},
		{
			kafka:  "shouldNotRemovePrepareAbortTransactionalIds",
			before: []TxnRecord{meta(TxnPrepareAbort, kPid, kEpoch, NoProducerEpoch, updated(kNow-expiry))},
			req:    tick,
		},
		{
			kafka:  "shouldNotRemovePrepareCommitTransactionalIds",
			before: []TxnRecord{meta(TxnPrepareCommit, kPid, kEpoch, NoProducerEpoch, updated(kNow-expiry))},
			req:    tick,
		},
	})
}

// TestKafkaOnlyOngoingTransactionsTimeOut:
// TransactionStateManagerTest.shouldOnlyConsiderTransactionsInTheOngoingStateToAbort.
func TestKafkaOnlyOngoingTransactionsTimeOut(t *testing.T) {
	c := kafkaCoordinator(t)
	for i, r := range []TxnRecord{
		meta(TxnOngoing, 0, 0, NoProducerEpoch, timeout(1000)),
		meta(TxnOngoing, 1, 0, NoProducerEpoch, timeout(10_000)),
		meta(TxnPrepareCommit, 2, 0, NoProducerEpoch, timeout(1000)),
		meta(TxnPrepareAbort, 3, 0, NoProducerEpoch, timeout(1000)),
		meta(TxnCompleteCommit, 4, 0, NoProducerEpoch, timeout(1000)),
		meta(TxnCompleteAbort, 5, 0, NoProducerEpoch, timeout(1000)),
	} {
		r.TransactionalID = []string{"ongoing", "not-expiring", "prepare-commit", "prepare-abort", "complete-commit", "complete-abort"}[i]
		c.Replay(r)
	}
	recs, err := c.Tick(millis(kNow + 2000))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "ongoing", recs[0].TransactionalID)
	require.Equal(t, TxnPrepareAbort, recs[0].State)
}

// TestKafkaTxnStates: TransactionMetadataTest.testTransactionStateIdAndNameMapping
// and the transitions testInvalidTransitionFromCompleteCommitToFence and
// testInvalidTransitionFromCompleteAbortToFence refuse: the coordinator
// fences only an open transaction.
func TestKafkaTxnStates(t *testing.T) {
	for _, s := range []struct {
		state TxnState
		id    int8
		name  string
	}{
		{TxnEmpty, 0, "Empty"}, {TxnOngoing, 1, "Ongoing"}, {TxnPrepareCommit, 2, "PrepareCommit"},
		{TxnPrepareAbort, 3, "PrepareAbort"}, {TxnCompleteCommit, 4, "CompleteCommit"},
		{TxnCompleteAbort, 5, "CompleteAbort"}, {TxnDead, 6, "Dead"}, {TxnPrepareEpochFence, 7, "PrepareEpochFence"},
	} {
		require.Equal(t, s.id, int8(s.state))
		require.Equal(t, s.name, s.state.String())
	}
	require.Equal(t, []TxnState{TxnOngoing}, validPrevious[TxnPrepareEpochFence])
}

// errWriteFailed is a record the owner failed to persist (Kafka's
// NOT_ENOUGH_REPLICAS or COORDINATOR_NOT_AVAILABLE on the append).
var errWriteFailed = ErrConcurrentTransactions

// call is one request of a scenario and what it must get.
type call struct {
	req op
	at  int64 // 0 means kNow
	// failWrite makes the owner fail to persist the request's record:
	// it abandons it and answers errWriteFailed.
	failWrite bool
	// holdMarkers leaves the markers of a completing transaction
	// unwritten: the transactional id stays in its Prepare state.
	holdMarkers bool
	err         error
	answer      *ProducerIDAndEpoch
	// state is the persisted state after the call, if checked.
	state *TxnRecord
}

// scenario is a Kafka test that makes several calls: the owner persists
// each record at once and writes the markers that follow.
type scenario struct {
	kafka  string
	before []TxnRecord
	calls  []call
}

func (sc scenario) run(t *testing.T) {
	c := kafkaCoordinator(t)
	for _, r := range sc.before {
		c.Replay(r)
	}
	for i, cl := range sc.calls {
		now := cl.at
		if now == 0 {
			now = kNow
		}
		s, err := cl.req(c, now)
		switch {
		case err != nil || s.Record == nil:
		case cl.failWrite:
			require.NoError(t, c.Abandon(s.Record.TransactionalID))
			err = errWriteFailed
		default:
			persist(t, c, *s.Record, cl.holdMarkers, now)
		}
		if err == nil {
			err = s.Err
		}
		if cl.err == nil {
			require.NoError(t, err, "call %d", i)
		} else {
			require.ErrorIs(t, err, cl.err, "call %d", i)
		}
		if cl.answer != nil {
			require.Equal(t, *cl.answer, ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, "call %d: the answer", i)
		}
		if cl.state != nil {
			st, ok := c.Transaction(kTxnID)
			require.True(t, ok, "call %d", i)
			require.Equal(t, *cl.state, st, "call %d: the state after", i)
		}
	}
}

// persist completes rec as an owner that persisted it, writing the
// markers that follow unless hold, and persisting what completes them.
func persist(t *testing.T, c *TxnCoordinator, rec TxnRecord, hold bool, now int64) {
	f, err := c.Complete(rec)
	require.NoError(t, err)
	if f.Next != nil {
		persist(t, c, *f.Next, hold, now)
	}
	if hold {
		return
	}
	for _, m := range f.Markers {
		next, err := c.MarkerWritten(m.TransactionalID, m.Partition, millis(now))
		require.NoError(t, err)
		if next != nil {
			persist(t, c, *next, hold, now)
		}
	}
}

// markerWritten reports topic1-0's marker written, as the owner does.
func markerWritten(c *TxnCoordinator, now int64) (Step, error) {
	rec, err := c.MarkerWritten(kTxnID, kTopic1, millis(now))
	return Step{Record: rec}, err
}

// TestKafkaScenarios: the Kafka tests that make several calls.
func TestKafkaScenarios(t *testing.T) {
	const interval = 10_000
	for _, sc := range []scenario{
		{
			kafka:  "testInitProducerIdWithCurrentEpochProvided",
			before: []TxnRecord{meta(TxnEmpty, kPid, 10, 9)},
			calls: []call{
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 10}), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: 11}},
				// The producer did not hear the answer and retries.
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 10}), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: 11}},
			},
		},
		{
			kafka:  "testInitProducerIdStaleCurrentEpochProvided",
			before: []TxnRecord{meta(TxnEmpty, kPid, 10, 9)},
			calls: []call{
				{req: initPID(), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: 11}},
				// The old producer tries to continue from epoch 10.
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: 10}), err: ErrProducerFenced},
			},
		},
		{
			kafka:  "testRetryInitProducerIdAfterProducerIdRotation",
			before: []TxnRecord{meta(TxnEmpty, kPid, kMaxEpoch-1, kMaxEpoch-2, prev(kPid))},
			calls: []call{
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
			},
		},
		{
			// TransactionMetadata.prepareTransitionTo makes every
			// transition's previous producer id the one it came from, so
			// the old id is recognised only until the new producer moves
			// on: a retry delayed past its first partition is fenced, and
			// does not abort the new producer's transaction.
			kafka:  "a retry on the old producer id after the new producer began a transaction (prepareTransitionTo)",
			before: []TxnRecord{meta(TxnEmpty, kPid, kMaxEpoch-1, kMaxEpoch-2, prev(kPid))},
			calls: []call{
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
				{req: addPartitions(kPid2, 0)},
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}), err: ErrProducerFenced,
					state: ptr(meta(TxnOngoing, kPid2, 0, kMaxEpoch-1, prev(kPid2)))},
			},
		},
		{
			// KAFKA-9666 and KAFKA-19367: a fence whose write failed
			// changed nothing, so the next one bumps from the same epoch,
			// once; the producer's retry then bumps again.
			kafka:  "testTV2AllowsEpochReBumpingAfterFailedWrite (and shouldNotRepeatedlyBumpEpochDueToInitPidDuringOngoingTxnIfAppendToLogFails)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			calls: []call{
				{req: initPID(), failWrite: true, err: errWriteFailed,
					state: ptr(meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid)))},
				{req: initPID(), err: ErrConcurrentTransactions,
					state: ptr(meta(TxnCompleteAbort, kPid, kEpoch+1, kEpoch, prev(kPid)))},
				{req: initPID(), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 2}},
			},
		},
		{
			kafka:  "shouldNotBumpEpochWhenAbortingExpiredTransactionIfAppendToLogFails",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch, prev(kPid))},
			calls: []call{
				{req: tick, at: kNow + interval, failWrite: true, err: errWriteFailed},
				{req: tick, at: kNow + 2*interval,
					state: ptr(meta(TxnCompleteAbort, kPid, kEpoch+1, kEpoch, prev(kPid), updated(kNow+2*interval)))},
			},
		},
		{
			// KAFKA-20090: the fence at the last epoch rotates the producer
			// id when the abort completes, and the fenced producer's late
			// abort is a retry (retryOnOverflow).
			kafka:  "shouldRotateProducerIdWhenInitPidFencesOngoingTxnAtEpochOverflowBoundaryTV2",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, NoProducerEpoch)},
			calls: []call{
				{req: initPID(), err: ErrConcurrentTransactions,
					state: ptr(meta(TxnCompleteAbort, kPid2, 0, kMaxEpoch-1, prev(kPid)))},
				{req: abortTxn(kPid, kMaxEpoch-1), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
			},
		},
		{
			kafka:  "shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyAndLateClientAbortRequestTV2",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, NoProducerEpoch)},
			calls: []call{
				{req: tick, at: kNow + interval,
					state: ptr(meta(TxnCompleteAbort, kPid2, 0, kMaxEpoch-1, prev(kPid), updated(kNow+interval)))},
				{req: abortTxn(kPid, kMaxEpoch-1), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
			},
		},
		{
			kafka:  "the late abort of a transaction that timed out one epoch before the last",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-2, NoProducerEpoch)},
			calls: []call{
				{req: tick, at: kNow + interval},
				{req: abortTxn(kPid, kMaxEpoch-2), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}},
				// Its next transaction ends on the last epoch and rotates.
				{req: addPartitions(kPid, kMaxEpoch-1)},
				{req: commitTxn(kPid, kMaxEpoch-1), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
			},
		},
		{
			kafka:  "shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyAndRetryInitProducerIdTV2",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, NoProducerEpoch)},
			calls: []call{
				{req: tick, at: kNow + interval},
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kMaxEpoch - 1}), answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
			},
		},
		{
			// The same without a rotation: the producer whose transaction
			// timed out re-initialises with its epoch (KIP-360) and gets
			// the one the abort bumped to.
			kafka:  "a timed-out producer re-initialises (prepareAbortOrCommit's last epoch, prepareIncrementProducerEpoch)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch)},
			calls: []call{
				{req: tick, at: kNow + interval},
				{req: initPID(ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch}), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 1}},
			},
		},
		{
			kafka:  "shouldReturnConcurrentTxnOnAddPartitionsIfEndTxnV2EpochOverflowAndNotComplete (KAFKA-18660)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, kMaxEpoch-2)},
			calls: []call{
				{req: commitTxn(kPid, kMaxEpoch-1), holdMarkers: true, answer: &ProducerIDAndEpoch{ProducerID: kPid2, Epoch: 0}},
				// The producer begins its next transaction on the new id
				// while the last one still completes on the old.
				{req: addPartitions(kPid2, 0), err: ErrConcurrentTransactions},
				{req: markerWritten, state: ptr(meta(TxnCompleteCommit, kPid2, 0, kMaxEpoch-1, prev(kPid)))},
				{req: addPartitions(kPid2, 0), state: ptr(meta(TxnOngoing, kPid2, 0, kMaxEpoch-1, prev(kPid2)))},
			},
		},
		{
			kafka:  "TransactionMetadataTest.testEpochBumpOnEndTxn",
			before: []TxnRecord{meta(TxnOngoing, kPid, 10, NoProducerEpoch)},
			calls: []call{
				{req: commitTxn(kPid, 10), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: 11},
					state: ptr(meta(TxnCompleteCommit, kPid, 11, 10, prev(kPid), parts()))},
			},
		},
		{
			kafka:  "TransactionMetadataTest.testEpochBumpOnEndTxnOverflow",
			before: []TxnRecord{meta(TxnOngoing, kPid, kMaxEpoch-1, NoProducerEpoch)},
			calls: []call{
				{req: commitTxn(kPid, kMaxEpoch-1), holdMarkers: true,
					state: ptr(meta(TxnPrepareCommit, kPid, kMaxEpoch, kMaxEpoch-1, prev(kPid), next(kPid2)))},
				{req: markerWritten, state: ptr(meta(TxnCompleteCommit, kPid2, 0, kMaxEpoch-1, prev(kPid), parts()))},
			},
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateTimeShiftDuringAddPartitions",
			before: []TxnRecord{meta(TxnEmpty, kPid, 1, NoProducerEpoch, started(kNow))},
			calls: []call{
				{req: addPartitions(kPid, 1), at: kNow - 1,
					state: ptr(meta(TxnOngoing, kPid, 1, NoProducerEpoch, prev(kPid), started(kNow-1), updated(kNow-1)))},
				{req: addPartitions(kPid, 1, TopicPartition{Topic: "topic2", Partition: 0}), at: kNow - 2,
					state: ptr(meta(TxnOngoing, kPid, 1, NoProducerEpoch, prev(kPid), started(kNow-1), updated(kNow-2),
						parts(kTopic1, TopicPartition{Topic: "topic2", Partition: 0})))},
			},
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateTimeShiftDuringCompleteCommit",
			before: []TxnRecord{meta(TxnPrepareCommit, kPid, 1, 0, started(1))},
			calls: []call{
				{req: markerWritten, at: kNow - 1,
					state: ptr(meta(TxnCompleteCommit, kPid, 1, 0, prev(kPid), parts(), started(1), updated(kNow-1)))},
			},
		},
		{
			kafka:  "TransactionMetadataTest.testTolerateTimeShiftDuringCompleteAbort",
			before: []TxnRecord{meta(TxnPrepareAbort, kPid, 1, 0, started(1))},
			calls: []call{
				{req: markerWritten, at: kNow - 1,
					state: ptr(meta(TxnCompleteAbort, kPid, 1, 0, prev(kPid), parts(), started(1), updated(kNow-1)))},
			},
		},
		{
			// Kafka completes every Prepare state it loads
			// (TransactionStateManager.loadTransactionsForTxnTopicPartition
			// sets the pending Complete state and sends the markers, here
			// none): an abort with no partition, persisted just before a
			// restart, completes at the next Tick.
			kafka:  "TransactionMetadataTest.testTolerateTimeShiftDuringCompleteAbort (no partitions, after a restart)",
			before: []TxnRecord{meta(TxnPrepareAbort, kPid, 1, 0, started(1), parts())},
			calls: []call{
				{req: tick, at: kNow - 1,
					state: ptr(meta(TxnCompleteAbort, kPid, 1, 0, prev(kPid), parts(), started(1), updated(kNow-1)))},
				{req: abortTxn(kPid, 1), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: 2}},
			},
		},
		{
			// Kafka retries the write of the completing record
			// (TransactionMarkerChannelManager.tryAppendToLog); here the
			// next Tick makes it again.
			kafka:  "the completing record's write failed after every marker was written (TransactionMarkerChannelManager retries it)",
			before: []TxnRecord{meta(TxnOngoing, kPid, kEpoch, NoProducerEpoch)},
			calls: []call{
				{req: commitTxn(kPid, kEpoch), holdMarkers: true},
				{req: markerWritten, failWrite: true, err: errWriteFailed,
					state: ptr(meta(TxnPrepareCommit, kPid, kEpoch+1, kEpoch, prev(kPid)))},
				{req: tick, state: ptr(meta(TxnCompleteCommit, kPid, kEpoch+1, kEpoch, prev(kPid), parts()))},
			},
		},
		{
			kafka:  "shouldNotRemoveExpiredTransactionalIdsIfLogAppendFails",
			before: []TxnRecord{meta(TxnCompleteAbort, kPid, kEpoch, NoProducerEpoch, updated(kNow-DefaultTransactionalIDExpiration.Milliseconds()))},
			calls: []call{
				{req: tick, failWrite: true, err: errWriteFailed},
				// Still there and usable.
				{req: initPID(), answer: &ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch + 1}},
			},
		},
	} {
		t.Run(sc.kafka, sc.run)
	}
}

// TestKafkaUninitializedTransactionalIDIsForgotten:
// TransactionStateManagerTest.testTransactionExpirationShouldNotFailWithUninitializedTransactionMetadata.
// Kafka keeps the metadata it created for a new transactional id whose
// first record failed, at epoch -1, until it expires; Strand forgets it at
// once, so nothing is left to expire and a new InitProducerId starts over.
func TestKafkaUninitializedTransactionalIDIsForgotten(t *testing.T) {
	c := kafkaCoordinator(t)
	s, err := c.InitProducerID(kTxnID, kTimeout, nil, millis(kNow))
	require.NoError(t, err)
	require.Equal(t, NoProducerEpoch+1, s.Record.ProducerEpoch)
	require.NoError(t, c.Abandon(kTxnID))
	_, ok := c.Transaction(kTxnID)
	require.False(t, ok)
	recs, err := c.Tick(millis(kNow + DefaultTransactionalIDExpiration.Milliseconds()))
	require.NoError(t, err)
	require.Empty(t, recs)
}

// TestKafkaMarkersResentAfterLoad: TransactionStateManagerTest's
// shouldWriteTxnMarkersForTransactionInPreparedCommitState and
// shouldWriteTxnMarkersForTransactionInPreparedAbortState: a coordinator
// that loads a Prepare state writes its markers again.
func TestKafkaMarkersResentAfterLoad(t *testing.T) {
	for _, st := range []TxnState{TxnPrepareCommit, TxnPrepareAbort} {
		c := kafkaCoordinator(t)
		tp1 := TopicPartition{Topic: "topic1", Partition: 1}
		c.Replay(meta(st, kPid, kEpoch, NoProducerEpoch, parts(kTopic1, tp1)))
		typ := MarkerAbort
		if st == TxnPrepareCommit {
			typ = MarkerCommit
		}
		var got []TopicPartition
		for _, m := range c.Markers() {
			require.Equal(t, typ, m.Type)
			require.Equal(t, ProducerIDAndEpoch{ProducerID: kPid, Epoch: kEpoch}, ProducerIDAndEpoch{ProducerID: m.ProducerID, Epoch: m.ProducerEpoch})
			got = append(got, m.Partition)
		}
		require.Equal(t, []TopicPartition{kTopic1, tp1}, got, "%v", st)
	}
}
