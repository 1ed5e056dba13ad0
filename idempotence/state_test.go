package idempotence

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
)

const maxSeq = math.MaxInt32

// TestSequenceRules is the table of Kafka's sequence rules
// (ProducerAppendInfo.checkSequence and ProducerStateManagerTest; KIP-98,
// KIP-360), S1-S26: the state before, one incoming append, and what Kafka does with
// it. State is written epoch:[last sequences of the retained batches].
func TestSequenceRules(t *testing.T) {
	day := DefaultProducerIDExpiration.Milliseconds()
	for _, tc := range []struct {
		name   string
		before []batch
		// prepare runs after before, for what batches cannot say.
		prepare func(p *partition)
		in      []batch
		// want is nil for an append, errDuplicate for a duplicate, or
		// the Kafka error.
		want error
		// dupOffsets are the original first and last offsets a duplicate
		// is answered with.
		dupOffsets [2]int64
		// after is the producer's state after the append.
		after string
	}{
		{name: "S1 unknown producer starts at 0", in: []batch{data(0, 0, 4)}, after: "0:[4]"},
		{name: "S2 unknown producer accepts any sequence (KIP-360)", in: []batch{data(0, 42, 42)}, after: "0:[42]"},
		{name: "S3 next sequence", before: []batch{data(0, 0, 4)}, in: []batch{data(0, 5, 9)}, after: "0:[4,9]"},
		{name: "S4 gap", before: []batch{data(0, 0, 4)}, in: []batch{data(0, 7, 9)},
			want: ErrOutOfOrderSequence, after: "0:[4]"},
		{name: "S5 duplicate of a retained batch", before: []batch{data(0, 0, 4), data(0, 5, 9)}, in: []batch{data(0, 5, 9)},
			want: errDuplicate, dupOffsets: [2]int64{5, 9}, after: "0:[4,9]"},
		{name: "S5 duplicate of the oldest retained batch",
			before: []batch{data(0, 0, 0), data(0, 1, 1), data(0, 2, 2), data(0, 3, 3), data(0, 4, 4)},
			in:     []batch{data(0, 0, 0)}, want: errDuplicate, dupOffsets: [2]int64{0, 0}, after: "0:[0,1,2,3,4]"},
		{name: "S6 batch evicted from the window is out of order",
			before: []batch{data(0, 0, 0), data(0, 1, 1), data(0, 2, 2), data(0, 3, 3), data(0, 4, 4), data(0, 5, 5)},
			in:     []batch{data(0, 0, 0)}, want: ErrOutOfOrderSequence, after: "0:[1,2,3,4,5]"},
		{name: "S7 partial overlap", before: []batch{data(0, 0, 4), data(0, 5, 9)}, in: []batch{data(0, 5, 7)},
			want: ErrOutOfOrderSequence, after: "0:[4,9]"},
		{name: "S8 stale epoch", before: []batch{data(1, 0, 4)}, in: []batch{data(0, 5, 5)},
			want: ErrInvalidProducerEpoch, after: "1:[4]"},
		{name: "S9 new epoch starts at 0 and forgets the old batches", before: []batch{data(0, 0, 9)}, in: []batch{data(1, 0, 3)},
			after: "1:[3]"},
		{name: "S10 new epoch not at 0", before: []batch{data(0, 0, 9)}, in: []batch{data(1, 10, 10)},
			want: ErrOutOfOrderSequence, after: "0:[9]"},
		{name: "S11 wrap after MaxInt32", before: []batch{data(0, maxSeq, maxSeq).from(OriginReplication)},
			in: []batch{data(0, 0, 0)}, after: "0:[2147483647,0]"},
		{name: "S12 no skipping after MaxInt32", before: []batch{data(0, maxSeq, maxSeq).from(OriginReplication)},
			in: []batch{data(0, 1, 1)}, want: ErrOutOfOrderSequence, after: "0:[2147483647]"},
		{name: "S13 batch spanning the wrap", before: []batch{data(0, maxSeq-11, maxSeq-11).from(OriginReplication)},
			in: []batch{data(0, maxSeq-10, 9)}, after: "0:[2147483636,9]"},
		{name: "S13 retry of a batch spanning the wrap is a duplicate",
			before: []batch{data(0, maxSeq-11, maxSeq-11).from(OriginReplication), data(0, maxSeq-10, 9)},
			in:     []batch{data(0, maxSeq-10, 9)}, want: errDuplicate, dupOffsets: [2]int64{1, 21}, after: "0:[2147483636,9]"},
		{name: "S14 MaxInt32 follows MaxInt32-1", before: []batch{data(0, maxSeq-1, maxSeq-1).from(OriginReplication)},
			in: []batch{data(0, maxSeq, maxSeq)}, after: "0:[2147483646,2147483647]"},
		{name: "S15 after a marker only, same epoch, sequence not 0", before: []batch{commit(2, 0)},
			in: []batch{data(2, 17, 17)}, want: ErrOutOfOrderSequence, after: "2:[]"},
		{name: "S15 after a marker only, same epoch, sequence 0", before: []batch{commit(2, 0)},
			in: []batch{data(2, 0, 0)}, after: "2:[0]"},
		{name: "S15 after a marker only, older epoch", before: []batch{commit(2, 0)},
			in: []batch{data(0, 0, 0)}, want: ErrInvalidProducerEpoch, after: "2:[]"},
		{name: "S16 zombie fenced by an abort marker at a bumped epoch",
			before: []batch{data(0, 0, 4).transactional(), abort(1, 0)},
			in:     []batch{data(0, 5, 5).transactional()}, want: ErrInvalidProducerEpoch, after: "1:[]"},
		{name: "S17 non-transactional batch inside a transaction", before: []batch{data(0, 0, 4).transactional()},
			in: []batch{data(0, 5, 5)}, want: ErrInvalidTxnState, after: "0:[4]"},
		{name: "S18 replication is not checked", before: []batch{data(0, 0, 4)},
			in: []batch{data(0, 9, 9).from(OriginReplication)}, after: "0:[4,9]"},
		{name: "S19 expired producer is accepted with any sequence", before: []batch{data(0, 0, 4)},
			prepare: func(p *partition) { p.now += day; p.s.RemoveExpired(millis(p.now)) },
			in:      []batch{data(0, 42, 42)}, after: "0:[42]"},
		{name: "S20 producer with an open transaction does not expire", before: []batch{data(0, 0, 4).transactional()},
			prepare: func(p *partition) { p.now += 2 * day; p.s.RemoveExpired(millis(p.now)) },
			in:      []batch{data(0, 42, 42).transactional()}, want: ErrOutOfOrderSequence, after: "0:[4]"},
		{name: "S21 after a restart the newest batch is still a duplicate",
			before: []batch{data(0, 0, 4), data(0, 5, 9)}, prepare: restart,
			in: []batch{data(0, 5, 9)}, want: errDuplicate, dupOffsets: [2]int64{5, 9}, after: "0:[9]"},
		{name: "S21 after a restart an older batch is out of order (Kafka keeps one batch per producer)",
			before: []batch{data(0, 0, 4), data(0, 5, 9)}, prepare: restart,
			in: []batch{data(0, 0, 4)}, want: ErrOutOfOrderSequence, after: "0:[9]"},
		{name: "S22 producers are validated independently",
			before: []batch{data(0, 0, 4), data(3, 0, 0).of(2), data(0, 5, 5)},
			in:     []batch{data(3, 1, 1).of(2)}, after: "0:[4,5]"},
		{name: "S23 two batches of one producer in one append", in: []batch{data(0, 0, 4), data(0, 5, 9)},
			after: "0:[4,9]"},
		{name: "S23 second batch of an append checked against the first", before: []batch{data(0, 0, 4)},
			in: []batch{data(0, 5, 9), data(0, 11, 12)}, want: ErrOutOfOrderSequence, after: "0:[4]"},
		{name: "S24 control batch from a client", before: []batch{data(0, 0, 4).transactional()},
			in: []batch{commit(0, 0).from(OriginClient)}, want: ErrInvalidRecord, after: "0:[4]"},
		{name: "S25 marker from an older coordinator", before: []batch{data(0, 0, 4).transactional(), commit(0, 5)},
			in: []batch{commit(0, 4)}, want: ErrTransactionCoordinatorFenced, after: "0:[4]"},
		{name: "S26 the partition accepts any epoch bump; the coordinator never issues 32767",
			before: []batch{data(32766, 0, 0)}, in: []batch{data(32767, 0, 0)}, after: "32767:[0]"},
		{name: "negative sequence from a client", in: []batch{data(0, -5, -5)}, want: ErrInvalidRecord},
		{name: "control batch without a producer id from a client", before: []batch{data(0, 0, 4)},
			in: []batch{commit(0, 0).of(NoProducerID).from(OriginClient)}, want: ErrInvalidRecord, after: "0:[4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPartition(t)
			for _, b := range tc.before {
				p.append(b)
			}
			if tc.prepare != nil {
				tc.prepare(p)
			}
			before := p.s.Producers()
			leo := p.leo
			a, _, err := p.try(tc.in...)
			switch {
			case tc.want == nil:
				require.NoError(t, err)
				require.Nil(t, a.Duplicate)
			case tc.want == errDuplicate:
				require.NoError(t, err)
				require.NotNil(t, a.Duplicate, "not recognised as a duplicate")
				require.Equal(t, tc.dupOffsets, [2]int64{a.Duplicate.FirstOffset(), a.Duplicate.LastOffset})
			default:
				require.ErrorIs(t, err, tc.want)
				var kerr kafkaerr.Code
				require.ErrorAs(t, err, &kerr)
			}
			if tc.want != nil {
				require.Equal(t, before, p.s.Producers(), "a rejected or duplicate append changed the state")
				require.Equal(t, leo, p.leo)
			}
			if tc.after != "" {
				require.Equal(t, tc.after, summary(p.entry(pid)))
			}
		})
	}
}

