package replica

import (
	"fmt"
)

// NodeID names a node (Kafka's broker id).
type NodeID int32

// NoNode is the NodeID of no node: no leader known. A message addressed to
// NoNode goes to the controller, whichever node or service that is.
const NoNode NodeID = -1

// Acks is how many replicas must have a produced batch before its result
// is delivered (Kafka's acks).
type Acks int8

// The three acks levels Kafka allows.
const (
	// AcksNone asks for no acknowledgement; the result says only where
	// the batch went once it is written.
	AcksNone Acks = 0
	// AcksLeader acknowledges once the leader's log has the batch (under
	// its fsync policy).
	AcksLeader Acks = 1
	// AcksAll acknowledges once the high watermark passes the batch: every
	// replica of the maximal ISR has it, and that ISR has at least
	// MinInsyncReplicas members.
	AcksAll Acks = -1
)

func (a Acks) valid() bool { return a == AcksNone || a == AcksLeader || a == AcksAll }

// Header addresses a message: the sending and receiving nodes and the
// partition it is about.
type Header struct {
	From, To  NodeID
	Topic     string
	Partition int32
}

// Head returns the header, so that code holding a Message can route it.
func (h *Header) Head() *Header { return h }

// Message is what nodes and the controller exchange. Every message has a
// compact binary encoding (MarshalBinary); Decode reads any of them.
type Message interface {
	Head() *Header
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
	kind() kind
}

// Fetch is a follower's request for records from its leader (Kafka's
// FetchRequest from a replica, with KIP-320's epochs). The fetch offset is
// the follower's log end: the leader takes it as the follower's progress.
type Fetch struct {
	Header
	// ID correlates the response; the follower ignores a response whose
	// ID is not that of its latest fetch.
	ID uint64
	// CurrentLeaderEpoch is the epoch the follower believes current; the
	// leader fences a lower one and does not yet know a higher one.
	CurrentLeaderEpoch int32
	// FetchOffset is the follower's log end offset.
	FetchOffset int64
	// LastFetchedEpoch is the epoch of the follower's last record (its
	// latest epoch), or -1; the leader checks it for divergence.
	LastFetchedEpoch int32
	// LogStartOffset is the follower's log start offset.
	LogStartOffset int64
	// SyncedOffset is the follower's synced end offset: everything below
	// it is durable. Leaders with Config.SyncedAcks count it, not the
	// fetch offset, towards the high watermark.
	SyncedOffset int64
	// MaxBytes bounds the records returned (at least one batch is).
	MaxBytes int32
	// MaxWait is how many of the leader's ticks it may hold the fetch when
	// it has nothing new (a long poll).
	MaxWait int32
	// BrokerEpoch is the follower's broker epoch (KIP-903's ReplicaEpoch),
	// or NoBrokerEpoch. The leader starts a follower's state over when it
	// changes, refuses a fetch of an earlier one, and names the epoch in
	// its ISR proposals.
	BrokerEpoch int64
}

// FetchResponse is the leader's answer to a Fetch.
type FetchResponse struct {
	Header
	ID uint64
	// Err is kafkaerr.None or the reason nothing was read:
	// ErrFencedLeaderEpoch, ErrUnknownLeaderEpoch,
	// ErrNotLeaderOrFollower, ErrOffsetOutOfRange.
	Err Code
	// Leader and LeaderEpoch are the leader's view, for a follower told
	// ErrNotLeaderOrFollower.
	Leader      NodeID
	LeaderEpoch int32
	// FetchOffset echoes the request.
	FetchOffset int64
	// HighWatermark, LogStartOffset and LogEndOffset are the leader's.
	HighWatermark, LogStartOffset, LogEndOffset int64
	// DivergingEpoch and DivergingEndOffset, when DivergingEpoch is not
	// -1, say that the follower's log diverged: the leader's largest epoch
	// at or below the follower's last fetched epoch, and where it ends
	// (KIP-320, KIP-595). Records is then empty.
	DivergingEpoch     int32
	DivergingEndOffset int64
	// Records are whole batches from FetchOffset on.
	Records []byte
}

