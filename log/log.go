package log

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// Errors returned by a Log. Errors from the layers below (segment.ErrCorrupt
// and friends, file-system errors) are wrapped, so errors.Is finds them too.
// Those a Kafka broker answers with a code carry it (kafkaerr.CodeOf).
var (
	// ErrClosed is returned by every method of a closed log. Its code is
	// NOT_LEADER_OR_FOLLOWER: a log closes under a request only when its
	// partition is deleted or moved, or its broker stops, and the client
	// then looks the leader up again.
	ErrClosed = kafkaerr.New(kafkaerr.ErrNotLeaderOrFollower, "log: closed")

	// ErrInvalidOption means an Options field is out of range; the message
	// names the field and the allowed range.
	ErrInvalidOption = errors.New("log: invalid option")

	// ErrOffsetOutOfRange means an offset lies outside the log; the error
	// is an *OffsetOutOfRangeError carrying the bounds.
	ErrOffsetOutOfRange = kafkaerr.New(kafkaerr.ErrOffsetOutOfRange, "log: offset out of range")

	// ErrFailed means a sync failed: what was written since the last good
	// sync may or may not be durable, so the log refuses further appends.
	// Reopening it recovers what is on disk.
	ErrFailed = kafkaerr.New(kafkaerr.ErrKafkaStorageError, "log: failed")

	// ErrStaleEpoch means a leader epoch lower than the current one.
	ErrStaleEpoch = kafkaerr.New(kafkaerr.ErrFencedLeaderEpoch, "log: stale leader epoch")

	// ErrCorrupt is segment.ErrCorrupt, for convenience: data that was made
	// durable does not read back as valid batches.
	ErrCorrupt = segment.ErrCorrupt
)

// OffsetOutOfRangeError reports an offset outside [Start, End]: the log
// start offset and the bound of the read (the high watermark or the log end
// offset). It matches ErrOffsetOutOfRange.
type OffsetOutOfRangeError struct {
	Offset, Start, End int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("log: offset %d out of range [%d, %d]", e.Offset, e.Start, e.End)
}

// Unwrap makes errors.Is(err, ErrOffsetOutOfRange) true, and gives the
// error that one's Kafka code.
func (e *OffsetOutOfRangeError) Unwrap() error { return ErrOffsetOutOfRange }

// AppendResult is where an append went: the offsets assigned to the batch
// and the time the log appended it.
type AppendResult struct {
	BaseOffset, LastOffset int64
	AppendTime             time.Time
	// Duplicate reports that the batch repeated one of its producer's last
	// five, which the log already holds at BaseOffset to LastOffset: it
	// appended nothing (Kafka answers a producer's retry so).
	Duplicate bool
}

// Log is one partition's durable log in a directory: a sequence of
// segments, a leader epoch cache and checkpoint files.
//
// A Log is safe for concurrent use. Appends from many goroutines are
// coalesced: one of them writes the batches of all that are waiting, and
// one fsync at a time makes every group written before it durable, while
// the next groups are written (group commit). Readers never block appends.
type Log struct {
	dir  string
	opts Options
	fs   vfs.FS

	mu     sync.RWMutex
	segs   []*segRef // ascending base offsets, the last active; replaced, never changed in place
	closed bool
	lock   io.Closer // the directory's lock file, held while open
	// dirLock is the lock of the Dir whose partition a Log opened on its
	// own is, held while open; nil for a Dir's own Log, or outside one.
	dirLock io.Closer
	damage  *Damage // see Damage
	found   *Damage // the damage load is repairing

	logStart, hw, leo atomic.Int64
	unstable          atomic.Int64 // the producer state's first unstable offset, MaxInt64 if none

	// The writer's state, guarded by wmu: appends, rolls, truncation,
	// syncs and checkpoints run one at a time.
	wmu            sync.Mutex
	epochs         *EpochCache
	epoch          int32 // leader epoch stamped on appended batches, -1 if none
	failed         error
	recoveryPoint  int64 // every offset below is synced
	unflushedMsgs  int64
	unflushedBytes int64
	lastCheckpoint time.Time
	checkpointed   [3]int64     // recovery point, high watermark, log start as last written
	gaps           []segmentGap // the gaps between segments the log made, as recorded
	producers      *idempotence.State
	lastExpiry     time.Time // when producers were last expired
	flushTimer     *time.Timer
	timers         sync.WaitGroup

	// Group commit: appenders queue here; one at a time leads.
	qmu      sync.Mutex
	queue    []*pending
	queueBox *[]*pending // queue's slice, to give back to queues; nil at first
	leading  bool

	// Reused by writeCoalescedLocked, under wmu.
	coalesced      []segment.Batch
	coalescedBytes []byte

	// Syncs of groups: at most one in flight, carrying every group
	// written before it started (see sync). Guarded by smu but for
	// syncsIssued and truncations, which wmu guards.
	smu         sync.Mutex
	syncOrder   *sync.Cond // broadcast when a sync ends
	syncing     bool       // a sync is in flight, or gathering (see gather)
	newest      syncTicket // the newest group's sync, if no sync has taken it (seg not nil)
	syncsIssued uint64
	durable     uint64 // the groups of the tickets before this seq are durable
	syncErr     error
	truncations uint64 // count of TruncateTo calls that removed data
	coalesce    coalescer

	nmu      sync.Mutex
	advanced chan struct{} // closed when hw or leo move, or the log closes; nil if no one waits

	stats counters
}

