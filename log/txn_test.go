package log

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// txnClock is a Dir's clock that tests move by hand.
type txnClock struct{ ms atomic.Int64 }

func (c *txnClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *txnClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func txnDirOptions(fs vfs.FS, clock *txnClock) DirOptions {
	opts := dirOptions(fs)
	opts.Log.Now = clock.now
	opts.Logger = slog.New(slog.DiscardHandler)
	return opts
}

// openTxnDir opens a Dir with topics a and b of two partitions each.
func openTxnDir(t *testing.T) (*vfs.MemFS, *txnClock, *Dir) {
	t.Helper()
	fs := newMemFS(t)
	clock := &txnClock{}
	clock.ms.Store(1_700_000_000_000)
	d, err := OpenDir("/data", txnDirOptions(fs, clock))
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	for _, topic := range []string{"a", "b"} {
		require.NoError(t, d.CreateTopic(topic, TopicConfig{Partitions: 2}))
	}
	return fs, clock, d
}

func newTxnProducer(t *testing.T, d *Dir, id string, opts TransactionalOptions) *TransactionalProducer {
	t.Helper()
	tp, err := d.NewTransactionalProducer(id, opts)
	require.NoError(t, err)
	t.Cleanup(func() { tp.Close() })
	return tp
}

// values returns the values of topic's partition as iso reads them.
func values(t *testing.T, d *Dir, topic string, partition int32, iso Isolation) []string {
	t.Helper()
	p, err := d.Partition(topic, partition)
	require.NoError(t, err)
	start, _, _, err := p.Offsets()
	require.NoError(t, err)
	out := []string{}
	for r, err := range p.Records(start, iso) {
		require.NoError(t, err)
		out = append(out, string(r.Value))
	}
	return out
}

func endOffset(t *testing.T, d *Dir, topic string, partition int32) int64 {
	t.Helper()
	p, err := d.Partition(topic, partition)
	require.NoError(t, err)
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	return end
}

// produceTxn produces value to each of the partitions, waiting for each.
func produceTxn(t *testing.T, tp *TransactionalProducer, value string, tps ...idempotence.TopicPartition) {
	t.Helper()
	for _, x := range tps {
		_, err := tp.Produce(context.Background(), x.Topic, x.Partition, NewRecord(nil, []byte(value)))
		require.NoError(t, err)
	}
}

// commitTxn produces value to each of the partitions in a transaction and
// commits it.
func commitTxn(t *testing.T, tp *TransactionalProducer, value string, tps ...idempotence.TopicPartition) {
	t.Helper()
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, value, tps...)
	require.NoError(t, tp.Commit(context.Background()))
}

var (
	a0 = idempotence.TopicPartition{Topic: "a", Partition: 0}
	a1 = idempotence.TopicPartition{Topic: "a", Partition: 1}
	b0 = idempotence.TopicPartition{Topic: "b", Partition: 0}
)

func TestTxnCommitMakesEveryPartitionReadableTogether(t *testing.T) {
	_, _, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "x1", a0, a1, b0)
	produceTxn(t, tp, "x2", a0, a1, b0)
	for _, x := range []idempotence.TopicPartition{a0, a1, b0} {
		require.Empty(t, values(t, d, x.Topic, x.Partition, ReadCommitted), "an open transaction is not readable committed")
		require.Equal(t, []string{"x1", "x2"}, values(t, d, x.Topic, x.Partition, ReadUncommitted))
		p, _ := d.Partition(x.Topic, x.Partition)
		lso, err := p.LastStableOffset()
		require.NoError(t, err)
		require.Zero(t, lso, "the open transaction's first offset bounds the last stable offset")
	}
	rec, ok := func() (idempotence.TxnRecord, bool) { tx, _ := d.Transactions(); return tx.Describe("t1") }()
	require.True(t, ok)
	require.Equal(t, idempotence.TxnOngoing, rec.State)
	require.Equal(t, []idempotence.TopicPartition{a0, a1, b0}, rec.Partitions, "each partition joined at its first batch")

	require.NoError(t, tp.Commit(context.Background()))
	for _, x := range []idempotence.TopicPartition{a0, a1, b0} {
		require.Equal(t, []string{"x1", "x2"}, values(t, d, x.Topic, x.Partition, ReadCommitted))
		require.Equal(t, int64(3), endOffset(t, d, x.Topic, x.Partition), "two records and the COMMIT marker")
	}
	tx, _ := d.Transactions()
	rec, _ = tx.Describe("t1")
	require.Equal(t, idempotence.TxnCompleteCommit, rec.State)

	// The next transaction runs under the epoch EndTxn gave back.
	commitTxn(t, tp, "y", a0)
	require.Equal(t, []string{"x1", "x2", "y"}, values(t, d, "a", 0, ReadCommitted))
}

func TestTxnAbortHidesRecords(t *testing.T) {
	_, _, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "aborted", a0, b0)
	require.NoError(t, tp.Abort(context.Background()))
	commitTxn(t, tp, "committed", a0, b0)
	for _, x := range []idempotence.TopicPartition{a0, b0} {
		require.Equal(t, []string{"committed"}, values(t, d, x.Topic, x.Partition, ReadCommitted))
		require.Equal(t, []string{"aborted", "committed"}, values(t, d, x.Topic, x.Partition, ReadUncommitted))
	}
	// Aborting a transaction to which nothing was produced ends nothing.
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.Abort(context.Background()))
	require.Equal(t, int64(4), endOffset(t, d, "a", 0))
}

