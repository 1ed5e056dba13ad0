package log

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// errLost is the answer of an append the producer never got: a timeout.
var errLost = fmt.Errorf("append answer lost: %w", os.ErrDeadlineExceeded)

// partitionBatches returns the batches of a partition, in offset order.
func partitionBatches(t *testing.T, d *Dir, topic string, part int32) []segment.Batch {
	t.Helper()
	bs, err := with(must(d.Partition(topic, part)), false, func(l *Log) ([]segment.Batch, error) { return batchesOf(t, l), nil })
	require.NoError(t, err)
	return bs
}

// TestIdempotentProducerRetryOfALostAnswerWritesOnce: the producer's
// first append is written but its answer is lost (a timeout); the retry,
// with the same producer id, epoch and sequence, is recognised by the log
// as a duplicate of one of the producer's last five batches (Kafka's
// ProducerStateManager duplicate check) and answered with the original
// offset: the partition holds the record once.
func TestIdempotentProducerRetryOfALostAnswerWritesOnce(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	pr, err := d.NewProducer(ProducerOptions{RetryBackoff: time.Millisecond})
	require.NoError(t, err)
	defer pr.Close()
	real := pr.appendFn
	var calls atomic.Int32
	pr.appendFn = func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
		res, err := real(p, recs, prod, queued)
		if calls.Add(1) == 1 {
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			return AppendResult{}, errLost
		}
		return res, err
	}
	ctx := context.Background()
	at, err := pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("once")))
	require.NoError(t, err)
	require.Equal(t, Produced{Partition: 0, Offset: 0}, at)
	require.EqualValues(t, 2, calls.Load(), "the producer retried the append whose answer it lost")

	at, err = pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("next")))
	require.NoError(t, err)
	require.EqualValues(t, 1, at.Offset, "the retry wrote nothing")

	bs := partitionBatches(t, d, "t", 0)
	require.Len(t, bs, 2)
	for i, b := range bs {
		require.GreaterOrEqual(t, b.ProducerID(), int64(0), "batch %d carries the producer id", i)
		require.EqualValues(t, 0, b.ProducerEpoch())
		require.EqualValues(t, i, b.BaseSequence(), "batch %d: sequences follow on", i)
	}
}

// TestIdempotentProducerRetriesAFullDisk: a write refused with ENOSPC
// appends nothing and leaves the log usable; the idempotent producer tries
// again after RetryBackoff and the record is written once. A producer
// without idempotence does not retry (a retry could duplicate) and returns
// the error.
func TestIdempotentProducerRetriesAFullDisk(t *testing.T) {
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			fs, d := openMemDir(t)
			defer d.Close()
			require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
			pr, err := d.NewProducer(ProducerOptions{DisableIdempotence: !idempotent, RetryBackoff: time.Millisecond})
			require.NoError(t, err)
			defer pr.Close()
			ctx := context.Background()
			_, err = pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("first")))
			require.NoError(t, err)

			var full atomic.Int32
			full.Store(1)
			fs.SetHook(func(op vfs.Op) error {
				if op.Kind == vfs.OpWrite && strings.HasSuffix(op.Name, ".log") && full.Add(-1) == 0 {
					return syscall.ENOSPC
				}
				return nil
			})
			defer fs.SetHook(nil)
			at, err := pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("second")))
			require.LessOrEqual(t, full.Load(), int32(0), "the disk was full once")
			if !idempotent {
				require.ErrorIs(t, err, syscall.ENOSPC)
				require.Len(t, partitionBatches(t, d, "t", 0), 1)
				return
			}
			require.NoError(t, err)
			require.EqualValues(t, 1, at.Offset)
			bs := partitionBatches(t, d, "t", 0)
			require.Len(t, bs, 2)
			require.EqualValues(t, 1, bs[1].BaseSequence())
		})
	}
}

