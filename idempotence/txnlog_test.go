package idempotence

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTxnRecordBytes spells out TransactionLogKey v0 and TransactionLogValue
// v1 for an Ongoing transaction on three partitions of two topics.
func TestTxnRecordBytes(t *testing.T) {
	r := TxnRecord{
		TransactionalID: "tx", State: TxnOngoing, ProducerID: 1000, PreviousProducerID: 900, NextProducerID: -1,
		ProducerEpoch: 4, LastProducerEpoch: 3, TimeoutMs: 60_000,
		Partitions: []TopicPartition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 2}, {Topic: "b", Partition: 1}}, StartMs: 5000, LastUpdateMs: 6000,
	}
	key, value := MarshalTxnRecord(r)
	require.Equal(t, []byte{0, 0, 0, 2, 't', 'x'}, key)

	be := binary.BigEndian
	want := be.AppendUint16(nil, 1) // value version
	want = be.AppendUint64(want, 1000)
	want = be.AppendUint16(want, 4)
	want = be.AppendUint32(want, 60_000)
	want = append(want, 1)             // Ongoing
	want = append(want, 3)             // two topics, compact
	want = append(want, 2, 'a', 3)     // "a", two ids
	want = be.AppendUint32(want, 0)    //
	want = be.AppendUint32(want, 2)    //
	want = append(want, 0)             // no tags
	want = append(want, 2, 'b', 2)     // "b", one id
	want = be.AppendUint32(want, 1)    //
	want = append(want, 0)             // no tags
	want = be.AppendUint64(want, 6000) // last update
	want = be.AppendUint64(want, 5000) // start
	want = append(want, 3)             // three tagged fields
	want = append(want, 0, 8)          // PreviousProducerId
	want = be.AppendUint64(want, 900)
	want = append(want, 2, 2, 0, 2)          // ClientTransactionVersion 2
	want = append(want, 0x90, 0x4e, 2, 0, 3) // tag 10000 (varint), LastProducerEpoch 3
	require.Equal(t, want, value)

	back, err := UnmarshalTxnRecord(key, value)
	require.NoError(t, err)
	require.Equal(t, r, back)
}

// TestTxnRecordRoundTrip: every state, and the tombstone.
func TestTxnRecordRoundTrip(t *testing.T) {
	for st := TxnEmpty; st <= TxnPrepareEpochFence; st++ {
		r := TxnRecord{TransactionalID: "some-id", State: st, ProducerID: 7, PreviousProducerID: -1, NextProducerID: 8,
			ProducerEpoch: 32767, LastProducerEpoch: -1, TimeoutMs: 1, StartMs: -1, LastUpdateMs: 9}
		if st != TxnEmpty && st != TxnDead {
			r.Partitions = []TopicPartition{{Topic: "x", Partition: 1}}
		}
		key, value := MarshalTxnRecord(r)
		back, err := UnmarshalTxnRecord(key, value)
		require.NoError(t, err, "%v", st)
		if st == TxnDead {
			require.Nil(t, value)
			require.Equal(t, TxnRecord{TransactionalID: "some-id", State: TxnDead, PreviousProducerID: -1, NextProducerID: -1, LastProducerEpoch: -1}, back)
			continue
		}
		require.Equal(t, r, back, "%v", st)
	}
}

// TestTxnRecordKafkaV0 reads a version 0 value as a Kafka broker before
// transactions version 1 wrote it: not flexible, int32 and int16 lengths,
// no tagged fields.
func TestTxnRecordKafkaV0(t *testing.T) {
	be := binary.BigEndian
	v := be.AppendUint16(nil, 0)
	v = be.AppendUint64(v, 42)
	v = be.AppendUint16(v, 1)
	v = be.AppendUint32(v, 30_000)
	v = append(v, 2) // PrepareCommit
	v = be.AppendUint32(v, 1)
	v = be.AppendUint16(v, 5)
	v = append(v, "topic"...)
	v = be.AppendUint32(v, 2)
	v = be.AppendUint32(v, 3)
	v = be.AppendUint32(v, 1)
	v = be.AppendUint64(v, 200)
	v = be.AppendUint64(v, 100)
	r, err := UnmarshalTxnRecord([]byte{0, 0, 0, 1, 'k'}, v)
	require.NoError(t, err)
	require.Equal(t, TxnRecord{TransactionalID: "k", State: TxnPrepareCommit, ProducerID: 42, PreviousProducerID: -1,
		NextProducerID: -1, ProducerEpoch: 1, LastProducerEpoch: -1, TimeoutMs: 30_000,
		Partitions: []TopicPartition{{Topic: "topic", Partition: 1}, {Topic: "topic", Partition: 3}}, StartMs: 100, LastUpdateMs: 200}, r)
}

func TestTxnRecordCorrupt(t *testing.T) {
	key, value := MarshalTxnRecord(TxnRecord{TransactionalID: "tx", State: TxnOngoing, Partitions: []TopicPartition{{Topic: "a", Partition: 1}},
		PreviousProducerID: -1, NextProducerID: -1, LastProducerEpoch: -1})
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"empty key", nil, value},
		{"key version", append([]byte{0, 1}, key[2:]...), value},
		{"key too long", append(key, 0), value},
		{"value version", append([]byte{0, 2}, value[2:]...), value},
		{"truncated value", key, value[:len(value)-3]},
		{"trailing bytes", key, append(value, 0)},
		{"state", key, func() []byte { v := append([]byte(nil), value...); v[16] = 9; return v }()},
		{"huge partition count", key, func() []byte { v := append([]byte(nil), value[:17]...); return append(v, 0xff, 0xff, 0xff, 0x0f) }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := UnmarshalTxnRecord(tc.key, tc.value)
			require.ErrorIs(t, err, ErrCorruptTxnRecord)
		})
	}
}

func FuzzUnmarshalTxnRecord(f *testing.F) {
	key, value := MarshalTxnRecord(TxnRecord{TransactionalID: "tx", State: TxnPrepareAbort, Partitions: []TopicPartition{{Topic: "a", Partition: 1}, {Topic: "b", Partition: 2}},
		PreviousProducerID: 3, NextProducerID: 4, LastProducerEpoch: 5})
	f.Add(key, value)
	f.Add(key, []byte(nil))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := UnmarshalTxnRecord(key, value)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptTxnRecord)
			return
		}
		// What decodes encodes to a record that decodes the same.
		k2, v2 := MarshalTxnRecord(r)
		r2, err := UnmarshalTxnRecord(k2, v2)
		require.NoError(t, err)
		if r.State == TxnDead {
			r.ProducerID, r.ProducerEpoch, r.TimeoutMs, r.Partitions, r.StartMs, r.LastUpdateMs = 0, 0, 0, nil, 0, 0
			r.PreviousProducerID, r.NextProducerID, r.LastProducerEpoch = -1, -1, -1
		}
		if r.State == TxnEmpty {
			r.Partitions = nil
		}
		require.Equal(t, r, r2)
	})
}
