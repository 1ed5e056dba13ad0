package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The encoding of a message: a kind byte, a version byte, the header,
// then the message's fields in order. Integers are zig-zag varints, except
// IDs (unsigned varints); strings, byte slices and node lists are a length
// (unsigned varint) and their content. It is compact and has no reflection;
// Decode checks every length against what is left, so a truncated or
// oversized input is an error, never an allocation it asks for.

type kind uint8

const (
	kindFetch kind = iota + 1
	kindFetchResponse
	kindLeaderAndISR
	kindAlterPartition
	kindAlterPartitionResponse
	kindProduce
	kindProduceResult
	kindEnvelope
)

// encodingVersion 1 added the broker epochs (KIP-380, KIP-903); 2 a
// produce's Coordinator origin and a result's Duplicate.
const encodingVersion = 2

// Limits of a decoded message.
const (
	// MaxMessageBytes is the largest encoded message Decode accepts.
	MaxMessageBytes = 64 << 20
	maxTopicBytes   = 249 // Kafka's topic name limit
	maxNodes        = 1 << 12
	maxBatched      = 1 << 16
)

func (*Fetch) kind() kind                  { return kindFetch }
func (*FetchResponse) kind() kind          { return kindFetchResponse }
func (*LeaderAndISR) kind() kind           { return kindLeaderAndISR }
func (*AlterPartition) kind() kind         { return kindAlterPartition }
func (*AlterPartitionResponse) kind() kind { return kindAlterPartitionResponse }
func (*Produce) kind() kind                { return kindProduce }
func (*ProduceResult) kind() kind          { return kindProduceResult }
func (*Envelope) kind() kind               { return kindEnvelope }

// Decode reads a message that MarshalBinary encoded.
func Decode(b []byte) (Message, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrInvalidMessage)
	}
	var m Message
	switch kind(b[0]) {
	case kindFetch:
		m = new(Fetch)
	case kindFetchResponse:
		m = new(FetchResponse)
	case kindLeaderAndISR:
		m = new(LeaderAndISR)
	case kindAlterPartition:
		m = new(AlterPartition)
	case kindAlterPartitionResponse:
		m = new(AlterPartitionResponse)
	case kindProduce:
		m = new(Produce)
	case kindProduceResult:
		m = new(ProduceResult)
	case kindEnvelope:
		m = new(Envelope)
	default:
		return nil, fmt.Errorf("%w: unknown message kind %d", ErrInvalidMessage, b[0])
	}
	if err := m.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return m, nil
}

type encoder struct{ b []byte }

func newEncoder(k kind, h *Header) *encoder {
	e := &encoder{b: make([]byte, 0, 64)}
	e.b = append(e.b, byte(k), encodingVersion)
	e.int(int64(h.From))
	e.int(int64(h.To))
	e.bytes([]byte(h.Topic))
	e.int(int64(h.Partition))
	return e
}

func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) bytes(p []byte) {
	e.uint(uint64(len(p)))
	e.b = append(e.b, p...)
}
func (e *encoder) bool(v bool) {
	if v {
		e.uint(1)
		return
	}
	e.uint(0)
}
func (e *encoder) nodes(ns []NodeID) {
	e.uint(uint64(len(ns)))
	for _, n := range ns {
		e.int(int64(n))
	}
}

func (e *encoder) done() ([]byte, error) {
	if len(e.b) > MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, MaxMessageBytes is %d", ErrMessageTooLarge, len(e.b), MaxMessageBytes)
	}
	return e.b, nil
}

// decoder reads fields; the first error sticks and later reads return
// zeros.
type decoder struct {
	b   []byte
	off int
	err error
}

func newDecoder(b []byte, k kind, h *Header) *decoder {
	d := &decoder{b: b}
	switch {
	case len(b) > MaxMessageBytes:
		d.fail("%d bytes, MaxMessageBytes is %d", len(b), MaxMessageBytes)
	case len(b) < 2:
		d.fail("%d bytes, too short for a message", len(b))
	case kind(b[0]) != k:
		d.fail("message kind %d, want %d", b[0], k)
	case b[1] != encodingVersion:
		d.fail("encoding version %d, want %d", b[1], encodingVersion)
	default:
		d.off = 2
	}
	h.From = d.node()
	h.To = d.node()
	topic := d.bytes()
	if len(topic) > maxTopicBytes {
		d.fail("topic of %d bytes, at most %d", len(topic), maxTopicBytes)
	}
	h.Topic = string(topic)
	h.Partition = d.int32()
	return d
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrInvalidMessage, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad unsigned varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) int32() int32 {
	v := d.int()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("%d does not fit 32 bits", v)
		return 0
	}
	return int32(v)
}

func (d *decoder) int16() int16 {
	v := d.int()
	if v < math.MinInt16 || v > math.MaxInt16 {
		d.fail("%d does not fit 16 bits", v)
		return 0
	}
	return int16(v)
}

