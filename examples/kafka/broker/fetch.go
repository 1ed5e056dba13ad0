package broker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
)

// isolation maps a request's isolation level (0 read_uncommitted,
// 1 read_committed) to the log's.
func isolation(level int8) log.Isolation {
	if level == 1 {
		return log.ReadCommitted
	}
	return log.ReadUncommitted
}

// checkEpoch compares a client's current leader epoch with the partition's
// (KIP-320): an older one is FENCED_LEADER_EPOCH, a newer one
// UNKNOWN_LEADER_EPOCH; -1 skips the check.
func checkEpoch(current, epoch int32) error {
	switch {
	case current == -1 || current == epoch:
		return nil
	case current < epoch:
		return fmt.Errorf("%w: client epoch %d, leader epoch %d", kafkaerr.ErrFencedLeaderEpoch, current, epoch)
	default:
		return fmt.Errorf("%w: client epoch %d, leader epoch %d", kafkaerr.ErrUnknownLeaderEpoch, current, epoch)
	}
}

// fetchPartition is one partition of a fetch in progress.
type fetchPartition struct {
	p       *log.Partition
	req     *kmsg.FetchRequestTopicPartition
	resp    *kmsg.FetchResponseTopicPartition
	batches *log.Batches // what the response holds, still in the segment file
	next    int64        // the offset to wait for: the end of what could be read
}

// fetch reads whole batches, as stored, from one segment per partition (as
// Kafka's LogSegment.read does) and, until MinBytes are gathered or
// MaxWaitMillis passes, waits for more (a long poll). The batches stay in
// the segment files until the response is written: see fetchResponse.
// The partitions it reads are the request's, or for an incremental fetch
// its session's (fetchsession.go).
func (b *Broker) fetch(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	session, err := b.sessions.open(req, b.topicName)
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	iso := isolation(req.IsolationLevel)
	maxBytes := int64(req.MaxBytes)
	if req.Version < 3 || maxBytes <= 0 {
		maxBytes = math.MaxInt32
	}
	out := &fetchResponse{FetchResponse: resp, sentinel: newSentinel()}
	var parts []*fetchPartition
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	for i := range req.Topics {
		t := &req.Topics[i]
		rt := &resp.Topics[i]
		*rt = kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		var denied error
		if t.Topic != "" { // else unknown by its id
			denied = b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic)
		}
		for j := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.RecordBatches = t.Partitions[j].Partition, []byte{}
			if denied != nil {
				rp.ErrorCode = code(denied)
				continue
			}
			p, _, err := b.leaderPartition(t.Topic, rp.Partition, t.Partitions[j].CurrentLeaderEpoch)
			if err != nil {
				rp.ErrorCode = code(err)
				continue
			}
			parts = append(parts, &fetchPartition{p: p, req: &t.Partitions[j], resp: rp})
		}
	}
	deadline := time.Now().Add(time.Duration(req.MaxWaitMillis) * time.Millisecond)
	for {
		var total int64
		for _, fp := range parts {
			total += out.read(fp, iso, maxBytes-total)
		}
		if total >= int64(req.MinBytes) || !time.Now().Before(deadline) || len(parts) == 0 ||
			!waitAny(ctx, deadline, parts, iso) {
			session.respond(resp)
			for _, fp := range parts {
				if fp.batches != nil {
					out.sets = append(out.sets, fp.batches)
				}
			}
			return out
		}
	}
}

