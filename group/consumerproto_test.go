package group

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every version decodes to what was encoded, less the fields it lacks;
// versions above 3 are read as 3 and may carry more bytes.
func TestConsumerProtocolVersions(t *testing.T) {
	s := Subscription{Topics: []string{"b", "a"}, UserData: []byte{1}, Owned: map[string][]int32{"a": {2, 0}},
		GenerationID: 7, RackID: "rack-1"}
	for v := int16(0); v <= ConsumerProtocolVersion; v++ {
		got, version, err := DecodeSubscription(s.Encode(v))
		require.NoError(t, err, "v%d", v)
		assert.Equal(t, v, version)
		want := Subscription{Topics: []string{"a", "b"}, UserData: []byte{1}, GenerationID: -1}
		if v >= 1 {
			want.Owned = map[string][]int32{"a": {0, 2}}
		}
		if v >= 2 {
			want.GenerationID = 7
		}
		if v >= 3 {
			want.RackID = "rack-1"
		}
		assert.Equal(t, want, got, "v%d", v)
	}
	future := append(s.Encode(3), 0xAB, 0xCD)
	future[1] = 4
	got, version, err := DecodeSubscription(future)
	require.NoError(t, err)
	assert.Equal(t, int16(4), version)
	assert.Equal(t, "rack-1", got.RackID)

	a := Assignment{Partitions: map[string][]int32{"t": {3, 1}, "u": {0}}}
	got2, _, err := DecodeAssignment(a.Encode(1))
	require.NoError(t, err)
	assert.Equal(t, a, got2)

	for _, bad := range [][]byte{nil, {0}, {0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 0, 0, 9}} {
		_, _, err := DecodeSubscription(bad)
		assert.ErrorIs(t, err, ErrBadConsumerProtocol, "%x", bad)
		_, _, err = DecodeAssignment(bad)
		assert.ErrorIs(t, err, ErrBadConsumerProtocol, "%x", bad)
	}
}

// FuzzConsumerProtocol: decoding never panics, and what decodes encodes
// back to bytes that decode the same.
func FuzzConsumerProtocol(f *testing.F) {
	s := Subscription{Topics: []string{"t"}, Owned: map[string][]int32{"t": {1}}, GenerationID: 2, RackID: "r"}
	for v := int16(0); v <= ConsumerProtocolVersion; v++ {
		f.Add(s.Encode(v))
		f.Add(Assignment{Partitions: map[string][]int32{"t": {1, 2}}, UserData: []byte{}}.Encode(v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, v, err := DecodeSubscription(b); err == nil {
			again, _, err := DecodeSubscription(s.Encode(v))
			require.NoError(t, err)
			s.Topics = sortedCopy(s.Topics)
			for topic, ps := range s.Owned {
				s.Owned[topic] = sortedCopy(ps)
			}
			assert.Equal(t, s, again)
		}
		if a, v, err := DecodeAssignment(b); err == nil {
			again, _, err := DecodeAssignment(a.Encode(v))
			require.NoError(t, err)
			assert.Equal(t, a, again)
		}
	})
}

func sortedCopy[T int32 | string](xs []T) []T {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
