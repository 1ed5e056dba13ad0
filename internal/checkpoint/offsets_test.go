package checkpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOffsetsRoundTripSorted(t *testing.T) {
	m, dir := newMemDir(t)
	name := dir + "/recovery-point-offset-checkpoint"
	offsets := map[TopicPartition]int64{
		{Topic: "orders", Partition: 10}: 7,
		{Topic: "orders", Partition: 2}:  1042,
		{Topic: "audit", Partition: 0}:   0,
		{Topic: "orders", Partition: 0}:  -1,
	}
	require.NoError(t, WriteOffsets(m, name, offsets))
	require.Equal(t, "0\n4\naudit 0 0\norders 0 -1\norders 2 1042\norders 10 7\n", string(mustRead(t, m, name)),
		"sorted by topic, then numerically by partition")

	got, err := ReadOffsets(m, name)
	require.NoError(t, err)
	require.Equal(t, offsets, got)
}

// Kafka splits offset entries on any run of white space
// (OffsetCheckpointFile.Formatter, WHITESPACES_PATTERN = "\\s+").
func TestReadOffsetsSplitsOnWhiteSpaceLikeKafka(t *testing.T) {
	m, dir := newMemDir(t)
	putFile(t, m, dir+"/cp", "0\n2\ntp1  1\t5\ntp1 2 2\n")
	got, err := ReadOffsets(m, dir+"/cp")
	require.NoError(t, err)
	require.Equal(t, map[TopicPartition]int64{{Topic: "tp1", Partition: 1}: 5, {Topic: "tp1", Partition: 2}: 2}, got)
}

func TestReadOffsetsRejectsBadEntries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry string
	}{
		{"two fields", "orders 1"},
		{"four fields", "orders 1 2 3"},
		{"partition not a number", "orders p1 2"},
		{"negative partition", "orders -1 2"},
		{"partition beyond int32", "orders 2147483648 2"},
		{"offset not a number", "orders 1 0x10"},
		{"offset beyond int64", "orders 1 9223372036854775808"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, dir := newMemDir(t)
			putFile(t, m, dir+"/cp", "0\n2\nok 0 1\n"+tc.entry+"\n")
			_, err := ReadOffsets(m, dir+"/cp")
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, "line 4")
		})
	}

	m, dir := newMemDir(t)
	putFile(t, m, dir+"/cp", "0\n2\norders 0 1\norders 0 5\n")
	_, err := ReadOffsets(m, dir+"/cp")
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "orders-0 listed twice")

	putFile(t, m, dir+"/cp", "1\n0\n")
	_, err = ReadOffsets(m, dir+"/cp")
	require.ErrorIs(t, err, ErrCorrupt, "offset checkpoints are version 0")
}

func TestWriteOffsetsRejectsTopicsThatCannotBeReadBack(t *testing.T) {
	m, dir := newMemDir(t)
	for _, topic := range []string{"", "my topic", "tab\ttopic"} {
		err := WriteOffsets(m, dir+"/cp", map[TopicPartition]int64{{Topic: topic, Partition: 0}: 1})
		require.ErrorIs(t, err, ErrInvalidEntry, "topic %q", topic)
	}
}
