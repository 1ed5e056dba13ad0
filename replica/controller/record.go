package controller

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/strandlog/strand/replica"
)

// Record is one change of controller state. Applying records (State.Apply)
// is the only way the state changes, so that an application can keep the
// controller in any replicated store: whoever replays the same records has
// the same state.
//
// Every record carries the epoch of the controller that decided it; State
// refuses a record from a controller older than the one it last saw
// become active (replica.ErrStaleControllerEpoch).
type Record interface {
	// ControllerEpoch returns the epoch of the controller that wrote it.
	ControllerEpoch() int32
	// MarshalBinary encodes the record; DecodeRecord reads it back.
	MarshalBinary() ([]byte, error)
	kind() kind
	stamp() *Stamp
	fields(c codec)
	apply(s *State) error
}

// Stamp is the controller epoch every record carries.
type Stamp struct{ Epoch int32 }

// ControllerEpoch returns the epoch of the controller that wrote the record.
func (s *Stamp) ControllerEpoch() int32 { return s.Epoch }

func (s *Stamp) stamp() *Stamp { return s }

// ControllerRecord says that a controller became active in Epoch, which is
// higher than every earlier controller's: from then on records of earlier
// controllers are refused.
type ControllerRecord struct {
	Stamp
	// Node is the node the controller runs on (informational).
	Node replica.NodeID
}

// RegisterRecord registers a broker incarnation (Kafka's
// RegisterBrokerRecord). A registered broker is fenced until it heartbeats.
type RegisterRecord struct {
	Stamp
	Broker      replica.NodeID
	BrokerEpoch int64
	// Incarnation is the start of the broker's process that registered
	// (Kafka's incarnation ID); it increases with every start.
	Incarnation uint64
	// Clean says the broker's previous incarnation shut down cleanly. An
	// unclean one may have lost records it acknowledged, so it leaves every
	// ISR and ELR it was in (KIP-966's unclean exclusion), but for its
	// replicas of the Synced topics.
	Clean bool
	// Synced names the topics whose replicas on the broker acknowledged
	// only what they had synced (FsyncAlways, or replica.Config.
	// SyncedAcks), found in its data directory at the start: an unclean
	// shutdown lost nothing acknowledged from them, so they keep their
	// place in the ELR. It decided the registration's exclusions and is
	// not kept in the State; sorted, of topics the state had.
	Synced []string
	// Offline names the broker's replicas whose logs it could not open
	// (KIP-858's log directories missing from the registration's LogDirs).
	Offline []TopicPartition
}

// OfflineRecord replaces the set of a broker's replicas whose logs failed
// (Kafka's BrokerRegistrationChangeRecord, whose LogDirs KIP-858 shrinks
// when a broker reports a log directory offline). An offline replica is
// in no ISR or ELR and is never elected, even uncleanly; one that leaves
// the set is eligible again, and rejoins the ISR as any replica does.
type OfflineRecord struct {
	Stamp
	Broker      replica.NodeID
	BrokerEpoch int64
	Offline     []TopicPartition
}

// FenceRecord fences a broker: it missed its session or was replaced.
type FenceRecord struct {
	Stamp
	Broker      replica.NodeID
	BrokerEpoch int64
}

// UnfenceRecord unfences a broker that heartbeats.
type UnfenceRecord struct {
	Stamp
	Broker      replica.NodeID
	BrokerEpoch int64
}

// ShutdownRecord puts a broker in controlled shutdown: it is no longer a
// leader candidate nor an ISR member, and may stop once it leads nothing.
type ShutdownRecord struct {
	Stamp
	Broker      replica.NodeID
	BrokerEpoch int64
}

// TopicRecord creates a topic or changes whether it allows unclean
// elections.
type TopicRecord struct {
	Stamp
	Name string
	// ID is the topic's id (KIP-516, Kafka's TopicRecord.TopicId): a
	// topic deleted and created again under its name has another.
	ID         [16]byte
	Partitions int32
	// Unclean enables unclean leader election for the topic (Kafka's
	// unclean.leader.election.enable, false by default).
	Unclean bool
}

