package log

import (
	"github.com/strandlog/strand/segment"
)

// What a replication layer (package replica) needs of a log beyond what a
// single-node queue does: restarting an empty log at a leader's log start
// offset, the offset below which everything is synced, a high watermark
// that only moves forward on a leader, and the latest leader epoch; and the
// same on a Dir's Partition, so that a node built on a Dir can replicate.

// TruncateFullyAndStartAt removes every record and restarts the log, empty,
// at offset, which may lie past the log end (Kafka's
// UnifiedLog.truncateFullyAndStartAt): a follower does this when its log
// end is below the leader's log start offset, so that it fetches from
// there. The log start offset, high watermark, recovery point and log end
// all become offset, and the leader epoch cache is cleared. A negative
// offset is an *OffsetOutOfRangeError.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	if err := l.lockWriter(true); err != nil {
		return err
	}
	defer l.wmu.Unlock()
	if offset < 0 {
		return &OffsetOutOfRangeError{Offset: offset, Start: l.logStart.Load(), End: l.leo.Load()}
	}
	// truncateFullyLocked keeps the high watermark and recovery point at
	// most the new end; they start there (the new segment is empty).
	l.hw.Store(offset)
	l.recoveryPoint = offset
	return l.truncateFullyLocked(offset)
}

// SyncedEndOffset returns the offset below which every record is durable:
// what a power failure cannot take away. It lags LogEndOffset under every
// fsync policy but FsyncAlways, where it lags only while a group commit's
// sync is in flight.
func (l *Log) SyncedEndOffset() (int64, error) {
	if err := l.lockWriter(false); err != nil {
		return 0, err
	}
	defer l.wmu.Unlock()
	return l.recoveryPoint, nil
}

// AdvanceHighWatermark moves the high watermark forward to offset, clamped
// to the log end offset, and returns the high watermark. It never moves it
// back: a leader's high watermark is monotonic (Kafka's
// maybeIncrementHighWatermark), while a follower, whose high watermark may
// go down when a new leader knows less, uses SetHighWatermark.
func (l *Log) AdvanceHighWatermark(offset int64) (int64, error) {
	if err := l.lockWriter(false); err != nil {
		return 0, err
	}
	defer l.wmu.Unlock()
	offset = min(offset, l.leo.Load())
	if hw := l.hw.Load(); offset <= hw {
		return hw, nil
	}
	l.hw.Store(offset)
	// Completed transactions whose marker it passed stop holding the last
	// stable offset back, as after SetHighWatermark.
	l.hwMovedLocked()
	l.notify()
	return offset, nil
}

// LatestEpoch returns the latest leader epoch in the epoch cache: the epoch
// of the last record, or one this log's replica led later without writing
// (a follower's lastFetchedEpoch, KIP-320). It is UndefinedEpoch for a log
// that knows no epoch.
func (l *Log) LatestEpoch() (int32, error) {
	if err := l.lockWriter(false); err != nil {
		return 0, err
	}
	defer l.wmu.Unlock()
	return l.epochs.LatestEpoch(), nil
}

// Offsets returns the log start offset, high watermark and log end offset
// together, as Partition.Offsets does, so that code written against either
// can take both. It fails only on a closed log.
func (l *Log) Offsets() (start, highWatermark, end int64, err error) {
	if l.isClosed() {
		return 0, 0, 0, ErrClosed
	}
	return l.logStart.Load(), l.hw.Load(), l.leo.Load(), nil
}

// AppendReplicated appends a batch copied from the leader; see
// Log.AppendReplicated.
func (p *Partition) AppendReplicated(b segment.Batch) (AppendResult, error) {
	return with(p, true, func(l *Log) (AppendResult, error) { return l.AppendReplicated(b) })
}

// TruncateTo removes the records at and after offset; see Log.TruncateTo.
func (p *Partition) TruncateTo(offset int64) error {
	return do(p, true, func(l *Log) error { return l.TruncateTo(offset) })
}

// TruncateFullyAndStartAt empties the partition and restarts it at offset;
// see Log.TruncateFullyAndStartAt.
func (p *Partition) TruncateFullyAndStartAt(offset int64) error {
	return do(p, true, func(l *Log) error { return l.TruncateFullyAndStartAt(offset) })
}

// SetHighWatermark sets the high watermark; see Log.SetHighWatermark. The
// topic's partitions must be opened with Options.ExternalHighWatermark
// (DirOptions.Log) for it to stay where it is set.
func (p *Partition) SetHighWatermark(offset int64) (int64, error) {
	return with(p, true, func(l *Log) (int64, error) { return l.SetHighWatermark(offset) })
}

// AdvanceHighWatermark moves the high watermark forward; see
// Log.AdvanceHighWatermark.
func (p *Partition) AdvanceHighWatermark(offset int64) (int64, error) {
	return with(p, true, func(l *Log) (int64, error) { return l.AdvanceHighWatermark(offset) })
}

// SetLeaderEpoch sets the epoch stamped on appended batches; see
// Log.SetLeaderEpoch.
func (p *Partition) SetLeaderEpoch(epoch int32) error {
	return do(p, true, func(l *Log) error { return l.SetLeaderEpoch(epoch) })
}

// EndOffsetForEpoch answers where an epoch ended; see
// Log.EndOffsetForEpoch.
func (p *Partition) EndOffsetForEpoch(epoch int32) (int32, int64, error) {
	l, err := p.acquire(false)
	if err != nil {
		return 0, 0, err
	}
	e, off, err := l.EndOffsetForEpoch(epoch)
	p.release(err)
	return e, off, err
}

// LatestEpoch returns the latest leader epoch; see Log.LatestEpoch.
func (p *Partition) LatestEpoch() (int32, error) {
	return with(p, false, func(l *Log) (int32, error) { return l.LatestEpoch() })
}

// SyncedEndOffset returns the offset below which everything is durable;
// see Log.SyncedEndOffset.
func (p *Partition) SyncedEndOffset() (int64, error) {
	return with(p, false, func(l *Log) (int64, error) { return l.SyncedEndOffset() })
}
