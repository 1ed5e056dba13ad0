package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/strandlog/strand"
)

// The records of the offsets log use the layout of Kafka's __consumer_offsets
// topic, so that Kafka's tools (GroupMetadataMessageFormatter,
// kafka-consumer-groups) read them. A key is a big-endian int16 key version
// followed by the key struct; a value is an int16 value version followed by
// the value struct. The schemas are group-coordinator/src/main/resources/
// common/message/{OffsetCommit,GroupMetadata}{Key,Value}.json:
//
//	key version 0, 1   OffsetCommitKey{group, topic, partition}
//	key version 2      GroupMetadataKey{group}
//	key version 3..8   KIP-848 consumer group records (records_consumer.go)
//	key version 9..    share and streams group records (not decoded)
//
// Values of version 4 are "flexible": compact strings, arrays and bytes
// (unsigned varint length + 1) and tagged fields. Kafka writes the highest
// non-flexible version (MetadataVersion.offsetCommitValueVersion and
// groupMetadataValueVersion): OffsetCommitValue 3, or 1 when the commit
// carries an explicit expire timestamp, and GroupMetadataValue 3. Encode
// writes those; Decode reads every version 0-4.
//
// Kafka's nullable strings (protocol, leader, groupInstanceId) are Go strings
// here, with "" standing for null: Kafka never writes an empty string in
// those fields, and Encode writes "" as null, as Kafka writes a missing value.

// Key versions of the offsets log.
const (
	offsetCommitKeyVersion  = 1 // what Kafka writes; 0 is read too
	groupMetadataKeyVersion = 2
)

// Value versions Encode writes.
const (
	offsetCommitValueVersion       = 3
	offsetCommitValueExpireVersion = 1
	groupMetadataValueVersion      = 3
	maxValueVersion                = 4
)

// ErrCorruptRecord reports a record of the offsets log that does not decode
// under its schema.
var ErrCorruptRecord = errors.New("group: corrupt offsets log record")

// ErrUnknownRecordType reports a key version this package does not decode
// (share and streams group records). Kafka's loader skips such records.
var ErrUnknownRecordType = errors.New("group: unknown offsets log record type")

// Record is one record of the offsets log: key and value bytes in Kafka's
// layout. A nil Value is a tombstone.
type Record struct {
	Key   []byte
	Value []byte
	// Producer is set on a transactional offset commit: the record belongs
	// in a transactional batch of that producer, and counts only once a
	// COMMIT marker of that producer follows it (ReplayTxnMarker).
	Producer *strand.ProducerIDAndEpoch
}

// OffsetCommitKey identifies a committed offset.
type OffsetCommitKey struct {
	Group     string
	Topic     string
	Partition int32
}

// OffsetCommitValue is a committed offset. LeaderEpoch is -1 when unknown;
// ExpireTimestamp (milliseconds) is -1 unless the commit asked for its own
// retention (OffsetCommit v2-v4), and is only kept by value version 1.
type OffsetCommitValue struct {
	Offset          int64
	LeaderEpoch     int32
	Metadata        string
	CommitTimestamp int64 // milliseconds since the Unix epoch
	ExpireTimestamp int64 // milliseconds since the Unix epoch, or -1
}

// GroupMetadataKey identifies a classic group's metadata.
type GroupMetadataKey struct {
	Group string
}

// GroupMetadataValue is a classic group as persisted: written when a
// generation completes to Empty, when the leader's SyncGroup is accepted, when
// a static member is replaced and when a group is created. Protocol and Leader
// are "" for an empty group. CurrentStateTimestamp (milliseconds, -1 when
// unknown) is when the group entered its state; for an Empty group it is the
// base of offset expiration.
type GroupMetadataValue struct {
	ProtocolType          string
	Generation            int32
	Protocol              string
	Leader                string
	CurrentStateTimestamp int64
	Members               []MemberMetadata
}

// MemberMetadata is one member in a GroupMetadataValue. Subscription is the
// member's metadata for the group's selected protocol.
type MemberMetadata struct {
	MemberID         string
	GroupInstanceID  string
	ClientID         string
	ClientHost       string
	RebalanceTimeout int32 // milliseconds; -1 in value version 0
	SessionTimeout   int32 // milliseconds
	Subscription     []byte
	Assignment       []byte
}

