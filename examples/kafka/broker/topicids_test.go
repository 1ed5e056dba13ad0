package broker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchByID sends one Fetch of the given version for partition 0 of a topic
// id from offset 0, without a session.
func fetchByID(c *rawConn, version int16, id [16]byte) *kmsg.FetchResponse {
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = 1 << 20
	t := kmsg.NewFetchRequestTopic()
	t.TopicID = id
	p := kmsg.NewFetchRequestTopicPartition()
	p.PartitionMaxBytes = 1 << 20
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return c.do(req, version).(*kmsg.FetchResponse)
}

// TestTopicIDs: Metadata names each topic by the data directory's id
// (KIP-516); Fetch v13 and v17 read a topic by that id; an id of no topic
// is UNKNOWN_TOPIC_ID; DeleteTopics v6 deletes by id, and a topic created
// again under the same name has a new id, so a fetch by the old one is
// UNKNOWN_TOPIC_ID instead of reading the new topic's records.
func TestTopicIDs(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "named"
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, c, topic, 1)
	produceTo(t, c, topic, 0, "old-0", "old-1")
	id := topicID(t, tb, topic)
	require.NotEqual(t, [16]byte{}, id)

	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	mresp, err := md.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, id, mresp.Topics[0].TopicID)

	conn := dial(t, tb.addr)
	for _, v := range []int16{13, 17} {
		resp := fetchByID(conn, v, id)
		require.Zero(t, resp.ErrorCode)
		require.Equal(t, id, resp.Topics[0].TopicID, "v%d", v)
		require.Equal(t, map[int32][]string{0: {"old-0", "old-1"}}, fetchedKeys(t, resp), "v%d", v)
	}
	unknown := fetchByID(conn, 13, [16]byte{1, 2, 3})
	require.Equal(t, [16]byte{1, 2, 3}, unknown.Topics[0].TopicID)
	require.Equal(t, kerr.UnknownTopicID.Code, unknown.Topics[0].Partitions[0].ErrorCode)

	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Topics = []kmsg.DeleteTopicsRequestTopic{{TopicID: id}, {TopicID: [16]byte{9}}, {Topic: kmsg.StringPtr(topic), TopicID: id}}
	dresp := conn.do(del, 6).(*kmsg.DeleteTopicsResponse)
	require.Len(t, dresp.Topics, 3)
	require.Zero(t, dresp.Topics[0].ErrorCode)
	require.Equal(t, topic, *dresp.Topics[0].Topic, "the name of the id")
	require.Equal(t, kerr.UnknownTopicID.Code, dresp.Topics[1].ErrorCode)
	require.Equal(t, kerr.InvalidRequest.Code, dresp.Topics[2].ErrorCode, "by name and by id at once")

	createTopic(t, c, topic, 1)
	produceTo(t, c, topic, 0, "new-0")
	newID := topicID(t, tb, topic)
	require.NotEqual(t, id, newID, "a new topic of the same name")
	stale := fetchByID(conn, 13, id)
	require.Equal(t, kerr.UnknownTopicID.Code, stale.Topics[0].Partitions[0].ErrorCode, "the old id names no topic")
	require.Equal(t, map[int32][]string{0: {"new-0"}}, fetchedKeys(t, fetchByID(conn, 13, newID)))
}

// TestOffsetsByTopicID: OffsetCommit v10 and OffsetFetch v10 name topics by
// id; a committed offset is read back under the id it was committed by,
// and an id of no topic is UNKNOWN_TOPIC_ID while the rest of the request
// is served.
func TestOffsetsByTopicID(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	c := tb.client()
	createTopic(t, c, "tracked", 2)
	id, unknown := topicID(t, tb, "tracked"), [16]byte{7}
	conn := dial(t, tb.addr)

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "by-id", -1
	for _, tid := range [][16]byte{unknown, id} {
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.TopicID = tid
		for p := range int32(2) {
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			cp.Partition, cp.Offset = p, 10+int64(p)
			ct.Partitions = append(ct.Partitions, cp)
		}
		commit.Topics = append(commit.Topics, ct)
	}
	cresp := conn.do(commit, 10).(*kmsg.OffsetCommitResponse)
	require.Len(t, cresp.Topics, 2)
	require.Equal(t, unknown, cresp.Topics[0].TopicID)
	require.Equal(t, id, cresp.Topics[1].TopicID)
	for _, p := range cresp.Topics[0].Partitions {
		require.Equal(t, kerr.UnknownTopicID.Code, p.ErrorCode)
	}
	for _, p := range cresp.Topics[1].Partitions {
		require.Zero(t, p.ErrorCode)
	}

	fetch := kmsg.NewPtrOffsetFetchRequest()
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = "by-id"
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{TopicID: id, Partitions: []int32{0, 1}}, {TopicID: unknown, Partitions: []int32{0}}}
	fetch.Groups = append(fetch.Groups, g)
	fresp := conn.do(fetch, 10).(*kmsg.OffsetFetchResponse)
	require.Len(t, fresp.Groups, 1)
	require.Zero(t, fresp.Groups[0].ErrorCode)
	got := map[[16]byte]map[int32][2]int64{}
	for _, rt := range fresp.Groups[0].Topics {
		got[rt.TopicID] = map[int32][2]int64{}
		for _, p := range rt.Partitions {
			got[rt.TopicID][p.Partition] = [2]int64{p.Offset, int64(p.ErrorCode)}
		}
	}
	require.Equal(t, map[[16]byte]map[int32][2]int64{
		id:      {0: {10, 0}, 1: {11, 0}},
		unknown: {0: {-1, int64(kerr.UnknownTopicID.Code)}},
	}, got)
}