// PartitionRecord is a partition's whole state after a change (Kafka's
// PartitionRecord and PartitionChangeRecord in one). PartitionEpoch is one
// more than the partition's current epoch (0 for a new partition).
type PartitionRecord struct {
	Stamp
	Topic     string
	Partition int32
	Replicas  []replica.NodeID
	ISR       []replica.NodeID
	ELR       []replica.NodeID
	// Adding and Removing are a reassignment in progress: the replicas it
	// adds (in Replicas, catching up) and those it will remove.
	Adding         []replica.NodeID
	Removing       []replica.NodeID
	Leader         replica.NodeID
	LeaderEpoch    int32
	PartitionEpoch int32
	// Recovering is KIP-704's LeaderRecoveryState RECOVERING: the leader
	// was elected uncleanly and the ISR stays [leader] until it recovers.
	Recovering bool
	// LastLeader is KIP-966's last known leader: the leader a partition
	// had when it lost it, NoNode while it has one.
	LastLeader replica.NodeID
}

// ConfigRecord sets one config of a topic, by Kafka's name (Kafka's
// ConfigRecord with resource type TOPIC); a nil Value removes it, and the
// topic takes the default again.
type ConfigRecord struct {
	Stamp
	Topic string
	Name  string
	Value *string
}

// RemoveTopicRecord deletes a topic, its partitions and its configs
// (Kafka's RemoveTopicRecord). It names the topic's id too, so that it
// never removes a topic created again under the name.
type RemoveTopicRecord struct {
	Stamp
	Topic string
	ID    [16]byte
}

// ScramCredentialRecord sets a user's SCRAM credential for one mechanism
// (Kafka's UserScramCredentialRecord), in place of any it had.
type ScramCredentialRecord struct {
	Stamp
	ScramCredential
}

// RemoveScramCredentialRecord removes a user's SCRAM credential for one
// mechanism (Kafka's RemoveUserScramCredentialRecord); a user left with
// none has no entry in the state.
type RemoveScramCredentialRecord struct {
	Stamp
	ScramCredentialKey
}

// ACLRecord adds an ACL (Kafka's AccessControlEntryRecord). ACLs are
// named by their value, not by Kafka's random ids, so that the controller
// stays deterministic: one already there is not added again.
type ACLRecord struct {
	Stamp
	ACL
}

// RemoveACLRecord removes an ACL (Kafka's RemoveAccessControlEntryRecord),
// by its value; one not there is removed already.
type RemoveACLRecord struct {
	Stamp
	ACL
}

type kind uint8

const (
	kindController kind = iota + 1
	kindRegister
	kindFence
	kindUnfence
	kindShutdown
	kindTopic
	kindPartition
	kindConfig
	kindRemoveTopic
	kindOffline
	kindScramCredential
	kindRemoveScramCredential
	kindACL
	kindRemoveACL
)

func (*ControllerRecord) kind() kind  { return kindController }
func (*RegisterRecord) kind() kind    { return kindRegister }
func (*FenceRecord) kind() kind       { return kindFence }
func (*UnfenceRecord) kind() kind     { return kindUnfence }
func (*ShutdownRecord) kind() kind    { return kindShutdown }
func (*TopicRecord) kind() kind       { return kindTopic }
func (*PartitionRecord) kind() kind   { return kindPartition }
func (*ConfigRecord) kind() kind      { return kindConfig }
func (*RemoveTopicRecord) kind() kind { return kindRemoveTopic }
func (*OfflineRecord) kind() kind     { return kindOffline }

func (*ScramCredentialRecord) kind() kind       { return kindScramCredential }
func (*RemoveScramCredentialRecord) kind() kind { return kindRemoveScramCredential }
func (*ACLRecord) kind() kind                   { return kindACL }
func (*RemoveACLRecord) kind() kind             { return kindRemoveACL }

// The encoding: a kind byte, a version byte, the controller epoch,
// then the fields in order as zig-zag varints; strings and lists (of
// nodes, topics, or partitions as a topic and an index) and bytes are a
// length (uvarint) and their content; booleans a byte; a topic id its 16
// bytes; an optional string a flag byte, then the string if set. Each record
// lists its fields once (fields), for both directions, so encoder and
// decoder cannot disagree.

// recordVersion 1 added RegisterRecord's Incarnation, 2 PartitionRecord's
// LastLeader, 3 TopicRecord's ID, ConfigRecord and RemoveTopicRecord, 4
// RegisterRecord's Synced and Offline, and OfflineRecord. The kinds of
// credentials and ACLs came within version 4: they change no other
// record's layout, so the records stored before them still decode, and
// a decoder without them refuses their kind.
const recordVersion = 4

