package log

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/strandlog/strand/internal/checkpoint"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// UndefinedEpoch is the leader epoch of nothing: the answer of an EpochCache
// that does not know an epoch, and the epoch a client sends when it has
// none (Kafka's OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH).
const UndefinedEpoch int32 = -1

// UndefinedEpochOffset is the end offset of UndefinedEpoch (Kafka's
// OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET).
const UndefinedEpochOffset int64 = -1

// ErrInvalidEpoch is matched by the error EpochCache.Assign returns for a
// negative epoch or start offset.
var ErrInvalidEpoch = errors.New("log: invalid leader epoch entry")

// epochCheckpointName is the file, in a partition's directory, that holds
// its leader epoch cache (Kafka's LeaderEpochCheckpointFile).
const epochCheckpointName = "leader-epoch-checkpoint"

const epochCheckpointVersion = 0

// EpochEntry says that the leader of Epoch wrote its first record at
// StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// EpochCache is a partition's leader epoch cache: for every leader epoch
// that wrote to the log, the offset of its first record (KIP-101). Entries
// increase strictly in both epoch and start offset. Replicas use it to find
// where their logs diverge (EndOffsetFor).
//
// The cache is kept in the partition directory's leader-epoch-checkpoint
// file, in Kafka's format; every method that changes the cache rewrites the
// file atomically before it returns. Kafka flushes truncations in the
// background and repairs a stale file by truncating again when it loads the
// log; flushing every change keeps the file exact at the cost of an fsync
// per truncation, which happens only when the log is truncated or its
// start offset moves.
//
// An EpochCache is safe for concurrent use. Readers do not wait for a
// change being written to the file.
//
// The rules are Kafka's (apache/kafka:
// storage/src/main/java/org/apache/kafka/storage/internals/epoch/LeaderEpochFileCache.java).
type EpochCache struct {
	fs   vfs.FS
	file string

	// writeMu serializes changes, including their write to the file, so
	// that the file and the entries change in the same order.
	writeMu sync.Mutex
	// mu guards entries, which is replaced, never modified in place.
	mu      sync.RWMutex
	entries []EpochEntry

	// rebuild makes checkBatch assign the epochs of the batches it sees,
	// in memory, while a log loads with its checkpoint file damaged;
	// finishRebuild writes them.
	rebuild bool
}

// OpenEpochCache loads the leader epoch cache of the partition directory
// dir. A missing checkpoint file is an empty cache. A file that is not a
// valid version 0 leader epoch checkpoint is an error matching ErrCorrupt
// and naming the file and line. Entries that are not
// strictly increasing are resolved as Assign would resolve them, as Kafka
// does.
func OpenEpochCache(fsys vfs.FS, dir string) (*EpochCache, error) {
	c := &EpochCache{fs: fsys, file: filepath.Join(dir, epochCheckpointName)}
	err := checkpoint.Read(fsys, c.file, epochCheckpointVersion, func(line string) error {
		e, err := parseEpochEntry(line)
		if err != nil {
			return err
		}
		c.entries = assign(c.entries, e)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("log: loading leader epoch cache: %w", corruptCheckpoint(err))
	}
	return c, nil
}

// parseEpochEntry parses Kafka's "epoch startOffset" line.
func parseEpochEntry(line string) (EpochEntry, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return EpochEntry{}, fmt.Errorf("want \"epoch startOffset\", got %q", line)
	}
	epoch, err := strconv.ParseInt(f[0], 10, 32)
	if err != nil || epoch < 0 {
		return EpochEntry{}, fmt.Errorf("epoch %q is not a non-negative int32", f[0])
	}
	start, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || start < 0 {
		return EpochEntry{}, fmt.Errorf("start offset %q is not a non-negative int64", f[1])
	}
	return EpochEntry{Epoch: int32(epoch), StartOffset: start}, nil
}

// Assign records that epoch's leader wrote its first record at
// startOffset. It does nothing if epoch is the latest epoch already and
// starts at or before startOffset: an epoch's start offset never moves
// forward. Otherwise it first removes every entry whose epoch is at least
// epoch or whose start offset is at least startOffset, so that the entries
// stay increasing in both; a leader calls Assign when it is elected and a
// follower when it appends a batch, so such entries belong to a log suffix
// that has been or is being replaced.
//
// A negative epoch or start offset fails with ErrInvalidEpoch. If the
// checkpoint file cannot be written, Assign returns the error and the cache
// is unchanged, while the file may hold the old or the new entries; treat
// it as a failure of the storage.
func (c *EpochCache) Assign(epoch int32, startOffset int64) error {
	if epoch < 0 || startOffset < 0 {
		return fmt.Errorf("%w: epoch %d at offset %d", ErrInvalidEpoch, epoch, startOffset)
	}
	e := EpochEntry{Epoch: epoch, StartOffset: startOffset}
	// Most calls come from appends in the current epoch and change nothing;
	// answer them without taking the write lock.
	c.mu.RLock()
	needed := updateNeeded(c.entries, e)
	c.mu.RUnlock()
	if !needed {
		return nil
	}
	return c.update(func(entries []EpochEntry) []EpochEntry { return assign(entries, e) })
}

