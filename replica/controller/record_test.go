package controller

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// sampleRecords are records of every kind, the seeds of FuzzDecodeRecord.
func sampleRecords() []Record {
	return append([]Record{
		&ControllerRecord{Stamp{3}, 7},
		&RegisterRecord{Stamp{3}, 1, 12, 1<<63 + 5, true, []string{"orders", "__consumer_offsets"}, []TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "o", Partition: 7}}},
		&OfflineRecord{Stamp{3}, 2, 13, []TopicPartition{{Topic: "orders", Partition: 5}}},
		&OfflineRecord{Stamp{3}, 2, 14, nil},
		&FenceRecord{Stamp{3}, 1, 12},
		&UnfenceRecord{Stamp{3}, 2, 13},
		&ShutdownRecord{Stamp{3}, 2, 13},
		&TopicRecord{Stamp{3}, "orders", [16]byte{1, 2, 15: 0xff}, 6, true},
		&ConfigRecord{Stamp{3}, "orders", "cleanup.policy", ptr("compact,delete")},
		&ConfigRecord{Stamp{3}, "orders", "retention.ms", nil},
		&RemoveTopicRecord{Stamp{3}, "orders", [16]byte{1, 2, 15: 0xff}},
		&PartitionRecord{Stamp: Stamp{3}, Topic: "orders", Partition: 5, Replicas: nodes(1, 2, 3),
			ISR: nodes(1), ELR: nodes(2), Adding: nodes(3), Removing: nodes(2), Leader: 1, LeaderEpoch: 4, PartitionEpoch: 9, Recovering: true},
		&PartitionRecord{Stamp: Stamp{0}, Topic: "o", Leader: replica.NoNode},
	}, securityRecords()...)
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords() {
		b, err := r.MarshalBinary()
		require.NoError(t, err)
		d, err := DecodeRecord(b)
		require.NoError(t, err)
		require.Equal(t, r, d)
		for i := range b { // every truncation is an error, not a panic
			_, err := DecodeRecord(b[:i])
			require.ErrorIs(t, err, ErrInvalidRecord, "%T cut at %d", r, i)
		}
		_, err = DecodeRecord(append(b, 0))
		require.ErrorIs(t, err, ErrInvalidRecord, "trailing bytes")
	}
}

func TestRecordDecodeRefusesBadInput(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":          nil,
		"unknown kind":   {99, 0, 0},
		"future version": {byte(kindFence), recordVersion + 1, 0, 0, 0},
		"flag 2":         {byte(kindRegister), recordVersion, 0, 2, 2, 2, 2},
		"huge list":      {byte(kindPartition), recordVersion, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f},
		"value flag 2":   {byte(kindConfig), recordVersion, 0, 1, 't', 1, 'n', 2},
		"short topic id": {byte(kindRemoveTopic), recordVersion, 0, 1, 't', 1, 2, 3},
		"version 3":      {byte(kindFence), 3, 0, 0, 0},
	} {
		_, err := DecodeRecord(b)
		require.ErrorIs(t, err, ErrInvalidRecord, name)
	}
	_, err := (&TopicRecord{Name: strings.Repeat("x", 250)}).MarshalBinary()
	require.ErrorIs(t, err, ErrInvalidRecord, "a topic name Kafka would refuse")
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			r2, err := DecodeRecord(again)
			if err != nil {
				t.Fatalf("re-encoding does not decode: %v", err)
			}
			require.Equal(t, r, r2)
		}
		// Applying arbitrary records never panics; refusals are errors.
		s := NewState()
		_ = s.Apply(&ControllerRecord{Stamp: Stamp{r.ControllerEpoch() - 1}})
		_ = s.Apply(&TopicRecord{Stamp: s.stampOf(), Name: "o", Partitions: 1})
		_ = s.Apply(r)
	})
}

func (s *State) stampOf() Stamp { return Stamp{s.Epoch} }

func ptr(s string) *string { return &s }
