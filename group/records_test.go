package group

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bytes of Kafka's schemas, worked out by hand from
// OffsetCommit{Key,Value}.json and GroupMetadata{Key,Value}.json; the test
// in examples/kafka holds the same records against franz-go's kmsg.
func TestRecordBytes(t *testing.T) {
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		require.NoError(t, err)
		return b
	}
	rec := EncodeOffsetCommit(OffsetCommitKey{Group: "g", Topic: "t", Partition: 1},
		OffsetCommitValue{Offset: 5, LeaderEpoch: 2, Metadata: "m", CommitTimestamp: 1000, ExpireTimestamp: -1})
	assert.Equal(t, unhex("0001"+"000167"+"000174"+"00000001"), rec.Key)
	assert.Equal(t, unhex("0003"+"0000000000000005"+"00000002"+"00016d"+"00000000000003e8"), rec.Value)

	rec = EncodeGroupMetadata(GroupMetadataKey{Group: "g"}, GroupMetadataValue{
		ProtocolType: "consumer", Generation: 1, Protocol: "range", Leader: "a", CurrentStateTimestamp: 7,
		Members: []MemberMetadata{{MemberID: "a", ClientID: "c", ClientHost: "h", RebalanceTimeout: 3, SessionTimeout: 4,
			Subscription: []byte{9}, Assignment: []byte{}}},
	})
	assert.Equal(t, unhex("0002"+"000167"), rec.Key)
	assert.Equal(t, unhex("0003"+"0008"+hex.EncodeToString([]byte("consumer"))+"00000001"+"000572616e6765"+"000161"+"0000000000000007"+
		"00000001"+"000161"+"ffff"+"000163"+"000168"+"00000003"+"00000004"+"0000000109"+"00000000"), rec.Value)
}

// Every value version decodes to what was encoded, less the fields the
// version lacks.
func TestRecordVersions(t *testing.T) {
	ov := OffsetCommitValue{Offset: 1 << 40, LeaderEpoch: 9, Metadata: "meta", CommitTimestamp: 77, ExpireTimestamp: 88}
	gv := GroupMetadataValue{ProtocolType: "consumer", Generation: 3, Protocol: "range", Leader: "a", CurrentStateTimestamp: 5,
		Members: []MemberMetadata{{MemberID: "a", GroupInstanceID: "i", ClientID: "c", ClientHost: "h", RebalanceTimeout: 1,
			SessionTimeout: 2, Subscription: []byte("s"), Assignment: []byte("x")}}}
	for v := int16(0); v <= maxValueVersion; v++ {
		d, err := Decode(Record{Key: OffsetCommitKey{Group: "g", Topic: "t"}.encode(0), Value: ov.encode(v)})
		require.NoError(t, err, "offset commit value v%d", v)
		want := ov
		if v < 3 {
			want.LeaderEpoch = -1
		}
		if v != 1 {
			want.ExpireTimestamp = -1
		}
		assert.Equal(t, &want, d.OffsetValue, "v%d", v)

		d, err = Decode(Record{Key: GroupMetadataKey{Group: "g"}.encode(), Value: gv.encode(v)})
		require.NoError(t, err, "group metadata value v%d", v)
		wantG := gv
		wantG.Members = []MemberMetadata{gv.Members[0]}
		if v < 1 {
			wantG.Members[0].RebalanceTimeout = -1
		}
		if v < 2 {
			wantG.CurrentStateTimestamp = -1
		}
		if v < 3 {
			wantG.Members[0].GroupInstanceID = ""
		}
		assert.Equal(t, &wantG, d.GroupValue, "v%d", v)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := EncodeOffsetCommit(OffsetCommitKey{Group: "g", Topic: "t"}, OffsetCommitValue{Offset: 1, LeaderEpoch: -1, ExpireTimestamp: -1})
	cases := map[string]Record{
		"empty key":            {},
		"key cut short":        {Key: good.Key[:len(good.Key)-1]},
		"key with extra bytes": {Key: append(append([]byte{}, good.Key...), 0)},
		"value cut short":      {Key: good.Key, Value: good.Value[:len(good.Value)-1]},
		"value version 5":      {Key: good.Key, Value: append([]byte{0, 5}, good.Value[2:]...)},
		"negative key version": {Key: []byte{0xff, 0xff}},
		"member count beyond the record": {Key: GroupMetadataKey{Group: "g"}.encode(),
			Value: []byte{0, 3, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}},
		"negative string length": {Key: []byte{0, 1, 0xff, 0xfe}},
	}
	for name, r := range cases {
		_, err := Decode(r)
		assert.ErrorIs(t, err, ErrCorruptRecord, name)
	}
	_, err := Decode(Record{Key: []byte{0, 9, 0, 1, 'g'}})
	assert.ErrorIs(t, err, ErrUnknownRecordType)
}

// FuzzDecode: Decode never panics, and whatever it accepts encodes back at
// its version to a record that decodes the same.
func FuzzDecode(f *testing.F) {
	ok := OffsetCommitKey{Group: "g", Topic: "t", Partition: 2}
	ov := OffsetCommitValue{Offset: 5, LeaderEpoch: 1, Metadata: "m", CommitTimestamp: 9, ExpireTimestamp: 10}
	gv := GroupMetadataValue{ProtocolType: "consumer", Generation: 1, Protocol: "range", Leader: "a",
		Members: []MemberMetadata{{MemberID: "a", GroupInstanceID: "i", Subscription: []byte{1}, Assignment: []byte{2}}}}
	for v := int16(0); v <= maxValueVersion; v++ {
		f.Add(ok.encode(1), ov.encode(v), false)
		f.Add(GroupMetadataKey{Group: "g"}.encode(), gv.encode(v), false)
	}
	f.Add(ok.encode(0), []byte(nil), true)
	for _, r := range consumerRecordSamples() {
		f.Add(r.Key, r.Value, r.Value == nil)
	}
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		} else if value == nil {
			value = []byte{}
		}
		d, err := Decode(Record{Key: key, Value: value})
		if err != nil {
			return
		}
		again, err := Decode(reencode(d))
		require.NoError(t, err)
		assert.Equal(t, d, again)
	})
}

// reencode encodes a decoded record at the versions it was read with.
func reencode(d Decoded) Record {
	var r Record
	switch {
	case d.OffsetKey != nil:
		r.Key = d.OffsetKey.encode(d.KeyVersion)
		if d.OffsetValue != nil {
			r.Value = d.OffsetValue.encode(d.ValueVersion)
		}
	case d.ConsumerKey != nil:
		return EncodeConsumerGroup(*d.ConsumerKey, d.ConsumerValue)
	default:
		r.Key = d.GroupKey.encode()
		if d.GroupValue != nil {
			r.Value = d.GroupValue.encode(d.ValueVersion)
		}
	}
	return r
}
