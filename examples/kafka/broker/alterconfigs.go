package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
)

// denyConfigs is deny for op on the configs of a resource: a topic's, or
// the broker's, which are the cluster resource's.
func (b *Broker) denyConfigs(r *request, op kmsg.ACLOperation, typ kmsg.ConfigResourceType, name string) error {
	if typ == kmsg.ConfigResourceTypeBroker {
		return b.deny(r, op, kmsg.ACLResourceTypeCluster, clusterName)
	}
	return b.deny(r, op, kmsg.ACLResourceTypeTopic, name)
}

// incrementalAlterConfigs serves KIP-339's IncrementalAlterConfigs for
// topics: each resource's operations apply all or none. Broker configs
// are static (INVALID_REQUEST).
func (b *Broker) incrementalAlterConfigs(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, res := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		ops := make([]ConfigOp, len(res.Configs))
		for i, c := range res.Configs {
			ops[i] = ConfigOp{Op: c.Op, Name: c.Name}
			if c.Value != nil {
				ops[i].Value = *c.Value
			}
		}
		err := b.denyConfigs(r, kmsg.ACLOperationAlterConfigs, res.ResourceType, res.ResourceName)
		if err == nil {
			err = b.alterConfigs(ctx, res.ResourceType, res.ResourceName, ops, false, req.ValidateOnly)
		}
		rr.ErrorCode, rr.ErrorMessage = code(err), message(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// legacyAlterConfigs serves AlterConfigs, which gives a topic's whole set
// of configs: those it does not name take their defaults again (Kafka's
// legacyAlterConfigs).
func (b *Broker) legacyAlterConfigs(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, res := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		ops := make([]ConfigOp, 0, len(res.Configs))
		err := b.denyConfigs(r, kmsg.ACLOperationAlterConfigs, res.ResourceType, res.ResourceName)
		for _, c := range res.Configs {
			if err != nil {
				break
			}
			if c.Value == nil {
				err = fmt.Errorf("%w: config %s without a value", kafkaerr.ErrInvalidRequest, c.Name)
				break
			}
			ops = append(ops, ConfigOp{Op: kmsg.IncrementalAlterConfigOpSet, Name: c.Name, Value: *c.Value})
		}
		if err == nil {
			err = b.alterConfigs(ctx, res.ResourceType, res.ResourceName, ops, true, req.ValidateOnly)
		}
		rr.ErrorCode, rr.ErrorMessage = code(err), message(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// alterConfigs alters a topic's configs through the cluster.
func (b *Broker) alterConfigs(ctx context.Context, typ kmsg.ConfigResourceType, topic string, ops []ConfigOp, replace, validateOnly bool) error {
	if typ != kmsg.ConfigResourceTypeTopic {
		return fmt.Errorf("%w: only topic configs can be altered, not those of resource type %v", kafkaerr.ErrInvalidRequest, typ)
	}
	return b.cluster.AlterTopicConfigs(ctx, topic, ops, replace, validateOnly)
}

// LogTopicConfig returns base with Kafka's topic configs set on it, as the
// broker maps them onto a log's configuration, in name order. The configs
// a cluster's controller reads itself (min.insync.replicas,
// unclean.leader.election.enable) are left to it; a name the broker does
// not know, or a value it cannot map, is an error wrapping
// kafkaerr.ErrInvalidConfig that names it.
func LogTopicConfig(base log.TopicConfig, configs map[string]string) (log.TopicConfig, error) {
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		if slices.Contains(controllerConfigs, name) {
			continue
		}
		v := configs[name]
		if err := applyConfigs(&base, map[string]*string{name: &v}); err != nil {
			return base, err
		}
	}
	if p, ok := configs["cleanup.policy"]; ok && !slices.Contains(strings.Split(strings.ReplaceAll(p, " ", ""), ","), "delete") {
		// Kafka deletes segments by retention.ms and retention.bytes only
		// under the delete policy: a topic compacted alone keeps what
		// compaction leaves.
		base.Retention = log.Retention{Age: log.Unlimited, Bytes: log.Unlimited}
	}
	return base, nil
}

// controllerConfigs are the topic configs of a replicated cluster's
// controller, not of the logs.
var controllerConfigs = []string{"min.insync.replicas", "unclean.leader.election.enable"}

// TopicConfigValues returns the value of each Kafka topic config a
// log.TopicConfig holds, by name, as DescribeConfigs shows them.
func TopicConfigValues(cfg log.TopicConfig) map[string]string {
	values := make(map[string]string, len(topicConfigs))
	for _, tc := range topicConfigs {
		values[tc.name] = tc.get(&cfg)
	}
	return values
}
