package log

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// A follower whose log ends below the leader's log start offset restarts
// its log there, past its own end (Kafka's truncateFullyAndStartAt); the
// restart survives a reopen and a crash.
func TestTruncateFullyAndStartAtPastTheEnd(t *testing.T) {
	fs := newMemFS(t)
	opts := memOptions(fs)
	opts.ExternalHighWatermark = true
	l, err := Open("/data/orders-0", opts)
	require.NoError(t, err)
	appendN(t, l, 0, 50, 10, 100)
	require.NoError(t, l.SetLeaderEpoch(3))
	_, err = l.SetHighWatermark(40)
	require.NoError(t, err)

	require.NoError(t, l.TruncateFullyAndStartAt(1000))
	require.EqualValues(t, 1000, l.LogStartOffset())
	require.EqualValues(t, 1000, l.LogEndOffset())
	require.EqualValues(t, 1000, l.HighWatermark(), "the high watermark never lies below the log start (KAFKA-9491)")
	synced, err := l.SyncedEndOffset()
	require.NoError(t, err)
	require.EqualValues(t, 1000, synced)
	require.Empty(t, l.Epochs(), "the epoch cache is cleared")
	_, err = l.Read(999, 1<<20, ReadLogEnd)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)

	// The next replicated batch lands at the new start.
	b := replicatedBatch(t, 1000, 3, 5)
	_, err = l.AppendReplicated(b)
	require.NoError(t, err)
	require.EqualValues(t, 1003, l.LogEndOffset())
	require.Equal(t, []EpochEntry{{Epoch: 5, StartOffset: 1000}}, l.Epochs())

	crashed := fs.Crash(vfs.CrashOptions{})
	require.NoError(t, l.Close())
	for _, fsys := range []vfs.FS{fs, crashed} {
		opts.FS = fsys
		l, err := Open("/data/orders-0", opts)
		require.NoError(t, err)
		require.EqualValues(t, 1000, l.LogStartOffset())
		require.EqualValues(t, 1003, l.LogEndOffset())
		require.NoError(t, l.Close())
	}
}

// Restarting at an offset inside the log empties it too, and a negative
// offset is refused with the bounds.
func TestTruncateFullyAndStartAtInsideAndBadOffset(t *testing.T) {
	l, err := Open("/data/orders-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 30, 10, 100)
	require.NoError(t, l.TruncateFullyAndStartAt(12))
	require.EqualValues(t, 12, l.LogStartOffset())
	require.EqualValues(t, 12, l.LogEndOffset())
	require.EqualValues(t, 12, l.HighWatermark())

	var oor *OffsetOutOfRangeError
	require.ErrorAs(t, l.TruncateFullyAndStartAt(-1), &oor)
	require.EqualValues(t, -1, oor.Offset)
	require.EqualValues(t, 12, l.LogEndOffset(), "a refused restart changes nothing")
}

// A leader's high watermark only moves forward; a follower's may be set
// back (its new leader may know a lower one).
func TestAdvanceHighWatermarkNeverMovesBack(t *testing.T) {
	opts := memOptions(newMemFS(t))
	opts.ExternalHighWatermark = true
	l, err := Open("/data/orders-0", opts)
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 20, 10, 100)
	require.EqualValues(t, 0, l.HighWatermark(), "an external high watermark waits for its owner")

	for _, step := range []struct{ ask, want int64 }{
		{5, 5}, {3, 5}, {15, 15}, {15, 15}, {99, 20},
	} {
		hw, err := l.AdvanceHighWatermark(step.ask)
		require.NoError(t, err)
		require.Equal(t, step.want, hw, "advance to %d", step.ask)
		require.Equal(t, step.want, l.HighWatermark())
	}
	hw, err := l.SetHighWatermark(7)
	require.NoError(t, err)
	require.EqualValues(t, 7, hw, "SetHighWatermark may move it back")
}

// A follower copies whatever its leader stored, whatever its own
// MaxBatchBytes: the limit may have been lowered after the leader took the
// batch, and Kafka's appendAsFollower ignores the record size
// (ignoreRecordSize). A producer's batch over the limit is still refused.
func TestAppendReplicatedIgnoresMaxBatchBytes(t *testing.T) {
	opts := memOptions(newMemFS(t))
	opts.MaxBatchBytes = 200
	l, err := Open("/data/orders-0", opts)
	require.NoError(t, err)
	defer l.Close()
	raw, err := segment.AppendBatch(nil, []segment.Record{{Value: make([]byte, 500)}}, segment.BuildOptions{})
	require.NoError(t, err)

	_, err = l.AppendBatch(segment.Batch(bytes.Clone(raw)))
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)

	res, err := l.AppendReplicated(segment.Batch(raw))
	require.NoError(t, err)
	require.EqualValues(t, 0, res.BaseOffset)
	require.EqualValues(t, 1, l.LogEndOffset())
}

