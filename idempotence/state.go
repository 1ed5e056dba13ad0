package idempotence

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// DefaultProducerIDExpiration is Kafka's producer.id.expiration.ms default
// (KIP-854): one day.
const DefaultProducerIDExpiration = 24 * time.Hour

// Config configures a State.
type Config struct {
	// ProducerIDExpiration is how long after its last batch or marker a
	// producer without an open transaction is forgotten
	// (producer.id.expiration.ms). Zero means
	// DefaultProducerIDExpiration.
	ProducerIDExpiration time.Duration
}

func (o Config) withDefaults() (Config, error) {
	switch {
	case o.ProducerIDExpiration == 0:
		o.ProducerIDExpiration = DefaultProducerIDExpiration
	case o.ProducerIDExpiration < time.Millisecond:
		return o, fmt.Errorf("idempotence: Config.ProducerIDExpiration is %v, want at least 1ms", o.ProducerIDExpiration)
	}
	return o, nil
}

// Origin says who is appending a batch, which decides how much of it is
// checked (Kafka's AppendOrigin).
type Origin uint8

const (
	// OriginClient is a producer's batch: every rule applies.
	OriginClient Origin = iota
	// OriginReplication is a batch the leader already validated, copied by
	// a follower or replayed from the log on recovery: nothing is
	// rejected, the state is only rebuilt.
	OriginReplication
	// OriginCoordinator is a batch written by a coordinator: transaction
	// markers, and a group coordinator's transactional offset commits.
	// Epochs are checked, sequences are not (they carry none).
	OriginCoordinator
)

// BatchInfo is what producer state needs from a batch header, with the
// offsets the log assigned it. InfoOf fills it from a segment.Batch.
type BatchInfo struct {
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	BaseOffset    int64
	LastOffset    int64
	MaxTimestamp  int64
	Transactional bool
	Control       bool
	// Marker is the end-transaction marker of a control batch, nil for a
	// data batch or an empty control batch (one whose record compaction
	// removed).
	Marker *Marker
}

// LastSequence returns the sequence of the batch's last record.
func (b *BatchInfo) LastSequence() int32 {
	if b.BaseSequence == NoSequence {
		return NoSequence
	}
	return IncrementSequence(b.BaseSequence, int32(b.LastOffset-b.BaseOffset))
}

// CompletedTxn is a transaction that a marker ended on this partition.
type CompletedTxn struct {
	ProducerID  int64
	FirstOffset int64 // offset of the transaction's first batch here
	LastOffset  int64 // offset of the marker
	Aborted     bool
	// LastStableOffset is the partition's last stable offset once this
	// transaction completes: the first offset of the oldest transaction
	// of another producer still open, or LastOffset+1. Kafka stores it
	// beside an aborted transaction in the .txnindex.
	LastStableOffset int64
}

// ErrStaleAppend means Commit was given an Append that Validate returned
// before another Append was committed or the state was reset: its checks no
// longer hold, and the log must validate its batches again.
var ErrStaleAppend = errors.New("idempotence: append validated against an older producer state")

// State is the producer state of one partition (the in-memory part of
// Kafka's ProducerStateManager): for each producer its epoch and last
// batches, the open transactions and those completed but not yet below the
// high watermark. It is not safe for concurrent use; the log calls it under
// the lock that orders its appends.
//
// The log calls Validate with the batches of one append, at the offsets it
// is about to give them, and then, if Validate found no duplicate and no
// error, writes them and calls Commit.
type State struct {
	opts      Config
	producers map[int64]*Entry
	// ongoing are the open transactions by first offset, ascending.
	ongoing []txn
	// unreplicated are completed transactions whose marker is not yet
	// below the high watermark, by first offset, ascending.
	unreplicated []txn
	mapEnd       int64 // offset after the last batch applied (lastMapOffset)
	lastSnap     int64 // offset of the newest snapshot taken or loaded
	gen          uint64
}

type txn struct {
	producerID  int64
	firstOffset int64
	lastOffset  int64 // the marker's offset, once completed
}

