package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// kafkaDir is where a node's Kafka broker keeps its own state, beside the
// replicated partitions (consumer groups are in the replicated offsets
// topic: kafka_groups.go).
const kafkaDir = "kafka"

// kafkaCluster is the node as the Kafka broker sees it (broker.Cluster):
// brokers, topics and leaders are the committed controller state this node
// applied, a partition's log is this node's replica, and a produce goes to
// the replica's leader through the node's replica.Driver.
type kafkaCluster struct {
	n     *node
	addrs map[replica.NodeID]broker.BrokerAddr // every node's Kafka address
	view  atomic.Pointer[kafkaView]

	groups       *groupLoader    // started by OpenGroups
	groupService *group.Service  // opened by OpenGroups
	txn          *txnCoordinator // started by openTxns
}

// kafkaView indexes one committed metadata snapshot for the broker's
// lookups.
type kafkaView struct {
	md         *metadata
	live       map[replica.NodeID]bool
	partitions map[controller.TopicPartition]*partitionView
	topics     map[string]int32 // partition counts
}

func newKafkaCluster(n *node, addrs map[replica.NodeID]string) (*kafkaCluster, error) {
	kc := &kafkaCluster{n: n, addrs: map[replica.NodeID]broker.BrokerAddr{}}
	for id, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("-kafka: node %d: %w", id, err)
		}
		p, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("-kafka: node %d: port: %w", id, err)
		}
		kc.addrs[id] = broker.BrokerAddr{ID: int32(id), Host: host, Port: int32(p)}
	}
	return kc, nil
}

