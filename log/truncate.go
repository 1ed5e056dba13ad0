package log

import (
	"errors"
	"fmt"
	"slices"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// TruncateTo removes every record at or after offset, as a follower does
// when its log diverged from the leader's (KIP-101). A batch that holds
// offset is removed whole, so the log end offset may end up below offset.
// An offset below the first segment empties the log and restarts it at
// offset (Kafka's truncateFullyAndStartAt). Readers holding batches of the
// removed range may fail to read them.
func (l *Log) TruncateTo(offset int64) error {
	if err := l.lockWriter(true); err != nil {
		return err
	}
	defer l.wmu.Unlock()
	if offset < 0 {
		return &OffsetOutOfRangeError{Offset: offset, Start: l.logStart.Load(), End: l.leo.Load()}
	}
	if leo := l.leo.Load(); offset >= leo {
		// No record goes, but an epoch this replica assigned when it led,
		// without writing in it, may start at the log end; a follower must
		// not keep it, or it would report it as its last fetched epoch
		// forever (Kafka's UnifiedLog.truncateTo does the same).
		if err := l.epochs.TruncateFromEnd(leo); err != nil {
			return l.fail(err)
		}
		return nil
	}
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	if offset < segs[0].BaseOffset() {
		return l.truncateFullyLocked(offset)
	}
	keep := slices.IndexFunc(segs, func(s *segRef) bool { return s.BaseOffset() >= offset })
	if keep < 0 {
		keep = len(segs)
	}
	keep = max(keep, 1)
	// What a crash leaves must open: the recovery point comes down to the
	// base of the segment being cut before anything is removed, and the
	// segments after it are gone for good before it is cut, or Open would
	// find synced records missing.
	if err := l.lowerRecoveryPointLocked(segs[keep-1].BaseOffset()); err != nil {
		return err
	}
	if keep < len(segs) {
		if err := l.dropTailLocked(keep); err != nil {
			return err
		}
	}
	active := l.active()
	if _, err := active.TruncateTo(offset); err != nil {
		return l.fail(err)
	}
	// The segment may have been sealed if it was not the active one.
	if err := errors.Join(active.Unseal(), active.Sync()); err != nil {
		return l.fail(err)
	}
	return l.afterTruncateLocked()
}

// truncateFullyLocked removes every segment and starts an empty log at
// offset. The old segments are gone for good before the new one is
// created: a crash must not leave the new segment in front of old ones.
func (l *Log) truncateFullyLocked(offset int64) error {
	// The recovery point comes down first, so that what a crash leaves
	// opens.
	if err := l.lowerRecoveryPointLocked(offset); err != nil {
		return err
	}
	l.mu.RLock()
	old := l.segs
	l.mu.RUnlock()
	if err := l.renameDeleted(old); err != nil {
		return l.fail(err)
	}
	seg, err := segment.Create(l.dir, offset, l.segmentOptions())
	if err != nil {
		return l.fail(err)
	}
	ref := l.newRef(seg)
	l.mu.Lock()
	l.segs = []*segRef{ref}
	l.mu.Unlock()
	var errs []error
	for _, s := range old {
		errs = append(errs, s.discard(false))
	}
	if err := errors.Join(errs...); err != nil {
		return l.fail(err)
	}
	l.logStart.Store(offset)
	if err := l.epochs.Clear(); err != nil {
		return l.fail(err)
	}
	return l.afterTruncateLocked()
}

// dropTailLocked removes the segments from index keep on, making the one
// before them active. Their removal is durable before the caller cuts the
// one before them.
func (l *Log) dropTailLocked(keep int) error {
	l.mu.Lock()
	old := l.segs
	l.segs = slices.Clone(old[:keep])
	l.mu.Unlock()
	errs := []error{l.renameDeleted(old[keep:])}
	for _, s := range old[keep:] {
		errs = append(errs, s.discard(false))
	}
	if err := errors.Join(errs...); err != nil {
		return l.fail(err)
	}
	return nil
}

// lowerRecoveryPointLocked makes the recovery point at most offset, and
// durable so, before a truncation cuts the log below it.
func (l *Log) lowerRecoveryPointLocked(offset int64) error {
	if l.recoveryPoint <= offset {
		return nil
	}
	l.recoveryPoint = offset
	return l.writeCheckpointsLocked(l.opts.Now())
}

// renameDeleted gives the files of segs the .deleted suffix, the last
// segment first, and syncs the directory after each: the renames of an
// unsynced directory may reach the disk in any order, and a crash must
// leave a prefix of the segments, never one after a gap.
func (l *Log) renameDeleted(segs []*segRef) error {
	for _, s := range slices.Backward(segs) {
		if err := s.rename(deletedSuffix); err != nil {
			return err
		}
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) afterTruncateLocked() error {
	l.truncations++
	active := l.active()
	leo := active.NextOffset()
	l.leo.Store(leo)
	l.hw.Store(min(l.hw.Load(), leo))
	l.recoveryPoint = min(l.recoveryPoint, leo)
	l.unflushedMsgs, l.unflushedBytes = 0, 0
	if err := l.epochs.TruncateFromEnd(leo); err != nil {
		return l.fail(err)
	}
	// The producer state and the .txnindex entries may hold removed
	// batches: rebuilt from the newest snapshot left (Kafka's
	// truncateAndReload deletes those past the new end) and the log. The
	// directory sync makes those deletions durable: a snapshot of removed
	// batches that came back after a crash, once the log grew past it
	// again, would be taken for the state of the new ones.
	if err := l.reloadProducersLocked(); err != nil {
		return l.fail(err)
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		return l.fail(err)
	}
	l.notify()
	// The gaps before the segments removed are no longer the log's.
	return errors.Join(l.writeCheckpointsLocked(l.opts.Now()), l.dropGapsFromLocked(active.BaseOffset()+1))
}

// fail records an error after which the log's files may not match its
// state, so that further writes are refused until the log is reopened.
func (l *Log) fail(err error) error {
	l.failed = fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
	return l.failed
}

// DeleteRecordsBefore advances the log start offset to offset, as Kafka's
// DeleteRecords does: reads below it fail from now on, and segments wholly
// below it are deleted. An offset above the high watermark is an
// *OffsetOutOfRangeError; one at or below the log start does nothing.
func (l *Log) DeleteRecordsBefore(offset int64) error {
	if err := l.lockWriter(true); err != nil {
		return err
	}
	defer l.wmu.Unlock()
	if hw := l.hw.Load(); offset > hw {
		return &OffsetOutOfRangeError{Offset: offset, Start: l.logStart.Load(), End: hw}
	}
	if offset <= l.logStart.Load() {
		return nil
	}
	if err := l.advanceLogStartLocked(offset); err != nil {
		return err
	}
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	n := 0
	for n+1 < len(segs) && segs[n+1].BaseOffset() <= offset {
		n++
	}
	return l.deleteHeadLocked(n)
}

// advanceLogStartLocked moves the log start offset to offset and makes it
// durable before any segment below it goes.
func (l *Log) advanceLogStartLocked(offset int64) error {
	if offset <= l.logStart.Load() {
		return nil
	}
	l.logStart.Store(offset)
	l.producers.OnLogStartOffset(offset)
	l.refreshUnstableLocked()
	if err := l.writeCheckpointsLocked(l.opts.Now()); err != nil {
		return err
	}
	if err := l.epochs.TruncateFromStart(offset); err != nil {
		return l.fail(err)
	}
	return nil
}

// deleteHeadLocked deletes the n oldest segments. The log start offset
// moved first, so no read asks for them; readers that hold them go on
// reading until they let go, then the files are removed.
func (l *Log) deleteHeadLocked(n int) error {
	if n == 0 {
		return nil
	}
	l.mu.Lock()
	old := l.segs
	l.segs = slices.Clone(old[n:])
	l.mu.Unlock()
	var errs []error
	for _, s := range old[:n] {
		errs = append(errs, s.discard(true))
	}
	// Their producer snapshots go with them (Kafka's
	// deleteProducerSnapshots).
	if err := idempotence.DeleteSnapshotsBefore(l.fs, l.dir, old[n].BaseOffset()); err != nil {
		errs = append(errs, fmt.Errorf("log %s: %w", l.dir, err))
	}
	return errors.Join(errs...)
}
