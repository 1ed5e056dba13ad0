package main

import (
	"context"
	"testing"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
	"github.com/stretchr/testify/require"
)

// A data directory whose offsets topic a group.Service wrote: inspect
// decodes its records and prints each group's committed offsets and their
// lag to the partition's log end; a deleted offset is gone.
func TestGroupsOffsetsAndLag(t *testing.T) {
	data := t.TempDir()
	d, err := log.OpenDir(data, log.DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("orders", log.TopicConfig{Partitions: 2}))
	for p, n := range []int{10, 3} {
		part, err := d.Partition("orders", int32(p))
		require.NoError(t, err)
		for range n {
			_, err := part.Append([]segment.Record{log.NewRecord(nil, []byte("o"))})
			require.NoError(t, err)
		}
	}
	s, err := group.OpenService(d, group.ServiceOptions{Partitions: 3})
	require.NoError(t, err)
	ctx := context.Background()
	commit := func(g string, p int32, offset int64) {
		r, err := s.OffsetCommit(ctx, group.OffsetCommitRequest{Version: 9, GroupID: g, GenerationID: -1,
			Topics: []group.OffsetCommitTopic{{Name: "orders", Partitions: []group.OffsetCommitPartition{{Partition: p, Offset: offset, LeaderEpoch: -1, Metadata: "m"}}}}})
		require.NoError(t, err)
		require.NoError(t, r.Topics[0].Partitions[0].Err)
	}
	commit("billing", 0, 4)
	commit("billing", 1, 3)
	commit("shipping", 0, 1)
	commit("shipping", 0, 9)
	commit("shipping", 1, 2)
	r, err := s.OffsetDelete(ctx, group.OffsetDeleteRequest{GroupID: "shipping", Topics: []group.OffsetFetchTopic{{Name: "orders", Partitions: []int32{1}}}})
	require.NoError(t, err)
	require.NoError(t, r.Err)
	// A KIP-848 group's records (types 3-8) are read past, not a problem.
	hb, err := s.ConsumerGroupHeartbeat(ctx, group.ConsumerGroupHeartbeatRequest{GroupID: "streaming", MemberID: "m",
		RebalanceTimeout: time.Minute, SubscribedTopicNames: []string{"orders"}, Owned: &group.Assignment{}})
	require.NoError(t, err)
	require.NoError(t, hb.Err)
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())

	code, out, errOut := inspect(data)
	require.Equal(t, exitClean, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "partition __consumer_offsets-0")
	require.Contains(t, out, "groups (__consumer_offsets)\n"+
		"  group \"billing\": offsets only\n") // commits without membership write no group record, as in Kafka
	require.Regexp(t, `    orders-0 committed 4 \(leader epoch -1, metadata "m", at [^\n]*\) lag 6\n`+
		`    orders-1 committed 3 \(leader epoch -1, metadata "m", at [^\n]*\) lag 0\n`+
		`  group "shipping"`, out)
	require.Regexp(t, `group "shipping"[^\n]*\n    orders-0 committed 9 [^\n]* lag 1\nno problems found`, out)
	require.NotContains(t, out, "committed 2", "a deleted offset")
}
