package idempotence

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// world is a coordinator with its owner: the owner persists every record
// (to log), completes it, and writes the markers it asks for to the
// partitions, whose producer state checks them as a partition leader would.
type world struct {
	t     *testing.T
	c     *TxnCoordinator
	log   []TxnRecord // the persisted records, in order
	parts map[TopicPartition]*partition
	now   int64
	pids  int64
	// holdMarkers leaves markers unwritten, in held.
	holdMarkers bool
	held        []MarkerRequest
	// failPersist makes the next persist fail.
	failPersist bool
}

const txnID = "tx"

var (
	tpA = TopicPartition{Topic: "a", Partition: 0}
	tpB = TopicPartition{Topic: "b", Partition: 1}
)

func newWorld(t *testing.T) *world {
	w := &world{t: t, parts: map[TopicPartition]*partition{}, now: 1_000_000, pids: 999}
	c, err := NewTxnCoordinator(TxnCoordinatorConfig{
		CoordinatorEpoch:   3,
		AllocateProducerID: func() (int64, error) { w.pids++; return w.pids, nil },
	})
	require.NoError(t, err)
	w.c = c
	return w
}

func (w *world) partition(tp TopicPartition) *partition {
	p, ok := w.parts[tp]
	if !ok {
		p = newPartition(w.t)
		w.parts[tp] = p
	}
	p.now = w.now
	return p
}

// do completes a request: it persists its record, if any, and follows up.
// It returns the answer: the step, or the request's error, or the error the
// step answers with once persisted.
func (w *world) do(s Step, err error) (Step, error) {
	w.t.Helper()
	if err != nil {
		return s, err
	}
	if s.Record != nil {
		if w.failPersist {
			w.failPersist = false
			require.NoError(w.t, w.c.Abandon(s.Record.TransactionalID))
			return Step{}, errPowerCut
		}
		w.persist(*s.Record)
	}
	return s, s.Err
}

// persist persists rec, completes it and does what follows.
func (w *world) persist(rec TxnRecord) {
	w.t.Helper()
	w.log = append(w.log, rec)
	f, err := w.c.Complete(rec)
	require.NoError(w.t, err)
	if f.Next != nil {
		w.persist(*f.Next)
	}
	if w.holdMarkers {
		w.held = append(w.held, f.Markers...)
		return
	}
	w.writeMarkers(f.Markers)
}

func (w *world) writeMarkers(ms []MarkerRequest) {
	w.t.Helper()
	for _, m := range ms {
		p := w.partition(m.Partition)
		p.append(batch{origin: OriginCoordinator, pid: m.ProducerID, epoch: m.ProducerEpoch, first: NoSequence, last: NoSequence,
			marker: &Marker{Type: m.Type, CoordinatorEpoch: m.CoordinatorEpoch}})
		p.s.OnHighWatermark(p.leo)
		next, err := w.c.MarkerWritten(m.TransactionalID, m.Partition, millis(w.now))
		require.NoError(w.t, err)
		if next != nil {
			w.persist(*next)
		}
	}
}

func (w *world) releaseMarkers() {
	w.holdMarkers = false
	held := w.held
	w.held = nil
	w.writeMarkers(held)
}

// init runs InitProducerId and requires it to succeed.
func (w *world) init() ProducerIDAndEpoch {
	w.t.Helper()
	s, err := w.do(w.c.InitProducerID(txnID, 60_000, nil, millis(w.now)))
	require.NoError(w.t, err)
	return ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}
}

// produce writes a transactional batch of producer p to tp, adding tp to
// the transaction first as a version 2 partition leader does.
func (w *world) produce(p ProducerIDAndEpoch, tp TopicPartition, seq int32) error {
	w.t.Helper()
	if _, err := w.do(w.c.AddPartitions(txnID, p.ProducerID, p.Epoch, []TopicPartition{tp}, millis(w.now))); err != nil {
		return err
	}
	_, _, err := w.partition(tp).try(data(p.Epoch, seq, seq).of(p.ProducerID).transactional())
	return err
}