// NoBrokerEpoch is the broker epoch of a node that does not know its own,
// or of a controller that does not track them: no broker epoch is checked
// against it (Kafka's -1). Broker epochs a controller hands out are
// positive.
const NoBrokerEpoch int64 = 0

// LeaderAndISR tells a node a partition's state as the controller decided
// it: who leads in which epoch, the replicas and the in-sync ones (Kafka's
// LeaderAndIsrRequest, or a KRaft PartitionRecord).
type LeaderAndISR struct {
	Header
	// BrokerEpoch is the broker epoch the controller knows the addressee
	// by (KIP-380): a node refuses a message for another epoch of itself,
	// sent to an earlier incarnation or before it registered, with
	// ErrStaleBrokerEpoch. NoBrokerEpoch skips the check.
	BrokerEpoch     int64
	ControllerEpoch int32
	Leader          NodeID
	LeaderEpoch     int32
	PartitionEpoch  int32
	Replicas        []NodeID
	ISR             []NodeID
	Adding          []NodeID
	Removing        []NodeID
}

// AlterPartition is a leader's proposal of a new ISR to the controller
// (Kafka's AlterPartitionRequest), compare-and-set on PartitionEpoch. It is
// addressed to NoNode.
type AlterPartition struct {
	Header
	// BrokerEpoch is the leader's broker epoch; the controller refuses a
	// request of another with ErrStaleBrokerEpoch.
	BrokerEpoch    int64
	LeaderEpoch    int32
	PartitionEpoch int32
	// ISR is the proposed ISR, each member with the broker epoch the
	// leader knows it by (KIP-903's NewIsrWithEpochs): the leader's own,
	// and a follower's from the fetches that made it caught up. The
	// controller refuses a member registered since in another epoch with
	// ErrIneligibleReplica: that incarnation may lack what the fetches of
	// the earlier one claimed (KAFKA-14139).
	ISR []ISRMember
}

// ISRMember is a member of a proposed ISR (Kafka's BrokerState of
// AlterPartitionRequest): a node and its broker epoch, NoBrokerEpoch if
// the leader has not heard it since it last started over.
type ISRMember struct {
	ID          NodeID
	BrokerEpoch int64
}

// Nodes returns the proposed ISR's nodes, in order.
func (m *AlterPartition) Nodes() []NodeID {
	ns := make([]NodeID, len(m.ISR))
	for i, b := range m.ISR {
		ns[i] = b.ID
	}
	return ns
}

// AlterPartitionResponse is the controller's answer: on success the
// partition's new state.
type AlterPartitionResponse struct {
	Header
	Err            Code
	Leader         NodeID
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []NodeID
}

// Produce asks the leader to append a batch. Batch is owned by the
// partition from Step on: the leader stamps its offsets and epoch into it.
type Produce struct {
	Header
	// ID correlates the result.
	ID   uint64
	Acks Acks
	// Timeout is how many ticks an AcksAll produce may wait for the high
	// watermark before it fails with ErrRequestTimedOut; 0 means the partition's
	// Config.ProduceTimeoutTicks.
	Timeout int32
	Batch   []byte
	// Coordinator marks the batch of a coordinator rather than a client
	// (Kafka's AppendOrigin.COORDINATOR): a transaction marker, or a group
	// coordinator's records. Its producer epoch and a marker's coordinator
	// epoch are checked, not its sequence, and only a coordinator may
	// write a control batch.
	Coordinator bool
}

// ProduceResult is the outcome of a Produce that the leader accepted.
type ProduceResult struct {
	Header
	ID uint64
	// Err is nil on success. It is ErrNotEnoughReplicasAfterAppend (the
	// batch is in the log, but too few replicas have it), ErrRequestTimedOut (the
	// outcome is unknown), a *NotLeaderError (leadership was lost before
	// the batch was committed) or ErrKafkaStorageError.
	Err                    error
	BaseOffset, LastOffset int64
	// Duplicate says the batch repeated one of its producer's last five,
	// which the log already had: nothing was appended, and the offsets are
	// the original's, committed as the produce's acks asked.
	Duplicate bool
}

func (m *ProduceResult) String() string {
	return fmt.Sprintf("produce %d: [%d, %d] err=%v", m.ID, m.BaseOffset, m.LastOffset, m.Err)
}
