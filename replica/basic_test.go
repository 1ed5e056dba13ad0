package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Three replicas, acks=all: the result comes once both followers fetched
// the batch and the high watermark passed it; every log holds it.
func TestReplicateAcksAll(t *testing.T) {
	c := newCluster(t, 1, 2, 3).start(nil)
	c.elect(1)
	c.stabilize()
	id, err := c.produce(1, AcksAll, "a", "b")
	require.NoError(t, err)
	c.stabilize()
	r := c.result(id)
	require.NoError(t, r.Err)
	require.EqualValues(t, 0, r.BaseOffset)
	require.EqualValues(t, 1, r.LastOffset)
	for _, id := range []NodeID{1, 2, 3} {
		require.Equal(t, []string{"a", "b"}, c.values(id), "node %d", id)
	}
	require.EqualValues(t, 2, c.hw(1))
	c.tick(10) // followers learn the high watermark from their next fetch
	c.requireLogsMatch(1, 2, 3)
	require.EqualValues(t, 2, c.hw(2))
	require.EqualValues(t, 2, c.hw(3))
}