func (w *world) end(p ProducerIDAndEpoch, commit bool) (ProducerIDAndEpoch, error) {
	w.t.Helper()
	s, err := w.do(w.c.EndTxn(txnID, p.ProducerID, p.Epoch, commit, millis(w.now)))
	return ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}, err
}

func (w *world) state() TxnRecord {
	w.t.Helper()
	r, ok := w.c.Transaction(txnID)
	require.True(w.t, ok)
	return r
}

// restore starts the world from a persisted record, as a coordinator
// loading its partition does.
func (w *world) restore(rec TxnRecord) {
	w.c.Replay(rec)
	w.log = append(w.log, rec)
}

// requireReplayEqual checks that replaying the persisted records, encoded
// as __transaction_state records and decoded again, rebuilds the live
// coordinator.
func (w *world) requireReplayEqual() {
	w.t.Helper()
	r, err := NewTxnCoordinator(TxnCoordinatorConfig{CoordinatorEpoch: 3, AllocateProducerID: func() (int64, error) { return 0, errPowerCut }})
	require.NoError(w.t, err)
	for _, rec := range w.log {
		// Through the bytes the owner would store.
		back, err := UnmarshalTxnRecord(MarshalTxnRecord(rec))
		require.NoError(w.t, err)
		r.Replay(back)
	}
	require.Equal(w.t, w.c.Transactions(), r.Transactions())
	require.Equal(w.t, w.c.Markers(), r.Markers())
}

// TestTransactionCommitAndAbort: a commit and an abort across two
// partitions (TransactionCoordinatorTest, KIP-890): markers carry the bumped epoch, every partition's last stable
// offset moves past the transaction, and an abort is what the .txnindex
// records.
func TestTransactionCommitAndAbort(t *testing.T) {
	for _, commit := range []bool{true, false} {
		w := newWorld(t)
		p := w.init()
		require.Equal(t, ProducerIDAndEpoch{ProducerID: 1000, Epoch: 0}, p)
		require.NoError(t, w.produce(p, tpA, 0))
		require.NoError(t, w.produce(p, tpB, 0))
		require.NoError(t, w.produce(p, tpA, 1))
		st := w.state()
		require.Equal(t, TxnOngoing, st.State)
		require.Equal(t, []TopicPartition{tpA, tpB}, st.Partitions)
		requireFirstUnstable(t, w.partition(tpA).s, 0)

		next, err := w.end(p, commit)
		require.NoError(t, err)
		require.Equal(t, ProducerIDAndEpoch{ProducerID: 1000, Epoch: 1}, next, "version 2 bumps the epoch on every EndTxn")
		want := TxnCompleteAbort
		if commit {
			want = TxnCompleteCommit
		}
		require.Equal(t, want, w.state().State)
		require.Empty(t, w.state().Partitions)
		for _, tp := range []TopicPartition{tpA, tpB} {
			ps := w.partition(tp).s
			_, open := ps.FirstUnstableOffset()
			require.False(t, open, "%v still unstable", tp)
			require.Equal(t, int16(1), w.partition(tp).entry(1000).Epoch, "marker written at the bumped epoch")
		}
		// States persisted: Empty, Ongoing (A), Ongoing (A, B), Prepare*, Complete*.
		states := make([]TxnState, len(w.log))
		for i, r := range w.log {
			states[i] = r.State
		}
		prep := TxnPrepareAbort
		if commit {
			prep = TxnPrepareCommit
		}
		require.Equal(t, []TxnState{TxnEmpty, TxnOngoing, TxnOngoing, prep, want}, states)
		w.requireReplayEqual()

		// The next transaction runs on the new epoch.
		require.NoError(t, w.produce(next, tpA, 0))
		_, err = w.end(next, true)
		require.NoError(t, err)
		w.requireReplayEqual()
	}
}

