//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

var kafkaKills = flag.Int("kafka-kills", 0, "TestKafkaKillLeader: how many partition leaders to stop, every third with SIGTERM, the others with SIGKILL (default 3 with -short, else 6)")

// startKafkaCluster starts three nodes that serve Kafka clients too.
func startKafkaCluster(t *testing.T, opts ...func(*supervisor)) (*supervisor, *client) {
	t.Helper()
	return startCluster(t, append([]func(*supervisor){func(s *supervisor) { s.withKafka = true }}, opts...)...)
}

// newKgo returns a franz-go client of the cluster's Kafka brokers. Metadata
// may be refreshed every 100 ms (the default, 5 s, would be most of a
// failover).
func newKgo(t *testing.T, s *supervisor, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	var seeds []string
	for _, id := range s.ids() {
		seeds = append(seeds, s.kafka[id])
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.MetadataMaxAge(2 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// createKafkaTopic creates a topic with CreateTopics, as a Kafka admin
// client does.
func createKafkaTopic(t *testing.T, cl *kgo.Client, topic string, partitions int32, rf int16, assignment ...[]int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, rf
	for i, a := range assignment {
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, kmsg.CreateTopicsRequestTopicReplicaAssignment{Partition: int32(i), Replicas: a})
	}
	req.Topics = []kmsg.CreateTopicsRequestTopic{rt}
	req.TimeoutMillis = 20000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.NoError(t, kerr.ErrorForCode(resp.Topics[0].ErrorCode), "creating %s: %v", topic, str(resp.Topics[0].ErrorMessage))
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// recordBatch is one uncompressed batch without a producer id.
func recordBatch(t *testing.T, values ...string) []byte {
	t.Helper()
	var recs []segment.Record
	for _, v := range values {
		recs = append(recs, segment.Record{Value: []byte(v), Timestamp: time.Now().UnixMilli()})
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	require.NoError(t, err)
	return b
}

// produceTo sends one Produce request for a partition to one broker and
// returns the partition's answer. Its acks are cl's (kgo sets them).
func produceTo(t *testing.T, cl *kgo.Client, node replica.NodeID, topic string, partition int32, values ...string) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, recordBatch(t, values...)
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(node)).Request(ctx, req)
	require.NoError(t, err)
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// fetchFrom sends one Fetch for a partition, with the leader epoch the
// client believes current, to one broker and returns its error.
func fetchFrom(t *testing.T, cl *kgo.Client, node replica.NodeID, topic string, partition, currentEpoch int32) error {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.MinBytes = -1, 1<<20, 1
	rt := kmsg.NewFetchRequestTopic()
	// By name and by id, as the version kgo picks (the broker's latest)
	// asks: the id from the broker's Metadata, as a client learns it.
	rt.Topic, rt.TopicID = topic, kafkaMetadata(t, cl, node, topic).Topics[0].TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.PartitionMaxBytes, rp.LogStartOffset = partition, currentEpoch, 1<<20, -1
	rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(node)).Request(ctx, req)
	require.NoError(t, err)
	fr := resp.(*kmsg.FetchResponse)
	require.NoError(t, kerr.ErrorForCode(fr.ErrorCode))
	return kerr.ErrorForCode(fr.Topics[0].Partitions[0].ErrorCode)
}

// listOffsetsFrom asks one broker for a partition's high watermark, with
// a current leader epoch, and returns the answer.
func listOffsetsFrom(t *testing.T, cl *kgo.Client, node replica.NodeID, topic string, partition, currentEpoch int32) kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	p, err := requestListOffsets(cl, node, topic, partition, currentEpoch)
	require.NoError(t, err)
	return p
}

// requestListOffsets is listOffsetsFrom returning the request's error: a
// connection to a node that restarted may end (EOF) before kgo dials
// again, which a caller that waits for an answer retries.
func requestListOffsets(cl *kgo.Client, node replica.NodeID, topic string, partition, currentEpoch int32) (kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = partition, currentEpoch, -1
	rt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rp}
	req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return kmsg.ListOffsetsResponseTopicPartition{}, err
	}
	return resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0], nil
}

// kafkaMetadata asks one broker for a topic's metadata.
func kafkaMetadata(t *testing.T, cl *kgo.Client, node replica.NodeID, topic string) *kmsg.MetadataResponse {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(node)).Request(ctx, req)
	require.NoError(t, err)
	return resp.(*kmsg.MetadataResponse)
}

func nodeIDs(ids []int32) []replica.NodeID {
	out := make([]replica.NodeID, len(ids))
	for i, id := range ids {
		out[i] = replica.NodeID(id)
	}
	return out
}