// pending is an append waiting for its group's commit.
type pending struct {
	batch  segment.Batch
	origin idempotence.Origin
	res    AppendResult
	err    error
	wake   chan bool // true: lead the next group; false: done
	queued func()    // see appendQueued
}

// Append builds a batch from recs, compressed with Options.Compression,
// and appends it. A record whose Timestamp is zero gets the append time.
// It returns once the batch is written and, under FsyncAlways, durable.
// Records whose batch would pass MaxBatchBytes, or, compressed, decompress
// past segment.MaxDecompressedSize, fail with segment.ErrBatchTooLarge.
func (l *Log) Append(recs []segment.Record) (AppendResult, error) {
	return l.appendQueued(recs, nil, nil)
}

// appendQueued is Append that calls queued, if not nil, once the batch
// holds its place in the log's order: a batch appended after that gets
// later offsets. A Producer uses it to keep a partition's batches in order
// while two of them are in flight. A non-nil prod stamps the batch with an
// idempotent producer's id, epoch and first sequence, which the producer
// state checks as AppendBatch's.
func (l *Log) appendQueued(recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
	return l.appendBuilt(recs, segment.BuildOptions{Producer: prod}, queued)
}

// appendBuilt is appendQueued for a batch built with bo (whose Codec it
// sets): a transactional producer's batches carry the transactional
// attribute.
func (l *Log) appendBuilt(recs []segment.Record, bo segment.BuildOptions, queued func()) (AppendResult, error) {
	opts := l.liveOptions()
	if err := opts.checkRecordsSize(recs); err != nil {
		return AppendResult{}, fmt.Errorf("log %s: %w", l.dir, err)
	}
	buf := batchBuffers.Get().(*[]byte)
	defer batchBuffers.Put(buf)
	bo.Codec = opts.Compression
	bo.DefaultTimestamp = l.opts.Now().UnixMilli()
	b, err := segment.AppendBatch((*buf)[:0], recs, bo)
	if err != nil {
		return AppendResult{}, fmt.Errorf("log %s: %w", l.dir, err)
	}
	*buf = b
	if err := l.checkSize(b); err != nil {
		return AppendResult{}, err
	}
	// The batch is written to the file before enqueue returns, so the
	// buffer is free again then.
	return l.enqueue(pending{batch: b, queued: queued})
}

// batchBuffers holds the buffers Append builds batches in.
var batchBuffers = sync.Pool{New: func() any { return new([]byte) }}

// AppendBatch appends a batch a producer built, as a Kafka leader does: it
// checks the batch, assigns it the next offsets and stamps the current
// leader epoch into it (both fields are outside the CRC). The log owns b
// until AppendBatch returns.
//
// A batch with a producer id is checked against the producer's state by
// Kafka's rules (see package idempotence) before anything is written: a
// refused batch appends nothing and the error wraps the idempotence error
// Kafka answers with (ErrOutOfOrderSequence, ErrInvalidProducerEpoch,
// ErrInvalidTxnState, ErrInvalidRecord for a control batch). A retry of one
// of the producer's last five batches appends nothing and returns the
// offsets the original got, with Duplicate set.
func (l *Log) AppendBatch(b segment.Batch) (AppendResult, error) {
	if err := l.checkBatch(b); err != nil {
		return AppendResult{}, err
	}
	return l.enqueue(pending{batch: b, origin: idempotence.OriginClient})
}

