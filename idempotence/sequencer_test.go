package idempotence

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// seqStep is one step of a Sequencer scenario: a new batch (next), an
// answer to the batch numbered b as it was last sent (answer), or giving
// it up (abandon), with what the Sequencer must say.
type seqStep struct {
	do        string // next, answer, abandon, reset
	part      int32  // next
	n         int    // next: records
	b         int    // answer, abandon: the batch, numbered by next steps from 0
	err       error  // answer
	retriable bool   // answer
	want      Action // answer
	pid       int64  // next, Retry: the producer id wanted, if not 0; reset: the new one
	epoch     int16  // next, Retry: the stamp wanted
	seq       int32
	wantErr   error // next, Fail, abandon
}

var errTimeout = errors.New("request timed out")

func TestSequencerFollowsKafkasProducerRules(t *testing.T) {
	next := func(part int32, n int, epoch int16, seq int32) seqStep {
		return seqStep{do: "next", part: part, n: n, epoch: epoch, seq: seq}
	}
	done := func(b int) seqStep { return seqStep{do: "answer", b: b, want: Done} }
	retry := func(b int, err error, epoch int16, seq int32) seqStep {
		return seqStep{do: "answer", b: b, err: err, want: Retry, epoch: epoch, seq: seq}
	}
	fail := func(b int, err, want error) seqStep {
		return seqStep{do: "answer", b: b, err: err, want: Fail, wantErr: want}
	}
	wait := func(part int32) seqStep { return seqStep{do: "next", part: part, n: 1, wantErr: ErrWait} }
	abandon := func(b int) seqStep { return seqStep{do: "abandon", b: b} }
	for _, tc := range []struct {
		name  string
		start int16 // the producer's epoch
		steps []seqStep
	}{
		{"each partition counts its own sequences", 0, []seqStep{
			next(0, 3, 0, 0), next(0, 2, 0, 3), next(1, 1, 0, 0), done(0),
			{do: "answer", b: 1, err: ErrDuplicateSequence, want: Done}, // DUPLICATE_SEQUENCE_NUMBER is success
			next(0, 1, 0, 5),
		}},
		{"a retriable error sends the same stamp again (canRetry)", 0, []seqStep{
			next(0, 3, 0, 0),
			{do: "answer", b: 0, err: errTimeout, retriable: true, want: Retry, epoch: 0, seq: 0},
			done(0), next(0, 1, 0, 3),
		}},
		{"at most five batches in flight", 0, []seqStep{
			next(0, 1, 0, 0), next(0, 1, 0, 1), next(0, 1, 0, 2), next(0, 1, 0, 3), next(0, 1, 0, 4),
			wait(0), next(1, 1, 0, 0), done(0), next(0, 1, 0, 5),
		}},
		{"OUT_OF_ORDER behind a batch in flight waits for it (canRetry: not the next sequence)", 0, []seqStep{
			next(0, 1, 0, 0), next(0, 1, 0, 1),
			retry(1, ErrOutOfOrderSequence, 0, 1), done(0), done(1),
		}},
		{"OUT_OF_ORDER for the oldest batch bumps the epoch and stamps the batches again", 0, []seqStep{
			next(0, 2, 0, 0), next(0, 1, 0, 2), next(0, 1, 0, 3), done(0),
			retry(1, ErrOutOfOrderSequence, 1, 0),
			retry(2, ErrOutOfOrderSequence, 1, 1), // its answer was to the old stamp
			done(1), done(2), next(0, 1, 1, 2),
		}},
		{"UNKNOWN_PRODUCER_ID for the oldest batch bumps too", 3, []seqStep{
			next(0, 1, 3, 0), retry(0, ErrUnknownProducerID, 4, 0), done(0),
		}},
		{"other partitions take the new epoch once idle", 0, []seqStep{
			next(0, 1, 0, 0), next(1, 1, 0, 0), next(1, 1, 0, 1),
			retry(0, ErrOutOfOrderSequence, 1, 0),
			wait(1), done(1), wait(1), done(2), next(1, 1, 1, 0),
		}},
		{"a fenced epoch fails the batch; its sequences go to the next", 0, []seqStep{
			next(0, 2, 0, 0), fail(0, ErrInvalidProducerEpoch, ErrInvalidProducerEpoch), next(0, 1, 0, 0),
		}},
		{"PRODUCER_FENCED fails the batch", 0, []seqStep{
			next(0, 2, 0, 0), fail(0, ErrProducerFenced, ErrProducerFenced),
		}},
		{"a failure not retriable bumps the epoch for the batches after it (handleFailedBatch)", 0, []seqStep{
			next(0, 1, 0, 0), next(0, 1, 0, 1),
			fail(0, ErrInvalidRecord, ErrInvalidRecord),
			retry(1, ErrOutOfOrderSequence, 1, 0), done(1), next(0, 1, 1, 1),
		}},
		{"an abandoned batch is resolved by a later success (maybeResolveSequences)", 0, []seqStep{
			next(0, 1, 0, 0), next(0, 1, 0, 1), abandon(0), done(1), next(0, 1, 0, 2),
		}},
		{"an abandoned batch with nothing after it bumps the epoch", 0, []seqStep{
			next(0, 1, 0, 0), abandon(0), next(0, 1, 1, 0),
		}},
		{"OUT_OF_ORDER while unresolved waits, then the epoch is bumped", 0, []seqStep{
			next(0, 1, 0, 0), next(0, 1, 0, 1), abandon(0),
			retry(1, ErrOutOfOrderSequence, 0, 1), abandon(1), next(0, 1, 1, 0),
		}},
		{"the last epoch needs a new producer id", math.MaxInt16, []seqStep{
			next(0, 1, math.MaxInt16, 0),
			fail(0, ErrOutOfOrderSequence, ErrNoProducerID),
			{do: "next", part: 0, n: 1, wantErr: ErrNoProducerID},
			{do: "reset", pid: 8},
			{do: "next", part: 0, n: 1, pid: 8, epoch: 0, seq: 0},
		}},
		{"an answer to a batch not in flight", 0, []seqStep{
			next(0, 1, 0, 0), done(0), fail(0, nil, ErrUnknownBatch),
			{do: "abandon", b: 0, wantErr: ErrUnknownBatch},
		}},
		{"sequences wrap from MaxInt32 to 0", 0, []seqStep{
			next(0, math.MaxInt32, 0, 0), next(0, 2, 0, math.MaxInt32), next(0, 1, 0, 1),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSequencer(7, tc.start)
			var sent []SequencedBatch // each batch as last sent
			for i, st := range tc.steps {
				switch st.do {
				case "next":
					b, err := s.Next(TopicPartition{Topic: "t", Partition: st.part}, st.n)
					if st.wantErr != nil {
						require.ErrorIs(t, err, st.wantErr, "step %d", i)
						continue
					}
					require.NoError(t, err, "step %d", i)
					checkStamp(t, i, b, st)
					sent = append(sent, b)
				case "answer":
					d := s.Answer(sent[st.b], st.err, st.retriable)
					require.Equal(t, st.want, d.Action, "step %d: %v", i, d.Err)
					require.Equal(t, sent[st.b].ID, d.Batch.ID, "step %d", i)
					switch d.Action {
					case Retry:
						checkStamp(t, i, d.Batch, st)
						sent[st.b] = d.Batch
					case Fail:
						require.ErrorIs(t, d.Err, st.wantErr, "step %d", i)
					}
				case "abandon":
					err := s.Abandon(sent[st.b])
					if st.wantErr != nil {
						require.ErrorIs(t, err, st.wantErr, "step %d", i)
					} else {
						require.NoError(t, err, "step %d", i)
					}
				case "reset":
					s.Reset(st.pid, st.epoch)
				}
			}
		})
	}
}

