package group

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
)

func (h *harness) txnCommit(req TxnOffsetCommitRequest) *TxnOffsetCommitResponse {
	id := h.id()
	h.c.TxnOffsetCommit(id, req)
	h.drain()
	return h.resps[id].(*TxnOffsetCommitResponse)
}

func txnOne(producer int64, generation int32, memberID string, partition int32, offset int64) TxnOffsetCommitRequest {
	return TxnOffsetCommitRequest{GroupID: "g", Producer: idempotence.ProducerIDAndEpoch{ProducerID: producer, Epoch: 1}, GenerationID: generation, MemberID: memberID,
		Topics: []OffsetCommitTopic{{Name: "t", Partitions: []OffsetCommitPartition{{Partition: partition, Offset: offset, LeaderEpoch: -1}}}}}
}

// txn commits offset for partition 0 in a transaction of the producer and
// ends it with a COMMIT or ABORT marker.
func (h *harness) txn(producer, offset int64, commit bool) {
	require.NoError(h.t, h.txnCommit(txnOne(producer, -1, "", 0, offset)).Err)
	h.marker(producer, commit)
}

func (h *harness) offset(partition int32) int64 {
	f := h.fetch(OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{partition}}}})
	return f.Topics[0].Partitions[0].Offset
}

// The transactional rules of OffsetMetadataManager (replay,
// replayEndTransactionMarker) and its OffsetMetadataManagerTest.
func TestTransactionalOffsets(t *testing.T) {
	t.Run("a transactional commit counts at its producer's COMMIT marker, and an ABORT drops it", func(t *testing.T) {
		h := newHarness(t, noDelay)
		require.NoError(t, h.txnCommit(txnOne(1, -1, "", 0, 10)).Err)
		rec := h.log[len(h.log)-1]
		assert.Equal(t, &idempotence.ProducerIDAndEpoch{ProducerID: 1, Epoch: 1}, rec.Producer, "the record goes in the producer's transactional batch")
		assert.Equal(t, int64(-1), h.offset(0), "not committed before the marker")
		h.marker(1, true)
		assert.Equal(t, int64(10), h.offset(0))
		h.txn(1, 20, false)
		assert.Equal(t, int64(10), h.offset(0))
		checkReplay(t, h)
	})
	t.Run("G26 a transactional commit while CompletingRebalance is accepted", func(t *testing.T) {
		h := newHarness(t, noDelay)
		ids, gen := completing(h, 2)
		assert.ErrorIs(t, h.commit(commitOne("g", gen, ids[1], 5)).Err, ErrRebalanceInProgress)
		assert.NoError(t, h.txnCommit(txnOne(1, gen, ids[1], 0, 5)).Err)
		assert.ErrorIs(t, h.txnCommit(txnOne(1, gen+1, ids[1], 0, 5)).Err, ErrIllegalGeneration, "a zombie is fenced (KIP-447)")
		assert.ErrorIs(t, h.txnCommit(txnOne(1, 3, "m", 0, 5)).Err, ErrUnknownMemberID)
		missing := txnOne(1, 1, "m", 0, 5)
		missing.GroupID = "nobody"
		assert.ErrorIs(t, h.txnCommit(missing).Err, ErrIllegalGeneration, "a missing group is ILLEGAL_GENERATION at every version")
	})
	t.Run("G29 an offset with a transactional commit pending does not expire", func(t *testing.T) {
		h := expiring(t)
		commitTopics(h, -1, "", 0, "t")
		require.NoError(t, h.txnCommit(txnOne(7, -1, "", 0, 3)).Err)
		h.advance(2 * time.Hour)
		assert.Equal(t, int64(1), h.offset(0), "kept while the transaction is open")
		assert.Contains(t, h.c.groups, "g")
		h.marker(7, false)
		h.advance(time.Minute)
		assert.NotContains(t, h.c.groups, "g", "expired once the transaction ended")
		checkReplay(t, h)
	})
	t.Run("G30 a plain commit written after a staged transactional one wins at the COMMIT marker", func(t *testing.T) {
		h := newHarness(t, noDelay)
		require.NoError(t, h.txnCommit(txnOne(1, -1, "", 0, 8)).Err)
		require.NoError(t, h.commit(commitOne("g", -1, "", 10)).Err)
		h.marker(1, true)
		assert.Equal(t, int64(10), h.offset(0))
		// The other order: the transactional commit is later in the log.
		require.NoError(t, h.commit(commitOne("g", -1, "", 11)).Err)
		h.txn(2, 12, true)
		assert.Equal(t, int64(12), h.offset(0))
		checkReplay(t, h)
	})
	t.Run("G31 a stable fetch gets UNSTABLE_OFFSET_COMMIT for the partitions a transaction may still change", func(t *testing.T) {
		h := newHarness(t, noDelay)
		commitTopics(h, -1, "", 0, "t")
		require.NoError(t, h.txnCommit(txnOne(1, -1, "", 0, 3)).Err)
		req := OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0, 1}}}, RequireStable: true}
		f := h.fetch(req).Topics[0].Partitions
		assert.ErrorIs(t, f[0].Err, ErrUnstableOffsetCommit)
		assert.Equal(t, int64(-1), f[0].Offset)
		assert.NoError(t, f[1].Err)
		req.RequireStable = false
		assert.Equal(t, int64(1), h.fetch(req).Topics[0].Partitions[0].Offset, "without RequireStable, the committed offset")
		h.marker(1, true)
		req.RequireStable = true
		assert.Equal(t, int64(3), h.fetch(req).Topics[0].Partitions[0].Offset)
	})
	t.Run("deleting a group or an offset drops what open transactions staged for it", func(t *testing.T) {
		h := newHarness(t, noDelay)
		require.NoError(t, h.txnCommit(txnOne(1, -1, "", 0, 3)).Err)
		require.NoError(t, h.txnCommit(txnOne(1, -1, "", 1, 4)).Err)
		id := h.id()
		h.c.OffsetDelete(id, OffsetDeleteRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
		h.drain()
		require.NoError(t, h.resps[id].(*OffsetDeleteResponse).Err)
		id = h.id()
		h.c.DeleteGroup(id, "g")
		h.drain()
		require.NoError(t, h.resps[id].(*DeleteGroupResponse).Err)
		h.marker(1, true)
		assert.Empty(t, h.c.offsets.byGroup, "nothing staged is left to commit")
		checkReplay(t, h)
	})
	t.Run("a live marker must come at the log's next offset", func(t *testing.T) {
		h := newHarness(t, noDelay)
		require.NoError(t, h.txnCommit(txnOne(1, -1, "", 0, 3)).Err)
		assert.Error(t, h.c.ReplayTxnMarker(int64(len(h.log))+1, 1, true))
		assert.Error(t, h.c.ReplayTxnMarker(int64(len(h.log))-1, 1, true))
	})
}
