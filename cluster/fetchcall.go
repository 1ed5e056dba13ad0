package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// FetchResult is what a consumer's read of a partition returns (Kafka's
// FetchResponse partition): whole batches, and the offsets the reader
// needs.
type FetchResult struct {
	// Records are whole RecordBatch v2 batches from the offset read, the
	// first of them holding it; none at the isolation's bound.
	Records []byte
	// HighWatermark, LastStableOffset and LogStartOffset are the
	// partition's at its leader when it answered.
	HighWatermark, LastStableOffset, LogStartOffset int64
	// Aborted are, for a ReadCommitted read, the aborted transactions the
	// batches may hold records of (log.Batches.Aborted): a reader drops
	// them (idempotence.NewAbortedFilter).
	Aborted []idempotence.AbortedTxn
}

// Fetch reads a partition at its leader, as Node.Read does, on this node
// if it leads the partition and otherwise by a request to the leader: up
// to maxBytes (at least one whole batch) from offset, below the high
// watermark (log.ReadUncommitted) or the last stable offset
// (log.ReadCommitted). A partition whose leader is not live, or moves,
// is looked up again after RetryBackoff until ctx ends. An offset outside
// the log is an error matching replica.ErrOffsetOutOfRange, with the
// result's offsets set, so that the reader can reset its position; a
// partition the cluster does not have, replica.ErrUnknownTopicOrPartition.
func (n *Node) Fetch(ctx context.Context, topic string, partition int32, offset int64, maxBytes int, iso log.Isolation) (FetchResult, error) {
	if maxBytes < 0 || maxBytes > 1<<31-1 {
		return FetchResult{}, fmt.Errorf("%w: fetch of %s-%d: maxBytes %d", replica.ErrInvalidRequest, topic, partition, maxBytes)
	}
	r := &fetchRequest{Topic: topic, Partition: partition, Offset: offset, MaxBytes: int32(maxBytes), Isolation: iso}
	for {
		if n.Metadata().Partition(topic, partition) == nil {
			return FetchResult{}, fmt.Errorf("%w: fetch of %s-%d: no such partition in the metadata of node %d",
				replica.ErrUnknownTopicOrPartition, topic, partition, n.cfg.ID)
		}
		res, err := n.fetchOnce(ctx, r)
		if err != nil && ctx.Err() != nil {
			// The leader's error may be its answer to ctx's end.
			return FetchResult{}, fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		// A leader that has not applied the metadata naming it yet has no
		// replica of the partition.
		if !errorsIsAny(err, replica.ErrNotLeaderOrFollower, replica.ErrUnknownTopicOrPartition, replica.ErrStopped, ErrUnreachable) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return FetchResult{}, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(n.cfg.RetryBackoff):
		}
	}
}

func (n *Node) fetchOnce(ctx context.Context, r *fetchRequest) (FetchResult, error) {
	switch leader := n.liveLeader(r.Topic, r.Partition); leader {
	case replica.NoNode:
		return FetchResult{}, fmt.Errorf("%w: %s-%d has no live leader", replica.ErrNotLeaderOrFollower, r.Topic, r.Partition)
	case n.cfg.ID:
		return n.fetchHere(ctx, r)
	default:
		call, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
		a, err := n.call(call, leader, r)
		if err == nil {
			var res FetchResult
			if res, err = decodeFetchAnswer(a.Payload); err == nil || call.Err() == nil {
				return res, err
			}
		}
		if call.Err() != nil && !errors.Is(err, ErrUnreachable) {
			// The leader answered the end of the call: slower than
			// RequestTimeout.
			err = fmt.Errorf("%w: %s-%d at node %d: %w", ErrUnreachable, r.Topic, r.Partition, leader, err)
		}
		return FetchResult{}, err
	}
}

