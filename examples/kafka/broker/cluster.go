package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// Cluster is what a Broker needs of the cluster it serves in: the brokers
// and their Kafka addresses, each partition's leader, leader epoch,
// replicas and ISR, this node's replica of a partition, a way to append as
// a partition's leader, the topics' configs, and the group coordinator.
// How the cluster agrees on these (a controller, consensus, replication
// between nodes) is its own business: the broker only answers Kafka's
// requests by them. NodeCluster makes one of a cluster.Node; a broker
// alone (Config.Cluster nil) serves a cluster.Node of one voter through it.
//
// Its errors carry Kafka's codes (kafkaerr), which the broker answers
// with; an error of no code is UNKNOWN_SERVER_ERROR. Every method may be
// called by many goroutines at once.
type Cluster interface {
	// Brokers returns the live brokers, this one included, with the
	// address Kafka clients are to use, and the id of the active
	// controller (-1 if none is known).
	Brokers() (brokers []BrokerAddr, controller int32)
	// Topics returns the names of the cluster's topics.
	Topics() ([]string, error)
	// TopicID returns a topic's id (KIP-516), the same on every broker;
	// an error wrapping log.ErrUnknownTopic if the cluster has no such
	// topic.
	TopicID(topic string) ([16]byte, error)
	// TopicConfig returns the log configuration of a topic's replicas on
	// this node; an error wrapping log.ErrUnknownTopic if the cluster has
	// no such topic.
	TopicConfig(topic string) (log.TopicConfig, error)
	// Partition returns a partition's state as this node knows it; an
	// error wrapping log.ErrUnknownTopic or log.ErrUnknownPartition if the
	// cluster has no such partition.
	Partition(topic string, partition int32) (PartitionState, error)
	// Log returns this node's replica of a partition. Its high watermark
	// is the cluster's to move (log.Options.ExternalHighWatermark): it
	// bounds what consumers read, and its last stable offset what
	// read_committed consumers read.
	Log(topic string, partition int32) (*log.Partition, error)
	// Append appends a producer's batch to a partition this node leads, as
	// its leader, and waits as acks (0, 1 or -1) asks: for acks -1 until
	// the high watermark passes the batch with MinInsyncReplicas in the
	// ISR. An idempotent producer's retry of a batch the partition has
	// appends nothing and answers the offsets it got. Errors wrap Kafka's
	// (kerr): NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, or the log's
	// and idempotence's errors.
	Append(ctx context.Context, topic string, partition int32, acks int16, batch segment.Batch) (log.AppendResult, error)
	// CreateTopic creates a topic with its configs by Kafka name, its
	// replicas given by assignment (one list of broker ids per partition)
	// or, if assignment is nil, placed by the cluster from partitions and
	// replicationFactor (-1: the cluster's defaults). It returns once this
	// node knows the topic's partitions. An existing topic is an error
	// carrying kafkaerr.ErrTopicAlreadyExists, a config refused one
	// carrying kafkaerr.ErrInvalidConfig that names it. validateOnly
	// checks the request
	// and creates nothing.
	CreateTopic(ctx context.Context, name string, partitions, replicationFactor int32, assignment [][]int32, configs map[string]string, validateOnly bool) error
	// DescribeTopicConfigs returns each of a topic's configs by Kafka
	// name, the set and the defaults; an error wrapping
	// log.ErrUnknownTopic if the cluster has no such topic.
	DescribeTopicConfigs(topic string) ([]ConfigEntry, error)
	// AlterTopicConfigs applies ops to a topic's configs in order, all or
	// none (KIP-339); replace deletes the configs ops do not name (the
	// legacy AlterConfigs). It returns once this node's metadata has the
	// change; its replicas take it up as they apply it, soon after, as a
	// Kafka broker's do. validateOnly checks and changes nothing.
	AlterTopicConfigs(ctx context.Context, topic string, ops []ConfigOp, replace, validateOnly bool) error
	// DeleteTopic deletes a topic.
	DeleteTopic(ctx context.Context, name string) error
	// NewProducerID returns a producer id that no broker of the cluster
	// handed out before.
	NewProducerID() (int64, error)
	// Groups returns the group coordinator. In a replicated cluster it
	// keeps consumer groups and their committed offsets in the replicated
	// offsets topic, as Kafka does: a group's coordinator is the leader of
	// the offsets partition its id hashes to (group.PartitionFor), and
	// the Service answers NOT_COORDINATOR for the partitions this broker
	// does not lead. The cluster owns it: the broker does not close it.
	Groups() *group.Service
	// GroupCoordinator returns the broker that coordinates a group, or
	// -1 if none is live.
	GroupCoordinator(groupID string) int32
}

