package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
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
		Append: func(partition int32, b segment.Batch) (log.AppendResult, error) {
			if failNext {
				failNext = false
				return log.AppendResult{}, errors.New("lost leadership")
			}
			appended += int(b.NumRecords())
			return appendAsLeader(d, partition, b)
		},
	})
	require.NoError(t, err)
	defer s.Close()

	_, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
	require.ErrorIs(t, err, ErrNotCoordinator, "before the load")

	require.NoError(t, s.Follow(0, 1))
	member, gen, err := joinAlone(ctx, s, "g", "", "t")
	require.NoError(t, err)
	require.NoError(t, serviceCommit(ctx, s, "g", member, gen, "t", 0, 7))
	require.NotZero(t, appended, "records went through Append")

	require.NoError(t, s.Follow(0, -1))
	err = serviceCommit(ctx, s, "g", member, gen, "t", 0, 8)
	require.ErrorIs(t, err, ErrNotCoordinator, "after the unload")
	require.NoError(t, s.Follow(0, -1))
	_, ok := s.Loaded(0)
	require.False(t, ok, "not led, not loaded")

	require.NoError(t, s.Follow(0, 1))
	r, err := s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
	require.NoError(t, err)
	require.Equal(t, int64(7), r.Topics[0].Partitions[0].Offset, "the acknowledged commit, loaded from the log")
	loadedIn, ok := s.Loaded(0)
	require.True(t, ok)
	require.EqualValues(t, 1, loadedIn)

	// A new leader epoch here means another leader may have written
	// meanwhile: the partition is loaded again, and its members, which
	// the reload replays, are known to it still.
	require.NoError(t, s.Follow(0, 2))
	loadedIn, ok = s.Loaded(0)
	require.True(t, ok)
	require.EqualValues(t, 2, loadedIn)
	require.NoError(t, serviceCommit(ctx, s, "g", member, gen, "t", 0, 7))

	// A failed Append of no Kafka code is answered NOT_COORDINATOR; the
	// partition stays loaded, its commit not served.
	failNext = true
	err = serviceCommit(ctx, s, "g", member, gen, "t", 0, 9)
	require.ErrorIs(t, err, ErrNotCoordinator)
	r, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
	require.NoError(t, err, "after the failed append")
	require.Equal(t, int64(7), r.Topics[0].Partitions[0].Offset)

	// Transactional offsets take the same path, in a batch of their
	// producer.
	before := appended
	tr, err := s.TxnCommitOffsets(ctx, TxnOffsetCommitRequest{GroupID: "g", Producer: idempotence.ProducerIDAndEpoch{ProducerID: 1}, GenerationID: -1,
		Topics: []OffsetCommitTopic{{Name: "t", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: 9, LeaderEpoch: -1}}}}})
	require.NoError(t, err)
	require.NoError(t, tr.Err)
	require.Greater(t, appended, before, "transactional offsets went through Append")

	groups, err := s.ListGroups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.NoError(t, s.Follow(0, -1))
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
		Append: func(int32, segment.Batch) (log.AppendResult, error) {
			return log.AppendResult{}, errors.New("not written")
		}})
	require.NoError(t, err)
	defer s.Close()

	mu.Lock()
	hold = true
	mu.Unlock()
	loaded := make(chan error, 1)
	go func() { loaded <- s.Follow(0, 1) }()
	require.Eventually(t, func() bool {
		_, err := s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
		return errors.Is(err, ErrCoordinatorLoadInProgress) && kafkaerr.CodeOf(err) == ErrCoordinatorLoadInProgress
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
		Append: func(partition int32, b segment.Batch) (log.AppendResult, error) {
			switch {
			case b.Control():
				markers++
			case b.Transactional():
				batches++
			}
			return appendAsLeader(d, partition, b)
		},
	})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Follow(0, 1))
	marker := func(p idempotence.ProducerIDAndEpoch, typ idempotence.MarkerType) {
		t.Helper()
		b, err := idempotence.AppendMarkerBatch(nil, p.ProducerID, p.Epoch, idempotence.Marker{Type: typ}, epoch.UnixMilli())
		require.NoError(t, err)
		require.NoError(t, s.TxnCommitter().WriteTxnMarker(ctx, OffsetsTopic, 0, segment.Batch(b)))
	}

	// KIP-890: every transaction of the producer has an epoch of its own.
	r := txnCommit(t, s, idempotence.ProducerIDAndEpoch{ProducerID: 7, Epoch: 0}, 10)
	require.NoError(t, r.Err)
	require.NoError(t, r.Topics[0].Partitions[0].Err)
	require.Equal(t, 1, batches, "the offsets went through AppendBatch")
	require.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit, "pending until the marker")
	marker(idempotence.ProducerIDAndEpoch{ProducerID: 7, Epoch: 1}, idempotence.MarkerCommit)
	require.Equal(t, 1, markers, "the marker went through AppendBatch")
	require.Equal(t, int64(10), fetchOne(t, s, true).Offset, "committed by the marker")

	require.NoError(t, txnCommit(t, s, idempotence.ProducerIDAndEpoch{ProducerID: 7, Epoch: 1}, 20).Err)
	marker(idempotence.ProducerIDAndEpoch{ProducerID: 7, Epoch: 2}, idempotence.MarkerAbort)
	require.Equal(t, int64(10), fetchOne(t, s, true).Offset, "dropped by the ABORT marker")

	require.NoError(t, s.Follow(0, -1))
	require.NoError(t, s.Follow(0, 1))
	require.Equal(t, int64(10), fetchOne(t, s, true).Offset, "loaded again, the markers decide as they did")
}

