package group

import (
	"context"
	"testing"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
	"github.com/stretchr/testify/require"
)

// Two consumers of one group share a topic's partitions, each partition
// owned by one of them, every record read at least once and in order; when
// one closes, the other takes its partitions over from its commits.
func TestConsumersShareAndTakeOver(t *testing.T) {
	fs := newMemDataFS(t)
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: fs, MaxIndexBytes: 1024}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	s, err := OpenService(d, ServiceOptions{Partitions: 1, Config: Config{InitialRebalanceDelay: -1}})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.NoError(t, d.CreateTopic("t", log.TopicConfig{Partitions: 4}))
	produce := func(n int) {
		for p := range int32(4) {
			part, err := d.Partition("t", p)
			require.NoError(t, err)
			for range n {
				_, err := part.Append([]segment.Record{log.NewRecord(nil, []byte("r"))})
				require.NoError(t, err)
			}
		}
	}
	ctx := context.Background()
	seen := map[TopicPartition]map[int64]int{}
	// read checks that a consumer's records of each partition come in
	// order, and counts them.
	last := map[*Consumer]map[TopicPartition]int64{}
	read := func(c *Consumer, ms []Message) {
		if last[c] == nil {
			last[c] = map[TopicPartition]int64{}
		}
		for _, m := range ms {
			if prev, ok := last[c][m.TopicPartition]; ok {
				require.Greater(t, m.Offset, prev, "%v read out of order", m.TopicPartition)
			}
			last[c][m.TopicPartition] = m.Offset
			if seen[m.TopicPartition] == nil {
				seen[m.TopicPartition] = map[int64]int{}
			}
			seen[m.TopicPartition][m.Offset]++
		}
	}
	opts := ConsumerOptions{Group: "g", Topics: []string{"t"}}
	a, err := NewConsumer(s, d, opts)
	require.NoError(t, err)
	b, err := NewConsumer(s, d, opts)
	require.NoError(t, err)

	produce(20)
	ms, err := a.Poll(ctx)
	require.NoError(t, err)
	read(a, ms)
	require.Len(t, a.Assigned(), 4)
	require.Len(t, ms, 80)
	produce(20)

	type polled struct {
		ms  []Message
		err error
	}
	bDone := make(chan polled, 1)
	go func() {
		ms, err := b.Poll(ctx) // waits in JoinGroup until a rejoins
		bDone <- polled{ms, err}
	}()
	var bFirst polled
	for deadline := time.Now().Add(10 * time.Second); ; {
		require.True(t, time.Now().Before(deadline), "a never rejoined")
		ms, err := a.Poll(ctx)
		require.NoError(t, err)
		read(a, ms)
		select {
		case bFirst = <-bDone:
		default:
			continue
		}
		break
	}
	require.NoError(t, bFirst.err)
	read(b, bFirst.ms)
	require.Len(t, a.Assigned(), 2)
	require.Len(t, b.Assigned(), 2)
	require.ElementsMatch(t, []TopicPartition{{"t", 0}, {"t", 1}, {"t", 2}, {"t", 3}}, append(a.Assigned(), b.Assigned()...))
	for tp, offsets := range seen {
		require.Len(t, offsets, 40, "%v: every record read", tp)
	}

	produce(10)
	require.NoError(t, a.Close(ctx))
	for len(b.Assigned()) < 4 {
		ms, err := b.Poll(ctx)
		require.NoError(t, err)
		read(b, ms)
	}
	ms, err = b.Poll(ctx)
	require.NoError(t, err)
	read(b, ms)
	for tp, offsets := range seen {
		require.Len(t, offsets, 50, "%v: every record read", tp)
		for off, n := range offsets {
			require.LessOrEqual(t, n, 1, "%v offset %d read again: nothing was uncommitted at each handover", tp, off)
		}
	}
	require.NoError(t, b.Close(ctx))
}
