package replica

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

// The leader checks an idempotent producer's batches as Kafka's does inside
// its append (UnifiedLog.analyzeAndValidateProducerState, ProducerAppendInfo):
// these tests are the rules of issue 21's first part.

// idempotentBatch builds a producer's batch of values starting at seq.
func idempotentBatch(t testingT, pid int64, epoch int16, seq int32, values ...string) []byte {
	recs := make([]segment.Record, len(values))
	for i, v := range values {
		recs[i] = segment.Record{Value: []byte(v), Timestamp: 1}
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Producer: &segment.ProducerFields{ID: pid, Epoch: epoch, BaseSequence: seq}})
	require.NoError(t, err)
	return b
}

// produceBatch steps a Produce of batch on node at and returns its id.
func (c *cluster) produceBatch(at NodeID, acks Acks, batch []byte) (uint64, error) {
	c.nextID++
	err := c.stepOn(at, &Produce{Header: Header{From: client, To: at, Topic: testTopic}, ID: c.nextID, Acks: acks, Batch: batch})
	c.logf("produce batch acks %d to %d: id %d err %v", acks, at, c.nextID, err)
	return c.nextID, err
}

// A retry of a batch the leader has is answered with the original's
// offsets once the high watermark passes them, and appends nothing
// (Kafka's duplicate of one of the last five batches).
func TestLeaderAnswersARetryWithTheOriginalOffsets(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.MinInsyncReplicas = 2 })
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksAll, "before")
	require.NoError(t, err)
	first, err := c.produceBatch(1, AcksAll, idempotentBatch(t, 7, 0, 0, "a", "b"))
	require.NoError(t, err)
	c.stabilize()
	orig := c.result(first)
	require.NoError(t, orig.Err)
	require.False(t, orig.Duplicate)

	retry, err := c.produceBatch(1, AcksAll, idempotentBatch(t, 7, 0, 0, "a", "b"))
	require.NoError(t, err)
	c.stabilize()
	r := c.result(retry)
	require.NoError(t, r.Err)
	require.True(t, r.Duplicate)
	require.Equal(t, [2]int64{orig.BaseOffset, orig.LastOffset}, [2]int64{r.BaseOffset, r.LastOffset})
	require.Equal(t, []string{"before", "a", "b"}, c.values(1), "nothing appended twice")
	c.requireLogsMatch(1, 2, 3)
}

// A retry that arrives while the original's append is still being
// written waits for it: the leader's producer state is ahead of its log
// by the appends it handed out.
func TestRetryOfABatchStillBeingWrittenWaitsForIt(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	p := c.node(1).p
	batch := idempotentBatch(t, 7, 0, 0, "a")
	require.NoError(t, p.Step(&Produce{Header: Header{From: client, To: 1, Topic: testTopic}, ID: 100, Acks: AcksLeader, Batch: batch}))
	rd := p.Ready() // the append is handed out, not applied
	require.Len(t, rd.Writes, 1)

	// The log does not have it yet; the leader's state does.
	require.NoError(t, p.Step(&Produce{Header: Header{From: client, To: 1, Topic: testTopic}, ID: 101, Acks: AcksLeader, Batch: idempotentBatch(t, 7, 0, 0, "a")}))
	// The next batch of the producer follows the pending one.
	require.NoError(t, p.Step(&Produce{Header: Header{From: client, To: 1, Topic: testTopic}, ID: 102, Acks: AcksLeader, Batch: idempotentBatch(t, 7, 0, 1, "b")}))
	rd2 := p.Ready()
	require.Len(t, rd2.Writes, 1, "only the next batch is appended")
	require.Empty(t, rd2.Results, "the retry waits for the original's write")

	require.NoError(t, ApplyWrites(c.node(1).log, rd.Writes))
	require.NoError(t, p.Advance(rd))
	require.NoError(t, ApplyWrites(c.node(1).log, rd2.Writes))
	require.NoError(t, p.Advance(rd2))
	rd3 := p.Ready()
	got := map[uint64]ProduceResult{}
	for _, r := range resultsOf(rd, rd2, rd3) {
		got[r.ID] = r
	}
	require.NoError(t, got[100].Err)
	require.NoError(t, got[101].Err)
	require.True(t, got[101].Duplicate)
	require.Equal(t, got[100].BaseOffset, got[101].BaseOffset)
	require.Equal(t, got[100].BaseOffset+1, got[102].BaseOffset)
	require.Equal(t, []string{"a", "b"}, c.values(1))
}

func resultsOf(rds ...Ready) []ProduceResult {
	var out []ProduceResult
	for _, rd := range rds {
		out = append(out, rd.Results...)
	}
	return out
}