// NewState returns the empty state of a partition whose log ends at
// logEndOffset.
func NewState(logEndOffset int64, opts Config) (*State, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// gen starts at 1 so that the zero Append, which Validate returns
	// with an error, is never committed.
	return &State{opts: opts, producers: map[int64]*Entry{}, mapEnd: logEndOffset, lastSnap: logEndOffset, gen: 1}, nil
}

// NewStateOf returns the state of a partition whose log ends at
// logEndOffset and whose producers are entries, as Log.Producers returns
// them: the state a replication leader keeps ahead of its log, so that it
// checks each producer's batch before it hands the append out (package
// replica). Entries are copied; an entry with a transaction open opens it
// in the state too.
func NewStateOf(logEndOffset int64, entries []Entry, opts Config) (*State, error) {
	s, err := NewState(logEndOffset, opts)
	if err != nil {
		return nil, err
	}
	for i := range entries {
		s.load(entries[i].clone())
	}
	return s, nil
}

// Append is the change one append makes to a State, computed by Validate
// and applied by Commit. It holds only what the append changes: for each
// producer it touches, the epoch, coordinator epoch, timestamp and
// transaction its entry will have and the batches it adds. Validate checks
// against the state's entries as they are, so that it copies none of
// them, and an Append never committed leaves no trace in the state.
type Append struct {
	// Duplicate, when not nil, is the retained batch the append's batch
	// repeats: the log appends nothing and answers with its offsets.
	Duplicate *BatchMetadata

	gen        uint64
	lastOffset int64
	// first is the change to the first producer the append touches and
	// more those to the others: an append rarely touches more than one,
	// so the common one costs no allocation.
	first     change
	touched   bool // first is in use
	more      []change
	started   []txn
	completed []CompletedTxn
}

// change is what an append changes in one producer's entry: the fields
// Validate checks the append's later batches against, as they will be,
// and the batches it retains.
type change struct {
	// entry is the producer's entry in the state, nil for a producer the
	// state does not know.
	entry            *Entry
	id               int64
	lastTimestamp    int64
	txnFirstOffset   int64
	coordinatorEpoch int32
	epoch            int16
	// dropped says the entry's retained batches are forgotten: the
	// append moved the producer to another epoch.
	dropped bool
	// added[:n] are the batches the append retains, oldest first.
	n     int
	added [NumBatchesToRetain]BatchMetadata
}

// newChange returns the change, still empty, to producer id's entry e, nil
// if the state does not know the producer.
func newChange(e *Entry, id int64) change {
	from := e
	if e == nil {
		n := newEntry(id)
		from = &n
	}
	return change{entry: e, id: id, epoch: from.Epoch, coordinatorEpoch: from.CoordinatorEpoch,
		lastTimestamp: from.LastTimestamp, txnFirstOffset: from.TxnFirstOffset}
}

// lastSeq returns the last sequence of the newest batch the producer will
// have retained, or NoSequence.
func (c *change) lastSeq() int32 {
	switch {
	case c.n > 0:
		return c.added[c.n-1].LastSeq
	case c.dropped || c.entry == nil:
		return NoSequence
	}
	return c.entry.LastSeq()
}

// setEpoch moves the producer to epoch; batches of another epoch can no
// longer be retried, so they are forgotten (maybeUpdateProducerEpoch).
func (c *change) setEpoch(epoch int16) {
	if c.epoch != epoch {
		c.epoch, c.dropped, c.n = epoch, true, 0
	}
}

// addBatch records a batch appended at epoch; of the append's batches only
// the newest NumBatchesToRetain can be retained.
func (c *change) addBatch(epoch int16, b BatchMetadata) {
	c.setEpoch(epoch)
	if c.n == len(c.added) {
		copy(c.added[:], c.added[1:])
		c.n--
	}
	c.added[c.n] = b
	c.n++
	c.lastTimestamp = b.Timestamp
}