func checkStamp(t *testing.T, step int, b SequencedBatch, st seqStep) {
	t.Helper()
	pid := st.pid
	if pid == 0 {
		pid = 7
	}
	require.Equal(t, [3]int64{pid, int64(st.epoch), int64(st.seq)}, [3]int64{b.ProducerID, int64(b.Epoch), int64(b.BaseSequence)},
		"step %d: producer id, epoch, base sequence", step)
}

// TestSequencerAgainstProducerState: a Sequencer's batches sent to a
// partition's State over a connection that breaks at random, as Kafka's
// producer sees one: requests are delivered in order, and when the
// connection breaks, the requests in flight are answered with a timeout
// whether they were delivered (a prefix of them) or not. Every batch is
// appended exactly once, in the order stamped: what the Sequencer decides
// is what the partition's rules (Validate) expect.
func TestSequencerAgainstProducerState(t *testing.T) {
	st, err := NewState(0, Config{})
	require.NoError(t, err)
	offset := int64(0)
	appended := map[uint64]int{} // batch ID -> times appended
	var order []uint64
	deliver := func(b SequencedBatch) error {
		a, err := st.Validate(OriginClient, BatchInfo{ProducerID: b.ProducerID, ProducerEpoch: b.Epoch, BaseSequence: b.BaseSequence,
			BaseOffset: offset, LastOffset: offset + int64(b.Records) - 1})
		if err != nil || a.Duplicate != nil {
			return err
		}
		if _, err := st.Commit(a); err != nil {
			return err
		}
		offset += int64(b.Records)
		appended[b.ID]++
		order = append(order, b.ID)
		return nil
	}
	const batches = 3000
	s := NewSequencer(1, 0)
	tp := TopicPartition{Topic: "t", Partition: 0}
	rng := rand.New(rand.NewPCG(3, 9))
	var inFlight []SequencedBatch // sent, in order
	answer := func(b SequencedBatch, err error, retriable bool) {
		d := s.Answer(b, err, retriable)
		require.NotEqual(t, Fail, d.Action, "batch %d: %v", b.ID, d.Err)
		if d.Action == Retry {
			inFlight = append(inFlight, d.Batch)
		}
	}
	for made := 0; made < batches || len(inFlight) > 0; {
		if made < batches && rng.IntN(2) == 0 {
			if b, err := s.Next(tp, 1+rng.IntN(3)); err == nil {
				inFlight = append(inFlight, b)
				made++
				continue
			}
		}
		if len(inFlight) == 0 {
			continue
		}
		if rng.IntN(6) > 0 { // the head is delivered and answered
			b := inFlight[0]
			inFlight = inFlight[1:]
			answer(b, deliver(b), false)
			continue
		}
		// The connection breaks: a prefix of the requests in flight was
		// delivered, and every one is answered with a timeout.
		broken := inFlight
		inFlight = nil
		delivered := rng.IntN(len(broken) + 1)
		for i, b := range broken {
			if i < delivered {
				_ = deliver(b) // its answer is lost
			}
			answer(b, errTimeout, true)
		}
	}
	for id := uint64(1); id <= batches; id++ {
		require.Equal(t, 1, appended[id], "batch %d appended once", id)
	}
	require.IsIncreasing(t, order, "batches appended in the order stamped")
}

// ExampleSequencer: a producer of its own sends a batch, loses the answer,
// and retries with the same stamp; the partition answers the retry as a
// duplicate, which is success.
func ExampleSequencer() {
	s := NewSequencer(42, 0)
	tp := TopicPartition{Topic: "orders", Partition: 0}
	b, _ := s.Next(tp, 3)
	fmt.Printf("send producer %d epoch %d sequence %d\n", b.ProducerID, b.Epoch, b.BaseSequence)

	d := s.Answer(b, errTimeout, true)
	fmt.Printf("%v: send sequence %d again\n", d.Action, d.Batch.BaseSequence)

	d = s.Answer(d.Batch, ErrDuplicateSequence, false)
	fmt.Println(d.Action)

	b, _ = s.Next(tp, 1)
	fmt.Printf("next sequence %d\n", b.BaseSequence)
	// Output:
	// send producer 42 epoch 0 sequence 0
	// Retry: send sequence 0 again
	// Done
	// next sequence 3
}