// The synced end offset follows the fsync policy: under FsyncNever it
// stays behind the log end until Sync.
func TestSyncedEndOffsetFollowsTheFsyncPolicy(t *testing.T) {
	fs := newMemFS(t)
	for _, tc := range []struct {
		policy FsyncPolicy
		want   int64
	}{
		{FsyncAlways(), 20},
		{FsyncNever(), 0},
	} {
		opts := memOptions(fs)
		opts.Fsync = tc.policy
		l, err := Open("/data/t-"+tc.policy.String(), opts)
		require.NoError(t, err)
		appendN(t, l, 0, 20, 10, 100)
		synced, err := l.SyncedEndOffset()
		require.NoError(t, err)
		require.Equal(t, tc.want, synced, tc.policy.String())
		require.NoError(t, l.Sync())
		synced, err = l.SyncedEndOffset()
		require.NoError(t, err)
		require.EqualValues(t, 20, synced, tc.policy.String())
		require.NoError(t, l.Close())
		_, err = l.SyncedEndOffset()
		require.ErrorIs(t, err, ErrClosed)
	}
}

// Sync's fsync runs outside the writer lock: while it is in progress, a
// replica's reads of the log (its synced end, its epochs) and appends go
// on, and what they append is synced by a later Sync, not claimed by this
// one.
func TestSyncDoesNotHoldTheWriterLock(t *testing.T) {
	fs := newMemFS(t)
	opts := memOptions(fs)
	opts.Fsync = FsyncNever()
	l, err := Open("/data/t-0", opts)
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 10, 1, 100)

	entered, release := make(chan struct{}), make(chan struct{})
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpSync && strings.HasSuffix(op.Name, ".log") {
			close(entered)
			<-release
		}
		return nil
	})
	synced := make(chan error)
	go func() { synced <- l.Sync() }()
	<-entered
	fs.SetHook(nil)
	defer close(release) // the sync ends even if the test fails here

	meanwhile := make(chan error)
	go func() {
		end, err := l.SyncedEndOffset()
		if err == nil && end != 0 {
			err = fmt.Errorf("synced end %d while the sync is in progress", end)
		}
		if err == nil {
			_, err = l.LatestEpoch()
		}
		if err == nil {
			_, err = l.Append(recordsFrom(10, 5, 100))
		}
		meanwhile <- err
	}()
	select {
	case err := <-meanwhile:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("reads and appends waited for the sync")
	}

	release <- struct{}{}
	require.NoError(t, <-synced)
	end, err := l.SyncedEndOffset()
	require.NoError(t, err)
	require.EqualValues(t, 10, end, "the sync covers what was appended before it began")
	require.NoError(t, l.Sync())
	end, err = l.SyncedEndOffset()
	require.NoError(t, err)
	require.EqualValues(t, 15, end)
}

func TestLatestEpoch(t *testing.T) {
	l, err := Open("/data/orders-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	e, err := l.LatestEpoch()
	require.NoError(t, err)
	require.Equal(t, UndefinedEpoch, e)
	_, err = l.AppendReplicated(replicatedBatch(t, 0, 2, 4))
	require.NoError(t, err)
	e, err = l.LatestEpoch()
	require.NoError(t, err)
	require.EqualValues(t, 4, e, "a follower's append teaches the cache its epoch")
	require.NoError(t, l.SetLeaderEpoch(6))
	e, err = l.LatestEpoch()
	require.NoError(t, err)
	require.EqualValues(t, 6, e, "a leader's epoch counts before it writes (Kafka assigns at election)")
	require.NoError(t, l.Close())
	_, err = l.LatestEpoch()
	require.ErrorIs(t, err, ErrClosed)
}

// A node built on a Dir replicates through its Partition handles, which
// open and close the log as needed.
func TestPartitionReplicates(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.Log.ExternalHighWatermark = true
	opts.MaxOpenFiles = 3 // one partition open at a time: every call reopens
	d, err := OpenDir("/data/node", opts)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("orders", TopicConfig{Partitions: 2}))
	p0, err := d.Partition("orders", 0)
	require.NoError(t, err)
	p1, err := d.Partition("orders", 1)
	require.NoError(t, err)

	_, err = p0.AppendReplicated(replicatedBatch(t, 0, 4, 1))
	require.NoError(t, err)
	_, err = p1.AppendReplicated(replicatedBatch(t, 0, 1, 1)) // evicts p0
	require.NoError(t, err)
	_, err = p0.AppendReplicated(replicatedBatch(t, 4, 4, 2))
	require.NoError(t, err)

	e, end, err := p0.EndOffsetForEpoch(1)
	require.NoError(t, err)
	require.Equal(t, int32(1), e)
	require.EqualValues(t, 4, end)
	latest, err := p0.LatestEpoch()
	require.NoError(t, err)
	require.EqualValues(t, 2, latest)

	hw, err := p0.SetHighWatermark(6)
	require.NoError(t, err)
	require.EqualValues(t, 6, hw)
	hw, err = p0.AdvanceHighWatermark(5)
	require.NoError(t, err)
	require.EqualValues(t, 6, hw)
	_, _, _, err = p1.Offsets() // evicts p0: its high watermark must survive the reopen
	require.NoError(t, err)
	_, hwNow, _, err := p0.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 6, hwNow)

	require.NoError(t, p0.TruncateTo(5))
	start, _, leo, err := p0.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 0, start)
	require.EqualValues(t, 4, leo, "the batch holding offset 5 goes whole")

	require.NoError(t, p0.SetLeaderEpoch(3))
	require.NoError(t, p0.Sync())
	synced, err := p0.SyncedEndOffset()
	require.NoError(t, err)
	require.EqualValues(t, 4, synced)

	require.NoError(t, p0.TruncateFullyAndStartAt(100))
	start, _, leo, err = p0.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 100, start)
	require.EqualValues(t, 100, leo)

	require.NoError(t, d.DeleteTopic("orders"))
	require.ErrorIs(t, p0.TruncateTo(0), ErrStalePartition)
	_, _, err = p0.EndOffsetForEpoch(0)
	require.ErrorIs(t, err, ErrStalePartition)
}