// Limits a decoded record must respect.
const (
	maxTopicBytes = 249 // Kafka's topic name limit, and that of a config's name
	maxNodes      = 1 << 12
	// maxReplicas bounds a list of topics or partitions of one broker.
	maxReplicas = 1 << 20
	// maxConfigValueBytes bounds a config's value (Kafka sets none; its
	// topic configs are numbers, booleans and short lists).
	maxConfigValueBytes = 1 << 15
	// maxSecurityBytes bounds a credential's user, salt and keys and an
	// ACL's resource name, principal and host: Kafka's STRING, whose
	// length is an int16 (a SHA-512 key is 64 bytes, a salt a few dozen).
	maxSecurityBytes = 1<<15 - 1
)

// ErrInvalidRecord means bytes that do not decode as a record.
var ErrInvalidRecord = errors.New("controller: invalid record")

type codec interface {
	u64(*uint64)
	i64(*int64)
	i32(*int32)
	i8(*int8)
	node(*replica.NodeID)
	nodes(*[]replica.NodeID)
	str(*string)
	// long is a string of up to maxSecurityBytes, blob bytes of as many.
	long(*string)
	blob(*[]byte)
	flag(*bool)
	id(*[16]byte)
	optional(**string)
	strs(*[]string)
	tps(*[]TopicPartition)
}

func (r *ControllerRecord) fields(c codec) { c.node(&r.Node) }
func (r *RegisterRecord) fields(c codec) {
	c.node(&r.Broker)
	c.i64(&r.BrokerEpoch)
	c.u64(&r.Incarnation)
	c.flag(&r.Clean)
	c.strs(&r.Synced)
	c.tps(&r.Offline)
}
func (r *FenceRecord) fields(c codec)    { c.node(&r.Broker); c.i64(&r.BrokerEpoch) }
func (r *UnfenceRecord) fields(c codec)  { c.node(&r.Broker); c.i64(&r.BrokerEpoch) }
func (r *ShutdownRecord) fields(c codec) { c.node(&r.Broker); c.i64(&r.BrokerEpoch) }
func (r *TopicRecord) fields(c codec) {
	c.str(&r.Name)
	c.id(&r.ID)
	c.i32(&r.Partitions)
	c.flag(&r.Unclean)
}
func (r *PartitionRecord) fields(c codec) {
	c.str(&r.Topic)
	c.i32(&r.Partition)
	c.nodes(&r.Replicas)
	c.nodes(&r.ISR)
	c.nodes(&r.ELR)
	c.nodes(&r.Adding)
	c.nodes(&r.Removing)
	c.node(&r.Leader)
	c.i32(&r.LeaderEpoch)
	c.i32(&r.PartitionEpoch)
	c.flag(&r.Recovering)
	c.node(&r.LastLeader)
}

func (r *ConfigRecord) fields(c codec)      { c.str(&r.Topic); c.str(&r.Name); c.optional(&r.Value) }
func (r *RemoveTopicRecord) fields(c codec) { c.str(&r.Topic); c.id(&r.ID) }
func (r *OfflineRecord) fields(c codec) {
	c.node(&r.Broker)
	c.i64(&r.BrokerEpoch)
	c.tps(&r.Offline)
}

func (r *ScramCredentialRecord) fields(c codec) {
	c.long(&r.User)
	c.str(&r.Mechanism)
	c.blob(&r.Salt)
	c.blob(&r.StoredKey)
	c.blob(&r.ServerKey)
	c.i32(&r.Iterations)
}
func (r *RemoveScramCredentialRecord) fields(c codec) { c.long(&r.User); c.str(&r.Mechanism) }
func (r *ACLRecord) fields(c codec)                   { aclFields(c, &r.ACL) }
func (r *RemoveACLRecord) fields(c codec)             { aclFields(c, &r.ACL) }

func aclFields(c codec, a *ACL) {
	c.i8(&a.ResourceType)
	c.long(&a.ResourceName)
	c.i8(&a.PatternType)
	c.long(&a.Principal)
	c.long(&a.Host)
	c.i8(&a.Operation)
	c.i8(&a.Permission)
}

