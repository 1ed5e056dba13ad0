package kafka

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/group"
)

// These tests hold the records of Strand's offsets log against franz-go's
// kmsg, which encodes Kafka's __consumer_offsets keys and values field by
// field from Kafka's JSON schemas: Strand's records must be the bytes kmsg
// writes, and Strand must read what kmsg writes at every version.

func TestOffsetCommitRecordBytes(t *testing.T) {
	key := group.OffsetCommitKey{Group: "orders-consumers", Topic: "orders", Partition: 7}
	val := group.OffsetCommitValue{Offset: 123456789, LeaderEpoch: 4, Metadata: "meta", CommitTimestamp: 1767225600000, ExpireTimestamp: -1}
	rec := group.EncodeOffsetCommit(key, val)

	k := kmsg.NewOffsetCommitKey()
	k.Version, k.Group, k.Topic, k.Partition = 1, key.Group, key.Topic, key.Partition
	assert.Equal(t, k.AppendTo(nil), rec.Key)
	v := kmsg.NewOffsetCommitValue()
	v.Version, v.Offset, v.LeaderEpoch, v.Metadata, v.CommitTimestamp = 3, val.Offset, val.LeaderEpoch, val.Metadata, val.CommitTimestamp
	assert.Equal(t, v.AppendTo(nil), rec.Value)

	val.ExpireTimestamp = 1767229200000
	rec = group.EncodeOffsetCommit(key, val)
	v1 := kmsg.NewOffsetCommitValue()
	v1.Version, v1.Offset, v1.Metadata, v1.CommitTimestamp, v1.ExpireTimestamp = 1, val.Offset, val.Metadata, val.CommitTimestamp, val.ExpireTimestamp
	assert.Equal(t, v1.AppendTo(nil), rec.Value, "a commit with its own expiry is written as version 1")

	tomb := group.EncodeOffsetTombstone(key)
	assert.Equal(t, k.AppendTo(nil), tomb.Key)
	assert.Nil(t, tomb.Value)
}

func TestOffsetCommitRecordReadsEveryVersion(t *testing.T) {
	for kv := int16(0); kv <= 1; kv++ {
		for vv := int16(0); vv <= 4; vv++ {
			k := kmsg.NewOffsetCommitKey()
			k.Version, k.Group, k.Topic, k.Partition = kv, "g", "t", 3
			v := kmsg.NewOffsetCommitValue()
			v.Version, v.Offset, v.LeaderEpoch, v.Metadata, v.CommitTimestamp, v.ExpireTimestamp = vv, 42, 5, "x", 1000, 2000
			v.TopicID = [16]byte{1, 2, 3} // a tagged field of version 4, which Strand skips
			d, err := group.Decode(group.Record{Key: k.AppendTo(nil), Value: v.AppendTo(nil)})
			require.NoError(t, err, "key v%d value v%d", kv, vv)
			want := group.OffsetCommitValue{Offset: 42, LeaderEpoch: -1, Metadata: "x", CommitTimestamp: 1000, ExpireTimestamp: -1}
			if vv >= 3 {
				want.LeaderEpoch = 5
			}
			if vv == 1 {
				want.ExpireTimestamp = 2000
			}
			assert.Equal(t, &group.OffsetCommitKey{Group: "g", Topic: "t", Partition: 3}, d.OffsetKey)
			assert.Equal(t, &want, d.OffsetValue, "value v%d", vv)
			assert.Equal(t, vv, d.ValueVersion)
		}
	}
}

