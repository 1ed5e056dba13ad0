package idempotence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// A TxnRecord is stored as Kafka stores it in __transaction_state: key
// TransactionLogKey v0 and value TransactionLogValue v1 (the flexible
// version transactions version 2 writes), both prefixed with their int16
// version (TransactionLog.keyToBytes and valueToBytes). A tombstone (a nil
// value) is the record of TxnDead.
//
// Kafka keeps LastProducerEpoch in memory only (its loader sets it to -1),
// so a coordinator that fails over forgets what lets it answer a retried
// InitProducerId with the same epoch. Strand writes it as tagged field
// txnLogLastEpochTag, a tag Kafka does not use: Kafka's reader skips an
// unknown tagged field, so the bytes stay readable by Kafka.
const (
	txnLogKeyVersion   = 0
	txnLogValueVersion = 1
	// clientTransactionVersion2 is the transaction.version feature level
	// of transactions version 2, stored in tagged field 2.
	clientTransactionVersion2 = 2
	txnLogLastEpochTag        = 10000
)

// ErrCorruptTxnRecord means bytes given to UnmarshalTxnRecord are not a
// transaction log record.
var ErrCorruptTxnRecord = errors.New("idempotence: corrupt transaction log record")

// MarshalTxnRecord returns the key and value that store r; the value is nil
// for a TxnDead record, a tombstone.
func MarshalTxnRecord(r TxnRecord) (key, value []byte) {
	be := binary.BigEndian
	key = be.AppendUint16(nil, txnLogKeyVersion)
	key = be.AppendUint16(key, uint16(len(r.TransactionalID)))
	key = append(key, r.TransactionalID...)
	if r.State == TxnDead {
		return key, nil
	}
	v := be.AppendUint16(nil, txnLogValueVersion)
	v = be.AppendUint64(v, uint64(r.ProducerID))
	v = be.AppendUint16(v, uint16(r.ProducerEpoch))
	v = be.AppendUint32(v, uint32(r.TimeoutMs))
	v = append(v, byte(r.State))
	if r.State == TxnEmpty {
		v = binary.AppendUvarint(v, 0) // null, as Kafka writes it for Empty
	} else {
		topics := groupByTopic(r.Partitions)
		v = binary.AppendUvarint(v, uint64(len(topics))+1)
		for _, t := range topics {
			v = binary.AppendUvarint(v, uint64(len(t.topic))+1)
			v = append(v, t.topic...)
			v = binary.AppendUvarint(v, uint64(len(t.ids))+1)
			for _, id := range t.ids {
				v = be.AppendUint32(v, uint32(id))
			}
			v = binary.AppendUvarint(v, 0) // no tagged fields
		}
	}
	v = be.AppendUint64(v, uint64(r.LastUpdateMs))
	v = be.AppendUint64(v, uint64(r.StartMs))
	// Tagged fields, ascending, each only when not its default.
	type tagged struct {
		tag  uint64
		data []byte
	}
	var tags []tagged
	if r.PreviousProducerID != NoProducerID {
		tags = append(tags, tagged{0, be.AppendUint64(nil, uint64(r.PreviousProducerID))})
	}
	if r.NextProducerID != NoProducerID {
		tags = append(tags, tagged{1, be.AppendUint64(nil, uint64(r.NextProducerID))})
	}
	tags = append(tags, tagged{2, be.AppendUint16(nil, clientTransactionVersion2)})
	if r.LastProducerEpoch != NoProducerEpoch {
		tags = append(tags, tagged{txnLogLastEpochTag, be.AppendUint16(nil, uint16(r.LastProducerEpoch))})
	}
	v = binary.AppendUvarint(v, uint64(len(tags)))
	for _, t := range tags {
		v = binary.AppendUvarint(v, t.tag)
		v = binary.AppendUvarint(v, uint64(len(t.data)))
		v = append(v, t.data...)
	}
	return key, v
}

type topicIDs struct {
	topic string
	ids   []int32
}

// groupByTopic groups sorted partitions by topic, as the value's
// TransactionPartitions does.
func groupByTopic(tps []TopicPartition) []topicIDs {
	var out []topicIDs
	for _, tp := range tps {
		if n := len(out); n > 0 && out[n-1].topic == tp.Topic {
			out[n-1].ids = append(out[n-1].ids, tp.Partition)
			continue
		}
		out = append(out, topicIDs{tp.Topic, []int32{tp.Partition}})
	}
	return out
}

