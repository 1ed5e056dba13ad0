package log

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// cleanerCheckpointFile holds the first dirty offset: where the part of the
// log that no compaction has seen begins (Kafka's
// cleaner-offset-checkpoint, kept per log directory here).
const cleanerCheckpointFile = "cleaner-offset-checkpoint"

// Defaults for CompactOptions, Kafka's.
const (
	DefaultDeleteRetention        = 24 * time.Hour // delete.retention.ms
	DefaultMinCleanableDirtyRatio = 0.5            // min.cleanable.dirty.ratio
	DefaultKeyMapBytes            = 16 << 20
)

// CompactOptions configure a compaction (cleanup.policy=compact). The zero
// value means the defaults given with each field.
type CompactOptions struct {
	// DeleteRetention is how long a tombstone (a record with a key and a
	// null value) stays after compaction first sees it, so that a consumer
	// that reaches the head within this time sees the delete
	// (delete.retention.ms); default 24 hours.
	DeleteRetention time.Duration

	// MinCleanableDirtyRatio is the share of the cleanable bytes that must
	// be dirty, not yet compacted, for Compact to run
	// (min.cleanable.dirty.ratio); default 0.5, allowed above 0 to 1.
	MinCleanableDirtyRatio float64

	// MinCompactionLag keeps records this recent out of compaction, a
	// segment at a time: a segment whose newest record is younger is not
	// cleaned, nor any after it (min.compaction.lag.ms); default 0.
	MinCompactionLag time.Duration

	// MaxCompactionLag makes Compact run whatever the dirty ratio once the
	// oldest dirty record is this old (max.compaction.lag.ms, KIP-354);
	// default 0, no limit.
	MaxCompactionLag time.Duration

	// KeyMapBytes is the memory for the map from keys to their latest
	// offsets, 24 bytes a key at a load of at most 3/4
	// (log.cleaner.dedupe.buffer.size). A dirty section with more keys is
	// compacted over several calls. Default 16 MiB, allowed 1 KiB to
	// 2 GiB-1 (Kafka's cap on a cleaner thread's buffer). The map takes
	// only what its keys need; once built, a bit for each offset it
	// covers, if that fits in KeyMapBytes too, spares the rewrite a
	// lookup per record.
	KeyMapBytes int

	// Force compacts whatever the dirty ratio and MaxCompactionLag say.
	Force bool

	// hash is the key map's first hash; tests set it to force collisions.
	hash func([]byte) uint64
}

const (
	minKeyMapBytes = 1 << 10
	maxKeyMapBytes = math.MaxInt32 // LogCleaner: min(dedupeBufferSize / numThreads, Int.MaxValue)
)

func (o CompactOptions) withDefaults() (CompactOptions, error) {
	bad := func(name string, v any, allowed string) error {
		return fmt.Errorf("%w: %s is %v, allowed %s", ErrInvalidOption, name, v, allowed)
	}
	switch {
	case o.DeleteRetention == 0:
		o.DeleteRetention = DefaultDeleteRetention
	case o.DeleteRetention < 0:
		return o, bad("DeleteRetention", o.DeleteRetention, "0 or more")
	}
	switch {
	case o.MinCleanableDirtyRatio == 0:
		o.MinCleanableDirtyRatio = DefaultMinCleanableDirtyRatio
	case !(o.MinCleanableDirtyRatio > 0 && o.MinCleanableDirtyRatio <= 1):
		return o, bad("MinCleanableDirtyRatio", o.MinCleanableDirtyRatio, "above 0 to 1")
	}
	if o.MinCompactionLag < 0 {
		return o, bad("MinCompactionLag", o.MinCompactionLag, "0 or more")
	}
	if o.MaxCompactionLag < 0 {
		return o, bad("MaxCompactionLag", o.MaxCompactionLag, "0 or more")
	}
	switch {
	case o.KeyMapBytes == 0:
		o.KeyMapBytes = DefaultKeyMapBytes
	case o.KeyMapBytes < minKeyMapBytes || o.KeyMapBytes > maxKeyMapBytes:
		return o, bad("KeyMapBytes", o.KeyMapBytes, "1024 to 2147483647")
	}
	if o.hash == nil {
		o.hash = xxhash.Sum64
	}
	return o, nil
}

// CompactStats say what a Compact call did.
type CompactStats struct {
	// Segments is how many segments were rewritten, and Groups how many
	// segments replaced them.
	Segments, Groups int

	BytesRead, BytesWritten     int64
	RecordsRead, RecordsRemoved int64

	// FirstDirtyOffset is where the part of the log that compaction has
	// not yet seen begins, after this call.
	FirstDirtyOffset int64

	Duration time.Duration
}

