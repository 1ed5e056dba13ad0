package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// TestProduceAcks: franz-go produces with acks=0 (no response is sent) and
// acks=1 as well as acks=all, and every record is there.
func TestProduceAcks(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "acks"
	admin := tb.client()
	createTopic(t, admin, topic, 1)
	for i, acks := range []kgo.Acks{kgo.NoAck(), kgo.LeaderAck(), kgo.AllISRAcks()} {
		c := tb.client(kgo.RequiredAcks(acks), kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.GzipCompression()))
		produce(t, c, topic, i*10, i*10+10)
		c.Close()
		// An acks=0 produce returns before the broker has the records,
		// and the next client's produce, on another connection, could
		// be stored first: the offsets checked below are in this order.
		deadline := time.Now().Add(10 * time.Second)
		for end, _ := listOffset(t, admin, topic, -1); end < int64(i*10+10); end, _ = listOffset(t, admin, topic, -1) {
			require.True(t, time.Now().Before(deadline), "the records of produce %d never reached the log", i)
			time.Sleep(10 * time.Millisecond)
		}
	}
	consumer := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := recordsByKey(t, consume(t, consumer, 30), 0, 30)
	for i := range 30 {
		require.EqualValues(t, i, got[key(i)].Offset)
	}
}

// produceRaw sends one produce request holding batch for partition 0.
func produceRaw(t *testing.T, c *kgo.Client, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	return produceRawTo(t, c, nil, topic, 0, batch)
}

// produceRawTo sends one produce request holding batch for a partition, with
// a transactional id or none.
func produceRawTo(t *testing.T, c *kgo.Client, txnID *string, topic string, partition int32, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis, req.TransactionID = -1, 5000, txnID
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{{Partition: partition, Records: batch}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	return resp.Topics[0].Partitions[0]
}

// TestIdempotentRetriesOverTheWire: a producer id from InitProducerId; a
// batch sent twice (a retry) is stored once and both answers carry its
// offset; a gap in the sequence is OUT_OF_ORDER_SEQUENCE_NUMBER; a corrupt
// batch is CORRUPT_MESSAGE and two batches in one partition's records
// INVALID_RECORD, as Kafka answers them.
func TestIdempotentRetriesOverTheWire(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "retries"
	c := tb.client()
	createTopic(t, c, topic, 1)

	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionTimeoutMillis = 60000
	ir, err := init.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(ir.ErrorCode))
	require.EqualValues(t, 0, ir.ProducerEpoch)
	ir2, err := init.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NotEqual(t, ir.ProducerID, ir2.ProducerID, "every InitProducerId gets its own id")

	batch := func(seq int32, keys ...string) []byte {
		var recs []segment.Record
		for _, k := range keys {
			recs = append(recs, segment.Record{Key: []byte(k), Value: []byte(k), Timestamp: 1})
		}
		b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Producer: &segment.ProducerFields{ID: ir.ProducerID, Epoch: 0, BaseSequence: seq}})
		require.NoError(t, err)
		return b
	}
	first := batch(0, "a", "b")
	r := produceRaw(t, c, topic, first)
	require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
	require.EqualValues(t, 0, r.BaseOffset)
	r = produceRaw(t, c, topic, batch(2, "c"))
	require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
	require.EqualValues(t, 2, r.BaseOffset)
	r = produceRaw(t, c, topic, first) // a retry of the first
	require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
	require.EqualValues(t, 0, r.BaseOffset, "the retry is answered with the original's offset")
	r = produceRaw(t, c, topic, batch(5, "gap"))
	require.Equal(t, kerr.OutOfOrderSequenceNumber.Code, r.ErrorCode)

	corrupt := batch(3, "d")
	corrupt[len(corrupt)-1] ^= 1
	require.Equal(t, kerr.CorruptMessage.Code, produceRaw(t, c, topic, corrupt).ErrorCode)
	require.Equal(t, kerr.InvalidRecord.Code, produceRaw(t, c, topic, append(batch(3, "d"), batch(4, "e")...)).ErrorCode)

	p, err := tb.b.Node().Log(topic, 0)
	require.NoError(t, err)
	_, hw, _, err := p.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 3, hw, "a, b and c, once each")
	var keys []string
	for rec, err := range p.Records(0, log.ReadUncommitted) {
		require.NoError(t, err)
		keys = append(keys, string(rec.Key))
	}
	require.Equal(t, []string{"a", "b", "c"}, keys)
}

