// The tests use cluster_test.go's helpers: Unix only.

//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
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

// A replica's failures are logged where an operator sees them (issue 21,
// part 7: they were DEBUG only): a failed partition at ERROR, once however
// many messages it refuses; a message refused for another reason than the
// protocol's normal course at WARN; stale messages and messages of other
// epochs at DEBUG, below the default level. The errors of a Batch's
// messages, joined, are each classed.
func TestReplicaStepErrorsAreLoggedByWhatTheyMean(t *testing.T) {
	var out bytes.Buffer
	n := &node{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
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

// A write that fails makes the partition Fail, which the replica package
// tells nobody: the log the replica writes through logs it at ERROR with
// the partition, and passes the error on unchanged.
func TestReplicaLogFailuresAreLoggedAtError(t *testing.T) {
	var out bytes.Buffer
	tp := controller.TopicPartition{Topic: "t", Partition: 3}
	l := newLoggedLog(failingLog{}, tp, slog.New(slog.NewTextHandler(&out, nil)))
	_, err := l.AppendReplicated(segment.Batch{})
	require.EqualError(t, err, "no space left on device")
	require.Equal(t, []string{"ERROR"}, levels(out.String()))
	require.Contains(t, out.String(), "partition=t-3")
}

// -log-level sets the least level a node logs, and up passes it on.
func TestLogLevelFlag(t *testing.T) {
	var nf nodeFlags
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	nf.register(fs)
	require.Equal(t, slog.LevelInfo, nf.logLevel, "the default")
	require.NoError(t, fs.Parse([]string{"-log-level", "WARN"}))
	require.Equal(t, slog.LevelWarn, nf.logLevel)
	var again nodeFlags
	fs = flag.NewFlagSet("node", flag.ContinueOnError)
	again.register(fs)
	require.NoError(t, fs.Parse(nf.args()))
	require.Equal(t, nf, again, "up passes every flag on")
}

// A fetch for a partition the node has no replica of (it has not applied
// the topic's metadata yet) is answered UNKNOWN_TOPIC_OR_PARTITION, as a
// Kafka broker answers it, in a response the follower takes (its fetch's
// id, offset and leader epoch): it backs off and fetches again, rather
// than waiting its RequestTimeout (30 s) for an answer that never comes.
// The other messages of the Batch go to the driver.
func TestFetchForAnUnknownPartitionIsAnswered(t *testing.T) {
	tn := startTestNode(t, filepath.Join(t.TempDir(), logDir), 1)
	tn.out = tn
	h := replica.Header{From: 2, To: 1, Topic: "t", Partition: 4}
	f := &replica.Fetch{Header: h, ID: 9, CurrentLeaderEpoch: 3, FetchOffset: 17}
	stale := &replica.FetchResponse{Header: h, ID: 1}
	b := &replica.Batch{Header: replica.Header{From: 2, To: 1}, Messages: []replica.Message{f, stale}}
	require.NoError(t, tn.receive(context.Background(), b, b.Messages))
	tn.mu.Lock()
	sent := slices.Clone(tn.sent)
	tn.mu.Unlock()
	require.Len(t, sent, 1)
	fr, ok := sent[0].(*replica.FetchResponse)
	require.True(t, ok, "%T", sent[0])
	require.Equal(t, replica.Header{From: 1, To: 2, Topic: "t", Partition: 4}, fr.Header)
	require.Equal(t, []any{uint64(9), replica.CodeUnknownTopicOrPartition, int32(3), int64(17)},
		[]any{fr.ID, fr.Err, fr.LeaderEpoch, fr.FetchOffset})
	waitFor(t, 5*time.Second, "the driver to refuse the response for an unknown partition", func() (bool, string) {
		return tn.refusedAny(replica.ErrUnknownPartition), "not stepped"
	})
}
