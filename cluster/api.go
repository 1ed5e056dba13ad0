package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// TopicSpec is what a topic is created with.
type TopicSpec struct {
	// Assignment, if set, gives each partition's replicas, its preferred
	// leader first; otherwise the controller places Partitions partitions
	// of ReplicationFactor replicas each over the live brokers, as
	// Kafka's AdminUtils does.
	Assignment                    [][]replica.NodeID
	Partitions, ReplicationFactor int32
	// Unclean enables unclean leader election for the topic
	// (unclean.leader.election.enable).
	Unclean bool
	// Configs are the topic's configs by Kafka's names.
	Configs map[string]string
}

// CreateTopic has the active controller create a topic and returns once
// this node's metadata holds it. A topic that exists is an error matching
// replica.ErrTopicAlreadyExists.
func (n *Node) CreateTopic(ctx context.Context, name string, spec TopicSpec) error {
	if _, err := n.callController(ctx, &createTopicRequest{Name: name, TopicSpec: spec}); err != nil {
		return fmt.Errorf("creating topic %q: %w", name, err)
	}
	return n.waitMetadata(ctx, func(md *Metadata) bool { return md.Topic(name) != nil })
}

// DeleteTopic has the active controller delete a topic and returns once
// this node's metadata no longer holds it; every replica deletes its log
// when its node applies the deletion.
func (n *Node) DeleteTopic(ctx context.Context, name string) error {
	if _, err := n.callController(ctx, &deleteTopicRequest{Name: name}); err != nil {
		return fmt.Errorf("deleting topic %q: %w", name, err)
	}
	return n.waitMetadata(ctx, func(md *Metadata) bool { return md.Topic(name) == nil })
}

// AlterTopicConfigs changes a topic's configs as Kafka's
// IncrementalAlterConfigs does (controller.Controller.AlterTopicConfigs),
// or, with replace, sets exactly the configs ops name, as AlterConfigs
// does; it returns the topic's configs after, once this node's metadata
// has them.
func (n *Node) AlterTopicConfigs(ctx context.Context, topic string, ops []controller.ConfigOp, replace, validateOnly bool) (map[string]string, error) {
	a, err := n.callController(ctx, &alterConfigsRequest{Topic: topic, Ops: ops, Replace: replace, ValidateOnly: validateOnly})
	if err != nil {
		return nil, fmt.Errorf("altering the configs of topic %q: %w", topic, err)
	}
	if validateOnly {
		return a.Configs, nil
	}
	return a.Configs, n.waitMetadata(ctx, func(md *Metadata) bool {
		t := md.Topic(topic)
		return t == nil || maps.Equal(t.Configs, a.Configs)
	})
}

// ElectLeader has the active controller elect a partition's preferred
// leader, or, with unclean, a replica outside the ISR if no member of it
// is live: acknowledged records may be lost then.
func (n *Node) ElectLeader(ctx context.Context, topic string, partition int32, unclean bool) error {
	_, err := n.callController(ctx, &electRequest{TopicPartition: controller.TopicPartition{Topic: topic, Partition: partition}, Unclean: unclean})
	return err
}

// Reassign moves the replicas of the partitions ra names to the replicas
// it gives, as kafka-reassign-partitions --execute does: each new replica
// catches up from the leader and joins the ISR, then the removed ones are
// dropped (controller.Controller.Execute).
func (n *Node) Reassign(ctx context.Context, ra assign.Reassignment) error {
	_, err := n.callController(ctx, &reassignRequest{ra})
	return err
}

// VerifyReassignment reports where each partition of ra stands against
// its target (--verify).
func (n *Node) VerifyReassignment(ctx context.Context, ra assign.Reassignment) ([]controller.PartitionStatus, error) {
	a, err := n.callController(ctx, &verifyReassignmentRequest{ra})
	if a == nil {
		return nil, err
	}
	lines, derr := decodePartitionStatuses(a.Payload)
	if err == nil {
		err = derr
	}
	return lines, err
}

// CancelReassignment cancels the reassignments of partitions in progress.
func (n *Node) CancelReassignment(ctx context.Context, partitions ...controller.TopicPartition) error {
	_, err := n.callController(ctx, &cancelReassignmentRequest{partitions})
	return err
}

