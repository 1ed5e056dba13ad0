package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
)

func (b *Broker) metadata(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	brokers, controller := b.brokers(r.session)
	for _, a := range brokers {
		resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: a.ID, Host: a.Host, Port: a.Port})
	}
	resp.ClusterID = &b.cfg.ClusterID
	resp.ControllerID = controller

	var names []string
	// Null topics (and an empty list before v1) ask for every topic.
	if req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0) {
		all, err := b.cluster.Topics()
		if err != nil {
			resp.ErrorCode = code(err)
			return resp
		}
		// Every topic the client may see.
		names = slices.DeleteFunc(all, func(name string) bool {
			return !b.allowed(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, name)
		})
	} else {
		var byID map[[16]byte]string
		for _, t := range req.Topics {
			switch {
			case t.Topic != nil:
				names = append(names, *t.Topic)
			case byID == nil:
				var err error
				if byID, err = b.topicNames(); err != nil {
					resp.ErrorCode = code(err)
					return resp
				}
				fallthrough
			default:
				if name, ok := byID[t.TopicID]; ok {
					names = append(names, name)
				} else {
					rt := kmsg.NewMetadataResponseTopic()
					rt.TopicID, rt.ErrorCode = t.TopicID, int16(kafkaerr.ErrUnknownTopicID)
					resp.Topics = append(resp.Topics, rt)
				}
			}
		}
	}
	autoCreate := b.cfg.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation) && req.Topics != nil
	createAny := autoCreate && b.allowed(r, kmsg.ACLOperationCreate, kmsg.ACLResourceTypeCluster, clusterName)
	for _, name := range names {
		if err := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, name); err != nil {
			t := kmsg.NewMetadataResponseTopic()
			t.Topic, t.ErrorCode = &name, code(err)
			resp.Topics = append(resp.Topics, t)
			continue
		}
		create := createAny || autoCreate && b.allowed(r, kmsg.ACLOperationCreate, kmsg.ACLResourceTypeTopic, name)
		t := b.topicMetadata(name, create)
		if autoCreate && !create && t.ErrorCode == int16(kafkaerr.ErrUnknownTopicOrPartition) {
			t.ErrorCode = int16(kafkaerr.ErrTopicAuthorizationFailed) // Kafka's answer to one it may not create
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (b *Broker) topicMetadata(name string, autoCreate bool) kmsg.MetadataResponseTopic {
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = &name
	t.IsInternal = internalTopic(name)
	cfg, err := b.cluster.TopicConfig(name)
	if errors.Is(err, log.ErrUnknownTopic) && autoCreate {
		if err = b.cluster.CreateTopic(b.ctx, name, -1, -1, nil, nil, false); err == nil || errors.Is(err, kafkaerr.ErrTopicAlreadyExists) {
			b.logger.Info("broker: created topic on first use", "topic", name)
			cfg, err = b.cluster.TopicConfig(name)
		}
	}
	if err != nil {
		t.ErrorCode = code(err)
		return t
	}
	t.TopicID = b.topicID(name)
	for id := range cfg.Partitions {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition = id
		st, err := b.cluster.Partition(name, id)
		if err != nil {
			p.ErrorCode = code(err)
		} else {
			p.Leader, p.LeaderEpoch = st.Leader, st.LeaderEpoch
			p.Replicas, p.ISR, p.OfflineReplicas = st.Replicas, st.ISR, st.Offline
			if st.Leader < 0 {
				p.ErrorCode = int16(kafkaerr.ErrLeaderNotAvailable)
			}
		}
		t.Partitions = append(t.Partitions, p)
	}
	return t
}

func (b *Broker) createTopics(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		var cfg log.TopicConfig
		err := b.deny(r, kmsg.ACLOperationCreate, kmsg.ACLResourceTypeTopic, t.Topic)
		if err != nil && b.allowed(r, kmsg.ACLOperationCreate, kmsg.ACLResourceTypeCluster, clusterName) {
			err = nil // CREATE on the cluster creates any topic
		}
		if err == nil {
			cfg, err = b.createTopic(t, req.ValidateOnly)
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = code(err), message(err)
			b.logger.Info("broker: topic not created", "topic", t.Topic, "err", err)
		} else {
			rt.NumPartitions, rt.ReplicationFactor = cfg.Partitions, b.replicationFactor(t, req.ValidateOnly)
			if !req.ValidateOnly {
				rt.TopicID = b.topicID(t.Topic) // v7+
			}
			for _, e := range b.configEntries(t.Topic, cfg, req.ValidateOnly) {
				source := int8(sourceDefault)
				if e.Set {
					source = sourceTopic
				}
				rt.Configs = append(rt.Configs, kmsg.CreateTopicsResponseTopicConfig{Name: e.Name, Value: &e.Value, Source: source})
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// createTopic checks a CreateTopics topic as Kafka does, and creates it
// unless validateOnly.
func (b *Broker) createTopic(t kmsg.CreateTopicsRequestTopic, validateOnly bool) (log.TopicConfig, error) {
	var cfg log.TopicConfig
	if err := log.ValidateTopic(t.Topic); err != nil {
		return cfg, fmt.Errorf("%w: %w", kafkaerr.ErrInvalidTopicException, err)
	}
	var assignment [][]int32
	switch {
	case len(t.ReplicaAssignment) > 0:
		if t.NumPartitions != -1 || t.ReplicationFactor != -1 {
			return cfg, fmt.Errorf("%w: both a replica assignment and a partition count or replication factor", kafkaerr.ErrInvalidRequest)
		}
		for i, a := range t.ReplicaAssignment {
			if a.Partition != int32(i) {
				return cfg, fmt.Errorf("%w: partition %d: partitions must be numbered from 0", kafkaerr.ErrInvalidReplicaAssignment, a.Partition)
			}
			assignment = append(assignment, a.Replicas)
		}
	case t.NumPartitions == -1: // the broker's num.partitions
	case t.NumPartitions <= 0 || t.NumPartitions > log.MaxPartitions:
		return cfg, fmt.Errorf("%w: %d partitions, want 1 to %d", kafkaerr.ErrInvalidPartitions, t.NumPartitions, log.MaxPartitions)
	}
	// A config without a value is refused, as Kafka refuses it
	// (INVALID_CONFIG).
	configs := map[string]string{}
	for _, c := range t.Configs {
		if c.Value == nil {
			return cfg, fmt.Errorf("%w: config %s without a value", kafkaerr.ErrInvalidConfig, c.Name)
		}
		configs[c.Name] = *c.Value
	}
	if err := b.cluster.CreateTopic(b.ctx, t.Topic, t.NumPartitions, int32(t.ReplicationFactor), assignment, configs, validateOnly); err != nil {
		return cfg, err
	}
	if validateOnly {
		return log.TopicConfig{Partitions: max(t.NumPartitions, int32(len(assignment)))}, nil
	}
	return b.cluster.TopicConfig(t.Topic)
}

// configEntries are a topic's configs as CreateTopics and DescribeConfigs
// show them: the cluster's, or, for a topic only validated, those cfg
// holds.
func (b *Broker) configEntries(topic string, cfg log.TopicConfig, validateOnly bool) []ConfigEntry {
	if !validateOnly {
		if entries, err := b.cluster.DescribeTopicConfigs(topic); err == nil {
			return entries
		}
	}
	values := TopicConfigValues(cfg)
	entries := make([]ConfigEntry, 0, len(topicConfigs))
	for _, c := range topicConfigs {
		entries = append(entries, ConfigEntry{Name: c.name, Value: values[c.name], Set: true})
	}
	return entries
}

// replicationFactor is the replica count of a created topic's first
// partition, or what a validated one asked for.
func (b *Broker) replicationFactor(t kmsg.CreateTopicsRequestTopic, validateOnly bool) int16 {
	if validateOnly {
		if len(t.ReplicaAssignment) > 0 {
			return int16(len(t.ReplicaAssignment[0].Replicas))
		}
		return t.ReplicationFactor
	}
	st, err := b.cluster.Partition(t.Topic, 0)
	if err != nil {
		return -1
	}
	return int16(len(st.Replicas))
}

func (b *Broker) deleteTopics(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	topics := req.Topics // v6+: by name or by id
	if req.Version < 6 {
		for _, name := range req.TopicNames {
			topics = append(topics, kmsg.DeleteTopicsRequestTopic{Topic: &name})
		}
	}
	for _, t := range topics {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		err := b.deleteTopic(&rt, func(name string) error {
			return b.deny(r, kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, name)
		})
		rt.ErrorCode, rt.ErrorMessage = code(err), message(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// deleteTopic deletes the topic a DeleteTopics topic names, by name or by
// id (not both: INVALID_REQUEST, as Kafka answers), unless deny refuses
// its name, and fills in the other.
func (b *Broker) deleteTopic(rt *kmsg.DeleteTopicsResponseTopic, deny func(name string) error) error {
	zero := rt.TopicID == [16]byte{}
	switch {
	case rt.Topic != nil && !zero:
		return fmt.Errorf("%w: topic %s named both by name and by id", kafkaerr.ErrInvalidRequest, *rt.Topic)
	case rt.Topic == nil && zero:
		return fmt.Errorf("%w: a topic named neither by name nor by id", kafkaerr.ErrInvalidRequest)
	case rt.Topic == nil:
		names, err := b.namesOf(true, 1, func(int) ([16]byte, string) { return rt.TopicID, "" })
		if err != nil {
			return err
		}
		if names[0] == "" {
			return kafkaerr.ErrUnknownTopicID
		}
		rt.Topic = &names[0]
	default:
		rt.TopicID = b.topicID(*rt.Topic)
	}
	name := *rt.Topic
	if err := cmp.Or(deny(name), writable(name)); err != nil {
		return err
	}
	return b.cluster.DeleteTopic(b.ctx, name)
}

// Config sources of DescribeConfigs (DescribeConfigsResponse.ConfigSource).
const (
	sourceTopic        = 1 // DYNAMIC_TOPIC_CONFIG
	sourceStaticBroker = 4 // STATIC_BROKER_CONFIG
	sourceDefault      = 5 // DEFAULT_CONFIG
)

func (b *Broker) describeConfigs(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, res := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		var entries map[string]string
		sources := map[string]kmsg.ConfigSource{}
		switch res.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			cfg, err := b.cluster.TopicConfig(res.ResourceName)
			err = cmp.Or(b.denyConfigs(r, kmsg.ACLOperationDescribeConfigs, res.ResourceType, res.ResourceName), err)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = code(err), message(err)
				break
			}
			entries = map[string]string{}
			for _, e := range b.configEntries(res.ResourceName, cfg, false) {
				entries[e.Name], sources[e.Name] = e.Value, sourceDefault
				if e.Set {
					sources[e.Name] = sourceTopic
				}
			}
		case kmsg.ConfigResourceTypeBroker:
			if err := b.denyConfigs(r, kmsg.ACLOperationDescribeConfigs, res.ResourceType, res.ResourceName); err != nil {
				rr.ErrorCode, rr.ErrorMessage = code(err), message(err)
				break
			}
			entries = map[string]string{
				"broker.id":                 fmt.Sprint(b.cfg.NodeID),
				"log.dirs":                  b.cfg.DataDir,
				"auto.create.topics.enable": fmt.Sprint(b.cfg.AutoCreateTopics),
				"socket.request.max.bytes":  fmt.Sprint(b.cfg.MaxRequestBytes),
				"connections.max.idle.ms":   fmt.Sprint(b.cfg.IdleTimeout.Milliseconds()),
			}
			for name := range entries {
				sources[name] = sourceStaticBroker
			}
		default:
			err := fmt.Errorf("%w: resource type %d", kafkaerr.ErrInvalidRequest, res.ResourceType)
			rr.ErrorCode, rr.ErrorMessage = code(err), message(err)
		}
		want := res.ConfigNames
		if want == nil {
			for _, tc := range topicConfigs {
				if _, ok := entries[tc.name]; ok {
					want = append(want, tc.name)
				}
			}
			for name := range entries {
				if findConfig(name) < 0 {
					want = append(want, name)
				}
			}
		}
		for _, name := range want {
			v, ok := entries[name]
			if !ok {
				continue
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.Source, c.ReadOnly = name, &v, sources[name], res.ResourceType == kmsg.ConfigResourceTypeBroker
			c.IsDefault = sources[name] == sourceDefault // v0
			rr.Configs = append(rr.Configs, c)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

func (b *Broker) deleteRecords(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		denied := b.deny(r, kmsg.ACLOperationDelete, kmsg.ACLResourceTypeTopic, t.Topic)
		for _, tp := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition = tp.Partition
			rp.LowWatermark = -1
			rp.ErrorCode = code(cmp.Or(denied, b.deleteRecordsOf(t.Topic, tp.Partition, tp.Offset, &rp.LowWatermark)))
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// deleteRecordsOf moves a partition's log start to offset (-1: the high
// watermark, as Kafka's DeleteRecords) and reports the new log start.
func (b *Broker) deleteRecordsOf(topic string, id int32, offset int64, low *int64) error {
	if err := writable(topic); err != nil {
		return err
	}
	p, _, err := b.leaderPartition(topic, id, -1)
	if err != nil {
		return err
	}
	if offset == -1 {
		if _, offset, _, err = p.Offsets(); err != nil {
			return err
		}
	}
	if offset < 0 {
		return fmt.Errorf("%w: delete records before %d", kafkaerr.ErrOffsetOutOfRange, offset)
	}
	if err := p.DeleteRecordsBefore(offset); err != nil {
		return err
	}
	*low, _, _, err = p.Offsets()
	return err
}

// internalTopic reports whether a topic is one of the coordinators' own.
func internalTopic(name string) bool {
	return name == group.OffsetsTopic || name == log.TransactionStateTopic
}