// AppendReplicated appends a batch copied from the leader, as a Kafka
// follower does: its offsets and leader epoch are kept, and its base offset
// must be at or after the log end offset. Its producer, if it has one, is
// recorded in the producer state without being checked: the leader did.
// MaxBatchBytes does not apply (Kafka's appendAsFollower ignores the record
// size): the leader took the batch, perhaps before the limit was lowered,
// and a follower that refused it could never catch up.
func (l *Log) AppendReplicated(b segment.Batch) (AppendResult, error) {
	if err := b.Validate(); err != nil {
		return AppendResult{}, fmt.Errorf("log %s: %w", l.dir, err)
	}
	return l.enqueue(pending{batch: b, origin: idempotence.OriginReplication})
}

// AppendMarker appends a transaction marker on behalf of the transaction
// coordinator (Kafka's WriteTxnMarkers): the COMMIT or ABORT control batch
// idempotence.AppendMarkerBatch builds. It ends the producer's transaction
// on this partition; the first offsets of an aborted one go to the
// segment's .txnindex, for ReadCommitted readers to skip. A marker from an
// older producer epoch or coordinator epoch is refused
// (ErrInvalidProducerEpoch, ErrTransactionCoordinatorFenced).
func (l *Log) AppendMarker(b segment.Batch) (AppendResult, error) {
	if err := l.checkBatch(b); err != nil {
		return AppendResult{}, err
	}
	if !b.Control() {
		return AppendResult{}, fmt.Errorf("log %s: %w: AppendMarker given a batch that is not a control batch", l.dir, idempotence.ErrInvalidRecord)
	}
	return l.enqueue(pending{batch: b, origin: idempotence.OriginCoordinator})
}

func (l *Log) checkSize(b []byte) error {
	if limit := l.liveOptions().MaxBatchBytes; len(b) > limit {
		return fmt.Errorf("log %s: %w: %d bytes, MaxBatchBytes is %d", l.dir, segment.ErrBatchTooLarge, len(b), limit)
	}
	return nil
}

func (l *Log) checkBatch(b segment.Batch) error {
	if err := l.checkSize(b); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	return nil
}

// pendings holds the pendings of finished appends, each with its wake
// channel, which is empty again once its append is done.
var pendings = sync.Pool{New: func() any { return &pending{wake: make(chan bool, 1)} }}

// enqueue waits for req's group to be committed, leading the commit if no
// other appender is.
func (l *Log) enqueue(req pending) (AppendResult, error) {
	p := pendings.Get().(*pending)
	req.wake = p.wake
	*p = req
	res, err := l.commit(p)
	// No other goroutine holds p now: waking a pending is the last thing
	// a leader does with it, and p's own group left the queue when p led.
	*p = pending{wake: p.wake}
	pendings.Put(p)
	return res, err
}

// commit waits for p's group to be committed, leading the commit if no
// other appender is.
func (l *Log) commit(p *pending) (AppendResult, error) {
	l.qmu.Lock()
	l.queue = append(l.queue, p)
	if p.queued != nil {
		p.queued()
	}
	if l.leading {
		l.qmu.Unlock()
		if lead := <-p.wake; !lead {
			return p.res, p.err
		}
		l.qmu.Lock()
	}
	l.leading = true
	l.qmu.Unlock()
	// Let the appenders the last commit woke queue up again, so that they
	// share this commit's sync rather than wait for the next. Without a
	// sync per group there is nothing to share, and the yield only costs
	// (it woke another thread at almost every append: 3,604 futex calls in
	// 2,000 appends without fsync, 310 without the yield).
	if l.syncsEveryGroup() {
		runtime.Gosched()
	}
	l.qmu.Lock()
	group, box := l.queue, l.queueBox
	l.queueBox = queues.Get().(*[]*pending)
	l.queue = (*l.queueBox)[:0]
	l.qmu.Unlock()

	seq, synced := l.write(group)

	// The next group is written while this one syncs: its appenders need
	// not wait for this sync, only for their own.
	l.qmu.Lock()
	if len(l.queue) > 0 {
		l.queue[0].wake <- true // hand the lead to the oldest waiter
	} else {
		l.leading = false
	}
	l.qmu.Unlock()

	if synced {
		if err := l.sync(seq); err != nil {
			for _, q := range group {
				if q.err == nil {
					q.err = err
				}
			}
		}
	}
	for _, q := range group[1:] {
		q.wake <- false
	}
	clear(group)
	if box != nil {
		*box = group[:0]
		queues.Put(box)
	}
	return p.res, p.err
}

