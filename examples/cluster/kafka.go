package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// kafkaDir is where a node's Kafka broker keeps its own state, beside the
// replicated partitions (consumer groups and transactions are in the
// replicated internal topics, which the cluster.Node coordinates).
const kafkaDir = "kafka"

// The internal topics' partition counts (offsets.topic.num.partitions and
// transaction.state.log.num.partitions, 50 each in Kafka): every node of
// the cluster names the same.
const (
	offsetsPartitions  = 6
	txnStatePartitions = 3
)

// kafkaCluster is the node as the Kafka broker sees it (broker.Cluster
// and the broker's interfaces of a replicated cluster), translated onto
// its cluster.Node: brokers, topics and leaders are the committed
// metadata this node applied, a partition's log is this node's replica, a
// produce goes through the replica's leader, and the groups and
// transactions are the node's coordinators.
type kafkaCluster struct {
	n      *cluster.Node
	minISR int                                  // the cluster's min.insync.replicas
	addrs  map[replica.NodeID]broker.BrokerAddr // every node's Kafka address
	view   atomic.Pointer[kafkaView]
}

var (
	_ broker.ReplicatedGroups       = (*kafkaCluster)(nil)
	_ broker.ReplicatedTransactions = (*kafkaCluster)(nil)
	_ broker.TopicConfigs           = (*kafkaCluster)(nil)
	_ broker.LeaderEpochStarts      = (*kafkaCluster)(nil)
)

// kafkaView indexes one committed metadata snapshot for the broker's
// lookups.
type kafkaView struct {
	md     *cluster.Metadata
	live   map[replica.NodeID]bool
	topics map[string]int32 // partition counts
}

func newKafkaCluster(n *cluster.Node, minISR int, addrs map[replica.NodeID]string) (*kafkaCluster, error) {
	kc := &kafkaCluster{n: n, minISR: minISR, addrs: map[replica.NodeID]broker.BrokerAddr{}}
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
	md := kc.n.Metadata()
	if v := kc.view.Load(); v != nil && v.md == md {
		return v
	}
	v := &kafkaView{md: md, live: map[replica.NodeID]bool{}, topics: map[string]int32{}}
	for _, b := range md.Brokers {
		v.live[b.ID] = !b.Fenced
	}
	for _, t := range md.Topics {
		v.topics[t.Name] = t.Partitions
	}
	kc.view.Store(v)
	return v
}

func (kc *kafkaCluster) Brokers() ([]broker.BrokerAddr, int32) {
	v := kc.current()
	var out []broker.BrokerAddr
	for _, b := range v.md.Brokers {
		if a, ok := kc.addrs[b.ID]; ok && v.live[b.ID] {
			out = append(out, a)
		}
	}
	return out, int32(v.md.Controller)
}

func (kc *kafkaCluster) Topics() ([]string, error) {
	var names []string
	for _, t := range kc.current().md.Topics {
		names = append(names, t.Name)
	}
	return names, nil
}