// updateNeeded reports whether assigning e changes entries (Kafka's
// isUpdateNeeded).
func updateNeeded(entries []EpochEntry, e EpochEntry) bool {
	if len(entries) == 0 {
		return true
	}
	latest := entries[len(entries)-1]
	return e.Epoch != latest.Epoch || e.StartOffset < latest.StartOffset
}

// assign returns entries with e assigned; it may reuse entries' array.
func assign(entries []EpochEntry, e EpochEntry) []EpochEntry {
	if !updateNeeded(entries, e) {
		return entries
	}
	// Kafka's maybeTruncateNonMonotonicEntries: drop from the end every
	// entry that is not strictly below e in epoch and start offset.
	n := len(entries)
	for n > 0 && (entries[n-1].Epoch >= e.Epoch || entries[n-1].StartOffset >= e.StartOffset) {
		n--
	}
	return append(entries[:n], e)
}

// TruncateFromEnd removes the entries of epochs that start at or after
// endOffset, for a log truncated to end at endOffset. A negative endOffset
// (UndefinedEpochOffset) changes nothing.
func (c *EpochCache) TruncateFromEnd(endOffset int64) error {
	if endOffset < 0 {
		return nil
	}
	return c.update(func(entries []EpochEntry) []EpochEntry {
		n := len(entries)
		for n > 0 && entries[n-1].StartOffset >= endOffset {
			n--
		}
		return entries[:n]
	})
}

// TruncateFromStart forgets the epochs wholly before startOffset, for a log
// whose start offset moved to startOffset. The epoch that startOffset was
// written in is kept and now starts at startOffset; so is every later one.
func (c *EpochCache) TruncateFromStart(startOffset int64) error {
	return c.update(func(entries []EpochEntry) []EpochEntry {
		// Kafka removes every entry starting at or before startOffset and
		// puts the last of them back, starting at startOffset.
		i := sort.Search(len(entries), func(i int) bool { return entries[i].StartOffset > startOffset })
		if i == 0 {
			return entries
		}
		kept := entries[i-1:]
		kept[0].StartOffset = startOffset
		return kept
	})
}

// Clear removes every entry, for a log that was emptied.
func (c *EpochCache) Clear() error {
	return c.update(func([]EpochEntry) []EpochEntry { return nil })
}

// update applies fn to a copy of the entries and, if that changed them,
// writes the result to the checkpoint file and then installs it.
func (c *EpochCache) update(fn func([]EpochEntry) []EpochEntry) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Only writers replace c.entries, and they hold writeMu: reading it
	// here needs no other lock.
	next := fn(slices.Clone(c.entries))
	if slices.Equal(next, c.entries) {
		return nil
	}
	if err := c.write(next); err != nil {
		return err
	}
	c.mu.Lock()
	c.entries = next
	c.mu.Unlock()
	return nil
}

// write replaces the checkpoint file with entries, atomically.
func (c *EpochCache) write(entries []EpochEntry) error {
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = strconv.FormatInt(int64(e.Epoch), 10) + " " + strconv.FormatInt(e.StartOffset, 10)
	}
	if err := checkpoint.Write(c.fs, c.file, epochCheckpointVersion, lines); err != nil {
		return fmt.Errorf("log: writing leader epoch cache: %w", err)
	}
	return nil
}