var errDuplicate = errors.New("duplicate")

// restart takes a snapshot and loads the partition's state from it, as a
// log reopening after a clean shutdown does.
func restart(p *partition) {
	fs, dir := newSnapshotDir(p.t)
	_, err := p.s.TakeSnapshot(fs, dir)
	require.NoError(p.t, err)
	p.s, err = Load(fs, dir, 0, p.leo, millis(p.now), Config{})
	require.NoError(p.t, err)
}

// The tests below port ProducerStateManagerTest (apache/kafka, storage
// module); each names the test it comes from. Kafka's helpers append one
// single-record batch at a given offset; so do these.

func at(b batch, off int64) batch { return b.atOffset(off) }

// TestBasicIDMapping: ProducerStateManagerTest.testBasicIdMapping.
func TestBasicIDMapping(t *testing.T) {
	p := newPartition(t)
	p.append(data(0, 0, 0))
	p.append(data(0, 1, 1))
	// A retry of the last batch is a duplicate; one at a new offset range
	// of a later sequence is out of order.
	a, _, err := p.try(data(0, 1, 1))
	require.NoError(t, err)
	require.NotNil(t, a.Duplicate)
	_, _, err = p.try(data(0, 5, 5))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	p.append(data(1, 0, 0))
	_, _, err = p.try(data(0, 0, 0))
	require.ErrorIs(t, err, ErrInvalidProducerEpoch)
}

