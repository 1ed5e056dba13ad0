package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// NodeOptions configures the Cluster NodeCluster makes of a cluster.Node.
type NodeOptions struct {
	// Kafka is every node's Kafka address (host:port), this one's
	// included: Metadata lists each live broker at its.
	Kafka map[replica.NodeID]string
	// Listeners are every node's addresses on the listeners of these
	// names (Kafka's advertised.listeners): a client of a broker's
	// listener of one of these names (Listener.Name) is told every
	// broker's address on it rather than its Kafka address.
	Listeners map[string]map[replica.NodeID]string
	// MinInsyncReplicas is the node's cluster.Options.MinInsyncReplicas,
	// which DescribeConfigs shows as min.insync.replicas of a topic that
	// sets none; default 1.
	MinInsyncReplicas int
	// Partitions is the partition count of a topic created without one
	// (num.partitions); default 1.
	Partitions int32
	// ReplicationFactor is the replica count of a topic created without
	// one (default.replication.factor); default the nodes of Kafka, up to
	// 3.
	ReplicationFactor int32
	// Unclean makes a topic created without
	// unclean.leader.election.enable allow unclean leader election
	// (cluster.TopicSpec.Unclean), as DescribeConfigs then shows it.
	Unclean bool
	// TopicConfig is the node's cluster.Options.TopicConfig; default
	// LogTopicConfig. The broker describes a topic's default configs by
	// it, and checks a config by it before the controller is asked: a
	// committed config every node then fails to apply would be a config
	// in name only.
	TopicConfig func(base log.TopicConfig, configs map[string]string) (log.TopicConfig, error)
}

// NodeCluster returns the Cluster a broker serves a cluster.Node by, which
// is also a ReplicatedTransactions, a LeaderEpochStarts and a
// SecureCluster (credentials and ACLs in the controller's records): brokers,
// topics and leaders are the committed metadata the node applied, a
// partition's log is the node's replica, a produce goes through the
// replica's leader, topic configs are the controller's (ConfigRecords, by
// Kafka's names, as in KRaft), and groups and transactions are the node's
// coordinators.
//
// Every node applies a topic's configs to its replicas (its
// cluster.Options.TopicConfig, opts.TopicConfig), so retention, compaction,
// segment and message sizes take effect on every replica;
// min.insync.replicas is the controller's ISR and ELR rule for the topic
// and its replicas' acks=all floor, unclean.leader.election.enable the
// controller's election rule.
func NodeCluster(n *cluster.Node, opts NodeOptions) (Cluster, error) {
	nc, err := newNodeCluster(n, opts)
	if err != nil {
		return nil, err
	}
	return nc, nil
}

func newNodeCluster(n *cluster.Node, opts NodeOptions) (*nodeCluster, error) {
	nc := &nodeCluster{n: n, opts: opts, listeners: map[string]map[replica.NodeID]BrokerAddr{}}
	var err error
	if nc.addrs, err = parseAddrs("Kafka", opts.Kafka); err != nil {
		return nil, err
	}
	for name, addrs := range opts.Listeners {
		if nc.listeners[name], err = parseAddrs("listener "+name, addrs); err != nil {
			return nil, err
		}
	}
	nc.opts.MinInsyncReplicas = max(opts.MinInsyncReplicas, 1)
	if opts.Partitions <= 0 {
		nc.opts.Partitions = 1
	}
	if opts.ReplicationFactor <= 0 {
		nc.opts.ReplicationFactor = int32(min(3, max(len(opts.Kafka), 1)))
	}
	if opts.TopicConfig == nil {
		nc.opts.TopicConfig = LogTopicConfig
	}
	nc.addr = func(id replica.NodeID) (BrokerAddr, bool) {
		a, ok := nc.addrs[id]
		return a, ok
	}
	return nc, nil
}

// parseAddrs parses every node's address on a listener.
func parseAddrs(listener string, addrs map[replica.NodeID]string) (map[replica.NodeID]BrokerAddr, error) {
	out := map[replica.NodeID]BrokerAddr{}
	for id, addr := range addrs {
		a, err := parseAddr(addr)
		if err != nil {
			return nil, fmt.Errorf("broker: %s address of node %d: %w", listener, id, err)
		}
		a.ID = int32(id)
		out[id] = a
	}
	return out, nil
}

func parseAddr(hostport string) (BrokerAddr, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return BrokerAddr{}, err
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return BrokerAddr{}, fmt.Errorf("port of %q: %w", hostport, err)
	}
	return BrokerAddr{Host: host, Port: int32(p)}, nil
}

var _ interface {
	ReplicatedTransactions
	LeaderEpochStarts
	SecureCluster
	ListenerCluster
} = (*nodeCluster)(nil)

