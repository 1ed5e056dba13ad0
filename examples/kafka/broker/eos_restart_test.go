package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKgoGroupTransactSessionExactlyOnceAcrossRestarts: kgo's consume-
// transform-produce session (GroupTransactSession) copies every record of
// topic "in" to topic "out" in transactions that commit the group's
// offsets with their output, while the broker is stopped and started again
// on the same data directory and address, by turns between two
// transactions and with one open (its output produced, not yet ended).
// Whatever each restart costs the session, a transaction that commits or
// one that aborts and is done again, Kafka's exactly-once promise holds: a
// read_committed reader of "out" sees every input record exactly once, in
// its partition, and the group's committed offsets are the input's ends.
func TestKgoGroupTransactSessionExactlyOnceAcrossRestarts(t *testing.T) {
	records, restarts := 400, 8
	if testing.Short() {
		records, restarts = 40, 2
	}
	dir := t.TempDir()
	tb := startBroker(t, dir)
	addr := tb.addr
	admin := tb.client(kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	createTopic(t, admin, "in", 2)
	createTopic(t, admin, "out", 2)
	input := produce(t, admin, "in", 0, records)
	inputEnds := map[int32]int64{}
	for _, r := range input {
		inputEnds[r.Partition] = max(inputEnds[r.Partition], r.Offset+1)
	}
	require.Len(t, inputEnds, 2, "input in both partitions")

	s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(addr),
		kgo.TransactionalID("eos-restarts"), kgo.ConsumerGroup("transformers"), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.TransactionTimeout(10*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	restart := func() {
		tb.stop()
		tb = startBrokerAt(t, dir, addr)
	}
	// Every other transaction has a restart: between it and the next one
	// for the even restarts, during it for the odd ones, once it has
	// output. Polls of a few records each make enough transactions for
	// every restart.
	perPoll := records / (2*restarts + 4)
	restarted, aborted, committed, nextRestart := 0, 0, 0, 1
	for txn := 0; committed < records; txn++ {
		require.NoError(t, ctx.Err(), "%d of %d records committed", committed, records)
		fs := s.PollRecords(ctx, perPoll)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		require.NoError(t, s.Begin())
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			out := &kgo.Record{Topic: "out", Partition: r.Partition, Key: r.Key, Value: append([]byte("seen "), r.Value...)}
			s.Produce(ctx, out, func(r *kgo.Record, err error) {
				if err != nil {
					t.Logf("produce %s: %v", r.Key, err)
				}
			})
		})
		duringTxn := restarted%2 == 1
		due := restarted < restarts && txn >= nextRestart && (!duringTxn || n > 0)
		duringTxn = due && duringTxn
		if due {
			restarted++
			nextRestart = txn + 2
		}
		if duringTxn {
			require.NoError(t, s.Client().Flush(ctx))
			restart()
		}
		ok, err := s.End(ctx, kgo.TryCommit)
		require.NoError(t, err)
		if ok {
			committed += n
		} else {
			aborted++
		}
		if due && !duringTxn {
			restart()
		}
	}
	require.Equal(t, restarts, restarted)
	t.Logf("%d records committed; %d transactions aborted by the session", committed, aborted)

	rc := tb.client(kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := map[string]bool{}
	for _, r := range consume(t, rc, records) {
		k := string(r.Key)
		require.False(t, seen[k], "output of %s twice", k)
		seen[k] = true
		in, ok := input[k]
		require.True(t, ok, "output %s of no input", k)
		require.Equal(t, in.Partition, r.Partition, "output %s in its input's partition", k)
		require.Equal(t, "seen "+string(in.Value), string(r.Value))
	}
	noMoreRecords(t, rc)
	require.Len(t, seen, records, "the output of every input record")

	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group, of.RequireStable = "transformers", true
	of.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "in", Partitions: []int32{0, 1}}}
	or, err := of.RequestWith(ctx, tb.client())
	require.NoError(t, err)
	committedOffsets := map[int32]int64{}
	for _, p := range or.Topics[0].Partitions {
		require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
		committedOffsets[p.Partition] = p.Offset
	}
	require.Equal(t, inputEnds, committedOffsets, "the group's offsets are the input's ends")
}