// TestAppendTxnMarkerWithNoProducerState:
// ProducerStateManagerTest.testAppendTxnMarkerWithNoProducerState.
func TestAppendTxnMarkerWithNoProducerState(t *testing.T) {
	p := newPartition(t)
	p.append(at(commit(2, 0), 27))
	e := p.entry(pid)
	require.Equal(t, int16(2), e.Epoch)
	require.Equal(t, NoSequence, e.LastSeq())

	// Fencing works even when the marker is all that is left.
	_, _, err := p.try(data(0, 0, 0))
	require.ErrorIs(t, err, ErrInvalidProducerEpoch)
	// A non-zero sequence makes the producer reset its state.
	_, _, err = p.try(data(2, 17, 17))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	p.append(data(2, 0, 0))
	require.Equal(t, int32(0), p.entry(pid).LastSeq())
}

// TestProducerSequenceWrapAround:
// ProducerStateManagerTest.testProducerSequenceWrapAround and
// testProducerSequenceInvalidWrapAround.
func TestProducerSequenceWrapAround(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(15, maxSeq, maxSeq).from(OriginReplication), 735))
	_, _, err := p.try(at(data(15, 1, 1), 1235))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	p.append(at(data(15, 0, 0), 1235))
	e := p.entry(pid)
	require.Equal(t, int16(15), e.Epoch)
	require.Equal(t, int32(maxSeq), e.Batches[0].FirstSeq())
	require.Equal(t, int32(0), e.LastSeq())
}