// nodeCluster is NodeCluster's Cluster.
type nodeCluster struct {
	n     *cluster.Node
	opts  NodeOptions
	addrs map[replica.NodeID]BrokerAddr
	// listeners are the nodes' addresses on named listeners.
	listeners map[string]map[replica.NodeID]BrokerAddr
	// addr returns a node's Kafka address: addrs', or, for a broker alone,
	// the one it serves on.
	addr func(replica.NodeID) (BrokerAddr, bool)
	view atomic.Pointer[nodeView]
}

// nodeView indexes one committed metadata snapshot for the broker's
// lookups.
type nodeView struct {
	md     *cluster.Metadata
	live   map[replica.NodeID]bool
	topics map[string]int32 // partition counts
}

// current returns the index of the node's latest committed metadata.
func (nc *nodeCluster) current() *nodeView {
	md := nc.n.Metadata()
	if v := nc.view.Load(); v != nil && v.md == md {
		return v
	}
	v := &nodeView{md: md, live: map[replica.NodeID]bool{}, topics: map[string]int32{}}
	for _, b := range md.Brokers {
		v.live[b.ID] = !b.Fenced
	}
	for _, t := range md.Topics {
		v.topics[t.Name] = t.Partitions
	}
	nc.view.Store(v)
	return v
}

func (nc *nodeCluster) Brokers() ([]BrokerAddr, int32) {
	v := nc.current()
	return v.liveAt(nc.addr), int32(v.md.Controller)
}

func (nc *nodeCluster) ListenerBrokers(name string) ([]BrokerAddr, bool) {
	addrs, ok := nc.listeners[name]
	if !ok {
		return nil, false
	}
	return nc.current().liveAt(func(id replica.NodeID) (BrokerAddr, bool) {
		a, ok := addrs[id]
		return a, ok
	}), true
}

// liveAt returns the live brokers at the addresses addr gives them.
func (v *nodeView) liveAt(addr func(replica.NodeID) (BrokerAddr, bool)) []BrokerAddr {
	var out []BrokerAddr
	for _, b := range v.md.Brokers {
		if a, ok := addr(b.ID); ok && v.live[b.ID] {
			out = append(out, a)
		}
	}
	return out
}

func (nc *nodeCluster) Topics() ([]string, error) {
	var names []string
	for _, t := range nc.current().md.Topics {
		names = append(names, t.Name)
	}
	return names, nil
}