// TestProducerIDsAreNeverReused: every producer of a data directory gets
// a new producer id, and so does one after the directory is reopened (the
// rest of the reserved block is skipped, as Kafka's ProducerIdManager
// skips a block it may have handed out from). The ids file is not a stray.
func TestProducerIDsAreNeverReused(t *testing.T) {
	fs, d := openMemDir(t)
	seen := map[int64]bool{}
	newID := func(d *Dir) int64 {
		pr, err := d.NewProducer(ProducerOptions{})
		require.NoError(t, err)
		require.NoError(t, pr.Close())
		require.False(t, seen[pr.id], "producer id %d handed out twice", pr.id)
		seen[pr.id] = true
		return pr.id
	}
	require.EqualValues(t, 0, newID(d))
	require.EqualValues(t, 1, newID(d))
	id, err := d.NewProducerID() // a broker's InitProducerId draws from the same ids
	require.NoError(t, err)
	require.EqualValues(t, 2, id)
	seen[id] = true
	strays, err := d.Strays()
	require.NoError(t, err)
	require.Empty(t, strays)
	require.NoError(t, d.Close())

	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	require.EqualValues(t, producerIDBlock, newID(d))
	for range producerIDBlock {
		newID(d) // into the next block
	}
	require.NoError(t, d.Close())

	require.NoError(t, vfs.WriteFileAtomic(fs, filepath.Join("/data", producerIDFile), []byte("nonsense")))
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	_, err = d.NewProducer(ProducerOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = d.NewProducer(ProducerOptions{DisableIdempotence: true})
	require.NoError(t, err, "a producer without idempotence needs no producer id")
}

// TestFailedBatchBumpsThePartitionEpoch: a batch that took sequences fails
// for good; the batch after it, already sent, is refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER and fails too, since the gap will never
// fill; the next batch starts a new epoch at sequence 0 and is accepted
// (Kafka's idempotent producer bumps its epoch after such a failure,
// TransactionManager.handleFailedBatch).
func TestFailedBatchBumpsThePartitionEpoch(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	pr, err := d.NewProducer(ProducerOptions{RetryBackoff: time.Millisecond})
	require.NoError(t, err)
	defer pr.Close()
	ctx := context.Background()
	_, err = pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("r0")))
	require.NoError(t, err)

	real := pr.appendFn
	broken := errors.New("injected: the append failed")
	secondDone := make(chan struct{})
	var calls atomic.Int32
	pr.appendFn = func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
		switch calls.Add(1) {
		case 1: // A reaches the log's order, then fails without writing
			queued()
			<-secondDone
			return AppendResult{}, broken
		case 2: // B, sent while A is in progress
			defer close(secondDone)
		}
		return real(p, recs, prod, queued)
	}
	errs := make(chan error, 2)
	report := func(_ Produced, err error) { errs <- err }
	require.NoError(t, pr.ProduceAsync(ctx, "t", 0, NewRecord(nil, []byte("A")), report))
	require.NoError(t, pr.ProduceAsync(ctx, "t", 0, NewRecord(nil, []byte("B")), report))
	require.ErrorIs(t, <-errs, broken, "A")
	require.ErrorIs(t, <-errs, idempotence.ErrOutOfOrderSequence, "B, after the gap A left")

	at, err := pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("C")))
	require.NoError(t, err)
	require.EqualValues(t, 1, at.Offset)
	bs := partitionBatches(t, d, "t", 0)
	require.Len(t, bs, 2)
	require.EqualValues(t, 1, bs[1].ProducerEpoch(), "C: a new epoch")
	require.EqualValues(t, 0, bs[1].BaseSequence(), "C: starts again at 0")
	require.EqualValues(t, 3, calls.Load(), "B was not retried: its sequences follow a gap")
}

// TestIdempotentProducerLosingAnswersNeverDuplicates: thousands of records
// produced asynchronously to several partitions while a third of the
// appends lose their answer after being written (or before, at random);
// every record is in its partition exactly once, in the order produced,
// and every callback reports its record's real offset.
func TestIdempotentProducerLosingAnswersNeverDuplicates(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	const parts, n = 3, 3000
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: parts}))
	pr, err := d.NewProducer(ProducerOptions{BatchBytes: 512, RetryBackoff: 100 * time.Microsecond})
	require.NoError(t, err)
	real := pr.appendFn
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	lose := func() (before, after bool) {
		mu.Lock()
		defer mu.Unlock()
		r := rng.IntN(6)
		return r == 0, r == 1
	}
	var lost atomic.Int64
	pr.appendFn = func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
		before, after := lose()
		if before && prod != nil {
			queued() // took its place, then lost
			lost.Add(1)
			return AppendResult{}, errLost
		}
		res, err := real(p, recs, prod, queued)
		if after && err == nil {
			lost.Add(1)
			return AppendResult{}, errLost
		}
		return res, err
	}

	ctx := context.Background()
	got := make([]map[int64]uint64, parts) // per partition: offset -> record number, from the callbacks
	for p := range got {
		got[p] = map[int64]uint64{}
	}
	var failed []error // a callback must not stop its goroutine with require
	for i := range n {
		v := binary.BigEndian.AppendUint64(nil, uint64(i))
		require.NoError(t, pr.ProduceAsync(ctx, "t", int32(i%parts), NewRecord(nil, v), func(at Produced, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Errorf("record %d: %w", i, err))
				return
			}
			got[at.Partition][at.Offset] = uint64(i)
		}))
	}
	require.NoError(t, pr.Close())
	require.Empty(t, failed)
	require.Positive(t, lost.Load())
	t.Logf("%d answers lost", lost.Load())
	for p := range int32(parts) {
		j := 0
		for r, err := range must(d.Partition("t", p)).Records(0, ReadCommitted) {
			require.NoError(t, err)
			want := uint64(j*parts) + uint64(p)
			require.Equal(t, want, binary.BigEndian.Uint64(r.Value), "partition %d offset %d: once each, in order", p, r.Offset)
			require.Equal(t, want, got[p][r.Offset], "partition %d offset %d: the callback's offset", p, r.Offset)
			j++
		}
		require.Equal(t, n/parts, j, "partition %d", p)
	}
}

