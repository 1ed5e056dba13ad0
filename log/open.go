package log

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strandlog/strand/internal/checkpoint"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// Files in a log's directory besides the segments.
const (
	recoveryPointFile = "recovery-point-offset-checkpoint"
	logStartFile      = "log-start-offset-checkpoint"
	highWatermarkFile = "replication-offset-checkpoint"
	cleanShutdownFile = ".clean-shutdown"
	deletedSuffix     = ".deleted"
	cleanedSuffix     = ".cleaned"
	swapSuffix        = ".swap"
)

// Open opens the log in dir, creating the directory and an empty log if
// there is none. The log holds a lock file in dir until Close: another Log
// or Dir, in this process or another, that has dir open makes Open fail
// with ErrLogLocked.
//
// After a clean Close, Open reads no batches but each segment's last few,
// to check that the segments follow each other: the first at or below the
// log start offset, each next one where the one before ends (but for gaps
// the log recorded making, where a follower's batch started past its log
// end), and the last at or past the recovery point. A segment deleted, cut
// or replaced by something other than a regular file fails Open with an
// error wrapping ErrCorrupt that names the files.
//
// After a crash, Open recovers the last segment, and any other at or after
// the recovery point (the offset below which everything was synced,
// checkpointed at every roll and periodically): each batch is checked, and
// the last segment is cut at the first batch that is torn or corrupt.
// Corruption below the recovery point, or in a segment the log rolled
// past (synced whole then), is not cut: Open fails with an error wrapping
// ErrCorrupt that names the file and position.
func Open(dir string, opts Options) (*Log, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: Open of an empty path", ErrInvalidOption)
	}
	return open(dir, opts, false)
}

// open opens the Log in dir; one a Dir opens for its partition (ofDir)
// works under the Dir's lock, and any other takes it.
func open(dir string, opts Options, ofDir bool) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Log{dir: dir, opts: opts, fs: opts.FS, lastCheckpoint: opts.Now(), lastExpiry: opts.Now()}
	l.syncOrder = sync.NewCond(&l.smu)
	if !ofDir {
		if l.dirLock, err = lockEnclosingDir(l.fs, dir); err != nil {
			return nil, err
		}
	}
	if err := l.load(); err != nil {
		for _, s := range l.segs {
			s.release()
		}
		if l.lock != nil {
			l.lock.Close()
		}
		if l.dirLock != nil {
			l.dirLock.Close()
		}
		return nil, err
	}
	return l, nil
}

// lockEnclosingDir takes the lock of the Dir that dir is a partition of,
// if it is one: a Dir holds its partitions' own locks only while they are
// open, and it closes the least recently used, so a Log opened on its own
// in one of them would otherwise write under the Dir's feet. It returns
// nil if dir is in no Dir.
func lockEnclosingDir(fs vfs.FS, dir string) (io.Closer, error) {
	parent := filepath.Dir(filepath.Clean(dir))
	if info, err := fs.Stat(filepath.Join(parent, topicsDir)); err != nil || !info.IsDir() {
		return nil, nil
	}
	lock, err := lockDir(fs, parent, "a Log of one of its partitions", ErrLogLocked)
	if err != nil {
		return nil, fmt.Errorf("log: %s is a partition of the Dir %s: %w", dir, parent, err)
	}
	return lock, nil
}

