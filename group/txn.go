package group

import (
	"fmt"

	"github.com/strandlog/strand"
)

// This file is the transactional side of committed offsets (KIP-98, KIP-447;
// OffsetMetadataManager.commitTransactionalOffset, replay and
// replayEndTransactionMarker). A transactional commit is
// written at once, in a transactional batch of its producer, but counts only
// when that producer's COMMIT marker follows it in the offsets log; an ABORT
// marker drops it.

// pendingTxns holds transactional commits that no marker resolved yet.
type pendingTxns struct {
	byProducer map[int64]*offsetStore
	byGroup    map[string]map[int64]bool // group -> producers with commits staged for it
}

func (p *pendingTxns) stage(producerID int64, k OffsetCommitKey, v committed) {
	if p.byProducer == nil {
		p.byProducer, p.byGroup = map[int64]*offsetStore{}, map[string]map[int64]bool{}
	}
	s := p.byProducer[producerID]
	if s == nil {
		s = &offsetStore{}
		p.byProducer[producerID] = s
	}
	s.put(k, v)
	if p.byGroup[k.Group] == nil {
		p.byGroup[k.Group] = map[int64]bool{}
	}
	p.byGroup[k.Group][producerID] = true
}

// dropPartition forgets what open transactions staged for a partition whose
// offset was deleted; the transactions stay open.
func (p *pendingTxns) dropPartition(k OffsetCommitKey) {
	for pid := range p.byGroup[k.Group] {
		p.byProducer[pid].remove(k)
	}
}

// has reports whether an open transaction staged an offset for k.
func (p *pendingTxns) has(k OffsetCommitKey) bool {
	for pid := range p.byGroup[k.Group] {
		if _, ok := p.byProducer[pid].get(k); ok {
			return true
		}
	}
	return false
}

// keys returns the partitions open transactions staged offsets for, in
// (topic, partition) order.
func (p *pendingTxns) keys(group string) []OffsetCommitKey {
	all := offsetStore{}
	for pid := range p.byGroup[group] {
		for _, k := range p.byProducer[pid].keys(group) {
			all.put(k, committed{})
		}
	}
	return all.keys(group)
}

// open reports whether a transaction with offsets for the group is open.
func (p *pendingTxns) open(group string) bool { return len(p.byGroup[group]) > 0 }

// end closes a producer's transaction and returns what it staged.
func (p *pendingTxns) end(producerID int64) *offsetStore {
	s := p.byProducer[producerID]
	if s == nil {
		return nil
	}
	delete(p.byProducer, producerID)
	// Every group the producer staged for, including those whose staged
	// offsets were all deleted since (dropPartition): the transaction is
	// over for all of them.
	for group, producers := range p.byGroup {
		delete(producers, producerID)
		if len(producers) == 0 {
			delete(p.byGroup, group)
		}
	}
	return s
}

// TxnOffsetCommitRequest commits offsets as part of a producer's
// transaction (TxnOffsetCommit, KIP-447: with the member's generation so
// that a zombie's commit is fenced).
type TxnOffsetCommitRequest struct {
	GroupID         string
	Producer        strand.ProducerIDAndEpoch
	GenerationID    int32
	MemberID        string
	GroupInstanceID string
	Topics          []OffsetCommitTopic
}

// TxnOffsetCommitResponse answers a TxnOffsetCommitRequest: Err for the
// whole request, else one result per partition in request order.
type TxnOffsetCommitResponse struct {
	ID     RequestID
	Err    error
	Topics []TopicResult
}

// Request returns the id of the request r answers.
func (r *TxnOffsetCommitResponse) Request() RequestID { return r.ID }

// TxnOffsetCommit handles a TxnOffsetCommit request. Its records carry the
// producer, and the owner appends them in a transactional batch of it.
func (c *Coordinator) TxnOffsetCommit(id RequestID, req TxnOffsetCommitRequest) {
	resp := &TxnOffsetCommitResponse{ID: id}
	defer c.respond(resp)
	if _, err := c.validateCommit(committer{0, req.GroupID, req.GenerationID, req.MemberID, req.GroupInstanceID}, true); err != nil {
		resp.Err = err
		return
	}
	p := req.Producer
	resp.Topics = c.commit(req.GroupID, req.Topics, -1, &p)
}

// ReplayTxnMarker applies a transaction marker of the offsets log at the
// given offset: on COMMIT the producer's staged offsets become the committed
// ones, except where a commit written later in the log already replaced
// them; on ABORT they are dropped. The owner reports every marker it appends
// to the offsets log, at load and live, between two Readys: live, its offset
// must be the one after the coordinator's last record.
func (c *Coordinator) ReplayTxnMarker(offset, producerID int64, commit bool) error {
	if offset < c.nextOffset || c.loaded && offset != c.nextOffset {
		return fmt.Errorf("group: transaction marker at offset %d, the offsets log's next offset is %d", offset, c.nextOffset)
	}
	c.nextOffset = offset + 1
	staged := c.txns.end(producerID)
	if staged == nil || !commit {
		return nil
	}
	for group, topics := range staged.byGroup {
		for topic, parts := range topics {
			for p, v := range parts {
				k := OffsetCommitKey{Group: group, Topic: topic, Partition: p}
				// Compaction may keep either of a transactional and a plain
				// commit of one partition; the log order decides, so that a
				// replay picks the same (Redpanda #31483).
				if cur, ok := c.offsets.get(k); !ok || v.recordOffset > cur.recordOffset {
					c.offsets.put(k, v)
				}
			}
		}
	}
	return nil
}
