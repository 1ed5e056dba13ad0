package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// levels returns the level of each line a text handler wrote.
func levels(out string) []string {
	var ls []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if i := strings.Index(line, "level="); i >= 0 {
			ls = append(ls, strings.Fields(line[i+len("level="):])[0])
		}
	}
	return ls
}

// A replica's failures are logged where an operator sees them: a failed
// partition at ERROR, once however many messages it refuses; a message
// refused for another reason than the protocol's normal course at WARN;
// stale messages and messages of other epochs at DEBUG, below the default
// level. The errors of a Batch's messages, joined, are each classed.
func TestReplicaStepErrorsAreLoggedByWhatTheyMean(t *testing.T) {
	var out bytes.Buffer
	n := &Node{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	failed := fmt.Errorf("%w: %w", replica.ErrFailed, errors.New("write t-0: no space left on device"))
	n.stepErrors(errors.Join(
		fmt.Errorf("%w: fetch response 3 from node 2", replica.ErrStale),
		fmt.Errorf("%w: LeaderAndISR for broker epoch 1, node 1 is in 4", replica.ErrStaleBrokerEpoch),
		failed,
		fmt.Errorf("%w: batch for node 2 stepped on node 1", replica.ErrInvalidMessage),
	))
	n.stepErrors(failed)
	require.Equal(t, []string{"DEBUG", "DEBUG", "ERROR", "WARN"}, levels(out.String()), out.String())
}

// failingLog is a replica log whose appends fail.
type failingLog struct{ replica.Log }

func (failingLog) AppendReplicated(segment.Batch) (log.AppendResult, error) {
	return log.AppendResult{}, errors.New("no space left on device")
}

// A write that fails makes the partition fail, which the replica package
// tells nobody: the log the replica writes through logs it at ERROR with
// the partition, takes the replica offline, and passes the error on
// unchanged.
func TestReplicaLogFailuresAreLoggedAtError(t *testing.T) {
	var out bytes.Buffer
	tp := controller.TopicPartition{Topic: "t", Partition: 3}
	var offline []controller.TopicPartition
	l := newReplicaLog(failingLog{}, tp, slog.New(slog.NewTextHandler(&out, nil)), func(tp controller.TopicPartition) { offline = append(offline, tp) })
	_, err := l.AppendReplicated(segment.Batch{})
	require.EqualError(t, err, "no space left on device")
	require.Equal(t, []string{"ERROR"}, levels(out.String()))
	require.Contains(t, out.String(), "partition=t-3")
	require.Equal(t, []controller.TopicPartition{tp}, offline)
}

// A fetch for a partition the node has no replica of (it has not applied
// the topic's metadata yet) is answered UNKNOWN_TOPIC_OR_PARTITION, as a
// Kafka broker answers it, in a response the follower takes (its fetch's
// id, offset and leader epoch): it backs off and fetches again, rather
// than waiting its RequestTimeout for an answer that never comes. The
// other messages of the Batch go to the replicas.
func TestFetchForAnUnknownPartitionIsAnswered(t *testing.T) {
	s := newScriptedController(t)
	tr, refused := &recorder{}, &refusals{}
	n := startScriptedNode(t, s, vfs.NewMem(), 1, tr, refused)
	h := replica.Header{From: 2, To: 1, Topic: "t", Partition: 4}
	f := &replica.Fetch{Header: h, ID: 9, CurrentLeaderEpoch: 3, FetchOffset: 17}
	stale := &replica.FetchResponse{Header: h, ID: 1}
	b, err := (&replica.Envelope{Header: replica.Header{From: 2, To: 1}, Messages: []replica.Message{f, stale}}).MarshalBinary()
	require.NoError(t, err)
	require.NoError(t, n.Receive(context.Background(), b))
	waitFor(t, 5*time.Second, "the answer sent", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.sent) > 0
	})
	tr.mu.Lock()
	fr, ok := tr.sent[0].(*replica.FetchResponse)
	tr.mu.Unlock()
	require.True(t, ok)
	require.Equal(t, replica.Header{From: 1, To: 2, Topic: "t", Partition: 4}, fr.Header)
	require.Equal(t, []any{uint64(9), replica.ErrUnknownTopicOrPartition, int32(3), int64(17)},
		[]any{fr.ID, fr.Err, fr.LeaderEpoch, fr.FetchOffset})
	waitFor(t, 5*time.Second, "the replicas to refuse the response for an unknown partition", func() bool {
		return refused.any(replica.ErrUnknownTopicOrPartition)
	})
}