func (l *Log) load() error {
	if err := vfs.MkdirAll(l.fs, l.dir, 0o755); err != nil {
		return fmt.Errorf("log: create %s: %w", l.dir, err)
	}
	lock, err := lockDir(l.fs, l.dir, "a Log", ErrLogLocked)
	if err != nil {
		return err
	}
	l.lock = lock
	_, statErr := l.fs.Stat(filepath.Join(l.dir, cleanShutdownFile))
	clean := statErr == nil
	// After a clean shutdown the directory's own entry is known durable: the
	// open before synced it. Otherwise it may be new, or left by a crash.
	if !clean {
		if err := vfs.SyncDir(l.fs, filepath.Dir(l.dir)); err != nil {
			return fmt.Errorf("log: sync parent of %s: %w", l.dir, err)
		}
	}
	bases, err := l.cleanDir()
	if err != nil {
		return err
	}
	if l.damage, err = l.readDamage(); err != nil {
		return err
	}
	// A damaged checkpoint, with TruncateCorruption, reads as 0 and is
	// written again once the log is loaded.
	var offs [3]int64 // as l.checkpointed: recovery point, high watermark, log start
	for i, name := range [...]string{recoveryPointFile, highWatermarkFile, logStartFile} {
		off, err := l.readOffset(name)
		l.checkpointed[i] = off
		if err != nil {
			if err := l.foundDamage(err, filepath.Join(l.dir, name)); err != nil {
				return err
			}
			off, l.checkpointed[i] = 0, -1
		}
		offs[i] = off
	}
	recoveryPoint, hw, logStart := offs[0], offs[1], offs[2]
	if err := l.readGaps(); err != nil {
		if err := l.foundDamage(err, filepath.Join(l.dir, segmentGapsFile)); err != nil {
			return err
		}
		l.gaps = nil
	}
	verify := l.opts.VerifyOnOpen
	// The segments' batches are checked against the epoch cache as they
	// load (see EpochCache.checkBatch); it is cut to the log end after.
	if l.epochs, err = OpenEpochCache(l.fs, l.dir); err != nil {
		if l.epochs, err = l.rebuildEpochs(err); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
		verify = true
	}

	if len(bases) == 0 {
		if recoveryPoint > logStart {
			err := fmt.Errorf("log %s: %w: no segments, but the recovery point is %d: the segments holding offsets %d to %d are missing",
				l.dir, ErrCorrupt, recoveryPoint, logStart, recoveryPoint-1)
			if err := l.foundDamage(err, segment.FileName(l.dir, logStart, segment.LogSuffix)); err != nil {
				return err
			}
		}
		seg, err := segment.Create(l.dir, logStart, l.segmentOptions())
		if err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
		l.segs = append(l.segs, l.newRef(seg))
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
	removed := false // segments removed below, to be made durable before the log moves on
	for i, base := range bases {
		name := segment.FileName(l.dir, base, segment.LogSuffix)
		follows, err := l.checkFollows(base, logStart, clean)
		if err != nil {
			if err := l.foundDamage(err, name); err != nil {
				return err
			}
			if len(l.segs) == 0 {
				// The first segment starts past the log start offset: the
				// log starts there now.
				follows = true
			} else if follows, err = l.cutBefore(base, logStart, clean); err != nil {
				return fmt.Errorf("log %s: %w", l.dir, err)
			} else if !follows {
				// Offsets are missing before this segment: the log ends
				// there.
				if err := l.dropSegments(bases[i:]); err != nil {
					return err
				}
				removed = true
				break
			}
		}
		if !follows {
			// The segment before holds this one's offsets: compaction
			// merged this segment into it, and the crash came after the
			// swap but before this one's files were renamed .deleted (a
			// clean Close never comes between the two).
			// The merged segment ends where the last one it replaced did
			// (compaction keeps the last batch of a group), so every
			// segment it replaced is caught here.
			if err := l.removeSegmentFiles(base); err != nil {
				return err
			}
			removed = true
			continue
		}
		last := i == len(bases)-1
		opts := l.segmentOptions()
		var seg *segment.Segment
		switch {
		case !verify && (clean || (!last && bases[i+1] <= recoveryPoint)):
			opts.Lazy = !last // the last one becomes active at once
			seg, err = segment.Open(l.dir, base, opts)
		case !last || clean:
			// The log synced this segment whole before it rolled the next
			// one (or closed): only the last segment of an unclean
			// shutdown can have a torn tail, so any bad batch here is
			// corruption, never a place to cut the log.
			seg, _, err = segment.Recover(l.dir, base, opts, math.MaxInt64)
			if err == nil && !last {
				err = seg.Seal()
			}
		default:
			seg, _, err = segment.Recover(l.dir, base, opts, max(recoveryPoint, base))
		}
		if err != nil {
			if err := l.foundDamage(err, name); err != nil {
				return fmt.Errorf("log %s: %w", l.dir, err)
			}
			// Cut before the first bad batch, as a torn tail is, and drop
			// the segments after it.
			if seg, err = l.cutDamaged(base, opts); err != nil {
				return fmt.Errorf("log %s: %w", l.dir, err)
			}
			l.segs = append(l.segs, l.newRef(seg))
			if err := l.dropSegments(bases[i+1:]); err != nil {
				return err
			}
			removed = true
			break
		}
		l.segs = append(l.segs, l.newRef(seg))
	}
	if err := l.epochs.finishRebuild(); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	if l.found != nil {
		// Gaps recorded before the segments dropped are no longer the
		// log's; damaged gap records are written again.
		last := l.segs[len(l.segs)-1].BaseOffset()
		l.gaps = slices.DeleteFunc(l.gaps, func(g segmentGap) bool { return g.base > last })
		if err := l.writeGapsLocked(l.gaps); err != nil {
			return err
		}
	}
	if removed {
		// Removed segments must stay removed: a crash that brought back
		// merged segments would put their offsets in the log twice.
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
	active := l.segs[len(l.segs)-1]
	if err := active.Unseal(); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	leo := active.NextOffset()
	if leo < recoveryPoint && l.found == nil {
		// Everything below the recovery point was synced: the log was cut.
		err := fmt.Errorf("log %s: %w: %s ends at offset %d, below the recovery point %d: synced records are missing",
			l.dir, ErrCorrupt, segment.FileName(l.dir, active.BaseOffset(), segment.LogSuffix), leo, recoveryPoint)
		if err := l.foundDamage(err, segment.FileName(l.dir, active.BaseOffset(), segment.LogSuffix)); err != nil {
			return err
		}
		l.found.Position = active.Size()
	}
	l.leo.Store(leo)
	l.logStart.Store(min(max(logStart, l.segs[0].BaseOffset()), leo))
	if l.opts.ExternalHighWatermark {
		l.hw.Store(min(max(hw, l.logStart.Load()), leo))
	} else {
		l.hw.Store(leo)
	}

	if err := errors.Join(l.epochs.TruncateFromEnd(leo), l.epochs.TruncateFromStart(l.logStart.Load())); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	l.epoch = l.epochs.LatestEpoch()

	if err := l.reloadProducersLocked(); err != nil {
		return err
	}
	// After a crash, Load may have deleted snapshots past the log end; that
	// must be durable before the log grows past them again (see
	// afterTruncateLocked).
	if !clean {
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
	}

	// Whatever recovery kept is made durable before the log moves on, so
	// that the recovery point can start at the log end; so is a repair.
	if !clean || l.found != nil {
		for _, s := range l.segs {
			if s.NextOffset() > recoveryPoint || l.found != nil {
				if err := s.Sync(); err != nil {
					return fmt.Errorf("log %s: %w", l.dir, err)
				}
			}
		}
	}
	l.recoveryPoint = leo
	if err := l.writeCheckpointsLocked(l.opts.Now()); err != nil {
		return err
	}
	if err := l.recordDamage(leo); err != nil {
		return err
	}
	// From here on a crash is an unclean shutdown.
	if clean {
		if err := l.fs.Remove(filepath.Join(l.dir, cleanShutdownFile)); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
	return nil
}

// cutDamaged recovers the damaged segment at base, cut before its first
// bad batch and before the batch before that too: a base offset or leader
// epoch (outside the CRC) that breaks the order with the next batch may be
// the earlier batch's, not the later one's. The log file is cut once, and
// synced, before anything else: a power cut leaves the damage whole, to
// be found again, or the cut made, never a cut that removed the evidence
// of a damaged batch it kept.
func (l *Log) cutDamaged(base int64, opts segment.Options) (*segment.Segment, error) {
	seg, _, err := segment.Recover(l.dir, base, opts, math.MaxInt64)
	var pe *segment.PositionError
	if err == nil || !errors.As(err, &pe) {
		return seg, err
	}
	cut := pe.Position
	if pe.Before >= 0 {
		cut = pe.Before
	}
	name := segment.FileName(l.dir, base, segment.LogSuffix)
	f, err := l.fs.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(f.Truncate(cut), f.Sync(), f.Close()); err != nil {
		return nil, fmt.Errorf("cut %s to %d: %w", name, cut, err)
	}
	seg, _, err = segment.Recover(l.dir, base, opts, base)
	return seg, err
}

// cutBefore repairs the last segment loaded when checkFollows found that
// the segment at base does not follow it: it is recovered, cut before its
// first bad batch (cutDamaged), and before the first batch that ends at or
// past base (its last batch's base offset may be damaged). It reports
// whether the segment at base follows it then.
func (l *Log) cutBefore(base, logStart int64, clean bool) (bool, error) {
	prev := l.segs[len(l.segs)-1]
	l.segs = l.segs[:len(l.segs)-1]
	if err := prev.release(); err != nil && !errors.Is(err, segment.ErrClosed) {
		return false, err
	}
	seg, err := l.cutDamaged(prev.BaseOffset(), l.segmentOptions())
	if err != nil {
		return false, err
	}
	l.segs = append(l.segs, l.newRef(seg))
	// Durable before the segments after it may be dropped.
	if _, err := seg.TruncateTo(base); err != nil {
		return false, err
	}
	if err := errors.Join(seg.Seal(), seg.Sync()); err != nil {
		return false, err
	}
	follows, err := l.checkFollows(base, logStart, clean)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return false, err
	}
	return follows && err == nil, nil
}

// dropSegments removes the segments at bases, a tail of the log that
// damage before them cut off, the last first, so that a crash leaves a
// prefix of them.
func (l *Log) dropSegments(bases []int64) error {
	for _, base := range slices.Backward(bases) {
		if err := l.removeSegmentFiles(base); err != nil {
			return err
		}
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
	return nil
}

// checkFollows checks that a segment at base continues the segments
// loaded so far: the first one starts at or below the log start offset,
// and each later one where the one before it ends. A gap is allowed only
// where the log recorded one it made (a follower's batch past the log end).
// Anything else means a segment went missing or was cut, and is
// ErrCorrupt. follows is false for a segment that the one before already
// covers, which after an unclean shutdown is what an interrupted
// compaction swap leaves, to be removed.
func (l *Log) checkFollows(base, logStart int64, clean bool) (follows bool, err error) {
	name := segment.FileName(l.dir, base, segment.LogSuffix)
	gap, recorded := l.gapBefore(base)
	if len(l.segs) == 0 {
		if base > logStart && !(recorded && gap.end <= logStart) {
			return false, fmt.Errorf("log %s: %w: the log start offset %d is below the first segment %s: the segments holding offsets %d to %d are missing",
				l.dir, ErrCorrupt, logStart, name, logStart, base-1)
		}
		return true, nil
	}
	prev := l.segs[len(l.segs)-1]
	prevName := segment.FileName(l.dir, prev.BaseOffset(), segment.LogSuffix)
	end, err := prev.ReadNextOffset()
	if err != nil {
		return false, fmt.Errorf("log %s: %w", l.dir, err)
	}
	switch {
	case base < end && !clean:
		// A compaction's leftover ends where the segment that merged it
		// does at the latest; one that ends past it is not covered, and the
		// segment before holds a damaged last batch.
		covered, err := l.endsBy(base, end)
		if err != nil || covered {
			return false, err
		}
		return false, fmt.Errorf("log %s: %w: %s ends at offset %d, past the base offset of %s, which goes on past it: not a compaction's leftover",
			l.dir, ErrCorrupt, prevName, end, name)
	case base < end:
		return false, fmt.Errorf("log %s: %w: %s ends at offset %d, past the base offset of %s", l.dir, ErrCorrupt, prevName, end, name)
	case base > end && !(recorded && gap.end == end):
		return false, fmt.Errorf("log %s: %w: %s ends at offset %d and %s starts at %d: the offsets %d to %d are missing",
			l.dir, ErrCorrupt, prevName, end, name, base, end, base-1)
	}
	return true, nil
}

// endsBy reports whether the segment at base ends at offset end or
// before, reading only its tail.
func (l *Log) endsBy(base, end int64) (bool, error) {
	opts := l.segmentOptions()
	opts.Lazy = true
	seg, err := segment.Open(l.dir, base, opts)
	if err != nil {
		return false, fmt.Errorf("log %s: %w", l.dir, err)
	}
	next, err := seg.ReadNextOffset()
	if err = errors.Join(err, seg.Close()); err != nil {
		return false, fmt.Errorf("log %s: %w", l.dir, err)
	}
	return next <= end, nil
}

// cleanDir finishes what a crash interrupted, as Kafka's LogLoader does:
// files of deleted segments and half-built cleaned segments are removed,
// swap files (complete replacements) take their place, and index files
// without a log are removed. It returns the base offsets of the segments.
func (l *Log) cleanDir() ([]int64, error) {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return nil, fmt.Errorf("log: list %s: %w", l.dir, err)
	}
	changed := false // a removal or rename, to be made durable
	// A compaction's swap replaces a segment's indexes with its log: old
	// index files must not pair with the new log, whether or not the new
	// ones made it (missing ones are rebuilt).
	swapped := make(map[int64]bool) // bases with a log to swap in
	for _, name := range names {
		if base, ok := segmentBase(strings.TrimSuffix(name, swapSuffix), segment.LogSuffix); ok && strings.HasSuffix(name, swapSuffix) {
			if err := l.removeFiles(base, segment.IndexSuffix, segment.TimeIndexSuffix, txnIndexSuffix); err != nil {
				return nil, err
			}
			swapped[base] = true
			changed = true
		}
	}
	logs := make(map[int64]bool)
	var bases []int64
	for _, name := range names {
		path := filepath.Join(l.dir, name)
		switch {
		case strings.HasSuffix(name, deletedSuffix), strings.HasSuffix(name, cleanedSuffix), orphanSwap(name, swapped):
			if err := l.fs.Remove(path); err != nil {
				return nil, fmt.Errorf("log: %w", err)
			}
			changed = true
		case strings.HasSuffix(name, swapSuffix):
			if err := l.fs.Rename(path, strings.TrimSuffix(path, swapSuffix)); err != nil {
				return nil, fmt.Errorf("log: %w", err)
			}
			changed = true
			if base, ok := segmentBase(strings.TrimSuffix(name, swapSuffix), segment.LogSuffix); ok && !logs[base] {
				logs[base] = true
				bases = append(bases, base)
			}
		default:
			if base, ok := segmentBase(name, segment.LogSuffix); ok && !logs[base] {
				logs[base] = true
				bases = append(bases, base)
			}
		}
	}
	for _, name := range names {
		for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix, txnIndexSuffix} {
			if base, ok := segmentBase(name, suffix); ok && !logs[base] {
				if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
					return nil, fmt.Errorf("log: %w", err)
				}
				changed = true
			}
		}
	}
	slices.Sort(bases)
	if !changed {
		return bases, nil
	}
	return bases, vfs.SyncDir(l.fs, l.dir)
}