// queues holds the slices of committed groups, for the queue to grow into
// again instead of allocating a slice for every group.
var queues = sync.Pool{New: func() any { return new([]*pending) }}

// write writes a group of batches under the writer lock. If the fsync
// policy asks for a sync, it returns true and the sequence number of the
// group's sync ticket, to wait for with sync.
//
// A panic while writing (a bug, or a file system that panics) fails the
// whole group and the log: the files may no longer match the log's state.
// The ticket, if one was issued, is still returned, so that Close does not
// wait for a sync that never comes.
func (l *Log) write(group []*pending) (seq uint64, synced bool) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	err := safely(func() error {
		now := l.opts.Now()
		// A duplicate counts as written: its answer must wait, as the
		// original's, until the original is durable.
		written := false
		for rest := group; len(rest) > 0; {
			if n := l.writeCoalescedLocked(rest, now); n > 0 {
				written, rest = true, rest[n:]
				continue
			}
			p := rest[0]
			p.err = l.writeLocked(p, now)
			written, rest = written || p.err == nil, rest[1:]
		}
		if written {
			seq, synced = l.afterWriteLocked(now, len(group))
		}
		return nil
	})
	if err != nil {
		err = l.fail(err)
		for _, p := range group {
			p.err = err
		}
	}
	return seq, synced
}

// safely calls fn and returns a panic in it as an error.
func safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
}

// syncTicket is the sync of the newest group written: the segment to sync,
// the log end offset it makes durable, its place in the order of groups,
// the truncation count when it was issued, and how many appenders wait for
// it, those of the tickets it replaced included.
type syncTicket struct {
	seg         *segRef
	target      int64
	seq         uint64
	truncations uint64
	appenders   int
}

// sync waits until the group of ticket seq is durable. At most one fsync
// of the log is in flight, and it carries every group written before it
// started: an appender whose group no sync covers yet, finding none in
// flight, syncs the newest group written and with it all before; the
// others wait for that sync. So a lone appender syncs at once, and
// concurrent ones share syncs instead of queueing one each behind the
// device's cache flushes (pebble's LogWriter folds pending syncs the same
// way). Meanwhile the next groups are written.
//
// A sync that fails fails every group not yet durable, later ones too: a
// group is durable only if every group before it is (after a failed fsync,
// Linux may report a later one as good although the earlier pages are
// lost).
func (l *Log) sync(seq uint64) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	for l.durable <= seq && l.syncErr == nil {
		if l.syncing {
			l.syncOrder.Wait()
			continue
		}
		l.syncing = true
		l.gatherLocked()
		l.syncNewestLocked()
	}
	if l.durable > seq {
		return nil
	}
	return l.syncErr
}

// syncNewestLocked syncs the newest group written, with smu held and
// syncing set by the caller, and clears syncing. A ticket not yet durable
// means a newest one is waiting: each ticket replaces the one before it
// there, and only a sync takes it.
func (l *Log) syncNewestLocked() {
	t := l.newest
	l.newest = syncTicket{}
	l.smu.Unlock()

	start := time.Now()
	err := safely(t.seg.SyncLog)
	took := time.Since(start)
	l.stats.fsync(took)
	t.seg.release()

	l.wmu.Lock()
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
		l.failed = cmp.Or(l.failed, err)
	} else if t.truncations == l.truncations { // else the offsets may hold other data now
		l.recoveryPoint = max(l.recoveryPoint, t.target)
		if !l.opts.ExternalHighWatermark && t.target > l.hw.Load() {
			l.hw.Store(t.target)
			l.hwMovedLocked()
			l.notify()
		}
	}
	l.wmu.Unlock()

	l.smu.Lock()
	l.syncing = false
	if err != nil {
		l.syncErr = cmp.Or(l.syncErr, err)
	} else {
		l.durable = t.seq + 1
		l.coalesce.released(t.appenders, took)
	}
	l.syncOrder.Broadcast()
}

// A coalescer decides how long the next sync waits for the appenders the
// last one released: with closed-loop appenders (each appends again as
// soon as its append returns), a sync that starts at once carries only the
// first one back, and the others wait a whole sync for the next; groups
// then alternate between one appender and all the others. Waiting briefly
// for them lets every sync carry all of them. The wait ends as soon as
// they are back, lasts at most an eighth of the last fsync, and is not
// made for a lone appender, whose latency stays that of its fsync.
// Appenders that do not come back (a server's requests, each appending
// once) make the waits time out; after each timeout the coalescer skips
// waiting for twice as many syncs as before, up to 64, so that they cost
// at most one short wait in 64 syncs.
type coalescer struct {
	returning int           // appenders released by the last sync that have not written again
	lastSync  time.Duration // how long the last fsync took
	misses    int           // waits in a row that timed out
	skip      int           // syncs left to start without waiting
}

