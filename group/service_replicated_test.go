package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// A replicated offsets partition is coordinated only between its load and
// its unload, as Kafka's coordinator between onElection and onResignation:
// NOT_COORDINATOR before, commits written through Append (acks=all) while
// loaded, NOT_COORDINATOR again after, and a load later serves every
// commit Append acknowledged.
func TestServiceReplicatedPartitionCoordinatesBetweenLoadAndUnload(t *testing.T) {
	ctx := context.Background()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t)}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer d.Close()
	var appended int
	failNext := false
	s, err := OpenService(d, ServiceOptions{
		Partitions: 1,
		Unloaded:   true,
		Now:        func() time.Time { return epoch },
		Config:     Config{InitialRebalanceDelay: -1, Partitions: func(string) int32 { return 4 }},
		Append: func(partition int32, recs []segment.Record) (log.AppendResult, error) {
			if failNext {
				failNext = false
				return log.AppendResult{}, errors.New("lost leadership")
			}
			appended += len(recs)
			p, err := d.Partition(OffsetsTopic, partition)
			if err != nil {
				return log.AppendResult{}, err
			}
			return p.Append(recs)
		},
	})
	require.NoError(t, err)
	defer s.Close()

	_, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
	require.ErrorIs(t, err, ErrNotCoordinator, "before the load")

	require.NoError(t, s.LoadPartition(0))
	member, gen, err := joinAlone(ctx, s, "g", "", "t")
	require.NoError(t, err)
	require.NoError(t, serviceCommit(ctx, s, "g", member, gen, "t", 0, 7))
	require.NotZero(t, appended, "records went through Append")

	require.NoError(t, s.UnloadPartition(0))
	err = serviceCommit(ctx, s, "g", member, gen, "t", 0, 8)
	require.ErrorIs(t, err, ErrNotCoordinator, "after the unload")

	require.NoError(t, s.LoadPartition(0))
	r, err := s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
	require.NoError(t, err)
	require.Equal(t, int64(7), r.Topics[0].Partitions[0].Offset, "the acknowledged commit, loaded from the log")

	// A failed Append may mean another broker leads: the partition stops
	// coordinating until it is loaded again.
	failNext = true
	err = serviceCommit(ctx, s, "g", member, gen, "t", 0, 9)
	require.ErrorIs(t, err, ErrNotCoordinator)
	_, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
	require.ErrorIs(t, err, ErrNotCoordinator, "after the failed append")
	require.NoError(t, s.LoadPartition(0))
	r, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
	require.NoError(t, err)
	require.Equal(t, int64(7), r.Topics[0].Partitions[0].Offset)

	// Transactional offsets are refused: their markers are not
	// replicated.
	tr, err := s.TxnCommitOffsets(ctx, TxnOffsetCommitRequest{GroupID: "g", Producer: Producer{ID: 1}, GenerationID: -1,
		Topics: []OffsetCommitTopic{{Name: "t", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: 9, LeaderEpoch: -1}}}}})
	require.NoError(t, err)
	require.ErrorIs(t, tr.Err, ErrInvalidRequest)

	groups, err := s.ListGroups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.NoError(t, s.UnloadPartition(0))
	groups, err = s.ListGroups(ctx)
	require.NoError(t, err, "a partition led elsewhere is left out of ListGroups")
	require.Empty(t, groups)
	require.NoError(t, s.Close(), "a partition led elsewhere is no failure")
}