// TestTransactionScenarios are the rules of Kafka's TransactionCoordinator
// and TransactionMetadata (TransactionCoordinatorTest,
// TransactionMetadataTest; KIP-98, KIP-360, KIP-890), each a script ending
// in the answers Kafka gives.
func TestTransactionScenarios(t *testing.T) {
	t.Run("T9 a transaction past its timeout is aborted and its producer fenced", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		w.now += 60_000
		recs, err := w.c.Tick(millis(w.now))
		require.NoError(t, err)
		require.Empty(t, recs, "the timeout has not passed: start + timeout < now is strict")
		w.now++
		recs, err = w.c.Tick(millis(w.now))
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, TxnPrepareAbort, recs[0].State)
		require.Equal(t, int16(1), recs[0].ProducerEpoch)
		w.persist(*recs[0])
		require.Equal(t, TxnCompleteAbort, w.state().State)

		// The zombie: its produce is refused by the partition, its
		// coordinator calls by the coordinator.
		_, _, err = w.partition(tpA).try(data(0, 1, 1).of(p.ProducerID).transactional())
		require.ErrorIs(t, err, ErrInvalidProducerEpoch)
		_, err = w.do(w.c.AddPartitions(txnID, p.ProducerID, p.Epoch, []TopicPartition{tpB}, millis(w.now)))
		require.ErrorIs(t, err, ErrProducerFenced)
		// Under version 2 the zombie's old epoch is one below the
		// coordinator's, which EndTxn reads as a retry of the abort: its
		// commit is fenced (KAFKA-20785), its abort a harmless success.
		_, err = w.end(p, true)
		require.ErrorIs(t, err, ErrProducerFenced)
		_, err = w.end(p, false)
		require.NoError(t, err)
		require.Equal(t, TxnCompleteAbort, w.state().State)
		w.requireReplayEqual()
	})
	t.Run("T10 InitProducerId while a transaction is open aborts it; the retry gets epoch+2", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		_, err := w.do(w.c.InitProducerID(txnID, 60_000, nil, millis(w.now)))
		require.ErrorIs(t, err, ErrConcurrentTransactions)
		require.Equal(t, TxnCompleteAbort, w.state().State)
		require.Equal(t, int16(1), w.partition(tpA).entry(p.ProducerID).Epoch)
		_, open := w.partition(tpA).s.FirstUnstableOffset()
		require.False(t, open)
		again := w.init()
		require.Equal(t, ProducerIDAndEpoch{ProducerID: p.ProducerID, Epoch: 2}, again)
		w.requireReplayEqual()
	})
	t.Run("T11 EndTxn retried after CompleteCommit", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		next, err := w.end(p, true)
		require.NoError(t, err)
		retried, err := w.end(p, true) // the old epoch: a retry
		require.NoError(t, err)
		require.Equal(t, next, retried, "a retry is answered with the same epoch")
		_, err = w.end(p, false)
		require.ErrorIs(t, err, ErrInvalidTxnState)
		_, err = w.end(next, true) // a commit with nothing open
		require.ErrorIs(t, err, ErrInvalidTxnState)
		require.Len(t, w.log, 4, "neither wrote a record")
	})
	t.Run("T12 EndTxn while the markers are being written", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		w.holdMarkers = true
		next, err := w.end(p, true)
		require.NoError(t, err)
		require.Equal(t, TxnPrepareCommit, w.state().State)
		for _, tc := range []struct {
			p      ProducerIDAndEpoch
			commit bool
		}{{p, true}, {p, false}, {next, true}, {next, false}} {
			_, err = w.end(tc.p, tc.commit)
			require.ErrorIs(t, err, ErrConcurrentTransactions, "EndTxn %+v commit=%v", tc.p, tc.commit)
		}
		// So are the producer's next transaction and a new InitProducerId.
		require.ErrorIs(t, w.produce(next, tpB, 0), ErrConcurrentTransactions)
		_, err = w.do(w.c.InitProducerID(txnID, 60_000, nil, millis(w.now)))
		require.ErrorIs(t, err, ErrConcurrentTransactions)
		requireFirstUnstable(t, w.partition(tpA).s, 0)
		w.requireReplayEqual()

		w.releaseMarkers()
		require.Equal(t, TxnCompleteCommit, w.state().State)
		require.NoError(t, w.produce(next, tpB, 0))
		w.requireReplayEqual()
	})
	t.Run("T13 EndTxn right after InitProducerId", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		_, err := w.end(p, true)
		require.ErrorIs(t, err, ErrInvalidTxnState)
		// Version 2 lets a producer abort without knowing whether a
		// partition added itself: the epoch is bumped, nothing marked.
		next, err := w.end(p, false)
		require.NoError(t, err)
		require.Equal(t, ProducerIDAndEpoch{ProducerID: p.ProducerID, Epoch: 1}, next)
		require.Equal(t, TxnCompleteAbort, w.state().State)
		require.Empty(t, w.parts)
		w.requireReplayEqual()
	})
	t.Run("T14 AddPartitions with a stale epoch or another producer id", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		_, err := w.do(w.c.AddPartitions(txnID, p.ProducerID, p.Epoch-1, []TopicPartition{tpA}, millis(w.now)))
		require.ErrorIs(t, err, ErrProducerFenced)
		_, err = w.do(w.c.AddPartitions(txnID, p.ProducerID+1, p.Epoch, []TopicPartition{tpA}, millis(w.now)))
		require.ErrorIs(t, err, ErrInvalidProducerIDMapping)
		_, err = w.do(w.c.AddPartitions("nobody", p.ProducerID, p.Epoch, []TopicPartition{tpA}, millis(w.now)))
		require.ErrorIs(t, err, ErrInvalidProducerIDMapping)
		require.Equal(t, TxnEmpty, w.state().State)
	})
	t.Run("T16 a partition adds itself once; a second batch writes no record", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		n := len(w.log)
		require.NoError(t, w.produce(p, tpA, 1))
		require.Len(t, w.log, n)
		start := w.state().StartMs
		w.now += 10
		require.NoError(t, w.produce(p, tpB, 0))
		require.Equal(t, start, w.state().StartMs, "the transaction started with its first partition")
	})
	t.Run("T17 a late batch of an aborted transaction cannot reopen it", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		_, err := w.end(p, false)
		require.NoError(t, err)
		// The delayed batch arrives after the abort marker.
		_, _, err = w.partition(tpA).try(data(p.Epoch, 1, 1).of(p.ProducerID).transactional())
		require.ErrorIs(t, err, ErrInvalidProducerEpoch)
		_, open := w.partition(tpA).s.FirstUnstableOffset()
		require.False(t, open, "no hanging transaction")
	})
	t.Run("T22 the epoch runs out at EndTxn: a new producer id", func(t *testing.T) {
		w := newWorld(t)
		p := ProducerIDAndEpoch{ProducerID: 500, Epoch: math.MaxInt16 - 1}
		w.restore(TxnRecord{TransactionalID: txnID, State: TxnCompleteAbort, ProducerID: p.ProducerID, PreviousProducerID: -1,
			NextProducerID: -1, ProducerEpoch: p.Epoch, LastProducerEpoch: p.Epoch - 1, TimeoutMs: 60_000, StartMs: 5})
		require.NoError(t, w.produce(p, tpA, 0))
		next, err := w.end(p, true)
		require.NoError(t, err)
		require.Equal(t, ProducerIDAndEpoch{ProducerID: 1000, Epoch: 0}, next)
		st := w.state()
		require.Equal(t, int64(1000), st.ProducerID)
		require.Equal(t, int64(500), st.PreviousProducerID)
		require.Equal(t, int16(math.MaxInt16), w.partition(tpA).entry(500).Epoch, "the marker used the last epoch")
		// The producer's retry, with the old id and epoch, succeeds.
		retried, err := w.end(p, true)
		require.NoError(t, err)
		require.Equal(t, next, retried)
		w.requireReplayEqual()
	})
	t.Run("T22 the epoch runs out at InitProducerId: a new producer id", func(t *testing.T) {
		w := newWorld(t)
		exhausted := ProducerIDAndEpoch{ProducerID: 500, Epoch: math.MaxInt16 - 1}
		w.restore(TxnRecord{TransactionalID: txnID, State: TxnCompleteCommit, ProducerID: 500, PreviousProducerID: -1,
			NextProducerID: -1, ProducerEpoch: exhausted.Epoch, LastProducerEpoch: -1, TimeoutMs: 60_000, StartMs: 5})
		s, err := w.do(w.c.InitProducerID(txnID, 60_000, &exhausted, millis(w.now)))
		require.NoError(t, err)
		require.Equal(t, ProducerIDAndEpoch{ProducerID: 1000, Epoch: 0}, ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch})
		require.Equal(t, int64(500), w.state().PreviousProducerID)
		// The producer did not hear the answer and retries with its old
		// id and epoch: the same answer, no new id.
		s, err = w.do(w.c.InitProducerID(txnID, 60_000, &exhausted, millis(w.now)))
		require.NoError(t, err)
		require.Equal(t, ProducerIDAndEpoch{ProducerID: 1000, Epoch: 0}, ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch})
		require.Equal(t, int64(1000), w.pids)
		w.requireReplayEqual()
	})
	t.Run("T23 an idle transactional id expires and comes back with a new producer id", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		w.now += DefaultTransactionalIDExpiration.Milliseconds() - 1
		recs, err := w.c.Tick(millis(w.now))
		require.NoError(t, err)
		require.Empty(t, recs)
		w.now++
		recs, err = w.c.Tick(millis(w.now))
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, TxnDead, recs[0].State)
		w.persist(*recs[0])
		_, ok := w.c.Transaction(txnID)
		require.False(t, ok)
		_, err = w.end(p, false)
		require.ErrorIs(t, err, ErrInvalidProducerIDMapping)
		again := w.init()
		require.NotEqual(t, p.ProducerID, again.ProducerID)
		w.requireReplayEqual()
	})
	t.Run("a transaction in progress does not expire", func(t *testing.T) {
		w := newWorld(t)
		p := w.init()
		require.NoError(t, w.produce(p, tpA, 0))
		w.holdMarkers = true
		_, err := w.end(p, true)
		require.NoError(t, err)
		w.now += 2 * DefaultTransactionalIDExpiration.Milliseconds()
		recs, err := w.c.Tick(millis(w.now))
		require.NoError(t, err)
		require.Empty(t, recs)
	})
}