// maxGather bounds a coalescing wait, whatever the fsync takes.
const maxGather = 100 * time.Microsecond

// released records that a sync of the given duration released appenders.
func (c *coalescer) released(appenders int, took time.Duration) {
	c.lastSync = took
	if c.skip > 0 {
		c.skip--
		c.returning = 0
		return
	}
	c.returning = appenders
}

// wrote records that appenders wrote a group.
func (c *coalescer) wrote(appenders int) { c.returning -= appenders }

// budget returns how long the next sync may wait for the appenders the
// last one released: zero if none of them is still to come back.
func (c *coalescer) budget() time.Duration {
	if c.returning <= 0 {
		return 0
	}
	return min(c.lastSync/8, maxGather)
}

// gathered records the end of a wait: timedOut if some of the appenders
// did not come back in time.
func (c *coalescer) gathered(timedOut bool) {
	if !timedOut {
		c.misses = 0
		return
	}
	c.misses = min(c.misses+1, 6)
	c.skip = 1<<c.misses - 1
	c.returning = 0
}

// gatherLocked waits, with smu held and syncing set, for the appenders
// the last sync released to write again (see coalescer). It yields the
// processor while it waits, for them to run: the Go runtime's timers are
// too coarse for a wait of microseconds.
func (l *Log) gatherLocked() {
	c := &l.coalesce
	budget := c.budget()
	if budget == 0 {
		return
	}
	deadline := time.Now().Add(budget)
	for c.returning > 0 {
		if time.Now().After(deadline) {
			c.gathered(true)
			return
		}
		l.smu.Unlock()
		runtime.Gosched()
		l.smu.Lock()
	}
	c.gathered(false)
}

func (l *Log) writeLocked(p *pending, now time.Time) error {
	if l.isClosed() {
		return ErrClosed
	}
	if l.failed != nil {
		return l.failed
	}
	b := p.batch
	leo := l.leo.Load()
	if p.origin == idempotence.OriginReplication {
		if b.BaseOffset() < leo {
			return fmt.Errorf("log %s: %w: replicated batch at base offset %d, log end offset is %d",
				l.dir, segment.ErrOffsetOrder, b.BaseOffset(), leo)
		}
	} else {
		b.SetBaseOffset(leo)
		b.SetPartitionLeaderEpoch(l.epoch)
	}
	a, checked, err := l.validateLocked(b, p.origin)
	if err != nil {
		return err
	}
	if a.Duplicate != nil {
		d := a.Duplicate
		p.res = AppendResult{BaseOffset: d.FirstOffset(), LastOffset: d.LastOffset, AppendTime: now, Duplicate: true}
		return nil
	}
	if e := b.PartitionLeaderEpoch(); e >= 0 {
		if err := l.epochs.Assign(e, b.BaseOffset()); err != nil {
			return fmt.Errorf("log %s: %w", l.dir, err)
		}
	}
	var before *segRef
	if checked {
		before = l.active()
	}
	active, err := l.maybeRollLocked(b, now)
	if err != nil {
		return err
	}
	if checked && active != before {
		// The roll moved the producer state's end past the plain batches
		// before b: the same checks, against the state as it is now.
		if a, _, err = l.validateLocked(b, p.origin); err != nil {
			return err
		}
	}
	if err := active.Append(b); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	l.leo.Store(b.LastOffset() + 1)
	if checked {
		if err := l.commitLocked(&a, active); err != nil {
			return err
		}
	}
	l.appendedLocked(p, now)
	return nil
}

// appendedLocked counts p's batch, written, and sets p's result.
func (l *Log) appendedLocked(p *pending, now time.Time) {
	b := p.batch
	n := int64(b.LastOffsetDelta()) + 1
	l.unflushedMsgs += n
	l.unflushedBytes += int64(len(b))
	l.stats.appends.Add(1)
	l.stats.records.Add(n)
	l.stats.bytes.Add(int64(len(b)))
	p.res = AppendResult{BaseOffset: b.BaseOffset(), LastOffset: b.LastOffset(), AppendTime: now}
}

// maxCoalescedBatch is the largest batch writeCoalescedLocked copies to
// share a write with others: copying a larger one costs more than the
// system call it would save.
const maxCoalescedBatch = 16 << 10