// TestProducerSequenceWithWrapAroundBatchRecord:
// ProducerStateManagerTest.testProducerSequenceWithWrapAroundBatchRecord.
func TestProducerSequenceWithWrapAroundBatchRecord(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(15, maxSeq-10, 9).from(OriginReplication), 2000))
	e := p.entry(pid)
	require.Equal(t, []BatchMetadata{{LastSeq: 9, LastOffset: 2020, OffsetDelta: 20, Timestamp: p.now}}, e.Batches)
	require.Equal(t, int32(maxSeq-10), e.Batches[0].FirstSeq())
	require.Equal(t, int64(2000), e.Batches[0].FirstOffset())
}

// TestNoValidationOnFirstEntryWhenLoadingLog:
// ProducerStateManagerTest.testNoValidationOnFirstEntryWhenLoadingLog.
func TestNoValidationOnFirstEntryWhenLoadingLog(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(5, 16, 16).from(OriginReplication), 735))
	require.Equal(t, []BatchMetadata{{LastSeq: 16, LastOffset: 735, Timestamp: p.now}}, p.entry(pid).Batches)
	require.Equal(t, int16(5), p.entry(pid).Epoch)
}

// TestControlRecordBumpsProducerEpoch:
// ProducerStateManagerTest.testControlRecordBumpsProducerEpoch and
// testOutOfSequenceAfterControlRecordEpochBump.
func TestControlRecordBumpsProducerEpoch(t *testing.T) {
	p := newPartition(t)
	p.append(data(0, 0, 0).transactional())
	p.append(data(0, 1, 1).transactional())
	p.append(abort(1, 0))
	e := p.entry(pid)
	require.Equal(t, int16(1), e.Epoch)
	require.Equal(t, int64(-1), e.TxnFirstOffset)
	require.Empty(t, e.Batches)

	// The bumped epoch restarts at 0, and so would any later epoch.
	_, _, err := p.try(data(1, 2, 2).transactional())
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	_, _, err = p.try(data(2, 2, 2).transactional())
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	p.append(data(1, 0, 0).transactional())
	require.Equal(t, "1:[0]", summary(p.entry(pid)))
}

// TestProducerStateAfterFencingAbortMarker:
// ProducerStateManagerTest.testProducerStateAfterFencingAbortMarker.
func TestProducerStateAfterFencingAbortMarker(t *testing.T) {
	p := newPartition(t)
	p.append(data(0, 0, 0).transactional())
	p.append(abort(1, 0))
	e := p.entry(pid)
	require.Equal(t, int64(-1), e.TxnFirstOffset)
	require.Empty(t, e.Batches)
	// The fencing epoch is kept until the producer expires.
	p.s.RemoveExpired(millis(p.now))
	p.entry(pid)
}

// TestAcceptAppendWithSequenceGapsOnReplica:
// ProducerStateManagerTest.testAcceptAppendWithSequenceGapsOnReplica.
func TestAcceptAppendWithSequenceGapsOnReplica(t *testing.T) {
	p := newPartition(t)
	p.append(data(0, 0, 0))
	_, _, err := p.try(data(0, 3, 3))
	require.ErrorIs(t, err, ErrOutOfOrderSequence)
	require.Equal(t, int32(0), p.entry(pid).LastSeq())
	p.append(data(0, 3, 3).from(OriginReplication))
	require.Equal(t, int32(3), p.entry(pid).LastSeq())
}

// TestPidExpirationTimeout: ProducerStateManagerTest.testPidExpirationTimeout
// and testProducersWithOngoingTransactionsDontExpire.
func TestPidExpirationTimeout(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(5, 0, 0), 1))
	p.append(data(5, 0, 0).of(2).transactional())
	p.now += DefaultProducerIDExpiration.Milliseconds() + 1
	p.s.RemoveExpired(millis(p.now))
	_, ok := p.s.Producer(pid)
	require.False(t, ok, "idle producer not expired")
	p.entry(2) // its transaction is open

	p.append(data(5, 1, 1))
	require.Equal(t, int32(1), p.entry(pid).LastSeq())
	require.Equal(t, int64(4), p.s.MapEndOffset())
}

// TestExpirationIsInclusive: Kafka expires a producer once
// now - lastTimestamp >= producer.id.expiration.ms.
func TestExpirationIsInclusive(t *testing.T) {
	p := newPartition(t)
	s, err := NewState(0, Config{ProducerIDExpiration: time.Minute})
	require.NoError(t, err)
	p.s = s
	p.append(data(0, 0, 0).stamped(1000))
	p.s.RemoveExpired(millis(1000 + 59_999))
	p.entry(pid)
	p.s.RemoveExpired(millis(1000 + 60_000))
	_, ok := p.s.Producer(pid)
	require.False(t, ok)
}