// failWritesUnder makes every write to a file under one of dirs fail, as a
// failing disk would, from when on is set.
func failWritesUnder(fs *vfs.MemFS, on *atomic.Bool, dirs ...string) {
	fs.SetHook(func(op vfs.Op) error {
		if !on.Load() {
			return nil
		}
		for _, dir := range dirs {
			if strings.HasPrefix(op.Name, dir+"/") {
				return syscall.EIO
			}
		}
		return nil
	})
}

// A commit is decided when its PrepareCommit record is durable: a crash
// before its markers are written does not undo it, the reopened Dir writes
// them (Kafka's coordinator resends the markers of the PrepareCommit
// transactions it loads).
func TestTxnCrashBetweenPrepareCommitAndMarkersCompletesOnReopen(t *testing.T) {
	for _, failing := range [][]string{{"/data/a-0", "/data/b-0"}, {"/data/b-0"}} {
		t.Run(strings.Join(failing, ","), func(t *testing.T) {
			fs, clock, d := openTxnDir(t)
			tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
			require.NoError(t, tp.Begin())
			produceTxn(t, tp, "x", a0, b0)
			var on atomic.Bool
			failWritesUnder(fs, &on, failing...)
			on.Store(true)
			require.NoError(t, tp.Commit(context.Background()), "the commit is decided once PrepareCommit is durable")
			tx, _ := d.Transactions()
			rec, _ := tx.Describe("t1")
			require.Equal(t, idempotence.TxnPrepareCommit, rec.State, "the markers could not all be written")
			require.Empty(t, values(t, d, "b", 0, ReadCommitted))

			crashed := fs.Crash(vfs.CrashOptions{})
			d2, err := OpenDir("/data", txnDirOptions(crashed, clock))
			require.NoError(t, err)
			defer d2.Close()
			for _, x := range []idempotence.TopicPartition{a0, b0} {
				require.Equal(t, []string{"x"}, values(t, d2, x.Topic, x.Partition, ReadCommitted), "%v", x)
			}
			tx2, err := d2.Transactions()
			require.NoError(t, err)
			rec, _ = tx2.Describe("t1")
			require.Equal(t, idempotence.TxnCompleteCommit, rec.State)

			// The transactional id goes on after the restart.
			tp2 := newTxnProducer(t, d2, "t1", TransactionalOptions{})
			require.NoError(t, tp2.Begin())
			produceTxn(t, tp2, "y", a0, b0)
			require.NoError(t, tp2.Commit(context.Background()))
			require.Equal(t, []string{"x", "y"}, values(t, d2, "b", 0, ReadCommitted))
		})
	}
}

// The coordinator aborts a transaction open past its
// timeout, with the epoch bumped; the producer learns it when it ends the
// transaction, and may go on after aborting.
func TestTxnHungTransactionAbortedAfterTimeout(t *testing.T) {
	_, clock, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{TransactionTimeout: time.Second})
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "hung", a0, b0)

	clock.advance(time.Second)
	require.NoError(t, d.Maintain())
	tx, _ := d.Transactions()
	rec, _ := tx.Describe("t1")
	require.Equal(t, idempotence.TxnOngoing, rec.State, "not past its timeout yet")

	clock.advance(time.Millisecond)
	require.NoError(t, d.Maintain())
	rec, _ = tx.Describe("t1")
	require.Equal(t, idempotence.TxnCompleteAbort, rec.State)
	for _, x := range []idempotence.TopicPartition{a0, b0} {
		p, _ := d.Partition(x.Topic, x.Partition)
		lso, err := p.LastStableOffset()
		require.NoError(t, err)
		require.Equal(t, int64(2), lso, "the ABORT marker released the last stable offset")
		require.Empty(t, values(t, d, x.Topic, x.Partition, ReadCommitted))
	}

	err := tp.Commit(context.Background())
	require.ErrorIs(t, err, idempotence.ErrProducerFenced, "the coordinator aborted it (KAFKA-20785)")
	require.NoError(t, tp.Abort(context.Background()), "an abort after the coordinator's is a retry of it")
	commitTxn(t, tp, "after", a0)
	require.Equal(t, []string{"after"}, values(t, d, "a", 0, ReadCommitted))
}