// failingAppends is the Append of a replicated offsets topic over a Dir's
// own partition, failing with err while err is set, before the records
// reach the log (as a leader short of min.insync.replicas refuses them).
type failingAppends struct {
	d   *log.Dir
	mu  sync.Mutex
	err error
}

func (f *failingAppends) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *failingAppends) append(partition int32, b segment.Batch) (log.AppendResult, error) {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return log.AppendResult{}, err
	}
	return appendAsLeader(f.d, partition, b)
}

// appendAsLeader appends a batch a Service built to the Dir's offsets
// partition as a cluster's leader appends a coordinator's batch.
func appendAsLeader(d *log.Dir, partition int32, b segment.Batch) (log.AppendResult, error) {
	p, err := d.Partition(OffsetsTopic, partition)
	if err != nil {
		return log.AppendResult{}, err
	}
	switch {
	case b.Control():
		return p.AppendMarker(b)
	case b.Transactional():
		return p.AppendCoordinatorBatch(b)
	}
	return p.AppendBatch(b)
}

// openFailingGroup opens a replicated Service of one offsets partition,
// loaded, whose appends fail while the returned failingAppends says so,
// with group g of one member, which committed offset 7 of t-0.
func openFailingGroup(t *testing.T) (s *Service, f *failingAppends, member string, gen int32) {
	t.Helper()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t)}, MaintenanceInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	f = &failingAppends{d: d}
	s, err = OpenService(d, ServiceOptions{
		Partitions: 1,
		Unloaded:   true,
		Now:        func() time.Time { return epoch },
		Config:     Config{InitialRebalanceDelay: -1, Partitions: func(string) int32 { return 4 }},
		Append:     f.append,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Follow(0, 1))
	ctx := context.Background()
	member, gen, err = joinAlone(ctx, s, "g", "", "t")
	require.NoError(t, err)
	require.NoError(t, serviceCommit(ctx, s, "g", member, gen, "t", 0, 7))
	return s, f, member, gen
}

// describeAlone returns g's description, which must show member alone.
func describeAlone(t *testing.T, s *Service, member string) GroupDescription {
	t.Helper()
	d, ok, err := s.DescribeGroup(context.Background(), "g")
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, d.Members, 1)
	require.Equal(t, member, d.Members[0].MemberID)
	return d
}

// A failed append to a replicated offsets partition this broker still
// leads is no reason to give its groups up: Kafka answers the request with
// the coordinator error its append error maps to (NOT_ENOUGH_REPLICAS:
// COORDINATOR_NOT_AVAILABLE, which the client retries at the same
// coordinator; CoordinatorOperationExceptionHelper.handleOperationException),
// reverts the coordinator to what its log holds (CoordinatorRuntime's
// failCurrentBatch, revertLastWrittenOffset) and unloads the partition only
// on resignation. So the member stays, with its generation and its
// committed offsets, and the same commit succeeds once appends do again,
// without a rejoin.
func TestServiceReplicatedAppendFailureKeepsTheGroups(t *testing.T) {
	ctx := context.Background()
	s, f, member, gen := openFailingGroup(t)

	f.fail(fmt.Errorf("replica %s-0: ISR [1] below min.insync.replicas 2: %w", OffsetsTopic, ErrNotEnoughReplicas))
	err := serviceCommit(ctx, s, "g", member, gen, "t", 0, 8)
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable)
	require.Equal(t, ErrCoordinatorNotAvailable, kafkaerr.CodeOf(err), "the code the client sees")
	require.ErrorIs(t, err, ErrNotEnoughReplicas, "the cause is kept")

	hb, err := s.Heartbeat(ctx, HeartbeatRequest{GroupID: "g", GenerationID: gen, MemberID: member})
	require.NoError(t, err, "the partition is still coordinated here")
	require.NoError(t, hb.Err, "the member is still in its generation")
	require.Equal(t, Stable, describeAlone(t, s, member).State)
	require.Equal(t, int64(7), fetchOne(t, s, false).Offset, "the commit that failed is not served")

	f.fail(nil)
	require.NoError(t, serviceCommit(ctx, s, "g", member, gen, "t", 0, 8), "the same member and generation, once appends work")
	require.Equal(t, int64(8), fetchOne(t, s, false).Offset)
}

