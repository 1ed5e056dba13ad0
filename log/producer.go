package log

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strandlog/strand/segment"
)

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	// BatchBytes closes a partition's batch once its records reach this
	// size (Kafka's batch.size); default 16 KiB.
	BatchBytes int
	// Linger is how long a batch waits for more records before it is
	// appended (Kafka's linger.ms). Zero, the default, adapts instead: a
	// batch is appended as soon as its partition has fewer than two appends
	// in progress, and gathers records while it has two, so a lone record
	// waits for nothing and a busy partition gets large batches.
	Linger time.Duration
	// Partitioner picks the partition of a record produced without one;
	// default HashPartitioner(nil): Kafka's murmur2 for keyed records,
	// sticky for keyless ones (KIP-480). One is made per topic.
	Partitioner func() BatchPartitioner
	// MaxBufferedRecords bounds the records produced and not yet appended,
	// as franz-go's option of that name (default 10,000, as there):
	// ProduceAsync waits for room, so that a fast producer cannot fill the
	// memory with records the disk has not taken yet.
	MaxBufferedRecords int

	// DisableIdempotence turns off the idempotent mode, which is on by
	// default as in Kafka 3.0+ (enable.idempotence=true). An idempotent
	// producer has a producer id from the Dir, never reused, stamps each
	// batch with its partition's next sequence numbers, and retries a batch
	// whose append failed in a way that may pass (a full disk, a timeout)
	// with the same sequences: the log recognises a batch it already holds
	// and answers with its offsets, so that a retry never writes a record
	// twice. Without idempotence the producer retries nothing.
	DisableIdempotence bool
	// DeliveryTimeout bounds how long an idempotent producer retries a
	// batch (Kafka's delivery.timeout.ms); default 2 minutes.
	DeliveryTimeout time.Duration
	// RetryBackoff is the first wait before a retry, doubled at each retry
	// up to a second (Kafka's retry.backoff.ms and retry.backoff.max.ms);
	// default 100ms.
	RetryBackoff time.Duration
}

// maxAppending is how many appends a partition may have in progress with
// an adaptive linger: two, so that one batch is written while the one
// before it syncs (the log writes the next groups during a sync).
const maxAppending = 2

// maxInFlight is how many batches of a partition may be in the log's hands
// at once, full ones included: Kafka's max.in.flight.requests.per.connection,
// whose limit of five for an idempotent producer matches the five batches
// per producer the log remembers. A batch retried after its answer was lost
// must be one of those five, or the log cannot tell it is a duplicate and
// refuses it as out of order.
const maxInFlight = 5

// AnyPartition asks Produce to pick the partition with the partitioner.
const AnyPartition int32 = -1

// ErrNilContext means a nil context.Context was passed where one is
// required.
var ErrNilContext = errors.New("log: nil context")

// Produced is where a produced record went.
type Produced struct {
	Partition int32
	Offset    int64
}

// Record is a record to produce or append, and one read back:
// segment.Record, named here so that a queue user needs no other package.
type Record = segment.Record

// NewRecord returns a record to produce or append, with its timestamp left
// for the log to set to the append time.
func NewRecord(key, value []byte) Record {
	return Record{Key: key, Value: value}
}

// NewRecordAt returns a record whose timestamp is at, stored as Kafka
// stores it, in milliseconds since the Unix epoch; a zero at leaves it to
// the append time. Retention and OffsetForTimestamp go by that timestamp.
func NewRecordAt(key, value []byte, at time.Time) Record {
	r := NewRecord(key, value)
	if !at.IsZero() {
		r.Timestamp = at.UnixMilli()
	}
	return r
}

// Producer produces records into a Dir, gathering the records bound for
// the same partition into one batch, as a Kafka producer does, so that
// many small produces cost few appends and syncs. Produce waits for its
// record; ProduceAsync returns at once and reports through a callback, so
// that one goroutine keeps many records in flight. A partition's records
// are appended in the order they were produced (the order of the Produce
// and ProduceAsync calls that returned, for calls from one goroutine), and
// its callbacks are called in offset order. Unless
// ProducerOptions.DisableIdempotence, the producer is idempotent: its
// retries never write a record twice (see ProducerOptions).
type Producer struct {
	d    *Dir
	opts ProducerOptions
	room chan struct{} // a token per record produced and not yet appended

	mu          sync.Mutex
	closed      bool
	open        map[*Partition]*pendingBatch // batches gathering records
	last        map[*Partition]*pendingBatch // each partition's newest batch, until it completes
	appending   map[*Partition]int           // appends in progress per partition
	partitioner map[string]BatchPartitioner
	running     sync.WaitGroup            // linger timers that may fire, batches being appended
	seqs        map[*Partition]*sequencer // idempotent mode only
	id          int64                     // the producer id, in idempotent mode
	epoch       int16                     // its epoch, which a transactional producer's coordinator bumps
	txn         *TransactionalProducer    // set if the producer is transactional

	// appendFn appends a batch; tests replace it to lose an answer.
	appendFn func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error)
}

