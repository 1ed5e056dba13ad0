package group

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
)

// The records of KIP-848 consumer groups (key versions 3-8), with the layout
// of Kafka's group-coordinator/src/main/resources/common/message/
// ConsumerGroup*{Key,Value}.json as of Kafka 3.9/4.0:
//
//	3 ConsumerGroupMetadata             {group}         {epoch}
//	4 ConsumerGroupPartitionMetadata    {group}         {epoch, topics[id, name, partitions, racks[]]}
//	5 ConsumerGroupMemberMetadata       {group, member} {instance, rack, client, host, topics, regex, rebalance timeout, assignor}
//	6 ConsumerGroupTargetAssignmentMetadata {group}     {assignment epoch}
//	7 ConsumerGroupTargetAssignmentMember   {group, member} {partitions[id, partitions]}
//	8 ConsumerGroupCurrentMemberAssignment  {group, member} {epoch, previous epoch, state, assigned[], pending revocation[]}
//
// Keys are the int16 record type and a non-flexible struct of strings, as
// the classic keys are. Values are version 0, which is flexible: compact
// strings and arrays, 16-byte Uuids and a tagged field section after every
// struct. franz-go's kmsg (v1.15.1, the newest) has no types for these
// records, so TestConsumerRecordBytes holds bytes worked out by hand from
// the schemas. Of the tagged fields, ClassicMemberMetadata (tag 0 of a
// member's subscription, a member of a consumer group that speaks the
// classic protocol) is written and read; those later Kafka versions added
// (MetadataHash, AssignmentEpochs) are not written and are skipped when
// read.
//
// Strand's Dir has no topic ids. Records carry TopicID(name), which is the
// id assign.Uniform uses for a topic without one; a record is read back by
// hashing the topic names the coordinator knows (Coordinator.LearnTopics).

// Record types (key versions) of consumer groups.
const (
	ConsumerGroupMetadataType             = 3
	ConsumerGroupPartitionMetadataType    = 4
	ConsumerGroupMemberMetadataType       = 5
	ConsumerGroupTargetAssignmentMetaType = 6
	ConsumerGroupTargetAssignmentType     = 7
	ConsumerGroupCurrentAssignmentType    = 8
)

// TopicID returns the id Strand gives a topic in the records of consumer
// groups: the first 16 bytes of the FNV-1a 128-bit hash of its name, the id
// assign.Uniform derives for a topic whose ID is zero. Kafka takes ids from
// its cluster metadata; a Dir has none, and a stable id derived from the
// name keeps the records the same across restarts.
func TopicID(name string) [16]byte {
	h := fnv.New128a()
	h.Write([]byte(name))
	var id [16]byte
	copy(id[:], h.Sum(nil))
	return id
}

// ConsumerGroupKey is the key of a consumer group record: its Type (3-8),
// the group and, for types 5, 7 and 8, the member.
type ConsumerGroupKey struct {
	Type   int16
	Group  string
	Member string
}

// ConsumerGroupMetadataValue is a consumer group's epoch (type 3).
type ConsumerGroupMetadataValue struct {
	Epoch int32
}

// ConsumerGroupPartitionMetadataValue is the metadata of the topics a
// consumer group subscribes to, as of its group epoch (type 4).
type ConsumerGroupPartitionMetadataValue struct {
	Epoch  int32
	Topics []ConsumerTopicMetadata
}

// ConsumerTopicMetadata is one subscribed topic. Strand writes no racks.
type ConsumerTopicMetadata struct {
	ID         [16]byte
	Name       string
	Partitions int32
}

// ConsumerGroupMemberMetadataValue is a member's subscription (type 5);
// "" stands for null in the nullable strings.
type ConsumerGroupMemberMetadataValue struct {
	InstanceID         string
	RackID             string
	ClientID           string
	ClientHost         string
	SubscribedTopics   []string
	SubscribedRegex    string
	RebalanceTimeoutMs int32
	ServerAssignor     string
	// Classic is set for a member that speaks the classic protocol
	// (JoinGroup, SyncGroup, Heartbeat) to a consumer group.
	Classic *ClassicMemberMetadata
}

// ClassicMemberMetadata is what a consumer group keeps of a member that
// speaks the classic protocol: its session timeout and the protocols of its
// last JoinGroup.
type ClassicMemberMetadata struct {
	SessionTimeoutMs   int32
	SupportedProtocols []Protocol
}

// ConsumerGroupTargetAssignmentMetadataValue is the epoch of a consumer
// group's target assignment (type 6).
type ConsumerGroupTargetAssignmentMetadataValue struct {
	AssignmentEpoch int32
}

// ConsumerGroupTargetAssignmentMemberValue is a member's target assignment
// (type 7).
type ConsumerGroupTargetAssignmentMemberValue struct {
	Partitions []TopicIDPartitions
}

