package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnProducer is a kgo transactional producer that writes to the partition
// each record names.
func txnProducer(tb *testBroker, txnID string, opts ...kgo.Opt) *kgo.Client {
	return tb.client(append([]kgo.Opt{kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(10 * time.Second)}, opts...)...)
}

// produceTxn runs one transaction of records first..last-1, spread over
// partitions 0 and 1 of topic, ended with commit (kgo.TryCommit) or abort.
func produceTxn(t *testing.T, c *kgo.Client, topic string, first, last int, commit kgo.TransactionEndTry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.BeginTransaction())
	var recs []*kgo.Record
	for i := first; i < last; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key(i)), Value: []byte(value(i))})
	}
	require.NoError(t, c.ProduceSync(ctx, recs...).FirstErr())
	require.NoError(t, c.EndTransaction(ctx, commit))
}

// describeTxn asks the broker for a transactional id's state
// (DescribeTransactions).
func describeTxn(t *testing.T, c *kgo.Client, txnID string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txnID}
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, resp.TransactionStates, 1)
	return resp.TransactionStates[0]
}

// noMoreRecords checks that a consumer finds nothing more for a while.
func noMoreRecords(t *testing.T, c *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.Empty(t, c.PollFetches(ctx).Records())
}

// TestKgoTransactionsCommitAndAbort: franz-go's transactional producer, on
// transactions version 2 (the broker announces transaction.version=2:
// Produce v12 adds each partition to the transaction, EndTxn v5 bumps the
// epoch), commits a transaction over two partitions, aborts a second and
// commits a third; a read_committed consumer sees exactly the committed
// records, a read_uncommitted one the aborted ones too, and
// DescribeTransactions shows the last transaction completed at epoch 3:
// 0 from InitProducerId, then one bump per EndTxn.
func TestKgoTransactionsCommitAndAbort(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "payments"
	admin := tb.client()
	createTopic(t, admin, topic, 2)

	p := txnProducer(tb, "payer")
	produceTxn(t, p, topic, 0, 10, kgo.TryCommit)
	produceTxn(t, p, topic, 10, 20, kgo.TryAbort)
	produceTxn(t, p, topic, 20, 26, kgo.TryCommit)

	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := consume(t, rc, 16)
	noMoreRecords(t, rc)
	want, keys := map[string]int32{}, map[string]int32{}
	for i := range 26 {
		if i < 10 || i >= 20 {
			want[key(i)] = int32(i % 2)
		}
	}
	for _, r := range got {
		keys[string(r.Key)] = r.Partition
	}
	require.Equal(t, want, keys, "read_committed: the committed records in their partitions, none aborted")

	ru := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	recordsByKey(t, consume(t, ru, 26), 0, 26)
	noMoreRecords(t, ru)

	s := describeTxn(t, admin, "payer")
	require.NoError(t, kerr.ErrorForCode(s.ErrorCode))
	require.Equal(t, "CompleteCommit", s.State)
	require.EqualValues(t, 10_000, s.TimeoutMillis)
	require.Empty(t, s.Topics, "no transaction open")
	require.EqualValues(t, 3, s.ProducerEpoch)
	require.Equal(t, kerr.TransactionalIDNotFound.Code, describeTxn(t, admin, "nobody").ErrorCode)
}

// TestKgoTransactionalProducerFenced: a second producer with the same
// transactional id fences the first (Kafka's zombie fencing): its
// InitProducerId bumps the epoch and aborts the first's open transaction;
// the first's next produce is refused with INVALID_PRODUCER_EPOCH and its
// commit fails; read_committed consumers see only the second's records.
func TestKgoTransactionalProducerFenced(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "fenced"
	admin := tb.client()
	createTopic(t, admin, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key(i)), Value: []byte(value(i))}
	}

	zombie := txnProducer(tb, "worker", kgo.RecordRetries(2))
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(ctx, rec(0)).FirstErr())
	open := describeTxn(t, admin, "worker")
	require.Equal(t, "Ongoing", open.State)

	successor := txnProducer(tb, "worker")
	require.NoError(t, successor.BeginTransaction())
	require.NoError(t, successor.ProduceSync(ctx, rec(1)).FirstErr())
	now := describeTxn(t, admin, "worker")
	require.Equal(t, open.ProducerID, now.ProducerID)
	require.Greater(t, now.ProducerEpoch, open.ProducerEpoch)

	err := zombie.ProduceSync(ctx, rec(2)).FirstErr()
	require.Error(t, err)
	require.True(t, isFenced(err), "zombie's produce: %v", err)
	require.Error(t, zombie.EndTransaction(ctx, kgo.TryCommit), "a fenced producer cannot commit")

	require.NoError(t, successor.EndTransaction(ctx, kgo.TryCommit))
	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := consume(t, rc, 1)
	noMoreRecords(t, rc)
	require.Equal(t, key(1), string(got[0].Key), "only the successor's record")
}

func isFenced(err error) bool {
	for _, e := range []error{kerr.InvalidProducerEpoch, kerr.ProducerFenced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
