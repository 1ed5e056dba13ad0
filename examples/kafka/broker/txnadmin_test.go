package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// listTxns sends ListTransactions v2 with the given filters and returns
// the listed ids with their states, and the unknown state filters.
func listTxns(t *testing.T, c *kgo.Client, states []string, producers []int64, duration int64, pattern *string) (map[string]string, []string, int16) {
	t.Helper()
	req := kmsg.NewPtrListTransactionsRequest()
	req.StateFilters, req.ProducerIDFilters, req.DurationFilterMillis, req.TransactionalIDPattern = states, producers, duration, pattern
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	got := map[string]string{}
	for _, s := range resp.TransactionStates {
		got[s.TransactionalID] = s.TransactionState
	}
	return got, resp.UnknownStateFilters, resp.ErrorCode
}

// describeProducers sends DescribeProducers for partitions 0 and 1 of
// topic and returns the active producers of each by producer id.
func describeProducers(t *testing.T, c *kgo.Client, topic string) map[int32]map[int64]kmsg.DescribeProducersResponseTopicPartitionActiveProducer {
	t.Helper()
	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: topic, Partitions: []int32{0, 1}}}
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	got := map[int32]map[int64]kmsg.DescribeProducersResponseTopicPartitionActiveProducer{}
	for _, p := range resp.Topics[0].Partitions {
		require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
		got[p.Partition] = map[int64]kmsg.DescribeProducersResponseTopicPartitionActiveProducer{}
		for _, ap := range p.ActiveProducers {
			got[p.Partition][ap.ProducerID] = ap
		}
	}
	return got
}

// TestListTransactionsAndDescribeProducers: with one franz-go transaction
// committed and another open, ListTransactions lists both ids by state and
// filters them as Kafka does (state, unknown state names, producer id,
// duration, an RE2 pattern the whole id must match, a bad pattern), and
// DescribeProducers shows each partition's producers: epoch, last
// sequence, and where the open transaction starts.
func TestListTransactionsAndDescribeProducers(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "ledger"
	admin := tb.client()
	createTopic(t, admin, topic, 2)

	done := txnProducer(tb, "orders-done")
	produceTxn(t, done, topic, 0, 4, kgo.TryCommit) // 2 records in each partition
	open := txnProducer(tb, "orders-open")
	require.NoError(t, open.BeginTransaction())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, open.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Key: []byte("o0")}, &kgo.Record{Topic: topic, Partition: 1, Key: []byte("o1")}).FirstErr())

	doneID := describeTxn(t, admin, "orders-done").ProducerID
	openID := describeTxn(t, admin, "orders-open").ProducerID
	got, unknown, code := listTxns(t, admin, nil, nil, -1, nil)
	require.Zero(t, code)
	require.Empty(t, unknown)
	require.Equal(t, map[string]string{"orders-done": "CompleteCommit", "orders-open": "Ongoing"}, got)

	got, unknown, _ = listTxns(t, admin, []string{"Ongoing", "Bogus"}, nil, -1, nil)
	require.Equal(t, map[string]string{"orders-open": "Ongoing"}, got)
	require.Equal(t, []string{"Bogus"}, unknown)
	got, _, _ = listTxns(t, admin, nil, []int64{doneID}, -1, nil)
	require.Equal(t, map[string]string{"orders-done": "CompleteCommit"}, got)
	got, _, _ = listTxns(t, admin, nil, nil, time.Hour.Milliseconds(), nil)
	require.Empty(t, got, "none has run for an hour")
	got, _, _ = listTxns(t, admin, nil, nil, -1, kmsg.StringPtr(`orders-(o|x)pen`))
	require.Equal(t, map[string]string{"orders-open": "Ongoing"}, got)
	got, _, _ = listTxns(t, admin, nil, nil, -1, kmsg.StringPtr(`orders`))
	require.Empty(t, got, "the pattern must match the whole id")
	_, _, code = listTxns(t, admin, nil, nil, -1, kmsg.StringPtr(`orders-(`))
	require.Equal(t, kerr.InvalidRegularExpression.Code, code)

	producers := describeProducers(t, admin, topic)
	// Each partition: records 0 and 1 of the committed transaction, its
	// COMMIT marker at 2; in partition 1 the open one's records from 3.
	d0, d1, o1 := producers[0][doneID], producers[1][doneID], producers[1][openID]
	require.Len(t, producers[0], 1)
	require.Len(t, producers[1], 2)
	// The marker of transactions version 2 carries the epoch EndTxn
	// bumped, which starts the producer's sequences afresh: no last
	// sequence in that epoch.
	doneEpoch := int32(describeTxn(t, admin, "orders-done").ProducerEpoch)
	for _, d := range []kmsg.DescribeProducersResponseTopicPartitionActiveProducer{d0, d1} {
		require.Equal(t, [3]int64{int64(doneEpoch), -1, -1}, [3]int64{int64(d.ProducerEpoch), int64(d.LastSequence), d.CurrentTxnStartOffset})
	}
	require.Equal(t, [2]int64{1, 3}, [2]int64{int64(o1.LastSequence), o1.CurrentTxnStartOffset}, "the open transaction starts at offset 3")
	require.Equal(t, int32(describeTxn(t, admin, "orders-open").ProducerEpoch), o1.ProducerEpoch)

	require.NoError(t, open.EndTransaction(ctx, kgo.TryCommit))
	got, _, _ = listTxns(t, admin, []string{"Ongoing"}, nil, -1, nil)
	require.Empty(t, got)
	require.EqualValues(t, -1, describeProducers(t, admin, topic)[1][openID].CurrentTxnStartOffset, "committed")
}
