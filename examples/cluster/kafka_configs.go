package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica/controller"
)

// Topic configs are the controller's (ConfigRecords, by Kafka's names), as
// in KRaft: the cluster is a broker.TopicConfigs. Every node applies a
// topic's configs to its replicas (cluster.Config.TopicConfig is
// broker.LogTopicConfig), so retention, compaction, segment and message
// sizes take effect on every replica; min.insync.replicas is the
// controller's ISR and ELR rule for the topic and its replicas' acks=all
// floor; unclean.leader.election.enable the controller's election rule.

// The topic configs the controller reads itself.
const (
	minISRConfig  = "min.insync.replicas"
	uncleanConfig = "unclean.leader.election.enable"
)

// checkLogConfigs refuses configs the nodes' logs cannot take (a value
// the controller allows that the broker does not serve, compression.type
// gzip say) before the controller is asked: a committed config every node
// then fails to apply would be a config in name only.
func checkLogConfigs(configs map[string]string) error {
	_, err := broker.LogTopicConfig(log.TopicConfig{Partitions: 1}, configs)
	return err
}

func (kc *kafkaCluster) CreateTopicWithConfigs(ctx context.Context, name string, partitions, rf int32, assignment [][]int32, configs map[string]string, validateOnly bool) error {
	if err := checkLogConfigs(configs); err != nil {
		return err
	}
	if err := controller.CheckTopicConfigs(name, configs); err != nil {
		return kafkaError(err)
	}
	if !validateOnly {
		return kc.createTopic(ctx, name, partitions, rf, assignment, configs)
	}
	if kc.current().md.Topic(name) != nil {
		return fmt.Errorf("%w: %s", log.ErrTopicExists, name)
	}
	return nil
}

// DescribeTopicConfigs shows the configs set on the topic as they were
// set, and the others at their defaults: the log's, as this node's
// replicas take them, and the cluster's min.insync.replicas (-min-isr).
func (kc *kafkaCluster) DescribeTopicConfigs(topic string) ([]broker.ConfigEntry, error) {
	t := kc.current().md.Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	cfg, err := broker.LogTopicConfig(log.TopicConfig{Partitions: t.Partitions, Fsync: log.FsyncAlways()}, nil)
	if err != nil {
		return nil, err
	}
	values := broker.TopicConfigValues(cfg)
	values[minISRConfig] = fmt.Sprint(kc.minISR)
	values[uncleanConfig] = "false"
	var entries []broker.ConfigEntry
	for _, name := range slices.Sorted(maps.Keys(values)) {
		e := broker.ConfigEntry{Name: name, Value: values[name]}
		if v, ok := t.Configs[name]; ok {
			e.Value, e.Set = v, true
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// AlterTopicConfigs has the active controller alter the topic's configs,
// and returns once this node has applied the configs it committed.
func (kc *kafkaCluster) AlterTopicConfigs(ctx context.Context, topic string, ops []broker.ConfigOp, replace, validateOnly bool) error {
	var cops []controller.ConfigOp
	for _, op := range ops {
		if op.Op == kmsg.IncrementalAlterConfigOpSet {
			if err := checkLogConfigs(map[string]string{op.Name: op.Value}); err != nil {
				return err
			}
		}
		cops = append(cops, controller.ConfigOp{Op: controller.ConfigOpType(op.Op), Name: op.Name, Value: op.Value})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := kc.n.AlterTopicConfigs(ctx, topic, cops, replace, validateOnly); err != nil {
		return kafkaError(err)
	}
	return nil
}
