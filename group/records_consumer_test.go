package group

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TopicID is FNV-1a 128 of the name, computed here by a separate
// implementation (offset basis 0x6c62272e07bb014262b821756295c58d, prime
// 2^88 + 0x13b): the id assign.Uniform gives a topic without one.
func TestTopicIDIsFNV1a128OfTheName(t *testing.T) {
	id := TopicID("t")
	assert.Equal(t, "d228cb697c1a8caf78912b704e4a9963", hex.EncodeToString(id[:]))
}

func consumerRecordSamples() []Record {
	g := func(typ int16, member string) ConsumerGroupKey {
		return ConsumerGroupKey{Type: typ, Group: "g", Member: member}
	}
	tp := []TopicIDPartitions{{TopicID: TopicID("t"), Partitions: []int32{0, 2}}}
	return []Record{
		EncodeConsumerGroup(g(ConsumerGroupMetadataType, ""), ConsumerGroupMetadataValue{Epoch: 5}),
		EncodeConsumerGroup(g(ConsumerGroupPartitionMetadataType, ""), ConsumerGroupPartitionMetadataValue{Epoch: 5,
			Topics: []ConsumerTopicMetadata{{ID: TopicID("t"), Name: "t", Partitions: 3}}}),
		EncodeConsumerGroup(g(ConsumerGroupMemberMetadataType, "m"), ConsumerGroupMemberMetadataValue{InstanceID: "i",
			SubscribedTopics: []string{"t"}, RebalanceTimeoutMs: 1000, ServerAssignor: "uniform"}),
		EncodeConsumerGroup(g(ConsumerGroupTargetAssignmentMetaType, ""), ConsumerGroupTargetAssignmentMetadataValue{AssignmentEpoch: 5}),
		EncodeConsumerGroup(g(ConsumerGroupTargetAssignmentType, "m"), ConsumerGroupTargetAssignmentMemberValue{Partitions: tp}),
		EncodeConsumerGroup(g(ConsumerGroupCurrentAssignmentType, "m"), ConsumerGroupCurrentMemberAssignmentValue{
			MemberEpoch: 5, PreviousMemberEpoch: 4, State: 1, Assigned: tp[:1:1]}),
		EncodeConsumerGroup(g(ConsumerGroupCurrentAssignmentType, "m"), nil),
	}
}

// The bytes of Kafka's ConsumerGroup*{Key,Value}.json schemas, worked out by
// hand: keys as the classic ones (int16 type, int16-length strings), values
// at version 0, flexible (compact lengths + 1, a tagged field section after
// each struct, Uuids as 16 bytes).
func TestConsumerRecordBytes(t *testing.T) {
	id := hex.EncodeToString(func() []byte { x := TopicID("t"); return x[:] }())
	want := []struct{ key, value string }{
		{"0003" + "000167", "0000" + "00000005" + "00"},
		{"0004" + "000167", "0000" + "00000005" + "02" + id + "0274" + "00000003" + "01" + "00" + "00"},
		{"0005" + "000167" + "00016d", "0000" + "0269" + "00" + "01" + "01" + "02" + "0274" + "00" + "000003e8" +
			"08" + hex.EncodeToString([]byte("uniform")) + "00"},
		{"0006" + "000167", "0000" + "00000005" + "00"},
		{"0007" + "000167" + "00016d", "0000" + "02" + id + "03" + "00000000" + "00000002" + "00" + "00"},
		{"0008" + "000167" + "00016d", "0000" + "00000005" + "00000004" + "01" + "02" + id + "03" + "00000000" + "00000002" + "00" +
			"01" + "00"},
		{"0008" + "000167" + "00016d", ""},
	}
	for i, r := range consumerRecordSamples() {
		assert.Equal(t, want[i].key, hex.EncodeToString(r.Key), "record %d key", i)
		if want[i].value == "" {
			assert.Nil(t, r.Value, "record %d is a tombstone", i)
			continue
		}
		assert.Equal(t, want[i].value, hex.EncodeToString(r.Value), "record %d value", i)
		d, err := Decode(r)
		require.NoError(t, err)
		assert.Equal(t, r, EncodeConsumerGroup(*d.ConsumerKey, d.ConsumerValue), "record %d decodes to what encodes it", i)
	}
}