// apply makes the change to e, the producer's entry, evicting the oldest
// retained batches beyond NumBatchesToRetain.
func (c *change) apply(e *Entry) {
	e.Epoch, e.CoordinatorEpoch, e.LastTimestamp, e.TxnFirstOffset = c.epoch, c.coordinatorEpoch, c.lastTimestamp, c.txnFirstOffset
	if c.dropped {
		e.Batches = e.Batches[:0]
	}
	for _, b := range c.added[:c.n] {
		if len(e.Batches) == NumBatchesToRetain {
			e.Batches = append(e.Batches[:0], e.Batches[1:]...)
		}
		e.Batches = append(e.Batches, b)
	}
}

// Validate checks the batches of one append, in order, against the state
// and against each other (UnifiedLog.analyzeAndValidateProducerState), and
// returns the change to commit once they are written. Batches without a
// producer id are not checked, except that a client may not write a control
// batch. The state is not changed.
//
// For OriginClient, a batch that repeats one of its producer's last five
// batches exactly (same epoch, same first and last sequence) makes
// Validate return at once with Append.Duplicate set: the request succeeds
// with the original offsets and nothing is appended. Errors wrap one of the
// Kafka errors: ErrInvalidRecord (a control batch or a negative sequence
// from a client), ErrInvalidProducerEpoch, ErrOutOfOrderSequence,
// ErrInvalidTxnState, ErrTransactionCoordinatorFenced.
func (s *State) Validate(origin Origin, batches ...BatchInfo) (Append, error) {
	a := Append{gen: s.gen, lastOffset: s.mapEnd - 1}
	for i := range batches {
		b := &batches[i]
		if b.LastOffset > a.lastOffset {
			a.lastOffset = b.LastOffset
		}
		if origin == OriginClient {
			if err := checkClientBatch(b); err != nil {
				return Append{}, err
			}
		}
		if b.ProducerID < 0 {
			continue
		}
		cur := s.producers[b.ProducerID]
		if origin == OriginClient && cur != nil {
			if dup, ok := cur.duplicateOf(b.ProducerEpoch, b.BaseSequence, b.LastSequence()); ok {
				d := dup // on the heap only when returned
				return Append{Duplicate: &d, gen: s.gen}, nil
			}
		}
		u := a.change(cur, b.ProducerID)
		// Kafka accepts any sequence from a producer it had no state for
		// when the append began (KIP-360), for every batch of the append.
		unknown := cur == nil || cur.Epoch == NoProducerEpoch
		var err error
		if b.Control {
			err = a.appendMarker(u, b, origin)
		} else {
			err = a.appendData(u, b, origin, unknown)
		}
		if err != nil {
			return Append{}, err
		}
	}
	return a, nil
}

// change returns the append's change to producer id, whose entry in the
// state is cur, adding an empty one if the append has none yet.
func (a *Append) change(cur *Entry, id int64) *change {
	if !a.touched {
		a.first, a.touched = newChange(cur, id), true
		return &a.first
	}
	if a.first.id == id {
		return &a.first
	}
	for i := range a.more {
		if a.more[i].id == id {
			return &a.more[i]
		}
	}
	a.more = append(a.more, newChange(cur, id))
	return &a.more[len(a.more)-1]
}

// checkClientBatch applies LogValidator's rules for a producer's batch that
// concern producer state. A control batch is refused whatever its producer
// id.
func checkClientBatch(b *BatchInfo) error {
	switch {
	case b.Control:
		return fmt.Errorf("%w: clients may not write control batches (producer %d, offset %d)",
			ErrInvalidRecord, b.ProducerID, b.BaseOffset)
	case b.ProducerID >= 0 && b.BaseSequence < 0:
		return fmt.Errorf("%w: sequence %d in a batch of producer %d at offset %d",
			ErrInvalidRecord, b.BaseSequence, b.ProducerID, b.BaseOffset)
	}
	return nil
}

