package group

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
)

// fetchOne reads the committed offset of t-0 for group g.
func fetchOne(t *testing.T, s *Service, stable bool) FetchedOffset {
	t.Helper()
	r, err := s.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: "g", RequireStable: stable,
		Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
	require.NoError(t, err)
	require.NoError(t, r.Err)
	return r.Topics[0].Partitions[0]
}

func txnCommit(t *testing.T, s *Service, p idempotence.ProducerIDAndEpoch, offset int64) *TxnOffsetCommitResponse {
	t.Helper()
	r, err := s.TxnCommitOffsets(context.Background(), TxnOffsetCommitRequest{GroupID: "g", Producer: p, GenerationID: -1,
		Topics: []OffsetCommitTopic{{Name: "t", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}})
	require.NoError(t, err)
	return r
}

// Offsets committed in a transaction through Service stay pending until
// the transaction's marker: COMMIT applies them, ABORT drops them
// (OffsetMetadataManager.replayEndTransactionMarker), and a Service opened again over
// the log honours the markers, and a transaction still open, as the live
// one did.
func TestServiceTxnOffsetsCountAtTheMarker(t *testing.T) {
	fs := newMemDataFS(t)
	clock := func() time.Time { return epoch }
	d, s := openMemService(t, fs, 2, clock)
	ctx := context.Background()
	p := idempotence.ProducerIDAndEpoch{ProducerID: 7, Epoch: 0}

	require.NoError(t, serviceCommit(ctx, s, "g", "", -1, "t", 0, 5))
	r := txnCommit(t, s, p, 10)
	require.NoError(t, r.Err)
	require.NoError(t, r.Topics[0].Partitions[0].Err)
	assert.Equal(t, int64(5), fetchOne(t, s, false).Offset, "pending: the plain commit still counts")
	assert.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit)

	require.NoError(t, s.EndTxn(ctx, p, true))
	assert.Equal(t, int64(10), fetchOne(t, s, true).Offset, "committed by the marker")

	require.NoError(t, txnCommit(t, s, p, 20).Err)
	require.NoError(t, s.EndTxn(ctx, p, false))
	assert.Equal(t, int64(10), fetchOne(t, s, true).Offset, "aborted: dropped")

	// A transaction still open when the Service closes is open after.
	require.NoError(t, txnCommit(t, s, p, 30).Err)
	require.NoError(t, s.Close())
	s, err := OpenService(d, ServiceOptions{Partitions: 2, Now: clock, Config: Config{Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	assert.Equal(t, int64(10), fetchOne(t, s, false).Offset)
	assert.ErrorIs(t, fetchOne(t, s, true).Err, ErrUnstableOffsetCommit)
	// The producer goes on in the same transaction: its next batch follows
	// its sequence, which the Service learned from the log.
	require.NoError(t, txnCommit(t, s, p, 31).Err)
	require.NoError(t, s.EndTxn(ctx, p, true))
	assert.Equal(t, int64(31), fetchOne(t, s, true).Offset)

	require.NoError(t, s.Close())
	s, err = OpenService(d, ServiceOptions{Partitions: 2, Now: clock, Config: Config{Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	assert.Equal(t, int64(31), fetchOne(t, s, true).Offset, "replay honours the markers")
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// A producer whose epoch was bumped past (KIP-890 bumps it at every
// EndTxn) is fenced: PRODUCER_FENCED, and nothing is written.
func TestServiceTxnCommitFencesAnOldEpoch(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 1, func() time.Time { return epoch })
	ctx := context.Background()
	require.NoError(t, txnCommit(t, s, idempotence.ProducerIDAndEpoch{ProducerID: 3, Epoch: 0}, 1).Err)
	require.NoError(t, s.EndTxn(ctx, idempotence.ProducerIDAndEpoch{ProducerID: 3, Epoch: 1}, true), "the marker carries the bumped epoch")
	part, err := d.Partition(OffsetsTopic, 0)
	require.NoError(t, err)
	_, _, before, err := part.Offsets()
	require.NoError(t, err)

	r := txnCommit(t, s, idempotence.ProducerIDAndEpoch{ProducerID: 3, Epoch: 0}, 2)
	assert.ErrorIs(t, r.Err, ErrProducerFenced)
	assert.Equal(t, kafkaerr.Code(90), kafkaerr.CodeOf(r.Err))
	require.NoError(t, txnCommit(t, s, idempotence.ProducerIDAndEpoch{ProducerID: 3, Epoch: 1}, 3).Err, "the current epoch commits")
	require.NoError(t, s.EndTxn(ctx, idempotence.ProducerIDAndEpoch{ProducerID: 3, Epoch: 1}, true))
	assert.Equal(t, int64(3), fetchOne(t, s, true).Offset)
	_, _, after, err := part.Offsets()
	require.NoError(t, err)
	assert.Equal(t, before+2, after, "the fenced commit wrote nothing: one record and one marker since")

	assert.ErrorIs(t, s.EndTxn(ctx, idempotence.ProducerIDAndEpoch{ProducerID: 3, Epoch: 1}, true), nil, "nothing pending: nothing to do")
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}