// Kafka's later versions add tagged fields to these values (MetadataHash in
// ConsumerGroupMetadataValue, AssignmentEpochs in the current assignment);
// a reader that does not know them skips them.
func TestConsumerRecordTaggedFieldsSkipped(t *testing.T) {
	k := ConsumerGroupKey{Type: ConsumerGroupMetadataType, Group: "g"}
	r := EncodeConsumerGroup(k, ConsumerGroupMetadataValue{Epoch: 7})
	// Replace the empty tag section by one holding tag 0 (8 bytes).
	r.Value = append(r.Value[:len(r.Value)-1], 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 42)
	d, err := Decode(r)
	require.NoError(t, err)
	assert.Equal(t, ConsumerGroupMetadataValue{Epoch: 7}, d.ConsumerValue)

	r.Value[1] = 1 // value version 1 does not exist
	_, err = Decode(r)
	assert.ErrorIs(t, err, ErrCorruptRecord)
}

// A coordinator loaded from the log gives a member that must revoke
// partitions its rebalance timeout again: one that goes on heartbeating
// without revoking is fenced then, as before the reload.
func TestReloadedMemberMustStillRevokeInTime(t *testing.T) {
	h := consumerHarness(t)
	a := h.joinConsumer("a", "")
	require.Len(t, a.Assignment.Partitions["t"], 6)
	b := h.joinConsumer("b", "")
	require.NoError(t, b.Err)
	r := h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: a.MemberEpoch, Owned: owns(0, 1, 2, 3, 4, 5)})
	require.NoError(t, r.Err)
	require.Len(t, r.Assignment.Partitions["t"], 3, "a is asked to give up three")

	c, err := NewCoordinator(h.c.cfg, h.now)
	require.NoError(t, err)
	h.replayInto(c, 0)
	c.Loaded()
	h.c = c
	for range 6 { // a minute, the rebalance timeout, in heartbeats of 10 s
		h.advance(10 * time.Second)
		h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "b", MemberEpoch: b.MemberEpoch, Owned: owns()})
		r = h.cgh(ConsumerGroupHeartbeatRequest{MemberID: "a", MemberEpoch: a.MemberEpoch, Owned: owns(0, 1, 2, 3, 4, 5)})
	}
	assert.ErrorIs(t, r.Err, ErrUnknownMemberID, "a was fenced for not revoking")
}

// A member speaking the classic protocol keeps its session timeout and
// protocols in ClassicMemberMetadata, tag 0 of its subscription's record: a
// nullable struct in a tagged field, which Kafka writes as the field's size,
// a presence byte 1 and the struct. The bytes are worked out by hand from
// ConsumerGroupMemberMetadataValue.json.
func TestClassicMemberMetadataBytes(t *testing.T) {
	k := ConsumerGroupKey{Type: ConsumerGroupMemberMetadataType, Group: "g", Member: "m"}
	v := ConsumerGroupMemberMetadataValue{ClientID: "c", ClientHost: "h", SubscribedTopics: []string{"t"}, RebalanceTimeoutMs: 1000,
		Classic: &ClassicMemberMetadata{SessionTimeoutMs: 10000, SupportedProtocols: []Protocol{{Name: "range", Metadata: []byte{1, 2}}}}}
	r := EncodeConsumerGroup(k, v)
	want := "0000" + "00" + "00" + "0263" + "0268" + "02" + "0274" + "00" + "000003e8" + "00" +
		"01" + "00" + "11" + // one tagged field: tag 0, 17 bytes
		"01" + "00002710" + "02" + "06" + hex.EncodeToString([]byte("range")) + "03" + "0102" + "00" + "00"
	assert.Equal(t, want, hex.EncodeToString(r.Value))
	d, err := Decode(r)
	require.NoError(t, err)
	assert.Equal(t, v, d.ConsumerValue)

	r.Value = r.Value[:len(r.Value)-3] // the tagged field cut short
	_, err = Decode(r)
	assert.ErrorIs(t, err, ErrCorruptRecord)
}