// pendingBatch gathers records for one partition.
type pendingBatch struct {
	p     *Partition
	recs  []segment.Record
	calls []func(Produced, error) // per record; nil for Produce's records
	bytes int
	timer *time.Timer

	// prev is the partition's batch before this one, until this one
	// completes: this one enters the log after prev (so gets later
	// offsets) and completes after it (so its callbacks come later).
	prev *pendingBatch
	// earlier holds the done channels of the partition's batches before
	// this one, the oldest first, up to maxInFlight of them: this one is
	// appended once earlier[0] is done.
	earlier [maxInFlight]chan struct{}
	queued  chan struct{} // closed once the batch has its place in the log's order, or failed
	done    chan struct{} // closed once appended and its callbacks called
	base    int64
	err     error
}

// NewProducer returns a producer into d.
func (d *Dir) NewProducer(opts ProducerOptions) (*Producer, error) {
	if err := d.checkOpen(); err != nil {
		return nil, err
	}
	switch {
	case opts.BatchBytes == 0:
		opts.BatchBytes = 16 << 10
	case opts.BatchBytes < 0:
		return nil, fmt.Errorf("%w: BatchBytes is %d, allowed 0 or more", ErrInvalidOption, opts.BatchBytes)
	}
	if opts.Linger < 0 {
		return nil, fmt.Errorf("%w: Linger is %v, allowed 0 or more", ErrInvalidOption, opts.Linger)
	}
	switch {
	case opts.MaxBufferedRecords == 0:
		opts.MaxBufferedRecords = 10_000
	case opts.MaxBufferedRecords < 0:
		return nil, fmt.Errorf("%w: MaxBufferedRecords is %d, allowed 0 or more", ErrInvalidOption, opts.MaxBufferedRecords)
	}
	if opts.Partitioner == nil {
		opts.Partitioner = func() BatchPartitioner { return HashPartitioner(nil) }
	}
	switch {
	case opts.DeliveryTimeout == 0:
		opts.DeliveryTimeout = 2 * time.Minute
	case opts.DeliveryTimeout < 0:
		return nil, fmt.Errorf("%w: DeliveryTimeout is %v, allowed 0 or more", ErrInvalidOption, opts.DeliveryTimeout)
	}
	switch {
	case opts.RetryBackoff == 0:
		opts.RetryBackoff = 100 * time.Millisecond
	case opts.RetryBackoff < 0:
		return nil, fmt.Errorf("%w: RetryBackoff is %v, allowed 0 or more", ErrInvalidOption, opts.RetryBackoff)
	}
	pr := &Producer{
		d: d, opts: opts,
		room:        make(chan struct{}, opts.MaxBufferedRecords),
		open:        make(map[*Partition]*pendingBatch),
		last:        make(map[*Partition]*pendingBatch),
		appending:   make(map[*Partition]int),
		partitioner: make(map[string]BatchPartitioner),
		appendFn:    (*Partition).appendQueued,
	}
	if !opts.DisableIdempotence {
		id, err := d.newProducerID()
		if err != nil {
			return nil, err
		}
		pr.id, pr.seqs = id, make(map[*Partition]*sequencer)
	}
	return pr, nil
}

// Produce appends rec to partition of topic, or to the partition the
// partitioner picks if partition is AnyPartition, and waits until it is
// appended (and durable, under FsyncAlways). A Timestamp of zero means the
// append time. A compacted topic's record needs a key (ErrKeyRequired).
//
// If ctx is done when Produce is called, Produce returns its error and
// writes nothing. Once the record is queued, it goes to the log whatever
// ctx does: if ctx ends while the record waits for its batch or its batch
// is being written, Produce returns ctx's error at once, and the record
// may or may not be appended (as with a Kafka producer's delivery
// timeout); a read of the partition tells.
//
// Records are gathered into batches of at most the topic's MaxBatchBytes
// (and segment.MaxDecompressedSize), uncompressed; a record too large for
// a batch of its own fails alone, with segment.ErrBatchTooLarge.
func (pr *Producer) Produce(ctx context.Context, topicName string, partition int32, rec segment.Record) (Produced, error) {
	if ctx == nil {
		return Produced{}, ErrNilContext
	}
	b, i, err := pr.add(ctx, topicName, partition, rec, nil)
	if err != nil {
		return Produced{}, err
	}
	select {
	case <-b.done:
		return b.result(i)
	case <-ctx.Done():
		return Produced{}, ctx.Err()
	}
}