// writeCoalescedLocked appends, with one write, the batches at the front
// of group that need nothing but a place in the log: plain batches (no
// producer) from Append or AppendBatch, each at most maxCoalescedBatch,
// that the active segment takes without a roll. It returns how many it
// appended; none if fewer than two qualify or the first could not be
// written, and those not appended go one by one through writeLocked,
// which reports each one's error or rolls.
func (l *Log) writeCoalescedLocked(group []*pending, now time.Time) int {
	if l.isClosed() || l.failed != nil {
		return 0
	}
	active := l.active()
	size := active.Size()
	if size == 0 { // the first batch of a segment may move it (maybeRollLocked)
		return 0
	}
	run := l.coalesced[:0]
	leo := l.leo.Load()
	for _, p := range group {
		b := p.batch
		if p.origin != idempotence.OriginClient || hasProducer(b) || len(b) > maxCoalescedBatch {
			break
		}
		b.SetBaseOffset(leo)
		b.SetPartitionLeaderEpoch(l.epoch)
		if l.rollDue(active, size, b, now) {
			break
		}
		run = append(run, b)
		leo, size = b.LastOffset()+1, size+int64(len(b))
	}
	l.coalesced = run
	defer clear(run) // the batches are their appenders' buffers
	if len(run) < 2 {
		return 0
	}
	buf := l.coalescedBytes[:0]
	for _, b := range run {
		buf = append(buf, b...)
	}
	l.coalescedBytes = buf
	if l.epoch >= 0 {
		// Every batch of the run carries it, and it starts at the first
		// one at the latest.
		if err := l.epochs.Assign(l.epoch, run[0].BaseOffset()); err != nil {
			return 0
		}
	}
	n, _ := active.AppendBatches(run, buf) // the rest report their errors one by one
	for _, p := range group[:n] {
		l.leo.Store(p.batch.LastOffset() + 1)
		l.appendedLocked(p, now)
	}
	return n
}

// afterWriteLocked applies the fsync policy after a group of appenders
// was written: it issues a ticket for the sync the group needs and returns
// its sequence number, or moves the high watermark at once if the policy
// acknowledges unsynced writes. It also checkpoints when due; a failed
// checkpoint does not fail the group, whose records are written (see
// maybeCheckpointLocked).
func (l *Log) afterWriteLocked(now time.Time, appenders int) (seq uint64, synced bool) {
	p := l.opts.Fsync
	switch {
	case p.always(),
		p.mode == fsyncEvery && ((p.messages > 0 && l.unflushedMsgs >= p.messages) || (p.bytes > 0 && l.unflushedBytes >= p.bytes)):
		active := l.active()
		active.acquire() // the log holds it, so this succeeds
		t := syncTicket{seg: active, target: l.leo.Load(), seq: l.syncsIssued, truncations: l.truncations, appenders: appenders}
		seq, synced = t.seq, true
		l.syncsIssued++
		l.smu.Lock()
		replaced := l.newest
		if replaced.seg != nil {
			t.appenders += replaced.appenders
		}
		l.newest = t
		l.coalesce.wrote(appenders)
		l.smu.Unlock()
		if replaced.seg != nil { // the sync that takes t covers its group
			replaced.seg.release()
		}
		l.unflushedMsgs, l.unflushedBytes = 0, 0
	case p.mode == fsyncInterval && l.flushTimer == nil:
		l.timers.Add(1)
		l.flushTimer = time.AfterFunc(p.interval, l.flushOnTimer)
	}
	if !synced && !l.opts.ExternalHighWatermark {
		l.hw.Store(l.leo.Load())
		l.hwMovedLocked()
		l.notify()
	}
	l.maybeCheckpointLocked(now)
	l.maybeExpireProducersLocked(now)
	return seq, synced
}

// maybeCheckpointLocked writes the checkpoints if CheckpointInterval has
// passed. A failure is kept in Stats and tried again at the next interval:
// checkpoints only shorten recovery (a stale recovery point makes the next
// unclean open scan more), so an append whose records were written must
// not be reported as failed because of one, or its caller would retry and
// write the records twice.
func (l *Log) maybeCheckpointLocked(now time.Time) {
	if now.Sub(l.lastCheckpoint) >= l.opts.CheckpointInterval {
		_ = l.writeCheckpointsLocked(now) // kept in l.stats
	}
}

