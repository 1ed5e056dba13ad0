package log

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"sort"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

// txnIndexSuffix ends the name of a segment's aborted-transaction index,
// <base offset>.txnindex, as Kafka names it (LogFileUtils.TXN_INDEX_FILE_SUFFIX).
const txnIndexSuffix = ".txnindex"

// A log keeps its partition's producer state (idempotence.State) as Kafka's
// UnifiedLog keeps its ProducerStateManager: every batch that carries a
// producer id, or is a control batch, is validated under the writer lock at
// the offsets it is about to get, written, and then committed to the state,
// one batch after another, so that each sees those before it in its group.
// Batches without a producer are not looked at: the state only learns, at
// each roll, that the log moved past them (updateMapEndOffset).

// hasProducer reports whether b goes through producer state: a batch with a
// producer id, or a control batch (which a client may not write, whatever
// its producer id).
func hasProducer(b segment.Batch) bool { return b.ProducerID() >= 0 || b.Control() }

// validateLocked checks b, stamped with its offsets, against the producer
// state, for origin. It returns the change to commit once b is written,
// and whether there is one: a batch without a producer has none.
func (l *Log) validateLocked(b segment.Batch, origin idempotence.Origin) (idempotence.Append, bool, error) {
	if !hasProducer(b) {
		return idempotence.Append{}, false, nil
	}
	info, err := idempotence.InfoOf(b)
	if err != nil {
		return idempotence.Append{}, false, fmt.Errorf("log %s: batch at offset %d: %w", l.dir, b.BaseOffset(), err)
	}
	a, err := l.producers.Validate(origin, info)
	if err != nil { // the error names the producer and the offset
		return idempotence.Append{}, false, fmt.Errorf("log %s: %w", l.dir, err)
	}
	return a, true, nil
}

// commitLocked records a written batch's change to the producer state, and
// the transactions it aborted in the .txnindex of seg, the segment it went
// to. A failure here leaves the state behind the files: the log fails, and
// its next Open rebuilds both from the log.
func (l *Log) commitLocked(a *idempotence.Append, seg *segRef) error {
	completed, err := l.producers.Commit(*a)
	if err == nil {
		err = seg.indexAborted(completed)
	}
	l.refreshUnstableLocked()
	if err != nil {
		return l.fail(fmt.Errorf("producer state: %w", err))
	}
	return nil
}

// advanceProducersLocked tells the producer state the log reaches offset
// end: the batches before it that the state did not see carry no producer.
// A batch without a producer id is not checked, only moves the state's end.
func (l *Log) advanceProducersLocked(end int64) error {
	if l.producers.MapEndOffset() >= end {
		return nil
	}
	a, err := l.producers.Validate(idempotence.OriginReplication, idempotence.BatchInfo{
		ProducerID: idempotence.NoProducerID, BaseOffset: end - 1, LastOffset: end - 1})
	if err != nil {
		return err
	}
	_, err = l.producers.Commit(a)
	return err
}

// producerExpirationCheck is how often the log forgets expired producers
// (Kafka's producer.id.expiration.check.interval.ms default).
const producerExpirationCheck = 10 * time.Minute

// maybeExpireProducersLocked forgets the producers idle for longer than
// producer.id.expiration.ms, every producerExpirationCheck.
func (l *Log) maybeExpireProducersLocked(now time.Time) {
	if now.Sub(l.lastExpiry) >= producerExpirationCheck {
		l.lastExpiry = now
		l.producers.RemoveExpired(now)
	}
}

// snapshotLocked writes the producer state at offset end, where the log
// rolls or closes (Kafka's roll and close take one), if it moved since the
// last one.
//
// A snapshot only shortens the replay of the next Open (a missing one, or
// one a crash tore, is replaced by an older one and more replay), so one
// that cannot be written, on a full disk say, fails nothing: its error is
// returned and kept in Stats, as a checkpoint's is, and the next roll
// writes a newer one. An error of the producer state itself fails the log
// (ErrFailed).
func (l *Log) snapshotLocked(end int64) error {
	if err := l.advanceProducersLocked(end); err != nil {
		return l.fail(err)
	}
	_, err := l.producers.TakeSnapshot(l.fs, l.dir)
	if err != nil {
		err = fmt.Errorf("log %s: %w", l.dir, err)
	}
	l.stats.snapshotErr.Store(&err)
	return err
}

// refreshUnstableLocked publishes the producer state's first unstable
// offset, which bounds read-committed reads without the writer lock.
func (l *Log) refreshUnstableLocked() {
	if f, ok := l.producers.FirstUnstableOffset(); ok {
		l.unstable.Store(f)
	} else {
		l.unstable.Store(math.MaxInt64)
	}
}

// hwMovedLocked tells the producer state the high watermark moved:
// completed transactions whose marker it passed stop holding the last
// stable offset back.
func (l *Log) hwMovedLocked() {
	l.producers.OnHighWatermark(l.hw.Load())
	l.refreshUnstableLocked()
}