// orphanSwap reports whether name is the .swap of an index whose log has
// no .swap: the renames of an unfinished swap need not reach the disk in
// the order they were made, and putting that index in place would pair the
// old log with the new segment's index.
func orphanSwap(name string, swapped map[int64]bool) bool {
	index, ok := strings.CutSuffix(name, swapSuffix)
	if !ok {
		return false
	}
	for _, suffix := range []string{segment.IndexSuffix, segment.TimeIndexSuffix} {
		if base, ok := segmentBase(index, suffix); ok {
			return !swapped[base]
		}
	}
	return false
}

// segmentBase parses a segment file name: 20 digits and suffix.
func segmentBase(name, suffix string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, suffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	return base, err == nil && base >= 0
}

func (l *Log) removeSegmentFiles(base int64) error {
	return l.removeFiles(base, segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix, txnIndexSuffix)
}

// removeFiles removes the files of the segment at base with the suffixes
// given, those that exist.
func (l *Log) removeFiles(base int64, suffixes ...string) error {
	for _, suffix := range suffixes {
		if err := l.fs.Remove(segment.FileName(l.dir, base, suffix)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return fmt.Errorf("log: %w", err)
		}
	}
	return nil
}

// readOffset reads a one-offset checkpoint file; a missing one is 0.
func (l *Log) readOffset(name string) (int64, error) {
	var off int64
	n := 0
	err := l.readCheckpoint(name, func(entry string) error {
		var err error
		n++
		if n > 1 {
			return errors.New("more than one entry")
		}
		if off, err = strconv.ParseInt(entry, 10, 64); err != nil || off < 0 {
			return fmt.Errorf("offset %q is not a non-negative int64", entry)
		}
		return nil
	})
	return off, err
}