// A second producer with the same transactional id fences the first: the
// first's open transaction is aborted, its records are refused by the
// partitions (INVALID_PRODUCER_EPOCH) and its requests by the coordinator
// (PRODUCER_FENCED).
func TestTxnZombieFenced(t *testing.T) {
	_, _, d := openTxnDir(t)
	zombie := newTxnProducer(t, d, "t1", TransactionalOptions{})
	require.NoError(t, zombie.Begin())
	produceTxn(t, zombie, "zombie", a0)

	successor := newTxnProducer(t, d, "t1", TransactionalOptions{})
	require.Equal(t, zombie.producer.ProducerID, successor.producer.ProducerID)
	require.Equal(t, zombie.producer.Epoch+2, successor.producer.Epoch, "one bump to fence and abort, one for the new producer (T10)")
	require.Empty(t, values(t, d, "a", 0, ReadCommitted))
	require.Equal(t, int64(2), endOffset(t, d, "a", 0), "the zombie's open transaction was aborted")

	_, err := zombie.Produce(context.Background(), "a", 0, NewRecord(nil, []byte("late")))
	require.ErrorIs(t, err, idempotence.ErrInvalidProducerEpoch)
	require.ErrorIs(t, zombie.Commit(context.Background()), ErrTransactionAbortable)
	require.ErrorIs(t, zombie.Abort(context.Background()), idempotence.ErrProducerFenced)
	require.ErrorIs(t, zombie.Begin(), idempotence.ErrProducerFenced, "a fenced producer stays fenced")
	require.Equal(t, int64(2), endOffset(t, d, "a", 0), "nothing of the zombie's after the fence")

	commitTxn(t, successor, "successor", a0)
	require.Equal(t, []string{"successor"}, values(t, d, "a", 0, ReadCommitted))

	// A producer fenced between transactions learns it at its first
	// partition: the coordinator refuses to add it.
	require.NoError(t, successor.Begin())
	third := newTxnProducer(t, d, "t1", TransactionalOptions{})
	_, err = successor.Produce(context.Background(), "b", 0, NewRecord(nil, []byte("late")))
	require.ErrorIs(t, err, idempotence.ErrProducerFenced)
	require.ErrorIs(t, successor.Abort(context.Background()), idempotence.ErrProducerFenced)
	require.Equal(t, int64(0), endOffset(t, d, "b", 0))
	commitTxn(t, third, "third", b0)
	require.Equal(t, []string{"third"}, values(t, d, "b", 0, ReadCommitted))
}

// Bad requests to the coordinator get Kafka's errors and append nothing,
// neither to TransactionStateTopic nor to any partition.
func TestTxnBadRequestsAppendNothing(t *testing.T) {
	_, _, d := openTxnDir(t)
	tx, err := d.Transactions()
	require.NoError(t, err)
	pe, err := tx.InitProducerID("t1", time.Minute)
	require.NoError(t, err)
	stateEnd := func() int64 { return endOffset(t, d, TransactionStateTopic, 0) }
	before := stateEnd()

	_, err = tx.EndTxn("t1", pe, true)
	require.ErrorIs(t, err, idempotence.ErrInvalidTxnState, "commit with no transaction open (T13)")
	_, err = tx.EndTxn("nobody", pe, false)
	require.ErrorIs(t, err, idempotence.ErrInvalidProducerIDMapping, "unknown transactional id")
	require.ErrorIs(t, tx.AddPartitions("nobody", pe, a0), idempotence.ErrInvalidProducerIDMapping)
	require.ErrorIs(t, tx.AddPartitions("t1", idempotence.ProducerIDAndEpoch{ProducerID: pe.ProducerID, Epoch: pe.Epoch - 1}, a0),
		idempotence.ErrProducerFenced, "stale epoch (T14)")
	require.ErrorIs(t, tx.AddPartitions("t1", idempotence.ProducerIDAndEpoch{ProducerID: pe.ProducerID + 1, Epoch: pe.Epoch}, a0),
		idempotence.ErrInvalidProducerIDMapping, "wrong producer id (T14)")
	require.ErrorIs(t, tx.AddPartitions("t1", pe, idempotence.TopicPartition{Topic: "a", Partition: 9}), ErrUnknownPartition)
	_, err = tx.InitProducerID("", time.Minute)
	require.ErrorIs(t, err, idempotence.ErrInvalidRequest)
	_, err = tx.InitProducerID("t2", time.Hour)
	require.ErrorIs(t, err, idempotence.ErrInvalidTransactionTimeout)
	require.Equal(t, before, stateEnd())

	// EndTxn in the wrong state after a real transaction: a commit of an
	// aborted one (T11), at the aborted one's epoch, reads as a commit the
	// coordinator's own abort overtook, and is fenced (KAFKA-20785).
	require.NoError(t, tx.AddPartitions("t1", pe, a0))
	next, err := tx.EndTxn("t1", pe, false)
	require.NoError(t, err)
	require.Equal(t, pe.Epoch+1, next.Epoch, "every EndTxn bumps the epoch (KIP-890)")
	before, aEnd := stateEnd(), endOffset(t, d, "a", 0)
	_, err = tx.EndTxn("t1", pe, true)
	require.ErrorIs(t, err, idempotence.ErrProducerFenced)
	require.Equal(t, before, stateEnd())
	require.Equal(t, aEnd, endOffset(t, d, "a", 0))

	// The producer's own misuse.
	tp := newTxnProducer(t, d, "t3", TransactionalOptions{})
	require.ErrorIs(t, tp.Commit(context.Background()), ErrTransactionState)
	_, err = tp.Produce(context.Background(), "a", 0, NewRecord(nil, nil))
	require.ErrorIs(t, err, ErrTransactionState)
	require.NoError(t, tp.Begin())
	require.ErrorIs(t, tp.Begin(), ErrTransactionState)
	_, err = d.NewTransactionalProducer("t4", TransactionalOptions{ProducerOptions: ProducerOptions{DisableIdempotence: true}})
	require.ErrorIs(t, err, ErrInvalidOption)
}

