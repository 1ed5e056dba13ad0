package group

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lag follows kadm's CalculateGroupLagWithStartOffsets: end
// minus committed; end minus log start when nothing is committed; never
// negative; an unknown partition is an error.
func TestLag(t *testing.T) {
	h := newHarness(t, Config{InitialRebalanceDelay: -1, Partitions: func(topic string) int32 { return map[string]int32{"t": 3, "gone": 1}[topic] }})
	id := classicConsumer(h, consumerSubscription("t"))
	r := commitOne("g", 1, id, 40)
	r.Topics[0].Partitions = append(r.Topics[0].Partitions, OffsetCommitPartition{Partition: 1, Offset: 90, LeaderEpoch: -1})
	r.Topics = append(r.Topics, OffsetCommitTopic{Name: "gone", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: 7, LeaderEpoch: -1}}})
	require.NoError(t, h.commit(r).Err)

	ends := map[int32][2]int64{0: {10, 100}, 1: {0, 80}, 2: {25, 60}}
	lag := h.c.Lag("g", func(topic string, p int32) (int64, int64, bool) {
		e, ok := ends[p]
		return e[0], e[1], ok && topic == "t" // "gone" was deleted since its commit
	})
	require.Len(t, lag, 4)
	assert.ErrorIs(t, lag[0].Err, ErrUnknownTopicOrPartition, "a deleted topic")
	assert.Equal(t, PartitionLag{Topic: "t", Partition: 0, Committed: 40, End: 100, Lag: 60}, lag[1])
	assert.Equal(t, PartitionLag{Topic: "t", Partition: 1, Committed: 90, End: 80, Lag: 0}, lag[2], "never negative")
	assert.Equal(t, PartitionLag{Topic: "t", Partition: 2, Committed: -1, End: 60, Lag: 35}, lag[3], "from the log start")
	assert.Empty(t, h.c.Lag("nobody", nil))
}