// appendData checks a data batch and records it in u
// (ProducerAppendInfo.appendDataBatch).
func (a *Append) appendData(u *change, b *BatchInfo, origin Origin, unknown bool) error {
	if err := checkEpoch(u, b, origin); err != nil {
		return err
	}
	if origin == OriginClient {
		if err := checkSequence(u, b, unknown); err != nil {
			return err
		}
	}
	if u.txnFirstOffset >= 0 && !b.Transactional {
		return fmt.Errorf("%w: producer %d has a transaction open since offset %d but its batch at offset %d is not transactional",
			ErrInvalidTxnState, b.ProducerID, u.txnFirstOffset, b.BaseOffset)
	}
	u.addBatch(b.ProducerEpoch, BatchMetadata{
		LastSeq:     b.LastSequence(),
		LastOffset:  b.LastOffset,
		OffsetDelta: int32(b.LastOffset - b.BaseOffset),
		Timestamp:   b.MaxTimestamp,
	})
	if u.txnFirstOffset < 0 && b.Transactional {
		u.txnFirstOffset = b.BaseOffset
		a.started = append(a.started, txn{producerID: b.ProducerID, firstOffset: b.BaseOffset, lastOffset: -1})
	}
	return nil
}

// appendMarker checks a transaction marker and records it in u
// (ProducerAppendInfo.appendEndTxnMarker).
func (a *Append) appendMarker(u *change, b *BatchInfo, origin Origin) error {
	if b.Marker == nil {
		// Compaction removed the marker's record along with the whole
		// transaction: nothing to apply.
		return nil
	}
	if err := checkEpoch(u, b, origin); err != nil {
		return err
	}
	if u.coordinatorEpoch > b.Marker.CoordinatorEpoch && origin != OriginReplication {
		return fmt.Errorf("%w: marker for producer %d at offset %d has coordinator epoch %d, older than %d",
			ErrTransactionCoordinatorFenced, b.ProducerID, b.BaseOffset, b.Marker.CoordinatorEpoch, u.coordinatorEpoch)
	}
	// A marker for a producer with no data here completes nothing: it
	// moves neither the last stable offset nor the .txnindex.
	if u.txnFirstOffset >= 0 {
		a.completed = append(a.completed, CompletedTxn{
			ProducerID:  b.ProducerID,
			FirstOffset: u.txnFirstOffset,
			LastOffset:  b.BaseOffset,
			Aborted:     b.Marker.Type == MarkerAbort,
		})
	}
	u.setEpoch(b.ProducerEpoch)
	u.coordinatorEpoch = b.Marker.CoordinatorEpoch
	u.txnFirstOffset = -1
	u.lastTimestamp = b.MaxTimestamp
	return nil
}

// checkEpoch rejects a batch older than the producer's epoch, except from
// replication, where the leader already accepted it
// (ProducerAppendInfo.checkProducerEpoch).
func checkEpoch(u *change, b *BatchInfo, origin Origin) error {
	if b.ProducerEpoch < u.epoch && origin != OriginReplication {
		return fmt.Errorf("%w: producer %d at offset %d has epoch %d, older than its current epoch %d",
			ErrInvalidProducerEpoch, b.ProducerID, b.BaseOffset, b.ProducerEpoch, u.epoch)
	}
	return nil
}

// checkSequence applies Kafka's sequence rule
// (ProducerAppendInfo.checkSequence): a new epoch starts at 0 unless the
// producer was unknown; within an epoch the first sequence follows the
// last retained one, or anything goes for a producer that was unknown when
// the append began.
func checkSequence(u *change, b *BatchInfo, unknown bool) error {
	if b.ProducerEpoch != u.epoch {
		if b.BaseSequence != 0 && u.epoch != NoProducerEpoch {
			return fmt.Errorf("%w: producer %d at offset %d starts epoch %d at sequence %d, want 0 (current epoch %d)",
				ErrOutOfOrderSequence, b.ProducerID, b.BaseOffset, b.ProducerEpoch, b.BaseSequence, u.epoch)
		}
		return nil
	}
	last := u.lastSeq()
	if !unknown && !inSequence(last, b.BaseSequence) {
		return fmt.Errorf("%w: producer %d at offset %d sent sequence %d, want the one after %d",
			ErrOutOfOrderSequence, b.ProducerID, b.BaseOffset, b.BaseSequence, last)
	}
	return nil
}