// A SyncGroup whose group record fails to append is answered with a
// retriable error, and the group goes back to what its log holds: its
// members and their generation. The member then rejoins under its own id
// (no UNKNOWN_MEMBER_ID), as Kafka's classic group does after a failed
// storeGroup (GroupMetadataManager's appendGroupMetadataErrorToResponseError,
// then maybePrepareRebalanceOrCompleteJoin).
func TestServiceReplicatedFailedSyncKeepsTheMembers(t *testing.T) {
	ctx := context.Background()
	s, f, member, gen := openFailingGroup(t)

	f.fail(fmt.Errorf("replica %s-0: %w", OffsetsTopic, ErrRequestTimedOut))
	_, _, err := joinAlone(ctx, s, "g", member, "t")
	require.ErrorIs(t, err, ErrCoordinatorNotAvailable, "the sync that wrote the new generation")
	f.fail(nil)

	require.Equal(t, gen, describeAlone(t, s, member).Generation, "the generation the log holds")
	again, gen2, err := joinAlone(ctx, s, "g", member, "t")
	require.NoError(t, err, "it rejoins under its id")
	require.Equal(t, member, again)
	require.Greater(t, gen2, gen)
	require.NoError(t, serviceCommit(ctx, s, "g", member, gen2, "t", 0, 9))
	require.Equal(t, int64(9), fetchOne(t, s, false).Offset)
}

// The append errors map to the coordinator errors Kafka answers them with
// (CoordinatorOperationExceptionHelper.handleOperationException; for
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, which an acks=all append can return,
// the old GroupMetadataManager.storeOffsets's COORDINATOR_NOT_AVAILABLE),
// whichever it is the partition stays loaded until Follow gives it up, and an
// error of a code the Service has no variable for is matched by its code.
func TestServiceReplicatedAppendErrorsMapAsKafkas(t *testing.T) {
	ctx := context.Background()
	s, f, member, gen := openFailingGroup(t)
	for i, c := range []struct {
		cause error
		want  error
	}{
		{ErrNotEnoughReplicas, ErrCoordinatorNotAvailable},
		{fmt.Errorf("an application's NOT_ENOUGH_REPLICAS: %w", kafkaerr.Code(19)), ErrCoordinatorNotAvailable},
		{ErrNotEnoughReplicasAfterAppend, ErrCoordinatorNotAvailable},
		{ErrRequestTimedOut, ErrCoordinatorNotAvailable},
		{context.DeadlineExceeded, ErrCoordinatorNotAvailable},
		{ErrUnknownTopicOrPartition, ErrCoordinatorNotAvailable},
		{ErrNotLeaderOrFollower, ErrNotCoordinator},
		{ErrKafkaStorageError, ErrNotCoordinator},
		{ErrMessageTooLarge, ErrUnknownServerError},
		{ErrRecordListTooLarge, ErrUnknownServerError},
		{ErrInvalidFetchSize, ErrUnknownServerError},
		{errors.New("an error of no Kafka code"), ErrNotCoordinator},
	} {
		f.fail(fmt.Errorf("append: %w", c.cause))
		err := serviceCommit(ctx, s, "g", member, gen, "t", 0, int64(i))
		require.Equal(t, kafkaerr.CodeOf(c.want), kafkaerr.CodeOf(err), "%v: %v", c.cause, err)
		require.ErrorIs(t, err, c.cause)
		f.fail(nil)
		hb, err := s.Heartbeat(ctx, HeartbeatRequest{GroupID: "g", GenerationID: gen, MemberID: member})
		require.NoError(t, err, "%v: still loaded", c.cause)
		require.NoError(t, hb.Err, "%v: still a member", c.cause)
	}
}

