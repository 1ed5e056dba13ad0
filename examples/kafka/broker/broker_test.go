package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// testBroker is a broker on a loopback port over a data directory that
// outlives it, so that a test can stop it and start another on the same
// data.
type testBroker struct {
	t    *testing.T
	dir  string
	b    *broker.Broker
	addr string
	done chan error
}

func startBroker(t *testing.T, dir string, opts ...func(*broker.Config)) *testBroker {
	t.Helper()
	return startBrokerAt(t, dir, "127.0.0.1:0", opts...)
}

// startBrokerAt starts a broker listening on addr: a restarted broker keeps
// its clients' address.
func startBrokerAt(t *testing.T, dir, addr string, opts ...func(*broker.Config)) *testBroker {
	t.Helper()
	cfg := broker.Config{
		DataDir: dir,
		Fsync:   log.FsyncNever(),
		Node: cluster.Options{
			OffsetsPartitions: 4,
			// KIP-848 members heartbeat as often as startMember's
			// classic ones: a partition moving between two members
			// takes two heartbeats (one member releases it, the other
			// gets it), 10 s at Kafka's 5 s interval.
			Groups: group.ServiceOptions{Config: group.Config{InitialRebalanceDelay: -1, MinSessionTimeout: time.Second,
				ConsumerHeartbeatInterval: 200 * time.Millisecond}},
		},
		AutoCreateTopics: true,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := broker.Open(cfg)
	require.NoError(t, err)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	tb := &testBroker{t: t, dir: dir, b: b, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { tb.done <- b.Serve(l) }()
	t.Cleanup(func() { tb.stop() })
	return tb
}

// stop closes the broker; later calls do nothing.
func (tb *testBroker) stop() {
	if tb.b == nil {
		return
	}
	require.NoError(tb.t, tb.b.Close())
	require.ErrorIs(tb.t, <-tb.done, broker.ErrClosed)
	tb.b = nil
}

// topics returns the names of the topics of the broker's metadata.
func (tb *testBroker) topics() []string {
	var names []string
	for _, t := range tb.b.Node().Metadata().Topics {
		names = append(names, t.Name)
	}
	return names
}

func (tb *testBroker) client(opts ...kgo.Opt) *kgo.Client {
	tb.t.Helper()
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tb.addr)}, opts...)...)
	require.NoError(tb.t, err)
	tb.t.Cleanup(c.Close)
	return c
}

// createTopic creates a topic through Kafka's CreateTopics API.
func createTopic(t *testing.T, c *kgo.Client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	require.EqualValues(t, partitions, resp.Topics[0].NumPartitions)
}

// consume polls until it has n records or the context ends.
func consume(t *testing.T, c *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := c.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "polled %d of %d records", len(got), n)
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		got = append(got, fs.Records()...)
	}
	return got
}

func key(i int) string   { return fmt.Sprintf("key-%03d", i) }
func value(i int) string { return fmt.Sprintf("value-%03d", i) }

// recordsByKey checks that recs are exactly the records first..last-1 as
// produce wrote them, each partition's in offset order, and returns them by
// key.
func recordsByKey(t *testing.T, recs []*kgo.Record, first, last int) map[string]*kgo.Record {
	t.Helper()
	byKey := map[string]*kgo.Record{}
	next := map[int32]int64{}
	for _, r := range recs {
		if prev, ok := next[r.Partition]; ok {
			require.Greater(t, r.Offset, prev-1, "partition %d out of order", r.Partition)
		}
		next[r.Partition] = r.Offset + 1
		require.NotContains(t, byKey, string(r.Key), "record %s twice", r.Key)
		byKey[string(r.Key)] = r
	}
	require.Len(t, byKey, last-first)
	for i := first; i < last; i++ {
		r, ok := byKey[key(i)]
		require.True(t, ok, "record %s missing", key(i))
		require.Equal(t, value(i), string(r.Value))
	}
	return byKey
}

func produce(t *testing.T, c *kgo.Client, topic string, first, last int) map[string]*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for i := first; i < last; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key(i)), Value: []byte(value(i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.ProduceSync(ctx, recs...).FirstErr())
	return recordsByKey(t, recs, first, last)
}

