package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// fakeCluster is a broker.Cluster of two brokers, this one (1) and one
// that is never reached (2), with the partitions' state set by the test and
// this node's replicas in a Dir whose high watermark the test moves, as a
// replication layer would, and groups served by a group.Service of this
// node's own.
type fakeCluster struct {
	dir    *log.Dir
	addrs  []broker.BrokerAddr
	groups *group.Service

	mu           sync.Mutex
	parts        map[string][]broker.PartitionState
	appended     []int16 // the acks of each Append
	created      []string
	coordinator  int32
	nextProducer int64
}

func (f *fakeCluster) Brokers() ([]broker.BrokerAddr, int32) { return f.addrs, 2 }

func (f *fakeCluster) Topics() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t := range f.parts {
		out = append(out, t)
	}
	return out, nil
}

// TopicID is the id of this node's replica's topic, which the test created.
func (f *fakeCluster) TopicID(topic string) ([16]byte, error) { return f.dir.TopicID(topic) }

func (f *fakeCluster) TopicConfig(topic string) (log.TopicConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ps, ok := f.parts[topic]
	if !ok {
		return log.TopicConfig{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	return log.TopicConfig{Partitions: int32(len(ps))}, nil
}

func (f *fakeCluster) Partition(topic string, id int32) (broker.PartitionState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ps, ok := f.parts[topic]
	if !ok || id < 0 || int(id) >= len(ps) {
		return broker.PartitionState{}, fmt.Errorf("%w: %s-%d", log.ErrUnknownPartition, topic, id)
	}
	return ps[id], nil
}

func (f *fakeCluster) Log(topic string, id int32) (*log.Partition, error) {
	return f.dir.Partition(topic, id)
}

// Append appends as a leader and leaves the high watermark where the test
// puts it.
func (f *fakeCluster) Append(_ context.Context, topic string, id int32, acks int16, b segment.Batch) (log.AppendResult, error) {
	f.mu.Lock()
	f.appended = append(f.appended, acks)
	f.mu.Unlock()
	p, err := f.dir.Partition(topic, id)
	if err != nil {
		return log.AppendResult{}, err
	}
	return p.AppendBatch(b)
}

func (f *fakeCluster) CreateTopic(_ context.Context, name string, partitions, rf int32, assignment [][]int32, _ map[string]string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, fmt.Sprintf("%s partitions=%d rf=%d assignment=%v", name, partitions, rf, assignment))
	return fmt.Errorf("%w: the fake creates nothing", kafkaerr.ErrPolicyViolation)
}

func (f *fakeCluster) DescribeTopicConfigs(topic string) ([]broker.ConfigEntry, error) {
	return nil, fmt.Errorf("%w: the fake keeps no configs", kerr.InvalidRequest)
}

func (f *fakeCluster) AlterTopicConfigs(context.Context, string, []broker.ConfigOp, bool, bool) error {
	return fmt.Errorf("%w: the fake alters no configs", kafkaerr.ErrPolicyViolation)
}

func (f *fakeCluster) DeleteTopic(context.Context, string) error { return kerr.TopicDeletionDisabled }

func (f *fakeCluster) NewProducerID() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextProducer++
	return 1<<40 | f.nextProducer, nil
}

func (f *fakeCluster) Groups() *group.Service { return f.groups }

func (f *fakeCluster) GroupCoordinator(string) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.coordinator
}

// startClusterBroker serves broker 1 of a fakeCluster whose topic "t" has
// partition 0 led by broker 1 in epoch 5 (replicas 1 and 2, broker 2 out
// of the ISR) and partition 1 led by broker 2 in epoch 3.
func startClusterBroker(t *testing.T) (*fakeCluster, *kgo.Client) {
	t.Helper()
	return startClusterBrokerWith(t, func(f *fakeCluster) broker.Cluster { return f })
}