func (d *decoder) node() NodeID { return NodeID(d.int32()) }

func (d *decoder) bool() bool {
	switch v := d.uint(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("%d is not a boolean", v)
		return false
	}
}

// bytes returns a copy, so that the message does not alias the input.
func (d *decoder) bytes() []byte {
	n := d.uint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("length %d, only %d bytes left", n, len(d.b)-d.off)
		return nil
	}
	p := append([]byte(nil), d.b[d.off:d.off+int(n)]...)
	d.off += int(n)
	return p
}

func (d *decoder) nodes() []NodeID {
	n := d.uint()
	if d.err != nil {
		return nil
	}
	if n > maxNodes || n > uint64(len(d.b)-d.off) { // a node takes at least a byte
		d.fail("%d nodes in a list, at most %d", n, min(maxNodes, len(d.b)-d.off))
		return nil
	}
	var ns []NodeID
	for range n {
		ns = append(ns, d.node())
	}
	return ns
}

// finish reports the first error, or trailing bytes.
func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	return d.err
}

// MarshalBinary encodes the message.
func (m *Fetch) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.uint(m.ID)
	e.int(int64(m.CurrentLeaderEpoch))
	e.int(m.FetchOffset)
	e.int(int64(m.LastFetchedEpoch))
	e.int(m.LogStartOffset)
	e.int(m.SyncedOffset)
	e.int(int64(m.MaxBytes))
	e.int(int64(m.MaxWait))
	e.int(m.BrokerEpoch)
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *Fetch) UnmarshalBinary(b []byte) error {
	var v Fetch
	d := newDecoder(b, v.kind(), &v.Header)
	v.ID = d.uint()
	v.CurrentLeaderEpoch = d.int32()
	v.FetchOffset = d.int()
	v.LastFetchedEpoch = d.int32()
	v.LogStartOffset = d.int()
	v.SyncedOffset = d.int()
	v.MaxBytes = d.int32()
	v.MaxWait = d.int32()
	v.BrokerEpoch = d.int()
	return commit(d, m, v)
}

// MarshalBinary encodes the message.
func (m *FetchResponse) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.uint(m.ID)
	e.int(int64(m.Err))
	e.int(int64(m.Leader))
	e.int(int64(m.LeaderEpoch))
	e.int(m.FetchOffset)
	e.int(m.HighWatermark)
	e.int(m.LogStartOffset)
	e.int(m.LogEndOffset)
	e.int(int64(m.DivergingEpoch))
	e.int(m.DivergingEndOffset)
	e.bytes(m.Records)
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *FetchResponse) UnmarshalBinary(b []byte) error {
	var v FetchResponse
	d := newDecoder(b, v.kind(), &v.Header)
	v.ID = d.uint()
	v.Err = Code(d.int16())
	v.Leader = d.node()
	v.LeaderEpoch = d.int32()
	v.FetchOffset = d.int()
	v.HighWatermark = d.int()
	v.LogStartOffset = d.int()
	v.LogEndOffset = d.int()
	v.DivergingEpoch = d.int32()
	v.DivergingEndOffset = d.int()
	v.Records = d.bytes()
	if len(v.Records) == 0 {
		v.Records = nil
	}
	return commit(d, m, v)
}

// MarshalBinary encodes the message.
func (m *LeaderAndISR) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.int(m.BrokerEpoch)
	e.int(int64(m.ControllerEpoch))
	e.int(int64(m.Leader))
	e.int(int64(m.LeaderEpoch))
	e.int(int64(m.PartitionEpoch))
	e.nodes(m.Replicas)
	e.nodes(m.ISR)
	e.nodes(m.Adding)
	e.nodes(m.Removing)
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *LeaderAndISR) UnmarshalBinary(b []byte) error {
	var v LeaderAndISR
	d := newDecoder(b, v.kind(), &v.Header)
	v.BrokerEpoch = d.int()
	v.ControllerEpoch = d.int32()
	v.Leader = d.node()
	v.LeaderEpoch = d.int32()
	v.PartitionEpoch = d.int32()
	v.Replicas = d.nodes()
	v.ISR = d.nodes()
	v.Adding = d.nodes()
	v.Removing = d.nodes()
	return commit(d, m, v)
}

// MarshalBinary encodes the message.
func (m *AlterPartition) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.int(m.BrokerEpoch)
	e.int(int64(m.LeaderEpoch))
	e.int(int64(m.PartitionEpoch))
	e.uint(uint64(len(m.ISR)))
	for _, b := range m.ISR {
		e.int(int64(b.ID))
		e.int(b.BrokerEpoch)
	}
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *AlterPartition) UnmarshalBinary(b []byte) error {
	var v AlterPartition
	d := newDecoder(b, v.kind(), &v.Header)
	v.BrokerEpoch = d.int()
	v.LeaderEpoch = d.int32()
	v.PartitionEpoch = d.int32()
	n := d.uint()
	if n > maxNodes || n > uint64(len(b)-d.off)/2 { // a member takes at least two bytes
		d.fail("%d ISR members, at most %d", n, min(maxNodes, (len(b)-d.off)/2))
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		v.ISR = append(v.ISR, ISRMember{ID: d.node(), BrokerEpoch: d.int()})
	}
	return commit(d, m, v)
}