// Assignment returns the replicas of topics (every topic if none is
// named) as a reassignment file, to edit into a target (--generate).
func (n *Node) Assignment(ctx context.Context, topics ...string) (assign.Reassignment, error) {
	a, err := n.callController(ctx, &assignmentRequest{topics})
	if err != nil {
		return assign.Reassignment{}, err
	}
	d := &decoder{b: a.Payload}
	ra := decodeReassignment(d)
	return ra, d.finish()
}

// WaitRegistered returns once the committed metadata registers this node
// as a live broker in this life (after its registration and its first
// heartbeat), or when ctx ends: from then on the controller places
// replicas on it and elects it.
func (n *Node) WaitRegistered(ctx context.Context) error {
	return n.waitMetadata(ctx, func(md *Metadata) bool {
		b := md.Broker(n.cfg.ID)
		return b != nil && !b.Fenced && b.Epoch == n.registeredEpoch()
	})
}

// WaitBrokers returns once the committed metadata this node applied has
// at least count live brokers, or when ctx ends: as an application that
// places a topic's replicas itself waits for the brokers it names.
func (n *Node) WaitBrokers(ctx context.Context, count int) error {
	return n.waitMetadata(ctx, func(md *Metadata) bool {
		live := 0
		for _, b := range md.Brokers {
			if !b.Fenced {
				live++
			}
		}
		return live >= count
	})
}

// Metadata returns the cluster as this node's committed metadata has it.
// The value is shared: do not change it.
func (n *Node) Metadata() *Metadata { return n.ctl.view.Load() }

// waitMetadata waits until ok holds of this node's metadata.
func (n *Node) waitMetadata(ctx context.Context, ok func(*Metadata) bool) error {
	for !ok(n.Metadata()) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(n.cfg.ControlTick / 4):
		}
	}
	return nil
}

// Produce appends batch (a RecordBatch v2) to a partition this node leads
// and waits as acks asks: for replica.AcksAll until the high watermark
// passes it with at least min.insync.replicas in the ISR. An idempotent
// producer's retry of a batch the partition has answers the offsets it
// got, with Duplicate set, and appends nothing. Produces of one producer
// may be in flight together, as Kafka's max.in.flight.requests does.
// A node that does not lead the partition answers a
// *replica.NotLeaderError naming the leader it knows; a batch larger than
// the topic's max.message.bytes, MESSAGE_TOO_LARGE.
func (n *Node) Produce(ctx context.Context, topic string, partition int32, acks replica.Acks, batch []byte) (replica.ProduceResult, error) {
	if err := n.checkBatchSize(topic, batch); err != nil {
		return replica.ProduceResult{}, err
	}
	r, err := n.d.Produce(ctx, topic, partition, acks, batch)
	if err == nil {
		err = r.Err
	}
	return r, err
}

// ProduceAsync is Produce without the wait: it returns once the
// partition's replica has the batch, so that the batches of successive
// calls from one goroutine are appended in that order (an idempotent
// producer's pipeline: Kafka's max.in.flight.requests.per.connection, up
// to five with idempotence), with a channel that receives its result
// once.
func (n *Node) ProduceAsync(ctx context.Context, topic string, partition int32, acks replica.Acks, batch []byte) (<-chan replica.ProduceResult, error) {
	if err := n.checkBatchSize(topic, batch); err != nil {
		return nil, err
	}
	return n.d.ProduceAsync(ctx, topic, partition, acks, batch)
}

// checkBatchSize refuses a batch larger than its topic's max.message.bytes
// as it is now, as Kafka's leader checks it before it appends
// (UnifiedLog.analyzeAndValidateRecords); the replica state machine bounds
// only what one message can carry, since a topic's limit changes live.
func (n *Node) checkBatchSize(topic string, batch []byte) error {
	cfg, err := n.dir.TopicConfig(topic)
	if err != nil {
		return nil // the replica answers an unknown partition
	}
	if limit := cmp.Or(cfg.MaxBatchBytes, log.DefaultMaxBatchBytes); len(batch) > limit {
		return fmt.Errorf("%w: a batch of %d bytes, max.message.bytes of %s is %d", replica.ErrMessageTooLarge, len(batch), topic, limit)
	}
	return nil
}

