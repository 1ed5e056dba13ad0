package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/segment"
)

func keysOf(recs []*kgo.Record) []string {
	var keys []string
	for _, r := range recs {
		keys = append(keys, string(r.Key))
	}
	return keys
}

// TestReadCommittedSkipsAbortedTransactions: a read_committed consumer gets
// the records below the last stable offset but those of aborted
// transactions (the broker sends the aborted list from the .txnindex and
// the client drops them), a read_uncommitted one gets every record up to the
// high watermark, and ListOffsets' latest is the last stable offset or the
// high watermark by isolation.
func TestReadCommittedSkipsAbortedTransactions(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "ledger"
	c := tb.client()
	createTopic(t, c, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	aborted, committed, open := txnProducer(tb, "aborted"), txnProducer(tb, "committed"), txnProducer(tb, "open")
	send := func(c *kgo.Client, keys ...string) {
		for _, k := range keys {
			require.NoError(t, c.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(k)}).FirstErr())
		}
	}
	send(plain, "plain-0") // 0
	require.NoError(t, aborted.BeginTransaction())
	send(aborted, "aborted-1", "aborted-2") // 1, 2
	require.NoError(t, committed.BeginTransaction())
	send(committed, "committed-1")                                   // 3
	require.NoError(t, aborted.EndTransaction(ctx, kgo.TryAbort))    // 4
	require.NoError(t, committed.EndTransaction(ctx, kgo.TryCommit)) // 5
	send(plain, "plain-1")                                           // 6
	require.NoError(t, open.BeginTransaction())
	send(open, "open-1") // 7, still open: the last stable offset
	p, err := tb.b.Node().Log(topic, 0)
	require.NoError(t, err)
	lso, err := p.LastStableOffset()
	require.NoError(t, err)
	require.EqualValues(t, 7, lso)

	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := consume(t, rc, 3)
	require.Equal(t, []string{"plain-0", "committed-1", "plain-1"}, keysOf(got))
	require.Equal(t, []int64{0, 3, 6}, []int64{got[0].Offset, got[1].Offset, got[2].Offset})
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	require.Empty(t, rc.PollFetches(short).Records(), "nothing past the last stable offset")

	ru := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	require.Equal(t, []string{"plain-0", "aborted-1", "aborted-2", "committed-1", "plain-1", "open-1"}, keysOf(consume(t, ru, 6)))

	for _, tc := range []struct {
		level  int8
		latest int64
	}{{0, 8}, {1, 7}} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.IsolationLevel = tc.level
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), c)
		require.NoError(t, err)
		require.NoError(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
		require.Equal(t, tc.latest, resp.Topics[0].Partitions[0].Offset, "isolation %d", tc.level)
	}
}

// fetchOnce sends one Fetch of partition 0 from offset.
func fetchOnce(t *testing.T, tb *testBroker, c *kgo.Client, topic string, offset int64, maxWait time.Duration, minBytes int32) (*kmsg.FetchResponseTopicPartition, time.Duration) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = int32(maxWait.Milliseconds()), minBytes, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	ft.TopicID = topicID(t, tb, topic) // kgo sends the broker's latest version, v13+: by id
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = offset, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	start := time.Now()
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Zero(t, resp.ErrorCode)
	return &resp.Topics[0].Partitions[0], time.Since(start)
}

// TestFetchLongPoll: a fetch at the log end waits up to its max wait for
// records, and returns as soon as a produce brings them.
func TestFetchLongPoll(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "tail"
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()))
	createTopic(t, c, topic, 1)

	p, took := fetchOnce(t, tb, c, topic, 0, 300*time.Millisecond, 1)
	require.Zero(t, p.ErrorCode)
	require.Empty(t, p.RecordBatches)
	require.GreaterOrEqual(t, took, 300*time.Millisecond, "waited its max wait")

	go func() {
		time.Sleep(200 * time.Millisecond)
		c.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}, nil)
	}()
	p, took = fetchOnce(t, tb, c, topic, 0, 20*time.Second, 1)
	require.Zero(t, p.ErrorCode)
	require.NotEmpty(t, p.RecordBatches)
	require.Less(t, took, 10*time.Second, "returned when the record came, not at the max wait")
	b, rest, err := segment.ParseBatch(p.RecordBatches)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.NoError(t, b.Validate())
	for r, err := range b.Records() {
		require.NoError(t, err)
		require.Equal(t, "k", string(r.Key))
	}
	require.EqualValues(t, 1, p.HighWatermark)
}

// TestFetchResponseBytesAreKmsgs: a fetch response whose record sets were
// sent from the segment files is, byte for byte, what kmsg encodes for the
// same response, in a flexible version (12) and an older one (11), with
// partitions holding records, none, and an error.
func TestFetchResponseBytesAreKmsgs(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "spliced"
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, c, topic, 3)
	for i := range 30 {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key(i)), Value: []byte(value(i))}
		require.NoError(t, c.ProduceSync(context.Background(), r).FirstErr())
	}
	for _, version := range []int16{11, 12} {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 0, 1, 1<<20, -1
		req.IsolationLevel = 1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		for _, p := range []struct {
			id     int32
			offset int64
		}{{0, 3}, {1, 0}, {2, 0}, {7, 0}} { // records, records, none, no such partition
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p.id, p.offset, 1<<20
			ft.Partitions = append(ft.Partitions, fp)
		}
		req.Topics = append(req.Topics, ft)

		conn := dial(t, tb.addr)
		_, err := conn.Write(frame(req, 1, version, 42))
		require.NoError(t, err)
		corr, body := conn.response(version >= 12)
		require.EqualValues(t, 42, corr)
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(version)
		require.NoError(t, resp.ReadFrom(body), "v%d", version)
		require.Equal(t, body, resp.AppendTo(nil), "v%d: the bytes are kmsg's encoding", version)

		parts := resp.Topics[0].Partitions
		require.Len(t, parts, 4)
		for i, want := range []int{15 - 3, 15, 0} {
			n := 0
			for rest := parts[i].RecordBatches; len(rest) > 0; {
				var b segment.Batch
				b, rest, err = segment.ParseBatch(rest)
				require.NoError(t, err)
				require.NoError(t, b.Validate())
				for _, err := range b.Records() {
					require.NoError(t, err)
					n++
				}
			}
			require.Equal(t, want, n, "v%d partition %d", version, i)
		}
		require.Equal(t, kerr.UnknownTopicOrPartition.Code, parts[3].ErrorCode)
	}
}