// read fills a partition's response with batches from its fetch offset,
// at most room bytes (but at least one batch, KIP-74, when room is left),
// and returns the bytes it holds.
func (out *fetchResponse) read(fp *fetchPartition, iso log.Isolation, room int64) int64 {
	rp := fp.resp
	if fp.batches != nil {
		fp.batches.Close()
		fp.batches = nil
	}
	// Empty, not null: librdkafka refuses a null record set.
	rp.RecordBatches, rp.AbortedTransactions, rp.ErrorCode = []byte{}, nil, 0
	start, hw, _, err := fp.p.Offsets()
	if err == nil {
		rp.LogStartOffset, rp.HighWatermark = start, hw
		rp.LastStableOffset, err = fp.p.LastStableOffset()
	}
	if err != nil {
		rp.ErrorCode = code(err)
		return 0
	}
	if iso == log.ReadCommitted {
		fp.next = rp.LastStableOffset
		rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
	} else {
		fp.next = hw
	}
	limit := min(int64(fp.req.PartitionMaxBytes), room)
	if limit <= 0 {
		return 0
	}
	batches, err := fp.p.Read(fp.req.FetchOffset, int(min(limit, math.MaxInt32)), iso)
	if err != nil {
		rp.ErrorCode = code(err)
		return 0
	}
	n := batches.Len()
	if n == 0 {
		batches.Close()
		return 0
	}
	fp.batches, rp.RecordBatches = batches, out.sentinel
	for _, a := range batches.Aborted {
		rp.AbortedTransactions = append(rp.AbortedTransactions, kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	return n
}

// waitAny waits until one of the partitions has records past what the
// response holds, or the deadline; it reports whether one has.
func waitAny(ctx context.Context, deadline time.Time, parts []*fetchPartition, iso log.Isolation) bool {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	woke := make(chan struct{}, len(parts))
	for _, fp := range parts {
		if fp.resp.ErrorCode != 0 {
			continue
		}
		next := fp.next // read goes on writing it once waitAny returns
		go func() {
			if fp.p.Wait(ctx, next, iso) == nil {
				woke <- struct{}{}
			}
		}()
	}
	select {
	case <-woke:
		return true
	case <-ctx.Done():
		return false
	}
}

// listOffsets answers the earliest offset (-2), the latest (-1: the high
// watermark, or for read_committed the last stable offset) or the first
// offset whose timestamp is at or after a time.
func (b *Broker) listOffsets(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	iso := isolation(req.IsolationLevel)
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		denied := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, tp := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = tp.Partition
			rp.Timestamp, rp.Offset, rp.LeaderEpoch = -1, -1, -1
			rp.ErrorCode = code(cmp.Or(denied, b.listOffset(t.Topic, &tp, iso, &rp)))
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (b *Broker) listOffset(topic string, tp *kmsg.ListOffsetsRequestTopicPartition, iso log.Isolation, rp *kmsg.ListOffsetsResponseTopicPartition) error {
	p, epoch, err := b.leaderPartition(topic, tp.Partition, tp.CurrentLeaderEpoch)
	if err != nil {
		return err
	}
	start, hw, _, err := p.Offsets()
	if err != nil {
		return err
	}
	end := hw
	if iso == log.ReadCommitted {
		if end, err = p.LastStableOffset(); err != nil {
			return err
		}
	}
	rp.LeaderEpoch = epoch
	lagging := b.hwLagging(topic, tp.Partition, epoch, hw)
	switch tp.Timestamp {
	case log.EarliestTimestamp:
		rp.Offset = start
		return nil
	case log.LatestTimestamp:
		if lagging != nil {
			return lagging
		}
		rp.Offset = end
		return nil
	}
	if tp.Timestamp < 0 {
		return fmt.Errorf("%w: timestamp %d", kafkaerr.ErrUnsupportedVersion, tp.Timestamp)
	}
	offset, ok, err := p.OffsetForTimestamp(tp.Timestamp)
	if err != nil {
		return err
	}
	if !ok || offset >= end {
		return lagging // nil: not found, offset and timestamp -1, as Kafka answers
	}
	// Kafka answers with the found record's own timestamp.
	for rec, err := range p.Records(offset, log.ReadUncommitted) {
		if err != nil {
			return err
		}
		if rec.Offset >= offset && rec.Timestamp >= tp.Timestamp {
			rp.Offset, rp.Timestamp = rec.Offset, rec.Timestamp
			break
		}
	}
	return nil
}

// hwLagging returns OFFSET_NOT_AVAILABLE if the cluster's leader of a
// partition does not know its high watermark yet in its leader epoch: hw
// is below where the epoch began (Kafka's Partition.fetchOffsetForTimestamp
// with leaderEpochStartOffsetOpt), or the leader has not taken the epoch
// up.
func (b *Broker) hwLagging(topic string, partition, epoch int32, hw int64) error {
	c, ok := b.cluster.(LeaderEpochStarts)
	if !ok {
		return nil
	}
	start, ok := c.LeaderEpochStartOffset(topic, partition, epoch)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s-%d: this broker has not taken up leader epoch %d yet", kafkaerr.ErrOffsetNotAvailable, topic, partition, epoch)
	case hw < start:
		return fmt.Errorf("%w: %s-%d: the high watermark %d is below %d, where leader epoch %d began", kafkaerr.ErrOffsetNotAvailable, topic, partition, hw, start, epoch)
	}
	return nil
}

// offsetForLeaderEpoch answers where an epoch ended in a partition's log
// (KIP-101 and KIP-279), which a consumer asks after a leader change to find
// out whether its position was truncated away (KIP-320).
func (b *Broker) offsetForLeaderEpoch(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		denied := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, tp := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition = tp.Partition
			rp.LeaderEpoch, rp.EndOffset = log.UndefinedEpoch, log.UndefinedEpochOffset
			err := denied
			var p *log.Partition
			if err == nil {
				p, _, err = b.leaderPartition(t.Topic, tp.Partition, tp.CurrentLeaderEpoch)
			}
			if err == nil {
				rp.LeaderEpoch, rp.EndOffset, err = p.EndOffsetForEpoch(tp.LeaderEpoch)
			}
			rp.ErrorCode = code(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