// TestTopicAdministration: CreateTopics with configs, Kafka's errors for a
// topic that exists, a bad name, a replication factor past the brokers and
// an unknown config; DescribeConfigs shows the configs; DeleteTopics deletes.
func TestTopicAdministration(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	c := tb.client()
	create := func(name string, partitions int32, rf int16, configs map[string]string) kmsg.CreateTopicsResponseTopic {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
		for k, v := range configs {
			rt.Configs = append(rt.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: k, Value: kmsg.StringPtr(v)})
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), c)
		require.NoError(t, err)
		return resp.Topics[0]
	}
	r := create("compacted", 4, -1, map[string]string{"cleanup.policy": "compact", "segment.bytes": "1048576", "retention.ms": "-1"})
	require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
	require.EqualValues(t, 4, r.NumPartitions)
	require.Equal(t, kerr.TopicAlreadyExists.Code, create("compacted", 1, 1, nil).ErrorCode)
	require.Equal(t, kerr.InvalidTopicException.Code, create("no/slashes", 1, 1, nil).ErrorCode)
	require.Equal(t, kerr.InvalidReplicationFactor.Code, create("three", 1, 3, nil).ErrorCode)
	require.Equal(t, kerr.InvalidPartitions.Code, create("zero", 0, 1, nil).ErrorCode)
	bad := create("badconfig", 1, 1, map[string]string{"no.such.config": "1"})
	require.Equal(t, kerr.InvalidConfig.Code, bad.ErrorCode)
	require.Contains(t, *bad.ErrorMessage, "no.such.config")

	dreq := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "compacted"
	dreq.Resources = append(dreq.Resources, res)
	dresp, err := dreq.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(dresp.Resources[0].ErrorCode))
	configs := map[string]string{}
	for _, cfg := range dresp.Resources[0].Configs {
		configs[cfg.Name] = *cfg.Value
	}
	require.Equal(t, "compact", configs["cleanup.policy"])
	require.Equal(t, "1048576", configs["segment.bytes"])
	require.Equal(t, "-1", configs["retention.ms"])

	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("compacted")}, {Topic: kmsg.StringPtr("never-was")}}
	delr, err := del.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(delr.Topics[0].ErrorCode))
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, delr.Topics[1].ErrorCode)
	topics := tb.topics()
	require.NotContains(t, topics, "compacted")
}

// TestOffsetsTopicIsTheCoordinators: clients cannot produce to, delete
// records of, or delete the group coordinator's __consumer_offsets, whose
// records the coordinator replays on every start.
func TestOffsetsTopicIsTheCoordinators(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	c := tb.client()
	b, err := segment.AppendBatch(nil, []segment.Record{{Key: []byte("k"), Value: []byte("garbage")}}, segment.BuildOptions{})
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidTopicException.Code, produceRaw(t, c, "__consumer_offsets", b).ErrorCode)

	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "__consumer_offsets"
	dt.Partitions = []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: -1}}
	del.Topics = append(del.Topics, dt)
	dresp, err := del.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidTopicException.Code, dresp.Topics[0].Partitions[0].ErrorCode)

	dtr := kmsg.NewPtrDeleteTopicsRequest()
	dtr.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("__consumer_offsets")}}
	dtresp, err := dtr.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidTopicException.Code, dtresp.Topics[0].ErrorCode)
	topics := tb.topics()
	require.Contains(t, topics, "__consumer_offsets")
}

// TestAutoCreateTopics: with AutoCreateTopics, a producer's metadata request
// for a topic that does not exist creates it (auto.create.topics.enable) if
// the client allows it; without either, the producer gets
// UNKNOWN_TOPIC_OR_PARTITION and nothing is created.
func TestAutoCreateTopics(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordDeliveryTimeout(time.Second))
	err := c.ProduceSync(context.Background(), &kgo.Record{Topic: "not-allowed", Value: []byte("v")}).FirstErr()
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition, "the client did not allow creation")
	c = tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.AllowAutoTopicCreation())
	produce(t, c, "made-on-demand", 0, 5)
	topics := tb.topics()
	require.Contains(t, topics, "made-on-demand")
	require.NotContains(t, topics, "not-allowed")

	off := startBroker(t, t.TempDir(), func(c *broker.Config) { c.AutoCreateTopics = false })
	oc := off.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordDeliveryTimeout(time.Second), kgo.AllowAutoTopicCreation())
	err = oc.ProduceSync(context.Background(), &kgo.Record{Topic: "never-made", Value: []byte("v")}).FirstErr()
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	topics = off.topics()
	require.NotContains(t, topics, "never-made")
}

// A batch is checked against max.message.bytes as it arrives, as Kafka's
// UnifiedLog.analyzeAndValidateRecords checks it before its LogValidator
// recompresses anything: franz-go's TestClient_ProduceLargeMessages sends
// a 10 MiB record, snappy-compressed to about half a megabyte, to a topic
// that takes 50 KiB, and expects MESSAGE_TOO_LARGE, though the broker's
// lz4 would shrink it below the limit.
func TestProduceChecksTheBatchAsItArrives(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	admin := tb.client()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "small", 1, 1
	limit := fmt.Sprint(50 * 1024)
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "max.message.bytes", Value: &limit}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), admin)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode))

	c := tb.client(kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerBatchMaxBytes(11<<20),
		kgo.UnknownTopicRetries(-1), kgo.RecordRetries(0))
	large := &kgo.Record{Topic: "small", Value: bytes.Repeat([]byte("x"), 10<<20)}
	require.ErrorIs(t, c.ProduceSync(context.Background(), large).FirstErr(), kerr.MessageTooLarge)

	small := &kgo.Record{Topic: "small", Value: bytes.Repeat([]byte("x"), 4<<10)}
	require.NoError(t, c.ProduceSync(context.Background(), small).FirstErr(), "a snappy batch under the limit is taken")
	got := consume(t, tb.client(kgo.ConsumeTopics("small"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())), 1)
	require.Equal(t, small.Value, got[0].Value)
}