// EncodeOffsetCommit returns the record of a committed offset as Kafka writes
// it (key version 1, value version 3, or 1 when v.ExpireTimestamp is set).
func EncodeOffsetCommit(k OffsetCommitKey, v OffsetCommitValue) Record {
	version := int16(offsetCommitValueVersion)
	if v.ExpireTimestamp != -1 {
		version = offsetCommitValueExpireVersion
	}
	return Record{Key: k.encode(offsetCommitKeyVersion), Value: v.encode(version)}
}

// EncodeOffsetTombstone returns the tombstone that deletes a committed offset.
func EncodeOffsetTombstone(k OffsetCommitKey) Record {
	return Record{Key: k.encode(offsetCommitKeyVersion)}
}

// EncodeGroupMetadata returns the record of a classic group as Kafka writes
// it (key version 2, value version 3).
func EncodeGroupMetadata(k GroupMetadataKey, v GroupMetadataValue) Record {
	return Record{Key: k.encode(), Value: v.encode(groupMetadataValueVersion)}
}

// EncodeGroupTombstone returns the tombstone that deletes a classic group.
func EncodeGroupTombstone(k GroupMetadataKey) Record {
	return Record{Key: k.encode()}
}

// Decoded is a decoded record of the offsets log: exactly one of OffsetKey,
// GroupKey and ConsumerKey is set, and the matching value is nil for a tombstone.
type Decoded struct {
	OffsetKey   *OffsetCommitKey
	OffsetValue *OffsetCommitValue
	GroupKey    *GroupMetadataKey
	GroupValue  *GroupMetadataValue
	// ConsumerKey is set for a consumer group record (types 3-8), and
	// ConsumerValue holds its value, one of the ConsumerGroup*Value types,
	// or nil for a tombstone.
	ConsumerKey   *ConsumerGroupKey
	ConsumerValue any

	// KeyVersion and ValueVersion are the versions the record was written
	// with; ValueVersion is -1 for a tombstone.
	KeyVersion, ValueVersion int16
}

// Decode decodes a record of the offsets log. Records of types it does not
// know (share and streams groups, key version 9 and above) return an error matching
// ErrUnknownRecordType; malformed ones an error matching ErrCorruptRecord.
func Decode(r Record) (Decoded, error) {
	d := Decoded{ValueVersion: -1}
	kr := reader{b: r.Key}
	d.KeyVersion = kr.int16()
	if kr.err != nil {
		return d, corrupt("key", kr.err)
	}
	switch d.KeyVersion {
	case 0, 1:
		k := OffsetCommitKey{Group: kr.string(), Topic: kr.string(), Partition: kr.int32()}
		if err := kr.done(); err != nil {
			return d, corrupt("offset commit key", err)
		}
		d.OffsetKey = &k
		if r.Value == nil {
			return d, nil
		}
		vr := reader{b: r.Value}
		var v OffsetCommitValue
		d.ValueVersion, v = decodeOffsetCommitValue(&vr)
		if err := vr.done(); err != nil {
			return d, corrupt("offset commit value", err)
		}
		d.OffsetValue = &v
	case 2:
		k := GroupMetadataKey{Group: kr.string()}
		if err := kr.done(); err != nil {
			return d, corrupt("group metadata key", err)
		}
		d.GroupKey = &k
		if r.Value == nil {
			return d, nil
		}
		vr := reader{b: r.Value}
		var v GroupMetadataValue
		d.ValueVersion, v = decodeGroupMetadataValue(&vr)
		if err := vr.done(); err != nil {
			return d, corrupt("group metadata value", err)
		}
		d.GroupValue = &v
	case ConsumerGroupMetadataType, ConsumerGroupPartitionMetadataType, ConsumerGroupMemberMetadataType,
		ConsumerGroupTargetAssignmentMetaType, ConsumerGroupTargetAssignmentType, ConsumerGroupCurrentAssignmentType:
		if err := decodeConsumerGroup(&d, &kr, r); err != nil {
			return d, err
		}
	default:
		if d.KeyVersion < 0 {
			return d, corrupt("key", fmt.Errorf("negative key version %d", d.KeyVersion))
		}
		return d, fmt.Errorf("group: key version %d: %w", d.KeyVersion, ErrUnknownRecordType)
	}
	return d, nil
}