// flushLocked syncs the active segment's log: the earlier segments were
// synced when they rolled.
func (l *Log) flushLocked() error {
	leo := l.leo.Load()
	if l.recoveryPoint >= leo {
		return nil
	}
	start := time.Now()
	if err := l.active().SyncLog(); err != nil {
		l.failed = fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
		return l.failed
	}
	l.stats.fsync(time.Since(start))
	l.recoveryPoint = leo
	l.unflushedMsgs, l.unflushedBytes = 0, 0
	return nil
}

func (l *Log) flushOnTimer() {
	defer l.timers.Done()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.flushTimer = nil
	if l.isClosed() || l.failed != nil {
		return
	}
	_ = l.flushLocked() // a failure is sticky: the next append reports it
}

// maybeRollLocked returns the segment b goes to, rolling a new one first
// by Kafka's LogSegment.shouldRoll: the batch would not fit, the
// timestamps in the segment span SegmentAge, an index is full, or the
// batch's offsets do not fit the segment's relative offsets.
func (l *Log) maybeRollLocked(b segment.Batch, now time.Time) (*segRef, error) {
	active := l.active()
	size := active.Size()
	if size == 0 {
		if active.BaseOffset() == b.BaseOffset() {
			return active, nil
		}
		// A follower's first batch after a gap: start the segment there.
		return l.rollLocked(b.BaseOffset(), true)
	}
	if l.rollDue(active, size, b, now) {
		return l.rollLocked(b.BaseOffset(), false)
	}
	return active, nil
}

// rollDue reports whether b must go to a new segment rather than to
// active, which holds size bytes (Kafka's LogSegment.shouldRoll).
func (l *Log) rollDue(active *segRef, size int64, b segment.Batch, now time.Time) bool {
	waited := now.Sub(active.created)
	if first := active.FirstBatchTimestamp(); first >= 0 && b.MaxTimestamp() >= 0 {
		waited = time.Duration(b.MaxTimestamp()-first) * time.Millisecond
	}
	return size > l.opts.SegmentBytes-int64(len(b)) ||
		waited > l.opts.SegmentAge ||
		active.IndexFull() ||
		b.LastOffset()-active.BaseOffset() > math.MaxInt32
}

// rollLocked seals and syncs the active segment and starts a new one at
// base; with replaceEmpty the empty active segment is removed instead.
func (l *Log) rollLocked(base int64, replaceEmpty bool) (*segRef, error) {
	if base > l.leo.Load() {
		if err := l.recordGapLocked(base); err != nil {
			return nil, fmt.Errorf("log %s: roll: %w", l.dir, err)
		}
	}
	old := l.active()
	if !replaceEmpty {
		// A seal that fails (the roll entry of the time index on a full
		// disk) leaves the segment active, as a failed write does: only
		// this append fails. A failed sync fails the log.
		if err := old.Seal(); err != nil {
			return nil, fmt.Errorf("log %s: roll: %w", l.dir, err)
		}
		start := time.Now()
		if err := errors.Join(old.Sync(), old.syncTxnIndex()); err != nil {
			return nil, l.fail(fmt.Errorf("roll: %w", err))
		}
		l.stats.fsync(time.Since(start))
	}
	// Kafka snapshots the producer state at the new segment's base offset;
	// written once what it covers is durable, so that a snapshot never
	// claims batches a crash can take back.
	if err := l.snapshotLocked(base); errors.Is(err, ErrFailed) {
		return nil, err
	}
	seg, err := segment.Create(l.dir, base, l.segmentOptions())
	if err != nil {
		return nil, fmt.Errorf("log %s: roll: %w", l.dir, err)
	}
	ref := l.newRef(seg)
	l.mu.Lock()
	segs := slices.Clone(l.segs)
	if replaceEmpty {
		segs = segs[:len(segs)-1]
	}
	l.segs = append(segs, ref)
	l.mu.Unlock()
	if replaceEmpty {
		old.discard(false)
	}
	// The new segment is the log now: if its name may not be durable, no
	// append into it may be acknowledged.
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		return nil, l.fail(fmt.Errorf("roll: %w", err))
	}
	if !replaceEmpty {
		l.recoveryPoint = max(l.recoveryPoint, old.NextOffset())
		l.unflushedMsgs, l.unflushedBytes = 0, 0
		_ = l.writeCheckpointsLocked(l.opts.Now()) // kept in l.stats, as in maybeCheckpointLocked
	}
	return ref, nil
}

