package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// describedConfigs asks one node's broker for a topic's configs: value and
// source of each. A node that has not applied the topic yet answers
// UNKNOWN_TOPIC_OR_PARTITION: no configs.
func describedConfigs(t *testing.T, cl *kgo.Client, node replica.NodeID, topic string) (map[string]string, map[string]kmsg.ConfigSource) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	require.NoError(t, err)
	values, sources := map[string]string{}, map[string]kmsg.ConfigSource{}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		require.ErrorIs(t, err, kerr.UnknownTopicOrPartition, "node %d: %v", node, str(resp.Resources[0].ErrorMessage))
		return values, sources
	}
	for _, c := range resp.Resources[0].Configs {
		values[c.Name], sources[c.Name] = str(c.Value), c.Source
	}
	return values, sources
}

// localTopics is GET /local/topics of one node: its log.Dir's topics and
// their configuration.
func localTopics(t *testing.T, cl *client, node replica.NodeID) map[string]map[string]string {
	t.Helper()
	var out map[string]map[string]string
	require.NoError(t, cl.getJSON(context.Background(), node, "/local/topics", &out))
	return out
}

// partitionFolders lists a topic's partition folders in a node's log
// directory, those renamed for deletion included.
func partitionFolders(t *testing.T, s *supervisor, node replica.NodeID, topic string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.nodeDir(node), "log"))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), topic+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestKafkaTopicConfigsAndDeletion: kadm against the three node processes.
// A topic created with configs has them on every node, as DescribeConfigs
// shows them (set on the topic, the others defaults) and as each node's
// log.Dir applies them; bad configs are refused naming the option; an
// alteration (KIP-339 SET, DELETE, APPEND) reaches every node and takes
// effect (max.message.bytes); a topic's min.insync.replicas is its
// replicas' acks=all floor. A deleted topic is gone from every node's
// Metadata and data directory, and a topic created again under its name
// has a new id and none of the old configs or records.
func TestKafkaTopicConfigsAndDeletion(t *testing.T) {
	s, cl := startKafkaCluster(t)
	kc := newKgo(t, s, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	adm := kadm.NewClient(kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "configured"
	ptr := kadm.StringPtr

	created, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{
		"cleanup.policy": ptr("compact"), "retention.ms": ptr("3600000"),
		"max.message.bytes": ptr("4096"), "min.insync.replicas": ptr("2"),
	}, topic)
	require.NoError(t, err)
	require.NoError(t, created.Err)
	firstID := created.ID

	for name, configs := range map[string]map[string]*string{
		"retention.ms":     {"retention.ms": ptr("-7")},
		"no.such.config":   {"no.such.config": ptr("1")},
		"compression.type": {"compression.type": ptr("gzip")}, // Kafka's, but not what these logs serve
	} {
		bad, err := adm.CreateTopic(ctx, 1, 3, configs, "refused")
		require.ErrorIs(t, err, kerr.InvalidConfig, name)
		require.Contains(t, bad.ErrMessage, name)
	}
	md, err := adm.Metadata(ctx)
	require.NoError(t, err)
	require.NotContains(t, md.Topics.Names(), "refused", "a refused topic is not created")

	want := map[string]string{"cleanup.policy": "compact", "retention.ms": "3600000", "max.message.bytes": "4096", "min.insync.replicas": "2"}
	everyNode := func(what string, check func(node replica.NodeID) (bool, string)) {
		t.Helper()
		for _, node := range s.ids() {
			waitFor(t, 10*time.Second, fmt.Sprintf("node %d: %s", node, what), func() (bool, string) { return check(node) })
		}
	}
	// configsAre checks what a node describes as set on the topic, and
	// what its log.Dir applies.
	configsAre := func(want, applied map[string]string) func(replica.NodeID) (bool, string) {
		return func(node replica.NodeID) (bool, string) {
			values, sources := describedConfigs(t, kc, node, topic)
			for name, v := range want {
				if values[name] != v || sources[name] != kmsg.ConfigSourceDynamicTopicConfig {
					return false, fmt.Sprintf("described %s=%s (source %v)", name, values[name], sources[name])
				}
			}
			local := localTopics(t, cl, node)[topic]
			for name, v := range applied {
				if local[name] != v {
					return false, fmt.Sprintf("the node's log.Dir has %s=%s", name, local[name])
				}
			}
			if sources["segment.bytes"] != kmsg.ConfigSourceDefaultConfig {
				return false, fmt.Sprintf("segment.bytes, not set, has source %v", sources["segment.bytes"])
			}
			return true, ""
		}
	}
	// Compacted alone, the logs delete nothing by age (Kafka's compact
	// policy), whatever retention.ms says.
	everyNode("the created topic's configs", configsAre(want, map[string]string{"cleanup.policy": "compact", "max.message.bytes": "4096", "retention.ms": "-1"}))

	value := make([]byte, 8<<10)
	crand.Read(value) // incompressible: the batch stays above 4096 bytes
	big := kgo.KeySliceRecord([]byte("k"), value)
	big.Topic = topic
	err = kc.ProduceSync(ctx, big).FirstErr()
	require.ErrorIs(t, err, kerr.MessageTooLarge, "max.message.bytes 4096")

	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: ptr("60000")},
		{Op: kadm.DeleteConfig, Name: "max.message.bytes"},
		{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: ptr("delete")},
	}, topic)
	require.NoError(t, err)
	require.NoError(t, altered[0].Err)
	want = map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "60000", "min.insync.replicas": "2"}
	everyNode("the altered configs", configsAre(want, map[string]string{"cleanup.policy": "compact,delete", "max.message.bytes": fmt.Sprint(log.DefaultMaxBatchBytes), "retention.ms": "60000"}))
	everyNode("max.message.bytes back at its default", func(node replica.NodeID) (bool, string) {
		_, sources := describedConfigs(t, kc, node, topic)
		return sources["max.message.bytes"] == kmsg.ConfigSourceDefaultConfig, fmt.Sprint(sources["max.message.bytes"])
	})
	require.NoError(t, kc.ProduceSync(ctx, big).FirstErr(), "the default max.message.bytes takes it")

	refused, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.AppendConfig, Name: "retention.ms", Value: ptr("1")}}, topic)
	require.NoError(t, err)
	require.ErrorIs(t, refused[0].Err, kerr.InvalidConfig, "APPEND to a config that is no list")

	// min.insync.replicas 3 on a topic of two replicas: acks=all cannot be
	// met (the cluster's own, -min-isr 2, would be).
	const strict = "strict"
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = strict, -1, -1
	rt.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{1, 2}}}
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "min.insync.replicas", Value: ptr("3")}}
	req.Topics = append(req.Topics, rt)
	cresp, err := req.RequestWith(ctx, kc)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(cresp.Topics[0].ErrorCode), str(cresp.Topics[0].ErrorMessage))
	waitISR(t, s, cl, strict, 2)
	smd, err := metadataFrom(s, cl)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "acks=all refused as min.insync.replicas 3 of 2 replicas", func() (bool, string) {
		// The leader's node may not have applied the topic yet.
		rp := produceTo(t, kc, smd.partition(strict, 0).Leader, strict, 0, "x")
		require.NotZero(t, rp.ErrorCode, "acks=all met with 2 of min.insync.replicas 3")
		err := kerr.ErrorForCode(rp.ErrorCode)
		return errors.Is(err, kerr.NotEnoughReplicas), err.Error()
	})

	deleted, err := adm.DeleteTopics(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, deleted[topic].Err)
	everyNode("the topic gone from Metadata and the data directory", func(node replica.NodeID) (bool, string) {
		md := kafkaMetadata(t, kc, node, topic)
		if md.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
			return false, fmt.Sprintf("Metadata answers error %d", md.Topics[0].ErrorCode)
		}
		if _, ok := localTopics(t, cl, node)[topic]; ok {
			return false, "the node's log.Dir has the topic"
		}
		if f := partitionFolders(t, s, node, topic); len(f) > 0 {
			return false, fmt.Sprintf("folders %v", f)
		}
		return true, ""
	})

	again, err := adm.CreateTopic(ctx, 1, 3, nil, topic)
	require.NoError(t, err)
	require.NoError(t, again.Err)
	require.NotEqual(t, firstID, again.ID, "a new topic id")
	everyNode("the new topic without the old configs", func(node replica.NodeID) (bool, string) {
		values, sources := describedConfigs(t, kc, node, topic)
		return sources["cleanup.policy"] == kmsg.ConfigSourceDefaultConfig && values["cleanup.policy"] == "delete",
			fmt.Sprintf("cleanup.policy=%s (source %v)", values["cleanup.policy"], sources["cleanup.policy"])
	})
	var end kadm.ListedOffset
	waitFor(t, 10*time.Second, "the new topic's end offset", func() (bool, string) {
		ends, err := adm.ListEndOffsets(ctx, topic) // fails until the new partition has a leader
		if err != nil {
			return false, err.Error()
		}
		var ok bool
		end, ok = ends.Lookup(topic, 0)
		return ok && end.Err == nil, fmt.Sprintf("%+v", end)
	})
	require.Zero(t, end.Offset, "none of the old topic's records")
}