func corrupt(what string, err error) error {
	return fmt.Errorf("group: %s: %w: %w", what, ErrCorruptRecord, err)
}

func (k OffsetCommitKey) encode(version int16) []byte {
	w := writer{}
	w.int16(version)
	w.string(k.Group)
	w.string(k.Topic)
	w.int32(k.Partition)
	return w.b
}

func (k GroupMetadataKey) encode() []byte {
	w := writer{}
	w.int16(groupMetadataKeyVersion)
	w.string(k.Group)
	return w.b
}

func (v OffsetCommitValue) encode(version int16) []byte {
	w := writer{flexible: version >= 4}
	w.int16(version)
	w.int64(v.Offset)
	if version >= 3 {
		w.int32(v.LeaderEpoch)
	}
	w.string(v.Metadata)
	w.int64(v.CommitTimestamp)
	if version == 1 {
		w.int64(v.ExpireTimestamp)
	}
	w.tags()
	return w.b
}

func decodeOffsetCommitValue(r *reader) (int16, OffsetCommitValue) {
	version := r.valueVersion()
	v := OffsetCommitValue{LeaderEpoch: -1, ExpireTimestamp: -1}
	v.Offset = r.int64()
	if version >= 3 {
		v.LeaderEpoch = r.int32()
	}
	v.Metadata = r.string()
	v.CommitTimestamp = r.int64()
	if version == 1 {
		v.ExpireTimestamp = r.int64()
	}
	r.tags()
	return version, v
}

func (v GroupMetadataValue) encode(version int16) []byte {
	w := writer{flexible: version >= 4}
	w.int16(version)
	w.string(v.ProtocolType)
	w.int32(v.Generation)
	w.nullableString(v.Protocol)
	w.nullableString(v.Leader)
	if version >= 2 {
		w.int64(v.CurrentStateTimestamp)
	}
	w.arrayLen(len(v.Members))
	for _, m := range v.Members {
		w.string(m.MemberID)
		if version >= 3 {
			w.nullableString(m.GroupInstanceID)
		}
		w.string(m.ClientID)
		w.string(m.ClientHost)
		if version >= 1 {
			w.int32(m.RebalanceTimeout)
		}
		w.int32(m.SessionTimeout)
		w.bytes(m.Subscription)
		w.bytes(m.Assignment)
		w.tags()
	}
	w.tags()
	return w.b
}

func decodeGroupMetadataValue(r *reader) (int16, GroupMetadataValue) {
	version := r.valueVersion()
	v := GroupMetadataValue{CurrentStateTimestamp: -1}
	v.ProtocolType = r.string()
	v.Generation = r.int32()
	v.Protocol = r.string()
	v.Leader = r.string()
	if version >= 2 {
		v.CurrentStateTimestamp = r.int64()
	}
	n := r.arrayLen()
	for i := 0; i < n && r.err == nil; i++ {
		m := MemberMetadata{RebalanceTimeout: -1}
		m.MemberID = r.string()
		if version >= 3 {
			m.GroupInstanceID = r.string()
		}
		m.ClientID = r.string()
		m.ClientHost = r.string()
		if version >= 1 {
			m.RebalanceTimeout = r.int32()
		}
		m.SessionTimeout = r.int32()
		m.Subscription = r.bytes()
		m.Assignment = r.bytes()
		r.tags()
		v.Members = append(v.Members, m)
	}
	r.tags()
	return version, v
}

// writer appends Kafka's protocol primitives. Flexible versions use compact
// lengths and end every struct with an (empty) tagged field section.
type writer struct {
	b        []byte
	flexible bool
}

func (w *writer) int16(v int16) { w.b = binary.BigEndian.AppendUint16(w.b, uint16(v)) }
func (w *writer) int32(v int32) { w.b = binary.BigEndian.AppendUint32(w.b, uint32(v)) }
func (w *writer) int64(v int64) { w.b = binary.BigEndian.AppendUint64(w.b, uint64(v)) }

