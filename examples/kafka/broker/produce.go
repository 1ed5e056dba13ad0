package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// produce appends each partition's batch as the producer built it, through
// the Cluster as the partition's leader (alone, straight to the log): the
// log checks it (CRC, size, an idempotent producer's sequence and epoch)
// and assigns its offsets; a compressed batch is stored compressed. The
// partitions of one request are appended concurrently, so that they share
// their fsyncs with other connections' appends (group commit).
func (b *Broker) produce(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	var refused error
	if req.Acks != 0 && req.Acks != 1 && req.Acks != -1 {
		refused = fmt.Errorf("%w: acks %d, want -1, 0 or 1", kafkaerr.ErrInvalidRequiredAcks, req.Acks)
	}
	if req.TimeoutMillis > 0 {
		// How long acks=all may wait for the ISR (Kafka's produce
		// request timeout).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ms(req.TimeoutMillis))
		defer cancel()
	}
	if req.TransactionID != nil && refused == nil {
		refused = b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *req.TransactionID)
	}
	denied := map[string]error{}
	n := 0
	for _, t := range req.Topics {
		if denied[t.Topic] = b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic, t.Topic); denied[t.Topic] == nil {
			n += len(t.Partitions)
		}
	}
	var g *txnGather
	if req.TransactionID != nil && refused == nil {
		g = b.newTxnGather(ctx, req, n)
	}
	var wg sync.WaitGroup
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, t := range req.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for j, tp := range t.Partitions {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition = tp.Partition
			if err := cmp.Or(refused, denied[t.Topic]); err != nil {
				rp.ErrorCode, rp.ErrorMessage = code(err), message(err)
				continue
			}
			wg.Go(func() {
				err := b.appendBatch(ctx, req, g, t.Topic, tp.Partition, tp.Records, rp)
				if err != nil {
					rp.ErrorCode, rp.ErrorMessage = code(err), message(err)
					b.logger.Info("broker: produce refused", "topic", t.Topic, "partition", tp.Partition, "client", r.clientID, "err", err)
				}
			})
		}
	}
	wg.Wait()
	if req.Acks == 0 {
		// No response: an acks=0 producer does not read one (Kafka
		// closes the connection on an error instead; the log line above
		// is the trace here).
		return nil
	}
	return resp
}

// checkBatchSize refuses a batch larger than the topic's
// max.message.bytes, as Kafka's leader does before it appends
// (UnifiedLog.analyzeAndValidateRecords): MESSAGE_TOO_LARGE. A cluster's
// replicas append what their leader took without this check, as Kafka's
// followers do.
func (b *Broker) checkBatchSize(topic string, batch segment.Batch) error {
	cfg, err := b.cluster.TopicConfig(topic)
	if err != nil {
		return err
	}
	if limit := cmp.Or(cfg.MaxBatchBytes, log.DefaultMaxBatchBytes); len(batch) > limit {
		return fmt.Errorf("%w: a batch of %d bytes, max.message.bytes of %s is %d", segment.ErrBatchTooLarge, len(batch), topic, limit)
	}
	return nil
}

// appendBatch appends the one batch of a partition's records (a produce of
// version 3+ holds exactly one, Kafka's LogValidator rule) and fills in the
// partition's response. A transactional produce's partitions report to g,
// which appends their transactional batches together.
func (b *Broker) appendBatch(ctx context.Context, req *kmsg.ProduceRequest, g *txnGather, topic string, id int32, records []byte, rp *kmsg.ProduceResponseTopicPartition) error {
	gathered := false
	defer func() {
		if g != nil && !gathered {
			g.skip()
		}
	}()
	if err := writable(topic); err != nil {
		return err
	}
	p, _, err := b.leaderPartition(topic, id, -1)
	if err != nil {
		return err
	}
	batch, rest, err := segment.ParseBatch(records)
	switch {
	case err != nil:
		return err
	case len(rest) > 0:
		return fmt.Errorf("%w: %d bytes after the first batch: a produce request holds one batch per partition", kafkaerr.ErrInvalidRecord, len(rest))
	case batch.Control():
		return fmt.Errorf("%w: a control batch from a client", kafkaerr.ErrInvalidRecord)
	}
	// The batch is checked as it arrived, and again as it is stored if it
	// is recompressed, as Kafka checks before and after its LogValidator
	// converts it: what arrives too large is refused whatever it would
	// shrink to.
	if err := b.checkBatchSize(topic, batch); err != nil {
		return err
	}
	if c := batch.Codec(); c == segment.CodecSnappy || c == segment.CodecZstd {
		if err := batch.Validate(); err != nil {
			return err
		}
		if batch, err = transcode(batch); err != nil {
			return err
		}
		if err := b.checkBatchSize(topic, batch); err != nil {
			return err
		}
	}
	var res log.AppendResult
	if batch.Transactional() {
		gathered = g != nil
		res, err = b.appendTransactional(req, g, p, batch)
	} else {
		if g != nil {
			// Reported before its own append, so that the transactional
			// batches beside it need not wait for it.
			gathered = true
			g.skip()
		}
		res, err = b.cluster.Append(ctx, topic, id, req.Acks, batch)
	}
	if err != nil {
		return err
	}
	rp.BaseOffset = res.BaseOffset
	rp.LogAppendTime = -1 // message.timestamp.type=CreateTime
	start, _, _, err := p.Offsets()
	if err != nil && !errors.Is(err, log.ErrClosed) {
		return err
	}
	rp.LogStartOffset = start
	return nil
}

// initProducerID hands an idempotent producer a producer id never handed out
// before by this data directory, at epoch 0, as Kafka does for a producer
// without a transactional id (whatever id and epoch it had before).
func (b *Broker) initProducerID(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		if err := b.deny(r, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTransactionalId, *req.TransactionalID); err != nil {
			resp.ErrorCode = code(err)
			return resp
		}
		b.initTransactionalProducerID(r, req, resp)
		return resp
	}
	// An idempotent producer needs IDEMPOTENT_WRITE on the cluster, or
	// WRITE on some topic (KIP-679).
	if b.authz != nil && !b.allowed(r, kmsg.ACLOperationIdempotentWrite, kmsg.ACLResourceTypeCluster, clusterName) &&
		!b.authz.authorizedOnAny(r.principal(), r.clientHost, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic) {
		resp.ErrorCode = int16(kafkaerr.ErrClusterAuthorizationFailed)
		return resp
	}
	id, err := b.cluster.NewProducerID()
	if err != nil {
		b.logger.Error("broker: producer id", "err", err)
		resp.ErrorCode = code(err)
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}

// writable refuses clients' writes to the group and transaction
// coordinators' topics, whose records only the coordinators may write (Kafka: "Cannot append to internal
// topic").
func writable(topic string) error {
	switch topic {
	case group.OffsetsTopic:
		return fmt.Errorf("%w: %s is written by the group coordinator only", kafkaerr.ErrInvalidTopicException, topic)
	case log.TransactionStateTopic:
		return fmt.Errorf("%w: %s is written by the transaction coordinator only", kafkaerr.ErrInvalidTopicException, topic)
	}
	return nil
}