// startClusterBrokerWith is startClusterBroker with the broker serving the
// Cluster wrap makes of the fakeCluster.
func startClusterBrokerWith(t *testing.T, wrap func(*fakeCluster) broker.Cluster) (*fakeCluster, *kgo.Client) {
	t.Helper()
	d, err := log.OpenDir(t.TempDir(), log.DirOptions{Log: log.Options{ExternalHighWatermark: true}, MaintenanceInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	require.NoError(t, d.CreateTopic("t", log.TopicConfig{Partitions: 2}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host, port, _ := net.SplitHostPort(l.Addr().String())
	p, _ := strconv.Atoi(port)
	f := &fakeCluster{dir: d, coordinator: 2,
		addrs: []broker.BrokerAddr{{ID: 1, Host: host, Port: int32(p)}, {ID: 2, Host: "127.0.0.1", Port: 1}},
		parts: map[string][]broker.PartitionState{"t": {
			{Leader: 1, LeaderEpoch: 5, Replicas: []int32{1, 2}, ISR: []int32{1}, Offline: []int32{2}},
			{Leader: 2, LeaderEpoch: 3, Replicas: []int32{2, 1}, ISR: []int32{2, 1}, Offline: []int32{}},
		}}}
	// Offsets are committed for the cluster's topics; subscriptions by
	// regular expression match them.
	gd, err := log.OpenDir(t.TempDir(), log.DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { gd.Close() })
	f.groups, err = group.OpenService(gd, group.ServiceOptions{Config: group.Config{
		Partitions: func(topic string) int32 {
			tc, err := f.TopicConfig(topic)
			if err != nil {
				return 0
			}
			return tc.Partitions
		},
		Topics: func() []string { topics, _ := f.Topics(); return topics },
	}})
	require.NoError(t, err)
	t.Cleanup(func() { f.groups.Close() })
	b, err := broker.Open(broker.Config{NodeID: 1, Cluster: wrap(f),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, b.Close())
		require.ErrorIs(t, <-done, broker.ErrClosed)
	})
	c, err := kgo.NewClient(kgo.SeedBrokers(l.Addr().String()), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return f, c
}

// A broker given a Cluster answers by it: Metadata lists the cluster's
// brokers, controller and partition states; a partition led by another
// broker is NOT_LEADER_OR_FOLLOWER for Produce, Fetch, ListOffsets and
// OffsetForLeaderEpoch; a current leader epoch older than the partition's
// is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320),
// checked before leadership as Kafka does; a produce goes to
// Cluster.Append with its acks; consumers read below the high watermark
// the cluster sets; FindCoordinator names the cluster's group coordinator,
// and the cluster's group.Service serves the groups; CreateTopics hands
// the cluster the replication factor; transactions are refused by a
// cluster that keeps no transaction coordinators.
func TestBrokerInACluster(t *testing.T) {
	f, c := startClusterBroker(t)
	ctx := context.Background()

	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c)
	require.NoError(t, err)
	require.Len(t, md.Brokers, 2)
	require.Equal(t, int32(2), md.ControllerID)
	require.Len(t, md.Topics, 1)
	parts := md.Topics[0].Partitions
	require.Len(t, parts, 2)
	require.Equal(t, []int32{1, 5}, []int32{parts[0].Leader, parts[0].LeaderEpoch})
	require.Equal(t, []int32{1, 2}, parts[0].Replicas)
	require.Equal(t, []int32{1}, parts[0].ISR)
	require.Equal(t, []int32{2}, parts[0].OfflineReplicas)
	require.Equal(t, []int32{2, 3}, []int32{parts[1].Leader, parts[1].LeaderEpoch})

	self := c.Broker(1)
	produce := func(partition int32, values ...string) kmsg.ProduceResponseTopicPartition {
		var recs []segment.Record
		for _, v := range values {
			recs = append(recs, segment.Record{Value: []byte(v)})
		}
		batch, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
		require.NoError(t, err)
		req := kmsg.NewPtrProduceRequest()
		req.TimeoutMillis = 1000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: partition, Records: batch}}}}
		resp, err := self.Request(ctx, req)
		require.NoError(t, err)
		return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	require.Equal(t, kerr.NotLeaderForPartition.Code, produce(1, "x").ErrorCode)
	require.Equal(t, int16(0), produce(0, "a", "b").ErrorCode)
	rp := produce(0, "c")
	require.Equal(t, int16(0), rp.ErrorCode)
	require.Equal(t, int64(2), rp.BaseOffset)
	require.Equal(t, []int16{1, 1}, f.appended, "the produces went to Cluster.Append with their acks")

	// The cluster commits the first batch, not the second.
	p0, err := f.dir.Partition("t", 0)
	require.NoError(t, err)
	_, err = p0.AdvanceHighWatermark(2)
	require.NoError(t, err)

	topicID, err := f.dir.TopicID("t")
	require.NoError(t, err)
	fetch := func(partition, epoch int32) *kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes = -1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "t"
		rt.TopicID = topicID // kgo sends the broker's latest version, v13+: by id
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = partition, epoch, 1<<20
		rt.Partitions = []kmsg.FetchRequestTopicPartition{fp}
		req.Topics = []kmsg.FetchRequestTopic{rt}
		resp, err := self.Request(ctx, req)
		require.NoError(t, err)
		return &resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	require.Equal(t, kerr.FencedLeaderEpoch.Code, fetch(0, 4).ErrorCode)
	require.Equal(t, kerr.UnknownLeaderEpoch.Code, fetch(0, 6).ErrorCode)
	require.Equal(t, kerr.NotLeaderForPartition.Code, fetch(1, 3).ErrorCode)
	require.Equal(t, kerr.FencedLeaderEpoch.Code, fetch(1, 2).ErrorCode, "the epoch is checked before leadership")
	fr := fetch(0, 5)
	require.Equal(t, int16(0), fr.ErrorCode)
	require.Equal(t, int64(2), fr.HighWatermark)
	var values []string
	for b, rest := fr.RecordBatches, []byte(nil); len(b) > 0; b = rest {
		batch, r, err := segment.ParseBatch(b)
		require.NoError(t, err)
		rest = r
		for rec, err := range batch.Records() {
			require.NoError(t, err)
			if rec.Offset < fr.HighWatermark {
				values = append(values, string(rec.Value))
			}
		}
	}
	require.Equal(t, []string{"a", "b"}, values, "consumers read below the high watermark")

	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID = -1
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "t", Partitions: []kmsg.ListOffsetsRequestTopicPartition{
		{Partition: 0, CurrentLeaderEpoch: 5, Timestamp: -1}, {Partition: 1, CurrentLeaderEpoch: -1, Timestamp: -1}}}}
	resp, err := self.Request(ctx, lo)
	require.NoError(t, err)
	lps := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions
	require.Equal(t, []int64{0, 2, 5}, []int64{int64(lps[0].ErrorCode), lps[0].Offset, int64(lps[0].LeaderEpoch)})
	require.Equal(t, kerr.NotLeaderForPartition.Code, lps[1].ErrorCode)

	oe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	oe.ReplicaID = -1
	oe.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetForLeaderEpochRequestTopicPartition{
		{Partition: 1, CurrentLeaderEpoch: 3, LeaderEpoch: 3}}}}
	resp, err = self.Request(ctx, oe)
	require.NoError(t, err)
	require.Equal(t, kerr.NotLeaderForPartition.Code, resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode)

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{"g"}
	resp, err = self.Request(ctx, fc)
	require.NoError(t, err)
	co := resp.(*kmsg.FindCoordinatorResponse).Coordinators[0]
	require.Equal(t, []any{int16(0), int32(2), "127.0.0.1", int32(1)}, []any{co.ErrorCode, co.NodeID, co.Host, co.Port})

	// The cluster's group.Service serves the groups (it answers
	// NOT_COORDINATOR for those another broker coordinates).
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
	resp, err = self.Request(ctx, of)
	require.NoError(t, err)
	require.Equal(t, int16(0), resp.(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode)

	// A KIP-848 subscription by regular expression matches the cluster's
	// topics, not the broker's own directory's.
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis = "by-regex", "member-1", 60_000
	hb.SubscribedTopicRegex, hb.Topics = kmsg.StringPtr("t|u"), []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	resp, err = self.Request(ctx, hb)
	require.NoError(t, err)
	hr := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
	require.Zero(t, hr.ErrorCode, "%v", hr.ErrorMessage)
	require.NotNil(t, hr.Assignment)
	tid, err := f.dir.TopicID("t")
	require.NoError(t, err)
	require.Equal(t, []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{{TopicID: tid, Partitions: []int32{0, 1}}}, hr.Assignment.Topics)

	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "u", NumPartitions: 4, ReplicationFactor: 3}}
	resp, err = self.Request(ctx, ct)
	require.NoError(t, err)
	require.Equal(t, kerr.PolicyViolation.Code, resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode)
	require.Equal(t, []string{"u partitions=4 rf=3 assignment=[]"}, f.created)

	ip := kmsg.NewPtrInitProducerIDRequest()
	resp, err = self.Request(ctx, ip)
	require.NoError(t, err)
	require.Equal(t, int64(1<<40|1), resp.(*kmsg.InitProducerIDResponse).ProducerID, "producer ids are the cluster's")
	txn := "tx"
	ip.TransactionalID = &txn
	resp, err = self.Request(ctx, ip)
	require.NoError(t, err)
	require.Equal(t, kerr.InvalidRequest.Code, resp.(*kmsg.InitProducerIDResponse).ErrorCode, "a cluster without transaction coordinators serves no transactions")
}