// TopicID is the id the controller gave the topic, drawn at random when it
// was created (every node creates its replicas with it), so that a topic
// deleted and created again under its name has another, as in Kafka.
func (kc *kafkaCluster) TopicID(topic string) ([16]byte, error) {
	t := kc.current().md.Topic(topic)
	if t == nil {
		return [16]byte{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	return t.ID, nil
}

// TopicConfig is this node's replicas' configuration of the topic, or, if
// it has not created them yet, the one the topic's configs give.
func (kc *kafkaCluster) TopicConfig(topic string) (log.TopicConfig, error) {
	t := kc.current().md.Topic(topic)
	if t == nil {
		return log.TopicConfig{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	if cfg, err := kc.n.LocalTopicConfig(topic); err == nil {
		return cfg, nil
	}
	return broker.LogTopicConfig(log.TopicConfig{Partitions: t.Partitions, Fsync: log.FsyncAlways()}, t.Configs)
}

func (kc *kafkaCluster) Partition(topic string, id int32) (broker.PartitionState, error) {
	v := kc.current()
	p := v.md.Partition(topic, id)
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
	p, err := kc.n.Log(topic, id)
	if err != nil {
		// The metadata names this node, whose replica is not started yet:
		// the client asks again.
		return nil, fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	return p, nil
}

// Append produces through the partition's replica, which appends as the
// leader and answers when acks is met. The replica checks an idempotent
// producer's batch against its producer state as the leader in its
// current epoch, and answers a retry of a batch it has with the
// original's offsets (package replica).
func (kc *kafkaCluster) Append(ctx context.Context, topic string, id int32, acks int16, batch segment.Batch) (log.AppendResult, error) {
	if batch.Transactional() {
		return log.AppendResult{}, fmt.Errorf("%w: a transactional batch is appended with AppendTransactional", kerr.InvalidRequest)
	}
	return appendResult(kc.n.Produce(ctx, topic, id, replica.Acks(acks), batch))
}

func appendResult(r replica.ProduceResult, err error) (log.AppendResult, error) {
	if err != nil {
		return log.AppendResult{}, kafkaError(err)
	}
	return log.AppendResult{BaseOffset: r.BaseOffset, LastOffset: r.LastOffset, Duplicate: r.Duplicate}, nil
}

// kafkaError returns err, from the cluster, replica or idempotence
// packages, as the Kafka error of its code, which their codes are.
func kafkaError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", kerr.RequestTimedOut, err)
	case errors.Is(err, replica.ErrStopped), errors.Is(err, cluster.ErrClosed):
		// The node is stopping: the client finds the next leader.
		return fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	var ie *idempotence.Error
	if errors.As(err, &ie) {
		return err // the broker answers its code
	}
	switch c := replica.CodeOf(err); c {
	case replica.CodeTopicAlreadyExists:
		return fmt.Errorf("%w: %w", log.ErrTopicExists, err)
	case replica.CodeStorageError:
		return fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
	default:
		return fmt.Errorf("%w: %w", kerr.ErrorForCode(int16(c)), err)
	}
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

// createTopic has the active controller create the topic with its
// configs, and returns once this node has applied it.
func (kc *kafkaCluster) createTopic(ctx context.Context, name string, partitions, rf int32, assignment [][]int32, configs map[string]string) error {
	spec := cluster.TopicSpec{Partitions: partitions, ReplicationFactor: rf, Configs: configs}
	if partitions == -1 {
		spec.Partitions = 1
	}
	if rf == -1 {
		spec.ReplicationFactor = int32(min(defaultReplicationFactor, len(kc.addrs)))
	}
	for _, replicas := range assignment {
		nodes := make([]replica.NodeID, len(replicas))
		for i, r := range replicas {
			nodes[i] = replica.NodeID(r)
		}
		spec.Assignment = append(spec.Assignment, nodes)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := kc.n.CreateTopic(ctx, name, spec); err != nil {
		return kafkaError(err)
	}
	return nil
}

// DeleteTopic has the active controller delete the topic, and returns
// once this node has applied it; every node deletes its replicas as it
// applies the deletion.
func (kc *kafkaCluster) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := kc.n.DeleteTopic(ctx, name); err != nil {
		return kafkaError(err)
	}
	return nil
}

func (kc *kafkaCluster) NewProducerID() (int64, error) {
	id, err := kc.n.NewProducerID()
	if err != nil {
		return 0, kafkaError(err)
	}
	return id, nil
}

// GroupCoordinator is not asked of a cluster that replicates its groups
// (GroupCoordinatorFor is); it answers none.
func (kc *kafkaCluster) GroupCoordinator() int32 { return -1 }

func (kc *kafkaCluster) Groups() *group.Service { return kc.n.Groups() }

func (kc *kafkaCluster) GroupCoordinatorFor(groupID string) int32 {
	return int32(kc.n.GroupCoordinator(groupID))
}

func (kc *kafkaCluster) Transactions() broker.TxnCoordinator { return kc.n.Transactions() }

func (kc *kafkaCluster) TransactionCoordinatorFor(txnID string) int32 {
	return int32(kc.n.TransactionCoordinator(txnID))
}

func (kc *kafkaCluster) AppendTransactional(ctx context.Context, txnID string, addPartition bool, topic string, partition int32, acks int16, batch segment.Batch) (log.AppendResult, error) {
	return appendResult(kc.n.ProduceTransactional(ctx, txnID, addPartition, topic, partition, replica.Acks(acks), batch))
}

func (kc *kafkaCluster) AddToTransaction(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, tp idempotence.TopicPartition, verifyOnly bool) error {
	return kc.n.AddToTransaction(ctx, txnID, producer, tp, verifyOnly)
}

func (kc *kafkaCluster) LeaderEpochStartOffset(topic string, partition, leaderEpoch int32) (int64, bool) {
	return kc.n.LeaderEpochStartOffset(topic, partition, leaderEpoch)
}

// serveKafka opens the node's Kafka broker and serves it on its address
// until the returned stop is called.
func (nd *node) serveKafka() (stop func(), err error) {
	kc, err := newKafkaCluster(nd.n, nd.cfg.minISR, nd.cfg.kafka)
	if err != nil {
		return nil, err
	}
	addr := nd.cfg.kafka[nd.cfg.id]
	b, err := broker.Open(broker.Config{
		DataDir: filepath.Join(nd.cfg.dir, kafkaDir),
		NodeID:  int32(nd.cfg.id), Advertise: addr, ClusterID: "strand-cluster",
		Logger: nd.log, Cluster: kc,
	})
	if err != nil {
		return nil, err
	}
	nd.kafka.Store(kc)
	ln, err := loopback.Listen(addr)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Serve(ln); !errors.Is(err, broker.ErrClosed) {
			nd.log.Error("kafka broker", "err", err)
		}
	}()
	nd.log.Info("serving Kafka", "addr", addr)
	return func() {
		if err := b.Close(); err != nil {
			nd.log.Warn("closing the kafka broker", "err", err)
		}
		<-done
	}, nil
}

// txnPartitionFor is the transaction state partition of a transactional
// id, as every node maps it.
func txnPartitionFor(txnID string) int32 { return group.PartitionFor(txnID, txnStatePartitions) }