// TestInitProducerIDRules: the request checks of §5.2 and KIP-360's
// re-initialisation with the producer's current id and epoch.
func TestInitProducerIDRules(t *testing.T) {
	w := newWorld(t)
	_, err := w.c.InitProducerID("", 60_000, nil, millis(w.now))
	require.ErrorIs(t, err, ErrInvalidRequest)
	_, err = w.c.InitProducerID(txnID, int32(DefaultMaxTransactionTimeout.Milliseconds())+1, nil, millis(w.now))
	require.ErrorIs(t, err, ErrInvalidTransactionTimeout)
	_, err = w.c.InitProducerID(txnID, 0, nil, millis(w.now))
	require.ErrorIs(t, err, ErrInvalidTransactionTimeout)
	_, err = w.end(ProducerIDAndEpoch{ProducerID: 1, Epoch: 0}, true)
	require.ErrorIs(t, err, ErrInvalidProducerIDMapping, "unknown transactional id")

	p := w.init()
	again := w.init()
	require.Equal(t, ProducerIDAndEpoch{ProducerID: p.ProducerID, Epoch: 1}, again)

	// KIP-360: the current producer bumps its own epoch...
	s, err := w.do(w.c.InitProducerID(txnID, 60_000, &again, millis(w.now)))
	require.NoError(t, err)
	require.Equal(t, int16(2), s.ProducerEpoch)
	// ...and its retry of that call gets the same answer...
	s, err = w.do(w.c.InitProducerID(txnID, 60_000, &again, millis(w.now)))
	require.NoError(t, err)
	require.Equal(t, int16(2), s.ProducerEpoch)
	// ...while an older epoch, or another producer id, is fenced.
	_, err = w.do(w.c.InitProducerID(txnID, 60_000, &p, millis(w.now)))
	require.ErrorIs(t, err, ErrProducerFenced)
	_, err = w.do(w.c.InitProducerID(txnID, 60_000, &ProducerIDAndEpoch{ProducerID: 77, Epoch: 2}, millis(w.now)))
	require.ErrorIs(t, err, ErrProducerFenced)
	w.requireReplayEqual()
}