// decoder reads the fields of a record, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorruptTxnRecord}, args...)...)
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("%s needs %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u16(what string) uint16 {
	if p := d.take(2, what); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if p := d.take(4, what); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if p := d.take(8, what); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint for %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a compact length (n+1, 0 for null) and checks that n
// elements of at least min bytes each can fit.
func (d *decoder) count(what string, min int) (n int, null bool) {
	v := d.uvarint(what)
	if d.err != nil || v == 0 {
		return 0, v == 0
	}
	if v-1 > uint64(len(d.b)/max(min, 1)) {
		d.fail("%s has %d elements in %d bytes", what, v-1, len(d.b))
		return 0, false
	}
	return int(v - 1), false
}

// UnmarshalTxnRecord decodes a record stored by MarshalTxnRecord, or by
// Kafka (value versions 0 and 1). A nil value is a tombstone: the record of
// TxnDead. Errors wrap ErrCorruptTxnRecord.
func UnmarshalTxnRecord(key, value []byte) (TxnRecord, error) {
	d := &decoder{b: key}
	if v := d.u16("key version"); d.err == nil && v != txnLogKeyVersion {
		d.fail("key version %d", v)
	}
	id := string(d.take(int(d.u16("transactional id length")), "transactional id"))
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the key", len(d.b))
	}
	if d.err != nil {
		return TxnRecord{}, d.err
	}
	r := TxnRecord{TransactionalID: id, PreviousProducerID: NoProducerID, NextProducerID: NoProducerID, LastProducerEpoch: NoProducerEpoch}
	if value == nil {
		r.State = TxnDead
		return r, nil
	}
	d.b = value
	version := d.u16("value version")
	if d.err == nil && version > txnLogValueVersion {
		d.fail("value version %d", version)
	}
	flexible := version >= 1
	r.ProducerID = int64(d.u64("producer id"))
	r.ProducerEpoch = int16(d.u16("producer epoch"))
	r.TimeoutMs = int32(d.u32("timeout"))
	if p := d.take(1, "state"); p != nil {
		r.State = TxnState(p[0])
		if r.State < 0 || int(r.State) >= len(txnStateNames) {
			d.fail("state %d", p[0])
		}
	}
	r.Partitions = d.partitions(flexible)
	r.LastUpdateMs = int64(d.u64("last update time"))
	r.StartMs = int64(d.u64("start time"))
	if flexible {
		d.tags(&r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the value", len(d.b))
	}
	if d.err != nil {
		return TxnRecord{}, fmt.Errorf("transactional id %q: %w", id, d.err)
	}
	slices.SortFunc(r.Partitions, compareTopicPartitions)
	return r, nil
}

func (d *decoder) partitions(flexible bool) []TopicPartition {
	var n int
	if flexible {
		n, _ = d.count("partitions", 3)
	} else if c := int32(d.u32("partitions")); c > 0 {
		if int64(c) > int64(len(d.b)/6) {
			d.fail("%d topics in %d bytes", c, len(d.b))
			return nil
		}
		n = int(c)
	}
	var tps []TopicPartition
	for range n {
		var topic string
		var ids int
		if flexible {
			l, _ := d.count("topic", 1)
			topic = string(d.take(l, "topic"))
			ids, _ = d.count("partition ids", 4)
		} else {
			topic = string(d.take(int(d.u16("topic length")), "topic"))
			if c := int32(d.u32("partition ids")); c > 0 && int64(c) <= int64(len(d.b)/4) {
				ids = int(c)
			} else if c > 0 {
				d.fail("%d partition ids in %d bytes", c, len(d.b))
			}
		}
		for range ids {
			tps = append(tps, TopicPartition{Topic: topic, Partition: int32(d.u32("partition id"))})
		}
		if flexible {
			d.skipTags()
		}
		if d.err != nil {
			return nil
		}
	}
	return tps
}

// tags reads the value's tagged fields.
func (d *decoder) tags(r *TxnRecord) {
	n := d.uvarint("tagged fields")
	for i := uint64(0); i < n && d.err == nil; i++ {
		tag := d.uvarint("tag")
		size := d.uvarint("tag size")
		if size > math.MaxInt32 {
			d.fail("tag %d of %d bytes", tag, size)
			return
		}
		p := d.take(int(size), fmt.Sprintf("tag %d", tag))
		if d.err != nil {
			return
		}
		switch {
		case tag == 0 && size == 8:
			r.PreviousProducerID = int64(binary.BigEndian.Uint64(p))
		case tag == 1 && size == 8:
			r.NextProducerID = int64(binary.BigEndian.Uint64(p))
		case tag == txnLogLastEpochTag && size == 2:
			r.LastProducerEpoch = int16(binary.BigEndian.Uint16(p))
		case tag <= 1 || tag == txnLogLastEpochTag:
			d.fail("tag %d has %d bytes", tag, size)
		}
	}
}

func (d *decoder) skipTags() {
	n := d.uvarint("tagged fields")
	for i := uint64(0); i < n && d.err == nil; i++ {
		d.uvarint("tag")
		size := d.uvarint("tag size")
		if size > math.MaxInt32 {
			d.fail("tag of %d bytes", size)
			return
		}
		d.take(int(size), "tag")
	}
}
