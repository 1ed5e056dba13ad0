package consumer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/log"
)

// session returns a TransactSession of group "g" over "in", with the
// test consumer's fast heartbeats.
func (e *consumerEnv) session(txnID string) *TransactSession {
	e.t.Helper()
	ts, err := NewTransactSession(e.s, TransactOptions{TransactionalID: txnID, Consumer: Options{
		Group: "g", Topics: []string{"in"}, SessionTimeout: testSessionTimeout,
		HeartbeatInterval: 20 * time.Millisecond, MetadataInterval: 20 * time.Millisecond}})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = ts.Close(context.Background()) })
	return ts
}

// transformOnce polls the session once it has records and produces each
// value upper-cased to "out", in the open transaction; it returns the
// values read.
func transformOnce(t *testing.T, ts *TransactSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ms, err := ts.Poll(ctx)
		require.NoError(t, err)
		var read []string
		for _, m := range ms {
			read = append(read, string(m.Value))
			_, err := ts.Produce(ctx, "out", 0, log.NewRecord(nil, []byte("T:"+string(m.Value))))
			require.NoError(t, err)
		}
		if len(read) > 0 {
			return read
		}
	}
}

// output returns what a ReadCommitted reader reads of "out".
func (e *consumerEnv) output() []string {
	e.t.Helper()
	p, err := e.d.Partition("out", 0)
	require.NoError(e.t, err)
	var out []string
	for r, err := range p.Records(0, log.ReadCommitted) {
		require.NoError(e.t, err)
		out = append(out, string(r.Value))
	}
	slices.Sort(out)
	return out
}

func transformed(values ...string) []string {
	var out []string
	for _, v := range values {
		out = append(out, "T:"+v)
	}
	slices.Sort(out)
	return out
}

// A committed transaction's output and the group's offsets past its input
// count together; an aborted one's neither, and the session reads its
// input again.
func TestTransactSessionCommitsOutputWithOffsets(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"in": 2, "out": 1})
	ts := e.session("etl")
	e.produce("in", 0, 3)
	e.produce("in", 1, 2)
	ctx := context.Background()

	var first []string
	for len(first) < 5 {
		first = append(first, transformOnce(t, ts)...)
	}
	committed, err := ts.End(ctx, false)
	require.NoError(t, err)
	require.False(t, committed)
	require.Empty(t, e.output(), "the abort's output is never read committed")
	require.Equal(t, int64(-1), e.committed(TopicPartition{Topic: "in", Partition: 0}))

	var again []string
	for len(again) < 5 {
		again = append(again, transformOnce(t, ts)...)
	}
	slices.Sort(first)
	slices.Sort(again)
	require.Equal(t, first, again, "read again from where the aborted transaction began")
	committed, err = ts.End(ctx, true)
	require.NoError(t, err)
	require.True(t, committed)
	require.Equal(t, transformed(first...), e.output())
	require.Equal(t, int64(3), e.committed(TopicPartition{Topic: "in", Partition: 0}))
	require.Equal(t, int64(2), e.committed(TopicPartition{Topic: "in", Partition: 1}))
}

// A session killed in the middle of a transaction leaves it open; the
// next session of its transactional id aborts it, and the group's next
// member reads from the last committed offsets: every input is in the
// output once.
func TestTransactSessionAfterAKill(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"in": 1, "out": 1})
	e.produce("in", 0, 2)
	a := e.session("etl")
	read := transformOnce(t, a)
	committed, err := a.End(context.Background(), true)
	require.NoError(t, err)
	require.True(t, committed)
	e.produce("in", 0, 2)
	transformOnce(t, a) // produced, never committed
	a.c.crash()

	b := e.session("etl")
	ctx := context.Background()
	for len(read) < 4 {
		read = append(read, transformOnce(t, b)...)
		committed, err := b.End(ctx, true)
		require.NoError(t, err)
		require.True(t, committed)
	}
	require.Equal(t, transformed("in-0-0", "in-0-1", "in-0-2", "in-0-3"), e.output())
	require.Equal(t, int64(4), e.committed(TopicPartition{Topic: "in", Partition: 0}))
}

// A session whose transactional id another session took is a zombie: its
// open transaction cannot commit, and nothing it produced is read.
func TestTransactSessionZombieCannotCommit(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"in": 1, "out": 1})
	e.produce("in", 0, 2)
	a := e.session("etl")
	transformOnce(t, a)
	e.session("etl") // fences a's producer and aborts its transaction
	committed, err := a.End(context.Background(), true)
	require.Error(t, err)
	require.False(t, committed)
	require.Empty(t, e.output())
	require.Equal(t, int64(-1), e.committed(TopicPartition{Topic: "in", Partition: 0}))
}