// A producer that reinitialises with its producer id and epoch (KIP-360)
// gets the next epoch, or the same answer again if it repeats a call whose
// answer it lost; once another producer has taken the transactional id, it
// is PRODUCER_FENCED and nothing is written.
func TestTxnReinitProducerIDFencesAStaleProducer(t *testing.T) {
	_, _, d := openTxnDir(t)
	tx, err := d.Transactions()
	require.NoError(t, err)
	first, err := tx.InitProducerID("r", time.Minute)
	require.NoError(t, err)
	second, err := tx.ReinitProducerID("r", time.Minute, first)
	require.NoError(t, err)
	require.Equal(t, idempotence.ProducerIDAndEpoch{ProducerID: first.ProducerID, Epoch: first.Epoch + 1}, second)
	again, err := tx.ReinitProducerID("r", time.Minute, first)
	require.NoError(t, err)
	require.Equal(t, second, again, "a repeated call gets the answer it lost")

	successor, err := tx.InitProducerID("r", time.Minute)
	require.NoError(t, err)
	require.Equal(t, second.Epoch+1, successor.Epoch)
	before := endOffset(t, d, TransactionStateTopic, 0)
	_, err = tx.ReinitProducerID("r", time.Minute, second)
	require.ErrorIs(t, err, idempotence.ErrProducerFenced, "the fenced producer cannot take the id back")
	_, err = tx.ReinitProducerID("r", time.Minute, idempotence.ProducerIDAndEpoch{ProducerID: successor.ProducerID + 1, Epoch: successor.Epoch})
	require.ErrorIs(t, err, idempotence.ErrProducerFenced, "another producer id")
	require.Equal(t, before, endOffset(t, d, TransactionStateTopic, 0))
	rec, _ := tx.Describe("r")
	require.Equal(t, successor.Epoch, rec.ProducerEpoch)
}

// The coordinator rebuilt from TransactionStateTopic by a reopened Dir
// holds what the live one held (replay = live), whatever mix of commits,
// aborts, fences, timeouts and completions made it.
func TestTxnReopenReplaysCoordinator(t *testing.T) {
	fs, clock, d := openTxnDir(t)
	committed := newTxnProducer(t, d, "committed", TransactionalOptions{})
	commitTxn(t, committed, "c", a0, b0)

	aborted := newTxnProducer(t, d, "aborted", TransactionalOptions{})
	require.NoError(t, aborted.Begin())
	produceTxn(t, aborted, "a", a1)
	require.NoError(t, aborted.Abort(context.Background()))

	fenced := newTxnProducer(t, d, "fenced", TransactionalOptions{})
	require.NoError(t, fenced.Begin())
	produceTxn(t, fenced, "f", a0)
	newTxnProducer(t, d, "fenced", TransactionalOptions{})

	timedOut := newTxnProducer(t, d, "timed-out", TransactionalOptions{TransactionTimeout: time.Second})
	require.NoError(t, timedOut.Begin())
	produceTxn(t, timedOut, "t", b0)
	clock.advance(2 * time.Second)
	require.NoError(t, d.Maintain())

	open := newTxnProducer(t, d, "open", TransactionalOptions{})
	require.NoError(t, open.Begin())
	produceTxn(t, open, "o", a1)

	tx, _ := d.Transactions()
	live := tx.List()
	require.Len(t, live, 5)

	crashed := fs.Crash(vfs.CrashOptions{})
	d2, err := OpenDir("/data", txnDirOptions(crashed, clock))
	require.NoError(t, err)
	defer d2.Close()
	tx2, err := d2.Transactions()
	require.NoError(t, err)
	require.Equal(t, live, tx2.List())
	for _, rec := range tx2.List() {
		require.NotContains(t, []idempotence.TxnState{idempotence.TxnPrepareCommit, idempotence.TxnPrepareAbort}, rec.State,
			"%q has markers to write after the restart", rec.TransactionalID)
	}

	// The open transaction is still open after the restart, and times out.
	require.Empty(t, values(t, d2, "a", 1, ReadCommitted))
	clock.advance(2 * time.Minute)
	require.NoError(t, d2.Maintain())
	rec, _ := tx2.Describe("open")
	require.Equal(t, idempotence.TxnCompleteAbort, rec.State)
	require.Empty(t, values(t, d2, "a", 1, ReadCommitted))
	require.Equal(t, []string{"c"}, values(t, d2, "b", 0, ReadCommitted))
}

// fakeOffsets is a TxnOffsetCommitter in the way a group coordinator is
// one: it writes transactional offset records to its own partition and
// makes them count at the COMMIT marker.
type fakeOffsets struct {
	d *Dir

	mu        sync.Mutex
	staged    map[int64][]TxnOffset
	committed map[string]int64 // topic/partition -> offset
}

func (f *fakeOffsets) TxnOffsetsPartition(group string) (string, int32, error) {
	return "offsets", 0, nil
}

