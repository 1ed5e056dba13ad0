package group

import (
	"context"
	"fmt"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// This file is the transactional side of Service: offsets committed by a
// transactional producer (KIP-447's sendOffsetsToTransaction) are written at
// once to the group's partition of the offsets topic, in a transactional
// batch of the producer, and count only when the producer's transaction
// ends with a COMMIT marker written after them; an ABORT marker drops them
// (Kafka's GroupMetadataManager and OffsetMetadataManager).
//
// A transactional producer plugs in through two calls:
//
//	s.TxnCommitOffsets(ctx, req) // during the transaction, any number of times
//	s.EndTxn(ctx, producer, commit)
//
// EndTxn is the transaction coordinator's WriteTxnMarkers for the offsets
// topic: it writes the marker on every partition of the offsets topic where
// the producer wrote offsets in the transaction, and returns once the
// markers are durable and applied. With a Dir's own transaction
// coordinator (log.Transactions), TxnCommitter is the way in instead: the
// coordinator writes its markers through the Service
// (service_txncommitter.go).
//
// The Dir's log checks a transactional batch's sequence numbers as it
// checks a client's (Kafka's coordinator appends with none). Service keeps
// the sequence of each producer on each partition, learned from the
// batches when it loads, and starts at 0 for a producer or an epoch it has
// not seen, which the log accepts (KIP-360).

// txnProducer is what a partition of the offsets topic holds of a
// transactional producer.
type txnProducer struct {
	epoch int16
	next  int32 // sequence of its next record in epoch
	open  bool  // it wrote offsets that no marker has resolved yet
}

// seen learns the producers of a batch read back at load.
func (sp *servicePartition) seen(b segment.Batch) {
	if !b.Transactional() {
		return
	}
	tp := sp.producers[b.ProducerID()]
	if tp == nil {
		tp = &txnProducer{}
		sp.producers[b.ProducerID()] = tp
	}
	if b.ProducerEpoch() != tp.epoch {
		tp.epoch, tp.next = b.ProducerEpoch(), 0
	}
	if b.Control() {
		tp.open = false
		return
	}
	tp.next, tp.open = b.BaseSequence()+b.LastOffsetDelta()+1, true
}

// checkEpoch fences a producer older than the one the partition has seen.
func (sp *servicePartition) checkEpoch(p idempotence.ProducerIDAndEpoch) error {
	sp.pmu.Lock()
	defer sp.pmu.Unlock()
	if tp := sp.producers[p.ProducerID]; tp != nil && p.Epoch < tp.epoch {
		return errorf(ErrProducerFenced, "producer %d has epoch %d, older than %d", p.ProducerID, p.Epoch, tp.epoch)
	}
	return nil
}

// appendTxn appends a producer's records in a transactional batch with
// appendBatch.
func (sp *servicePartition) appendTxn(p idempotence.ProducerIDAndEpoch, recs []segment.Record, appendBatch func(segment.Batch) (log.AppendResult, error)) (log.AppendResult, error) {
	sp.pmu.Lock()
	defer sp.pmu.Unlock()
	seq := int32(0)
	if tp := sp.producers[p.ProducerID]; tp != nil && tp.epoch == p.Epoch {
		seq = tp.next
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{
		Producer:      &segment.ProducerFields{ID: p.ProducerID, Epoch: p.Epoch, BaseSequence: seq},
		Transactional: true,
	})
	if err != nil {
		return log.AppendResult{}, err
	}
	res, err := appendBatch(b)
	if err != nil {
		return res, err
	}
	sp.producers[p.ProducerID] = &txnProducer{epoch: p.Epoch, next: seq + int32(len(recs)), open: true}
	return res, nil
}

// TxnCommitOffsets commits offsets as part of a producer's transaction
// (TxnOffsetCommit; see Coordinator.TxnOffsetCommit for who may commit). A
// nil error and a nil Err per partition mean the offsets are durable and
// pending: OffsetFetch with RequireStable answers UNSTABLE_OFFSET_COMMIT
// for them until EndTxn resolves them. A producer epoch older than one the
// group's partition has seen is answered PRODUCER_FENCED.
func (s *Service) TxnCommitOffsets(ctx context.Context, req TxnOffsetCommitRequest) (*TxnOffsetCommitResponse, error) {
	part := s.partitionOf(req.GroupID)
	return do[*TxnOffsetCommitResponse](ctx, s, req.GroupID, func(c *Coordinator, id RequestID) {
		err := s.parts[part].checkEpoch(req.Producer)
		if err != nil {
			c.respond(&TxnOffsetCommitResponse{ID: id, Err: err})
			return
		}
		c.TxnOffsetCommit(id, req)
	})
}

// EndTxn ends a producer's transaction on the offsets topic: a COMMIT
// (commit true) or ABORT marker of the producer, at its epoch (the bumped
// one under KIP-890), follows its offsets on every partition where it
// committed some since its last marker. Committed, they become the group's
// offsets, except where a plain commit written after them already replaced
// them; aborted, they are dropped. A producer with nothing pending is done
// at once. The error is nil or wraps PRODUCER_FENCED, the coordinator
// error a failed append of a marker maps to (appendFailed; that partition
// was rolled back to its log) or ErrServiceClosed.
func (s *Service) EndTxn(ctx context.Context, producer idempotence.ProducerIDAndEpoch, commit bool) error {
	for i, sp := range s.parts {
		r, err := send[*endTxnResponse](ctx, s, serviceRequest{part: i, run: func(id RequestID) Response {
			return &endTxnResponse{id: id, err: s.endTxn(sp, producer, commit)}
		}})
		if err == nil {
			err = r.err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// endTxnResponse carries EndTxn's answer.
type endTxnResponse struct {
	id  RequestID
	err error
}

func (r *endTxnResponse) Request() RequestID { return r.id }

// endTxn writes a producer's marker on one partition if it has offsets
// pending there. It runs as a request's run: every record the coordinator
// made is written, and no write is in flight, so the marker follows them
// and the producers are endTxn's alone.
func (s *Service) endTxn(sp *servicePartition, producer idempotence.ProducerIDAndEpoch, commit bool) error {
	tp := sp.producers[producer.ProducerID]
	if tp == nil || !tp.open {
		return nil
	}
	marker := idempotence.Marker{Type: idempotence.MarkerAbort}
	if commit {
		marker.Type = idempotence.MarkerCommit
	}
	b, err := idempotence.AppendMarkerBatch(nil, producer.ProducerID, producer.Epoch, marker, sp.c.now)
	if err != nil {
		return err
	}
	return s.writeMarker(sp, producer, segment.Batch(b), commit)
}

// writeMarker appends a producer's marker batch, durably, applies it to
// the offsets the producer staged, and starts the producer's sequence
// again at a new epoch. It runs as endTxn does.
func (s *Service) writeMarker(sp *servicePartition, producer idempotence.ProducerIDAndEpoch, b segment.Batch, commit bool) error {
	if err := sp.checkEpoch(producer); err != nil {
		return err
	}
	err := s.appendMarker(sp, producer.ProducerID, b, commit)
	if err != nil {
		// As for a failed append of records: the marker may be in the
		// log (written, and then not committed in time) or not.
		err = s.appendFailed(sp, fmt.Errorf("transaction marker of producer %d: %w", producer.ProducerID, err))
		s.rollback(sp, err)
		return err
	}
	next := int32(0)
	if tp := sp.producers[producer.ProducerID]; tp != nil && tp.epoch == producer.Epoch {
		next = tp.next
	}
	sp.pmu.Lock()
	sp.producers[producer.ProducerID] = &txnProducer{epoch: producer.Epoch, next: next}
	sp.pmu.Unlock()
	return nil
}

// appendMarker appends a marker batch, durably, and reports it to the
// coordinator.
func (s *Service) appendMarker(sp *servicePartition, producerID int64, b segment.Batch, commit bool) error {
	var res log.AppendResult
	var err error
	if s.repl == nil {
		res, err = sp.p.AppendMarker(b)
	} else {
		res, err = s.repl(sp.p.ID(), b)
	}
	if err != nil {
		return err
	}
	if sp.sync {
		if err := sp.p.Sync(); err != nil {
			return err
		}
	}
	return sp.c.ReplayTxnMarker(res.BaseOffset, producerID, commit)
}
