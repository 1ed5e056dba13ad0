package replica

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
)

// sampleMessages has one message of every kind, with values at the edges
// of their types.
func sampleMessages() []Message {
	h := func(from, to NodeID) Header { return Header{From: from, To: to, Topic: "orders.v2", Partition: 7} }
	return []Message{
		&Fetch{Header: h(2, 1), ID: math.MaxUint64, CurrentLeaderEpoch: 5, FetchOffset: 1 << 40, LastFetchedEpoch: -1, LogStartOffset: 3, SyncedOffset: 1<<40 - 2, MaxBytes: 1 << 20, MaxWait: 5, BrokerEpoch: math.MaxInt64},
		&FetchResponse{Header: h(1, 2), ID: 9, Err: kafkaerr.None, Leader: 1, LeaderEpoch: 5, FetchOffset: 10, HighWatermark: 8, LogStartOffset: 0, LogEndOffset: 12,
			DivergingEpoch: -1, DivergingEndOffset: -1, Records: []byte("batches")},
		&FetchResponse{Header: h(1, 2), Err: ErrFencedLeaderEpoch, Leader: NoNode, LeaderEpoch: math.MaxInt32, DivergingEpoch: 3, DivergingEndOffset: math.MaxInt64},
		&LeaderAndISR{Header: h(NoNode, 3), BrokerEpoch: 12, ControllerEpoch: 4, Leader: 1, LeaderEpoch: 6, PartitionEpoch: 11,
			Replicas: []NodeID{1, 2, 3}, ISR: []NodeID{1, 3}, Adding: []NodeID{3}, Removing: nil},
		&AlterPartition{Header: h(1, NoNode), BrokerEpoch: 7, LeaderEpoch: 6, PartitionEpoch: 11, ISR: []ISRMember{{1, 7}, {2, NoBrokerEpoch}}},
		&AlterPartition{Header: h(1, NoNode), LeaderEpoch: 6},
		&AlterPartitionResponse{Header: h(NoNode, 1), Err: kafkaerr.None, Leader: 1, LeaderEpoch: 6, PartitionEpoch: 12, ISR: []NodeID{1, 2}},
		&AlterPartitionResponse{Header: h(NoNode, 1), Err: ErrInvalidUpdateVersion, Leader: NoNode},
		&Produce{Header: h(99, 1), ID: 1, Acks: AcksAll, Timeout: 300, Batch: []byte("a batch")},
		&ProduceResult{Header: h(1, 99), ID: 1, BaseOffset: 100, LastOffset: 109},
		&ProduceResult{Header: h(1, 99), ID: 2, Err: &NotLeaderError{Leader: 3, LeaderEpoch: 7}},
		&ProduceResult{Header: h(1, 99), ID: 3, Err: ErrNotEnoughReplicasAfterAppend, BaseOffset: 5, LastOffset: 5},
		&Envelope{Header: Header{From: 2, To: 1}, Messages: []Message{
			&Fetch{Header: h(2, 1), ID: 1, LastFetchedEpoch: -1},
			&Fetch{Header: Header{From: 2, To: 1, Topic: "payments", Partition: 0}, ID: 4, FetchOffset: 99, LastFetchedEpoch: 3},
		}},
	}
}

func TestEncodingRoundTrips(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := m.MarshalBinary()
		require.NoError(t, err)
		got, err := Decode(b)
		require.NoError(t, err, "%T", m)
		require.Equal(t, m, got)
		again, err := got.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, again, "%T encodes the same twice", m)
	}
}

// Every proper prefix of an encoding, and the encoding with a byte more,
// is an error that names what was wrong, and the receiver keeps its value.
func TestDecodingTruncatedOrLongerInput(t *testing.T) {
	for _, m := range sampleMessages() {
		b, err := m.MarshalBinary()
		require.NoError(t, err)
		for n := range len(b) {
			_, err := Decode(b[:n])
			require.ErrorIs(t, err, ErrInvalidMessage, "%T cut to %d of %d bytes", m, n, len(b))
		}
		_, err = Decode(append(b, 0))
		require.ErrorContains(t, err, "trailing")

		dst, err := Decode(b)
		require.NoError(t, err)
		require.Error(t, dst.UnmarshalBinary(b[:len(b)-1]))
		require.Equal(t, m, dst, "a failed UnmarshalBinary leaves %T unchanged", m)
	}
}

func TestDecodingRejectsBadInput(t *testing.T) {
	fetch, err := (&Fetch{Header: Header{Topic: "t"}}).MarshalBinary()
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		in   []byte
		msg  string
	}{
		{"empty", nil, "empty"},
		{"unknown kind", []byte{200, 0}, "unknown message kind"},
		{"future version", append([]byte{fetch[0], 9}, fetch[2:]...), "encoding version"},
		{"kind of another type", append([]byte{byte(kindProduce)}, fetch[1:]...), "trailing"},
		{"huge length", []byte{byte(kindProduce), encodingVersion, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, "bytes left"},
		{"bad varint", []byte{byte(kindFetch), encodingVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "varint"},
		{"node out of range", []byte{byte(kindFetch), encodingVersion, 0xfe, 0xff, 0xff, 0xff, 0x7f}, "32 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in)
			require.ErrorIs(t, err, ErrInvalidMessage)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	var m Fetch
	require.ErrorIs(t, m.UnmarshalBinary(make([]byte, MaxMessageBytes+1)), ErrInvalidMessage, "oversized input")
	tooMany := []byte{byte(kindLeaderAndISR), encodingVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x03}
	_, err = Decode(tooMany)
	require.ErrorContains(t, err, "nodes in a list")
	tooMany = []byte{byte(kindAlterPartition), encodingVersion, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x03}
	_, err = Decode(tooMany)
	require.ErrorContains(t, err, "ISR members")
	long := make([]byte, maxTopicBytes+1)
	b, err := (&Fetch{Header: Header{Topic: string(long)}}).MarshalBinary()
	require.NoError(t, err)
	_, err = Decode(b)
	require.ErrorContains(t, err, "topic of 250 bytes")
}

func TestCodesAndErrors(t *testing.T) {
	require.NoError(t, kafkaerr.None.Err())
	require.Equal(t, kafkaerr.None, CodeOf(nil))
	require.Equal(t, ErrFencedLeaderEpoch, CodeOf(fmt.Errorf("fetch at epoch 3: %w", ErrFencedLeaderEpoch.Err())))
	require.Equal(t, idempotence.ErrOutOfOrderSequence, CodeOf(fmt.Errorf("produce: %w", idempotence.ErrOutOfOrderSequence)),
		"a producer-state refusal goes on the wire with its own code")
	require.Equal(t, ErrNotLeaderOrFollower, CodeOf(&NotLeaderError{Leader: 2}))
	require.ErrorIs(t, &NotLeaderError{Leader: 2}, ErrNotLeaderOrFollower)
	require.Equal(t, ErrKafkaStorageError, CodeOf(ErrFailed), "an error without a code is a storage error on the wire")
	unknown := Code(999).Err()
	require.Equal(t, Code(999), CodeOf(unknown))
	require.ErrorContains(t, unknown, "999")
}

// FuzzDecode: any input decodes to a message that encodes back to the
// same bytes, or fails with ErrInvalidMessage; nothing panics.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := m.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidMessage)
			return
		}
		again, err := m.MarshalBinary()
		require.NoError(t, err)
		m2, err := Decode(again)
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}
