package log

import (
	"cmp"
	"context"
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
}

// maxAppending is how many appends a partition may have in progress with
// an adaptive linger: two, so that one batch is written while the one
// before it syncs (the log pipelines its syncs).
const maxAppending = 2

// AnyPartition asks Produce to pick the partition with the partitioner.
const AnyPartition int32 = -1

// Produced is where a produced record went.
type Produced struct {
	Partition int32
	Offset    int64
}

// Producer produces records into a Dir from many goroutines, gathering the
// records bound for the same partition into one batch, as a Kafka producer
// does, so that many small concurrent produces cost few appends and syncs.
type Producer struct {
	d        *Dir
	opts     ProducerOptions
	maxBytes int // of a batch's records, uncompressed: see NewProducer

	mu          sync.Mutex
	closed      bool
	open        map[*Partition]*pendingBatch // batches gathering records
	appending   map[*Partition]int           // appends in progress per partition
	partitioner map[string]BatchPartitioner
	lingering   sync.WaitGroup // linger timers that may fire
	flushing    sync.WaitGroup // batches being appended
}

// pendingBatch gathers records for one partition.
type pendingBatch struct {
	p     *Partition
	recs  []segment.Record
	bytes int
	timer *time.Timer

	done chan struct{} // closed once appended
	base int64
	err  error
}

// NewProducer returns a producer into d.
func (d *Dir) NewProducer(opts ProducerOptions) (*Producer, error) {
	switch {
	case opts.BatchBytes == 0:
		opts.BatchBytes = 16 << 10
	case opts.BatchBytes < 0:
		return nil, fmt.Errorf("%w: BatchBytes is %d, allowed 0 or more", ErrInvalidOption, opts.BatchBytes)
	}
	if opts.Linger < 0 {
		return nil, fmt.Errorf("%w: Linger is %v, allowed 0 or more", ErrInvalidOption, opts.Linger)
	}
	if opts.Partitioner == nil {
		opts.Partitioner = func() BatchPartitioner { return HashPartitioner(nil) }
	}
	return &Producer{
		d: d, opts: opts,
		// What the logs take: MaxBatchBytes, and, compressed, what Records
		// can decompress.
		maxBytes:    min(cmp.Or(d.opts.Log.MaxBatchBytes, DefaultMaxBatchBytes)-segment.HeaderSize, segment.MaxDecompressedSize),
		open:        make(map[*Partition]*pendingBatch),
		appending:   make(map[*Partition]int),
		partitioner: make(map[string]BatchPartitioner),
	}, nil
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
// Records are gathered into batches of at most the log's MaxBatchBytes
// (and segment.MaxDecompressedSize), uncompressed; a record too large for
// a batch of its own fails alone, with segment.ErrBatchTooLarge.
func (pr *Producer) Produce(ctx context.Context, topicName string, partition int32, rec segment.Record) (Produced, error) {
	if err := ctx.Err(); err != nil {
		return Produced{}, err
	}
	cfg, err := pr.d.TopicConfig(topicName)
	if err != nil {
		return Produced{}, err
	}
	if cfg.Compact && rec.Key == nil {
		return Produced{}, fmt.Errorf("%w: topic %s", ErrKeyRequired, topicName)
	}
	pr.mu.Lock()
	if pr.closed {
		pr.mu.Unlock()
		return Produced{}, ErrClosed
	}
	if partition == AnyPartition {
		partition = pr.partitionerLocked(topicName).Partition(rec.Key, cfg.Partitions)
	}
	p, err := pr.d.Partition(topicName, partition)
	if err != nil {
		pr.mu.Unlock()
		return Produced{}, err
	}
	size := recordBound(&rec)
	b := pr.open[p]
	var full *pendingBatch // closed because rec would take it past maxBytes
	if b != nil && b.bytes+size > pr.maxBytes {
		pr.detachLocked(b)
		full, b = b, nil
	}
	if b == nil {
		b = &pendingBatch{p: p, done: make(chan struct{})}
		pr.open[p] = b
		if pr.opts.Linger > 0 {
			pr.lingering.Add(1)
			b.timer = time.AfterFunc(pr.opts.Linger, func() {
				defer pr.lingering.Done()
				pr.flushIf(b)
			})
		}
	}
	i := len(b.recs)
	b.recs = append(b.recs, rec)
	b.bytes += size
	send := b.bytes >= pr.opts.BatchBytes || (pr.opts.Linger == 0 && pr.appending[p] < maxAppending)
	if send {
		pr.detachLocked(b)
	}
	pr.mu.Unlock()
	if full != nil {
		go pr.append(full)
	}
	if send {
		pr.append(b)
	}

	select {
	case <-b.done:
		if b.err != nil {
			return Produced{}, b.err
		}
		return Produced{Partition: partition, Offset: b.base + int64(i)}, nil
	case <-ctx.Done():
		return Produced{}, ctx.Err()
	}
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
		pr.lingering.Done()
	}
	pr.appending[b.p]++
	pr.flushing.Add(1)
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

// append appends b; with an adaptive linger, the batch that gathered
// meanwhile goes next, from a new goroutine so that b's producers return.
func (pr *Producer) append(b *pendingBatch) {
	defer pr.flushing.Done()
	res, err := b.p.Append(b.recs)
	b.base, b.err = res.BaseOffset, err
	close(b.done)

	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.appending[b.p]--; pr.appending[b.p] == 0 {
		delete(pr.appending, b.p)
	}
	if next := pr.open[b.p]; next != nil && pr.opts.Linger == 0 {
		pr.detachLocked(next)
		go pr.append(next)
	}
}

// Flush appends every gathered batch now and waits for them.
func (pr *Producer) Flush() {
	pr.mu.Lock()
	batches := make([]*pendingBatch, 0, len(pr.open))
	for _, b := range pr.open {
		pr.detachLocked(b)
		batches = append(batches, b)
	}
	pr.mu.Unlock()
	for _, b := range batches {
		pr.append(b)
	}
	pr.flushing.Wait()
}

// Close flushes the producer and stops it; later Produce calls return
// ErrClosed.
func (pr *Producer) Close() error {
	pr.mu.Lock()
	if pr.closed {
		pr.mu.Unlock()
		return ErrClosed
	}
	pr.closed = true
	pr.mu.Unlock()
	pr.Flush()
	pr.lingering.Wait()
	return nil
}