// replicatedBatch is a batch of n records at base offset base stamped with
// a leader epoch, as a follower receives it.
func replicatedBatch(t testing.TB, base int64, n int, epoch int32) segment.Batch {
	t.Helper()
	recs := make([]segment.Record, n)
	for i := range recs {
		recs[i] = record(int(base)+i, 10)
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{BaseOffset: base})
	require.NoError(t, err)
	batch := segment.Batch(b)
	batch.SetPartitionLeaderEpoch(epoch)
	require.NoError(t, batch.Validate(), "the leader epoch lies outside the CRC")
	return batch
}

// A leader that assigned an epoch without writing in it, then became a
// follower, drops that epoch when told to truncate at its log end, as
// Kafka's truncateTo does: else its next fetch would name an epoch the
// new leader never had, over and over.
func TestTruncateAtTheEndDropsAnEmptyEpoch(t *testing.T) {
	l, err := Open("/data/orders-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	defer l.Close()
	_, err = l.AppendReplicated(replicatedBatch(t, 0, 10, 3))
	require.NoError(t, err)
	require.NoError(t, l.SetLeaderEpoch(4))
	require.Equal(t, []EpochEntry{{3, 0}, {4, 10}}, l.Epochs())
	require.NoError(t, l.TruncateTo(10))
	require.EqualValues(t, 10, l.LogEndOffset())
	require.Equal(t, []EpochEntry{{3, 0}}, l.Epochs())
}

func TestOffsetsTogether(t *testing.T) {
	l, err := Open("/data/orders-0", memOptions(newMemFS(t)))
	require.NoError(t, err)
	appendN(t, l, 0, 20, 10, 100)
	require.NoError(t, l.DeleteRecordsBefore(5))
	start, hw, end, err := l.Offsets()
	require.NoError(t, err)
	require.Equal(t, [3]int64{5, 20, 20}, [3]int64{start, hw, end})
	require.NoError(t, l.Close())
	_, _, _, err = l.Offsets()
	require.ErrorIs(t, err, ErrClosed)
}

// A replica's high watermark moves by AdvanceHighWatermark on a leader and
// SetHighWatermark on a follower; either way, once it passes a
// transaction's marker, the transaction stops holding the last stable
// offset back (Kafka's UnifiedLog.updateHighWatermarkMetadata calls
// producerStateManager.onHighWatermarkUpdated on every move). A leader of
// package replica appends its batches and markers with AppendReplicated,
// as its followers do.
func TestHighWatermarkMovesReleaseCompletedTransactions(t *testing.T) {
	moves := map[string]func(p *Partition, offset int64) (int64, error){
		"AdvanceHighWatermark": (*Partition).AdvanceHighWatermark,
		"SetHighWatermark":     (*Partition).SetHighWatermark,
	}
	for name, move := range moves {
		t.Run(name, func(t *testing.T) {
			opts := dirOptions(newMemFS(t))
			opts.Log.ExternalHighWatermark = true
			d, err := OpenDir("/data/node", opts)
			require.NoError(t, err)
			defer d.Close()
			require.NoError(t, d.CreateTopic("orders", TopicConfig{Partitions: 1}))
			p, err := d.Partition("orders", 0)
			require.NoError(t, err)

			data := producerBatch(t, 7, 0, 0, 3, true)
			data.SetBaseOffset(0)
			_, err = p.AppendReplicated(data)
			require.NoError(t, err)
			commit := marker(t, 7, 0, idempotence.MarkerCommit, 0)
			commit.SetBaseOffset(3)
			_, err = p.AppendReplicated(commit)
			require.NoError(t, err)

			_, err = move(p, 3)
			require.NoError(t, err)
			lso, err := p.LastStableOffset()
			require.NoError(t, err)
			require.EqualValues(t, 0, lso, "the marker is not below the high watermark yet")

			_, err = move(p, 4)
			require.NoError(t, err)
			lso, err = p.LastStableOffset()
			require.NoError(t, err)
			require.EqualValues(t, 4, lso, "the committed transaction is stable once the high watermark passes its marker")
		})
	}
}