// BenchmarkProducerIdempotence compares the Producer with and without
// idempotence, records produced asynchronously to four partitions.
func BenchmarkProducerIdempotence(b *testing.B) {
	for _, idempotent := range []bool{false, true} {
		b.Run(fmt.Sprintf("idempotent=%v", idempotent), func(b *testing.B) {
			fs := vfs.NewMem()
			d, err := OpenDir("/data", dirOptions(fs))
			require.NoError(b, err)
			defer d.Close()
			require.NoError(b, d.CreateTopic("t", TopicConfig{Partitions: 4}))
			pr, err := d.NewProducer(ProducerOptions{DisableIdempotence: !idempotent})
			require.NoError(b, err)
			ctx := context.Background()
			value := make([]byte, 100)
			b.SetBytes(int64(len(value)))
			b.ResetTimer()
			for i := range b.N {
				require.NoError(b, pr.ProduceAsync(ctx, "t", int32(i%4), NewRecord(nil, value), nil))
			}
			require.NoError(b, pr.Close())
		})
	}
}

// TestProducerKeepsAtMostFiveBatchesInFlight: while a partition's first
// batch hangs in the log, the producer hands the log four more and keeps
// the rest: a batch retried after a lost answer must be among the five
// batches per producer the log remembers (Kafka's
// max.in.flight.requests.per.connection <= 5 for an idempotent producer).
func TestProducerKeepsAtMostFiveBatchesInFlight(t *testing.T) {
	synctest.Test(t, testProducerKeepsAtMostFiveBatchesInFlight)
}

func testProducerKeepsAtMostFiveBatchesInFlight(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	pr, err := d.NewProducer(ProducerOptions{BatchBytes: 1}) // a batch per record
	require.NoError(t, err)
	ctx := context.Background()
	_, err = pr.Produce(ctx, "t", 0, NewRecord(nil, []byte("known"))) // the log knows the producer
	require.NoError(t, err)

	real := pr.appendFn
	hang := make(chan struct{})
	var calls atomic.Int32
	pr.appendFn = func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
		if calls.Add(1) == 1 {
			queued()
			<-hang
		}
		return real(p, recs, prod, queued)
	}
	const n = 20
	var mu sync.Mutex
	var offsets []int64
	for i := range n {
		require.NoError(t, pr.ProduceAsync(ctx, "t", 0, NewRecord(nil, []byte{byte(i)}), func(at Produced, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				at.Offset = -1
			}
			offsets = append(offsets, at.Offset)
		}))
	}
	synctest.Wait() // every goroutine blocked: the producer holds the rest
	require.EqualValues(t, maxInFlight, calls.Load(), "batches in the log's hands while the first hangs")
	close(hang)
	require.NoError(t, pr.Close())
	require.Len(t, offsets, n)
	for i, o := range offsets {
		require.EqualValues(t, i+1, o, "record %d", i)
	}
}

// TestFirstBatchGoesAloneToALogThatDoesNotKnowTheProducer: a log that has
// no state for a producer accepts any first sequence (Kafka's
// ProducerAppendInfo.checkSequence), so if the producer's first batch in a
// partition failed while its second was taken, the log would start at
// sequence 1 and refuse the retry of 0 for good. The second batch waits
// until the first is done, then the log takes both, in order.
func TestFirstBatchGoesAloneToALogThatDoesNotKnowTheProducer(t *testing.T) {
	synctest.Test(t, testFirstBatchGoesAloneToALogThatDoesNotKnowTheProducer)
}

func testFirstBatchGoesAloneToALogThatDoesNotKnowTheProducer(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	pr, err := d.NewProducer(ProducerOptions{BatchBytes: 1, RetryBackoff: time.Millisecond})
	require.NoError(t, err)
	real := pr.appendFn
	var mu sync.Mutex
	var sent []int32 // the base sequence of every attempt, in order
	pr.appendFn = func(p *Partition, recs []segment.Record, prod *segment.ProducerFields, queued func()) (AppendResult, error) {
		mu.Lock()
		sent = append(sent, prod.BaseSequence)
		first := len(sent) == 1
		mu.Unlock()
		if first {
			queued()
			synctest.Wait()                // room for the second batch to overtake
			return AppendResult{}, errLost // and nothing written
		}
		return real(p, recs, prod, queued)
	}
	ctx := context.Background()
	errs := make(chan error, 2)
	report := func(_ Produced, err error) { errs <- err }
	require.NoError(t, pr.ProduceAsync(ctx, "t", 0, NewRecord(nil, []byte("a")), report))
	require.NoError(t, pr.ProduceAsync(ctx, "t", 0, NewRecord(nil, []byte("b")), report))
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoError(t, pr.Close())
	require.Equal(t, []int32{0, 0, 1}, sent, "the first batch, its retry, then the second")
	bs := partitionBatches(t, d, "t", 0)
	require.Len(t, bs, 2)
	require.EqualValues(t, 1, bs[1].BaseSequence())
}