func TestGroupMetadataRecordBytes(t *testing.T) {
	val := group.GroupMetadataValue{
		ProtocolType: "consumer", Generation: 12, Protocol: "cooperative-sticky", Leader: "m1-uuid", CurrentStateTimestamp: 1767225600000,
		Members: []group.MemberMetadata{
			{MemberID: "m1-uuid", GroupInstanceID: "pod-1", ClientID: "m1", ClientHost: "/10.0.0.1", RebalanceTimeout: 300000, SessionTimeout: 45000,
				Subscription: []byte{0, 1, 2}, Assignment: []byte{3, 4}},
			{MemberID: "m2-uuid", ClientID: "m2", ClientHost: "/10.0.0.2", RebalanceTimeout: 300000, SessionTimeout: 45000,
				Subscription: []byte{5}, Assignment: []byte{}},
		},
	}
	rec := group.EncodeGroupMetadata(group.GroupMetadataKey{Group: "orders-consumers"}, val)
	k := kmsg.NewGroupMetadataKey()
	k.Version, k.Group = 2, "orders-consumers"
	assert.Equal(t, k.AppendTo(nil), rec.Key)
	assert.Equal(t, kmsgGroupValue(3, val).AppendTo(nil), rec.Value)

	empty := group.GroupMetadataValue{CurrentStateTimestamp: 5}
	rec = group.EncodeGroupMetadata(group.GroupMetadataKey{Group: "g"}, empty)
	assert.Equal(t, kmsgGroupValue(3, empty).AppendTo(nil), rec.Value, "protocol and leader of an empty group are null")

	for vv := int16(0); vv <= 4; vv++ {
		d, err := group.Decode(group.Record{Key: k.AppendTo(nil), Value: kmsgGroupValue(vv, val).AppendTo(nil)})
		require.NoError(t, err, "value v%d", vv)
		want := val
		want.Members = append([]group.MemberMetadata(nil), val.Members...)
		if vv < 2 {
			want.CurrentStateTimestamp = -1
		}
		for i := range want.Members {
			if vv < 3 {
				want.Members[i].GroupInstanceID = ""
			}
			if vv < 1 {
				want.Members[i].RebalanceTimeout = -1
			}
		}
		assert.Equal(t, &want, d.GroupValue, "value v%d", vv)
	}
}

func kmsgGroupValue(version int16, v group.GroupMetadataValue) *kmsg.GroupMetadataValue {
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	out := kmsg.NewGroupMetadataValue()
	out.Version, out.ProtocolType, out.Generation = version, v.ProtocolType, v.Generation
	out.Protocol, out.Leader, out.CurrentStateTimestamp = nullable(v.Protocol), nullable(v.Leader), v.CurrentStateTimestamp
	for _, m := range v.Members {
		km := kmsg.NewGroupMetadataValueMember()
		km.MemberID, km.InstanceID, km.ClientID, km.ClientHost = m.MemberID, nullable(m.GroupInstanceID), m.ClientID, m.ClientHost
		km.RebalanceTimeoutMillis, km.SessionTimeoutMillis, km.Subscription, km.Assignment = m.RebalanceTimeout, m.SessionTimeout, m.Subscription, m.Assignment
		out.Members = append(out.Members, km)
	}
	return &out
}

// The consumer protocol inside JoinGroup and SyncGroup: Strand's bytes are
// kmsg's, and Strand reads kmsg's at every version.
func TestConsumerProtocolBytes(t *testing.T) {
	rack := "rack-1"
	for v := int16(0); v <= group.ConsumerProtocolVersion; v++ {
		k := kmsg.NewConsumerMemberMetadata()
		k.Version, k.Topics, k.UserData = v, []string{"a", "b"}, []byte{9}
		k.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "a", Partitions: []int32{0, 2}}, {Topic: "b", Partitions: []int32{1}}}
		k.Generation, k.Rack = 5, &rack
		s := group.Subscription{Topics: []string{"b", "a"}, UserData: []byte{9}, Owned: map[string][]int32{"a": {2, 0}, "b": {1}},
			GenerationID: 5, RackID: rack}
		assert.Equal(t, k.AppendTo(nil), s.Encode(v), "subscription v%d", v)
		got, _, err := group.DecodeSubscription(k.AppendTo(nil))
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"a", "b"}, got.Topics)

		ka := kmsg.NewConsumerMemberAssignment()
		ka.Version = v
		ka.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "a", Partitions: []int32{3, 1}}, {Topic: "b", Partitions: []int32{0}}}
		a := group.Assignment{Partitions: map[string][]int32{"a": {3, 1}, "b": {0}}}
		assert.Equal(t, ka.AppendTo(nil), a.Encode(v), "assignment v%d", v)
		gotA, _, err := group.DecodeAssignment(ka.AppendTo(nil))
		require.NoError(t, err)
		assert.Equal(t, a, gotA)
	}
}