func (f *fakeOffsets) TxnOffsetCommit(_ context.Context, req TxnOffsetCommit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var recs []segment.Record
	for _, o := range req.Offsets {
		recs = append(recs, segment.Record{Timestamp: 1, Key: fmt.Appendf(nil, "%s/%s/%d", req.Group, o.Topic, o.Partition), Value: fmt.Append(nil, o.Offset)})
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{
		Producer:      &segment.ProducerFields{ID: req.Producer.ProducerID, Epoch: req.Producer.Epoch, BaseSequence: idempotence.NoSequence},
		Transactional: true,
	})
	if err != nil {
		return err
	}
	p, err := f.d.Partition("offsets", 0)
	if err != nil {
		return err
	}
	if _, err := p.AppendCoordinatorBatch(segment.Batch(b)); err != nil {
		return err
	}
	f.staged[req.Producer.ProducerID] = append(f.staged[req.Producer.ProducerID], req.Offsets...)
	return nil
}

func (f *fakeOffsets) WriteTxnMarker(_ context.Context, topic string, partition int32, marker segment.Batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := idempotence.InfoOf(marker)
	if err != nil {
		return err
	}
	p, err := f.d.Partition(topic, partition)
	if err != nil {
		return err
	}
	if _, err := p.AppendMarker(marker); err != nil {
		return err
	}
	if info.Marker.Type == idempotence.MarkerCommit {
		for _, o := range f.staged[info.ProducerID] {
			f.committed[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	}
	delete(f.staged, info.ProducerID)
	return nil
}

func TestTxnOffsetsCountOnlyWhenTheTransactionCommits(t *testing.T) {
	_, _, d := openTxnDir(t)
	require.NoError(t, d.CreateTopic("offsets", TopicConfig{Compact: Compacted}))
	f := &fakeOffsets{d: d, staged: map[int64][]TxnOffset{}, committed: map[string]int64{}}
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	commitOffset := func(offset int64) {
		require.NoError(t, tp.CommitOffsets(context.Background(), f, TxnOffsetCommit{Group: "g", Offsets: []TxnOffset{{Topic: "in", Partition: 0, Offset: offset}}}))
	}

	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "out-1", a0)
	commitOffset(1)
	require.NoError(t, tp.Abort(context.Background()))
	require.Empty(t, f.committed, "aborted with its output (T18)")

	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "out-1", a0)
	commitOffset(1)
	require.Empty(t, f.committed)
	require.Empty(t, values(t, d, "offsets", 0, ReadCommitted))
	require.NoError(t, tp.Commit(context.Background()))
	require.Equal(t, map[string]int64{"in/0": 1}, f.committed, "committed with its output (T19)")
	require.Equal(t, []string{"1"}, values(t, d, "offsets", 0, ReadCommitted))
	require.Equal(t, []string{"out-1"}, values(t, d, "a", 0, ReadCommitted))
}