// LastStableOffset returns the offset below which every transaction is
// decided and replicated (Kafka's last stable offset): the first offset of
// the oldest transaction still open, or of the oldest one whose marker is
// not yet below the high watermark, or else the high watermark.
// ReadCommitted reads stop there.
func (l *Log) LastStableOffset() int64 {
	return min(l.hw.Load(), l.unstable.Load())
}

// NeedsVerification reports whether b is the first batch of its
// producer's transaction on this partition: under transactions version 2
// (KIP-890) the transaction coordinator must learn that the partition is in
// the transaction (idempotence.TxnCoordinator.AddPartitions) before b is
// appended, or a late batch of a finished transaction could open one no
// coordinator will end. The log does not call the coordinator itself.
func (l *Log) NeedsVerification(b segment.Batch) (bool, error) {
	if !b.Transactional() || b.Control() {
		return false, nil
	}
	info, err := idempotence.InfoOf(b)
	if err != nil {
		return false, fmt.Errorf("log %s: %w", l.dir, err)
	}
	if err := l.lockWriter(false); err != nil {
		return false, err
	}
	defer l.wmu.Unlock()
	return l.producers.NeedsVerification(info), nil
}

// Producers returns the state of each producer the log knows, by producer
// id (Kafka's DescribeProducers): its epoch, the sequence numbers of its
// last batches and the first offset of its open transaction, if any.
func (l *Log) Producers() ([]idempotence.Entry, error) {
	if err := l.lockWriter(false); err != nil {
		return nil, err
	}
	defer l.wmu.Unlock()
	return l.producers.Producers(), nil
}

// Producers returns the state of the partition's producers; see
// Log.Producers.
func (p *Partition) Producers() ([]idempotence.Entry, error) {
	return with(p, false, func(l *Log) ([]idempotence.Entry, error) { return l.Producers() })
}

// reloadProducersLocked rebuilds the producer state as Kafka's
// loadProducerState does, on open and after a truncation: from the newest
// snapshot at or below the log end (Load deletes the others), then every
// batch after it. The .txnindex entries of the replayed range are rebuilt
// too: after a crash they may not all be there, and after a truncation
// some may belong to removed data. A .txnindex that cannot be read is
// removed and the whole log replayed, which rebuilds it.
func (l *Log) reloadProducersLocked() error {
	leo, start := l.leo.Load(), l.logStart.Load()
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	bases := make([]int64, len(segs))
	for i, s := range segs {
		bases[i] = s.BaseOffset()
	}
	if err := idempotence.RemoveStraySnapshots(l.fs, l.dir, bases); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	st, err := idempotence.Load(l.fs, l.dir, start, leo, l.opts.Now(),
		idempotence.Config{ProducerIDExpiration: l.opts.ProducerIDExpiration})
	if err != nil {
		return fmt.Errorf("log %s: producer state: %w", l.dir, err)
	}
	for {
		corrupt, err := l.truncateAbortedLocked(st.MapEndOffset())
		if err != nil {
			return err
		}
		if !corrupt || st.MapEndOffset() == start {
			break
		}
		st.Reset(start)
	}
	l.producers = st
	from := st.MapEndOffset()
	err = l.eachBatchLocked(from, leo, func(s *segRef, b segment.Batch) error {
		a, ok, err := l.validateLocked(b, idempotence.OriginReplication)
		if err != nil || !ok {
			return err
		}
		completed, err := st.Commit(a)
		if err != nil {
			return err
		}
		return s.indexAborted(completed)
	})
	if err == nil {
		err = l.advanceProducersLocked(leo)
	}
	if err != nil {
		return fmt.Errorf("log %s: rebuilding producer state from offset %d: %w", l.dir, from, err)
	}
	l.hwMovedLocked()
	return nil
}