// readCheckpoint reads the entries of a checkpoint file in the log's
// directory; a missing file has none.
func (l *Log) readCheckpoint(name string, parse func(entry string) error) error {
	err := checkpoint.Read(l.fs, filepath.Join(l.dir, name), 0, parse)
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("log %s: %w", l.dir, corruptCheckpoint(err))
	}
	return nil
}

// corruptCheckpoint makes a checkpoint file that does not parse an
// ErrCorrupt, which users can match, as well as the checkpoint package's
// own error.
func corruptCheckpoint(err error) error {
	if errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrInvalidEntry) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

func (l *Log) writeOffset(name string, off int64) error {
	if err := checkpoint.Write(l.fs, filepath.Join(l.dir, name), 0, []string{strconv.FormatInt(off, 10)}); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	return nil
}

// writeCheckpointsLocked writes the recovery point, the high watermark and
// the log start offset, each only if it changed since it was last written.
func (l *Log) writeCheckpointsLocked(now time.Time) error {
	l.lastCheckpoint = now
	var errs []error
	for i, c := range [...]struct {
		name string
		off  int64
	}{{recoveryPointFile, l.recoveryPoint}, {highWatermarkFile, l.hw.Load()}, {logStartFile, l.logStart.Load()}} {
		if l.checkpointed[i] == c.off {
			continue
		}
		if err := l.writeOffset(c.name, c.off); err != nil {
			errs = append(errs, err)
			continue
		}
		l.checkpointed[i] = c.off
	}
	err := errors.Join(errs...)
	l.stats.checkpointErr.Store(&err)
	return err
}

