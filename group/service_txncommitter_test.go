package group

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/vfs"
)

// openTxnService opens a Dir over fs with an output topic "out" and a
// Service of two offsets partitions. The Dir's clock is now, if set.
func openTxnService(t *testing.T, fs vfs.FS, now ...func() time.Time) (*log.Dir, *Service) {
	t.Helper()
	opts := log.Options{FS: fs, SegmentBytes: 16 << 10, MaxIndexBytes: 1024, IndexIntervalBytes: 512}
	if len(now) > 0 {
		opts.Now = now[0]
	}
	d, err := log.OpenDir("/data", log.DirOptions{Log: opts, MaintenanceInterval: -1,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	if err := d.CreateTopic("out", log.TopicConfig{Partitions: 1}); err != nil {
		require.ErrorIs(t, err, log.ErrTopicExists)
	}
	s, err := OpenService(d, ServiceOptions{Partitions: 2, Now: func() time.Time { return epoch },
		Config: Config{Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	return d, s
}

// transform is one consume-transform-produce step: value to "out" and
// group g's offset of t-0 in one transaction, not ended yet.
func transform(t *testing.T, s *Service, tp *log.TransactionalProducer, value string, offset int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, tp.Begin())
	_, err := tp.Produce(ctx, "out", 0, log.NewRecord(nil, []byte(value)))
	require.NoError(t, err)
	require.NoError(t, tp.CommitOffsets(ctx, s.TxnCommitter(), log.TxnOffsetCommit{Group: "g", GenerationID: -1,
		Offsets: []log.TxnOffset{{Topic: "t", Partition: 0, Offset: offset, LeaderEpoch: -1}}}))
}

// committedOutput returns what a ReadCommitted consumer reads of "out".
func committedOutput(t *testing.T, d *log.Dir) []string {
	t.Helper()
	p, err := d.Partition("out", 0)
	require.NoError(t, err)
	out := []string{}
	for r, err := range p.Records(0, log.ReadCommitted) {
		require.NoError(t, err)
		out = append(out, string(r.Value))
	}
	return out
}

// A TransactionalProducer commits its output and a group's offsets in one
// transaction through Service (KIP-98's sendOffsetsToTransaction): both
// count once it commits, neither once it aborts, and a Service opened
// again over the log agrees.
func TestTxnCommitterCommitsOffsetsWithTheOutput(t *testing.T) {
	d, s := openTxnService(t, newMemDataFS(t))
	tp, err := d.NewTransactionalProducer("etl", log.TransactionalOptions{})
	require.NoError(t, err)
	ctx := context.Background()

	transform(t, s, tp, "first", 5)
	assert.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit, "pending in the open transaction")
	assert.Empty(t, committedOutput(t, d))
	require.NoError(t, tp.Commit(ctx))
	assert.Equal(t, int64(5), fetchOne(t, s, true).Offset, "committed with the output")
	assert.Equal(t, []string{"first"}, committedOutput(t, d))

	transform(t, s, tp, "second", 9)
	require.NoError(t, tp.Abort(ctx))
	assert.Equal(t, int64(5), fetchOne(t, s, true).Offset, "aborted with the output")
	assert.Equal(t, []string{"first"}, committedOutput(t, d))

	transform(t, s, tp, "third", 12)
	require.NoError(t, tp.Commit(ctx))
	assert.Equal(t, int64(12), fetchOne(t, s, true).Offset, "the producer's next transaction, at its bumped epoch")
	require.NoError(t, tp.Close())

	require.NoError(t, s.Close())
	s, err = OpenService(d, ServiceOptions{Partitions: 2, Now: func() time.Time { return epoch },
		Config: Config{Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	assert.Equal(t, int64(12), fetchOne(t, s, true).Offset, "replayed with the markers")
	assert.Equal(t, []string{"first", "third"}, committedOutput(t, d))
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// A commit is decided once the coordinator's PrepareCommit is durable. If
// the marker on the offsets partition cannot be written then, the offsets
// still count: after a crash, in the Dir opened again, whose coordinator
// writes the marker before the Service replays its log; without a crash,
// when the marker is written again (Maintain) through the live Service.
func TestTxnCommitterOffsetsCountWhenTheMarkerIsWrittenAgain(t *testing.T) {
	for _, after := range []string{"crash", "Maintain"} {
		t.Run(after, func(t *testing.T) {
			fs := newMemDataFS(t)
			d, s := openTxnService(t, fs)
			tp, err := d.NewTransactionalProducer("etl", log.TransactionalOptions{})
			require.NoError(t, err)
			topic, part, err := s.TxnCommitter().TxnOffsetsPartition("g")
			require.NoError(t, err)
			offsetsDir := "/data/" + topic + "-" + string(rune('0'+part)) + "/"

			transform(t, s, tp, "x", 7)
			var failing atomic.Bool
			fs.SetHook(func(op vfs.Op) error {
				if failing.Load() && op.Kind == vfs.OpWrite && strings.HasPrefix(op.Name, offsetsDir) {
					return syscall.ENOSPC
				}
				return nil
			})
			failing.Store(true)
			require.NoError(t, tp.Commit(context.Background()), "decided once PrepareCommit is durable")
			tx, err := d.Transactions()
			require.NoError(t, err)
			rec, _ := tx.Describe("etl")
			require.Equal(t, idempotence.TxnPrepareCommit, rec.State, "the offsets partition's marker failed")
			failing.Store(false)

			if after == "Maintain" {
				require.NoError(t, d.Maintain())
				rec, _ = tx.Describe("etl")
				require.Equal(t, idempotence.TxnCompleteCommit, rec.State)
				assert.Equal(t, int64(7), fetchOne(t, s, true).Offset, "the live Service applied the marker")
				assert.Equal(t, []string{"x"}, committedOutput(t, d))
				require.NoError(t, tp.Close())
				require.NoError(t, s.Close())
				require.NoError(t, d.Close())
				return
			}
			crashed := fs.Crash(vfs.CrashOptions{})
			_ = tp.Close()
			_ = s.Close()
			_ = d.Close()
			d2, s2 := openTxnService(t, crashed)
			assert.Equal(t, int64(7), fetchOne(t, s2, true).Offset, "the reopened Dir wrote the marker, the Service replayed it")
			assert.Equal(t, []string{"x"}, committedOutput(t, d2))
			tx2, err := d2.Transactions()
			require.NoError(t, err)
			rec, _ = tx2.Describe("etl")
			require.Equal(t, idempotence.TxnCompleteCommit, rec.State)
			require.NoError(t, s2.Close())
			require.NoError(t, d2.Close())
		})
	}
}

// A transaction open past its timeout is aborted by the coordinator
// (Maintain), with its ABORT marker written through the Service: the
// offsets it staged are dropped with its output, and are no longer
// pending.
func TestTxnCommitterTimedOutTransactionDropsItsOffsets(t *testing.T) {
	var ms atomic.Int64
	ms.Store(epoch.UnixMilli())
	d, s := openTxnService(t, newMemDataFS(t), func() time.Time { return time.UnixMilli(ms.Load()) })
	tp, err := d.NewTransactionalProducer("etl", log.TransactionalOptions{TransactionTimeout: time.Minute})
	require.NoError(t, err)
	transform(t, s, tp, "x", 3)
	assert.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit)

	ms.Add((2 * time.Minute).Milliseconds())
	require.NoError(t, d.Maintain())
	r := fetchOne(t, s, true)
	require.NoError(t, r.Err, "no longer pending")
	assert.Equal(t, int64(-1), r.Offset, "dropped by the ABORT marker")
	assert.Empty(t, committedOutput(t, d))
	_ = tp.Close()
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// A transaction left open by a crash, with a group's offsets in it, is
// aborted when its transactional id's next producer starts: the ABORT
// marker reaches the offsets partition through the Service opened after
// the restart, which drops the offsets (no longer pending for
// RequireStable) and writes on after the marker. Before OpenService routed
// the markers, the marker went straight to the log under the Service: its
// offsets stayed pending, and its next write failed as NOT_COORDINATOR.
func TestTxnCommitterAbortAfterARestartReachesTheService(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openTxnService(t, fs)
	tp, err := d.NewTransactionalProducer("etl", log.TransactionalOptions{})
	require.NoError(t, err)
	transform(t, s, tp, "x", 7)
	crashed := fs.Crash(vfs.CrashOptions{})
	_ = tp.Close()
	_ = s.Close()
	_ = d.Close()

	d, s = openTxnService(t, crashed)
	assert.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit, "replayed pending")
	tp, err = d.NewTransactionalProducer("etl", log.TransactionalOptions{})
	require.NoError(t, err, "aborts its predecessor's transaction")
	r := fetchOne(t, s, true)
	require.NoError(t, r.Err, "no longer pending")
	assert.Equal(t, int64(-1), r.Offset, "dropped by the ABORT marker")
	cr, err := s.OffsetCommit(context.Background(), commitOne("g", -1, "", 9))
	require.NoError(t, err)
	require.NoError(t, cr.Topics[0].Partitions[0].Err, "the Service writes on after the marker")
	assert.Equal(t, int64(9), fetchOne(t, s, true).Offset)
	assert.Empty(t, committedOutput(t, d))
	require.NoError(t, tp.Close())
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}
