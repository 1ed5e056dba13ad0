package broker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
)

// leaderEpoch returns partition 0's leader epoch in Metadata.
func leaderEpoch(t *testing.T, c *kgo.Client, topic string) int32 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	return resp.Topics[0].Partitions[0].LeaderEpoch
}

// epochEnd asks OffsetForLeaderEpoch where epoch ended in partition 0, as a
// client of epoch current.
func epochEnd(t *testing.T, c *kgo.Client, topic string, current, epoch int32) (int16, int32, int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.LeaderEpoch, p.EndOffset
}

// TestLeaderEpochBumpsOnRestart: each run of the broker leads a partition
// in a new leader epoch, so that no epoch is served by two runs whose logs
// may differ. A client of the last run's epoch is FENCED_LEADER_EPOCH, and
// OffsetForLeaderEpoch answers where each earlier epoch ended; the batches
// carry the epoch they were written in. A franz-go consumer that was
// reading when the broker restarted goes on at the right offset, neither
// losing nor repeating a record.
func TestLeaderEpochBumpsOnRestart(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	addr := tb.addr
	const topic = "epochs"
	admin := tb.client()
	createTopic(t, admin, topic, 1)
	producer := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	consumer := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.EqualValues(t, 0, leaderEpoch(t, admin, topic))
	produce(t, producer, topic, 0, 5)
	got := consume(t, consumer, 5)

	// Each restart moves the leadership away (the controlled shutdown)
	// and back: two epochs, the second the new run's.
	tb.stop()
	tb = startBrokerAt(t, dir, addr)
	e1 := leaderEpoch(t, admin, topic)
	require.Greater(t, e1, int32(0), "a new epoch for the new run")
	code, _, _ := epochEnd(t, admin, topic, 0, 0)
	require.Equal(t, kerr.FencedLeaderEpoch.Code, code, "a client of the last run's epoch")
	code, epoch, end := epochEnd(t, admin, topic, e1, 0)
	require.Zero(t, code)
	require.Equal(t, [2]int64{0, 5}, [2]int64{int64(epoch), end}, "epoch 0 ended where the last run left the log")
	produce(t, producer, topic, 5, 8)
	got = append(got, consume(t, consumer, 3)...)

	tb.stop()
	tb = startBrokerAt(t, dir, addr)
	e2 := leaderEpoch(t, admin, topic)
	require.Greater(t, e2, e1)
	for _, want := range [][3]int32{{0, 0, 5}, {e1, e1, 8}, {e2, e2, 8}} {
		code, epoch, end := epochEnd(t, admin, topic, e2, want[0])
		require.Zero(t, code)
		require.Equal(t, []int64{int64(want[1]), int64(want[2])}, []int64{int64(epoch), end}, "epoch %d", want[0])
	}
	produce(t, producer, topic, 8, 10)
	got = append(got, consume(t, consumer, 2)...)
	recs := recordsByKey(t, got, 0, 10)
	for i := range 10 {
		require.EqualValues(t, i, recs[key(i)].Offset, key(i))
	}

	// The batches carry the epoch of the run that wrote them.
	p, err := tb.b.Node().Log(topic, 0)
	require.NoError(t, err)
	bs, err := p.Read(0, 1<<20, log.ReadUncommitted)
	require.NoError(t, err)
	defer bs.Close()
	epochAt := map[int64]int32{}
	for b, err := range bs.All() {
		require.NoError(t, err)
		for r, err := range b.Records() {
			require.NoError(t, err)
			epochAt[r.Offset] = b.PartitionLeaderEpoch()
		}
	}
	require.Equal(t, map[int64]int32{0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: e1, 6: e1, 7: e1, 8: e2, 9: e2}, epochAt)
}