// Transactional producers commit and abort at the same time, with
// ProduceAsync to partitions shared with each other, the coordinator's
// background tick running: ReadCommitted readers get exactly the records
// of the committed transactions, and no goroutine outlives the Dir's
// Close.
func TestTxnConcurrentProducersThenClose(t *testing.T) {
	before := runtime.NumGoroutine()
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaintenanceInterval = time.Millisecond
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("a", TopicConfig{Partitions: 3}))

	const producers, txns, perTxn = 4, 15, 4
	want := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range producers {
		tp, err := d.NewTransactionalProducer(fmt.Sprintf("p%d", i), TransactionalOptions{})
		require.NoError(t, err)
		wg.Go(func() {
			defer tp.Close()
			for j := range txns {
				if err := tp.Begin(); err != nil {
					t.Error(err)
					return
				}
				var values []string
				for k := range perTxn {
					v := fmt.Sprintf("p%d t%d r%d", i, j, k)
					values = append(values, v)
					if err := tp.ProduceAsync(context.Background(), "a", int32((i+k)%3), NewRecord(nil, []byte(v)), func(_ Produced, err error) {
						if err != nil {
							t.Error(err)
						}
					}); err != nil {
						t.Error(err)
						return
					}
				}
				end, commit := tp.Abort, j%3 != 0
				if commit {
					end = tp.Commit
				}
				if err := end(context.Background()); err != nil {
					t.Error(err)
					return
				}
				if commit {
					mu.Lock()
					for _, v := range values {
						want[v] = true
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	got := map[string]bool{}
	for p := range int32(3) {
		for _, v := range values(t, d, "a", p, ReadCommitted) {
			require.False(t, got[v], "%s read twice", v)
			got[v] = true
		}
	}
	require.Equal(t, want, got)
	require.NoError(t, d.Close())
	requireNoLeakedGoroutines(t, before)
}

// A coordinator's batch for a producer is checked for the producer's epoch
// and nothing else; a batch that is not a transactional data batch with a
// producer is refused. Refused batches append nothing.
func TestTxnAppendCoordinatorBatch(t *testing.T) {
	_, _, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	commitTxn(t, tp, "x", a0) // the partition's producer epoch is now the one after
	pe := tp.producer
	build := func(epoch int16, transactional bool) segment.Batch {
		b, err := segment.AppendBatch(nil, []segment.Record{{Timestamp: 1, Value: []byte("offsets")}}, segment.BuildOptions{
			Producer:      &segment.ProducerFields{ID: pe.ProducerID, Epoch: epoch, BaseSequence: idempotence.NoSequence},
			Transactional: transactional,
		})
		require.NoError(t, err)
		return b
	}
	p, err := d.Partition("a", 0)
	require.NoError(t, err)
	end := endOffset(t, d, "a", 0)
	_, err = p.AppendCoordinatorBatch(build(pe.Epoch-1, true))
	require.ErrorIs(t, err, idempotence.ErrInvalidProducerEpoch)
	_, err = p.AppendCoordinatorBatch(build(pe.Epoch, false))
	require.ErrorIs(t, err, idempotence.ErrInvalidRecord)
	require.Equal(t, end, endOffset(t, d, "a", 0))

	res, err := p.AppendCoordinatorBatch(build(pe.Epoch, true))
	require.NoError(t, err)
	lso, err := p.LastStableOffset()
	require.NoError(t, err)
	require.Equal(t, res.BaseOffset, lso, "the batch opened the producer's transaction on the partition")
}

// A producer that builds its own batches (idempotence.Sequencer's user, a
// Kafka client behind a server) writes to a transaction through
// Transactions.AppendBatch: the partition joins the transaction at the
// first batch (KIP-890), and a late batch of an ended transaction opens
// nothing (TransactionsTest in Kafka's core, KIP-890 part 2).
func TestTxnAppendBatchAddsPartitionsImplicitly(t *testing.T) {
	_, _, d := openTxnDir(t)
	tx, err := d.Transactions()
	require.NoError(t, err)
	pe, err := tx.InitProducerID("remote", time.Minute)
	require.NoError(t, err)
	batch := func(pe idempotence.ProducerIDAndEpoch, seq int32, value string) segment.Batch {
		b, err := segment.AppendBatch(nil, []segment.Record{{Timestamp: 1, Value: []byte(value)}}, segment.BuildOptions{
			Producer:      &segment.ProducerFields{ID: pe.ProducerID, Epoch: pe.Epoch, BaseSequence: seq},
			Transactional: true,
		})
		require.NoError(t, err)
		return b
	}
	pa, _ := d.Partition("a", 0)
	pb, _ := d.Partition("b", 0)
	_, err = tx.AppendBatch("remote", pa, batch(pe, 0, "x"))
	require.NoError(t, err)
	_, err = tx.AppendBatch("remote", pb, batch(pe, 0, "y"))
	require.NoError(t, err)
	_, err = tx.AppendBatch("remote", pa, batch(pe, 1, "z"))
	require.NoError(t, err)
	rec, _ := tx.Describe("remote")
	require.Equal(t, idempotence.TxnOngoing, rec.State)
	require.Equal(t, []idempotence.TopicPartition{a0, b0}, rec.Partitions)

	next, err := tx.EndTxn("remote", pe, true)
	require.NoError(t, err)
	require.Equal(t, pe.Epoch+1, next.Epoch, "EndTxn gives the next transaction's epoch (T16)")
	require.Equal(t, []string{"x", "z"}, values(t, d, "a", 0, ReadCommitted))
	require.Equal(t, []string{"y"}, values(t, d, "b", 0, ReadCommitted))

	// A late retry of the ended transaction's batch to a partition it never
	// reached: refused, and no transaction hangs there (T17).
	end := endOffset(t, d, "a", 1)
	pa1, _ := d.Partition("a", 1)
	_, err = tx.AppendBatch("remote", pa1, batch(pe, 0, "late"))
	require.ErrorIs(t, err, idempotence.ErrProducerFenced)
	require.Equal(t, end, endOffset(t, d, "a", 1))
	lso, err := pa1.LastStableOffset()
	require.NoError(t, err)
	require.Equal(t, end, lso)
}

// A record that fails makes its transaction abortable: Commit refuses it
// and leaves it open, Abort ends it, and none of its records is read.
func TestTxnFailedRecordMakesTransactionAbortable(t *testing.T) {
	_, _, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "ok", a0)
	_, err := tp.Produce(context.Background(), "b", 0, NewRecord(nil, make([]byte, DefaultMaxBatchBytes+1)))
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)
	err = tp.Commit(context.Background())
	require.ErrorIs(t, err, ErrTransactionAbortable)
	require.ErrorIs(t, err, segment.ErrBatchTooLarge, "the error names the record's failure")
	_, err = tp.Produce(context.Background(), "a", 1, NewRecord(nil, []byte("after the failure")))
	require.ErrorIs(t, err, ErrTransactionAbortable, "the transaction takes no more records")
	require.NoError(t, tp.Abort(context.Background()))
	require.Empty(t, values(t, d, "a", 0, ReadCommitted))
	require.Empty(t, values(t, d, "a", 1, ReadCommitted))

	commitTxn(t, tp, "next", a0)
	require.Equal(t, []string{"next"}, values(t, d, "a", 0, ReadCommitted))
}

// A Commit whose context ends while its records are appended returns the
// context's error and leaves the transaction open, to commit or abort.
func TestTxnCommitWithEndedContextLeavesTransactionOpen(t *testing.T) {
	_, _, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{ProducerOptions: ProducerOptions{Linger: time.Hour}})
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceAsync(context.Background(), "a", 0, NewRecord(nil, []byte("x")), nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, tp.Commit(ctx), context.Canceled)
	require.ErrorIs(t, tp.Begin(), ErrTransactionState, "still open")
	require.NoError(t, tp.Commit(context.Background()))
	require.Equal(t, []string{"x"}, values(t, d, "a", 0, ReadCommitted))

	// Also when every record is already appended, so that nothing is left
	// to wait for: an ended context never commits.
	tp2 := newTxnProducer(t, d, "t2", TransactionalOptions{})
	for i := range 20 {
		require.NoError(t, tp2.Begin())
		produceTxn(t, tp2, "y", a0)
		require.ErrorIs(t, tp2.Commit(ctx), context.Canceled, "attempt %d", i)
		require.NoError(t, tp2.Abort(context.Background()))
	}
	require.Equal(t, []string{"x"}, values(t, d, "a", 0, ReadCommitted))
}

// A transactional id idle for
// idempotence.DefaultTransactionalIDExpiration is removed (a tombstone in
// TransactionStateTopic, so also after a restart), and a producer with it
// later gets a new producer id.
func TestTxnIdleTransactionalIDExpires(t *testing.T) {
	fs, clock, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "idle", TransactionalOptions{})
	commitTxn(t, tp, "x", a0)
	old := tp.producer.ProducerID
	require.NoError(t, tp.Close())

	clock.advance(idempotence.DefaultTransactionalIDExpiration + time.Millisecond)
	require.NoError(t, d.Maintain())
	tx, _ := d.Transactions()
	_, ok := tx.Describe("idle")
	require.False(t, ok)

	d2, err := OpenDir("/data", txnDirOptions(fs.Crash(vfs.CrashOptions{}), clock))
	require.NoError(t, err)
	defer d2.Close()
	tx2, err := d2.Transactions()
	require.NoError(t, err)
	_, ok = tx2.Describe("idle")
	require.False(t, ok, "the tombstone replays")
	pe, err := tx2.InitProducerID("idle", time.Minute)
	require.NoError(t, err)
	require.NotEqual(t, old, pe.ProducerID)
	require.Zero(t, pe.Epoch)
}

// TestCrashDuringTransactions cuts the power before every file-system
// operation of a run that creates topics and commits, aborts and commits
// transactions over three partitions. The reopened Dir must show each
// transaction in all its partitions or in none, never the aborted one,
// every one whose Commit returned, and take a new transaction.
func TestCrashDuringTransactions(t *testing.T) {
	parts := []idempotence.TopicPartition{a0, a1, b0}
	quiet := func(fs vfs.FS) DirOptions {
		opts := dirOptions(fs)
		opts.Logger = slog.New(slog.DiscardHandler)
		return opts
	}
	script := func(fs *vfs.MemFS, acked *[]string) {
		d, err := OpenDir("/data", quiet(fs))
		if err != nil {
			return
		}
		defer d.Close()
		if d.CreateTopic("a", TopicConfig{Partitions: 2}) != nil || d.CreateTopic("b", TopicConfig{}) != nil {
			return
		}
		tp, err := d.NewTransactionalProducer("t", TransactionalOptions{})
		if err != nil {
			return
		}
		defer tp.Close()
		for _, v := range []string{"t1", "t2", "t3"} {
			if tp.Begin() != nil {
				return
			}
			for _, x := range parts {
				if _, err := tp.Produce(context.Background(), x.Topic, x.Partition, NewRecord(nil, []byte(v))); err != nil {
					return
				}
			}
			if v == "t2" {
				if tp.Abort(context.Background()) != nil {
					return
				}
				continue
			}
			if tp.Commit(context.Background()) != nil {
				return
			}
			*acked = append(*acked, v)
		}
	}
	var acked []string
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, &acked) })
	require.Equal(t, []string{"t1", "t3"}, acked)

	for stop := 0; stop < total; stop++ {
		var acked []string
		after := crashedAt(t, stop, 17, func(fs *vfs.MemFS) { script(fs, &acked) })
		msg := fmt.Sprintf("stop %d of %d", stop, total)
		d, err := OpenDir("/data", quiet(after))
		require.NoError(t, err, msg)
		seen := map[string]int{}
		for _, x := range parts {
			p, err := d.Partition(x.Topic, x.Partition)
			if errors.Is(err, ErrUnknownTopic) {
				continue
			}
			require.NoError(t, err, msg)
			for r, err := range p.Records(0, ReadCommitted) {
				require.NoError(t, err, msg)
				seen[string(r.Value)]++
			}
		}
		for v, n := range seen {
			require.Equal(t, len(parts), n, "%s: transaction %s is in %d of its %d partitions", msg, v, n, len(parts))
		}
		require.Zero(t, seen["t2"], "%s: the aborted transaction is read", msg)
		for _, v := range acked {
			require.Equal(t, len(parts), seen[v], "%s: committed transaction %s lost", msg, v)
		}
		if _, err := d.TopicConfig("b"); err == nil {
			tp, err := d.NewTransactionalProducer("t", TransactionalOptions{})
			require.NoError(t, err, msg)
			require.NoError(t, tp.Begin(), msg)
			_, err = tp.Produce(context.Background(), "b", 0, NewRecord(nil, []byte("after")))
			require.NoError(t, err, msg)
			require.NoError(t, tp.Commit(context.Background()), msg)
			require.NoError(t, tp.Close(), msg)
		}
		require.NoError(t, d.Close(), msg)
	}
}