// TestAbandon: a record the owner failed to persist leaves the state as it
// was, so a fence that failed does not burn a second epoch (KAFKA-9666).
func TestAbandon(t *testing.T) {
	w := newWorld(t)
	w.failPersist = true
	_, err := w.do(w.c.InitProducerID(txnID, 60_000, nil, millis(w.now)))
	require.ErrorIs(t, err, errPowerCut)
	_, ok := w.c.Transaction(txnID)
	require.False(t, ok, "a transactional id whose first record failed is forgotten")

	p := w.init()
	require.NoError(t, w.produce(p, tpA, 0))
	w.failPersist = true
	_, err = w.end(p, true)
	require.ErrorIs(t, err, errPowerCut)
	require.Equal(t, TxnOngoing, w.state().State)

	w.now += 61_000
	recs, err := w.c.Tick(millis(w.now))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, int16(1), recs[0].ProducerEpoch)
	require.NoError(t, w.c.Abandon(txnID))
	recs, err = w.c.Tick(millis(w.now))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, int16(1), recs[0].ProducerEpoch, "a fence that failed changed nothing, so it bumps the same epoch again")
	w.persist(*recs[0])
	require.Equal(t, TxnCompleteAbort, w.state().State)
	w.requireReplayEqual()

	require.ErrorIs(t, w.c.Abandon(txnID), ErrNoPendingTransition)
	_, err = w.c.Complete(w.state())
	require.ErrorIs(t, err, ErrNoPendingTransition)
}