// Commit applies a, which Validate returned, once the log has written its
// batches (ProducerStateManager.update, completeTxn, updateMapEndOffset). It
// returns the transactions the append completed, in order, each with the
// last stable offset to store beside an aborted one in the .txnindex.
// Committing an Append whose Duplicate is set does nothing. Commit fails
// with ErrStaleAppend if the state changed after Validate, or if a is not
// an Append Validate returned without error.
func (s *State) Commit(a Append) ([]CompletedTxn, error) {
	if a.gen != s.gen {
		return nil, ErrStaleAppend
	}
	if a.Duplicate != nil {
		return nil, nil
	}
	s.gen++
	if a.touched {
		s.apply(&a.first)
	}
	for i := range a.more {
		s.apply(&a.more[i])
	}
	for _, t := range a.started {
		s.ongoing = insertTxn(s.ongoing, t)
	}
	completed := slices.Clone(a.completed)
	for i := range completed {
		c := &completed[i]
		c.LastStableOffset = s.lastStableOffsetAfter(c)
		s.complete(c)
	}
	if a.lastOffset+1 > s.mapEnd {
		s.mapEnd = a.lastOffset + 1
	}
	return completed, nil
}

// apply makes change c to its producer's entry, adding the entry if the
// state has none. The entry is still the one Validate saw: Commit checked
// that the state did not change since.
func (s *State) apply(c *change) {
	e := c.entry
	if e == nil {
		e = &Entry{ProducerID: c.id, Batches: make([]BatchMetadata, 0, NumBatchesToRetain)}
		s.producers[c.id] = e
	}
	c.apply(e)
}

// lastStableOffsetAfter returns the last stable offset once c completes
// (ProducerStateManager.lastStableOffset): the first offset of the oldest
// open transaction of another producer, or the offset after the marker.
func (s *State) lastStableOffsetAfter(c *CompletedTxn) int64 {
	for _, t := range s.ongoing {
		if t.producerID != c.ProducerID {
			return t.firstOffset
		}
	}
	return c.LastOffset + 1
}

// complete moves a transaction from open to completed-but-unreplicated
// (ProducerStateManager.completeTxn).
func (s *State) complete(c *CompletedTxn) {
	i := slices.IndexFunc(s.ongoing, func(t txn) bool { return t.firstOffset == c.FirstOffset })
	if i < 0 {
		// Only possible if a snapshot and the log disagree; Kafka throws.
		// The marker still ends the producer's transaction in its entry.
		return
	}
	t := s.ongoing[i]
	s.ongoing = slices.Delete(s.ongoing, i, i+1)
	t.lastOffset = c.LastOffset
	s.unreplicated = insertTxn(s.unreplicated, t)
}

func insertTxn(ts []txn, t txn) []txn {
	i, _ := slices.BinarySearchFunc(ts, t.firstOffset, func(x txn, off int64) int {
		switch {
		case x.firstOffset < off:
			return -1
		case x.firstOffset > off:
			return 1
		}
		return 0
	})
	return slices.Insert(ts, i, t)
}

// NeedsVerification reports whether b is the first transactional batch of
// its producer's transaction on this partition, which the partition leader
// must not append before the transaction coordinator knows the partition
// is in the transaction (KIP-890: under transactions version 2 the leader
// adds it, with TxnCoordinator.AddPartitions; otherwise it asks the
// coordinator to verify). Without that check a late batch of a finished
// transaction would open a transaction no coordinator will ever end, and
// hold the last stable offset back for good.
func (s *State) NeedsVerification(b BatchInfo) bool {
	if !b.Transactional || b.Control || b.ProducerID < 0 {
		return false
	}
	e, ok := s.producers[b.ProducerID]
	return !ok || e.TxnFirstOffset < 0
}

// Producer returns a copy of the state of producer id.
func (s *State) Producer(id int64) (Entry, bool) {
	e, ok := s.producers[id]
	if !ok {
		return Entry{}, false
	}
	return e.clone(), true
}