// TransactionStateTopic is compacted and never loses records to a
// retention the Dir's defaults give other topics (Kafka's
// __transaction_state is cleanup.policy=compact).
func TestTxnStateTopicHasNoRetention(t *testing.T) {
	opts := dirOptions(newMemFS(t))
	opts.Defaults.Retention = Retention{Age: time.Hour, Bytes: 1 << 20}
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	_, err = d.Transactions()
	require.NoError(t, err)
	cfg, err := d.TopicConfig(TransactionStateTopic)
	require.NoError(t, err)
	require.Equal(t, Compacted, cfg.Compact)
	require.Equal(t, Retention{Age: Unlimited, Bytes: Unlimited}, cfg.Retention)
	require.Equal(t, FsyncAlways(), cfg.Fsync)
}

// Markers that could not be written are written again: by the next
// request of the transactional id, which would otherwise get
// CONCURRENT_TRANSACTIONS, or by Maintain.
func TestTxnMarkersWrittenAgainAfterAFailure(t *testing.T) {
	for _, by := range []string{"next transaction", "Maintain"} {
		t.Run(by, func(t *testing.T) {
			fs, _, d := openTxnDir(t)
			tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
			require.NoError(t, tp.Begin())
			produceTxn(t, tp, "x", a0, b0)
			var failing atomic.Bool
			fs.SetHook(func(op vfs.Op) error {
				if failing.Load() && op.Kind == vfs.OpWrite && strings.HasPrefix(op.Name, "/data/b-0/") {
					return syscall.ENOSPC
				}
				return nil
			})
			failing.Store(true)
			require.NoError(t, tp.Commit(context.Background()))
			tx, _ := d.Transactions()
			rec, _ := tx.Describe("t1")
			require.Equal(t, idempotence.TxnPrepareCommit, rec.State)
			require.Empty(t, values(t, d, "b", 0, ReadCommitted))
			failing.Store(false)

			if by == "Maintain" {
				require.NoError(t, d.Maintain())
			} else {
				commitTxn(t, tp, "y", a1)
			}
			rec, _ = tx.Describe("t1")
			require.Equal(t, idempotence.TxnCompleteCommit, rec.State)
			require.Equal(t, []string{"x"}, values(t, d, "b", 0, ReadCommitted))
			require.Equal(t, []string{"x"}, values(t, d, "a", 0, ReadCommitted))
		})
	}
}