// TestFirstUnstableOffset: ProducerStateManagerTest.testFirstUnstableOffset.
func TestFirstUnstableOffset(t *testing.T) {
	p := newPartition(t)
	const other = 2
	_, ok := p.s.FirstUnstableOffset()
	require.False(t, ok)

	p.append(at(data(5, 0, 0).transactional(), 99))
	requireFirstUnstable(t, p.s, 99)
	p.append(at(data(5, 0, 0).of(other).transactional(), 105))
	requireFirstUnstable(t, p.s, 99)

	// Completed but its marker not yet below the high watermark.
	p.append(at(commit(5, 0), 109))
	requireFirstUnstable(t, p.s, 99)
	p.s.OnHighWatermark(100)
	requireFirstUnstable(t, p.s, 99)
	p.s.OnHighWatermark(110)
	requireFirstUnstable(t, p.s, 105)

	p.append(at(abort(5, 0).of(other), 112))
	requireFirstUnstable(t, p.s, 105)
	p.s.OnHighWatermark(113)
	_, ok = p.s.FirstUnstableOffset()
	require.False(t, ok)
	require.Equal(t, int64(113), p.s.LastStableOffset(113))
}

func requireFirstUnstable(t *testing.T, s *State, want int64) {
	t.Helper()
	got, ok := s.FirstUnstableOffset()
	require.True(t, ok, "no first unstable offset, want %d", want)
	require.Equal(t, want, got)
	require.Equal(t, want, s.LastStableOffset(want+1000))
}

// TestOldEpochForControlRecord:
// ProducerStateManagerTest.testOldEpochForControlRecord.
func TestOldEpochForControlRecord(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(5, 0, 0).transactional(), 99))
	_, _, err := p.try(commit(3, 0))
	require.ErrorIs(t, err, ErrInvalidProducerEpoch)
}

// TestCoordinatorFencing: ProducerStateManagerTest.testCoordinatorFencing.
func TestCoordinatorFencing(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(5, 0, 0).transactional(), 99))
	p.append(commit(5, 1))
	require.Equal(t, int32(1), p.entry(pid).CoordinatorEpoch)
	p.append(commit(5, 1)) // the same coordinator epoch
	p.append(commit(5, 2)) // a newer one
	_, _, err := p.try(commit(5, 1))
	require.ErrorIs(t, err, ErrTransactionCoordinatorFenced)
	// A follower copies what the leader accepted.
	p.append(commit(5, 1).from(OriginReplication))
}

// TestSequenceNotValidatedForCoordinator:
// ProducerStateManagerTest.testSequenceNotValidatedForGroupMetadataTopic.
func TestSequenceNotValidatedForCoordinator(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(0, NoSequence, NoSequence).from(OriginCoordinator).transactional(), 99))
	p.append(at(data(0, NoSequence, NoSequence).from(OriginCoordinator).transactional(), 100))
}

// TestAppendEmptyControlBatch:
// ProducerStateManagerTest.testAppendEmptyControlBatch.
func TestAppendEmptyControlBatch(t *testing.T) {
	p := newPartition(t)
	b := commit(0, 0).of(23423).atOffset(15)
	b.marker = nil
	info := p.info(b, 15)
	info.Control = true
	a, err := p.s.Validate(OriginCoordinator, info)
	require.NoError(t, err)
	done, err := p.s.Commit(a)
	require.NoError(t, err)
	require.Empty(t, done)
	require.Equal(t, int64(-1), p.entry(23423).TxnFirstOffset)
	_, ok := p.s.FirstUnstableOffset()
	require.False(t, ok)
}