// fetchHere reads a partition this node leads.
func (n *Node) fetchHere(ctx context.Context, r *fetchRequest) (FetchResult, error) {
	if r.Isolation != log.ReadCommitted && r.Isolation != log.ReadUncommitted {
		return FetchResult{}, fmt.Errorf("%w: fetch of %s-%d: isolation %d, a consumer reads committed or uncommitted",
			replica.ErrInvalidRequest, r.Topic, r.Partition, r.Isolation)
	}
	bs, err := n.Read(ctx, r.Topic, r.Partition, r.Offset, int(r.MaxBytes), r.Isolation)
	outOfRange := errors.Is(err, log.ErrOffsetOutOfRange)
	if err != nil && !outOfRange {
		return FetchResult{}, err
	}
	if bs != nil {
		defer bs.Close()
	}
	// The offsets after the read: at least where the batches end.
	var res FetchResult
	p, lerr := n.Log(r.Topic, r.Partition)
	if lerr == nil {
		res.LogStartOffset, res.HighWatermark, _, lerr = p.Offsets()
	}
	if lerr == nil {
		res.LastStableOffset, lerr = p.LastStableOffset()
	}
	switch {
	case lerr != nil:
		return FetchResult{}, lerr
	case outOfRange:
		return res, fmt.Errorf("%w: %w", replica.ErrOffsetOutOfRange, err)
	}
	if res.Records, err = bs.Bytes(); err != nil {
		return FetchResult{}, err
	}
	res.Aborted = bs.Aborted
	return res, nil
}

// fetchRequest asks a partition's leader for a consumer's read.
type fetchRequest struct {
	Topic     string
	Partition int32
	Offset    int64
	MaxBytes  int32
	Isolation log.Isolation
}

func (*fetchRequest) kind() requestKind { return kindFetch }
func (r *fetchRequest) encode(e *encoder) {
	e.string(r.Topic)
	e.int(int64(r.Partition))
	e.int(r.Offset)
	e.int(int64(r.MaxBytes))
	e.int(int64(r.Isolation))
}
func (r *fetchRequest) decode(d *decoder) {
	r.Topic, r.Partition, r.Offset, r.MaxBytes = d.string(), d.int32(), d.int(), d.int32()
	if iso := d.int32(); iso == int32(int8(iso)) {
		r.Isolation = log.Isolation(iso)
	} else {
		d.fail("an isolation")
	}
}

// serve answers the read, its error included (an offset out of range
// comes with the partition's offsets).
func (r *fetchRequest) answer(ctx context.Context, n *Node) []byte {
	res, err := n.fetchHere(ctx, r)
	return encodeFetchAnswer(res, err)
}

func encodeFetchAnswer(res FetchResult, err error) []byte {
	e := &encoder{}
	e.codedError(int64(replica.CodeOf(err)), err)
	e.bytes(res.Records)
	e.int(res.HighWatermark)
	e.int(res.LastStableOffset)
	e.int(res.LogStartOffset)
	e.uint(uint64(len(res.Aborted)))
	for _, t := range res.Aborted {
		e.int(t.ProducerID)
		e.int(t.FirstOffset)
		e.int(t.LastOffset)
		e.int(t.LastStableOffset)
	}
	return e.b
}

// decodeFetchAnswer returns a read and its error, a *RemoteError whose
// code's sentinel errors.Is matches.
func decodeFetchAnswer(b []byte) (FetchResult, error) {
	d := &decoder{b: b}
	ferr := d.remoteError()
	res := FetchResult{Records: d.bytes(), HighWatermark: d.int(), LastStableOffset: d.int(), LogStartOffset: d.int()}
	for range d.count(4) {
		res.Aborted = append(res.Aborted, idempotence.AbortedTxn{ProducerID: d.int(), FirstOffset: d.int(),
			LastOffset: d.int(), LastStableOffset: d.int()})
	}
	if err := d.finish(); err != nil {
		return FetchResult{}, fmt.Errorf("%w (a fetch's answer)", err)
	}
	return res, ferr
}
