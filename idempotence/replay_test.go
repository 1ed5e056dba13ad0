package idempotence

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/vfs"
)

var replayRuns = flag.Int("replay.runs", 0, "runs of the randomized replay tests (default 20, 5 with -short)")

func runs(t *testing.T) int {
	switch {
	case *replayRuns > 0:
		return *replayRuns
	case testing.Short():
		return 5
	}
	return 20
}

// TestReplayEqualsLive drives a partition with random appends from a few
// producers (in sequence, retries, gaps, stale and bumped epochs,
// transactions and markers), then rebuilds the state the way a follower or
// a recovering log does: replaying the accepted batches with
// OriginReplication, from nothing and from each snapshot taken on the way.
// From nothing the rebuilt state equals the live one; from a snapshot it
// differs only in the older batches of a producer's window, which the
// snapshot does not keep.
func TestReplayEqualsLive(t *testing.T) {
	for run := range runs(t) {
		rng := rand.New(rand.NewPCG(uint64(run), 90))
		p, fs, dir := snapshotPartition(t)
		var dups, rejected, completed int
		for range 300 {
			a, done, err := p.try(randomAppend(rng, p)...)
			switch {
			case err != nil:
				rejected++
			case a.Duplicate != nil:
				dups++
			}
			completed += len(done)
			if rng.IntN(20) == 0 {
				p.snapshot(fs, dir)
			}
		}
		accepted := p.log
		// The generator must exercise every path, or the test proves little.
		require.Greater(t, len(accepted), 100, "run %d: appended", run)
		require.Greater(t, dups, 3, "run %d: duplicates", run)
		require.Greater(t, rejected, 10, "run %d: rejected", run)
		require.Greater(t, completed, 3, "run %d: transactions completed", run)
		t.Logf("run %d: %d batches appended, %d duplicates, %d rejected, %d transactions completed, %d snapshots",
			run, len(accepted), dups, rejected, completed, len(snapshotOffsets(t, fs, dir)))
		p.s.OnHighWatermark(p.leo)
		live := p.s.Producers()
		lso := p.s.LastStableOffset(p.leo)

		// From nothing.
		s, err := NewState(0, Config{})
		require.NoError(t, err)
		replay(t, s, accepted)
		s.OnHighWatermark(p.leo)
		require.Equal(t, live, s.Producers(), "run %d: replay from the start", run)
		require.Equal(t, lso, s.LastStableOffset(p.leo), "run %d", run)
		require.Equal(t, p.leo, s.MapEndOffset(), "run %d", run)

		// From each snapshot.
		offs := snapshotOffsets(t, fs, dir)
		for _, off := range offs {
			s := p.reload(fs.Crash(vfs.CrashOptions{}), dir, 0, off, p.now) // a copy: Load deletes later snapshots
			require.Equal(t, off, s.MapEndOffset())
			var tail []BatchInfo
			for _, b := range accepted {
				if b.BaseOffset >= off {
					tail = append(tail, b)
				}
			}
			replay(t, s, tail)
			s.OnHighWatermark(p.leo)
			requireSameBesidesWindow(t, live, s.Producers(), run, off)
			require.Equal(t, lso, s.LastStableOffset(p.leo), "run %d, from snapshot %d", run, off)
		}
	}
}

func replay(t *testing.T, s *State, batches []BatchInfo) {
	t.Helper()
	for _, b := range batches {
		a, err := s.Validate(OriginReplication, b)
		require.NoError(t, err, "replication refused a batch the leader took")
		_, err = s.Commit(a)
		require.NoError(t, err)
	}
}

// requireSameBesidesWindow checks rebuilt against live: the same producers
// with the same epochs, coordinator epochs, timestamps and open
// transactions, and a batch window that is a newest-first suffix of live's.
func requireSameBesidesWindow(t *testing.T, live, rebuilt []Entry, run int, off int64) {
	t.Helper()
	require.Len(t, rebuilt, len(live), "run %d, from snapshot %d", run, off)
	for i := range live {
		l, r := live[i], rebuilt[i]
		lb, rb := l.Batches, r.Batches
		l.Batches, r.Batches = nil, nil
		require.Equal(t, l, r, "run %d, from snapshot %d", run, off)
		require.LessOrEqual(t, len(rb), len(lb))
		want := slices.Clone(lb[len(lb)-len(rb):])
		for j := range want {
			// The snapshot stores one timestamp per producer, its last
			// (of a batch or a marker), and Kafka's loader gives it to the
			// batch it restores too.
			if want[j].LastOffset < off {
				want[j].Timestamp = rb[j].Timestamp
			}
		}
		require.Equal(t, want, rb, "run %d, from snapshot %d: producer %d's window", run, off, l.ProducerID)
		if len(lb) > 0 {
			require.NotEmpty(t, rb, "run %d, from snapshot %d: producer %d lost its newest batch", run, off, l.ProducerID)
		}
	}
}