// TestLastStableOffsetCompletedTxn:
// ProducerStateManagerTest.testLastStableOffsetCompletedTxn: the last stable
// offset stored with a completed transaction is the first offset of the
// oldest transaction of another producer still open.
func TestLastStableOffsetCompletedTxn(t *testing.T) {
	p := newPartition(t)
	const start1, start2, start3 = 992342, 992342 + 25, 992342 + 57
	p.append(at(data(0, 0, 0).transactional(), start1))
	p.append(at(data(0, 0, 0).of(2).transactional(), start2))
	p.append(at(data(0, 0, 0).of(3).transactional(), start3))

	last1 := int64(start3 + 15)
	done := p.append(at(commit(0, 0), last1))
	require.Equal(t, []CompletedTxn{{ProducerID: 1, FirstOffset: start1, LastOffset: last1, LastStableOffset: start2}}, done)
	p.s.OnHighWatermark(last1 + 1)
	requireFirstUnstable(t, p.s, start2)

	last3 := last1 + 20
	done = p.append(at(commit(0, 0).of(3), last3))
	require.Equal(t, int64(start2), done[0].LastStableOffset)
	p.s.OnHighWatermark(last3 + 1)
	requireFirstUnstable(t, p.s, start2)

	last2 := last3 + 78
	done = p.append(at(abort(0, 0).of(2), last2))
	require.Equal(t, []CompletedTxn{{ProducerID: 2, FirstOffset: start2, LastOffset: last2, Aborted: true, LastStableOffset: last2 + 1}}, done)
	p.s.OnHighWatermark(last2 + 1)
	_, ok := p.s.FirstUnstableOffset()
	require.False(t, ok)
}

// TestSkipEmptyTransactions: ProducerStateManagerTest.testSkipEmptyTransactions:
// one append that completes a transaction, holds empty ones (markers with no
// data before them), a complete one and an open one.
func TestSkipEmptyTransactions(t *testing.T) {
	p := newPartition(t)
	p.append(at(data(0, 0, 4).transactional(), 16))
	p.s.OnHighWatermark(21)
	requireFirstUnstable(t, p.s, 16)

	c := OriginCoordinator
	done := p.append(
		at(commit(0, 0), 21),
		commit(0, 0), abort(0, 0), // empty: complete nothing
		data(0, 5, 8).transactional().from(c),  // 24..27
		abort(0, 0),                            // 28
		abort(0, 0),                            // 29, empty
		data(0, 9, 10).transactional().from(c), // 30..31, left open
	)
	require.Equal(t, []CompletedTxn{
		{ProducerID: pid, FirstOffset: 16, LastOffset: 21, LastStableOffset: 22},
		{ProducerID: pid, FirstOffset: 24, LastOffset: 28, Aborted: true, LastStableOffset: 29},
	}, done)
	p.s.OnHighWatermark(32)
	requireFirstUnstable(t, p.s, 30)
}

// TestValidateDoesNotChangeState: Kafka's testPrepareUpdateDoesNotMutate: a
// validated append changes nothing until it is committed, and a commit
// after another one is refused.
func TestValidateDoesNotChangeState(t *testing.T) {
	p := newPartition(t)
	p.append(data(0, 0, 4))
	before := p.s.Producers()
	a1, err := p.s.Validate(OriginClient, p.info(data(0, 5, 9), 5))
	require.NoError(t, err)
	a2, err := p.s.Validate(OriginClient, p.info(data(0, 5, 9).of(2), 5))
	require.NoError(t, err)
	require.Equal(t, before, p.s.Producers())
	_, err = p.s.Commit(a1)
	require.NoError(t, err)
	_, err = p.s.Commit(a2)
	require.ErrorIs(t, err, ErrStaleAppend)
	require.Equal(t, "0:[4,9]", summary(p.entry(pid)))
	_, ok := p.s.Producer(2)
	require.False(t, ok)
}

// stateCopy is everything a State holds, copied, for tests that compare
// a state before and after.
type stateCopy struct {
	producers             []Entry
	ongoing, unreplicated []txn
	mapEnd, lastSnap      int64
	gen                   uint64
}

func copyState(s *State) stateCopy {
	return stateCopy{
		producers: s.Producers(), ongoing: slices.Clone(s.ongoing), unreplicated: slices.Clone(s.unreplicated),
		mapEnd: s.mapEnd, lastSnap: s.lastSnap, gen: s.gen,
	}
}

