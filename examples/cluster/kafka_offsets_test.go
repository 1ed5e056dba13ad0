// The tests start real node processes and signal them: Unix only.

//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/replica"
)

// Every node is SIGKILLed with every replica holding every acknowledged
// record, and all are restarted. A restarted leader's high watermark is
// the one it last checkpointed (every minute), far below what was
// acknowledged, until its followers fetch in its new epoch: meanwhile its
// broker answers ListOffsets latest OFFSET_NOT_AVAILABLE (KIP-207;
// Kafka's Partition.fetchOffsetForTimestamp), never an offset below what
// the cluster acknowledged. Before, it answered that high watermark (0).
// The topic allows unclean elections: without them no partition gets a
// leader after every node crashed (issue 21, part 4), and with every
// replica alike none loses anything.
func TestListOffsetsAfterEveryNodeRestarts(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic, partitions, records = "restarted", 3, 30
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: partitions, ReplicationFactor: 3, Unclean: true})
	waitISR(t, s, cl, topic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acked := map[int32]int64{}
	for p := range int32(partitions) {
		for i := range records {
			res, err := cl.produceTo(ctx, topic, p, "all", fmt.Appendf(nil, "%d-%d", p, i))
			for errors.Is(err, replica.ErrUnknownTopicOrPartition) && ctx.Err() == nil {
				// The metadata names the leader before it added its replica.
				time.Sleep(50 * time.Millisecond)
				res, err = cl.produceTo(ctx, topic, p, "all", fmt.Appendf(nil, "%d-%d", p, i))
			}
			require.NoError(t, err)
			acked[p] = res.LastOffset + 1
		}
	}
	waitFor(t, 20*time.Second, "every replica to hold every record below its high watermark", func() (bool, string) {
		var md metadata
		if err := cl.getJSON(ctx, 1, "/status", &md); err != nil {
			return false, err.Error()
		}
		for p := range int32(partitions) {
			pv := md.partition(topic, p)
			if pv == nil || len(pv.Logs) != 3 {
				return false, fmt.Sprintf("partition %d: %+v", p, pv)
			}
			for _, l := range pv.Logs {
				if l.LogEnd != acked[p] || l.HighWatermark != acked[p] {
					return false, fmt.Sprintf("partition %d: %+v", p, pv.Logs)
				}
			}
		}
		return true, ""
	})
	for _, id := range s.ids() {
		require.NoError(t, s.signal(id, syscall.SIGKILL))
	}
	for _, id := range s.ids() {
		require.NoError(t, s.startNode(id))
	}

	kc := newKgo(t, s)
	answered, notAvailable := map[int32]int{}, 0
	var below []string
	waitFor(t, 45*time.Second, "every partition's leader to answer ListOffsets latest", func() (bool, string) {
		for p := range int32(partitions) {
			for _, id := range s.ids() {
				lp, err := requestListOffsets(kc, id, topic, p, -1)
				if err != nil {
					continue // a connection to a node that restarted
				}
				switch lp.ErrorCode {
				case 0:
					answered[p]++
					if lp.Offset < acked[p] {
						below = append(below, fmt.Sprintf("partition %d: node %d answered %d, %d acknowledged", p, id, lp.Offset, acked[p]))
					}
				case kerr.OffsetNotAvailable.Code:
					notAvailable++
				}
			}
		}
		return len(answered) == partitions, fmt.Sprintf("answered %v", answered)
	})
	t.Logf("after the restart: %d OFFSET_NOT_AVAILABLE answers before every partition's leader answered; answers below the acknowledged end: %d", notAvailable, len(below))
	require.Empty(t, below, "ListOffsets latest never answers below what was acknowledged")
}
