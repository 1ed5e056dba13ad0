package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// TxnCommitter returns the Service as a log.TxnOffsetCommitter: the group
// coordinator of a Dir's transactions (KIP-98, KIP-447). With it a
// log.TransactionalProducer commits a group's offsets in its transaction
// (CommitOffsets), and the Dir's transaction coordinator writes the
// transaction's marker on the group's partition of the offsets topic
// through the Service, which applies the offsets at a COMMIT marker and
// drops them at an ABORT one. A Service over a Dir's own offsets topic
// routes that topic's markers here from OpenService to Close
// (Dir.RouteMarkers), so that every end of a transaction reaches it. A
// server that answers AddOffsetsToTxn itself adds that partition to the
// transaction with Transactions.AddPartitions.
//
// A crash after the transaction was decided and before its markers were
// written is completed when the Dir opens again: the Dir writes the
// markers to the offsets topic, and the Service, opened after, replays
// them with the rest of its log.
func (s *Service) TxnCommitter() log.TxnOffsetCommitter { return txnCommitter{s} }

// txnCommitter is the Service seen by the Dir's transaction coordinator.
type txnCommitter struct{ s *Service }

// TxnOffsetsPartition returns the partition of the offsets topic that
// holds group.
func (t txnCommitter) TxnOffsetsPartition(group string) (string, int32, error) {
	return t.s.topic, int32(t.s.partitionOf(group)), nil
}

// TxnOffsetCommit commits req's offsets in its producer's transaction
// (Service.TxnCommitOffsets); the first error of the request or of a
// partition is returned, with the partition it was on.
func (t txnCommitter) TxnOffsetCommit(ctx context.Context, req log.TxnOffsetCommit) error {
	r, err := t.s.TxnCommitOffsets(ctx, txnOffsetCommitRequest(req))
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err
	}
	var errs []error
	for _, tr := range r.Topics {
		for _, pr := range tr.Partitions {
			if pr.Err != nil {
				errs = append(errs, fmt.Errorf("group %s, %s-%d: %w", req.Group, tr.Name, pr.Partition, pr.Err))
			}
		}
	}
	return errors.Join(errs...)
}

// txnOffsetCommitRequest is req in the terms of Service, each topic's
// offsets together in the order they came.
func txnOffsetCommitRequest(req log.TxnOffsetCommit) TxnOffsetCommitRequest {
	out := TxnOffsetCommitRequest{
		GroupID:         req.Group,
		Producer:        req.Producer,
		GenerationID:    req.GenerationID,
		MemberID:        req.MemberID,
		GroupInstanceID: req.GroupInstanceID,
	}
	index := map[string]int{}
	for _, o := range req.Offsets {
		i, ok := index[o.Topic]
		if !ok {
			i = len(out.Topics)
			index[o.Topic] = i
			out.Topics = append(out.Topics, OffsetCommitTopic{Name: o.Topic})
		}
		out.Topics[i].Partitions = append(out.Topics[i].Partitions, OffsetCommitPartition{
			Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata})
	}
	return out
}

// WriteTxnMarker appends the coordinator's marker to a partition of the
// offsets topic and applies it (see Service.EndTxn), once every record
// the partition's coordinator made before it is written. Unlike EndTxn it
// writes the marker even where the producer has nothing pending: the
// partition is in the transaction, and the log's transaction on it ends
// only with its marker.
func (t txnCommitter) WriteTxnMarker(ctx context.Context, topic string, partition int32, marker segment.Batch) error {
	s := t.s
	if topic != s.topic || partition < 0 || int(partition) >= len(s.parts) {
		return fmt.Errorf("%w: transaction marker for %s-%d, the offsets topic is %s with %d partitions",
			ErrNotCoordinator, topic, partition, s.topic, len(s.parts))
	}
	info, err := idempotence.InfoOf(marker)
	if err != nil {
		return fmt.Errorf("group: transaction marker for %s-%d: %w", topic, partition, err)
	}
	sp := s.parts[partition]
	producer := idempotence.ProducerIDAndEpoch{ProducerID: info.ProducerID, Epoch: info.ProducerEpoch}
	commit := info.Marker.Type == idempotence.MarkerCommit
	r, err := send[*endTxnResponse](ctx, s, serviceRequest{part: int(partition), run: func(id RequestID) Response {
		return &endTxnResponse{id: id, err: s.writeMarker(sp, producer, marker, commit)}
	}})
	if err != nil {
		return err
	}
	return r.err
}

// Topic returns the name of the Service's offsets topic.
func (s *Service) Topic() string { return s.topic }
