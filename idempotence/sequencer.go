package idempotence

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// MaxInFlight is how many batches a partition may have in flight at once
// with idempotence: Kafka's producer refuses max.in.flight.requests.per.
// connection above 5 because the partition recognises only the last five
// batches of a producer as duplicates.
const MaxInFlight = 5

// ErrWait means a partition can take no new batch now: it has MaxInFlight
// batches in flight, or it must wait for those it has before it starts the
// producer's new epoch (Kafka's RecordAccumulator stops draining such a
// partition). Send again once an answer came.
var ErrWait = errors.New("idempotence: partition busy, wait for an answer")

// ErrNoProducerID means the producer's epoch ran out (it reached MaxInt16,
// or Reset has not been called): the application gets a new producer id,
// from InitProducerId or log.Dir, and calls Sequencer.Reset.
var ErrNoProducerID = errors.New("idempotence: no producer id, call Reset")

// ErrUnknownBatch means Answer was given a batch that is not in flight: it
// was answered already, or never came from Next.
var ErrUnknownBatch = errors.New("idempotence: batch not in flight")

// SequencedBatch is a batch of records as a Sequencer stamped it. ID stays
// the same when the Sequencer stamps the batch again; the other fields are
// what the batch's header carries.
type SequencedBatch struct {
	ID uint64
	TopicPartition
	ProducerID   int64
	Epoch        int16
	BaseSequence int32
	Records      int32
}

// LastSequence returns the sequence of the batch's last record.
func (b SequencedBatch) LastSequence() int32 { return IncrementSequence(b.BaseSequence, b.Records-1) }

func (b SequencedBatch) sameStamp(o SequencedBatch) bool {
	return b.ProducerID == o.ProducerID && b.Epoch == o.Epoch && b.BaseSequence == o.BaseSequence
}

// Action is what a producer does with a batch after an answer.
type Action uint8

const (
	// Done: the batch is written (an answer of success or
	// DUPLICATE_SEQUENCE_NUMBER).
	Done Action = iota
	// Retry: send Decision.Batch, which may carry a new stamp, again
	// (after a backoff).
	Retry
	// Fail: the batch failed for good with Decision.Err.
	Fail
)