// lockWriter takes the writer lock if the log is open and, if change, has
// not failed; on error the lock is not held.
func (l *Log) lockWriter(change bool) error {
	l.wmu.Lock()
	switch {
	case l.isClosed():
		l.wmu.Unlock()
		return ErrClosed
	case change && l.failed != nil:
		err := l.failed
		l.wmu.Unlock()
		return err
	}
	return nil
}

// active returns the segment appends go to.
func (l *Log) active() *segRef {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.segs[len(l.segs)-1]
}

func (l *Log) isClosed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}

// notify wakes the goroutines in Wait. The channel is made only when one
// waits, so that an append with no one waiting allocates none.
func (l *Log) notify() {
	l.nmu.Lock()
	if l.advanced != nil {
		close(l.advanced)
		l.advanced = nil
	}
	l.nmu.Unlock()
}

// advancedChan returns a channel that the next notify closes.
func (l *Log) advancedChan() <-chan struct{} {
	l.nmu.Lock()
	defer l.nmu.Unlock()
	if l.advanced == nil {
		l.advanced = make(chan struct{})
	}
	return l.advanced
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// LogStartOffset returns the first offset a read may ask for.
func (l *Log) LogStartOffset() int64 { return l.logStart.Load() }

// HighWatermark returns the offset below which records are committed:
// what consumers may read.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// LogEndOffset returns the offset the next appended record will get.
func (l *Log) LogEndOffset() int64 { return l.leo.Load() }

// SetHighWatermark sets the high watermark, clamped to the log start and
// end offsets, and returns the value set. It is for logs opened with
// ExternalHighWatermark, whose replication layer owns it.
func (l *Log) SetHighWatermark(offset int64) (int64, error) {
	if err := l.lockWriter(false); err != nil {
		return 0, err
	}
	defer l.wmu.Unlock()
	offset = min(max(offset, l.logStart.Load()), l.leo.Load())
	if l.hw.Swap(offset) != offset {
		l.hwMovedLocked()
		l.notify()
	}
	return offset, nil
}

// LeaderEpoch returns the epoch the log stamps on appended batches, -1 if
// none was set.
func (l *Log) LeaderEpoch() int32 {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.epoch
}

// SetLeaderEpoch makes epoch the one stamped on batches appended from now
// on, as when this replica becomes the leader of that epoch. The epoch
// cache learns that epoch starts at the log end offset (Kafka's
// LeaderEpochFileCache.assign). A lower epoch than the current one is
// ErrStaleEpoch.
func (l *Log) SetLeaderEpoch(epoch int32) error {
	if err := l.lockWriter(true); err != nil {
		return err
	}
	defer l.wmu.Unlock()
	if epoch < l.epoch || epoch < 0 {
		return fmt.Errorf("%w: epoch %d, current %d", ErrStaleEpoch, epoch, l.epoch)
	}
	if err := l.epochs.Assign(epoch, l.leo.Load()); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	l.epoch = epoch
	return nil
}

// EndOffsetForEpoch answers a follower's OffsetsForLeaderEpoch request: the
// largest epoch at or below epoch that the log knows and the offset where
// it ends (KIP-101 and KIP-279). It returns (-1, -1) if the log knows no
// epoch that old.
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64, error) {
	if err := l.lockWriter(false); err != nil {
		return 0, 0, err
	}
	defer l.wmu.Unlock()
	e, off := l.epochs.EndOffsetFor(epoch, l.leo.Load())
	return e, off, nil
}

// Epochs returns the leader epoch cache's entries: each epoch and the
// offset it starts at.
func (l *Log) Epochs() []EpochEntry {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.epochs.Entries()
}

// Sync makes everything appended so far durable, whatever the policy. The
// fsync runs outside the writer lock, as a group commit's does, so that
// appends and a replica's reads of the log's offsets and epochs go on
// meanwhile.
func (l *Log) Sync() error {
	if err := l.lockWriter(true); err != nil {
		return err
	}
	leo, truncations := l.leo.Load(), l.truncations
	if l.recoveryPoint >= leo {
		l.wmu.Unlock()
		return nil
	}
	active := l.active()
	active.acquire() // the log holds it, so this succeeds
	l.wmu.Unlock()

	// The segments before the active one were synced when they rolled.
	start := time.Now()
	err := safely(active.SyncLog)
	l.stats.fsync(time.Since(start))
	active.release()

	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrFailed, l.dir, err)
		l.failed = cmp.Or(l.failed, err)
		return err
	}
	if truncations == l.truncations { // else the offsets may hold other data now
		l.recoveryPoint = max(l.recoveryPoint, leo)
	}
	return l.failed
}