// Compact compacts the log if the triggers in opts say so: it keeps the
// latest record of every key, by Kafka's log cleaner rules
// (apache/kafka:storage/src/main/java/org/apache/kafka/storage/internals/log/Cleaner.java):
//
//   - Offsets never change: records are removed, never moved, so reads
//     from any offset go on working (a read in a gap carries on at the
//     next record).
//   - Only the cleanable part is compacted: whole segments from the log
//     start, stopping before the active segment, the segment holding the
//     high watermark, and the first segment whose newest record is within
//     MinCompactionLag of now.
//   - It runs when the dirty (never compacted) bytes are at least
//     MinCleanableDirtyRatio of the cleanable bytes, when the oldest dirty
//     record is older than MaxCompactionLag, or with Force.
//   - A record is kept if no later record in the dirty part has its key.
//     Records without a key are removed.
//   - A tombstone (null value) is kept until DeleteRetention after the
//     first compaction that saw it, which stamps that time on its batch as
//     the delete horizon (KIP-534); a compaction after the horizon removes
//     it.
//   - Nothing at or past the last stable offset is compacted: an open
//     transaction's batches, and everything after them, stay as they are.
//   - The records of aborted transactions are removed, and their keys
//     make no older record go (Kafka's CleanedTransactionMetadata). An
//     ABORT marker stays, with its .txnindex entry, while a batch of its
//     transaction does; a COMMIT marker while a batch of its transaction
//     does. Once none does, a marker is kept until DeleteRetention after
//     the compaction that first finds it so, stamped as a tombstone's
//     batch is, and then removed (KIP-534).
//   - A batch of an idempotent producer whose records are all removed is
//     kept as a header if it is the producer's last batch, or last data
//     batch, in the log, so that its epoch and sequence numbers survive
//     (Kafka's BatchRetention.RETAIN_EMPTY).
//   - Batches compressed with a codec this library cannot decode (snappy,
//     zstd) are kept whole, and their keys make no older record go.
//
// The segments are rewritten in groups that fit SegmentBytes, each into
// one new segment that takes the group's place crash-safely: built as
// .cleaned files, synced, renamed .swap, then the old files are renamed
// .deleted and the new ones given their plain names. A crash at any point
// leaves either the old segments or the new one (Open finishes the swap).
// Readers holding the old segments go on reading them until they close.
//
// Appends go on while the key map is built; each group's rewrite holds the
// log's writer lock, so appends wait for one group at a time. A
// truncation meanwhile abandons the compaction.
func (l *Log) Compact(now time.Time, opts CompactOptions) (CompactStats, error) {
	start := time.Now()
	opts, err := opts.withDefaults()
	if err != nil {
		return CompactStats{}, err
	}
	p, err := l.planCompaction(now, opts)
	if err != nil {
		return CompactStats{Duration: time.Since(start)}, err
	}
	defer p.release()
	if len(p.segs) > 0 {
		err = l.compact(p, now, opts)
	}
	p.st.Duration = time.Since(start)
	return p.st, err
}