// ConfigOp is one change of a topic's config (an IncrementalAlterConfigs
// entry).
type ConfigOp struct {
	Op    kmsg.IncrementalAlterConfigOp
	Name  string
	Value string
}

// ConfigEntry is one of a topic's configs as DescribeConfigs shows it.
type ConfigEntry struct {
	Name, Value string
	// Set says the config is set on the topic; else it is a default.
	Set bool
}

// TxnCoordinator is a transaction coordinator as the broker serves Kafka's
// transaction requests with it: a ReplicatedTransactions cluster's (a
// cluster.Node's idempotence.TxnRuntime). Errors wrap the Kafka error to
// answer (kerr, or an idempotence error's code).
type TxnCoordinator interface {
	InitProducerID(txnID string, timeout time.Duration) (idempotence.ProducerIDAndEpoch, error)
	ReinitProducerID(txnID string, timeout time.Duration, current idempotence.ProducerIDAndEpoch) (idempotence.ProducerIDAndEpoch, error)
	AddPartitions(txnID string, producer idempotence.ProducerIDAndEpoch, partitions ...idempotence.TopicPartition) error
	EndTxn(txnID string, producer idempotence.ProducerIDAndEpoch, commit bool) (idempotence.ProducerIDAndEpoch, error)
	// Describe and List answer the transactional ids this broker
	// coordinates.
	Describe(txnID string) (idempotence.TxnRecord, bool)
	List() []idempotence.TxnRecord
}

var _ TxnCoordinator = (*idempotence.TxnRuntime)(nil)

// ReplicatedTransactions is a Cluster that keeps the transaction
// coordinators' state in a replicated transaction state topic, as Kafka
// does (TransactionCoordinator, TransactionStateManager): a transactional
// id's coordinator is the leader of the state partition its id hashes to,
// and the coordinator writes its markers through each partition's leader
// (TransactionMarkerChannelManager). A broker given one serves the
// transaction requests with Transactions, which answers NOT_COORDINATOR or
// COORDINATOR_LOAD_IN_PROGRESS for the ids this broker does not
// coordinate, and a transactional produce with AppendTransactional. Its
// groups are replicated too, and their Service takes offsets committed in
// a transaction (through group.ServiceOptions.Append). A Cluster without it
// serves no transactions.
type ReplicatedTransactions interface {
	Cluster
	// Transactions returns this broker's transaction coordinator.
	Transactions() TxnCoordinator
	// TransactionCoordinatorFor returns the broker that coordinates
	// transactional id txnID, or -1 if none is live.
	TransactionCoordinatorFor(txnID string) int32
	// AppendTransactional appends the transactional batches of one
	// produce request, of the producer with transactional id txnID, to
	// partitions this node leads, each as Append does, once txnID's
	// coordinator has their partitions in the producer's open
	// transaction: with addPartitions (Produce v12+, KIP-890 part 2)
	// those not in it are added first, in one request, as Kafka's
	// AddPartitionsToTxnManager adds a produce's partitions together;
	// without, the coordinator must have them already (KIP-890 part 1's
	// verification), or the batch is INVALID_TXN_STATE. It returns each
	// batch's outcome, in order.
	AppendTransactional(ctx context.Context, txnID string, addPartitions bool, acks int16, batches []PartitionBatch) []AppendOutcome
	// AddToTransaction adds tp to the open transaction of producer, whose
	// transactional id is txnID, at the id's coordinator wherever it is,
	// or with verifyOnly checks that tp is in it: a group coordinator does
	// so for a TxnOffsetCommit (KIP-890). The coordinator's absence is
	// COORDINATOR_NOT_AVAILABLE.
	AddToTransaction(ctx context.Context, txnID string, producer idempotence.ProducerIDAndEpoch, tp idempotence.TopicPartition, verifyOnly bool) error
}

