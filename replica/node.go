package replica

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Node is every partition one node replicates, driven as one: it routes
// messages to its partitions, ticks them together, and gathers what they
// send in a Ready into one Batch per destination, so that a follower node
// sends one fetch to each leader node for all the partitions that node
// leads, as Kafka's fetcher threads do. Like a Partition it is
// deterministic and not safe for concurrent use.
type Node struct {
	id          NodeID
	brokerEpoch int64
	parts       []*Partition // sorted by topic, then partition
}

// NewNode returns a node with no partitions.
func NewNode(id NodeID) *Node { return &Node{id: id} }

// ID returns the node's id.
func (n *Node) ID() NodeID { return n.id }

func (n *Node) find(topic string, partition int32) (int, bool) {
	return slices.BinarySearchFunc(n.parts, n.parts, func(p *Partition, _ []*Partition) int {
		return cmp.Or(cmp.Compare(p.cfg.Topic, topic), cmp.Compare(p.cfg.Partition, partition))
	})
}

// SetBrokerEpoch tells every partition of the node, and those added
// later, the broker epoch the controller registered the node in (see
// Partition.SetBrokerEpoch). An earlier epoch than the node's is refused
// with ErrStaleBrokerEpoch and changes nothing.
func (n *Node) SetBrokerEpoch(epoch int64) error {
	if epoch < n.brokerEpoch {
		return fmt.Errorf("%w: broker epoch %d, node %d is in %d", ErrStaleBrokerEpoch, epoch, n.id, n.brokerEpoch)
	}
	n.brokerEpoch = epoch
	for _, p := range n.parts {
		if err := p.SetBrokerEpoch(epoch); err != nil {
			return err
		}
	}
	return nil
}

// Add creates a partition on the node, in the node's broker epoch. Its
// Config.ID must be the node's (zero means the node's); a partition the
// node has is an error.
func (n *Node) Add(cfg Config) (*Partition, error) {
	switch {
	case cfg.ID == 0:
		cfg.ID = n.id
	case cfg.ID != n.id:
		return nil, fmt.Errorf("%w: ID is %d on node %d", ErrInvalidConfig, cfg.ID, n.id)
	}
	i, found := n.find(cfg.Topic, cfg.Partition)
	if found {
		return nil, fmt.Errorf("%w: node %d already has %s-%d", ErrInvalidConfig, n.id, cfg.Topic, cfg.Partition)
	}
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	p.brokerEpoch = n.brokerEpoch
	n.parts = slices.Insert(n.parts, i, p)
	return p, nil
}

// Partition returns one of the node's partitions, or nil.
func (n *Node) Partition(topic string, partition int32) *Partition {
	if i, found := n.find(topic, partition); found {
		return n.parts[i]
	}
	return nil
}

// Remove takes a partition off the node (Kafka's StopReplica), and
// reports whether it had it. What the partition had not handed out is
// dropped; produces waiting on it get no result, so stop it as a replica
// (a LeaderAndISR without this node) first.
func (n *Node) Remove(topic string, partition int32) bool {
	i, found := n.find(topic, partition)
	if found {
		n.parts = slices.Delete(n.parts, i, i+1)
	}
	return found
}

// Step hands the node a message: a Batch is unpacked and each message in
// it stepped in order; any other goes to the partition it names. The
// errors of a Batch's messages are joined; each message that fails
// changes nothing, and the others are still stepped.
func (n *Node) Step(m Message) error {
	b, ok := m.(*Envelope)
	if !ok {
		return n.stepOne(m)
	}
	if b.To != n.id {
		return fmt.Errorf("%w: envelope for node %d stepped on node %d", ErrInvalidMessage, b.To, n.id)
	}
	var errs []error
	for _, m := range b.Messages {
		if m == nil {
			errs = append(errs, fmt.Errorf("%w: nil message in an envelope", ErrInvalidMessage))
			continue
		}
		if h := m.Head(); h.From != b.From || h.To != b.To {
			errs = append(errs, fmt.Errorf("%w: message %d->%d in an envelope %d->%d", ErrInvalidMessage, h.From, h.To, b.From, b.To))
			continue
		}
		errs = append(errs, n.stepOne(m))
	}
	return errors.Join(errs...)
}

func (n *Node) stepOne(m Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	h := m.Head()
	p := n.Partition(h.Topic, h.Partition)
	if p == nil {
		return fmt.Errorf("%w: node %d has no %s-%d", ErrUnknownTopicOrPartition, n.id, h.Topic, h.Partition)
	}
	return p.Step(m)
}

// Tick ticks every partition.
func (n *Node) Tick() {
	for _, p := range n.parts {
		p.Tick()
	}
}

// HasReady reports whether a partition has something to do.
func (n *Node) HasReady() bool {
	return slices.ContainsFunc(n.parts, (*Partition).HasReady)
}

// NodeReady is what the application must do for a node: each partition's
// Ready, whose Writes go to that partition's log (in order, on any
// goroutine, one partition independent of the others) and which is then
// advanced with Partition.Advance; and the partitions' messages, one
// Batch per destination, and produce results, to send at once.
type NodeReady struct {
	Partitions []PartitionReady
	Messages   []Message
	Results    []ProduceResult
}

// PartitionReady is one partition's part of a NodeReady.
type PartitionReady struct {
	Partition *Partition
	Ready     Ready
}

// Ready gathers the partitions' Readies.
func (n *Node) Ready() NodeReady {
	var rd NodeReady
	envelopes := map[NodeID]*Envelope{}
	var order []NodeID
	for _, p := range n.parts {
		if !p.HasReady() {
			continue
		}
		prd := p.Ready()
		for _, m := range prd.Messages {
			to := m.Head().To
			b, ok := envelopes[to]
			if !ok {
				b = &Envelope{Header: Header{From: n.id, To: to}}
				envelopes[to] = b
				order = append(order, to)
			}
			b.Messages = append(b.Messages, m)
		}
		rd.Results = append(rd.Results, prd.Results...)
		prd.Messages, prd.Results = nil, nil
		rd.Partitions = append(rd.Partitions, PartitionReady{Partition: p, Ready: prd})
	}
	for _, to := range order {
		rd.Messages = append(rd.Messages, envelopes[to])
	}
	return rd
}

// Advance advances every partition of rd, for an application that applied
// all of rd's writes.
func (n *Node) Advance(rd NodeReady) error {
	var errs []error
	for _, pr := range rd.Partitions {
		errs = append(errs, pr.Partition.Advance(pr.Ready))
	}
	return errors.Join(errs...)
}

// Envelope carries several messages from one node to another in one, each
// with the same From and To. It is what a Node sends.
type Envelope struct {
	Header
	Messages []Message
}