// ConsumerGroupCurrentMemberAssignmentValue is where a member stands in its
// reconciliation (type 8). State is Kafka's MemberState: 0 STABLE, 1
// UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS.
type ConsumerGroupCurrentMemberAssignmentValue struct {
	MemberEpoch         int32
	PreviousMemberEpoch int32
	State               int8
	Assigned            []TopicIDPartitions
	PendingRevocation   []TopicIDPartitions
}

// TopicIDPartitions are partitions of the topic with that id, ascending.
type TopicIDPartitions struct {
	TopicID    [16]byte
	Partitions []int32
}

// EncodeConsumerGroup returns the record of key k with value v, one of the
// ConsumerGroup*Value types matching k.Type, or the tombstone of k if v is
// nil.
func EncodeConsumerGroup(k ConsumerGroupKey, v any) Record {
	w := writer{}
	w.int16(k.Type)
	w.string(k.Group)
	if k.hasMember() {
		w.string(k.Member)
	}
	r := Record{Key: w.b}
	if v != nil {
		r.Value = encodeConsumerValue(v)
	}
	return r
}

func (k ConsumerGroupKey) hasMember() bool {
	switch k.Type {
	case ConsumerGroupMemberMetadataType, ConsumerGroupTargetAssignmentType, ConsumerGroupCurrentAssignmentType:
		return true
	}
	return false
}

func encodeConsumerValue(v any) []byte {
	w := writer{flexible: true}
	w.int16(0)
	switch v := v.(type) {
	case ConsumerGroupMetadataValue:
		w.int32(v.Epoch)
	case ConsumerGroupPartitionMetadataValue:
		w.int32(v.Epoch)
		w.arrayLen(len(v.Topics))
		for _, t := range v.Topics {
			w.b = append(w.b, t.ID[:]...)
			w.string(t.Name)
			w.int32(t.Partitions)
			w.arrayLen(0) // PartitionRacks
			w.tags()
		}
	case ConsumerGroupMemberMetadataValue:
		w.nullableString(v.InstanceID)
		w.nullableString(v.RackID)
		w.string(v.ClientID)
		w.string(v.ClientHost)
		w.arrayLen(len(v.SubscribedTopics))
		for _, t := range v.SubscribedTopics {
			w.string(t)
		}
		w.nullableString(v.SubscribedRegex)
		w.int32(v.RebalanceTimeoutMs)
		w.nullableString(v.ServerAssignor)
		if v.Classic != nil {
			writeClassicMemberTag(&w, v.Classic)
			return w.b
		}
	case ConsumerGroupTargetAssignmentMetadataValue:
		w.int32(v.AssignmentEpoch)
	case ConsumerGroupTargetAssignmentMemberValue:
		writeTopicIDPartitions(&w, v.Partitions)
	case ConsumerGroupCurrentMemberAssignmentValue:
		w.int32(v.MemberEpoch)
		w.int32(v.PreviousMemberEpoch)
		w.b = append(w.b, byte(v.State))
		writeTopicIDPartitions(&w, v.Assigned)
		writeTopicIDPartitions(&w, v.PendingRevocation)
	default:
		panic(fmt.Sprintf("group: %T is not a consumer group record value", v))
	}
	w.tags()
	return w.b
}

func writeTopicIDPartitions(w *writer, ts []TopicIDPartitions) {
	w.arrayLen(len(ts))
	for _, t := range ts {
		w.b = append(w.b, t.TopicID[:]...)
		w.arrayLen(len(t.Partitions))
		for _, p := range t.Partitions {
			w.int32(p)
		}
		w.tags()
	}
}

