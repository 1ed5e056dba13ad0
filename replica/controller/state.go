package controller

import (
	"fmt"
	"slices"

	"github.com/strandlog/strand"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
)

// State is the controller's durable state: what replaying its records
// gives. Its fields are read-only for users; Apply changes them.
type State struct {
	// Epoch is the epoch of the latest active controller.
	Epoch int32
	// LastBrokerEpoch is the highest broker epoch handed out; the next
	// registration gets a higher one.
	LastBrokerEpoch int64
	Brokers         map[replica.NodeID]*Broker
	Topics          map[string]*Topic
	Partitions      map[TopicPartition]*Partition
	// Credentials are the SCRAM credentials by user and mechanism
	// (ScramCredentialRecords), nil if none: what every broker of the
	// cluster authenticates by. A user without a credential has no entry.
	Credentials map[string]map[string]ScramCredential
	// ACLs are the ACLs in the order created (ACLRecords), a set, nil if
	// none: what every broker of the cluster authorizes by.
	ACLs []ACL
}

// Broker is a registered broker incarnation.
type Broker struct {
	ID    replica.NodeID
	Epoch int64
	// Incarnation is the start of the broker's process it registered
	// (Kafka's incarnation ID).
	Incarnation uint64
	// Fenced brokers are neither leaders nor ISR members.
	Fenced bool
	// ShuttingDown is a controlled shutdown in progress.
	ShuttingDown bool
	// Clean says the incarnation registered after a clean shutdown.
	Clean bool
	// Offline are the broker's replicas whose logs failed, in order, nil
	// if none (KIP-858's offline log directories, per replica): in no ISR
	// or ELR, never elected.
	Offline []TopicPartition
}

// offline says whether the broker's replica of tp is offline.
func (b *Broker) offline(tp TopicPartition) bool {
	_, found := slices.BinarySearchFunc(b.Offline, tp, compareTP)
	return found
}

// Topic is a topic's configuration.
type Topic struct {
	Name string
	// ID is the topic's id (KIP-516).
	ID         [16]byte
	Partitions int32
	Unclean    bool
	// Configs are the configs set on the topic, by Kafka's names
	// (ConfigRecords), nil if none; the others have their defaults.
	Configs map[string]string
}

// TopicPartition names a partition.
type TopicPartition = strand.TopicPartition

// LeaderAndISR is a partition's state as a message from the controller on
// node from to one of its replicas, addressed to the broker epoch the
// replica is registered in (KIP-380): what the controller sends on every
// change, and what an application sends a broker that catches up (as
// Kafka's brokers read the metadata log). It is nil for a partition the
// state does not have.
func (s *State) LeaderAndISR(tp TopicPartition, from, to replica.NodeID) *replica.LeaderAndISR {
	p := s.Partitions[tp]
	if p == nil {
		return nil
	}
	m := &replica.LeaderAndISR{
		Header:          replica.Header{From: from, To: to, Topic: tp.Topic, Partition: tp.Partition},
		ControllerEpoch: s.Epoch, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
		PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, ISR: p.ISR,
		Adding: p.Adding, Removing: p.Removing,
	}
	if b := s.Brokers[to]; b != nil {
		m.BrokerEpoch = b.Epoch
	}
	return m
}

// Partition is a partition's replication state as the controller decided
// it. ISR and ELR never share a member; both are within Replicas.
// During a reassignment Replicas holds the target replicas first, then
// the ones being removed; Adding and Removing say which are which.
type Partition struct {
	Replicas       []replica.NodeID
	ISR            []replica.NodeID
	ELR            []replica.NodeID
	Adding         []replica.NodeID
	Removing       []replica.NodeID
	Leader         replica.NodeID
	LeaderEpoch    int32
	PartitionEpoch int32
	Recovering     bool
	// LastLeader is the leader the partition had when it lost it (KIP-966's
	// last known leader), NoNode while it has one: the replica an unclean
	// election prefers.
	LastLeader replica.NodeID
}

// NewState returns the state before any record.
func NewState() *State {
	return &State{
		Epoch:      -1,
		Brokers:    map[replica.NodeID]*Broker{},
		Topics:     map[string]*Topic{},
		Partitions: map[TopicPartition]*Partition{},
	}
}