func (l *Log) compact(p *plan, now time.Time, opts CompactOptions) error {
	c := &cleaner{l: l, plan: p, opts: opts, now: now.UnixMilli(), keys: newKeyMap(opts.KeyMapBytes, opts.hash),
		txns: newTxnTracker(p.aborted)}
	if err := c.buildKeyMap(); err != nil {
		return err
	}
	c.latest = c.keys.latestIn(p.firstDirty, c.end, opts.KeyMapBytes)
	cleaned := slices.IndexFunc(p.segs, func(s *segRef) bool { return s.BaseOffset() >= c.end })
	if cleaned < 0 {
		cleaned = len(p.segs)
	}
	complete := true
	for _, g := range l.groupSegments(p.segs[:cleaned]) {
		done, err := c.cleanGroup(g)
		switch {
		case err != nil:
			return err
		case done == groupTruncated:
			// The key map may name offsets that hold other records now.
			return nil
		case done == groupSkipped:
			// The group's batches went unread: whether a later
			// marker's transaction has any left is unknown.
			c.txns.partial = true
			complete = false
		}
	}
	if !complete {
		// Another compaction or retention got there first; the next
		// call starts from the old checkpoint again.
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	end := max(c.end, p.firstDirty)
	if err := l.writeOffset(cleanerCheckpointFile, end); err != nil {
		return err
	}
	p.st.FirstDirtyOffset = end
	return nil
}

// plan is what a compaction works on: the segments up to the first
// uncleanable one, held so that their files stay open.
type plan struct {
	segs        []*segRef // from the first segment to the last cleanable one; none if nothing is to be done
	active      *segRef   // the active segment when planned: gone means truncated
	dirty       int       // index in segs of the first segment with dirty records
	firstDirty  int64
	uncleanable int64                    // the base offset after the last cleanable segment
	aborted     []idempotence.AbortedTxn // the aborted transactions with data in segs
	st          CompactStats
}

func (p *plan) release() {
	for _, s := range p.segs {
		s.release()
	}
	p.segs = nil
}

// planCompaction finds the cleanable segments and checks the triggers
// (Kafka's LogCleanerManager.cleanableOffsets and the dirty ratio). It
// returns a plan without segments if there is nothing to do.
func (l *Log) planCompaction(now time.Time, opts CompactOptions) (*plan, error) {
	if err := l.lockWriter(true); err != nil {
		return nil, err
	}
	defer l.wmu.Unlock()
	firstDirty, err := l.readOffset(cleanerCheckpointFile)
	if err != nil {
		return nil, err
	}
	logStart, leo, lso := l.logStart.Load(), l.leo.Load(), l.LastStableOffset()
	if firstDirty < logStart || firstDirty > leo {
		firstDirty = logStart
	}
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()

	p := &plan{active: segs[len(segs)-1], firstDirty: firstDirty}
	p.st.FirstDirtyOffset = firstDirty
	p.dirty = slices.IndexFunc(segs, func(s *segRef) bool { return s.NextOffset() > firstDirty })
	if p.dirty < 0 {
		return p, nil
	}
	lag := now.Add(-opts.MinCompactionLag).UnixMilli()
	n := p.dirty
	for n < len(segs)-1 && segs[n].NextOffset() <= lso &&
		(opts.MinCompactionLag == 0 || segs[n].MaxTimestamp() <= lag) {
		n++
	}
	if n == p.dirty && (!opts.Force || n == 0) {
		// Nothing dirty is cleanable. Forced, the clean part is rewritten
		// all the same: small segments merge, and tombstones past their
		// horizon go.
		return p, nil
	}
	p.uncleanable = segs[n].BaseOffset()
	var clean, dirty int64
	for i, s := range segs[:n] {
		if i < p.dirty {
			clean += s.Size()
		} else {
			dirty += s.Size()
		}
	}
	first := segs[min(p.dirty, n)].FirstBatchTimestamp()
	overdue := opts.MaxCompactionLag > 0 && first >= 0 && now.Sub(time.UnixMilli(first)) > opts.MaxCompactionLag
	if !opts.Force && !overdue && float64(dirty) < opts.MinCleanableDirtyRatio*float64(clean+dirty) {
		return p, nil
	}
	// Every transaction with data in the cleanable part is decided: the
	// aborted ones are all in the .txnindex files, of these segments or
	// later ones.
	if p.aborted, err = abortedIn(segs, segs[0].BaseOffset(), p.uncleanable); err != nil {
		return nil, fmt.Errorf("log %s: compaction: %w", l.dir, err)
	}
	for _, s := range segs[:n] {
		s.acquire() // the log holds them, under wmu
		p.segs = append(p.segs, s)
	}
	return p, nil
}

// groupSegments splits segs into runs that each fit one segment (Kafka's
// Cleaner.groupSegmentsBySize): at most SegmentBytes, an index that cannot
// fill, and offsets within 2^31 of the base. The new segment is no larger
// than the sum of the old ones.
func (l *Log) groupSegments(segs []*segRef) [][]*segRef {
	segmentBytes := l.liveOptions().SegmentBytes // a topic's configuration may change it
	var groups [][]*segRef
	for len(segs) > 0 {
		n, size := 1, segs[0].Size()
		for n < len(segs) {
			next := segs[n]
			end := next.NextOffset()
			if n+1 < len(segs) {
				end = segs[n+1].BaseOffset()
			}
			if size+next.Size() > segmentBytes || !l.indexFits(size+next.Size()) ||
				end-1-segs[0].BaseOffset() > math.MaxInt32 {
				break
			}
			size += next.Size()
			n++
		}
		groups = append(groups, segs[:n])
		segs = segs[n:]
	}
	return groups
}

// indexFits reports whether the indexes of a segment of size bytes cannot
// fill: an offset index entry takes at least IndexIntervalBytes+1 bytes of
// batches and one batch, and the time index has at most one entry more,
// of 12 bytes.
func (l *Log) indexFits(size int64) bool {
	return l.indexBytes(size) <= int64(l.opts.MaxIndexBytes)
}

// indexBytes bounds the size of the larger index, the time index, of a
// segment of size bytes.
func (l *Log) indexBytes(size int64) int64 {
	per := max(int64(l.opts.IndexIntervalBytes)+1, segment.HeaderSize)
	return (size/per + 2) * 12
}

// cleaner is one compaction's state.
type cleaner struct {
	l    *Log
	plan *plan
	opts CompactOptions
	now  int64 // ms
	keys *keyMap

	// end is the offset up to which the key map knows every key: a record
	// at or past it is kept whatever its key.
	end int64

	// lastOfProducer and lastDataOfProducer map each producer id to the
	// last offset of its last batch and last data batch up to the first
	// uncleanable offset.
	lastOfProducer, lastDataOfProducer map[int64]int64

	// txns follows the transactions of the batches rewritten, and
	// groupAborted collects those of the group being rewritten that its
	// new .txnindex keeps.
	txns         *txnTracker
	groupAborted []idempotence.AbortedTxn

	// latest marks the offsets from the plan's first dirty one up to end
	// that are their key's latest, if the map made it (keyMap.latestIn):
	// a record of the dirty part is kept or not by its bit, without
	// looking its key up.
	latest  []uint64
	offsets []int64 // latestOf's

	// recs are a batch's records being filtered, kept those that stay.
	recs, kept []segment.Record
	buf        []byte
	out        []byte          // batches kept, not yet written
	batches    []segment.Batch // c.out's batches, as flush hands them over
}

// buildKeyMap reads the dirty segments and maps each key to its latest
// offset, until the map is full (Kafka's Cleaner.buildOffsetMap). It also
// learns each producer's last batches, from all the cleanable segments.
// The records of aborted transactions are left out of the map, as Kafka's
// buildOffsetMapForSegment leaves them: they must not make an older
// record of their key go.
func (c *cleaner) buildKeyMap() error {
	p := c.plan
	c.lastOfProducer, c.lastDataOfProducer = make(map[int64]int64), make(map[int64]int64)
	c.end = p.uncleanable
	txns := newTxnTracker(p.aborted)
	for i, s := range p.segs {
		dirty := i >= p.dirty
		// Once the map is full, the rest of the segment is still read for
		// its producers: the whole segment is rewritten.
		full := false
		for b, err := range s.Batches(s.BaseOffset(), dirty) {
			if err != nil {
				return fmt.Errorf("log %s: compaction: %w", c.l.dir, err)
			}
			if b.ProducerID() >= 0 {
				c.lastOfProducer[b.ProducerID()] = b.LastOffset()
				if !b.Control() {
					c.lastDataOfProducer[b.ProducerID()] = b.LastOffset()
				}
			}
			aborted := false
			if b.Control() {
				txns.marker(b)
			} else {
				aborted = txns.data(b)
			}
			if !dirty || full || aborted {
				continue
			}
			p.st.BytesRead += int64(len(b))
			if full, err = c.mapBatch(b, p.firstDirty); err != nil {
				return fmt.Errorf("log %s: compaction: %w", c.l.dir, err)
			}
		}
		if full {
			return nil
		}
	}
	return nil
}

// mapBatch puts the keys of b's records at or after from into the map. If
// the map fills, it sets c.end after the last record mapped and returns
// true.
func (c *cleaner) mapBatch(b segment.Batch, from int64) (full bool, err error) {
	if err := b.Validate(); err != nil {
		return false, err
	}
	if b.Control() {
		return false, nil
	}
	c.recs = c.recs[:0]
	for r, err := range b.Records() {
		if errors.Is(err, segment.ErrUnsupportedCodec) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if r.Key != nil && r.Offset >= from {
			c.recs = append(c.recs, r)
		}
	}
	// The batch's keys go in together, so that their lookups overlap.
	n := c.keys.putAll(c.recs)
	if n == len(c.recs) {
		return false, nil
	}
	last := b.BaseOffset() - 1
	if n > 0 {
		last = c.recs[n-1].Offset
	}
	c.end = max(last+1, from)
	return true, nil
}

// What cleanGroup did.
type groupResult int8

const (
	groupCleaned groupResult = iota
	// groupSkipped: retention or another compaction replaced the group.
	groupSkipped
	// groupTruncated: a truncation removed the segment that was active
	// when the compaction began, so the key map cannot be trusted.
	groupTruncated
)

// cleanGroup rewrites one group of segments into a new one and swaps it
// in, holding the writer lock.
func (c *cleaner) cleanGroup(group []*segRef) (groupResult, error) {
	l := c.l
	if err := l.lockWriter(true); err != nil {
		return 0, err
	}
	defer l.wmu.Unlock()
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	if !slices.Contains(segs, c.plan.active) {
		return groupTruncated, nil
	}
	at := slices.Index(segs, group[0])
	if at < 0 || at+len(group) > len(segs) || !slices.Equal(segs[at:at+len(group)], group) {
		return groupSkipped, nil
	}

	opts := l.segmentOptions()
	opts.Suffix = cleanedSuffix
	// The indexes need room for the group's bytes at most, not for a
	// whole segment's: preallocating less makes them cheaper to map and
	// trim.
	var size int64
	for _, s := range group {
		size += s.Size()
	}
	opts.MaxIndexBytes = int(min(int64(opts.MaxIndexBytes), max(l.indexBytes(size), 1024)))
	seg, err := segment.Create(l.dir, group[0].BaseOffset(), opts)
	if err != nil {
		return 0, fmt.Errorf("log %s: compaction: %w", l.dir, err)
	}
	c.groupAborted = c.groupAborted[:0]
	err = c.rewrite(seg, group)
	if err == nil {
		err = errors.Join(seg.Seal(), seg.Sync())
	}
	// The aborted transactions whose markers stay go with the new
	// segment, in a .txnindex renamed with its other files (Kafka's
	// cleaner writes the cleaned segment's index from the markers it
	// keeps).
	txnIndex := segment.FileName(l.dir, seg.BaseOffset(), txnIndexSuffix)
	merged := false
	if err == nil {
		merged, err = l.writeTxnIndex(seg.BaseOffset(), c.groupAborted, cleanedSuffix)
	}
	if err == nil {
		err = seg.Rename(swapSuffix)
	}
	if err == nil && merged {
		err = l.fs.Rename(txnIndex+cleanedSuffix, txnIndex+swapSuffix)
	}
	if err == nil {
		err = vfs.SyncDir(l.fs, l.dir)
	}
	if err != nil {
		return 0, errors.Join(fmt.Errorf("log %s: compaction: %w", l.dir, err), seg.Remove(),
			l.removeFiles(seg.BaseOffset(), txnIndexSuffix+cleanedSuffix, txnIndexSuffix+swapSuffix))
	}

	// The .swap files are complete and durable: from here on a crash ends
	// with the new segment in place (Open completes the swap, and removes
	// the old segments its offsets cover).
	ref := l.newRef(seg)
	// Readers wait for the new .txnindex to take its name: the old
	// segment's, under the same name until it is renamed .deleted, holds
	// only part of the entries.
	ref.txnMu.Lock()
	defer ref.txnMu.Unlock()
	l.mu.Lock()
	l.segs = slices.Concat(segs[:at], []*segRef{ref}, segs[at+len(group):])
	l.mu.Unlock()
	var errs []error
	for _, s := range group {
		errs = append(errs, s.discard(true))
	}
	err = errors.Join(errs...)
	if err == nil {
		// The old names must be gone for good before the new segment
		// takes its plain name, or a crash could leave both live.
		err = vfs.SyncDir(l.fs, l.dir)
	}
	if err == nil {
		err = seg.Rename("")
	}
	if err == nil && merged {
		err = l.fs.Rename(txnIndex+swapSuffix, txnIndex)
	}
	if err == nil {
		err = vfs.SyncDir(l.fs, l.dir)
	}
	if err != nil {
		return 0, l.fail(fmt.Errorf("compaction swap: %w", err))
	}
	c.plan.st.Segments += len(group)
	c.plan.st.Groups++
	c.plan.st.BytesWritten += seg.Size()
	return groupCleaned, nil
}

// rewriteChunk is how much of what compaction keeps it writes at a time.
const rewriteChunk = 1 << 20

// rewrite writes the batches of group that compaction keeps to seg, many
// at a time: most batches it rewrites are small, with a few of their
// records left.
func (c *cleaner) rewrite(seg *segment.Segment, group []*segRef) error {
	c.out = c.out[:0]
	for i, s := range group {
		lastSeg := i == len(group)-1
		end := s.NextOffset()
		for b, err := range s.Batches(s.BaseOffset(), true) {
			if err != nil {
				return err
			}
			c.plan.st.BytesRead += int64(len(b))
			// The group's last batch stays, if only as a header, so that
			// the new segment ends where the old ones did: Open then knows
			// which old segments a finished swap replaced (Kafka keeps
			// the last batch of each cleaning round for its offset).
			out, err := c.filter(b, lastSeg && b.LastOffset()+1 == end)
			if err != nil {
				return err
			}
			if out == nil {
				continue
			}
			if len(c.out) > 0 && len(c.out)+len(out) > rewriteChunk {
				if err := c.flush(seg); err != nil {
					return err
				}
			}
			c.out = append(c.out, out...)
		}
	}
	if len(c.out) == 0 {
		return nil
	}
	return c.flush(seg)
}

// flush appends the batches kept in c.out to seg with one write.
func (c *cleaner) flush(seg *segment.Segment) error {
	c.batches = c.batches[:0]
	for rest := c.out; len(rest) > 0; {
		b := segment.Batch(rest[:segment.Batch(rest).Size()])
		c.batches = append(c.batches, b)
		rest = rest[len(b):]
	}
	_, err := seg.AppendBatches(c.batches, c.out)
	c.out = c.out[:0]
	return err
}

// filter returns what compaction keeps of b: b itself, a rebuilt batch,
// or nil. keepEmpty keeps a header-only batch if every record goes.
func (c *cleaner) filter(b segment.Batch, keepEmpty bool) (segment.Batch, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	n := int64(b.NumRecords())
	c.plan.st.RecordsRead += n
	if b.Control() {
		return c.filterMarker(b, keepEmpty)
	}
	if c.txns.data(b) {
		return c.emptied(b, keepEmpty)
	}
	horizon, hasHorizon := b.DeleteHorizon()
	expired := hasHorizon && c.now >= horizon
	c.recs = c.recs[:0]
	for r, err := range b.Records() {
		if errors.Is(err, segment.ErrUnsupportedCodec) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		c.recs = append(c.recs, r)
	}
	latest := c.latestOf(b, c.recs)
	tombstones := false
	c.kept = c.kept[:0]
	for i, r := range c.recs {
		// Kafka's Cleaner.shouldRetainRecord: past the map, everything
		// stays; within it, the latest record of each key, a tombstone
		// only until its horizon.
		if r.Offset < c.end && (r.Key == nil || r.Offset < latest[i] || (r.Value == nil && expired)) {
			continue
		}
		tombstones = tombstones || r.Value == nil
		c.kept = append(c.kept, r)
	}
	if len(c.kept) == 0 {
		return c.emptied(b, keepEmpty)
	}
	c.plan.st.RecordsRemoved += n - int64(len(c.kept))
	return c.retained(b, tombstones)
}

// latestOf returns, for each record, the offset of its key's latest
// record, which filter compares the record's own with (-1 for a record
// without a key). In a batch of the dirty part, whose records the map
// took, c.latest's bit for a record says whether it is that latest one,
// so no key is hashed or looked up: its own offset if so, one past every
// offset if not.
func (c *cleaner) latestOf(b segment.Batch, recs []segment.Record) []int64 {
	from := c.plan.firstDirty
	if c.latest == nil || b.BaseOffset() < from {
		return c.keys.getAll(recs)
	}
	c.offsets = slices.Grow(c.offsets[:0], len(recs))[:len(recs)]
	for i, r := range recs {
		c.offsets[i] = math.MaxInt64
		if bit := r.Offset - from; r.Offset < c.end && c.latest[bit/64]&(1<<(bit%64)) != 0 {
			c.offsets[i] = r.Offset
		}
	}
	return c.offsets
}

// filterMarker returns what compaction keeps of the control batch b
// (Kafka's Cleaner.discardBatch for a control batch): all of it while a
// batch of its transaction stays, or until the delete horizon stamped on
// it once none does; after the horizon, what emptied keeps.
func (c *cleaner) filterMarker(b segment.Batch, keepEmpty bool) (segment.Batch, error) {
	done, aborted := c.txns.marker(b)
	if aborted != nil {
		c.groupAborted = append(c.groupAborted, *aborted)
	}
	if b.NumRecords() == 0 {
		return c.emptied(b, keepEmpty) // a marker emptied before
	}
	if !done {
		return b, nil
	}
	if horizon, ok := b.DeleteHorizon(); ok && c.now >= horizon {
		return c.emptied(b, keepEmpty)
	}
	c.kept = c.kept[:0]
	for r, err := range b.Records() {
		if err != nil {
			return nil, err
		}
		c.kept = append(c.kept, r)
	}
	return c.retained(b, true)
}

// retained returns b with only the records in c.kept, stamped with a
// delete horizon DeleteRetention from now if stamp and b has none yet.
func (c *cleaner) retained(b segment.Batch, stamp bool) (segment.Batch, error) {
	horizon, hasHorizon := b.DeleteHorizon()
	needHorizon := stamp && !hasHorizon
	if len(c.kept) == int(b.NumRecords()) && !needHorizon {
		return b, nil
	}
	switch {
	case needHorizon:
		horizon = c.now + c.opts.DeleteRetention.Milliseconds()
	case !hasHorizon:
		horizon = -1
	}
	var err error
	c.buf, err = segment.AppendRetained(c.buf[:0], b, c.kept, horizon)
	return c.buf, err
}

// emptied returns what stays of b once all its records go: nothing, or a
// bare header if keepEmpty or if b is its producer's last batch or last
// data batch (Kafka's BatchRetention.RETAIN_EMPTY), including a header
// kept before for a producer that wrote again.
func (c *cleaner) emptied(b segment.Batch, keepEmpty bool) (segment.Batch, error) {
	c.plan.st.RecordsRemoved += int64(b.NumRecords())
	pid := b.ProducerID()
	last, ok := c.lastOfProducer[pid]
	lastData, okData := c.lastDataOfProducer[pid]
	if !keepEmpty && !(pid >= 0 && (ok && last == b.LastOffset() || okData && lastData == b.LastOffset())) {
		return nil, nil
	}
	if b.NumRecords() == 0 {
		return b, nil
	}
	var err error
	c.buf, err = segment.AppendRetained(c.buf[:0], b, nil, -1)
	return c.buf, err
}

// txnTracker follows the transactions of a part of the log read batch by
// batch in offset order, as Kafka's CleanedTransactionMetadata does, given
// the aborted transactions that have data in it: which data batches are
// aborted, and which markers end a transaction none of whose batches were
// read.
type txnTracker struct {
	pending    []idempotence.AbortedTxn // by first offset, not yet reached
	aborting   map[int64]*abortingTxn   // producer id: its aborted transaction under way
	committing map[int64]bool           // producers whose transaction under way, not aborted, had a batch read

	// partial is set when batches went unread: a marker can then not
	// tell whether its transaction has any left, and stays.
	partial bool
}

type abortingTxn struct {
	txn  idempotence.AbortedTxn
	read bool // a batch of it was read
}

func newTxnTracker(aborted []idempotence.AbortedTxn) *txnTracker {
	pending := slices.Clone(aborted)
	slices.SortFunc(pending, func(a, b idempotence.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return &txnTracker{pending: pending, aborting: map[int64]*abortingTxn{}, committing: map[int64]bool{}}
}

// reach starts the aborted transactions that begin at or before offset.
func (t *txnTracker) reach(offset int64) {
	for len(t.pending) > 0 && t.pending[0].FirstOffset <= offset {
		a := t.pending[0]
		t.aborting[a.ProducerID] = &abortingTxn{txn: a}
		t.pending = t.pending[1:]
	}
}

// data reports whether the data batch b belongs to an aborted transaction
// (onBatchRead).
func (t *txnTracker) data(b segment.Batch) bool {
	t.reach(b.LastOffset())
	if !b.Transactional() {
		return false
	}
	if a := t.aborting[b.ProducerID()]; a != nil {
		a.read = true
		return true
	}
	t.committing[b.ProducerID()] = true
	return false
}

// marker reads the control batch b, which ends its producer's transaction
// (onControlBatchRead). done reports that no batch of the transaction was
// read, so the marker may go once past its delete horizon. aborted is the
// transaction's .txnindex entry if the transaction was aborted and the
// marker stays for a batch of it: the entry stays too.
func (t *txnTracker) marker(b segment.Batch) (done bool, aborted *idempotence.AbortedTxn) {
	t.reach(b.LastOffset())
	pid := b.ProducerID()
	read := t.committing[pid]
	delete(t.committing, pid)
	if a := t.aborting[pid]; a != nil {
		delete(t.aborting, pid)
		if a.read || t.partial {
			return false, &a.txn
		}
		return true, nil
	}
	return !read && !t.partial, nil
}

// keyMap maps keys to offsets in a fixed amount of memory, as Kafka's
// SkimpyOffsetMap does with an MD5 of the key: it stores a 128-bit hash of
// each key, never the key, in an open-addressing table.
//
// A collision of two keys' hashes would make the older key's latest record
// look superseded, and compaction would delete it: data loss. Two 64-bit
// hashes make that as unlikely as MD5's 128 bits do: xxhash of the key,
// which places the entry, and hash/maphash with a random seed chosen for
// each map, which an adversary cannot aim at. With the 2^19 keys of the
// default 16 MiB, the chance that any two of them collide is about 2^-90.
//
// The budget bounds the table; the table starts small and grows fourfold
// as keys come (fewer moves of each key than doubling). Each lookup is a
// random access into it, so a table sized to the keys rather than to the
// budget stays in the caches and the TLB: a log of 20,000 keys probes
// 1.5 MiB, not 16 MiB it would have to clear and page in first. The map
// fills at the same count of keys either way.
type keyMap struct {
	slots  []keySlot
	n      int // slots in use
	budget int // slots the memory budget holds
	limit  int // keys it holds: 3/4 of them, to keep probes short

	hash func([]byte) uint64
	seed maphash.Seed

	scratch [][2]uint64 // hashAll's
	offsets []int64     // getAll's
}

// keySlot is one entry; offset is the record's offset plus one, so that
// the zero slot is empty.
type keySlot struct {
	h1, h2 uint64
	offset int64
}

// keySlotBytes is the size of a keySlot.
const keySlotBytes = 24

// keyMapStartSlots is the size the table starts at, unless the budget is
// smaller: 96 KiB.
const keyMapStartSlots = 4096

func newKeyMap(bytes int, hash func([]byte) uint64) *keyMap {
	budget := bytes / keySlotBytes
	m := &keyMap{budget: budget, limit: budget * 3 / 4, hash: hash, seed: maphash.MakeSeed()}
	m.resize(min(budget, keyMapStartSlots))
	return m
}

// resize moves the entries to a table of n slots.
func (m *keyMap) resize(n int) {
	old := m.slots
	m.slots = make([]keySlot, n)
	for _, s := range old {
		if s.offset != 0 {
			*m.find(s.h1, s.h2) = s
		}
	}
}

func (m *keyMap) hashes(key []byte) (uint64, uint64) {
	return m.hash(key), maphash.Bytes(m.seed, key)
}

// find returns the slot of key's hashes, or the empty slot where they go.
func (m *keyMap) find(h1, h2 uint64) *keySlot {
	hi, _ := bits.Mul64(h1, uint64(len(m.slots))) // h1 scaled to [0, len)
	for i := int(hi); ; i++ {
		if i == len(m.slots) {
			i = 0
		}
		s := &m.slots[i]
		if s.offset == 0 || (s.h1 == h1 && s.h2 == h2) {
			return s
		}
	}
}

// putAll puts the records' keys and offsets, in order, until the map is
// full; it returns how many it put. The records must have keys.
//
// Each put is a random access into the table, most often a cache miss.
// The keys are hashed first and then put in a tight loop, where the CPU
// overlaps the misses of the next puts with this one's.
func (m *keyMap) putAll(recs []segment.Record) int {
	hs := m.hashAll(recs)
	for i, r := range recs {
		if !m.putHashed(hs[i], r.Offset) {
			return i
		}
	}
	return len(recs)
}

// getAll returns the latest offset of each record's key as get does (-1
// for a record without a key), looked up together as putAll puts them, so
// that the lookups overlap.
func (m *keyMap) getAll(recs []segment.Record) []int64 {
	hs := m.hashAll(recs)
	m.offsets = slices.Grow(m.offsets[:0], len(recs))[:len(recs)]
	for i, h := range hs {
		m.offsets[i] = m.find(h[0], h[1]).offset - 1
	}
	for i, r := range recs {
		if r.Key == nil {
			m.offsets[i] = -1
		}
	}
	return m.offsets
}

// latestIn returns a bit set of the offsets in [from, end) that are the
// latest of their key, bit i for offset from+i, or nil if it would take
// more than maxBytes: what the map knows, laid out by offset.
func (m *keyMap) latestIn(from, end int64, maxBytes int) []uint64 {
	if end <= from || (end-from+63)/64 > int64(maxBytes/8) {
		return nil
	}
	bits := make([]uint64, (end-from+63)/64)
	for _, s := range m.slots {
		if o := s.offset - 1; o >= from && o < end {
			bits[(o-from)/64] |= 1 << ((o - from) % 64)
		}
	}
	return bits
}

// hashAll returns the hashes of the records' keys, in scratch memory
// valid until the next call.
func (m *keyMap) hashAll(recs []segment.Record) [][2]uint64 {
	m.scratch = slices.Grow(m.scratch[:0], len(recs))[:len(recs)]
	for i, r := range recs {
		m.scratch[i][0], m.scratch[i][1] = m.hashes(r.Key)
	}
	return m.scratch
}

// put records offset as key's latest. It returns false, changing nothing,
// if key is new and the map is full.
func (m *keyMap) put(key []byte, offset int64) bool {
	h1, h2 := m.hashes(key)
	return m.putHashed([2]uint64{h1, h2}, offset)
}

func (m *keyMap) putHashed(h [2]uint64, offset int64) bool {
	h1, h2 := h[0], h[1]
	s := m.find(h1, h2)
	if s.offset == 0 {
		if m.n >= m.limit {
			return false
		}
		m.n++
		s.h1, s.h2 = h1, h2
	}
	s.offset = offset + 1
	if len(m.slots) < m.budget && m.n >= len(m.slots)*3/4 {
		m.resize(min(4*len(m.slots), m.budget))
	}
	return true
}

// get returns key's latest offset, or -1 if the map does not have it.
func (m *keyMap) get(key []byte) int64 {
	return m.find(m.hashes(key)).offset - 1
}

// writeTxnIndex writes the .txnindex of the segment at base that
// compaction builds, named with suffix as its other files are. It reports
// whether there was any entry to write; without one the new segment needs
// no file.
func (l *Log) writeTxnIndex(base int64, entries []idempotence.AbortedTxn, suffix string) (bool, error) {
	if len(entries) == 0 {
		return false, nil
	}
	name := segment.FileName(l.dir, base, txnIndexSuffix) + suffix
	x, err := idempotence.OpenTxnIndex(l.fs, name, base)
	if err != nil {
		return false, err
	}
	for _, a := range entries {
		if err := x.Append(a); err != nil {
			return false, errors.Join(err, x.Close())
		}
	}
	return true, errors.Join(x.Sync(), x.Close())
}