// A coordinator loaded from a replica holding records above its high
// watermark (an old leader's appends that no follower copied) serves
// nothing until they are committed: a power failure or a new leader may
// take them back, and a commit a client saw would then go backwards.
// Kafka's coordinator reads at its last committed offset
// (CoordinatorRuntime: lastCommittedOffset, updated as the high watermark
// moves); this one answers COORDINATOR_LOAD_IN_PROGRESS meanwhile. The
// same holds after an append that reached the leader's log but failed to
// commit (NOT_ENOUGH_REPLICAS_AFTER_APPEND): the coordinator, loaded
// again, holds it, and serves it only once committed.
func TestServiceReplicatedServesOnlyCommittedOffsets(t *testing.T) {
	ctx := context.Background()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t), ExternalHighWatermark: true}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer d.Close()
	var p *log.Partition // the offsets partition, once the Service made it
	var mu sync.Mutex
	commitAppends := true // the high watermark follows each append, as after acks=all
	s, err := OpenService(d, ServiceOptions{
		Partitions: 1,
		Unloaded:   true,
		Now:        func() time.Time { return epoch },
		Config:     Config{Partitions: func(string) int32 { return 1 }},
		Append: func(_ int32, b segment.Batch) (log.AppendResult, error) {
			res, err := p.AppendBatch(b)
			if err != nil {
				return res, err
			}
			mu.Lock()
			defer mu.Unlock()
			if !commitAppends {
				return log.AppendResult{}, fmt.Errorf("offsets log: %w", ErrNotEnoughReplicasAfterAppend)
			}
			_, err = p.AdvanceHighWatermark(res.LastOffset + 1)
			return res, err
		},
	})
	require.NoError(t, err)
	defer s.Close()
	p, err = d.Partition(OffsetsTopic, 0)
	require.NoError(t, err)
	commit := func(offset int64) error { return serviceCommit(ctx, s, "g", "", -1, "t", 0, offset) }
	fetch := func() (int64, error) {
		r, err := s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
		if err != nil {
			return 0, err
		}
		return r.Topics[0].Partitions[0].Offset, nil
	}

	require.NoError(t, s.Follow(0, 1))
	require.NoError(t, commit(7))
	require.NoError(t, s.Follow(0, -1))

	// The old leader's commit of 8, appended and never copied.
	k := OffsetCommitKey{Group: "g", Topic: "t", Partition: 0}
	r := EncodeOffsetCommit(k, OffsetCommitValue{Offset: 8, LeaderEpoch: -1, CommitTimestamp: epoch.UnixMilli(), ExpireTimestamp: -1})
	_, err = p.Append([]segment.Record{{Timestamp: epoch.UnixMilli(), Key: r.Key, Value: r.Value}})
	require.NoError(t, err)
	_, hw, end, err := p.Offsets()
	require.NoError(t, err)
	require.Less(t, hw, end)

	require.NoError(t, s.Follow(0, 1))
	_, err = fetch()
	require.ErrorIs(t, err, ErrCoordinatorLoadInProgress, "offset 8 is not committed: the coordinator waits")
	require.Equal(t, ErrCoordinatorLoadInProgress, kafkaerr.CodeOf(err))
	require.ErrorIs(t, commit(9), ErrCoordinatorLoadInProgress, "no commit either")

	// The new leader never had it: this replica follows and truncates.
	require.NoError(t, s.Follow(0, -1))
	require.NoError(t, p.TruncateTo(hw))
	require.NoError(t, s.Follow(0, 1))
	got, err := fetch()
	require.NoError(t, err)
	require.Equal(t, int64(7), got, "only the committed commit was ever served")

	// A commit appended but not committed is refused, and not served
	// until the high watermark passes it.
	mu.Lock()
	commitAppends = false
	mu.Unlock()
	require.ErrorIs(t, commit(10), ErrCoordinatorNotAvailable)
	_, err = fetch()
	require.ErrorIs(t, err, ErrCoordinatorLoadInProgress, "offset 10 is in the log, not committed")
	_, _, end, err = p.Offsets()
	require.NoError(t, err)
	_, err = p.AdvanceHighWatermark(end)
	require.NoError(t, err)
	got, err = fetch()
	require.NoError(t, err)
	require.Equal(t, int64(10), got, "committed after all: Kafka's outcome of a timed-out commit is unknown")
}