// PartitionBatch is one partition's batch of a produce request.
type PartitionBatch struct {
	Topic     string
	Partition int32
	Batch     segment.Batch
}

// AppendOutcome is what became of one batch of a produce.
type AppendOutcome struct {
	Result log.AppendResult
	Err    error
}

// ListenerCluster is a Cluster whose brokers serve Kafka clients on
// several named listeners (Kafka's listeners and advertised.listeners):
// a client of a listener with a Name is told every broker at its address
// on the listener of that name.
type ListenerCluster interface {
	Cluster
	// ListenerBrokers returns the live brokers at their addresses on the
	// listener named name, as Brokers does; ok is false if the cluster
	// names no such listener.
	ListenerBrokers(name string) (brokers []BrokerAddr, ok bool)
}

// LeaderEpochStarts is a Cluster whose leaders learn their high
// watermark from their followers, as a replicated one's do: a leader just
// elected, or restarted, knows it only once its followers have fetched in
// its epoch, and until then it may be below what was acknowledged. Given
// one, the broker answers ListOffsets OFFSET_NOT_AVAILABLE for the latest
// offset, and for a timestamp it finds no record for below the high
// watermark, while that is below the offset where the leader's epoch
// began (KIP-207; Kafka's Partition.fetchOffsetForTimestamp), rather than
// an offset that goes back. A Cluster without it answers by the high
// watermark.
type LeaderEpochStarts interface {
	Cluster
	// LeaderEpochStartOffset returns the offset at which this broker's
	// leadership of a partition in leaderEpoch began: its log end when it
	// took the epoch up. ok is false while it has not taken it up.
	LeaderEpochStartOffset(topic string, partition, leaderEpoch int32) (offset int64, ok bool)
}

// BrokerAddr is a broker and where Kafka clients reach it.
type BrokerAddr struct {
	ID   int32
	Host string
	Port int32
}

// PartitionState is a partition's leadership and replicas.
type PartitionState struct {
	// Leader is the broker that leads the partition, -1 if none.
	Leader      int32
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	// Offline are the replicas on brokers that are not live.
	Offline []int32
}

// leaderPartition returns this broker's replica of a partition it leads,
// and the leader epoch, after checking the epoch a client believes current
// (-1 skips the check) as Kafka's Partition.localLogWithEpochOrThrow does:
// an older epoch is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH
// (KIP-320), and the right epoch on a broker that does not lead is
// NOT_LEADER_OR_FOLLOWER.
func (b *Broker) leaderPartition(topic string, id, current int32) (*log.Partition, int32, error) {
	st, err := b.cluster.Partition(topic, id)
	if err != nil {
		return nil, 0, err
	}
	if err := checkEpoch(current, st.LeaderEpoch); err != nil {
		return nil, 0, err
	}
	if st.Leader != b.cfg.NodeID {
		return nil, 0, fmt.Errorf("%w: %s-%d is led by broker %d in epoch %d, this is broker %d",
			kafkaerr.ErrNotLeaderOrFollower, topic, id, st.Leader, st.LeaderEpoch, b.cfg.NodeID)
	}
	p, err := b.cluster.Log(topic, id)
	if err != nil {
		return nil, 0, err
	}
	return p, st.LeaderEpoch, nil
}

// brokers returns the live brokers as the session's clients reach them,
// and the active controller: on a listener a ListenerCluster names, every
// broker's address on it; else the Cluster's addresses, with this broker
// at its own on the session's listener.
func (b *Broker) brokers(s *session) ([]BrokerAddr, int32) {
	brokers, controller := b.cluster.Brokers()
	if lc, ok := b.cluster.(ListenerCluster); ok && s != nil && s.listener.Name != "" {
		if named, ok := lc.ListenerBrokers(s.listener.Name); ok {
			return named, controller
		}
	}
	return s.brokers(brokers), controller
}

// brokerAddr returns a live broker's address, as the session's clients
// reach it.
func (b *Broker) brokerAddr(s *session, id int32) (BrokerAddr, bool) {
	brokers, _ := b.brokers(s)
	i := slices.IndexFunc(brokers, func(a BrokerAddr) bool { return a.ID == id })
	if i < 0 {
		return BrokerAddr{}, false
	}
	return brokers[i], true
}