// TestUncommittedAppendChangesNothing: Validate leaves the state exactly
// as it was, whatever the append would change (Kafka's
// ProducerAppendInfo works on a copy of the producer's entry, which only
// ProducerStateManager.update installs): when it accepts the append and
// it is never committed, and when it refuses one of the append's batches,
// even after accepting those before it. A commit after such a Validate
// then leaves the state as if Validate had never run.
func TestUncommittedAppendChangesNothing(t *testing.T) {
	c, r := OriginCoordinator, OriginReplication
	// Producer 1 has five batches retained of six (epoch 0, sequences 0
	// to 29); producer 3 is at epoch 1 with coordinator epoch 2, one
	// transaction committed and not yet below the high watermark, and one
	// open.
	setup := func(t *testing.T) *partition {
		p := newPartition(t)
		for seq := int32(0); seq < 30; seq += 5 {
			p.append(data(0, seq, seq+4))
		}
		p.append(data(1, 0, 0).of(3).transactional())
		p.append(commit(1, 2).of(3))
		p.append(data(1, 1, 2).of(3).transactional())
		p.now += 1000 // the append under test comes later
		return p
	}
	for _, tc := range []struct {
		name string
		in   []batch
		want error // nil for an append, errDuplicate for a duplicate
	}{
		{"the next batch, evicting the oldest", []batch{data(0, 30, 34)}, nil},
		{"six batches, replacing all five", []batch{
			data(0, 30, 30), data(0, 31, 31), data(0, 32, 32), data(0, 33, 33), data(0, 34, 34), data(0, 35, 35)}, nil},
		{"a new epoch, dropping the batches", []batch{data(1, 0, 0)}, nil},
		{"a new producer", []batch{data(0, 7, 7).of(2)}, nil},
		{"three producers", []batch{data(0, 30, 30), data(0, 0, 0).of(2), data(0, 31, 31), data(1, 3, 3).of(3).transactional()}, nil},
		{"a transaction opening", []batch{data(0, 30, 30).transactional()}, nil},
		{"a new producer's transaction opening", []batch{data(0, 0, 0).of(2).transactional()}, nil},
		{"a marker ending a transaction with a new epoch", []batch{abort(2, 3).of(3)}, nil},
		{"a marker, then a new transaction", []batch{commit(1, 2).of(3), data(1, 3, 3).of(3).transactional().from(c)}, nil},
		{"a replicated batch of another epoch", []batch{data(9, 100, 100).from(r)}, nil},
		{"a replicated marker of an older coordinator", []batch{commit(1, 1).of(3).from(r)}, nil},
		{"a retry", []batch{data(0, 25, 29)}, errDuplicate},
		{"a good batch, then a retry", []batch{data(0, 30, 30), data(0, 25, 29)}, errDuplicate},
		{"a gap", []batch{data(0, 31, 31)}, ErrOutOfOrderSequence},
		{"a good batch, then a gap", []batch{data(0, 30, 30), data(0, 32, 32)}, ErrOutOfOrderSequence},
		{"a new producer, then a new epoch not at 0", []batch{data(0, 5, 5).of(2), data(1, 1, 1).of(2)}, ErrOutOfOrderSequence},
		{"an old epoch", []batch{data(0, 3, 3).of(3).transactional()}, ErrInvalidProducerEpoch},
		{"a marker, then a marker of a fenced coordinator", []batch{commit(1, 2).of(3), abort(1, 1).of(3)}, ErrTransactionCoordinatorFenced},
		{"a plain batch inside a transaction", []batch{data(1, 3, 3).of(3)}, ErrInvalidTxnState},
		{"a good batch, then a client's control batch", []batch{data(0, 30, 30), commit(1, 2).of(3)}, ErrInvalidRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setup(t)
			before := copyState(p.s)
			infos, _ := p.infos(tc.in...)
			a, err := p.s.Validate(tc.in[0].origin, infos...)
			switch tc.want {
			case nil:
				require.NoError(t, err)
				require.Nil(t, a.Duplicate)
			case errDuplicate:
				require.NoError(t, err)
				require.NotNil(t, a.Duplicate)
			default:
				require.ErrorIs(t, err, tc.want)
			}
			require.Equal(t, before, copyState(p.s), "Validate changed the state")
			if tc.want != nil {
				return
			}
			want := setup(t)
			want.append(tc.in...)
			p.append(tc.in...)
			require.Equal(t, copyState(want.s), copyState(p.s), "the uncommitted append changed the next one")
		})
	}
}

// TestRefusedAppendIsNotCommitted: what Validate returns with an error
// (the zero Append) cannot be committed, even on a state that has never
// committed anything.
func TestRefusedAppendIsNotCommitted(t *testing.T) {
	p := newPartition(t)
	before := copyState(p.s)
	a, err := p.s.Validate(OriginClient, p.info(commit(0, 0), 0))
	require.ErrorIs(t, err, ErrInvalidRecord)
	_, err = p.s.Commit(a)
	require.ErrorIs(t, err, ErrStaleAppend)
	require.Equal(t, before, copyState(p.s))
}

