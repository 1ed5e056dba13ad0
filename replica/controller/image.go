package controller

import (
	"cmp"
	"maps"
	"slices"

	"github.com/strandlog/strand/replica"
)

// Records writes the state as records that replay to it (Kafka's metadata
// image written as a snapshot): the controller, each broker registered in
// epoch order with its offline replicas, then unfenced or shutting down as
// it is, each topic with its configs, each partition whole, at its
// epochs, the SCRAM credentials by user and mechanism, and the ACLs in
// the order created. An application that keeps the records in a log can
// store these instead of the log's prefix, and replaying them and the
// records that follow gives the same state as the whole log.
func (s *State) Records() []Record {
	if s.Epoch < 0 {
		return nil // no controller was ever active: no record applied
	}
	stamp := Stamp{s.Epoch}
	// The controller record names no node: which node ran it is not state.
	records := []Record{&ControllerRecord{Stamp: stamp, Node: replica.NoNode}}
	brokers := slices.SortedFunc(maps.Values(s.Brokers), func(a, b *Broker) int { return cmp.Compare(a.Epoch, b.Epoch) })
	for _, b := range brokers {
		records = append(records, &RegisterRecord{Stamp: stamp, Broker: b.ID, BrokerEpoch: b.Epoch, Incarnation: b.Incarnation,
			Clean: b.Clean, Offline: b.Offline})
		if !b.Fenced {
			records = append(records, &UnfenceRecord{Stamp: stamp, Broker: b.ID, BrokerEpoch: b.Epoch})
		}
		if b.ShuttingDown {
			records = append(records, &ShutdownRecord{Stamp: stamp, Broker: b.ID, BrokerEpoch: b.Epoch})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Topics)) {
		t := s.Topics[name]
		records = append(records, &TopicRecord{Stamp: stamp, Name: t.Name, ID: t.ID, Partitions: t.Partitions, Unclean: t.Unclean})
		for _, n := range slices.Sorted(maps.Keys(t.Configs)) {
			v := t.Configs[n]
			records = append(records, &ConfigRecord{Stamp: stamp, Topic: t.Name, Name: n, Value: &v})
		}
	}
	for _, tp := range slices.SortedFunc(maps.Keys(s.Partitions), compareTP) {
		p := s.Partitions[tp]
		records = append(records, &PartitionRecord{Stamp: stamp, Topic: tp.Topic, Partition: tp.Partition,
			Replicas: p.Replicas, ISR: p.ISR, ELR: p.ELR, Adding: p.Adding, Removing: p.Removing,
			Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
			Recovering: p.Recovering, LastLeader: p.LastLeader})
	}
	for _, user := range slices.Sorted(maps.Keys(s.Credentials)) {
		for _, m := range slices.Sorted(maps.Keys(s.Credentials[user])) {
			records = append(records, &ScramCredentialRecord{Stamp: stamp, ScramCredential: s.Credentials[user][m]})
		}
	}
	for _, a := range s.ACLs {
		records = append(records, &ACLRecord{Stamp: stamp, ACL: a})
	}
	return records
}