func TestCoordinatorOptions(t *testing.T) {
	_, err := NewTxnCoordinator(TxnCoordinatorConfig{})
	require.ErrorContains(t, err, "AllocateProducerID")
	_, err = NewTxnCoordinator(TxnCoordinatorConfig{AllocateProducerID: func() (int64, error) { return 1, nil }, MaxTransactionTimeout: -time.Second})
	require.ErrorContains(t, err, "MaxTransactionTimeout")
}

// TestTxnStateTransitions checks the table of legal previous states against
// TransactionState.validPreviousStates, with transactions version 2's abort
// from Empty and Complete*.
func TestTxnStateTransitions(t *testing.T) {
	require.ElementsMatch(t, []TxnState{TxnOngoing}, validPrevious[TxnPrepareCommit])
	require.ElementsMatch(t, []TxnState{TxnPrepareCommit}, validPrevious[TxnCompleteCommit])
	require.ElementsMatch(t, []TxnState{TxnPrepareAbort}, validPrevious[TxnCompleteAbort])
	require.ElementsMatch(t, []TxnState{TxnEmpty, TxnCompleteCommit, TxnCompleteAbort}, validPrevious[TxnDead])
	require.Equal(t, "PrepareEpochFence", TxnPrepareEpochFence.String())
	require.Equal(t, "TxnState(9)", TxnState(9).String())
}

// millis is the instant ms milliseconds after the Unix epoch: the tests
// keep their clocks in milliseconds, as Kafka's records do.
func millis(ms int64) time.Time { return time.UnixMilli(ms) }
