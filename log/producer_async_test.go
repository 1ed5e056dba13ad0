package log

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProduceAsyncKeepsEachPartitionInOrder: one goroutine keeps thousands
// of records in flight; each partition gets them in the order they were
// produced, and its callbacks come in offset order (franz-go's
// Client.Produce promise: records are produced in order per partition,
// promises called in order).
func TestProduceAsyncKeepsEachPartitionInOrder(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	const parts, n = 4, 4000
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: parts}))
	pr, err := d.NewProducer(ProducerOptions{BatchBytes: 1 << 10})
	require.NoError(t, err)

	var mu sync.Mutex
	seen := make([][]int64, parts) // per partition: the sequence numbers, in callback order
	offsets := make([][]int64, parts)
	ctx := context.Background()
	for i := range n {
		seq := make([]byte, 8)
		binary.BigEndian.PutUint64(seq, uint64(i))
		p := int32(i % parts)
		err := pr.ProduceAsync(ctx, "t", p, NewRecord(nil, seq), func(at Produced, err error) {
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			seen[at.Partition] = append(seen[at.Partition], int64(binary.BigEndian.Uint64(seq)))
			offsets[at.Partition] = append(offsets[at.Partition], at.Offset)
		})
		require.NoError(t, err)
	}
	require.NoError(t, pr.Flush(ctx))
	mu.Lock()
	defer mu.Unlock()
	for p := range int32(parts) {
		require.Len(t, seen[p], n/parts, "every callback ran before Flush returned")
		for j := range seen[p] {
			require.Equal(t, int64(j*parts)+int64(p), seen[p][j], "partition %d: callbacks in produce order", p)
			require.Equal(t, int64(j), offsets[p][j], "partition %d: offsets in produce order", p)
		}
		j := 0
		for r, err := range must(d.Partition("t", p)).Records(0, ReadCommitted) {
			require.NoError(t, err)
			require.Equal(t, uint64(j*parts)+uint64(p), binary.BigEndian.Uint64(r.Value), "partition %d offset %d", p, r.Offset)
			j++
		}
		require.Equal(t, n/parts, j)
	}
	require.NoError(t, pr.Close())
}

// TestProduceAsyncWaitsForRoom: with MaxBufferedRecords buffered,
// ProduceAsync waits, and gives up with ctx's error, not queuing the
// record.
func TestProduceAsyncWaitsForRoom(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	pr, err := d.NewProducer(ProducerOptions{MaxBufferedRecords: 1, Linger: time.Hour})
	require.NoError(t, err)
	defer pr.Close()

	var calls sync.WaitGroup
	calls.Add(1)
	require.NoError(t, pr.ProduceAsync(context.Background(), "t", 0, NewRecord(nil, []byte("a")), func(_ Produced, err error) {
		require.NoError(t, err)
		calls.Done()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = pr.ProduceAsync(ctx, "t", 0, NewRecord(nil, []byte("b")), func(Produced, error) { t.Error("called for a record never queued") })
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, pr.Flush(context.Background()), "Flush does not wait out the hour's linger")
	calls.Wait()
	require.NoError(t, pr.ProduceAsync(context.Background(), "t", 0, NewRecord(nil, []byte("c")), nil), "room again")
	require.NoError(t, pr.Flush(context.Background()))
	_, hw, _, err := must(d.Partition("t", 0)).Offsets()
	require.NoError(t, err)
	require.Equal(t, int64(2), hw)
}

// TestProducerCloseCompletesEveryRecord: Close appends what lingers, calls
// every callback, and refuses what comes after.
func TestProducerCloseCompletesEveryRecord(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 3}))
	pr, err := d.NewProducer(ProducerOptions{Linger: time.Hour})
	require.NoError(t, err)
	var mu sync.Mutex
	done := 0
	for i := range 300 {
		require.NoError(t, pr.ProduceAsync(context.Background(), "t", AnyPartition, NewRecord([]byte{byte(i)}, nil), func(_ Produced, err error) {
			require.NoError(t, err)
			mu.Lock()
			done++
			mu.Unlock()
		}))
	}
	require.NoError(t, pr.Close())
	mu.Lock()
	require.Equal(t, 300, done)
	mu.Unlock()
	require.ErrorIs(t, pr.ProduceAsync(context.Background(), "t", 0, NewRecord([]byte("k"), nil), nil), ErrClosed)
	_, err = pr.Produce(context.Background(), "t", 0, NewRecord([]byte("k"), nil))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, pr.Close(), ErrClosed)
}

// TestProduceAsyncRefusesWhatCannotBeQueued: errors that come before
// queuing are returned, and the callback is never called.
func TestProduceAsyncRefusesWhatCannotBeQueued(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("c", TopicConfig{Compact: Compacted}))
	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	defer pr.Close()
	never := func(Produced, error) { t.Error("callback of a refused record") }
	ctx := context.Background()
	require.ErrorIs(t, pr.ProduceAsync(ctx, "nope", 0, NewRecord(nil, nil), never), ErrUnknownTopic)
	require.ErrorIs(t, pr.ProduceAsync(ctx, "c", 5, NewRecord([]byte("k"), nil), never), ErrUnknownPartition)
	require.ErrorIs(t, pr.ProduceAsync(ctx, "c", 0, NewRecord(nil, nil), never), ErrKeyRequired)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, pr.ProduceAsync(cancelled, "c", 0, NewRecord([]byte("k"), nil), never), context.Canceled)
	require.NoError(t, pr.Flush(ctx))
}

// TestNilContextIsAnError: a nil context is refused with ErrNilContext,
// not a panic.
func TestNilContextIsAnError(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	defer pr.Close()
	var nilCtx context.Context // what is tested
	_, err = pr.Produce(nilCtx, "t", 0, NewRecord(nil, nil))
	require.ErrorIs(t, err, ErrNilContext)
	require.ErrorIs(t, pr.ProduceAsync(nilCtx, "t", 0, NewRecord(nil, nil), nil), ErrNilContext)
	require.ErrorIs(t, pr.Flush(nilCtx), ErrNilContext)
	require.ErrorIs(t, must(d.Partition("t", 0)).Wait(nilCtx, 0, ReadCommitted), ErrNilContext)
}

// TestProducerFlushDoesNotWaitForLaterRecords: Flush's promise covers the
// records produced before it, so a producer that never stops does not
// hold it up.
func TestProducerFlushDoesNotWaitForLaterRecords(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pr.Produce(context.Background(), "t", 0, NewRecord(nil, []byte("x"))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 20 {
		require.NoError(t, pr.Flush(ctx))
	}
	close(stop)
	wg.Wait()
	require.NoError(t, pr.Close())
}