func (r *ControllerRecord) MarshalBinary() ([]byte, error)  { return encode(r) }
func (r *RegisterRecord) MarshalBinary() ([]byte, error)    { return encode(r) }
func (r *FenceRecord) MarshalBinary() ([]byte, error)       { return encode(r) }
func (r *UnfenceRecord) MarshalBinary() ([]byte, error)     { return encode(r) }
func (r *ShutdownRecord) MarshalBinary() ([]byte, error)    { return encode(r) }
func (r *TopicRecord) MarshalBinary() ([]byte, error)       { return encode(r) }
func (r *PartitionRecord) MarshalBinary() ([]byte, error)   { return encode(r) }
func (r *ConfigRecord) MarshalBinary() ([]byte, error)      { return encode(r) }
func (r *RemoveTopicRecord) MarshalBinary() ([]byte, error) { return encode(r) }
func (r *OfflineRecord) MarshalBinary() ([]byte, error)     { return encode(r) }

func (r *ScramCredentialRecord) MarshalBinary() ([]byte, error)       { return encode(r) }
func (r *RemoveScramCredentialRecord) MarshalBinary() ([]byte, error) { return encode(r) }
func (r *ACLRecord) MarshalBinary() ([]byte, error)                   { return encode(r) }
func (r *RemoveACLRecord) MarshalBinary() ([]byte, error)             { return encode(r) }

type encoder struct {
	b   []byte
	err error
}

func (e *encoder) u64(v *uint64)          { e.b = binary.AppendUvarint(e.b, *v) }
func (e *encoder) i64(v *int64)           { e.b = binary.AppendVarint(e.b, *v) }
func (e *encoder) i32(v *int32)           { e.b = binary.AppendVarint(e.b, int64(*v)) }
func (e *encoder) i8(v *int8)             { e.b = binary.AppendVarint(e.b, int64(*v)) }
func (e *encoder) node(v *replica.NodeID) { e.b = binary.AppendVarint(e.b, int64(*v)) }
func (e *encoder) nodes(v *[]replica.NodeID) {
	if len(*v) > maxNodes && e.err == nil {
		e.err = fmt.Errorf("%w: %d nodes in a list, more than %d", ErrInvalidRecord, len(*v), maxNodes)
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(*v)))
	for i := range *v {
		e.node(&(*v)[i])
	}
}
func (e *encoder) str(v *string) { e.text(*v, maxTopicBytes) }
func (e *encoder) text(v string, max int) {
	if len(v) > max && e.err == nil {
		e.err = fmt.Errorf("%w: a name or value of %d bytes, more than %d", ErrInvalidRecord, len(v), max)
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}
func (e *encoder) long(v *string) { e.text(*v, maxSecurityBytes) }
func (e *encoder) blob(v *[]byte) {
	if len(*v) > maxSecurityBytes && e.err == nil {
		e.err = fmt.Errorf("%w: %d bytes of a salt or key, more than %d", ErrInvalidRecord, len(*v), maxSecurityBytes)
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(*v)))
	e.b = append(e.b, *v...)
}
func (e *encoder) id(v *[16]byte) { e.b = append(e.b, v[:]...) }
func (e *encoder) optional(v **string) {
	set := *v != nil
	e.flag(&set)
	if set {
		e.text(**v, maxConfigValueBytes)
	}
}
func (e *encoder) strs(v *[]string) {
	e.count(len(*v))
	for i := range *v {
		e.str(&(*v)[i])
	}
}
func (e *encoder) tps(v *[]TopicPartition) {
	e.count(len(*v))
	for i := range *v {
		e.str(&(*v)[i].Topic)
		e.i32(&(*v)[i].Partition)
	}
}
func (e *encoder) count(n int) {
	if n > maxReplicas && e.err == nil {
		e.err = fmt.Errorf("%w: %d topics or partitions in a list, more than %d", ErrInvalidRecord, n, maxReplicas)
	}
	e.b = binary.AppendUvarint(e.b, uint64(n))
}
func (e *encoder) flag(v *bool) {
	if *v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func encode(r Record) ([]byte, error) {
	e := &encoder{b: []byte{byte(r.kind()), recordVersion}}
	e.i32(&r.stamp().Epoch)
	r.fields(e)
	return e.b, e.err
}

type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrInvalidRecord, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) varint(min, max int64) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	if v < min || v > max {
		d.fail("value %d outside [%d, %d]", v, min, max)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) length(max int) int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("truncated or overlong length")
		return 0
	}
	if v > uint64(max) || v > uint64(len(d.b)-d.off-n) {
		d.fail("length %d beyond the limit %d or the input", v, max)
		return 0
	}
	d.off += n
	return int(v)
}