// TopicID is the id the controller gave the topic, drawn at random when it
// was created (every node creates its replicas with it), so that a topic
// deleted and created again under its name has another, as in Kafka.
func (nc *nodeCluster) TopicID(topic string) ([16]byte, error) {
	t := nc.current().md.Topic(topic)
	if t == nil {
		return [16]byte{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	return t.ID, nil
}

// TopicConfig is this node's replicas' configuration of the topic, or, if
// it has not created them yet, the one the topic's configs give.
func (nc *nodeCluster) TopicConfig(topic string) (log.TopicConfig, error) {
	t := nc.current().md.Topic(topic)
	if t == nil {
		return log.TopicConfig{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	if cfg, err := nc.n.LocalTopicConfig(topic); err == nil {
		return cfg, nil
	}
	return nc.opts.TopicConfig(log.TopicConfig{Partitions: t.Partitions, Fsync: log.FsyncAlways()}, t.Configs)
}

func (nc *nodeCluster) Partition(topic string, id int32) (PartitionState, error) {
	v := nc.current()
	p := v.md.Partition(topic, id)
	if p == nil {
		if _, ok := v.topics[topic]; !ok {
			return PartitionState{}, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
		}
		return PartitionState{}, fmt.Errorf("%w: %s-%d", log.ErrUnknownPartition, topic, id)
	}
	st := PartitionState{Leader: int32(p.Leader), LeaderEpoch: p.LeaderEpoch, Replicas: ids(p.Replicas), ISR: ids(p.ISR), Offline: []int32{}}
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

func (nc *nodeCluster) Log(topic string, id int32) (*log.Partition, error) {
	p, err := nc.n.Log(topic, id)
	if err != nil {
		// The metadata names this node, whose replica is not started yet:
		// the client asks again.
		return nil, fmt.Errorf("%w: %w", kafkaerr.ErrNotLeaderOrFollower, err)
	}
	return p, nil
}

// Append produces through the partition's replica, which appends as the
// leader and answers when acks is met. The replica checks an idempotent
// producer's batch against its producer state as the leader in its
// current epoch, and answers a retry of a batch it has with the
// original's offsets (package replica).
func (nc *nodeCluster) Append(ctx context.Context, topic string, id int32, acks int16, batch segment.Batch) (log.AppendResult, error) {
	if batch.Transactional() {
		return log.AppendResult{}, fmt.Errorf("%w: a transactional batch is appended with AppendTransactional", kafkaerr.ErrInvalidRequest)
	}
	return appendResult(nc.n.Produce(ctx, topic, id, replica.Acks(acks), batch))
}

func appendResult(r replica.ProduceResult, err error) (log.AppendResult, error) {
	if err != nil {
		return log.AppendResult{}, kafkaError(err)
	}
	return log.AppendResult{BaseOffset: r.BaseOffset, LastOffset: r.LastOffset, Duplicate: r.Duplicate}, nil
}

// kafkaError returns err, from the cluster, replica or idempotence
// packages, as the broker answers it: with the Kafka code it carries, and
// as Kafka answers what carries none.
func kafkaError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", kafkaerr.ErrRequestTimedOut, err)
	case errors.Is(err, replica.ErrStopped), errors.Is(err, cluster.ErrClosed):
		// The node is stopping: the client finds the next leader.
		return fmt.Errorf("%w: %w", kafkaerr.ErrNotLeaderOrFollower, err)
	}
	if _, coded := errors.AsType[kafkaerr.Code](err); !coded {
		// What the replica layer does not know is its log's failure.
		return fmt.Errorf("%w: %w", kafkaerr.ErrKafkaStorageError, err)
	}
	return err
}

// controllerTimeout bounds a request to the active controller.
const controllerTimeout = 10 * time.Second

// CreateTopic has the active controller create the topic with its
// configs, and returns once this node has applied it. The configs are
// checked first by the node's mapping onto its logs (a value the
// controller allows that the broker does not serve, compression.type gzip
// say), then by the controller's rules.
func (nc *nodeCluster) CreateTopic(ctx context.Context, name string, partitions, rf int32, assignment [][]int32, configs map[string]string, validateOnly bool) error {
	if err := nc.checkLogConfigs(configs); err != nil {
		return err
	}
	if err := controller.CheckTopicConfigs(name, configs); err != nil {
		return kafkaError(err)
	}
	if validateOnly {
		if nc.current().md.Topic(name) != nil {
			return fmt.Errorf("%w: %s", log.ErrTopicExists, name)
		}
		return nil
	}
	spec := cluster.TopicSpec{Partitions: partitions, ReplicationFactor: rf, Configs: configs, Unclean: nc.opts.Unclean}
	if partitions == -1 {
		spec.Partitions = nc.opts.Partitions
	}
	if rf == -1 {
		spec.ReplicationFactor = nc.opts.ReplicationFactor
	}
	if brokers, _ := nc.Brokers(); assignment == nil && int(spec.ReplicationFactor) > len(brokers) {
		// Kafka's controller answers it so (ReplicationControlManager),
		// where placement would find the assignment impossible.
		return fmt.Errorf("%w: replication factor %d, but %d brokers are live", kafkaerr.ErrInvalidReplicationFactor, spec.ReplicationFactor, len(brokers))
	}
	for _, replicas := range assignment {
		nodes := make([]replica.NodeID, len(replicas))
		for i, r := range replicas {
			nodes[i] = replica.NodeID(r)
		}
		spec.Assignment = append(spec.Assignment, nodes)
	}
	ctx, cancel := context.WithTimeout(ctx, controllerTimeout)
	defer cancel()
	if err := nc.n.CreateTopic(ctx, name, spec); err != nil {
		return kafkaError(err)
	}
	nc.waitLeading(ctx, name)
	return nil
}

// waitLeading waits until this node's replicas lead the partitions of
// topic that the metadata has this node lead, so that a client's first
// produce finds them (the controller elects the leaders as it creates the
// topic, and the node takes leadership up as it applies the record), or
// until ctx ends: the topic is created, and clients retry a produce
// answered NOT_LEADER_OR_FOLLOWER.
func (nc *nodeCluster) waitLeading(ctx context.Context, topic string) {
	for {
		md, led := nc.n.Metadata(), true
		for _, p := range md.Partitions {
			if p.Topic != topic || p.Leader != md.Node {
				continue
			}
			if st, err := nc.n.Status(ctx, topic, p.Partition); err != nil || st.Role != replica.RoleLeader || st.LeaderEpoch < p.LeaderEpoch {
				led = false
				break
			}
		}
		if led {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (nc *nodeCluster) checkLogConfigs(configs map[string]string) error {
	_, err := nc.opts.TopicConfig(log.TopicConfig{Partitions: 1}, configs)
	return err
}

// The topic configs the controller reads itself.
const (
	minISRConfig  = "min.insync.replicas"
	uncleanConfig = "unclean.leader.election.enable"
)

// DescribeTopicConfigs shows the configs set on the topic as they were
// set, and the others at their defaults: the log's, as this node's
// replicas take them, and the cluster's min.insync.replicas.
func (nc *nodeCluster) DescribeTopicConfigs(topic string) ([]ConfigEntry, error) {
	t := nc.current().md.Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("%w: %s", log.ErrUnknownTopic, topic)
	}
	cfg, err := nc.opts.TopicConfig(log.TopicConfig{Partitions: t.Partitions, Fsync: log.FsyncAlways()}, nil)
	if err != nil {
		return nil, err
	}
	values := TopicConfigValues(cfg)
	values[minISRConfig] = strconv.Itoa(nc.opts.MinInsyncReplicas)
	values[uncleanConfig] = strconv.FormatBool(nc.opts.Unclean)
	var entries []ConfigEntry
	for _, name := range slices.Sorted(maps.Keys(values)) {
		e := ConfigEntry{Name: name, Value: values[name]}
		if v, ok := t.Configs[name]; ok {
			e.Value, e.Set = v, true
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// AlterTopicConfigs has the active controller alter the topic's configs,
// and returns once this node's metadata has the configs it committed.
func (nc *nodeCluster) AlterTopicConfigs(ctx context.Context, topic string, ops []ConfigOp, replace, validateOnly bool) error {
	var cops []controller.ConfigOp
	for _, op := range ops {
		if op.Op == kmsg.IncrementalAlterConfigOpSet {
			if err := nc.checkLogConfigs(map[string]string{op.Name: op.Value}); err != nil {
				return err
			}
		}
		cops = append(cops, controller.ConfigOp{Op: controller.ConfigOpType(op.Op), Name: op.Name, Value: op.Value})
	}
	ctx, cancel := context.WithTimeout(ctx, controllerTimeout)
	defer cancel()
	if _, err := nc.n.AlterTopicConfigs(ctx, topic, cops, replace, validateOnly); err != nil {
		return kafkaError(err)
	}
	return nil
}

// DeleteTopic has the active controller delete the topic, and returns
// once this node has applied it; every node deletes its replicas as it
// applies the deletion.
func (nc *nodeCluster) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, controllerTimeout)
	defer cancel()
	if err := nc.n.DeleteTopic(ctx, name); err != nil {
		return kafkaError(err)
	}
	return nil
}

func (nc *nodeCluster) NewProducerID() (int64, error) {
	id, err := nc.n.NewProducerID()
	if err != nil {
		return 0, kafkaError(err)
	}
	return id, nil
}

func (nc *nodeCluster) Groups() *group.Service { return nc.n.Groups() }

func (nc *nodeCluster) ScramCredentials() map[string]map[string]controller.ScramCredential {
	return nc.n.Metadata().Credentials
}

func (nc *nodeCluster) AlterScramCredentials(ctx context.Context, set []controller.ScramCredential, remove []controller.ScramCredentialKey) error {
	return nc.n.AlterScramCredentials(ctx, set, remove)
}

func (nc *nodeCluster) ACLs() []controller.ACL { return nc.n.Metadata().ACLs }

func (nc *nodeCluster) AlterACLs(ctx context.Context, add, remove []controller.ACL) error {
	return nc.n.AlterACLs(ctx, add, remove)
}

func (nc *nodeCluster) GroupCoordinator(groupID string) int32 {
	return int32(nc.n.GroupCoordinator(groupID))
}

func (nc *nodeCluster) Transactions() TxnCoordinator { return nc.n.Transactions() }

func (nc *nodeCluster) TransactionCoordinatorFor(txnID string) int32 {
	return int32(nc.n.TransactionCoordinator(txnID))
}

func (nc *nodeCluster) AppendTransactional(ctx context.Context, txnID string, addPartitions bool, acks int16, batches []PartitionBatch) []AppendOutcome {
	pbs := make([]cluster.PartitionBatch, len(batches))
	for i, b := range batches {
		pbs[i] = cluster.PartitionBatch{Topic: b.Topic, Partition: b.Partition, Batch: b.Batch}
	}
	out := make([]AppendOutcome, len(batches))
	for i, r := range nc.n.ProduceTransactionalBatches(ctx, txnID, addPartitions, replica.Acks(acks), pbs...) {
		out[i].Result, out[i].Err = appendResult(r, r.Err)
	}
	return out
}

func (nc *nodeCluster) AddToTransaction(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, tp idempotence.TopicPartition, verifyOnly bool) error {
	return nc.n.AddToTransaction(ctx, txnID, producer, tp, verifyOnly)
}

func (nc *nodeCluster) LeaderEpochStartOffset(topic string, partition, leaderEpoch int32) (int64, bool) {
	return nc.n.LeaderEpochStartOffset(topic, partition, leaderEpoch)
}