// Close syncs the log, writes its checkpoints and the clean-shutdown
// marker, and closes its files. If a sync failed, now or before (the log
// is failed), it writes neither and returns an error wrapping ErrFailed:
// the next Open recovers whatever the disk holds. Appends already written
// finish first; appends waiting to be written fail with ErrClosed;
// goroutines in Wait return ErrClosed. Batches that readers still hold
// stay readable until they are closed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	l.notify()

	l.wmu.Lock()
	if l.flushTimer != nil && l.flushTimer.Stop() {
		l.timers.Done()
	}
	l.flushTimer = nil
	l.wmu.Unlock()  // no group is being written now, and none will be
	l.timers.Wait() // a timer that fired takes wmu, sees closed and returns
	l.smu.Lock()
	// Groups still syncing finish first; after a failed sync, their
	// appenders give up without one.
	for l.syncing || (l.syncErr == nil && l.durable != l.syncsIssued) {
		l.syncOrder.Wait()
	}
	if l.newest.seg != nil {
		l.newest.seg.release()
		l.newest = syncTicket{}
	}
	l.smu.Unlock()

	l.wmu.Lock()
	defer l.wmu.Unlock()

	// A failed log's final sync and marker are skipped: its unsynced
	// writes may be lost, so the next Open must recover, and the caller
	// must learn that this was no clean shutdown.
	err := l.failed
	if err == nil {
		active := l.active()
		if err = active.Seal(); err != nil {
			err = fmt.Errorf("log %s: close: %w", l.dir, err)
		} else if err = errors.Join(active.Sync(), active.syncTxnIndex()); err != nil {
			err = fmt.Errorf("%w: %s: close: %w", ErrFailed, l.dir, err)
		}
		var snapErr error
		if err == nil {
			// Kafka snapshots the producer state on close, so that the
			// next open replays nothing; without one it replays more.
			if snapErr = l.snapshotLocked(l.leo.Load()); errors.Is(snapErr, ErrFailed) {
				err = snapErr
			}
		}
		if err == nil {
			l.recoveryPoint = l.leo.Load()
			err = l.writeCheckpointsLocked(l.opts.Now())
		}
		if err == nil {
			err = l.writeMarker()
		}
		if err == nil {
			err = snapErr
		}
	}
	for _, s := range l.segs {
		err = errors.Join(err, s.release())
	}
	err = errors.Join(err, l.lock.Close())
	if l.dirLock != nil {
		err = errors.Join(err, l.dirLock.Close())
	}
	return err
}

func (l *Log) writeMarker() error {
	f, err := l.fs.Create(filepath.Join(l.dir, cleanShutdownFile))
	if err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	return vfs.SyncDir(l.fs, l.dir)
}
