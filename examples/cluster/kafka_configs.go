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
// topic's configs to its replicas' log.Dir topic (node.applyTopic), so
// retention, compaction, segment and message sizes take effect on every
// replica; min.insync.replicas is the controller's ISR and ELR rule for
// the topic and its replicas' acks=all floor (taken when a replica
// starts); unclean.leader.election.enable the controller's election rule.

// The topic configs the controller reads itself.
const (
	minISRConfig  = "min.insync.replicas"
	uncleanConfig = "unclean.leader.election.enable"
)

// configRequest is the body of POST /controller/configs.
type configRequest struct {
	Topic string                `json:"topic"`
	Ops   []controller.ConfigOp `json:"ops"`
	// Replace deletes the configs Ops does not name (AlterConfigs).
	Replace      bool `json:"replace,omitempty"`
	ValidateOnly bool `json:"validate_only,omitempty"`
}

// checkLogConfigs refuses configs the nodes' logs cannot take (a value
// the controller allows that the broker does not serve, compression.type
// gzip say) before the controller is asked: a committed config every node
// then fails to apply would be a config in name only.
func checkLogConfigs(topic string, configs map[string]string) error {
	_, err := broker.LogTopicConfig(replicaTopicConfig(topic, 1), configs)
	return err
}

func (kc *kafkaCluster) CreateTopicWithConfigs(ctx context.Context, name string, partitions, rf int32, assignment [][]int32, configs map[string]string, validateOnly bool) error {
	if err := checkLogConfigs(name, configs); err != nil {
		return err
	}
	if err := controller.CheckTopicConfigs(name, configs); err != nil {
		return kafkaError(err)
	}
	if !validateOnly {
		return kc.createTopic(ctx, name, partitions, rf, assignment, configs)
	}
	if kc.current().md.topic(name) != nil {
		return fmt.Errorf("%w: %s", log.ErrTopicExists, name)
	}
	return nil
}

// DescribeTopicConfigs shows the configs set on the topic as they were
// set, and the others at their defaults: the log's, as this node's
// replicas take them, and the cluster's min.insync.replicas (-min-isr).
func (kc *kafkaCluster) DescribeTopicConfigs(topic string) ([]broker.ConfigEntry, error) {
	t := kc.current().md.topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	cfg, err := broker.LogTopicConfig(replicaTopicConfig(topic, t.Partitions), nil)
	if err != nil {
		return nil, err
	}
	values := broker.TopicConfigValues(cfg)
	values[minISRConfig] = fmt.Sprint(kc.n.cfg.minISR)
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

// AlterTopicConfigs asks the active controller to alter the topic's
// configs, then waits until this node has applied the configs it
// committed.
func (kc *kafkaCluster) AlterTopicConfigs(ctx context.Context, topic string, ops []broker.ConfigOp, replace, validateOnly bool) error {
	req := configRequest{Topic: topic, Replace: replace, ValidateOnly: validateOnly}
	for _, op := range ops {
		if op.Op == kmsg.IncrementalAlterConfigOpSet {
			if err := checkLogConfigs(topic, map[string]string{op.Name: op.Value}); err != nil {
				return err
			}
		}
		req.Ops = append(req.Ops, controller.ConfigOp{Op: controller.ConfigOpType(op.Op), Name: op.Name, Value: op.Value})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rep reply
	if err := kc.n.controllerClient().callRetry(ctx, "/controller/configs", req, &rep); err != nil {
		return kafkaError(err)
	}
	if validateOnly {
		return nil
	}
	return kc.waitApplied(ctx, "configs of topic "+topic+" altered", func(v *kafkaView) bool {
		t := v.md.topic(topic)
		return t == nil || maps.Equal(t.Configs, rep.Configs)
	})
}

var _ broker.TopicConfigs = (*kafkaCluster)(nil)