// EndOffsetFor answers a replica that asks where requestedEpoch ended in
// this log (OffsetsForLeaderEpoch, and a fetch's divergence check) when the
// log ends at logEndOffset. It returns the largest epoch at most
// requestedEpoch that this log knows and the offset where that epoch ended:
// the start of the next larger epoch, or logEndOffset for the latest epoch.
// Returning the epoch as well as the offset is KIP-279's fix: a follower
// whose epoch this log never had learns which of its own epochs to compare
// with, instead of truncating to an offset that may hold other records.
//
// The special cases are Kafka's:
//   - requestedEpoch is UndefinedEpoch, or larger than every known epoch, or
//     the cache is empty: (UndefinedEpoch, UndefinedEpochOffset);
//   - requestedEpoch is below every known epoch: (requestedEpoch, start of
//     the first epoch); the records before it were deleted, and the replica
//     should fetch from there.
func (c *EpochCache) EndOffsetFor(requestedEpoch int32, logEndOffset int64) (epoch int32, endOffset int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	entries := c.entries
	if requestedEpoch == UndefinedEpoch || len(entries) == 0 {
		return UndefinedEpoch, UndefinedEpochOffset
	}
	if entries[len(entries)-1].Epoch == requestedEpoch {
		// The latest epoch is still being written (on a leader), so it ends
		// at the log end.
		return requestedEpoch, logEndOffset
	}
	higher := sort.Search(len(entries), func(i int) bool { return entries[i].Epoch > requestedEpoch })
	switch higher {
	case len(entries):
		return UndefinedEpoch, UndefinedEpochOffset
	case 0:
		return requestedEpoch, entries[0].StartOffset
	default:
		return entries[higher-1].Epoch, entries[higher].StartOffset
	}
}

// EpochForOffset returns the epoch in which offset was written: that of the
// last entry starting at or before offset. It returns UndefinedEpoch for an
// offset before the first entry or when the cache is empty.
func (c *EpochCache) EpochForOffset(offset int64) int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].StartOffset > offset })
	if i == 0 {
		return UndefinedEpoch
	}
	return c.entries[i-1].Epoch
}

// checkBatch checks the partition leader epoch of batch header b, which
// the batch's CRC does not cover, against the cache, for the segments'
// walks (segment.Options.CheckBatch): from the cache's first entry on, a
// batch must carry the epoch of the entry it starts in, which Assign made
// durable before the batch was written. Before the first entry (the log
// start offset moved into a batch, or the batch was written before
// epochs) its epoch may not be later than the first entry's, and a cache
// with no entries allows only batches without an epoch.
func (c *EpochCache) checkBatch(b segment.Batch) error {
	epoch, base := b.PartitionLeaderEpoch(), b.BaseOffset()
	if c.rebuild {
		// Only the loading log uses the cache yet.
		if epoch != UndefinedEpoch {
			c.entries = assign(c.entries, EpochEntry{Epoch: epoch, StartOffset: base})
		}
		return nil
	}
	c.mu.RLock()
	entries := c.entries
	c.mu.RUnlock()
	i := sort.Search(len(entries), func(i int) bool { return entries[i].StartOffset > base })
	switch {
	case i > 0 && entries[i-1].Epoch != epoch:
		return fmt.Errorf("leader epoch %d, but the leader epoch cache has epoch %d from offset %d", epoch, entries[i-1].Epoch, entries[i-1].StartOffset)
	case i == 0 && len(entries) > 0 && epoch > entries[0].Epoch:
		return fmt.Errorf("leader epoch %d, later than epoch %d, the first in the leader epoch cache, which starts at offset %d", epoch, entries[0].Epoch, entries[0].StartOffset)
	case len(entries) == 0 && epoch != UndefinedEpoch:
		return fmt.Errorf("leader epoch %d, but the leader epoch cache has no epoch", epoch)
	}
	return nil
}

// rebuildEpochs handles err, the leader epoch checkpoint failing to load:
// with TruncateCorruption, damage is recorded and the cache starts empty,
// to be rebuilt from the batches as Open reads them all (Kafka's
// LogSegment.recover assigns the epochs of the batches it reads). The
// damaged file stays until finishRebuild replaces it: a power cut before
// leaves the damage to be found again, never a cache that lacks epochs.
func (l *Log) rebuildEpochs(err error) (*EpochCache, error) {
	file := filepath.Join(l.dir, epochCheckpointName)
	if err := l.foundDamage(err, file); err != nil {
		return nil, err
	}
	return &EpochCache{fs: l.fs, file: file, rebuild: true}, nil
}

// finishRebuild writes the entries rebuildEpochs started, if it did.
func (c *EpochCache) finishRebuild() error {
	if !c.rebuild {
		return nil
	}
	c.rebuild = false
	return c.write(c.entries)
}

// Latest returns the latest entry; ok is false when the cache is empty. On
// a leader its StartOffset is the leader epoch start offset that a follower
// must reach before it may join the ISR.
func (c *EpochCache) Latest() (e EpochEntry, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.entries) == 0 {
		return EpochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// LatestEpoch returns the latest epoch, or UndefinedEpoch when the cache is
// empty.
func (c *EpochCache) LatestEpoch() int32 {
	e, ok := c.Latest()
	if !ok {
		return UndefinedEpoch
	}
	return e.Epoch
}

// Entries returns a copy of the entries, oldest first.
func (c *EpochCache) Entries() []EpochEntry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.entries)
}