// TestBatchesWithoutProducerAreIgnored: a plain batch moves only the map end
// offset.
func TestBatchesWithoutProducerAreIgnored(t *testing.T) {
	p := newPartition(t)
	p.append(data(0, 0, 0).of(NoProducerID))
	require.Empty(t, p.s.Producers())
	require.Equal(t, int64(1), p.s.MapEndOffset())
}

func TestOptionsValidation(t *testing.T) {
	_, err := NewState(0, Config{ProducerIDExpiration: -time.Second})
	require.ErrorContains(t, err, "ProducerIDExpiration")
}

func TestSequenceArithmetic(t *testing.T) {
	for _, tc := range []struct{ seq, n, inc, dec int32 }{
		{0, 0, 0, 0},
		{5, 3, 8, 2},
		{maxSeq, 1, 0, maxSeq - 1},
		{maxSeq - 10, 20, 9, maxSeq - 30},
		{3, 10, 13, maxSeq - 6},
	} {
		require.Equal(t, tc.inc, IncrementSequence(tc.seq, tc.n), "increment %d by %d", tc.seq, tc.n)
		require.Equal(t, tc.dec, DecrementSequence(tc.seq, tc.n), "decrement %d by %d", tc.seq, tc.n)
	}
}

// TestNeedsVerification: only a transaction's first batch on the partition
// needs the coordinator (UnifiedLog.analyzeAndValidateProducerState's
// hasOngoingTransaction check).
func TestNeedsVerification(t *testing.T) {
	p := newPartition(t)
	first := p.info(data(0, 0, 0).transactional(), 0)
	require.True(t, p.s.NeedsVerification(first))
	require.False(t, p.s.NeedsVerification(p.info(data(0, 0, 0), 0)), "not transactional")
	require.False(t, p.s.NeedsVerification(p.info(commit(0, 0), 0)), "a marker")
	p.append(data(0, 0, 0).transactional())
	require.False(t, p.s.NeedsVerification(p.info(data(0, 1, 1).transactional(), 1)), "the transaction is open here")
	p.append(commit(0, 0))
	require.True(t, p.s.NeedsVerification(p.info(data(0, 1, 1).transactional(), 2)), "the next transaction")
}

// TestHasLateTransaction: ProducerStateManagerTest's testHasLateTransaction,
// testHasLateTransactionInitializedAfterReload and
// testHasLateTransactionUpdatedAfterFullTruncation.
func TestHasLateTransaction(t *testing.T) {
	const maxTimeout = DefaultMaxTransactionTimeout
	late := (maxTimeout + LateTransactionBuffer).Milliseconds()
	p, fs, dir := snapshotPartition(t)
	p.append(at(data(2, 0, 0).of(39).transactional(), 100))
	require.False(t, p.s.HasLateTransaction(millis(p.now), maxTimeout))
	p.now += 500
	p.append(at(data(9, 0, 0).of(57).transactional(), 150))
	require.False(t, p.s.HasLateTransaction(millis(p.now), maxTimeout))
	p.snapshot(fs, dir)

	// Only the first transaction is late.
	p.now += late - 500 + 1
	require.True(t, p.s.HasLateTransaction(millis(p.now), maxTimeout))
	require.True(t, p.reload(fs, dir, 0, p.s.MapEndOffset(), p.now).HasLateTransaction(millis(p.now), maxTimeout), "after a reload")
	p.now += 500
	require.True(t, p.s.HasLateTransaction(millis(p.now), maxTimeout))

	p.append(at(commit(2, 0).of(39), 200))
	require.True(t, p.s.HasLateTransaction(millis(p.now), maxTimeout), "the second is late too")
	p.append(at(commit(9, 0).of(57), 250))
	require.False(t, p.s.HasLateTransaction(millis(p.now), maxTimeout))

	p.append(at(data(10, 0, 0).of(57).transactional(), 300))
	p.now += late + 1
	require.True(t, p.s.HasLateTransaction(millis(p.now), maxTimeout))
	p.s.Reset(150)
	require.False(t, p.s.HasLateTransaction(millis(p.now), maxTimeout), "after a full truncation")
}
