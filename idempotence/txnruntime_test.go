package idempotence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
)

// memHost is a TxnHost in memory: each state partition a slice of
// records, and the markers written; a test makes its writes fail.
type memHost struct {
	mu       sync.Mutex
	parts    map[int32][]TxnRecord
	markers  []MarkerRequest
	failTxn  error // PersistTxn's answer while set
	failMark error // WriteMarker's answer while set
	// loading, if set, is waited on by ReadTxns.
	loading chan struct{}
}

func newMemHost() *memHost { return &memHost{parts: map[int32][]TxnRecord{}} }

func (h *memHost) ReadTxns(partition int32, fn func(TxnRecord)) error {
	if h.loading != nil {
		<-h.loading
	}
	h.mu.Lock()
	recs := append([]TxnRecord(nil), h.parts[partition]...)
	h.mu.Unlock()
	for _, r := range recs {
		fn(r)
	}
	return nil
}

func (h *memHost) PersistTxn(_ context.Context, partition int32, rec TxnRecord) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failTxn != nil {
		return h.failTxn
	}
	h.parts[partition] = append(h.parts[partition], rec)
	return nil
}

func (h *memHost) WriteMarker(_ context.Context, m MarkerRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failMark != nil {
		return h.failMark
	}
	h.markers = append(h.markers, m)
	return nil
}

func (h *memHost) set(f func(h *memHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func newTestRuntime(t *testing.T, h *memHost, partitions int32) *TxnRuntime {
	t.Helper()
	var next int64
	r, err := NewTxnRuntime(TxnRuntimeOptions{
		Host: h, Partitions: partitions,
		PartitionFor: func(id string) int32 { return int32(id[0]) % partitions },
		Coordinator: TxnCoordinatorConfig{AllocateProducerID: func() (int64, error) {
			next++
			return next, nil
		}},
	})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

var a0 = TopicPartition{Topic: "a", Partition: 0}

func TestTxnRuntimeAnswersOnlyForLoadedPartitions(t *testing.T) {
	h := newMemHost()
	r := newTestRuntime(t, h, 2)
	_, err := r.InitProducerID("a", time.Minute) // 'a' is 97: partition 1
	require.ErrorIs(t, err, ErrNotCoordinator)

	h.loading = make(chan struct{})
	done := make(chan error)
	go func() { done <- r.Follow(1, 3) }()
	require.Eventually(t, func() bool {
		_, err := r.InitProducerID("a", time.Minute)
		return errors.Is(err, ErrCoordinatorLoadInProgress)
	}, 5*time.Second, time.Millisecond)
	close(h.loading)
	require.NoError(t, <-done)
	epoch, ok := r.Loaded(1)
	require.True(t, ok)
	require.Equal(t, int32(3), epoch)

	pe, err := r.InitProducerID("a", time.Minute)
	require.NoError(t, err)
	require.NoError(t, r.AddPartitions("a", pe, a0))
	_, err = r.EndTxn("a", pe, true)
	require.NoError(t, err)
	require.Len(t, h.markers, 1)
	require.Equal(t, int32(3), h.markers[0].CoordinatorEpoch, "a marker carries the leader epoch the partition was loaded in")

	// Resigned: NOT_COORDINATOR; led again in a later epoch: the state is
	// what the host holds.
	require.NoError(t, r.Follow(1, -1))
	_, ok = r.Describe("a")
	require.False(t, ok)
	require.ErrorIs(t, r.AddPartitions("a", pe, a0), ErrNotCoordinator)
	require.NoError(t, r.Follow(1, 4))
	rec, ok := r.Describe("a")
	require.True(t, ok)
	require.Equal(t, TxnCompleteCommit, rec.State)
}

func TestTxnRuntimeWritesMarkersAgainUntilTheyAreWritten(t *testing.T) {
	h := newMemHost()
	r := newTestRuntime(t, h, 1)
	require.NoError(t, r.Follow(0, 0))
	pe, err := r.InitProducerID("t", time.Minute)
	require.NoError(t, err)
	require.NoError(t, r.AddPartitions("t", pe, a0))

	h.set(func(h *memHost) { h.failMark = errors.New("leader unreachable") })
	next, err := r.EndTxn("t", pe, true)
	require.NoError(t, err, "the decision is durable: EndTxn succeeds without its markers")
	rec, _ := r.Describe("t")
	require.Equal(t, TxnPrepareCommit, rec.State)
	require.Error(t, r.Tick(), "Tick reports the marker it could not write")

	// The producer's next request waits for the markers, which still fail:
	// CONCURRENT_TRANSACTIONS, and nothing is added.
	err = r.AddPartitions("t", next, a0)
	require.ErrorIs(t, err, ErrConcurrentTransactions)

	h.set(func(h *memHost) { h.failMark = nil })
	require.NoError(t, r.Tick())
	rec, _ = r.Describe("t")
	require.Equal(t, TxnCompleteCommit, rec.State)
	require.Len(t, h.markers, 1)
	require.Equal(t, MarkerCommit, h.markers[0].Type)
	require.NoError(t, r.AddPartitions("t", next, a0))
}

func TestTxnRuntimeRefusesWhatItCouldNotPersist(t *testing.T) {
	h := newMemHost()
	r := newTestRuntime(t, h, 1)
	require.NoError(t, r.Follow(0, 0))
	pe, err := r.InitProducerID("t", time.Minute)
	require.NoError(t, err)
	stored := len(h.parts[0])

	h.set(func(h *memHost) {
		h.failTxn = fmt.Errorf("the state partition's replica: %w", kafkaerr.ErrNotEnoughReplicas)
	})
	err = r.AddPartitions("t", pe, a0)
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable, "answered as Kafka's coordinator answers its log's refusal")
	require.ErrorIs(t, err, kafkaerr.ErrNotEnoughReplicas, "and the cause")
	rec, _ := r.Describe("t")
	require.Equal(t, TxnEmpty, rec.State, "a transition not persisted does not take effect")
	require.Len(t, h.parts[0], stored)

	h.set(func(h *memHost) { h.failTxn = nil })
	require.NoError(t, r.AddPartitions("t", pe, a0))
	require.NoError(t, r.Verify("t", pe, a0))
	require.ErrorIs(t, r.Verify("t", pe, TopicPartition{Topic: "b"}), ErrInvalidTxnState)
}

func TestTxnRuntimeFlushCompletesWhatACrashLeftPrepared(t *testing.T) {
	h := newMemHost()
	r := newTestRuntime(t, h, 1)
	require.NoError(t, r.Follow(0, 0))
	pe, err := r.InitProducerID("t", time.Minute)
	require.NoError(t, err)
	require.NoError(t, r.AddPartitions("t", pe, a0))
	h.set(func(h *memHost) { h.failMark = errors.New("crash") })
	_, err = r.EndTxn("t", pe, false)
	require.NoError(t, err)

	// A new runtime over what the host holds: the abort is decided and
	// its marker still to write.
	h.set(func(h *memHost) { h.failMark = nil })
	r2 := newTestRuntime(t, h, 1)
	require.NoError(t, r2.Follow(0, 1))
	require.NoError(t, r2.Flush())
	rec, _ := r2.Describe("t")
	require.Equal(t, TxnCompleteAbort, rec.State)
	require.Len(t, h.markers, 1)
	require.Equal(t, MarkerAbort, h.markers[0].Type)
}