// ProduceAsync queues rec as Produce does and returns without waiting for
// the append: done is called once with where rec went or why it failed,
// from a goroutine of the producer, after the callbacks of the records
// before it in its partition (as franz-go's Client.Produce promises). A
// nil done discards the outcome. If ProduceAsync returns an error, rec was
// not queued and done is not called; this happens when ctx is done before
// rec is queued, the topic or partition does not exist, a compacted
// topic's record has no key, or the producer is closed.
//
// When MaxBufferedRecords records are buffered, ProduceAsync waits for
// room, or until ctx is done. Callbacks should be quick: the next records
// of their partition wait for them. A callback may produce again.
func (pr *Producer) ProduceAsync(ctx context.Context, topicName string, partition int32, rec segment.Record, done func(Produced, error)) error {
	if ctx == nil {
		return ErrNilContext
	}
	if done == nil {
		done = func(Produced, error) {}
	}
	_, _, err := pr.add(ctx, topicName, partition, rec, done)
	return err
}

// add queues rec in its partition's open batch and returns the batch and
// rec's index in it. A record produced with a callback leaves its batch's
// append to another goroutine; one produced without waits for it anyway,
// so its goroutine may append the batch itself.
func (pr *Producer) add(ctx context.Context, topicName string, partition int32, rec segment.Record, call func(Produced, error)) (*pendingBatch, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	cfg, err := pr.d.TopicConfig(topicName)
	if err != nil {
		return nil, 0, err
	}
	if cfg.compacted() && rec.Key == nil {
		return nil, 0, fmt.Errorf("%w: topic %s", ErrKeyRequired, topicName)
	}
	select {
	case pr.room <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	pr.mu.Lock()
	p, err := pr.partitionLocked(topicName, partition, cfg, rec.Key)
	if err != nil {
		pr.mu.Unlock()
		<-pr.room
		return nil, 0, err
	}
	// What the log takes: MaxBatchBytes, and, compressed, what Records
	// can decompress.
	maxBytes := min(cmp.Or(cfg.logOptions(pr.d.opts.Log).MaxBatchBytes, DefaultMaxBatchBytes)-segment.HeaderSize, segment.MaxDecompressedSize)
	size := recordBound(&rec)
	b := pr.open[p]
	var full *pendingBatch // closed because rec would take it past maxBytes
	if b != nil && b.bytes+size > maxBytes {
		pr.detachLocked(b)
		full, b = b, nil
	}
	if b == nil {
		b = pr.newBatchLocked(p)
	}
	i := len(b.recs)
	b.recs = append(b.recs, rec)
	b.calls = append(b.calls, call)
	b.bytes += size
	send := b.bytes >= pr.opts.BatchBytes || (pr.opts.Linger == 0 && pr.appending[p] < maxAppending)
	if send {
		pr.detachLocked(b)
	}
	pr.mu.Unlock()
	if full != nil {
		go pr.append(full)
	}
	switch {
	case send && call == nil:
		pr.append(b)
	case send:
		go pr.append(b)
	}
	return b, i, nil
}

// partitionLocked returns the partition a record goes to.
func (pr *Producer) partitionLocked(topicName string, partition int32, cfg TopicConfig, key []byte) (*Partition, error) {
	if pr.closed {
		return nil, ErrClosed
	}
	if partition == AnyPartition {
		partition = pr.partitionerLocked(topicName).Partition(key, cfg.Partitions)
	}
	return pr.d.Partition(topicName, partition)
}

func (pr *Producer) newBatchLocked(p *Partition) *pendingBatch {
	b := &pendingBatch{p: p, prev: pr.last[p], queued: make(chan struct{}), done: make(chan struct{})}
	if b.prev != nil {
		copy(b.earlier[:], b.prev.earlier[1:])
		b.earlier[maxInFlight-1] = b.prev.done
	}
	pr.open[p], pr.last[p] = b, b
	if pr.opts.Linger > 0 {
		pr.running.Add(1)
		b.timer = time.AfterFunc(pr.opts.Linger, func() {
			defer pr.running.Done()
			pr.flushIf(b)
		})
	}
	return b
}

// result is where record i of b went, once b is done.
func (b *pendingBatch) result(i int) (Produced, error) {
	if b.err != nil {
		return Produced{}, b.err
	}
	return Produced{Partition: b.p.ID(), Offset: b.base + int64(i)}, nil
}

func (pr *Producer) partitionerLocked(topic string) BatchPartitioner {
	bp := pr.partitioner[topic]
	if bp == nil {
		bp = pr.opts.Partitioner()
		pr.partitioner[topic] = bp
	}
	return bp
}

// recordBound is the most bytes rec takes in a batch, uncompressed: its
// key, value and headers, and the varints around them at their longest
// (length 5, attributes 1, timestamp delta 10, offset delta 5, key and
// value lengths 5 each, header count 5; each header's lengths 5 each).
func recordBound(rec *segment.Record) int {
	n := 36 + len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// detachLocked closes b to new records; the caller appends it.
func (pr *Producer) detachLocked(b *pendingBatch) {
	delete(pr.open, b.p)
	if b.timer != nil && b.timer.Stop() {
		pr.running.Done()
	}
	pr.appending[b.p]++
	pr.running.Add(1)
	// KIP-480: a completed batch moves keyless records to another partition.
	pr.partitionerLocked(b.p.Topic()).OnNewBatch(b.p.ID())
}

// flushIf appends b when its linger time is up, unless it already went.
func (pr *Producer) flushIf(b *pendingBatch) {
	pr.mu.Lock()
	if pr.open[b.p] != b {
		pr.mu.Unlock()
		return
	}
	pr.detachLocked(b)
	pr.mu.Unlock()
	pr.append(b)
}

// append appends b after the batch before it has its place in the log,
// then calls b's callbacks after that batch's. With an adaptive linger,
// the batch that gathered meanwhile goes next, from a new goroutine so
// that b's producers return.
func (pr *Producer) append(b *pendingBatch) {
	defer pr.running.Done()
	if b.prev != nil {
		<-b.prev.queued
		if pr.unknown(b) {
			<-b.prev.done
		}
	}
	if oldest := b.earlier[0]; oldest != nil {
		<-oldest
	}
	var once sync.Once
	queued := func() { once.Do(func() { close(b.queued) }) }
	var res AppendResult
	var err error
	if pr.seqs == nil {
		res, err = pr.appendFn(b.p, b.recs, nil, queued)
	} else {
		res, err = pr.appendIdempotent(b, queued)
	}
	queued() // if the append failed before it reached the log
	b.base, b.err = res.BaseOffset, err
	if err != nil && pr.txn != nil {
		pr.txn.batchFailed(err)
	}
	if b.prev != nil {
		<-b.prev.done
		b.prev = nil // let it go
	}
	for range b.recs {
		<-pr.room // before the callbacks, which may produce again
	}
	func() {
		defer close(b.done) // even if a callback ends its goroutine
		for i, call := range b.calls {
			if call != nil {
				call(b.result(i))
			}
		}
	}()

	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.appending[b.p]--; pr.appending[b.p] == 0 {
		delete(pr.appending, b.p)
	}
	if pr.last[b.p] == b {
		delete(pr.last, b.p)
	}
	if next := pr.open[b.p]; next != nil && pr.opts.Linger == 0 {
		pr.detachLocked(next)
		go pr.append(next)
	}
}

// Flush appends the batches still gathering records now, without waiting
// for their linger, and waits until every record produced before the call
// is appended and its callback has returned, or until ctx is done (then
// it returns ctx's error). Records produced during the call may or may not
// be waited for. The records' own errors go to their Produce calls and
// callbacks, not to Flush.
func (pr *Producer) Flush(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	pr.mu.Lock()
	start := make([]*pendingBatch, 0, len(pr.open))
	for _, b := range pr.open {
		pr.detachLocked(b)
		start = append(start, b)
	}
	wait := make([]*pendingBatch, 0, len(pr.last))
	for _, b := range pr.last {
		wait = append(wait, b) // its partition's batches before it complete first
	}
	pr.mu.Unlock()
	for _, b := range start {
		go pr.append(b)
	}
	for _, b := range wait {
		select {
		case <-b.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close stops the producer: later Produce and ProduceAsync calls return
// ErrClosed. It flushes what was produced before, waits until every
// callback has returned (batches being retried are retried until they
// succeed or DeliveryTimeout ends), and returns once the producer's goroutines are
// gone.
func (pr *Producer) Close() error {
	pr.mu.Lock()
	if pr.closed {
		pr.mu.Unlock()
		return ErrClosed
	}
	pr.closed = true
	pr.mu.Unlock()
	err := pr.Flush(context.Background())
	pr.running.Wait()
	return err
}