// Replay returns the state the records give, or the first record's error.
func Replay(records []Record) (*State, error) {
	s := NewState()
	for i, r := range records {
		if err := s.Apply(r); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return s, nil
}

// Apply applies one record. A record that does not follow from the state
// (a stale controller's, a broker epoch going back, a partition epoch that
// is not the next) is refused with an error and changes nothing.
func (s *State) Apply(r Record) error {
	if _, ok := r.(*ControllerRecord); !ok && r.ControllerEpoch() != s.Epoch {
		if r.ControllerEpoch() < s.Epoch {
			return fmt.Errorf("%w: a record of controller epoch %d, the active controller's is %d",
				replica.ErrStaleControllerEpoch, r.ControllerEpoch(), s.Epoch)
		}
		return fmt.Errorf("%w: a record of controller epoch %d, which never became active (latest %d)",
			ErrInvalidRecord, r.ControllerEpoch(), s.Epoch)
	}
	return r.apply(s)
}

func (r *ControllerRecord) apply(s *State) error {
	if r.Epoch <= s.Epoch {
		return fmt.Errorf("%w: controller epoch %d does not follow %d", replica.ErrStaleControllerEpoch, r.Epoch, s.Epoch)
	}
	s.Epoch = r.Epoch
	return nil
}

func (r *RegisterRecord) apply(s *State) error {
	if r.BrokerEpoch <= s.LastBrokerEpoch {
		return fmt.Errorf("%w: broker %d registered with epoch %d, not above %d",
			replica.ErrStaleBrokerEpoch, r.Broker, r.BrokerEpoch, s.LastBrokerEpoch)
	}
	if b := s.Brokers[r.Broker]; b != nil && !b.Fenced {
		return fmt.Errorf("%w: broker %d registered again while its epoch %d is unfenced",
			ErrInvalidRecord, r.Broker, b.Epoch)
	}
	if b := s.Brokers[r.Broker]; b != nil && r.Incarnation <= b.Incarnation {
		return fmt.Errorf("%w: broker %d registered in incarnation %d, not after %d",
			replica.ErrStaleBrokerEpoch, r.Broker, r.Incarnation, b.Incarnation)
	}
	s.LastBrokerEpoch = r.BrokerEpoch
	s.Brokers[r.Broker] = &Broker{ID: r.Broker, Epoch: r.BrokerEpoch, Incarnation: r.Incarnation, Fenced: true, Clean: r.Clean,
		Offline: partitionSet(r.Offline)}
	return nil
}

func (r *OfflineRecord) apply(s *State) error {
	b, err := s.broker(r.Broker, r.BrokerEpoch)
	if err != nil {
		return err
	}
	b.Offline = partitionSet(r.Offline)
	return nil
}

// broker returns the broker an epoch-carrying record is about.
func (s *State) broker(id replica.NodeID, epoch int64) (*Broker, error) {
	b := s.Brokers[id]
	if b == nil {
		return nil, fmt.Errorf("%w: broker %d", replica.ErrBrokerIDNotRegistered, id)
	}
	if b.Epoch != epoch {
		return nil, fmt.Errorf("%w: broker %d epoch %d, registered %d", replica.ErrStaleBrokerEpoch, id, epoch, b.Epoch)
	}
	return b, nil
}

func (r *FenceRecord) apply(s *State) error {
	b, err := s.broker(r.Broker, r.BrokerEpoch)
	if err != nil {
		return err
	}
	b.Fenced, b.ShuttingDown = true, false
	return nil
}

func (r *UnfenceRecord) apply(s *State) error {
	b, err := s.broker(r.Broker, r.BrokerEpoch)
	if err != nil {
		return err
	}
	b.Fenced = false
	return nil
}

func (r *ShutdownRecord) apply(s *State) error {
	b, err := s.broker(r.Broker, r.BrokerEpoch)
	if err != nil {
		return err
	}
	b.ShuttingDown = true
	return nil
}

func (r *TopicRecord) apply(s *State) error {
	if r.Name == "" || r.Partitions <= 0 {
		return fmt.Errorf("%w: topic %q with %d partitions", ErrInvalidRecord, r.Name, r.Partitions)
	}
	t := s.Topics[r.Name]
	if t == nil {
		s.Topics[r.Name] = &Topic{Name: r.Name, ID: r.ID, Partitions: r.Partitions, Unclean: r.Unclean}
		return nil
	}
	if t.Partitions != r.Partitions || t.ID != r.ID {
		return fmt.Errorf("%w: topic %q has %d partitions and id %x, the record says %d and %x",
			ErrInvalidRecord, r.Name, t.Partitions, t.ID, r.Partitions, r.ID)
	}
	t.Unclean = r.Unclean
	return nil
}

// apply sets or removes a topic's config, as Kafka's
// ConfigurationControlManager.replay does. The value is checked as the
// controller checked it before writing the record (validConfig), so that
// a state never holds a config its rules cannot read.
func (r *ConfigRecord) apply(s *State) error {
	t := s.Topics[r.Topic]
	if t == nil {
		return fmt.Errorf("%w: config %s of topic %q", replica.ErrUnknownTopicOrPartition, r.Name, r.Topic)
	}
	if r.Value == nil {
		delete(t.Configs, r.Name)
		if len(t.Configs) == 0 {
			t.Configs = nil
		}
		return nil
	}
	if err := validConfig(r.Topic, r.Name, *r.Value); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	t.Configs[r.Name] = *r.Value
	return nil
}

// apply deletes the topic, its partitions and its configs (Kafka's
// ReplicationControlManager.replay of a RemoveTopicRecord, and
// ConfigurationControlManager.deleteTopicConfigs).
func (r *RemoveTopicRecord) apply(s *State) error {
	t := s.Topics[r.Topic]
	if t == nil || t.ID != r.ID {
		return fmt.Errorf("%w: no topic %q with id %x", replica.ErrUnknownTopicOrPartition, r.Topic, r.ID)
	}
	for p := range t.Partitions {
		delete(s.Partitions, TopicPartition{Topic: r.Topic, Partition: p})
	}
	// A topic created again under the name has new replicas, none offline.
	for _, b := range s.Brokers {
		b.Offline = partitionSet(slices.DeleteFunc(slices.Clone(b.Offline), func(tp TopicPartition) bool { return tp.Topic == r.Topic }))
	}
	delete(s.Topics, r.Topic)
	return nil
}

// apply sets a user's credential for a mechanism, as Kafka's
// ScramControlManager.replay of a UserScramCredentialRecord does. The
// credential is checked as the controller checked it before writing the
// record, so that a state never holds one no client could prove; the
// state keeps bytes of its own, the record's being its writer's.
func (r *ScramCredentialRecord) apply(s *State) error {
	if err := r.check("the record"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	if s.Credentials == nil {
		s.Credentials = map[string]map[string]ScramCredential{}
	}
	if s.Credentials[r.User] == nil {
		s.Credentials[r.User] = map[string]ScramCredential{}
	}
	s.Credentials[r.User][r.Mechanism] = r.clone()
	return nil
}

// apply removes a user's credential for a mechanism, and the user's entry
// with its last. One not there is an error, as in Kafka's
// ScramControlManager.replay: the controller removes only what it has.
func (r *RemoveScramCredentialRecord) apply(s *State) error {
	ms := s.Credentials[r.User]
	if _, ok := ms[r.Mechanism]; !ok {
		return fmt.Errorf("%w: the record removes user %q's %s credential, which the state does not have",
			kafkaerr.ErrResourceNotFound, r.User, r.Mechanism)
	}
	delete(ms, r.Mechanism)
	if len(ms) == 0 {
		delete(s.Credentials, r.User)
	}
	if len(s.Credentials) == 0 {
		s.Credentials = nil
	}
	return nil
}

// apply adds an ACL, checked as the controller checked it (Kafka's
// AclControlManager.validateNewAcl), unless the state has it: ACLs are a
// set by value.
func (r *ACLRecord) apply(s *State) error {
	if err := r.check("the record"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	if !slices.Contains(s.ACLs, r.ACL) {
		s.ACLs = append(s.ACLs, r.ACL)
	}
	return nil
}

// apply removes an ACL, if the state has it, keeping the others' order.
// The ACL is checked too: the controller removes only ACLs it could have
// added.
func (r *RemoveACLRecord) apply(s *State) error {
	if err := r.check("the record"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	if i := slices.Index(s.ACLs, r.ACL); i >= 0 {
		// A copy: whoever holds the state's ACLs keeps what they were.
		s.ACLs = slices.Delete(slices.Clone(s.ACLs), i, i+1)
	}
	if len(s.ACLs) == 0 {
		s.ACLs = nil
	}
	return nil
}

func (r *PartitionRecord) apply(s *State) error {
	tp := TopicPartition{Topic: r.Topic, Partition: r.Partition}
	t := s.Topics[r.Topic]
	if t == nil || r.Partition < 0 || r.Partition >= t.Partitions {
		return fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	}
	// A partition the state does not know yet starts at the record's
	// epoch: 0 when a topic is created, any when Records writes an image.
	want := max(r.PartitionEpoch, 0)
	if p := s.Partitions[tp]; p != nil {
		want = p.PartitionEpoch + 1
	}
	if r.PartitionEpoch != want {
		return fmt.Errorf("%w: %v record of partition epoch %d, want %d",
			replica.ErrInvalidUpdateVersion, tp, r.PartitionEpoch, want)
	}
	p := &Partition{
		Replicas: set(r.Replicas), ISR: set(r.ISR), ELR: set(r.ELR),
		Adding: set(r.Adding), Removing: set(r.Removing),
		Leader: r.Leader, LeaderEpoch: r.LeaderEpoch, PartitionEpoch: r.PartitionEpoch,
		Recovering: r.Recovering, LastLeader: r.LastLeader,
	}
	if err := p.check(); err != nil {
		return fmt.Errorf("%w: %v: %v", ErrInvalidRecord, tp, err)
	}
	s.Partitions[tp] = p
	return nil
}

// check holds the invariants of Vanlightly's ValidControllerIsrAndElr: ISR
// and ELR within the replicas, disjoint, without duplicates; the leader in
// the ISR; a recovering ISR is only its leader.
func (p *Partition) check() error {
	if len(p.Replicas) == 0 || hasDuplicate(p.Replicas) {
		return fmt.Errorf("replicas %v empty or with a duplicate", p.Replicas)
	}
	for _, set := range [][]replica.NodeID{p.ISR, p.ELR, p.Adding, p.Removing} {
		if hasDuplicate(set) || !subset(set, p.Replicas) {
			return fmt.Errorf("ISR %v, ELR %v, adding %v or removing %v not a set within the replicas %v",
				p.ISR, p.ELR, p.Adding, p.Removing, p.Replicas)
		}
	}
	for _, n := range p.Adding {
		if slices.Contains(p.Removing, n) {
			return fmt.Errorf("node %d both added and removed", n)
		}
	}
	for _, n := range p.ELR {
		if slices.Contains(p.ISR, n) {
			return fmt.Errorf("node %d in both ISR %v and ELR %v", n, p.ISR, p.ELR)
		}
	}
	if p.Leader != replica.NoNode && !slices.Contains(p.ISR, p.Leader) {
		return fmt.Errorf("leader %d not in the ISR %v", p.Leader, p.ISR)
	}
	if p.LastLeader != replica.NoNode && (p.Leader != replica.NoNode || !slices.Contains(p.Replicas, p.LastLeader)) {
		return fmt.Errorf("last leader %d with leader %d, or outside the replicas %v", p.LastLeader, p.Leader, p.Replicas)
	}
	if p.Recovering && len(p.ISR) > 1 {
		return fmt.Errorf("recovering with ISR %v", p.ISR)
	}
	return nil
}

// set copies a node list, empty as nil, so that a replayed state equals
// the live one whatever the encoding makes of empty lists.
func set(ns []replica.NodeID) []replica.NodeID {
	if len(ns) == 0 {
		return nil
	}
	return slices.Clone(ns)
}

// partitionSet copies a list of partitions sorted and without duplicates,
// empty as nil, as set does nodes.
func partitionSet(tps []TopicPartition) []TopicPartition {
	if len(tps) == 0 {
		return nil
	}
	return slices.Compact(slices.SortedFunc(slices.Values(tps), compareTP))
}

func hasDuplicate(ns []replica.NodeID) bool {
	for i, n := range ns {
		if slices.Contains(ns[:i], n) {
			return true
		}
	}
	return false
}

func subset(a, b []replica.NodeID) bool {
	for _, n := range a {
		if !slices.Contains(b, n) {
			return false
		}
	}
	return true
}