func (w *writer) length(n int) {
	if w.flexible {
		w.b = binary.AppendUvarint(w.b, uint64(n)+1)
	} else {
		w.int16(int16(n))
	}
}

// string writes a non-nullable string. Callers keep strings within
// math.MaxInt16 bytes (checked where requests enter the coordinator).
func (w *writer) string(s string) {
	w.length(len(s))
	w.b = append(w.b, s...)
}

func (w *writer) nullableString(s string) {
	if s != "" {
		w.string(s)
	} else if w.flexible {
		w.b = append(w.b, 0)
	} else {
		w.int16(-1)
	}
}

func (w *writer) arrayLen(n int) {
	if w.flexible {
		w.b = binary.AppendUvarint(w.b, uint64(n)+1)
	} else {
		w.int32(int32(n))
	}
}

func (w *writer) bytes(b []byte) {
	w.arrayLen(len(b))
	w.b = append(w.b, b...)
}

func (w *writer) nullableBytes(b []byte) {
	if b == nil {
		w.int32(-1)
		return
	}
	w.bytes(b)
}

func (w *writer) tags() {
	if w.flexible {
		w.b = append(w.b, 0)
	}
}

// reader consumes Kafka's protocol primitives; the first failure sticks in
// err and every later read returns a zero value.
type reader struct {
	b        []byte
	flexible bool
	err      error
}

var errShort = errors.New("record ends early")

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errShort
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) int16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *reader) int64() int64 {
	if b := r.take(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad unsigned varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// valueVersion reads a value's version and switches to flexible decoding
// for the versions that are flexible.
func (r *reader) valueVersion() int16 {
	v := r.int16()
	if r.err == nil && (v < 0 || v > maxValueVersion) {
		r.err = fmt.Errorf("value version %d outside 0-%d", v, maxValueVersion)
	}
	r.flexible = v >= 4
	return v
}

// length reads a string length; -1 stands for null.
func (r *reader) length() int {
	if r.flexible {
		n := r.uvarint()
		if n > math.MaxInt32 {
			r.err = errors.New("compact length out of range")
			return 0
		}
		return int(n) - 1
	}
	return int(r.int16())
}

// string reads a string, nullable or not; null reads as "".
func (r *reader) string() string {
	n := r.length()
	if n < -1 && r.err == nil {
		r.err = fmt.Errorf("negative string length %d", n)
	}
	if n <= 0 {
		return ""
	}
	return string(r.take(n))
}

func (r *reader) arrayLen() int {
	var n int
	if r.flexible {
		u := r.uvarint()
		if u > math.MaxInt32 {
			r.err = errors.New("compact length out of range")
		}
		n = int(u) - 1
	} else {
		n = int(r.int32())
	}
	if r.err == nil && (n < 0 || n > len(r.b)) {
		// Kafka's schemas here have no nullable arrays or bytes, and every
		// element takes at least one byte.
		r.err = fmt.Errorf("length %d with %d bytes left", n, len(r.b))
	}
	if r.err != nil {
		return 0
	}
	return n
}

func (r *reader) bytes() []byte {
	n := r.arrayLen()
	if r.err != nil {
		return nil
	}
	return append([]byte{}, r.take(n)...)
}

// nullableBytes reads non-flexible nullable bytes; null reads as nil.
func (r *reader) nullableBytes() []byte {
	n := r.int32()
	switch {
	case r.err != nil:
		return nil
	case n == -1:
		return nil
	case n < 0 || int(n) > len(r.b):
		r.err = fmt.Errorf("bytes of length %d with %d bytes left", n, len(r.b))
		return nil
	}
	return append([]byte{}, r.take(int(n))...)
}

// tags skips a tagged field section of a flexible version: no tagged fields
// are defined in these schemas, so every tag is unknown and skipped.
func (r *reader) tags() {
	if !r.flexible {
		return
	}
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.err = errShort
			return
		}
		r.take(int(size))
	}
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	return r.err
}