// current returns the index of the node's latest committed metadata.
func (kc *kafkaCluster) current() *kafkaView {
	md := kc.n.ctl.view.Load()
	if v := kc.view.Load(); v != nil && v.md == md {
		return v
	}
	v := &kafkaView{md: md, live: map[replica.NodeID]bool{}, partitions: map[controller.TopicPartition]*partitionView{}, topics: map[string]int32{}}
	for _, b := range md.Brokers {
		v.live[b.ID] = !b.Fenced
	}
	for i := range md.Partitions {
		p := &md.Partitions[i]
		v.partitions[controller.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p
		v.topics[p.Topic] = max(v.topics[p.Topic], p.Partition+1)
	}
	kc.view.Store(v)
	return v
}

func (kc *kafkaCluster) Brokers() ([]broker.BrokerAddr, int32) {
	v := kc.current()
	var out []broker.BrokerAddr
	for _, id := range slices.Sorted(maps.Keys(v.live)) {
		if a, ok := kc.addrs[id]; ok && v.live[id] {
			out = append(out, a)
		}
	}
	return out, int32(v.md.RaftLeader)
}

func (kc *kafkaCluster) Topics() ([]string, error) {
	return slices.Sorted(maps.Keys(kc.current().topics)), nil
}

// TopicID is the id the controller gave the topic, drawn at random when it
// was created (every node creates its replicas with it,
// log.Dir.CreateTopicWithID), so that a topic deleted and created again
// under its name has another, as in Kafka.
func (kc *kafkaCluster) TopicID(topic string) ([16]byte, error) {
	t := kc.current().md.topic(topic)
	if t == nil {
		return [16]byte{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	return t.ID, nil
}

// TopicConfig is this node's replicas' configuration of the topic, or, if
// it has not created them yet, the one the topic's configs give.
func (kc *kafkaCluster) TopicConfig(topic string) (log.TopicConfig, error) {
	t := kc.current().md.topic(topic)
	if t == nil {
		return log.TopicConfig{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	if cfg, err := kc.n.dir.TopicConfig(topic); err == nil {
		return cfg, nil
	}
	return broker.LogTopicConfig(replicaTopicConfig(topic, t.Partitions), t.Configs)
}

func (kc *kafkaCluster) Partition(topic string, id int32) (broker.PartitionState, error) {
	v := kc.current()
	p := v.partitions[controller.TopicPartition{Topic: topic, Partition: id}]
	if p == nil {
		if _, ok := v.topics[topic]; !ok {
			return broker.PartitionState{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
		}
		return broker.PartitionState{}, fmt.Errorf("%w: %s-%d", log.ErrUnknownPartition, topic, id)
	}
	st := broker.PartitionState{Leader: int32(p.Leader), LeaderEpoch: p.LeaderEpoch, Replicas: ids(p.Replicas), ISR: ids(p.ISR), Offline: []int32{}}
	for _, r := range p.Replicas {
		if !v.live[r] {
			st.Offline = append(st.Offline, int32(r))
		}
	}
	return st, nil
}

func ids(nodes []replica.NodeID) []int32 {
	out := make([]int32, len(nodes))
	for i, n := range nodes {
		out[i] = int32(n)
	}
	return out
}

func (kc *kafkaCluster) Log(topic string, id int32) (*log.Partition, error) {
	if p := kc.n.partition(controller.TopicPartition{Topic: topic, Partition: id}); p != nil {
		return p, nil
	}
	// The metadata names this node, whose replica is not started yet:
	// the client asks again.
	return nil, fmt.Errorf("%w: node %d has no replica of %s-%d yet", kerr.NotLeaderForPartition, kc.n.cfg.id, topic, id)
}

// Append produces through the partition's replica, which appends as the
// leader and delivers the result when acks is met. The replica checks an
// idempotent producer's batch against its producer state as the leader in
// its current epoch, and answers a retry of a batch it has with the
// original's offsets under the same acks (package replica): nothing here
// looks at the local log's producers, which on a node that no longer
// leads, or leads again after a restart, may hold a batch never
// replicated.
func (kc *kafkaCluster) Append(ctx context.Context, topic string, id int32, acks int16, batch segment.Batch) (log.AppendResult, error) {
	if _, err := kc.Log(topic, id); err != nil {
		return log.AppendResult{}, err
	}
	if batch.Transactional() {
		return log.AppendResult{}, fmt.Errorf("%w: a transactional batch is appended with AppendTransactional", kerr.InvalidRequest)
	}
	return kc.appendAsLeader(ctx, controller.TopicPartition{Topic: topic, Partition: id}, acks, batch)
}

// appendAsLeader produces a batch through the replica of tp; see Append.
func (kc *kafkaCluster) appendAsLeader(ctx context.Context, tp controller.TopicPartition, acks int16, batch segment.Batch) (log.AppendResult, error) {
	res, err := kc.n.d.Produce(ctx, tp.Topic, tp.Partition, replica.Acks(acks), batch)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return log.AppendResult{}, kafkaError(err)
	}
	if res.Duplicate {
		kc.n.log.Info("kafka: the leader answered a producer's retry with the original's offsets", "partition", tp, "producer", batch.ProducerID(), "offset", res.BaseOffset)
	}
	return log.AppendResult{BaseOffset: res.BaseOffset, LastOffset: res.LastOffset, Duplicate: res.Duplicate}, nil
}

// kafkaError returns err, from the replica package or a node's reply, as
// the Kafka error of its code, which the replica package's codes are.
func kafkaError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", kerr.RequestTimedOut, err)
	case errors.Is(err, replica.ErrStopped):
		// The node is stopping: the client finds the next leader.
		return fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	var re *remoteError
	c := replica.CodeOf(err)
	if errors.As(err, &re) {
		c = re.Code
	}
	switch c {
	case replica.CodeTopicAlreadyExists:
		return fmt.Errorf("%w: %w", log.ErrTopicExists, err)
	case replica.CodeStorageError:
		return fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
	}
	return fmt.Errorf("%w: %w", kerr.ErrorForCode(int16(c)), err)
}

// defaultReplicationFactor is a topic's replica count when CreateTopics
// asks for the default: Kafka's default.replication.factor is 1; a
// cluster shown off for its failover takes every node, up to 3.
const defaultReplicationFactor = 3

// CreateTopic creates a topic without configs: the broker hands configs
// by their Kafka names to CreateTopicWithConfigs (the cluster is a
// broker.TopicConfigs), which the controller replicates.
func (kc *kafkaCluster) CreateTopic(ctx context.Context, name string, partitions, rf int32, assignment [][]int32, cfg log.TopicConfig) error {
	cfg.Partitions = 0
	if cfg != (log.TopicConfig{}) {
		return fmt.Errorf("%w: topic %s: this cluster takes topic configs by their Kafka names (CreateTopicWithConfigs)", kerr.InvalidConfig, name)
	}
	return kc.createTopic(ctx, name, partitions, rf, assignment, nil)
}

// createTopic asks the active controller to create the topic with its
// configs, then waits until this node has applied it.
func (kc *kafkaCluster) createTopic(ctx context.Context, name string, partitions, rf int32, assignment [][]int32, configs map[string]string) error {
	req := topicRequest{Topic: name, Partitions: int(partitions), ReplicationFactor: int(rf), Configs: configs}
	if partitions == -1 {
		req.Partitions = 1
	}
	if rf == -1 {
		req.ReplicationFactor = min(defaultReplicationFactor, len(kc.addrs))
	}
	for _, replicas := range assignment {
		nodes := make([]replica.NodeID, len(replicas))
		for i, r := range replicas {
			nodes[i] = replica.NodeID(r)
		}
		req.Assignment = append(req.Assignment, nodes)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := kc.n.controllerClient().callRetry(ctx, "/controller/topics", req, nil); err != nil {
		return kafkaError(err)
	}
	return kc.waitApplied(ctx, "topic "+name+" created", func(v *kafkaView) bool { return v.md.topic(name) != nil })
}

// waitApplied waits until this node's committed metadata is as applied
// says, what the controller committed.
func (kc *kafkaCluster) waitApplied(ctx context.Context, what string, applied func(*kafkaView) bool) error {
	for {
		if applied(kc.current()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s, not yet known here", kerr.RequestTimedOut, what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// DeleteTopic asks the active controller to delete the topic (one
// RemoveTopicRecord), then waits until this node has applied it. Every
// node deletes its replicas as it applies the record (node.applyTopic).
func (kc *kafkaCluster) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := kc.n.controllerClient().callRetry(ctx, "/controller/delete-topic?topic="+url.QueryEscape(name), nil, nil); err != nil {
		return kafkaError(err)
	}
	return kc.waitApplied(ctx, "topic "+name+" deleted", func(v *kafkaView) bool { return v.md.topic(name) == nil })
}

// producerIDBits leaves room, below a node's id, for the producer ids
// that node hands out: each node draws from its own data directory, and
// the node id in the high bits keeps two nodes' ids apart (Kafka
// allocates blocks of ids through the controller instead, KIP-730).
const producerIDBits = 40

func (kc *kafkaCluster) NewProducerID() (int64, error) {
	id, err := kc.n.dir.NewProducerID()
	if err != nil {
		return 0, err
	}
	if id >= 1<<producerIDBits {
		return 0, fmt.Errorf("%w: node %d has handed out all its producer ids", kerr.KafkaStorageError, kc.n.cfg.id)
	}
	return int64(kc.n.cfg.id)<<producerIDBits | id, nil
}

// GroupCoordinator is not asked of a cluster that replicates its groups
// (GroupCoordinatorFor is); it answers none.
func (kc *kafkaCluster) GroupCoordinator() int32 { return -1 }

// serveKafka opens the node's Kafka broker and serves it on its address
// until the returned stop is called.
func (n *node) serveKafka() (stop func(), err error) {
	kc, err := newKafkaCluster(n, n.cfg.kafka)
	if err != nil {
		return nil, err
	}
	addr := n.cfg.kafka[n.cfg.id]
	b, err := broker.Open(broker.Config{
		DataDir: filepath.Join(n.cfg.dir, kafkaDir),
		NodeID:  int32(n.cfg.id), Advertise: addr, ClusterID: "strand-cluster",
		Logger: n.log, Cluster: kc,
	})
	if err != nil {
		kc.closeCoordinators()
		return nil, err
	}
	// Once the group coordinator is open: markers on the offsets topic go
	// through it.
	kc.openTxns()
	n.kafka.Store(kc)
	ln, err := loopback.Listen(addr)
	if err != nil {
		kc.closeCoordinators()
		return nil, errors.Join(err, b.Close())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Serve(ln); !errors.Is(err, broker.ErrClosed) {
			n.log.Error("kafka broker", "err", err)
		}
	}()
	n.log.Info("serving Kafka", "addr", addr)
	return func() {
		kc.closeCoordinators()
		if err := b.Close(); err != nil {
			n.log.Warn("closing the kafka broker", "err", err)
		}
		<-done
	}, nil
}
