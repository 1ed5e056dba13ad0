package cluster

import (
	"maps"
	"slices"
	"strings"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// Metadata is the cluster as one node's committed metadata has it: what a
// client routes by (Kafka's Metadata response).
type Metadata struct {
	// Node is the node that answered.
	Node replica.NodeID
	// Controller is the node that leads the metadata log, and so is (or
	// is about to be) the active controller; NoNode if none is known.
	Controller      replica.NodeID
	ControllerEpoch int32
	// Term is the metadata log's term, and Applied the index of the
	// latest entry applied.
	Term       uint64
	Applied    uint64
	Brokers    []BrokerInfo
	Topics     []TopicInfo
	Partitions []PartitionInfo
	// Credentials are the SCRAM credentials the controller keeps, by user
	// and mechanism, and ACLs its ACLs in the order created: what every
	// broker authenticates and authorizes by.
	Credentials map[string]map[string]controller.ScramCredential
	ACLs        []controller.ACL
}

// BrokerInfo is a registered broker.
type BrokerInfo struct {
	ID           replica.NodeID
	Epoch        int64
	Fenced       bool
	ShuttingDown bool
	Clean        bool
}

// TopicInfo is a topic: its id and the configs set on it by Kafka's
// names (the others have their defaults).
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Partitions int32
	Configs    map[string]string
}

// PartitionInfo is a partition's state as the controller left it.
type PartitionInfo struct {
	Topic          string
	Partition      int32
	Leader         replica.NodeID
	LeaderEpoch    int32
	PartitionEpoch int32
	Replicas       []replica.NodeID
	ISR            []replica.NodeID
	ELR            []replica.NodeID
	Adding         []replica.NodeID
	Removing       []replica.NodeID
	Recovering     bool
}

// Topic returns a topic, or nil.
func (md *Metadata) Topic(name string) *TopicInfo {
	i, ok := slices.BinarySearchFunc(md.Topics, name, func(t TopicInfo, name string) int { return strings.Compare(t.Name, name) })
	if !ok {
		return nil
	}
	return &md.Topics[i]
}

// Partition returns a partition, or nil.
func (md *Metadata) Partition(topic string, partition int32) *PartitionInfo {
	i, ok := slices.BinarySearchFunc(md.Partitions, controller.TopicPartition{Topic: topic, Partition: partition},
		func(p PartitionInfo, tp controller.TopicPartition) int {
			return compareTP(controller.TopicPartition{Topic: p.Topic, Partition: p.Partition}, tp)
		})
	if !ok {
		return nil
	}
	return &md.Partitions[i]
}

// Broker returns a registered broker, or nil.
func (md *Metadata) Broker(id replica.NodeID) *BrokerInfo {
	for i := range md.Brokers {
		if md.Brokers[i].ID == id {
			return &md.Brokers[i]
		}
	}
	return nil
}

// metadata snapshots the committed state; run on the control loop.
func (c *control) metadata() *Metadata {
	md := &Metadata{Node: c.id, Controller: c.leader(), ControllerEpoch: c.state.Epoch, Term: c.term, Applied: c.applied}
	for _, name := range slices.Sorted(maps.Keys(c.state.Topics)) {
		t := c.topicState(name)
		md.Topics = append(md.Topics, TopicInfo{Name: name, ID: t.id, Partitions: t.partitions, Configs: t.configs})
	}
	for _, id := range slices.Sorted(maps.Keys(c.state.Brokers)) {
		b := c.state.Brokers[id]
		md.Brokers = append(md.Brokers, BrokerInfo{ID: id, Epoch: b.Epoch, Fenced: b.Fenced, ShuttingDown: b.ShuttingDown, Clean: b.Clean})
	}
	for _, tp := range slices.SortedFunc(maps.Keys(c.state.Partitions), compareTP) {
		p := c.state.Partitions[tp]
		md.Partitions = append(md.Partitions, PartitionInfo{
			Topic: tp.Topic, Partition: tp.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
			PartitionEpoch: p.PartitionEpoch, Replicas: slices.Clone(p.Replicas), ISR: slices.Clone(p.ISR), ELR: slices.Clone(p.ELR),
			Adding: slices.Clone(p.Adding), Removing: slices.Clone(p.Removing), Recovering: p.Recovering,
		})
	}
	for user, ms := range c.state.Credentials {
		if md.Credentials == nil {
			md.Credentials = map[string]map[string]controller.ScramCredential{}
		}
		md.Credentials[user] = maps.Clone(ms)
	}
	md.ACLs = slices.Clone(c.state.ACLs)
	return md
}