// Every node's Kafka broker answers Metadata with the three live brokers
// and the partition's real leader, leader epoch, replicas and ISR, as the
// controller committed them. A produce, fetch or ListOffsets sent to a
// follower is NOT_LEADER_OR_FOLLOWER; a fetch with a leader epoch from
// before the leader moved is FENCED_LEADER_EPOCH, with one from after it
// UNKNOWN_LEADER_EPOCH (KIP-320); acks=all to a partition with fewer
// replicas than MinInsyncReplicas (2) is NOT_ENOUGH_REPLICAS, and acks=1
// goes through. FindCoordinator names the leader of the group's partition
// of __consumer_offsets, where a group member's commit lands.
func TestKafkaLeadershipRules(t *testing.T) {
	s, cl := startKafkaCluster(t)
	kc := newKgo(t, s) // acks=all
	leaderAcks := newKgo(t, s, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	const topic = "rules"
	createKafkaTopic(t, kc, topic, 1, 3)
	waitISR(t, s, cl, topic, 3)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	pv := *md.partition(topic, 0)

	var want []string
	for _, id := range s.ids() {
		want = append(want, fmt.Sprintf("%d@%s", id, s.kafka[id]))
	}
	for _, id := range s.ids() {
		var km *kmsg.MetadataResponse
		// A node may apply the committed records a moment after another.
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to list every live broker at its Kafka address and the topic", id), func() (bool, string) {
			km = kafkaMetadata(t, kc, id, topic)
			var brokers []string
			for _, b := range km.Brokers {
				brokers = append(brokers, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
			}
			return slices.Equal(want, brokers) && km.Topics[0].ErrorCode == 0 && len(km.Topics[0].Partitions[0].ISR) == 3,
				fmt.Sprintf("brokers %v, topic %+v", brokers, km.Topics[0])
		})
		require.Equal(t, int32(md.RaftLeader), km.ControllerID, "node %d names the active controller", id)
		p := km.Topics[0].Partitions[0]
		require.Equal(t, int32(pv.Leader), p.Leader, "node %d names the real leader", id)
		require.Equal(t, pv.LeaderEpoch, p.LeaderEpoch)
		require.Equal(t, pv.Replicas, nodeIDs(p.Replicas))
		require.ElementsMatch(t, pv.ISR, nodeIDs(p.ISR))
	}

	var full metadata
	require.NoError(t, cl.getJSON(context.Background(), 1, "/status", &full))
	for _, b := range full.Brokers {
		require.Equal(t, s.kafka[b.ID], b.Kafka, "the status page shows broker %d's Kafka address", b.ID)
	}

	leader := pv.Leader
	follower := pv.Replicas[slices.IndexFunc(pv.Replicas, func(id replica.NodeID) bool { return id != leader })]
	rp := produceTo(t, kc, follower, topic, 0, "to a follower")
	require.ErrorIs(t, kerr.ErrorForCode(rp.ErrorCode), kerr.NotLeaderForPartition)
	require.ErrorIs(t, fetchFrom(t, kc, follower, topic, 0, pv.LeaderEpoch), kerr.NotLeaderForPartition)
	require.ErrorIs(t, kerr.ErrorForCode(listOffsetsFrom(t, kc, follower, topic, 0, -1).ErrorCode), kerr.NotLeaderForPartition)

	// The metadata may name the leader a moment before its replica has
	// taken the lead (as in Kafka): the client asks again.
	waitFor(t, 10*time.Second, "acks=all to the leader", func() (bool, string) {
		rp = produceTo(t, kc, leader, topic, 0, "a", "b")
		return rp.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(rp.ErrorCode), str(rp.ErrorMessage))
	})
	require.Equal(t, int64(0), rp.BaseOffset)
	lo := listOffsetsFrom(t, kc, leader, topic, 0, pv.LeaderEpoch)
	require.NoError(t, kerr.ErrorForCode(lo.ErrorCode))
	require.Equal(t, int64(2), lo.Offset, "acks=all answered once the high watermark passed the batch")
	require.NoError(t, fetchFrom(t, kc, leader, topic, 0, pv.LeaderEpoch))
	require.ErrorIs(t, fetchFrom(t, kc, leader, topic, 0, pv.LeaderEpoch+1), kerr.UnknownLeaderEpoch)

	// The leader dies: the next leader leads a later epoch, and a client
	// still on the old one is fenced.
	require.NoError(t, s.signal(leader, syscall.SIGKILL))
	var moved *partitionView
	waitFor(t, 20*time.Second, "a new leader", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		moved = md.partition(topic, 0)
		return moved.Leader != leader && moved.Leader != replica.NoNode, fmt.Sprintf("%+v", moved)
	})
	require.Greater(t, moved.LeaderEpoch, pv.LeaderEpoch)
	waitFor(t, 10*time.Second, "the new leader's broker to know it leads", func() (bool, string) {
		err := fetchFrom(t, kc, moved.Leader, topic, 0, moved.LeaderEpoch)
		return err == nil, fmt.Sprint(err)
	})
	require.ErrorIs(t, fetchFrom(t, kc, moved.Leader, topic, 0, pv.LeaderEpoch), kerr.FencedLeaderEpoch)
	lo = listOffsetsFrom(t, kc, moved.Leader, topic, 0, pv.LeaderEpoch)
	require.ErrorIs(t, kerr.ErrorForCode(lo.ErrorCode), kerr.FencedLeaderEpoch)
	km := kafkaMetadata(t, kc, moved.Leader, topic)
	require.Len(t, km.Brokers, 2, "the dead broker is no longer listed")
	require.Equal(t, int32(moved.Leader), km.Topics[0].Partitions[0].Leader)
	require.Contains(t, km.Topics[0].Partitions[0].OfflineReplicas, int32(leader))

	// One replica, MinInsyncReplicas 2.
	const single = "single"
	createKafkaTopic(t, kc, single, -1, -1, []int32{int32(moved.Leader)})
	waitISR(t, s, cl, single, 1)
	waitFor(t, 10*time.Second, "acks=1 to the one replica", func() (bool, string) {
		rp = produceTo(t, leaderAcks, moved.Leader, single, 0, "x")
		return rp.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(rp.ErrorCode), str(rp.ErrorMessage))
	})
	rp = produceTo(t, kc, moved.Leader, single, 0, "y")
	require.ErrorIs(t, kerr.ErrorForCode(rp.ErrorCode), kerr.NotEnoughReplicas)

	// Groups: the leader of the group's offsets partition coordinates
	// it; a group member reads from the partition's new leader and
	// commits there.
	coordinator := waitGroupCoordinator(t, s, cl, "g")
	for _, id := range s.ids() {
		if id == leader {
			continue
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to name node %d the group coordinator", id, coordinator), func() (bool, string) {
			fc := kmsg.NewPtrFindCoordinatorRequest()
			fc.CoordinatorKeys = []string{"g"}
			resp, err := kc.Broker(int(id)).Request(context.Background(), fc)
			if err != nil {
				return false, err.Error()
			}
			c := resp.(*kmsg.FindCoordinatorResponse).Coordinators[0]
			return c.ErrorCode == 0 && c.NodeID == int32(coordinator) && s.kafka[coordinator] == fmt.Sprintf("%s:%d", c.Host, c.Port),
				fmt.Sprintf("%+v", c)
		})
	}
	member := newKgo(t, s, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond))
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < 2 && ctx.Err() == nil {
		member.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value)) })
	}
	require.Equal(t, []string{"0:a", "1:b"}, got)
	require.NoError(t, member.CommitUncommittedOffsets(ctx))
	of := kmsg.NewPtrOffsetFetchRequest() // v8+: groups
	og := kmsg.NewOffsetFetchRequestGroup()
	og.Group = "g"
	ogt := kmsg.NewOffsetFetchRequestGroupTopic()
	ogt.Topic, ogt.Partitions = topic, []int32{0}
	ogt.TopicID = kafkaMetadata(t, kc, coordinator, topic).Topics[0].TopicID // v10 names topics by id
	og.Topics = []kmsg.OffsetFetchRequestGroupTopic{ogt}
	of.Groups = []kmsg.OffsetFetchRequestGroup{og}
	resp, err := kc.Broker(int(coordinator)).Request(ctx, of)
	require.NoError(t, err)
	ofr := resp.(*kmsg.OffsetFetchResponse)
	require.Len(t, ofr.Groups, 1)
	require.Equal(t, int64(2), ofr.Groups[0].Topics[0].Partitions[0].Offset, "the commit is on the coordinator")
	// The other live node does not lead the group's offsets partition.
	other := slices.DeleteFunc(s.ids(), func(id replica.NodeID) bool { return id == leader || id == coordinator })[0]
	resp, err = kc.Broker(int(other)).Request(ctx, of)
	require.NoError(t, err)
	ofr = resp.(*kmsg.OffsetFetchResponse)
	require.ErrorIs(t, kerr.ErrorForCode(ofr.Groups[0].ErrorCode), kerr.NotCoordinator, "node %d answers for a group it does not coordinate", other)
}