// A partition being loaded answers COORDINATOR_LOAD_IN_PROGRESS until its
// load is done (Kafka's coordinator while it loads on election). The load
// is held up in the clock it starts the coordinator with.
func TestServiceReplicatedPartitionLoadingAnswersLoadInProgress(t *testing.T) {
	ctx := context.Background()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t)}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer d.Close()
	var mu sync.Mutex
	hold, release := false, make(chan struct{})
	clock := func() time.Time {
		mu.Lock()
		h := hold
		mu.Unlock()
		if h {
			<-release
		}
		return epoch
	}
	s, err := OpenService(d, ServiceOptions{Partitions: 1, Unloaded: true, Now: clock,
		Append: func(int32, []segment.Record) (log.AppendResult, error) {
			return log.AppendResult{}, errors.New("not written")
		}})
	require.NoError(t, err)
	defer s.Close()

	mu.Lock()
	hold = true
	mu.Unlock()
	loaded := make(chan error, 1)
	go func() { loaded <- s.LoadPartition(0) }()
	require.Eventually(t, func() bool {
		_, err := s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
		return errors.Is(err, ErrCoordinatorLoadInProgress) && Code(err) == ErrCoordinatorLoadInProgress.Code
	}, 5*time.Second, time.Millisecond, "COORDINATOR_LOAD_IN_PROGRESS while the partition loads")

	mu.Lock()
	hold = false
	mu.Unlock()
	close(release)
	require.NoError(t, <-loaded)
	_, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
	require.NoError(t, err, "served once loaded")
}

// A replicated offsets partition takes a transactional producer's offsets
// through AppendBatch, as Kafka's coordinator appends them as the
// partition's leader (acks=all, AppendOrigin.COORDINATOR): they stay
// pending until the marker the transaction coordinator writes through the
// Service (WriteTxnMarker), also through AppendBatch, commits them; an
// ABORT marker drops them; and a load after the partition moved serves
// what the markers decided.
func TestServiceReplicatedPartitionTakesTransactionalOffsets(t *testing.T) {
	ctx := context.Background()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t)}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer d.Close()
	var batches, markers int
	s, err := OpenService(d, ServiceOptions{
		Partitions: 1,
		Unloaded:   true,
		Now:        func() time.Time { return epoch },
		Config:     Config{InitialRebalanceDelay: -1, Partitions: func(string) int32 { return 4 }},
		Append: func(partition int32, recs []segment.Record) (log.AppendResult, error) {
			p, err := d.Partition(OffsetsTopic, partition)
			if err != nil {
				return log.AppendResult{}, err
			}
			return p.Append(recs)
		},
		AppendBatch: func(partition int32, b segment.Batch) (log.AppendResult, error) {
			p, err := d.Partition(OffsetsTopic, partition)
			if err != nil {
				return log.AppendResult{}, err
			}
			if b.Control() {
				markers++
				return p.AppendMarker(b)
			}
			batches++
			return p.AppendCoordinatorBatch(b)
		},
	})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.LoadPartition(0))
	marker := func(p Producer, typ idempotence.MarkerType) {
		t.Helper()
		b, err := idempotence.AppendMarkerBatch(nil, p.ID, p.Epoch, idempotence.Marker{Type: typ}, epoch.UnixMilli())
		require.NoError(t, err)
		require.NoError(t, s.TxnCommitter().WriteTxnMarker(ctx, OffsetsTopic, 0, segment.Batch(b)))
	}

	// KIP-890: every transaction of the producer has an epoch of its own.
	r := txnCommit(t, s, Producer{ID: 7, Epoch: 0}, 10)
	require.NoError(t, r.Err)
	require.NoError(t, r.Topics[0].Partitions[0].Err)
	require.Equal(t, 1, batches, "the offsets went through AppendBatch")
	require.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit, "pending until the marker")
	marker(Producer{ID: 7, Epoch: 1}, idempotence.MarkerCommit)
	require.Equal(t, 1, markers, "the marker went through AppendBatch")
	require.Equal(t, int64(10), fetchOne(t, s, true).Offset, "committed by the marker")

	require.NoError(t, txnCommit(t, s, Producer{ID: 7, Epoch: 1}, 20).Err)
	marker(Producer{ID: 7, Epoch: 2}, idempotence.MarkerAbort)
	require.Equal(t, int64(10), fetchOne(t, s, true).Offset, "dropped by the ABORT marker")

	require.NoError(t, s.UnloadPartition(0))
	require.NoError(t, s.LoadPartition(0))
	require.Equal(t, int64(10), fetchOne(t, s, true).Offset, "loaded again, the markers decide as they did")
}