func (d *decoder) u64(v *uint64) {
	if d.err != nil {
		return
	}
	u, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("truncated or overlong unsigned varint")
		return
	}
	d.off += n
	*v = u
}
func (d *decoder) i64(v *int64) { *v = d.varint(-1<<63, 1<<63-1) }
func (d *decoder) i32(v *int32) { *v = int32(d.varint(-1<<31, 1<<31-1)) }
func (d *decoder) i8(v *int8)   { *v = int8(d.varint(-1<<7, 1<<7-1)) }
func (d *decoder) node(v *replica.NodeID) {
	*v = replica.NodeID(d.varint(-1<<31, 1<<31-1))
}
func (d *decoder) nodes(v *[]replica.NodeID) {
	n := d.length(maxNodes)
	if n == 0 {
		*v = nil
		return
	}
	*v = make([]replica.NodeID, n)
	for i := range *v {
		d.node(&(*v)[i])
	}
}
func (d *decoder) str(v *string) { *v = d.text(maxTopicBytes) }
func (d *decoder) text(max int) string {
	n := d.length(max)
	if d.err != nil {
		return ""
	}
	d.off += n
	return string(d.b[d.off-n : d.off])
}
func (d *decoder) long(v *string) { *v = d.text(maxSecurityBytes) }

// blob reads bytes of their own (the input may be reused), empty as nil.
func (d *decoder) blob(v *[]byte) {
	n := d.length(maxSecurityBytes)
	if d.err != nil || n == 0 {
		*v = nil
		return
	}
	*v = bytes.Clone(d.b[d.off : d.off+n])
	d.off += n
}
func (d *decoder) id(v *[16]byte) {
	if d.err != nil {
		return
	}
	if len(d.b)-d.off < len(v) {
		d.fail("a topic id needs %d bytes", len(v))
		return
	}
	d.off += copy(v[:], d.b[d.off:])
}
func (d *decoder) optional(v **string) {
	var set bool
	if d.flag(&set); !set || d.err != nil {
		*v = nil
		return
	}
	s := d.text(maxConfigValueBytes)
	*v = &s
}
func (d *decoder) strs(v *[]string) {
	*v = nil
	for range d.length(maxReplicas) {
		*v = append(*v, d.text(maxTopicBytes))
	}
}
func (d *decoder) tps(v *[]TopicPartition) {
	*v = nil
	for range d.length(maxReplicas) {
		var tp TopicPartition
		d.str(&tp.Topic)
		d.i32(&tp.Partition)
		*v = append(*v, tp)
	}
}
func (d *decoder) flag(v *bool) {
	if d.err != nil {
		return
	}
	if d.off >= len(d.b) || d.b[d.off] > 1 {
		d.fail("a flag must be a byte 0 or 1")
		return
	}
	*v = d.b[d.off] == 1
	d.off++
}

// DecodeRecord reads a record that MarshalBinary encoded.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a record's kind and version", ErrInvalidRecord, len(b))
	}
	var r Record
	switch kind(b[0]) {
	case kindController:
		r = new(ControllerRecord)
	case kindRegister:
		r = new(RegisterRecord)
	case kindFence:
		r = new(FenceRecord)
	case kindUnfence:
		r = new(UnfenceRecord)
	case kindShutdown:
		r = new(ShutdownRecord)
	case kindTopic:
		r = new(TopicRecord)
	case kindPartition:
		r = new(PartitionRecord)
	case kindConfig:
		r = new(ConfigRecord)
	case kindRemoveTopic:
		r = new(RemoveTopicRecord)
	case kindOffline:
		r = new(OfflineRecord)
	case kindScramCredential:
		r = new(ScramCredentialRecord)
	case kindRemoveScramCredential:
		r = new(RemoveScramCredentialRecord)
	case kindACL:
		r = new(ACLRecord)
	case kindRemoveACL:
		r = new(RemoveACLRecord)
	default:
		return nil, fmt.Errorf("%w: unknown record kind %d", ErrInvalidRecord, b[0])
	}
	if b[1] != recordVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrInvalidRecord, b[1], recordVersion)
	}
	d := &decoder{b: b, off: 2}
	var epoch int32
	d.i32(&epoch)
	r.fields(d)
	if d.err == nil && d.off != len(b) {
		d.fail("%d bytes left after the record", len(b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	r.stamp().Epoch = epoch
	return r, nil
}
