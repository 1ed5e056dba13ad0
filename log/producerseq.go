package log

import (
	"errors"
	"math"
	"syscall"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

// sequencer is an idempotent Producer's state for one partition: the
// producer id and epoch its batches carry there and the sequence of its
// next record. Kafka's idempotent producer bumps its epoch when a batch
// fails for good after taking sequences (TransactionManager.
// requestIdempotentEpochBumpForPartition): the batches after it would
// otherwise find a gap forever. The epoch is bumped for that partition
// only, since the log keeps producer state per partition and a
// producer-wide bump would fence the batches other partitions are still
// retrying; an epoch at its maximum takes a new producer id instead, as
// Kafka's does.
type sequencer struct {
	id    int64
	epoch int16
	next  int32
	// known is set once the log has taken a batch of the producer: until
	// then the log accepts any first sequence (Kafka's rule for a producer
	// it has no state for), so a batch must not reach it before the batch
	// ahead of it is done, or a failed first batch would leave a gap the
	// log never sees.
	known bool
}

// current reports whether prod is the partition's current stamp.
func (s *sequencer) current(prod segment.ProducerFields) bool {
	return s.id == prod.ID && s.epoch == prod.Epoch
}

// stamp gives b's records the partition's next sequences.
func (pr *Producer) stamp(b *pendingBatch) (segment.ProducerFields, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	s := pr.seqs[b.p]
	if s == nil {
		s = &sequencer{id: pr.id, epoch: pr.epoch}
		pr.seqs[b.p] = s
	}
	if s.id < 0 { // the epoch ran out: a new producer id
		id, err := pr.d.newProducerID()
		if err != nil {
			return segment.ProducerFields{}, err
		}
		s.id = id
	}
	prod := segment.ProducerFields{ID: s.id, Epoch: s.epoch, BaseSequence: s.next}
	s.next = idempotence.IncrementSequence(s.next, int32(len(b.recs)))
	return prod, nil
}

// unknown reports whether the log may not know the producer in b's
// partition yet: b then waits until the batch before it is done.
func (pr *Producer) unknown(b *pendingBatch) bool {
	if pr.seqs == nil {
		return false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	s := pr.seqs[b.p]
	return s == nil || !s.known
}

// succeeded records that the log took a batch stamped with prod.
func (pr *Producer) succeeded(b *pendingBatch, prod segment.ProducerFields) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if s := pr.seqs[b.p]; s.id == prod.ID {
		s.known = true
	}
}

// unstamp gives back the sequences of b, which never reached the log: the
// batch after it takes them, since it waits for b to reach the log first.
func (pr *Producer) unstamp(b *pendingBatch, prod segment.ProducerFields) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if s := pr.seqs[b.p]; s.current(prod) {
		s.next = prod.BaseSequence
	}
}

// stale reports whether an earlier batch of the partition failed for good
// after prod was stamped: the log will never take prod's sequences.
func (pr *Producer) stale(b *pendingBatch, prod segment.ProducerFields) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return !pr.seqs[b.p].current(prod)
}

// failed bumps the partition's epoch after b failed for good with prod's
// sequences, unless an earlier batch did already: the next batch starts a
// new epoch at sequence 0, which the log accepts whatever came before.
func (pr *Producer) failed(b *pendingBatch, prod segment.ProducerFields) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	s := pr.seqs[b.p]
	// A transactional producer's epoch is its coordinator's: the failure
	// makes its transaction abortable instead, and the abort bumps it.
	if !s.current(prod) || pr.txn != nil {
		return
	}
	s.next = 0
	if s.epoch == math.MaxInt16 {
		s.id, s.epoch, s.known = -1, 0, false
	} else {
		s.epoch++
	}
}

// appendIdempotent appends b stamped with its sequences, and retries it
// with the same ones while it fails in a way that may pass, until
// DeliveryTimeout. A retry of a batch the log already holds (its answer was
// lost) is recognised as a duplicate and answered with the original
// offsets, so it writes nothing.
//
// Each retry waits until the batches before it in the partition are done,
// so that theirs go first: a batch refused with ErrOutOfOrderSequence
// because an earlier one had not been written yet succeeds once that one
// has (Kafka's canRetry retries OUT_OF_ORDER_SEQUENCE_NUMBER for a batch
// that is not the next one). Once the earlier batches are done, an
// ErrOutOfOrderSequence is a real gap and fails the batch.
func (pr *Producer) appendIdempotent(b *pendingBatch, queued func()) (AppendResult, error) {
	if pr.txn != nil {
		if err := pr.txn.join(b.p); err != nil {
			return AppendResult{}, err
		}
	}
	prod, err := pr.stamp(b)
	if err != nil {
		return AppendResult{}, err
	}
	var entered, earlierPending bool
	attempt := func() (AppendResult, error) {
		earlierPending = b.prev != nil && !isClosed(b.prev.done)
		return pr.appendFn(b.p, b.recs, &prod, func() { entered = true; queued() })
	}
	res, err := attempt()
	if err != nil && !entered {
		pr.unstamp(b, prod)
		return res, err
	}
	deadline := time.Now().Add(pr.opts.DeliveryTimeout)
	backoff := pr.opts.RetryBackoff
	for err != nil && retriable(err, earlierPending) && time.Now().Before(deadline) {
		if b.prev != nil {
			<-b.prev.done
		}
		if pr.stale(b, prod) {
			break
		}
		time.Sleep(min(backoff, time.Until(deadline)))
		backoff = min(2*backoff, time.Second)
		res, err = attempt()
	}
	if err != nil {
		pr.failed(b, prod)
	} else {
		pr.succeeded(b, prod)
	}
	return res, err
}

// retriable reports whether an append that failed with err may succeed if
// retried with the same sequences: the log wrote nothing (a full disk) or
// its answer is unknown (a timeout), or the batch came before an earlier
// batch of its partition that is still in progress.
func retriable(err error, earlierPending bool) bool {
	if errors.Is(err, idempotence.ErrOutOfOrderSequence) {
		return earlierPending
	}
	var t interface{ Timeout() bool }
	return errors.Is(err, syscall.ENOSPC) || (errors.As(err, &t) && t.Timeout())
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