// MarshalBinary encodes the message.
func (m *AlterPartitionResponse) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.int(int64(m.Err))
	e.int(int64(m.Leader))
	e.int(int64(m.LeaderEpoch))
	e.int(int64(m.PartitionEpoch))
	e.nodes(m.ISR)
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *AlterPartitionResponse) UnmarshalBinary(b []byte) error {
	var v AlterPartitionResponse
	d := newDecoder(b, v.kind(), &v.Header)
	v.Err = Code(d.int16())
	v.Leader = d.node()
	v.LeaderEpoch = d.int32()
	v.PartitionEpoch = d.int32()
	v.ISR = d.nodes()
	return commit(d, m, v)
}

// MarshalBinary encodes the message.
func (m *Produce) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.uint(m.ID)
	e.int(int64(m.Acks))
	e.int(int64(m.Timeout))
	e.bytes(m.Batch)
	e.bool(m.Coordinator)
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *Produce) UnmarshalBinary(b []byte) error {
	var v Produce
	d := newDecoder(b, v.kind(), &v.Header)
	v.ID = d.uint()
	acks := d.int()
	if !Acks(acks).valid() || int64(Acks(acks)) != acks {
		d.fail("acks %d, allowed 0, 1 or -1", acks)
	}
	v.Acks = Acks(acks)
	v.Timeout = d.int32()
	v.Batch = d.bytes()
	v.Coordinator = d.bool()
	return commit(d, m, v)
}

// MarshalBinary encodes the message. Only the error's Code goes on the
// wire; a *NotLeaderError's leader goes with it.
func (m *ProduceResult) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.uint(m.ID)
	e.int(int64(CodeOf(m.Err)))
	leader, epoch := NoNode, int32(-1)
	if nl, ok := errors.AsType[*NotLeaderError](m.Err); ok {
		leader, epoch = nl.Leader, nl.LeaderEpoch
	}
	e.int(int64(leader))
	e.int(int64(epoch))
	e.int(m.BaseOffset)
	e.int(m.LastOffset)
	e.bool(m.Duplicate)
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged. The error is the sentinel of its Code, or a *NotLeaderError.
func (m *ProduceResult) UnmarshalBinary(b []byte) error {
	var v ProduceResult
	d := newDecoder(b, v.kind(), &v.Header)
	v.ID = d.uint()
	code := Code(d.int16())
	leader, epoch := d.node(), d.int32()
	v.Err = code.Err()
	if code == ErrNotLeaderOrFollower {
		v.Err = &NotLeaderError{Leader: leader, LeaderEpoch: epoch}
	}
	v.BaseOffset = d.int()
	v.LastOffset = d.int()
	v.Duplicate = d.bool()
	return commit(d, m, v)
}

// commit stores v in m if the decoder met no error.
func commit[T any](d *decoder, m *T, v T) error {
	if err := d.finish(); err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalBinary encodes the envelope: its header, then each message's own
// encoding. An envelope holds no envelope.
func (m *Envelope) MarshalBinary() ([]byte, error) {
	e := newEncoder(m.kind(), &m.Header)
	e.uint(uint64(len(m.Messages)))
	for _, inner := range m.Messages {
		if _, nested := inner.(*Envelope); nested || inner == nil {
			return nil, fmt.Errorf("%w: an envelope holds a %T", ErrInvalidMessage, inner)
		}
		b, err := inner.MarshalBinary()
		if err != nil {
			return nil, err
		}
		e.bytes(b)
	}
	return e.done()
}

// UnmarshalBinary decodes what MarshalBinary encoded; on error m is
// unchanged.
func (m *Envelope) UnmarshalBinary(b []byte) error {
	var v Envelope
	d := newDecoder(b, v.kind(), &v.Header)
	n := d.uint()
	if n > maxBatched || n > uint64(len(b)) {
		d.fail("%d messages in a batch, at most %d", n, min(maxBatched, len(b)))
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		raw := d.bytes()
		if d.err != nil {
			break
		}
		if len(raw) > 0 && kind(raw[0]) == kindEnvelope {
			d.fail("a batch inside a batch")
			break
		}
		inner, err := Decode(raw)
		if err != nil {
			d.fail("message %d: %v", i, err)
			break
		}
		v.Messages = append(v.Messages, inner)
	}
	return commit(d, m, v)
}