func (a Action) String() string {
	switch a {
	case Done:
		return "Done"
	case Retry:
		return "Retry"
	case Fail:
		return "Fail"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Decision is what to do with a batch after an answer.
type Decision struct {
	Action Action
	Batch  SequencedBatch // for Retry: the batch to send
	Err    error          // for Fail
}

// Sequencer is the idempotent side of a producer that sends batches over a
// transport of its own: it stamps each batch with the producer id, epoch
// and the partition's next sequences, keeps at most MaxInFlight batches in
// flight per partition, and decides, from each answer, whether a batch is
// done, is sent again with the same stamp or a new one, or fails, by the
// rules of Kafka's producer (clients' TransactionManager: canRetry,
// handleFailedBatch, maybeResolveSequences) for a producer without
// transactions:
//
//   - a retriable error (a timeout, a leader change) sends the same stamp
//     again: if the first send was written, the partition answers the
//     retry as a duplicate with the original offsets; an
//     OUT_OF_ORDER_SEQUENCE_NUMBER for a batch stamped before one already
//     written in the same epoch means it was written too, long enough ago
//     to leave the partition's window of five batches: Done, without
//     offsets;
//   - OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for a batch with
//     an earlier one still in flight, or unresolved, is retried as it is:
//     the earlier one may fill the gap;
//   - the same for the oldest batch in flight is a real gap: the epoch is
//     bumped (at MaxInt16 a new producer id is needed), the partition's
//     batches in flight are stamped again from sequence 0 and retried;
//   - INVALID_PRODUCER_EPOCH or PRODUCER_FENCED for the current stamp, and
//     any other error not retriable, fail the batch; the batches after it
//     would meet a gap, so the epoch is bumped and they are stamped again;
//   - a batch given up with an unknown outcome (Abandon, after a delivery
//     timeout) leaves its partition unresolved until an answer shows it was
//     written (a later batch succeeds) or every batch in flight is answered
//     without showing it: then the epoch is bumped.
//
// When the epoch is bumped, the other partitions take it once they have no
// batch in flight, starting again at sequence 0. A Sequencer is a pure state
// machine: no clock, no goroutine, not safe for concurrent use.
//
// The rules assume what Kafka's producer has: a partition's sends are
// delivered in the order they are made, retries included (one connection),
// so that a lost send loses those after it too. A partition accepts any
// sequence from a producer it does not know (KIP-360), so a batch that
// overtook a lost one could be taken, and the lost one's retry refused.
type Sequencer struct {
	id     int64
	epoch  int16
	nextID uint64
	parts  map[TopicPartition]*partitionSequence
}

// partitionSequence is a Sequencer's state for one partition.
type partitionSequence struct {
	id       int64
	epoch    int16
	next     int32            // the sequence of the next new record
	inFlight []SequencedBatch // in sequence order
	// unresolved: a batch was abandoned and may or may not be written;
	// resolved by a success of a batch with an ID after resolveID.
	unresolved bool
	resolveID  uint64
	// ackedID is the newest batch written in this epoch: every batch
	// stamped before it in the epoch is written too.
	ackedID uint64
}

// NewSequencer returns a Sequencer for the producer id and epoch the
// application got (from InitProducerId, or log.Dir).
func NewSequencer(producerID int64, epoch int16) *Sequencer {
	return &Sequencer{id: producerID, epoch: epoch, parts: make(map[TopicPartition]*partitionSequence)}
}

// ProducerID returns the producer id and epoch new batches are stamped
// with, once their partition has taken them.
func (s *Sequencer) ProducerID() (int64, int16) { return s.id, s.epoch }

// Reset sets a new producer id and epoch, after ErrNoProducerID. Each
// partition takes it, from sequence 0, once it has no batch in flight.
func (s *Sequencer) Reset(producerID int64, epoch int16) {
	s.id, s.epoch = producerID, epoch
}

// Next stamps a new batch of records records for tp and counts it in
// flight until Answer says Done or Fail, or Abandon.
func (s *Sequencer) Next(tp TopicPartition, records int) (SequencedBatch, error) {
	if records <= 0 || records > math.MaxInt32 {
		return SequencedBatch{}, fmt.Errorf("idempotence: Next: %d records, allowed 1 to %d", records, math.MaxInt32)
	}
	p := s.parts[tp]
	if p == nil {
		p = &partitionSequence{id: s.id, epoch: s.epoch}
		s.parts[tp] = p
	}
	if len(p.inFlight) >= MaxInFlight {
		return SequencedBatch{}, fmt.Errorf("%w: %s-%d has %d batches in flight", ErrWait, tp.Topic, tp.Partition, len(p.inFlight))
	}
	if p.id != s.id || p.epoch != s.epoch {
		if len(p.inFlight) > 0 {
			return SequencedBatch{}, fmt.Errorf("%w: %s-%d finishes its batches of epoch %d first", ErrWait, tp.Topic, tp.Partition, p.epoch)
		}
		s.adopt(p)
	}
	if p.id == NoProducerID {
		return SequencedBatch{}, ErrNoProducerID
	}
	s.nextID++
	b := SequencedBatch{ID: s.nextID, TopicPartition: tp, ProducerID: p.id, Epoch: p.epoch, BaseSequence: p.next, Records: int32(records)}
	p.next = IncrementSequence(p.next, b.Records)
	p.inFlight = append(p.inFlight, b)
	return b, nil
}

// adopt starts p on the producer's current id and epoch, from sequence 0,
// and stamps its batches in flight again in order: each follows a gap, so
// none was written.
func (s *Sequencer) adopt(p *partitionSequence) {
	p.id, p.epoch, p.next = s.id, s.epoch, 0
	p.unresolved, p.ackedID = false, 0
	for i := range p.inFlight {
		b := &p.inFlight[i]
		b.ProducerID, b.Epoch, b.BaseSequence = p.id, p.epoch, p.next
		p.next = IncrementSequence(p.next, b.Records)
	}
}

// bump moves the producer to a new epoch (a new producer id is needed at
// MaxInt16, as Kafka's bumpIdempotentProducerEpoch) and p to it.
func (s *Sequencer) bump(p *partitionSequence) {
	if s.epoch == math.MaxInt16 || s.id == NoProducerID {
		s.id, s.epoch = NoProducerID, NoProducerEpoch
	} else {
		s.epoch++
	}
	s.adopt(p)
}

// Answer takes the answer to sending b: err is nil if the partition
// appended it, the error it answered with (a kafkaerr.Code, matched with
// errors.Is), or a transport error; retriable says whether err may pass
// if b is sent again (Kafka's RetriableException: a timeout, a leader
// change). It returns what to do with b.
func (s *Sequencer) Answer(b SequencedBatch, err error, retriable bool) Decision {
	p := s.parts[b.TopicPartition]
	i := -1
	if p != nil {
		i = slices.IndexFunc(p.inFlight, func(f SequencedBatch) bool { return f.ID == b.ID })
	}
	if i < 0 {
		return Decision{Action: Fail, Batch: b, Err: fmt.Errorf("%w: batch %d of %s-%d", ErrUnknownBatch, b.ID, b.Topic, b.Partition)}
	}
	cur := p.inFlight[i]
	if cur.sameStamp(b) && errors.Is(err, ErrOutOfOrderSequence) && p.ackedID > b.ID {
		// A batch stamped after b in its epoch is written, so b is too,
		// so long ago that it left the partition's window of five (its
		// first answer was lost, later batches overtook its retry).
		err = nil
	}
	if err == nil || errors.Is(err, ErrDuplicateSequence) {
		p.inFlight = slices.Delete(p.inFlight, i, i+1)
		if cur.ProducerID == p.id && cur.Epoch == p.epoch {
			p.ackedID = max(p.ackedID, cur.ID)
		}
		if p.unresolved && b.ID > p.resolveID {
			p.unresolved = false // a batch after the abandoned one is written: so is that one
		}
		s.maybeResolve(p)
		return Decision{Action: Done, Batch: cur}
	}
	if !cur.sameStamp(b) {
		// An answer to a send before the batch was stamped again: the
		// partition refused it; the new stamp goes now.
		return Decision{Action: Retry, Batch: cur}
	}
	switch {
	case errors.Is(err, ErrOutOfOrderSequence), errors.Is(err, ErrUnknownProducerID):
		if i > 0 || p.unresolved {
			return Decision{Action: Retry, Batch: cur} // an earlier batch may fill the gap
		}
		if s.bump(p); p.id == NoProducerID {
			return s.fail(p, i, fmt.Errorf("%w: %w", err, ErrNoProducerID))
		}
		return Decision{Action: Retry, Batch: p.inFlight[i]}
	case errors.Is(err, ErrInvalidProducerEpoch), errors.Is(err, ErrProducerFenced):
		return s.fail(p, i, err)
	case retriable:
		return Decision{Action: Retry, Batch: cur}
	}
	return s.fail(p, i, err)
}

// fail removes batch i, which the partition refused, and bumps the epoch
// if batches after it are in flight: they follow a gap.
func (s *Sequencer) fail(p *partitionSequence, i int, err error) Decision {
	b := p.inFlight[i]
	p.inFlight = slices.Delete(p.inFlight, i, i+1)
	if i < len(p.inFlight) && p.id != NoProducerID {
		s.bump(p)
	} else if i == len(p.inFlight) && !p.unresolved {
		p.next = b.BaseSequence // nothing follows: the next batch takes its sequences
	}
	s.maybeResolve(p)
	return Decision{Action: Fail, Batch: b, Err: err}
}

// Abandon gives up b, in flight with an outcome unknown (Kafka's delivery
// timeout expired): the partition is unresolved until a later batch
// succeeds (b was written) or nothing is in flight any more, when the epoch
// is bumped so that no later batch is refused for a gap b may have left.
func (s *Sequencer) Abandon(b SequencedBatch) error {
	p := s.parts[b.TopicPartition]
	i := -1
	if p != nil {
		i = slices.IndexFunc(p.inFlight, func(f SequencedBatch) bool { return f.ID == b.ID })
	}
	if i < 0 {
		return fmt.Errorf("%w: batch %d of %s-%d", ErrUnknownBatch, b.ID, b.Topic, b.Partition)
	}
	p.inFlight = slices.Delete(p.inFlight, i, i+1)
	p.unresolved, p.resolveID = true, max(p.resolveID, b.ID)
	s.maybeResolve(p)
	return nil
}

// maybeResolve bumps the epoch of a partition still unresolved once it has
// nothing in flight (maybeResolveSequences), and moves a partition left on
// an old epoch to the current one.
func (s *Sequencer) maybeResolve(p *partitionSequence) {
	if len(p.inFlight) > 0 {
		return
	}
	if p.unresolved {
		s.bump(p)
	} else if p.id != s.id || p.epoch != s.epoch {
		s.adopt(p)
	}
}