// kafkaAck is a record the cluster acknowledged to the producer.
type kafkaAck struct {
	value  string
	offset int64
	sent   time.Time
}

// A franz-go client produces idempotently with acks=all (MinInsyncReplicas
// 2, three replicas) while the partition leader's process is SIGKILLed,
// and another franz-go client consumes the partition all along. Both
// follow each leader change by themselves, from Metadata and the
// NOT_LEADER_OR_FOLLOWER answers. The producer loses and repeats nothing:
// every record it was told is written is consumed exactly once, at the
// offset it was acknowledged with, in the order produced, and no record
// is in the log twice, although batches appended by a leader that died
// before answering are retried to the next one (which answers them from
// its producer state). The killed node is restarted and rejoins the ISR
// before the next kill. Every other stop takes the controller too (raft
// leadership is moved to the leader's node first), and every third is a
// controlled shutdown (SIGTERM) rather than a SIGKILL.
func TestKafkaKillLeader(t *testing.T) {
	kills := *kafkaKills
	if kills == 0 {
		kills = 6
		if testing.Short() {
			kills = 3
		}
	}
	s, cl := startKafkaCluster(t)
	const topic = "kafka-kills"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, topic, 1, 3)
	waitISR(t, s, cl, topic, 3)

	prod := newKgo(t, s, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProduceRequestTimeout(10*time.Second))
	cons := newKgo(t, s, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))

	var mu sync.Mutex
	var acked []kafkaAck
	var failed []error
	produced := 0
	stop := make(chan struct{})
	var wg, producing sync.WaitGroup
	producing.Go(func() {
		sem := make(chan struct{}, 64) // records in flight
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case sem <- struct{}{}:
			}
			v := fmt.Sprintf("r-%07d", i)
			sent := time.Now()
			mu.Lock()
			produced++
			mu.Unlock()
			prod.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", v, err))
				} else {
					acked = append(acked, kafkaAck{v, r.Offset, sent})
				}
				mu.Unlock()
				<-sem
			})
			time.Sleep(time.Millisecond)
		}
	})
	type consumedRec struct {
		value  string
		offset int64
	}
	var consumed []consumedRec
	var consumeErrs []error
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	wg.Go(func() {
		for consumeCtx.Err() == nil {
			fs := cons.PollFetches(consumeCtx)
			mu.Lock()
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					consumeErrs = append(consumeErrs, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) { consumed = append(consumed, consumedRec{string(r.Value), r.Offset}) })
			mu.Unlock()
		}
	})
	// firstAckAfter waits for the first acknowledgement of a record sent
	// after at.
	firstAckAfter := func(at time.Time) (time.Time, bool) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			i := slices.IndexFunc(acked, func(a kafkaAck) bool { return a.sent.After(at) })
			mu.Unlock()
			if i >= 0 {
				return time.Now(), true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Time{}, false
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var failovers []time.Duration
	for k := range kills {
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))))
		md, err := metadataFrom(s, cl)
		require.NoError(t, err)
		victim := md.partition(topic, 0).Leader
		wasController := md.RaftLeader == victim
		if k%2 == 1 && !wasController {
			// Every other kill takes the controller with the leader.
			moveController(t, s, cl, md.RaftLeader, victim)
			wasController = true
		}
		sig, how := syscall.SIGKILL, "killed"
		if k%3 == 2 {
			// Every third stop is a controlled shutdown: the node, still
			// up, answers NOT_LEADER_OR_FOLLOWER once its leadership moved.
			sig, how = syscall.SIGTERM, "shut down"
		}
		killed := time.Now()
		require.NoError(t, s.signal(victim, sig))
		at, ok := firstAckAfter(killed)
		require.True(t, ok, "stop %d: a record produced after node %d was %s was acknowledged", k, victim, how)
		if sig == syscall.SIGKILL {
			failovers = append(failovers, at.Sub(killed))
		}
		md, err = metadataFrom(s, cl)
		require.NoError(t, err)
		t.Logf("stop %d: node %d %s (the controller too: %t), node %d leads epoch %d; first acknowledgement after %v",
			k, victim, how, wasController, md.partition(topic, 0).Leader, md.partition(topic, 0).LeaderEpoch, at.Sub(killed).Round(time.Millisecond))
		require.NoError(t, s.startNode(victim))
		waitFor(t, 30*time.Second, fmt.Sprintf("node %d back in the ISR", victim), func() (bool, string) {
			md, err := metadataFrom(s, cl)
			if err != nil {
				return false, err.Error()
			}
			pv := md.partition(topic, 0)
			return slices.Contains(pv.ISR, victim), fmt.Sprintf("ISR %v", pv.ISR)
		})
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	// Flush waits only for records already handed to Produce: the producer
	// must have stopped first.
	producing.Wait()
	flushCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, prod.Flush(flushCtx))

	var end kmsg.ListOffsetsResponseTopicPartition
	waitFor(t, 10*time.Second, "the leader's high watermark", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		pv := md.partition(topic, 0)
		if end, err = requestListOffsets(admin, pv.Leader, topic, 0, pv.LeaderEpoch); err != nil {
			return false, err.Error()
		}
		return end.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(end.ErrorCode))
	})
	waitFor(t, 30*time.Second, "the consumer to reach the high watermark", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		n := len(consumed)
		return n > 0 && consumed[n-1].offset >= end.Offset-1, fmt.Sprintf("%d consumed, high watermark %d", n, end.Offset)
	})
	stopConsuming()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failed, "no record failed: the idempotent producer retries until the cluster has it")
	require.Len(t, acked, produced, "every record produced was acknowledged")
	at := map[string]int64{}
	for i, r := range consumed {
		if i > 0 {
			require.Greater(t, r.offset, consumed[i-1].offset, "consumed in offset order, each once")
		}
		_, twice := at[r.value]
		require.False(t, twice, "%s is in the log twice", r.value)
		at[r.value] = r.offset
	}
	slices.SortFunc(acked, func(a, b kafkaAck) int { return int(a.offset - b.offset) })
	for i, a := range acked {
		off, ok := at[a.value]
		require.True(t, ok, "acknowledged %s at %d was consumed", a.value, a.offset)
		require.Equal(t, a.offset, off, "acknowledged %s was consumed at its offset", a.value)
		if i > 0 {
			require.Less(t, acked[i-1].value, a.value, "records are in the log in the order produced")
		}
	}
	require.Len(t, consumed, len(acked), "the log holds the acknowledged records and nothing else")
	retries := 0
	for _, id := range s.ids() {
		out, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("node-%d.out", id)))
		retries += strings.Count(string(out), "the leader answered a producer's retry with the original's offsets")
	}
	t.Logf("%d stops; %d records produced and acknowledged, all consumed once, in order; %d retried batches answered from a leader's producer state; failover after a SIGKILL (to the first acknowledgement) %s; consumer errors seen %d",
		kills, len(acked), retries, summary(failovers), len(consumeErrs))
}

