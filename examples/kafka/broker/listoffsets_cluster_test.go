package broker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/segment"
)

// epochStartCluster is a fakeCluster whose leader knows where its epoch
// began, as a replicated leader does: the test sets it.
type epochStartCluster struct {
	*fakeCluster
	mu    sync.Mutex
	start int64
	taken bool // the leader took its epoch up
}

func (c *epochStartCluster) LeaderEpochStartOffset(topic string, partition, epoch int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start, c.taken
}

func (c *epochStartCluster) set(start int64, taken bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start, c.taken = start, taken
}

var _ broker.LeaderEpochStarts = (*epochStartCluster)(nil)

// A leader whose high watermark is below the offset where its leader
// epoch began (a leader just elected, or restarted, whose followers have
// not fetched in its epoch yet) does not know its high watermark, and
// answers ListOffsets OFFSET_NOT_AVAILABLE for the latest offset and for
// a timestamp it finds no record for below the high watermark, never an
// offset below what was acknowledged; the earliest offset, and a
// timestamp found below the high watermark, it answers (KIP-207; Kafka's
// Partition.fetchOffsetForTimestamp, checked by
// PartitionTest.testMonotonicOffsetsAfterLeaderChange). So does a broker that has not
// taken its leader epoch up yet. Once the high watermark reaches the
// epoch's start, the answers are the usual ones.
func TestListOffsetsWhileTheLeaderLearnsItsHighWatermark(t *testing.T) {
	var ec *epochStartCluster
	f, c := startClusterBrokerWith(t, func(f *fakeCluster) broker.Cluster {
		ec = &epochStartCluster{fakeCluster: f}
		return ec
	})
	p0, err := f.dir.Partition("t", 0)
	require.NoError(t, err)
	t0 := time.UnixMilli(1_700_000_000_000)
	for i := range 3 {
		_, err := p0.Append([]segment.Record{{Value: []byte("v"), Timestamp: t0.Add(time.Duration(i) * time.Second).UnixMilli()}})
		require.NoError(t, err)
	}
	_, err = p0.AdvanceHighWatermark(1)
	require.NoError(t, err)

	list := func(ts int64) kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		req.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "t", Partitions: []kmsg.ListOffsetsRequestTopicPartition{
			{Partition: 0, CurrentLeaderEpoch: 5, Timestamp: ts}}}}
		resp, err := c.Broker(1).Request(context.Background(), req)
		require.NoError(t, err)
		return resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	offsetOf := func(ts int64) int64 {
		t.Helper()
		p := list(ts)
		require.NoError(t, kerr.ErrorForCode(p.ErrorCode), "timestamp %d", ts)
		return p.Offset
	}
	notAvailable := func(ts int64, why string) {
		t.Helper()
		require.Equal(t, kerr.OffsetNotAvailable.Code, list(ts).ErrorCode, why)
	}
	const latest, earliest = -1, -2
	past := t0.Add(time.Minute).UnixMilli()

	ec.set(3, true) // the epoch began at 3; the high watermark is 1
	notAvailable(latest, "latest, with the high watermark below the epoch's start")
	require.Equal(t, int64(0), offsetOf(earliest))
	require.Equal(t, int64(0), offsetOf(t0.UnixMilli()), "a record found below the high watermark")
	notAvailable(t0.Add(2*time.Second).UnixMilli(), "a record found at or past the high watermark")
	notAvailable(past, "no record found")

	ec.set(1, false)
	notAvailable(latest, "a leader that has not taken its epoch up")

	ec.set(1, true) // the high watermark reached the epoch's start
	require.Equal(t, int64(1), offsetOf(latest))
	p := list(past)
	require.Equal(t, []int64{0, -1}, []int64{int64(p.ErrorCode), p.Offset}, "not found: offset -1, no error")
}