// decodeConsumerGroup decodes a record of types 3-8 whose key version kr
// has read.
func decodeConsumerGroup(d *Decoded, kr *reader, r Record) error {
	k := ConsumerGroupKey{Type: d.KeyVersion, Group: kr.string()}
	if k.hasMember() {
		k.Member = kr.string()
	}
	if err := kr.done(); err != nil {
		return corrupt("consumer group key", err)
	}
	d.ConsumerKey = &k
	if r.Value == nil {
		return nil
	}
	vr := reader{b: r.Value, flexible: true}
	d.ValueVersion = vr.int16()
	if vr.err == nil && d.ValueVersion != 0 {
		return corrupt("consumer group value", fmt.Errorf("value version %d of record type %d, want 0", d.ValueVersion, k.Type))
	}
	var v any
	switch k.Type {
	case ConsumerGroupMetadataType:
		v = ConsumerGroupMetadataValue{Epoch: vr.int32()}
	case ConsumerGroupPartitionMetadataType:
		pm := ConsumerGroupPartitionMetadataValue{Epoch: vr.int32()}
		for n := vr.arrayLen(); n > 0 && vr.err == nil; n-- {
			t := ConsumerTopicMetadata{ID: vr.uuid(), Name: vr.string(), Partitions: vr.int32()}
			for racks := vr.arrayLen(); racks > 0 && vr.err == nil; racks-- {
				vr.int32()
				for m := vr.arrayLen(); m > 0; m-- {
					vr.string()
				}
				vr.tags()
			}
			vr.tags()
			pm.Topics = append(pm.Topics, t)
		}
		v = pm
	case ConsumerGroupMemberMetadataType:
		mm := ConsumerGroupMemberMetadataValue{InstanceID: vr.string(), RackID: vr.string(), ClientID: vr.string(), ClientHost: vr.string()}
		for n := vr.arrayLen(); n > 0; n-- {
			mm.SubscribedTopics = append(mm.SubscribedTopics, vr.string())
		}
		mm.SubscribedRegex = vr.string()
		mm.RebalanceTimeoutMs = vr.int32()
		mm.ServerAssignor = vr.string()
		mm.Classic = readClassicMemberTag(&vr)
		if err := vr.done(); err != nil {
			return corrupt("consumer group member metadata value", err)
		}
		d.ConsumerValue = mm
		return nil
	case ConsumerGroupTargetAssignmentMetaType:
		v = ConsumerGroupTargetAssignmentMetadataValue{AssignmentEpoch: vr.int32()}
	case ConsumerGroupTargetAssignmentType:
		v = ConsumerGroupTargetAssignmentMemberValue{Partitions: readTopicIDPartitions(&vr)}
	case ConsumerGroupCurrentAssignmentType:
		ca := ConsumerGroupCurrentMemberAssignmentValue{MemberEpoch: vr.int32(), PreviousMemberEpoch: vr.int32()}
		if b := vr.take(1); b != nil {
			ca.State = int8(b[0])
		}
		ca.Assigned = readTopicIDPartitions(&vr)
		ca.PendingRevocation = readTopicIDPartitions(&vr)
		v = ca
	}
	vr.tags()
	if err := vr.done(); err != nil {
		return corrupt(fmt.Sprintf("consumer group value of record type %d", k.Type), err)
	}
	d.ConsumerValue = v
	return nil
}

func readTopicIDPartitions(r *reader) []TopicIDPartitions {
	var out []TopicIDPartitions
	for n := r.arrayLen(); n > 0 && r.err == nil; n-- {
		t := TopicIDPartitions{TopicID: r.uuid()}
		for m := r.arrayLen(); m > 0; m-- {
			t.Partitions = append(t.Partitions, r.int32())
		}
		r.tags()
		out = append(out, t)
	}
	return out
}

func (r *reader) uuid() [16]byte {
	var id [16]byte
	copy(id[:], r.take(16))
	return id
}

// topicIDPartitions turns partitions by topic name into records' form,
// topics in name order.
func topicIDPartitions(p partitions) []TopicIDPartitions {
	out := make([]TopicIDPartitions, 0, len(p))
	for _, t := range slices.Sorted(maps.Keys(p)) {
		out = append(out, TopicIDPartitions{TopicID: TopicID(t), Partitions: slices.Clone(p[t])})
	}
	return out
}

// writeClassicMemberTag ends a member's subscription with its tagged
// fields: one, ClassicMemberMetadata (tag 0), a nullable struct, which
// Kafka writes as its size, a presence byte 1 and the struct.
func writeClassicMemberTag(w *writer, m *ClassicMemberMetadata) {
	s := writer{flexible: true}
	s.b = append(s.b, 1)
	s.int32(m.SessionTimeoutMs)
	s.arrayLen(len(m.SupportedProtocols))
	for _, p := range m.SupportedProtocols {
		s.string(p.Name)
		s.bytes(p.Metadata)
		s.tags()
	}
	s.tags()
	w.b = binary.AppendUvarint(w.b, 1) // one tagged field
	w.b = binary.AppendUvarint(w.b, 0) // its tag
	w.b = binary.AppendUvarint(w.b, uint64(len(s.b)))
	w.b = append(w.b, s.b...)
}

// readClassicMemberTag reads a member's subscription's tagged fields,
// returning ClassicMemberMetadata if tag 0 holds it and skipping others.
func readClassicMemberTag(r *reader) *ClassicMemberMetadata {
	var out *ClassicMemberMetadata
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		tag, size := r.uvarint(), r.uvarint()
		if size > uint64(len(r.b)) {
			r.err = errShort
			return nil
		}
		data := r.take(int(size))
		if tag != 0 || len(data) == 0 || data[0] == 0 {
			continue
		}
		s := reader{b: data[1:], flexible: true}
		m := &ClassicMemberMetadata{SessionTimeoutMs: s.int32()}
		for k := s.arrayLen(); k > 0 && s.err == nil; k-- {
			m.SupportedProtocols = append(m.SupportedProtocols, Protocol{Name: s.string(), Metadata: s.bytes()})
			s.tags()
		}
		s.tags()
		if err := s.done(); err != nil {
			r.err = err
			return nil
		}
		out = m
	}
	return out
}