// truncateAbortedLocked removes the .txnindex entries of transactions
// aborted at or after offset, and reports whether an index could not be
// read: its file is removed.
func (l *Log) truncateAbortedLocked(offset int64) (corrupt bool, err error) {
	for _, s := range l.segsFromLocked(offset) {
		err := s.truncateAborted(offset)
		if errors.Is(err, idempotence.ErrCorruptTxnIndex) {
			corrupt = true
			err = l.fs.Remove(s.txnIndexName())
		}
		if err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return false, fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
	return corrupt, nil
}

// segsFromLocked returns the segments that may hold offsets at or after
// offset, without reading any (a segment opened lazily stays unread).
func (l *Log) segsFromLocked(offset int64) []*segRef {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.segs[segmentOf(l.segs, offset):]
}

// segmentOf returns the index of the segment offset falls in: the last
// one starting at or below it, or the first.
func segmentOf(segs []*segRef, offset int64) int {
	return max(sort.Search(len(segs), func(i int) bool { return segs[i].BaseOffset() > offset })-1, 0)
}

// eachBatchLocked calls fn with each batch holding offsets in [from, to)
// and the segment it is in.
func (l *Log) eachBatchLocked(from, to int64, fn func(*segRef, segment.Batch) error) error {
	for _, s := range l.segsFromLocked(from) {
		for from < to {
			sl, err := s.Read(from, to, 1<<20)
			if errors.Is(err, segment.ErrOffsetNotFound) {
				break // at the segment's end, or in a gap there
			}
			if err != nil {
				return err
			}
			if sl.Len() == 0 {
				break
			}
			for b, err := range sl.All() {
				if err != nil {
					return err
				}
				if b.LastOffset() >= from {
					if err := fn(s, b); err != nil {
						return err
					}
				}
				from = max(from, b.LastOffset()+1)
			}
		}
	}
	return nil
}

// The .txnindex of a segment is kept with its segRef: opened when first
// needed, renamed and removed with the segment's files, and guarded by
// txnMu because readers collect from it while the writer appends.

func (r *segRef) txnIndexName() string {
	return segment.FileName(r.dir, r.BaseOffset(), txnIndexSuffix)
}

// txnIndexLocked returns the segment's .txnindex, opening it if needed; the
// caller holds txnMu.
func (r *segRef) txnIndexLocked() (*idempotence.TxnIndex, error) {
	if r.txn == nil {
		x, err := idempotence.OpenTxnIndex(r.fs, r.txnIndexName(), r.BaseOffset())
		if err != nil {
			return nil, err
		}
		r.txn = x
		r.noAborted.Store(len(x.Entries()) == 0)
	}
	return r.txn, nil
}

func (r *segRef) txnIndex() (*idempotence.TxnIndex, error) {
	r.txnMu.Lock()
	defer r.txnMu.Unlock()
	return r.txnIndexLocked()
}

// indexAborted adds the aborted ones of completed, whose markers are in
// this segment, to its .txnindex.
func (r *segRef) indexAborted(completed []idempotence.CompletedTxn) error {
	for _, c := range completed {
		if !c.Aborted {
			continue
		}
		r.txnMu.Lock()
		x, err := r.txnIndexLocked()
		if err == nil {
			err = x.Append(idempotence.AbortedTxnOf(c))
			r.noAborted.Store(false)
		}
		r.txnMu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: %w", r.txnIndexName(), err)
		}
	}
	return nil
}

// truncateAborted removes the entries of transactions aborted at or after
// offset.
func (r *segRef) truncateAborted(offset int64) error {
	r.txnMu.Lock()
	defer r.txnMu.Unlock()
	x, err := r.txnIndexLocked()
	if err != nil {
		return err
	}
	if err := x.TruncateTo(offset); err != nil {
		return fmt.Errorf("%s: %w", r.txnIndexName(), err)
	}
	r.noAborted.Store(len(x.Entries()) == 0)
	return nil
}

// syncTxnIndex makes the segment's .txnindex durable, if it has one open.
func (r *segRef) syncTxnIndex() error {
	r.txnMu.Lock()
	defer r.txnMu.Unlock()
	if r.txn == nil {
		return nil
	}
	return r.txn.Sync()
}

// collectAborted returns the aborted transactions of this segment that
// overlap offsets [from, upper), and whether later segments need not be
// searched (TransactionIndex.collectAbortedTxns).
func (r *segRef) collectAborted(from, upper int64) ([]idempotence.AbortedTxn, bool, error) {
	if r.noAborted.Load() {
		return nil, false, nil
	}
	r.txnMu.Lock()
	defer r.txnMu.Unlock()
	x, err := r.txnIndexLocked()
	if err != nil {
		return nil, false, err
	}
	aborted, done := x.Collect(from, upper)
	return aborted, done, nil
}

// renameTxnIndex renames the segment's .txnindex as its other files are
// renamed, with suffix after the name; a segment without one has nothing to
// rename. The entries stay in memory for readers still holding the segment.
func (r *segRef) renameTxnIndex(suffix string) error {
	r.txnMu.Lock()
	defer r.txnMu.Unlock()
	var err error
	if r.txn != nil {
		err = r.txn.Close()
	}
	name := r.txnIndexName()
	if rerr := r.fs.Rename(name+r.txnSuffix, name+suffix); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	r.txnSuffix = suffix
	return err
}

// closeTxnIndex closes the segment's .txnindex, removing its file if
// remove.
func (r *segRef) closeTxnIndex(remove bool) error {
	r.txnMu.Lock()
	defer r.txnMu.Unlock()
	var err error
	if r.txn != nil {
		err = r.txn.Close()
	}
	if remove {
		if rerr := r.fs.Remove(r.txnIndexName() + r.txnSuffix); rerr != nil && !errors.Is(rerr, iofs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// abortedIn returns the aborted transactions that overlap offsets [from,
// upper) of segs, searching from the first segment. A .txnindex that cannot
// be read fails the read: without it aborted records would be read as
// committed ones. (Open rebuilds the indexes it replays; reopening after
// removing the file rebuilds any other.)
func abortedIn(segs []*segRef, from, upper int64) ([]idempotence.AbortedTxn, error) {
	var all []idempotence.AbortedTxn
	// Not only the segments below upper: a transaction with data below it
	// may have its marker in a later segment, past an open transaction's
	// first offset (collectAbortedTransactions stops only on Collect's
	// word).
	for _, s := range segs {
		found, done, err := s.collectAborted(from, upper)
		if err != nil {
			return nil, err
		}
		all = append(all, found...)
		if done {
			break
		}
	}
	return all, nil
}