// kcatPath finds kcat or skips t (kafkatest.KcatPath).
func kcatPath(t *testing.T) string { return kafkatest.KcatPath(t, "librdkafka against the cluster") }

// kcat runs kcat against the cluster's Kafka brokers and returns its
// output.
func kcat(t *testing.T, s *supervisor, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), append([]string{"-b", formatPeers(s.kafka)}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "kcat %v: %s", args, stderr.String())
	return stdout.String()
}

// kcat (librdkafka, a client with its own protocol implementation) lists
// the three brokers and the partition's real leader, produces keyed
// records with acks=all, produces again after the leader's process is
// SIGKILLed (it finds the new leader), and consumes every record, in order
// at consecutive offsets, from the new leader.
func TestKcatFollowsTheLeader(t *testing.T) {
	kcatPath(t)
	s, cl := startKafkaCluster(t)
	const topic = "kcat"
	createKafkaTopic(t, newKgo(t, s), topic, 1, 3)
	waitISR(t, s, cl, topic, 3)

	var kmd struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Partitions []struct {
				Leader int32 `json:"leader"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	require.NoError(t, json.Unmarshal([]byte(kcat(t, s, "", "-L", "-J", "-t", topic)), &kmd))
	require.Len(t, kmd.Brokers, 3)
	for _, b := range kmd.Brokers {
		require.Equal(t, s.kafka[replica.NodeID(b.ID)], b.Name)
	}
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	leader := md.partition(topic, 0).Leader
	require.Equal(t, int32(leader), kmd.Topics[0].Partitions[0].Leader)

	produce := []string{"-P", "-t", topic, "-p", "0", "-K", ":", "-X", "acks=all", "-X", "message.timeout.ms=30000"}
	kcat(t, s, "k0:v0\nk1:v1\nk2:v2\n", produce...)
	require.NoError(t, s.signal(leader, syscall.SIGKILL))
	waitFor(t, 20*time.Second, "a new leader", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		l := md.partition(topic, 0).Leader
		return l != leader && l != replica.NoNode, fmt.Sprint(l)
	})
	kcat(t, s, "k3:v3\nk4:v4\n", produce...)
	out := kcat(t, s, "", "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", "5", "-f", "%o %k=%s\n")
	require.Equal(t, "0 k0=v0\n1 k1=v1\n2 k2=v2\n3 k3=v3\n4 k4=v4\n", out)
}