// Each transition is a record of TransactionStateTopic, in Kafka's
// __transaction_state bytes, written before it takes effect; a commit
// writes PrepareCommit before its markers and CompleteCommit after them.
func TestTxnTransitionsAreRecordsOfTheStateTopic(t *testing.T) {
	_, _, d := openTxnDir(t)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	commitTxn(t, tp, "x", a0, b0)
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "y", a1)
	require.NoError(t, tp.Close(), "Close aborts the open transaction")
	require.Equal(t, int64(2), endOffset(t, d, "a", 1), "its record and the ABORT marker")

	p, err := d.Partition(TransactionStateTopic, 0)
	require.NoError(t, err)
	var states []string
	for r, err := range p.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		rec, err := idempotence.UnmarshalTxnRecord(r.Key, r.Value)
		require.NoError(t, err)
		require.Equal(t, "t1", rec.TransactionalID)
		states = append(states, fmt.Sprintf("%v %d %v", rec.State, rec.ProducerEpoch, rec.Partitions))
	}
	require.Equal(t, []string{
		"Empty 0 []",
		"Ongoing 0 [a-0]",
		"Ongoing 0 [a-0 b-0]",
		"PrepareCommit 1 [a-0 b-0]",
		"CompleteCommit 1 []",
		"Ongoing 1 [a-1]",
		"PrepareAbort 2 [a-1]",
		"CompleteAbort 2 []",
	}, states)
}

// TestTxnListAndProducers: Transactions.List returns every transactional
// id's state, by id; Partition.Producers each producer the partition
// knows, with where its open transaction starts.
func TestTxnListAndProducers(t *testing.T) {
	_, _, d := openTxnDir(t)
	done := newTxnProducer(t, d, "done", TransactionalOptions{})
	commitTxn(t, done, "x", a0)
	open := newTxnProducer(t, d, "open", TransactionalOptions{})
	require.NoError(t, open.Begin())
	produceTxn(t, open, "y", a0)

	tx, err := d.Transactions()
	require.NoError(t, err)
	var states []string
	for _, rec := range tx.List() {
		states = append(states, rec.TransactionalID+"="+rec.State.String())
	}
	require.Equal(t, []string{"done=CompleteCommit", "open=Ongoing"}, states)

	p, err := d.Partition("a", 0)
	require.NoError(t, err)
	producers, err := p.Producers()
	require.NoError(t, err)
	require.Len(t, producers, 2)
	openRec, _ := tx.Describe("open")
	doneRec, _ := tx.Describe("done")
	starts := map[int64]int64{}
	for _, e := range producers {
		starts[e.ProducerID] = e.TxnFirstOffset
	}
	// "x" at 0, its COMMIT marker at 1, "y" at 2.
	require.Equal(t, map[int64]int64{doneRec.ProducerID: -1, openRec.ProducerID: 2}, starts)
}