// Producers returns a copy of every producer's state, by producer id.
func (s *State) Producers() []Entry {
	out := make([]Entry, 0, len(s.producers))
	for _, e := range s.producers {
		out = append(out, e.clone())
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
	return out
}

// MapEndOffset returns the offset after the last batch the state has seen:
// where a log replaying into it must continue.
func (s *State) MapEndOffset() int64 { return s.mapEnd }

// FirstUnstableOffset returns the first offset a read-committed reader may
// not pass: the first offset of the oldest open transaction or of the oldest
// completed one whose marker is not yet below the high watermark.
func (s *State) FirstUnstableOffset() (int64, bool) {
	var first int64 = -1
	if len(s.ongoing) > 0 {
		first = s.ongoing[0].firstOffset
	}
	if len(s.unreplicated) > 0 && (first < 0 || s.unreplicated[0].firstOffset < first) {
		first = s.unreplicated[0].firstOffset
	}
	return first, first >= 0
}

// LastStableOffset returns the partition's last stable offset for high
// watermark hw: the first unstable offset if it is below hw, else hw.
func (s *State) LastStableOffset(hw int64) int64 {
	if f, ok := s.FirstUnstableOffset(); ok && f < hw {
		return f
	}
	return hw
}

// LateTransactionBuffer is how long past the maximum transaction timeout
// an open transaction's producer may stay silent before the transaction is
// late (ProducerStateManager.LATE_TRANSACTION_BUFFER_MS).
const LateTransactionBuffer = 5 * time.Minute

// HasLateTransaction reports whether the producer of the oldest open
// transaction has been silent, at now, for longer than
// maxTransactionTimeout plus LateTransactionBuffer: the coordinator should
// have aborted it long ago, so it is hanging and holds the last stable
// offset back (Kafka's PartitionsWithLateTransactionsCount metric).
func (s *State) HasLateTransaction(now time.Time, maxTransactionTimeout time.Duration) bool {
	nowMs := now.UnixMilli()
	if len(s.ongoing) == 0 {
		return false
	}
	e, ok := s.producers[s.ongoing[0].producerID]
	return ok && e.LastTimestamp > 0 && nowMs-e.LastTimestamp > (maxTransactionTimeout+LateTransactionBuffer).Milliseconds()
}

// OnHighWatermark tells the state the high watermark moved to hw:
// completed transactions whose marker is below it stop holding the last
// stable offset back (onHighWatermarkUpdated).
func (s *State) OnHighWatermark(hw int64) { s.dropUnreplicatedBelow(hw) }

// OnLogStartOffset tells the state the log now starts at offset
// (onLogStartOffsetIncremented).
func (s *State) OnLogStartOffset(offset int64) {
	s.dropUnreplicatedBelow(offset)
	if s.mapEnd < offset {
		s.mapEnd = offset
	}
}

func (s *State) dropUnreplicatedBelow(offset int64) {
	s.unreplicated = slices.DeleteFunc(s.unreplicated, func(t txn) bool { return t.lastOffset < offset })
}

// expired reports whether e has been idle for the expiration at nowMs
// (isProducerExpired). A producer with an open transaction never expires:
// the transaction would hold the last stable offset forever.
func (s *State) expired(e *Entry, nowMs int64) bool {
	return e.TxnFirstOffset < 0 && nowMs-e.LastTimestamp >= s.opts.ProducerIDExpiration.Milliseconds()
}

// RemoveExpired forgets the producers idle for the expiration at now
// (removeExpiredProducers). A forgotten producer's next batch is accepted
// with any sequence, as a new producer's is.
func (s *State) RemoveExpired(now time.Time) {
	nowMs := now.UnixMilli()
	for id, e := range s.producers {
		if s.expired(e, nowMs) {
			delete(s.producers, id)
		}
	}
	s.gen++
}

// Reset empties the state for a log that now starts, and ends, at offset
// (truncateFullyAndStartAt, without the snapshot files: see
// DeleteSnapshots).
func (s *State) Reset(offset int64) {
	clear(s.producers)
	s.ongoing, s.unreplicated = nil, nil
	s.mapEnd, s.lastSnap = offset, offset
	s.gen++
}

// load adds an entry read from a snapshot (loadProducerEntry).
func (s *State) load(e Entry) {
	s.producers[e.ProducerID] = &e
	if e.TxnFirstOffset >= 0 {
		s.ongoing = insertTxn(s.ongoing, txn{producerID: e.ProducerID, firstOffset: e.TxnFirstOffset, lastOffset: -1})
	}
}