// Read reads the batches of a partition this node leads from offset, up
// to maxBytes (at least one whole batch) and below the bound iso names:
// the high watermark (log.ReadUncommitted) or the last stable offset
// (log.ReadCommitted). The caller closes what it returns.
func (n *Node) Read(ctx context.Context, topic string, partition int32, offset int64, maxBytes int, iso log.Isolation) (*log.Batches, error) {
	if iso == log.ReadLogEnd {
		return nil, fmt.Errorf("%w: consumers read below the high watermark, not to the log end", replica.ErrInvalidRequest)
	}
	p, err := n.leaderLog(ctx, topic, partition)
	if err != nil {
		return nil, err
	}
	return p.Read(offset, maxBytes, iso)
}

// Log returns this node's replica of a partition, for reads and offsets:
// its high watermark is the cluster's, moved by replication. Writing to
// it other than through Produce would make the replicas diverge.
func (n *Node) Log(topic string, partition int32) (*log.Partition, error) {
	p := n.partition(controller.TopicPartition{Topic: topic, Partition: partition})
	if p == nil {
		return nil, fmt.Errorf("%w: node %d has no replica of %s-%d", replica.ErrUnknownTopicOrPartition, n.cfg.ID, topic, partition)
	}
	return p, nil
}

// LocalReplica is one of the node's replicas and its log's offsets.
type LocalReplica struct {
	Topic                           string
	Partition                       int32
	LogStart, HighWatermark, LogEnd int64
	Err                             error // why the offsets could not be read
}

// Replicas returns the node's replicas, by topic and partition.
func (n *Node) Replicas() []LocalReplica {
	n.mu.Lock()
	parts := maps.Clone(n.parts)
	n.mu.Unlock()
	var out []LocalReplica
	for _, tp := range slices.SortedFunc(maps.Keys(parts), compareTP) {
		r := LocalReplica{Topic: tp.Topic, Partition: tp.Partition}
		r.LogStart, r.HighWatermark, r.LogEnd, r.Err = parts[tp].Offsets()
		out = append(out, r)
	}
	return out
}

// LocalTopics returns the topics of the node's data directory, each with
// its replicas' log configuration, as the node applied the metadata.
func (n *Node) LocalTopics() (map[string]log.TopicConfig, error) {
	names, err := n.dir.Topics()
	if err != nil {
		return nil, err
	}
	out := map[string]log.TopicConfig{}
	for _, name := range names {
		if cfg, err := n.dir.TopicConfig(name); err == nil { // else deleted since
			out[name] = cfg
		}
	}
	return out, nil
}

// LocalTopicConfig returns the log configuration of this node's replicas
// of a topic, or an error matching log.ErrUnknownTopic if the node has
// none (yet).
func (n *Node) LocalTopicConfig(topic string) (log.TopicConfig, error) {
	return n.dir.TopicConfig(topic)
}

// LeaderEpochStartOffset returns where this node's replica took up its
// leadership of a partition in leaderEpoch, in this life of the node (its
// log end then); ok is false if it has not. A broker answers ListOffsets
// OFFSET_NOT_AVAILABLE until the high watermark reaches it (KIP-207): a
// restarted leader's high watermark is the one it last checkpointed.
func (n *Node) LeaderEpochStartOffset(topic string, partition, leaderEpoch int32) (offset int64, ok bool) {
	n.mu.Lock()
	l := n.replicaLogs[controller.TopicPartition{Topic: topic, Partition: partition}]
	n.mu.Unlock()
	if l == nil {
		return 0, false
	}
	return l.leaderEpochStart(leaderEpoch)
}

// leaderLog returns the log of a partition this node's replica leads.
func (n *Node) leaderLog(ctx context.Context, topic string, partition int32) (*log.Partition, error) {
	st, err := n.d.Status(ctx, topic, partition)
	if err != nil {
		return nil, err
	}
	if st.Role != replica.RoleLeader {
		return nil, &replica.NotLeaderError{Leader: st.Leader, LeaderEpoch: st.LeaderEpoch}
	}
	return n.Log(topic, partition)
}

// Status returns the state of this node's replica of a partition, or an
// error matching replica.ErrUnknownTopicOrPartition.
func (n *Node) Status(ctx context.Context, topic string, partition int32) (replica.Status, error) {
	return n.d.Status(ctx, topic, partition)
}