// A follower holding a producer's batch does not answer its retry: only
// the leader in its current epoch may (the bug of issue 21: a deposed or
// restarted leader answered from its own producer state, and its log was
// then truncated under the acknowledged offset).
func TestOnlyTheLeaderAnswersARetry(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	first, err := c.produceBatch(1, AcksAll, idempotentBatch(t, 7, 0, 0, "a"))
	require.NoError(t, err)
	c.stabilize()
	require.NoError(t, c.result(first).Err)
	require.Equal(t, []string{"a"}, c.values(2), "the follower has the batch")
	_, err = c.produceBatch(2, AcksAll, idempotentBatch(t, 7, 0, 0, "a"))
	require.ErrorIs(t, err, ErrNotLeaderOrFollower)
}

// A retry waiting on a leader for the high watermark fails with
// NOT_LEADER_OR_FOLLOWER when the leader is deposed, as every waiting
// produce does (DelayedProduce): the new leader answers the next retry.
func TestDeposedLeaderFailsAWaitingRetry(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) { cfg.MinInsyncReplicas = 2 })
	c.elect(1)
	c.stabilize()
	c.drop = func(m Message) bool { h := m.Head(); return h.From == 1 || h.To == 1 && h.From != client } // cut off
	first, err := c.produceBatch(1, AcksAll, idempotentBatch(t, 7, 0, 0, "a"))
	require.NoError(t, err)
	retry, err := c.produceBatch(1, AcksAll, idempotentBatch(t, 7, 0, 0, "a"))
	require.NoError(t, err)
	c.elect(2, 2, 3)
	c.stabilize() // node 1 neither replicates nor hears of it
	c.drop = nil
	c.announce(NoNode)
	c.stabilize()
	for _, id := range []uint64{first, retry} {
		require.ErrorIs(t, c.result(id).Err, ErrNotLeaderOrFollower, "produce %d", id)
	}
	again, err := c.produceBatch(2, AcksAll, idempotentBatch(t, 7, 0, 0, "a"))
	require.NoError(t, err)
	c.stabilize()
	r := c.result(again)
	require.NoError(t, r.Err)
	require.False(t, r.Duplicate, "the new leader never had it")
	c.requireLogsMatch(1, 2, 3)
	require.Equal(t, []string{"a"}, c.values(1), "the deposed leader's copy was truncated")
}

// The leader refuses what Kafka's producer state refuses, with Kafka's
// codes: a gap in the sequence, an older producer epoch, a client's
// control batch, a non-transactional batch inside an open transaction.
// A coordinator's marker is checked for its epochs only.
func TestLeaderRefusesWhatTheProducerStateRefuses(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	_, err := c.produceBatch(1, AcksLeader, idempotentBatch(t, 7, 3, 0, "a"))
	require.NoError(t, err)
	c.stabilize()
	txn, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("t")}}, segment.BuildOptions{
		Producer: &segment.ProducerFields{ID: 8, Epoch: 0, BaseSequence: 0}, Transactional: true})
	require.NoError(t, err)
	_, err = c.produceBatch(1, AcksLeader, txn)
	require.NoError(t, err)
	c.stabilize()
	marker := func(epoch int16, coordinatorEpoch int32) []byte {
		b, err := idempotence.AppendMarkerBatch(nil, 8, epoch, idempotence.Marker{Type: idempotence.MarkerCommit, CoordinatorEpoch: coordinatorEpoch}, 1)
		require.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		name  string
		batch []byte
		coord bool
		want  error
	}{
		{"a gap in the sequence", idempotentBatch(t, 7, 3, 5, "x"), false, idempotence.ErrOutOfOrderSequence},
		{"an older producer epoch", idempotentBatch(t, 7, 2, 1, "x"), false, idempotence.ErrInvalidProducerEpoch},
		{"a new epoch not at sequence 0", idempotentBatch(t, 7, 4, 1, "x"), false, idempotence.ErrOutOfOrderSequence},
		{"a client's control batch", marker(0, 0), false, idempotence.ErrInvalidRecord},
		{"a plain batch in an open transaction", idempotentBatch(t, 8, 0, 1, "x"), false, idempotence.ErrInvalidTxnState},
		{"a coordinator's marker", marker(0, 0), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.nextID++
			err := c.stepOn(1, &Produce{Header: Header{From: client, To: 1, Topic: testTopic}, ID: c.nextID, Acks: AcksLeader, Batch: tc.batch, Coordinator: tc.coord})
			if tc.want == nil {
				require.NoError(t, err)
				c.stabilize()
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tc.want, CodeOf(err), "the wire code is Kafka's")
		})
	}
	values := c.values(1)
	require.Equal(t, []string{"a", "t"}, values[:2])
	require.Len(t, values, 3, "only the coordinator's marker was appended")
}

// The result's Duplicate and the coordinator origin go on the wire.
func TestProduceOriginAndDuplicateRoundTrip(t *testing.T) {
	for _, m := range []Message{
		&Produce{Header: Header{From: 1, To: 2, Topic: "t"}, ID: 3, Acks: AcksAll, Batch: []byte("b"), Coordinator: true},
		&ProduceResult{Header: Header{From: 2, To: 1, Topic: "t"}, ID: 3, BaseOffset: 4, LastOffset: 5, Duplicate: true},
	} {
		b, err := m.MarshalBinary()
		require.NoError(t, err)
		got, err := Decode(b)
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
}