// randomAppend returns a random append of one or two batches for one of
// three producers, usually one Kafka would accept.
func randomAppend(rng *rand.Rand, p *partition) []batch {
	id := int64(1 + rng.IntN(3))
	e, known := p.s.Producer(id)
	epoch, next := int16(0), int32(0)
	inTxn := false
	if known {
		epoch = e.Epoch
		if len(e.Batches) > 0 {
			next = IncrementSequence(e.LastSeq(), 1)
		}
		inTxn = e.TxnFirstOffset >= 0
	}
	p.now += int64(rng.IntN(100))
	n := int32(rng.IntN(4))
	b := data(epoch, next, IncrementSequence(next, n)).of(id)
	b.txn = inTxn || rng.IntN(3) == 0
	switch k := rng.IntN(20); {
	case k < 10: // in sequence
	case k < 12: // two batches in one append
		return []batch{b, data(epoch, IncrementSequence(next, n+1), IncrementSequence(next, n+1)).of(id).transactionalIf(b.txn)}
	case k < 14 && known && len(e.Batches) > 0: // retry of a retained batch
		r := e.Batches[rng.IntN(len(e.Batches))]
		b.first, b.last = r.FirstSeq(), r.LastSeq
	case k < 15: // gap
		b.first, b.last = IncrementSequence(next, 3), IncrementSequence(next, 3+n)
	case k < 16 && epoch > 0: // stale epoch
		b.epoch = epoch - 1
	case k < 17: // bumped epoch, from 0
		b.epoch, b.first, b.last = epoch+1, 0, n
	default: // a marker, sometimes bumping the epoch or from an old coordinator
		coord := int32(0)
		if known {
			coord = max(e.CoordinatorEpoch, 0) + int32(rng.IntN(3)) - 1
		}
		m := commit(epoch+int16(rng.IntN(2)), coord).of(id)
		if rng.IntN(2) == 0 {
			m.marker.Type = MarkerAbort
		}
		return []batch{m}
	}
	return []batch{b}
}

func (b batch) transactionalIf(txn bool) batch { b.txn = txn; return b }

// TestCoordinatorReplayEqualsLive drives a coordinator with random
// requests from producers that are sometimes stale (old epochs, lost
// answers), random clock ticks, markers held back and released, and
// records that fail to persist. After every request, replaying the
// persisted records into a new coordinator gives the live state, and every
// marker the coordinator asked for was accepted by its partition.
func TestCoordinatorReplayEqualsLive(t *testing.T) {
	ids := []string{"t1", "t2", "t3"}
	tps := []TopicPartition{tpA, tpB, {Topic: "c", Partition: 2}}
	for run := range runs(t) {
		rng := rand.New(rand.NewPCG(uint64(run), 17))
		w := newWorld(t)
		seen := map[string]ProducerIDAndEpoch{} // what each producer last heard
		var answered, refused, persisted int
		for range 300 {
			id := ids[rng.IntN(len(ids))]
			p, ok := seen[id]
			if ok && rng.IntN(8) == 0 {
				p.Epoch-- // a zombie, or a retry of a lost answer
			}
			w.failPersist = rng.IntN(12) == 0
			before := len(w.log)
			var s Step
			var err error
			switch k := rng.IntN(12); {
			case k < 2 || !ok:
				var expected *ProducerIDAndEpoch
				if ok && rng.IntN(2) == 0 {
					expected = &p
				}
				s, err = w.do(w.c.InitProducerID(id, int32(1000+rng.IntN(60_000)), expected, millis(w.now)))
			case k < 7:
				tp := tps[rng.IntN(len(tps))]
				s, err = w.do(w.c.AddPartitions(id, p.ProducerID, p.Epoch, []TopicPartition{tp}, millis(w.now)))
				if err == nil {
					part := w.partition(tp)
					seq := int32(0)
					if e, ok := part.s.Producer(p.ProducerID); ok && e.Epoch == p.Epoch && len(e.Batches) > 0 {
						seq = e.LastSeq() + 1
					}
					_, _, _ = part.try(data(p.Epoch, seq, seq).of(p.ProducerID).transactional())
				}
			case k < 10:
				s, err = w.do(w.c.EndTxn(id, p.ProducerID, p.Epoch, rng.IntN(2) == 0, millis(w.now)))
			case k < 11:
				w.now += int64(rng.IntN(40_000))
				recs, terr := w.c.Tick(millis(w.now))
				require.NoError(t, terr)
				for _, rec := range recs {
					if rng.IntN(5) == 0 {
						require.NoError(t, w.c.Abandon(rec.TransactionalID))
						continue
					}
					w.persist(*rec)
				}
			default:
				if w.holdMarkers {
					w.releaseMarkers()
				} else {
					w.holdMarkers = true
				}
			}
			if err != nil && !errors.Is(err, errPowerCut) {
				var kerr kafkaerr.Code
				require.ErrorAs(t, err, &kerr, "run %d: an error that is not Kafka's", run)
				refused++
			} else if err == nil && s.ProducerEpoch >= 0 && s.ProducerID > 0 {
				seen[id] = ProducerIDAndEpoch{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}
				answered++
			}
			persisted += len(w.log) - before
			w.requireReplayEqual()
		}
		require.Greater(t, answered, 50, "run %d", run)
		require.Greater(t, refused, 20, "run %d", run)
		require.Greater(t, persisted, 50, "run %d", run)
		states := map[TxnState]bool{}
		for _, rec := range w.log {
			states[rec.State] = true
		}
		for _, st := range []TxnState{TxnEmpty, TxnOngoing, TxnPrepareCommit, TxnPrepareAbort, TxnCompleteCommit, TxnCompleteAbort} {
			require.True(t, states[st], "run %d never reached %v", run, st)
		}
		t.Logf("run %d: %d answered, %d refused, %d records persisted", run, answered, refused, persisted)
	}
}
