package broker

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
)

// listTransactions lists the transactional ids of the coordinator, as
// kafka-transactions --list does, with Kafka's filters
// (TransactionStateManager.listTransactionStates): by state (a name Kafka
// does not know is returned in UnknownStateFilters and filters nothing),
// by producer id, by running longer than a duration (v1) and by a regular
// expression the whole id must match (v2; Go's RE2, as Kafka's RE2/J).
// Dead ids, which are being removed, are never listed.
func (b *Broker) listTransactions(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	states := map[idempotence.TxnState]bool{}
	for _, name := range req.StateFilters {
		if s, ok := txnStateNamed(name); ok {
			states[s] = true
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
		}
	}
	var pattern *regexp.Regexp
	if p := req.TransactionalIDPattern; p != nil && *p != "" {
		var err error
		if pattern, err = regexp.Compile(`^(?:` + *p + `)$`); err != nil {
			err = fmt.Errorf("%w: transactional id pattern %q: %w", kafkaerr.ErrInvalidRegularExpression, *p, err)
			resp.ErrorCode = code(err)
			return resp
		}
	}
	duration := req.DurationFilterMillis
	if req.Version < 1 {
		duration = -1
	}
	rt, err := b.txns()
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	now := time.Now().UnixMilli()
	for _, rec := range rt.Transactions().List() {
		switch {
		case rec.State == idempotence.TxnDead,
			len(req.ProducerIDFilters) > 0 && !slices.Contains(req.ProducerIDFilters, rec.ProducerID),
			len(states) > 0 && !states[rec.State],
			duration >= 0 && now-rec.StartMs <= duration,
			pattern != nil && !pattern.MatchString(rec.TransactionalID),
			!b.allowed(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTransactionalId, rec.TransactionalID):
			continue
		}
		s := kmsg.NewListTransactionsResponseTransactionState()
		s.TransactionalID, s.ProducerID, s.TransactionState = rec.TransactionalID, rec.ProducerID, rec.State.String()
		resp.TransactionStates = append(resp.TransactionStates, s)
	}
	return resp
}

// txnStateNamed returns the transaction state of Kafka's name for it.
func txnStateNamed(name string) (idempotence.TxnState, bool) {
	for s := idempotence.TxnEmpty; s <= idempotence.TxnPrepareEpochFence; s++ {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}

// describeProducers answers the producers each partition knows (Kafka's
// DescribeProducers, kafka-transactions --describe-producers): epoch, the
// last sequence number and timestamp, the epoch of the coordinator that
// last wrote a marker for it, and where its open transaction starts (-1
// if none).
func (b *Broker) describeProducers(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		denied := b.deny(r, kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, id := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = id
			err := denied
			var p *log.Partition
			if err == nil {
				p, _, err = b.leaderPartition(t.Topic, id, -1)
			}
			var producers []idempotence.Entry
			if err == nil {
				producers, err = p.Producers()
			}
			rp.ErrorCode, rp.ErrorMessage = code(err), message(err)
			for _, e := range producers {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.CoordinatorEpoch = e.ProducerID, int32(e.Epoch), e.CoordinatorEpoch
				ap.LastSequence, ap.LastTimestamp, ap.CurrentTxnStartOffset = -1, e.LastTimestamp, e.TxnFirstOffset
				if n := len(e.Batches); n > 0 {
					ap.LastSequence = e.Batches[n-1].LastSeq
				}
				rp.ActiveProducers = append(rp.ActiveProducers, ap)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