// TestKgoProducesAndConsumesInAGroupAcrossARestart: franz-go produces with
// acks=all, idempotently and lz4-compressed; a group consumer reads every
// record at the offset produce reported, commits, and after the broker
// restarts on the same data directory a new member of the group resumes at
// the committed offsets and reads only what was produced since.
func TestKgoProducesAndConsumesInAGroupAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	const topic = "orders"
	admin := tb.client()
	createTopic(t, admin, topic, 3)

	producer := tb.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	produced := produce(t, producer, topic, 0, 60)

	consumer := tb.client(kgo.ConsumerGroup("billing"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(6*time.Second))
	got := recordsByKey(t, consume(t, consumer, 60), 0, 60)
	for k, r := range got {
		require.Equal(t, produced[k].Partition, r.Partition, k)
		require.Equal(t, produced[k].Offset, r.Offset, k)
	}
	require.NoError(t, consumer.CommitUncommittedOffsets(context.Background()))
	consumer.Close()
	producer.Close()
	admin.Close()

	// The batches are in the log as the producer built them: lz4, with its
	// producer id and sequence numbers.
	batches := 0
	for id := range int32(3) {
		p, err := tb.b.Node().Log(topic, id)
		require.NoError(t, err)
		bs, err := p.Read(0, 1<<20, log.ReadUncommitted)
		require.NoError(t, err)
		for batch, err := range bs.All() {
			require.NoError(t, err)
			require.Equal(t, segment.CodecLZ4, batch.Codec())
			require.GreaterOrEqual(t, batch.ProducerID(), int64(0), "an idempotent producer's batch")
			require.GreaterOrEqual(t, batch.BaseSequence(), int32(0))
			batches++
		}
		require.NoError(t, bs.Close())
	}
	require.Positive(t, batches)

	tb.stop()
	tb = startBroker(t, dir)
	producer = tb.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	produced = produce(t, producer, topic, 60, 90)
	for _, r := range produced {
		require.Greater(t, r.Offset, int64(0), "offsets continue after the restart")
	}
	consumer = tb.client(kgo.ConsumerGroup("billing"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(6*time.Second))
	got = recordsByKey(t, consume(t, consumer, 30), 60, 90)
	for k, r := range got {
		require.Equal(t, produced[k].Offset, r.Offset, k)
	}
}

// listOffset asks for one partition's offset at timestamp ts with Kafka's
// ListOffsets.
func listOffset(t *testing.T, c *kgo.Client, topic string, ts int64) (offset, timestamp int64) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	p := resp.Topics[0].Partitions[0]
	require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
	return p.Offset, p.Timestamp
}

// TestKgoListsOffsetsByTime: ListOffsets answers the first record at or
// after a time with that record's timestamp, -1 past the last record, and
// the log's ends for -2 and -1; DeleteRecords moves the earliest offset; a
// consumer told to start after a time starts there.
func TestKgoListsOffsetsByTime(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "clicks"
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0))
	createTopic(t, c, topic, 1)
	t0 := time.UnixMilli(1_700_000_000_000)
	for i := range 10 {
		r := &kgo.Record{Topic: topic, Key: []byte(key(i)), Value: []byte(value(i)), Timestamp: t0.Add(time.Duration(i) * time.Second)}
		require.NoError(t, c.ProduceSync(context.Background(), r).FirstErr())
	}
	for _, tc := range []struct {
		ts, offset, timestamp int64
	}{
		{t0.UnixMilli() - 1, 0, t0.UnixMilli()},
		{t0.UnixMilli() + 2500, 3, t0.UnixMilli() + 3000},
		{t0.UnixMilli() + 9000, 9, t0.UnixMilli() + 9000},
		{t0.UnixMilli() + 9001, -1, -1},
		{-2, 0, -1},
		{-1, 10, -1},
	} {
		offset, timestamp := listOffset(t, c, topic, tc.ts)
		require.Equal(t, tc.offset, offset, "timestamp %d", tc.ts)
		require.Equal(t, tc.timestamp, timestamp, "timestamp %d", tc.ts)
	}

	consumer := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(t0.UnixMilli()+4500)))
	recs := consume(t, consumer, 5)
	require.Len(t, recs, 5)
	for i, r := range recs {
		require.Equal(t, int64(5+i), r.Offset)
		require.Equal(t, key(5+i), string(r.Key))
		require.Equal(t, t0.Add(time.Duration(5+i)*time.Second).UnixMilli(), r.Timestamp.UnixMilli())
	}

	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = topic
	dt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 4}}
	del.Topics = append(del.Topics, dt)
	dresp, err := del.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(dresp.Topics[0].Partitions[0].ErrorCode))
	require.EqualValues(t, 4, dresp.Topics[0].Partitions[0].LowWatermark)
	offset, _ := listOffset(t, c, topic, -2)
	require.EqualValues(t, 4, offset)

	epochs := kmsg.NewPtrOffsetForLeaderEpochRequest()
	et := kmsg.NewOffsetForLeaderEpochRequestTopic()
	et.Topic = topic
	ep := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	ep.Partition, ep.LeaderEpoch, ep.CurrentLeaderEpoch = 0, 0, 0
	et.Partitions = append(et.Partitions, ep)
	epochs.Topics = append(epochs.Topics, et)
	eresp, err := epochs.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(eresp.Topics[0].Partitions[0].ErrorCode))
	require.EqualValues(t, 0, eresp.Topics[0].Partitions[0].LeaderEpoch)
	require.EqualValues(t, 10, eresp.Topics[0].Partitions[0].EndOffset, "epoch 0, the only one, ends at the log end")
}
