package consumer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// consumerEnv is a Dir on a MemFS with a Service whose sessions may be short.
type consumerEnv struct {
	t *testing.T
	d *log.Dir
	s *group.Service
}

const testSessionTimeout = 2 * time.Second

// epoch is where the tests' clocks start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// maxStringLen is the longest string Kafka's protocol carries (an int16
// length).
const maxStringLen = math.MaxInt16

func newMemDataFS(t *testing.T) *vfs.MemFS {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/data", 0o755))
	require.NoError(t, vfs.SyncDir(fs, "/"))
	return fs
}

func newConsumerEnv(t *testing.T, topics map[string]int32) *consumerEnv {
	t.Helper()
	return newConsumerEnvAt(t, topics, nil)
}

// newConsumerEnvAt is newConsumerEnv with the Service on clock now (nil
// for time.Now).
func newConsumerEnvAt(t *testing.T, topics map[string]int32, now func() time.Time) *consumerEnv {
	t.Helper()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t), MaxIndexBytes: 1024}, MaintenanceInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	s, err := group.OpenService(d, group.ServiceOptions{Partitions: 3, Now: now, Config: group.Config{InitialRebalanceDelay: -1, MinSessionTimeout: 100 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	e := &consumerEnv{t, d, s}
	for name, n := range topics {
		e.createTopic(name, n)
	}
	return e
}

func (e *consumerEnv) createTopic(name string, partitions int32) {
	e.t.Helper()
	require.NoError(e.t, e.d.CreateTopic(name, log.TopicConfig{Partitions: partitions}))
}

// produce appends n records to a partition, valued "topic-p-offset".
func (e *consumerEnv) produce(topic string, p int32, n int) {
	e.t.Helper()
	part, err := e.d.Partition(topic, p)
	require.NoError(e.t, err)
	_, _, end, err := part.Offsets()
	require.NoError(e.t, err)
	recs := make([]segment.Record, n)
	for i := range recs {
		recs[i] = log.NewRecord(nil, fmt.Appendf(nil, "%s-%d-%d", topic, p, end+int64(i)))
	}
	_, err = part.Append(recs)
	require.NoError(e.t, err)
}

// consumer returns a consumer of group "g" with fast heartbeats and
// metadata checks; opts' other fields are kept.
func (e *consumerEnv) consumer(opts Options) *Consumer {
	e.t.Helper()
	if opts.Group == "" {
		opts.Group = "g"
	}
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = testSessionTimeout
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 20 * time.Millisecond
	}
	if opts.MetadataInterval == 0 {
		opts.MetadataInterval = 20 * time.Millisecond
	}
	c, err := New(e.s, opts)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// committed returns group g's committed offset of tp, -1 if none.
func (e *consumerEnv) committed(tp TopicPartition) int64 {
	e.t.Helper()
	r, err := e.s.OffsetFetch(context.Background(), group.OffsetFetchRequest{GroupID: "g", Topics: []group.OffsetFetchTopic{{Name: tp.Topic, Partitions: []int32{tp.Partition}}}})
	require.NoError(e.t, err)
	require.NoError(e.t, r.Err)
	return r.Topics[0].Partitions[0].Offset
}

// pollN polls until it has n records, failing after a deadline.
func pollN(t *testing.T, c *Consumer, n int) []Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Message
	for len(out) < n {
		ms, err := c.Poll(ctx)
		require.NoError(t, err, "after %d of %d records", len(out), n)
		out = append(out, ms...)
	}
	require.Len(t, out, n)
	return out
}

// pollFor polls for d and returns what came.
func pollFor(t *testing.T, c *Consumer, d time.Duration) []Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []Message
	for {
		ms, err := c.Poll(ctx)
		out = append(out, ms...)
		if errors.Is(err, context.DeadlineExceeded) {
			return out
		}
		require.NoError(t, err)
	}
}

func offsetsOf(ms []Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Offset
	}
	return out
}

func tps(topic string, ps ...int32) []TopicPartition {
	out := make([]TopicPartition, len(ps))
	for i, p := range ps {
		out[i] = TopicPartition{Topic: topic, Partition: p}
	}
	return out
}

// Bad options are typed errors with Kafka's meaning, found before the
// consumer talks to the group, so nothing reaches the offsets log.
func TestConsumerRejectsBadOptions(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 1})
	for _, tc := range []struct {
		name string
		opts Options
		want error
	}{
		{"empty group id", Options{Topics: []string{"t"}}, group.ErrInvalidGroupID},
		{"group id too long", Options{Group: string(make([]byte, maxStringLen+1)), Topics: []string{"t"}}, group.ErrInvalidGroupID},
		{"instance id too long", Options{Group: "g", Topics: []string{"t"}, InstanceID: string(make([]byte, maxStringLen+1))}, group.ErrInvalidRequest},
		{"missing topic", Options{Group: "g", Topics: []string{"t", "nope"}}, group.ErrUnknownTopicOrPartition},
		{"session below the minimum", Options{Group: "g", Topics: []string{"t"}, SessionTimeout: 50 * time.Millisecond, HeartbeatInterval: time.Millisecond}, group.ErrInvalidSessionTimeout},
		{"session above the maximum", Options{Group: "g", Topics: []string{"t"}, SessionTimeout: group.DefaultMaxSessionTimeout + time.Second}, group.ErrInvalidSessionTimeout},
		{"no subscription", Options{Group: "g"}, group.ErrInvalidConfig},
		{"topics and pattern", Options{Group: "g", Topics: []string{"t"}, Pattern: regexp.MustCompile("t")}, group.ErrInvalidConfig},
		{"heartbeat not below session", Options{Group: "g", Topics: []string{"t"}, SessionTimeout: time.Second, HeartbeatInterval: time.Second}, group.ErrInvalidConfig},
		{"negative auto commit interval", Options{Group: "g", Topics: []string{"t"}, AutoCommitInterval: -time.Second}, group.ErrInvalidConfig},
		{"log end isolation", Options{Group: "g", Topics: []string{"t"}, Isolation: log.ReadLogEnd}, group.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(e.s, tc.opts)
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, c)
			var kafka kafkaerr.Code
			if errors.As(tc.want, &kafka) {
				require.Equal(t, kafka, kafkaerr.CodeOf(err))
			}
		})
	}
	_, err := New(e.s, Options{Group: "g", Topics: []string{"nope"}})
	require.ErrorIs(t, err, log.ErrUnknownTopic, "the Dir's own error, wrapped too")

	c, err := New(nil, Options{Group: "g", Topics: []string{"t"}})
	require.ErrorIs(t, err, group.ErrInvalidConfig, "a nil Service")
	require.Nil(t, c)
	_, err = group.OpenService(nil, group.ServiceOptions{})
	require.ErrorIs(t, err, group.ErrInvalidConfig, "OpenService of a nil Dir")

	p, err := e.d.Partition(group.OffsetsTopic, group.PartitionFor("g", 3))
	require.NoError(t, err)
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	require.Zero(t, end, "nothing written to the offsets log")
}

// The background goroutine heartbeats while the handler is slower than the
// session timeout (KIP-62), so the member keeps its generation and its
// partitions; after Close no goroutine of the consumer is left.
//
// The coordinator's clock is the test's: it moves a third of a session at
// a time, each once the coordinator has had a heartbeat at the time before,
// so that three session timeouts pass without a Poll, and a process
// descheduled for longer than a session (a loaded CI machine) cannot
// expire the member.
func TestConsumerKeepsMembershipThroughSlowHandler(t *testing.T) {
	const session = 300 * time.Millisecond
	var mu sync.Mutex
	now := epoch
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newConsumerEnvAt(t, map[string]int32{"t": 2}, clock)
	lost := 0
	c := e.consumer(Options{Topics: []string{"t"}, SessionTimeout: session, HeartbeatInterval: 30 * time.Millisecond,
		OnLost: func(context.Context, *Consumer, []TopicPartition) { lost++ }})
	e.produce("t", 0, 3)
	pollN(t, c, 3)
	id, gen := c.Generation()
	for range 9 { // a slow handler: three session timeouts
		at := clock()
		require.Eventually(t, func() bool { return e.sessionDeadline("g", id).Equal(at.Add(session)) }, 10*time.Second, time.Millisecond,
			"a heartbeat at %v", at.Sub(epoch))
		mu.Lock()
		now = now.Add(session / 3)
		mu.Unlock()
	}
	e.produce("t", 1, 2)
	ms := pollN(t, c, 2)
	require.Equal(t, tps("t", 1, 1), []TopicPartition{ms[0].TopicPartition, ms[1].TopicPartition})
	id2, gen2 := c.Generation()
	require.Equal(t, id, id2)
	require.Equal(t, gen, gen2, "no rebalance: the session never expired")
	require.Zero(t, lost)
	require.NoError(t, c.Close(context.Background()))
	require.Eventually(t, func() bool { return consumerGoroutines() == "" }, 5*time.Second, 10*time.Millisecond,
		"goroutines of the consumer outlive Close: %s", consumerGoroutines())
	_, err := c.Poll(context.Background())
	require.ErrorIs(t, err, ErrClosed)
}

// sessionDeadline returns when the coordinator expires a member's session
// unless a heartbeat comes first; the zero time if it has no session timer.
func (e *consumerEnv) sessionDeadline(groupID, memberID string) time.Time {
	d, _, err := e.s.DescribeGroup(context.Background(), groupID)
	require.NoError(e.t, err)
	for _, m := range d.Members {
		if m.MemberID == memberID {
			return m.SessionDeadline
		}
	}
	return time.Time{}
}

// consumerGoroutines returns the stacks of the goroutines running a
// Consumer's code.
func consumerGoroutines() string {
	buf := make([]byte, 1<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "group.(*Consumer)") && !strings.Contains(g, "consumerGoroutines") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// events records a consumer's callbacks, as "+[t-0 t-1]" for an assignment,
// "-[...]" for a revocation and "![...]" for a loss.
type events struct {
	mu   sync.Mutex
	list []string
}

func (ev *events) options(opts Options) Options {
	record := func(sign string) func(context.Context, *Consumer, []TopicPartition) {
		return func(_ context.Context, _ *Consumer, tps []TopicPartition) {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			ev.list = append(ev.list, fmt.Sprint(sign, tps))
		}
	}
	opts.OnAssigned, opts.OnRevoked, opts.OnLost = record("+"), record("-"), record("!")
	return opts
}

func (ev *events) get() []string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return slices.Clone(ev.list)
}

// pollAll polls the consumers in turn, briefly each, until done holds,
// and returns what each got.
func pollAll(t *testing.T, done func() bool, cs ...*Consumer) [][]Message {
	t.Helper()
	out := make([][]Message, len(cs))
	pollInto(t, done, func(i int, ms []Message) { out[i] = append(out[i], ms...) }, cs...)
	return out
}

// pollInto polls the consumers in turn, briefly each, giving what consumer
// i gets to sink, until done holds.
func pollInto(t *testing.T, done func() bool, sink func(i int, ms []Message), cs ...*Consumer) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !done(); {
		require.True(t, time.Now().Before(deadline), "the consumers never got there")
		for i, c := range cs {
			sink(i, pollFor(t, c, 10*time.Millisecond))
		}
	}
}

func sizes(cs ...*Consumer) func() bool {
	return func() bool {
		var n []int
		for _, c := range cs {
			n = append(n, len(c.Assigned()))
		}
		for i := range n {
			if n[i] != n[0] {
				return false
			}
		}
		return n[0] > 0
	}
}

// Callbacks tell each member what it gets and gives up. Eagerly, a
// rebalance revokes every partition of every member first; cooperatively
// (KIP-429), a member gives up only the partitions that move, and keeps
// reading the others through the rebalance. Either way each record is read
// once, since each partition moves with its offset committed.
func TestConsumerRebalanceCallbacks(t *testing.T) {
	for _, tc := range []struct {
		assignor                  assign.Assignor
		aWhenBJoins, aWhenBLeaves func(aKeeps, bGets []TopicPartition) []string
	}{
		{assign.Range,
			func(aKeeps, bGets []TopicPartition) []string {
				return []string{fmt.Sprint("-", tps("t", 0, 1, 2, 3)), fmt.Sprint("+", aKeeps)}
			},
			func(aKeeps, bGets []TopicPartition) []string {
				return []string{fmt.Sprint("-", aKeeps), fmt.Sprint("+", tps("t", 0, 1, 2, 3))}
			}},
		{assign.CooperativeSticky,
			func(aKeeps, bGets []TopicPartition) []string { return []string{fmt.Sprint("-", bGets)} },
			func(aKeeps, bGets []TopicPartition) []string { return []string{fmt.Sprint("+", bGets)} }},
	} {
		t.Run(tc.assignor.Name(), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": 4})
			var aEv, bEv events
			a := e.consumer(aEv.options(Options{Topics: []string{"t"}, Assignor: tc.assignor}))
			b := e.consumer(bEv.options(Options{Topics: []string{"t"}, Assignor: tc.assignor}))
			read := map[TopicPartition][]int64{}
			count := func(_ int, ms []Message) {
				for _, m := range ms {
					read[m.TopicPartition] = append(read[m.TopicPartition], m.Offset)
				}
			}
			for p := range int32(4) {
				e.produce("t", p, 10)
			}
			count(0, pollN(t, a, 40))
			require.Equal(t, []string{fmt.Sprint("+", tps("t", 0, 1, 2, 3))}, aEv.get())

			for p := range int32(4) {
				e.produce("t", p, 5)
			}
			pollInto(t, sizes(a, b), count, a, b)
			aKeeps, bGets := a.Assigned(), b.Assigned()
			require.Len(t, aKeeps, 2)
			require.ElementsMatch(t, tps("t", 0, 1, 2, 3), append(a.Assigned(), b.Assigned()...))
			require.Equal(t, tc.aWhenBJoins(aKeeps, bGets), aEv.get()[1:])
			require.Equal(t, []string{fmt.Sprint("+", bGets)}, bEv.get())
			pollInto(t, func() bool { return len(read[aKeeps[0]])+len(read[bGets[0]]) == 30 }, count, a, b)

			for p := range int32(4) {
				e.produce("t", p, 5)
			}
			require.NoError(t, b.Close(context.Background()))
			require.Equal(t, []string{fmt.Sprint("+", bGets), fmt.Sprint("-", bGets)}, bEv.get(), "Close revokes")
			pollInto(t, func() bool { return len(a.Assigned()) == 4 && len(read[bGets[1]]) == 20 }, count, a)
			require.Equal(t, tc.aWhenBLeaves(aKeeps, bGets), aEv.get()[1+len(tc.aWhenBJoins(aKeeps, bGets)):])
			count(0, pollFor(t, a, 50*time.Millisecond))
			for _, tp := range tps("t", 0, 1, 2, 3) {
				want := make([]int64, 20)
				for i := range want {
					want[i] = int64(i)
				}
				require.Equal(t, want, read[tp], "%v: every record once, in order", tp)
			}
		})
	}
}

// crash stops c as a killed process stops: no commit, no leave, no more
// heartbeats.
func (c *Consumer) crash() {
	c.closeBegun, c.closed = true, true
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.cancel()
	close(c.commits)
	<-c.commitsDone
	c.wg.Wait()
}

// A member that stops heartbeating is removed when its session expires and
// the others take its partitions over from its last commit: the records
// after it are delivered again (at least once), none is skipped.
func TestConsumerTakesOverFromMemberThatStopsHeartbeating(t *testing.T) {
	for _, assignor := range []assign.Assignor{assign.Range, assign.CooperativeSticky} {
		t.Run(assignor.Name(), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": 4})
			opts := Options{Topics: []string{"t"}, Assignor: assignor, SessionTimeout: 300 * time.Millisecond, DisableAutoCommit: true}
			a, b := e.consumer(opts), e.consumer(opts)
			pollAll(t, sizes(a, b), a, b)
			for p := range int32(4) {
				e.produce("t", p, 10)
			}
			got := pollAll(t, func() bool { return a.pos[a.assigned[0]] == 10 && a.pos[a.assigned[1]] == 10 }, a)[0]
			require.Len(t, got, 20)
			aHad := a.Assigned()
			require.NoError(t, a.CommitOffsets(context.Background(), map[TopicPartition]int64{aHad[0]: 4, aHad[1]: 7}))
			a.crash()

			taken := pollAll(t, func() bool { return len(b.Assigned()) == 4 }, b)[0]
			taken = append(taken, pollFor(t, b, 100*time.Millisecond)...)
			first := map[TopicPartition]int64{}
			for _, m := range slices.Backward(taken) {
				first[m.TopicPartition] = m.Offset
			}
			require.Equal(t, int64(4), first[aHad[0]], "b starts at a's commit")
			require.Equal(t, int64(7), first[aHad[1]], "b starts at a's commit")
		})
	}
}

// A pattern subscription picks up topics created later, and not those it
// does not match.
func TestConsumerPatternPicksUpNewTopics(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"orders-eu": 1, "audit": 1})
	var ev events
	c := e.consumer(ev.options(Options{Pattern: regexp.MustCompile(`^orders-`)}))
	e.produce("orders-eu", 0, 2)
	e.produce("audit", 0, 2)
	ms := pollN(t, c, 2)
	require.Equal(t, "orders-eu", ms[0].Topic)
	e.createTopic("orders-us", 2)
	e.produce("orders-us", 1, 3)
	ms = pollN(t, c, 3)
	for _, m := range ms {
		require.Equal(t, TopicPartition{Topic: "orders-us", Partition: 1}, m.TopicPartition)
	}
	require.Equal(t, append(tps("orders-eu", 0), tps("orders-us", 0, 1)...), c.Assigned())
	require.Equal(t, []string{fmt.Sprint("+", tps("orders-eu", 0)), fmt.Sprint("-", tps("orders-eu", 0)),
		fmt.Sprint("+", append(tps("orders-eu", 0), tps("orders-us", 0, 1)...))}, ev.get(), "an eager rebalance for the new topic")
}

// Auto commit (on by default) commits the positions of what earlier Polls
// returned, every AutoCommitInterval; without it nothing is committed,
// Close included.
//
// A Poll commits when it finds the interval passed; how long a loaded
// machine keeps Polls apart is the machine's (one 200ms poll once ended
// before the commit), so the test polls until the commit is there.
func TestConsumerAutoCommit(t *testing.T) {
	tp := TopicPartition{Topic: "t", Partition: 0}
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprint("disabled=", disable), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": 1})
			c := e.consumer(Options{Topics: []string{"t"}, AutoCommitInterval: 50 * time.Millisecond, DisableAutoCommit: disable})
			e.produce("t", 0, 5)
			pollN(t, c, 5)
			if !disable {
				for deadline := time.Now().Add(10 * time.Second); e.committed(tp) != 5; {
					require.True(t, time.Now().Before(deadline), "the polled records not committed 10s after")
					pollFor(t, c, 50*time.Millisecond)
				}
				e.produce("t", 0, 2)
				pollN(t, c, 2)
				require.NoError(t, c.Close(context.Background()))
				require.Equal(t, int64(7), e.committed(tp), "Close commits")
				return
			}
			pollFor(t, c, 200*time.Millisecond)
			require.Equal(t, int64(-1), e.committed(tp))
			require.NoError(t, c.Close(context.Background()))
			require.Equal(t, int64(-1), e.committed(tp))
		})
	}
}

// CommitOffsets commits what it is given, CommitSync the positions, and
// CommitAsync's commits finish in order, before Close returns.
func TestConsumerManualCommits(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 2})
	c := e.consumer(Options{Topics: []string{"t"}, DisableAutoCommit: true})
	p0, p1 := TopicPartition{Topic: "t", Partition: 0}, TopicPartition{Topic: "t", Partition: 1}
	e.produce("t", 0, 5)
	e.produce("t", 1, 3)
	pollN(t, c, 8)
	ctx := context.Background()
	require.NoError(t, c.CommitOffsets(ctx, map[TopicPartition]int64{p0: 2}))
	require.Equal(t, int64(2), e.committed(p0))
	require.Equal(t, int64(-1), e.committed(p1))
	require.NoError(t, c.CommitSync(ctx))
	require.Equal(t, int64(5), e.committed(p0))
	require.Equal(t, int64(3), e.committed(p1))

	var order []int
	var mu sync.Mutex
	for i := range 3 {
		require.NoError(t, c.Seek(p0, int64(i)))
		c.CommitAsync(func(err error) {
			require.NoError(t, err)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
	}
	require.NoError(t, c.Close(ctx))
	require.Equal(t, []int{0, 1, 2}, order)
	require.Equal(t, int64(2), e.committed(p0), "the last async commit wins")
	require.ErrorIs(t, c.CommitSync(ctx), ErrClosed)
}

// Seek moves a position by offset, SeekToTime by timestamp (Kafka's
// offsetsForTimes: the first record at or after it, else the log end); an
// offset out of the log reads from its nearest end; a partition the
// consumer does not own is ErrNotAssigned.
func TestConsumerSeek(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 1})
	tp := TopicPartition{Topic: "t", Partition: 0}
	part, err := e.d.Partition("t", 0)
	require.NoError(t, err)
	recs := make([]segment.Record, 10)
	for i := range recs {
		recs[i] = segment.Record{Timestamp: 1000 + int64(i)*10, Value: []byte{byte(i)}}
	}
	_, err = part.Append(recs)
	require.NoError(t, err)
	c := e.consumer(Options{Topics: []string{"t"}})
	pollN(t, c, 10)

	require.NoError(t, c.Seek(tp, 3))
	require.Equal(t, []int64{3, 4, 5, 6, 7, 8, 9}, offsetsOf(pollN(t, c, 7)))
	require.NoError(t, c.SeekToTime(tp, time.UnixMilli(1045)))
	require.Equal(t, []int64{5, 6, 7, 8, 9}, offsetsOf(pollN(t, c, 5)))
	require.NoError(t, c.SeekToTime(tp, time.UnixMilli(5000)))
	pos, err := c.Position(tp)
	require.NoError(t, err)
	require.Equal(t, int64(10), pos, "no record that late: the log end")

	require.NoError(t, part.DeleteRecordsBefore(4))
	require.NoError(t, c.Seek(tp, 1))
	require.Equal(t, []int64{4, 5, 6, 7, 8, 9}, offsetsOf(pollN(t, c, 6)), "below the log start: from the log start")
	require.NoError(t, c.Seek(tp, 99))
	require.Empty(t, pollFor(t, c, 50*time.Millisecond))
	pos, err = c.Position(tp)
	require.NoError(t, err)
	require.Equal(t, int64(10), pos, "beyond the log end: from the log end")
	e.produce("t", 0, 1)
	require.Equal(t, []int64{10}, offsetsOf(pollN(t, c, 1)))

	for _, err := range []error{c.Seek(TopicPartition{Topic: "t", Partition: 1}, 0), c.SeekToTime(TopicPartition{Topic: "u", Partition: 0}, time.Now()),
		c.Pause(TopicPartition{Topic: "t", Partition: 1}), c.Resume(TopicPartition{Topic: "t", Partition: 1})} {
		require.ErrorIs(t, err, ErrNotAssigned)
	}
}

// A paused partition is not read until it is resumed; the others are.
func TestConsumerPauseResume(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 2})
	c := e.consumer(Options{Topics: []string{"t"}})
	pollAll(t, func() bool { return len(c.Assigned()) == 2 }, c)
	require.NoError(t, c.Pause(TopicPartition{Topic: "t", Partition: 0}))
	require.Equal(t, tps("t", 0), c.Paused())
	e.produce("t", 0, 3)
	e.produce("t", 1, 3)
	ms := pollN(t, c, 3)
	require.Empty(t, pollFor(t, c, 100*time.Millisecond))
	for _, m := range ms {
		require.Equal(t, int32(1), m.Partition)
	}
	require.NoError(t, c.Resume(TopicPartition{Topic: "t", Partition: 0}))
	require.Empty(t, c.Paused())
	for _, m := range pollN(t, c, 3) {
		require.Equal(t, int32(0), m.Partition)
	}
}

// ReadCommitted stops at the last stable offset and skips aborted
// transactions; ReadUncommitted reads up to the high watermark.
func TestConsumerIsolation(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 1})
	part, err := e.d.Partition("t", 0)
	require.NoError(t, err)
	e.produce("t", 0, 2) // 0, 1
	txn, err := segment.AppendBatch(nil, []segment.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("open")}},
		segment.BuildOptions{Producer: &segment.ProducerFields{ID: 7}, Transactional: true})
	require.NoError(t, err)
	_, err = part.AppendBatch(txn) // 2
	require.NoError(t, err)
	e.produce("t", 0, 1) // 3

	committed := e.consumer(Options{Group: "committed", Topics: []string{"t"}})
	uncommitted := e.consumer(Options{Group: "uncommitted", Topics: []string{"t"}, Isolation: log.ReadUncommitted})
	require.Equal(t, []int64{0, 1, 2, 3}, offsetsOf(pollN(t, uncommitted, 4)))
	require.Equal(t, []int64{0, 1}, offsetsOf(pollN(t, committed, 2)))
	require.Empty(t, pollFor(t, committed, 100*time.Millisecond), "the open transaction holds the last stable offset at 2")

	abort, err := idempotence.AppendMarkerBatch(nil, 7, 0, idempotence.Marker{Type: idempotence.MarkerAbort}, time.Now().UnixMilli())
	require.NoError(t, err)
	_, err = part.AppendMarker(abort) // 4
	require.NoError(t, err)
	e.produce("t", 0, 1) // 5
	require.Equal(t, []int64{3, 5}, offsetsOf(pollN(t, committed, 2)), "the aborted record and the marker are skipped")
	pos, err := committed.Position(TopicPartition{Topic: "t", Partition: 0})
	require.NoError(t, err)
	require.Equal(t, int64(6), pos)
}

// A loop over Records that stops early leaves the records it did not take
// to the next Poll, so a commit never passes them.
func TestConsumerRecordsIteratorRewindsOnBreak(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 1})
	c := e.consumer(Options{Topics: []string{"t"}})
	e.produce("t", 0, 5)
	var took []int64
	for m, err := range c.Records(context.Background()) {
		require.NoError(t, err)
		took = append(took, m.Offset)
		if len(took) == 2 {
			break
		}
	}
	require.Equal(t, []int64{0, 1}, took)
	require.Equal(t, []int64{2, 3, 4}, offsetsOf(pollN(t, c, 3)))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for _, err := range c.Records(ctx) {
		require.NoError(t, err, "the end of ctx ends the loop without an error")
	}
}

// Close leaves at once even while the member waits in a rebalance for
// others to rejoin: its leave answers its parked JoinGroup.
func TestConsumerCloseWhileJoining(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 4})
	opts := Options{Topics: []string{"t"}, RebalanceTimeout: time.Minute}
	a, b := e.consumer(opts), e.consumer(opts)
	pollAll(t, func() bool { return len(a.Assigned()) == 4 }, a)
	require.Empty(t, pollFor(t, b, 100*time.Millisecond)) // b's join waits for a, which does not poll
	b.mu.Lock()
	joining := b.joining
	b.mu.Unlock()
	require.True(t, joining)
	began := time.Now()
	require.NoError(t, b.Close(context.Background()))
	require.Less(t, time.Since(began), 5*time.Second)
	e.produce("t", 2, 1)
	require.Equal(t, TopicPartition{Topic: "t", Partition: 2}, pollN(t, a, 1)[0].TopicPartition)
	require.Len(t, a.Assigned(), 4)
}

// A member the group removed (here by an administrator's LeaveGroup) learns
// it from its heartbeat: OnLost gets its partitions, nothing is committed,
// since another member may own them already, and it joins again as a new
// member, reading from the committed offsets (at least once).
func TestConsumerLostMembership(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 1})
	var ev events
	c := e.consumer(ev.options(Options{Topics: []string{"t"}, AutoCommitInterval: time.Hour}))
	e.produce("t", 0, 5)
	require.Equal(t, []int64{0, 1, 2, 3, 4}, offsetsOf(pollN(t, c, 5)))
	id, _ := c.Generation()
	r, err := e.s.LeaveGroup(context.Background(), group.LeaveGroupRequest{GroupID: "g", Members: []group.LeaveGroupMember{{MemberID: id}}})
	require.NoError(t, err)
	require.NoError(t, r.Err)
	require.Equal(t, []int64{0, 1, 2, 3, 4}, offsetsOf(pollN(t, c, 5)), "delivered again from the log start: nothing was committed")
	all := fmt.Sprint(tps("t", 0))
	require.Equal(t, []string{"+" + all, "!" + all, "+" + all}, ev.get())
	id2, _ := c.Generation()
	require.NotEqual(t, id, id2)
	require.Equal(t, int64(-1), e.committed(TopicPartition{Topic: "t", Partition: 0}))
}

// A generation reached just before the member was removed is not adopted:
// its partitions may be another member's already.
func TestConsumerLostMembershipDropsPendingGeneration(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 2})
	var ev events
	c := e.consumer(ev.options(Options{Topics: []string{"t"}}))
	pollAll(t, func() bool { return len(c.Assigned()) == 2 }, c)
	c.mu.Lock()
	c.joined = &joinResult{gen: c.gen + 1, assigned: tps("t", 0, 1)}
	c.lost = true
	c.mu.Unlock()
	require.NoError(t, c.step(context.Background()))
	require.Equal(t, []string{fmt.Sprint("+", tps("t", 0, 1)), fmt.Sprint("!", tps("t", 0, 1))}, ev.get())
	require.Empty(t, c.Assigned())
}

// While a rebalance waits for a slow member, a cooperative member keeps
// processing its partitions (KIP-429: only revoked partitions stop); an
// eager one has given them all up until the rebalance ends.
func TestConsumerCooperativeKeepsReadingDuringRebalance(t *testing.T) {
	for _, tc := range []struct {
		assignor assign.Assignor
		reads    bool
	}{{assign.Range, false}, {assign.CooperativeSticky, true}} {
		t.Run(tc.assignor.Name(), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": 4})
			opts := Options{Topics: []string{"t"}, Assignor: tc.assignor, RebalanceTimeout: time.Minute}
			a, slow := e.consumer(opts), e.consumer(opts)
			pollAll(t, sizes(a, slow), a, slow)
			aHas := a.Assigned()

			b := e.consumer(opts)
			require.Empty(t, pollFor(t, b, 50*time.Millisecond)) // b joins; slow does not poll, so the rebalance waits
			for _, tp := range aHas {
				e.produce("t", tp.Partition, 3)
			}
			if tc.reads {
				pollN(t, a, 6) // a reads its partitions through the rebalance
			} else {
				require.Empty(t, pollFor(t, a, 300*time.Millisecond), "a gave up its partitions when the rebalance began")
				require.Empty(t, a.Assigned())
			}
			b.mu.Lock()
			joining := b.joining
			b.mu.Unlock()
			require.True(t, joining, "the rebalance is still waiting for the slow member")
			pollAll(t, func() bool {
				n := 0
				for _, c := range []*Consumer{a, slow, b} {
					if len(c.Assigned()) == 0 {
						return false
					}
					n += len(c.Assigned())
				}
				return n == 4
			}, a, slow, b)
		})
	}
}

// A revocation callback may commit, also when Close runs it: Kafka's
// consumers commit in onPartitionsRevoked.
func TestConsumerCommitsInOnRevokedDuringClose(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 1})
	var errs []error
	c := e.consumer(Options{Topics: []string{"t"}, DisableAutoCommit: true,
		OnRevoked: func(ctx context.Context, c *Consumer, _ []TopicPartition) {
			errs = append(errs, c.CommitSync(ctx))
			c.CommitAsync(func(err error) { errs = append(errs, err) })
		}})
	e.produce("t", 0, 4)
	pollN(t, c, 4)
	require.NoError(t, c.Close(context.Background()))
	require.Equal(t, []error{nil, nil}, errs)
	require.Equal(t, int64(4), e.committed(TopicPartition{Topic: "t", Partition: 0}))
	c.CommitAsync(func(err error) { errs = append(errs, err) })
	require.ErrorIs(t, errs[2], ErrClosed)
}

// A static member (KIP-345) that closes and starts again within its session
// takes its own place and partitions back, from its commits, without a
// rebalance: the other member keeps its generation and never gives up a
// partition.
func TestConsumerStaticMemberRestartsWithoutRebalance(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 4})
	var bEv events
	static := Options{Topics: []string{"t"}, InstanceID: "worker-1"}
	a := e.consumer(static)
	b := e.consumer(bEv.options(Options{Topics: []string{"t"}}))
	pollAll(t, sizes(a, b), a, b)
	aHad := a.Assigned()
	_, gen := b.Generation()
	// b may have had a generation alone before a joined, and given up
	// its partitions then: what b saw up to here is no restart's doing.
	bSettled := bEv.get()
	for _, tp := range aHad {
		e.produce("t", tp.Partition, 3)
	}
	pollN(t, a, 6)
	require.NoError(t, a.Close(context.Background()))

	for _, tp := range aHad {
		e.produce("t", tp.Partition, 2)
	}
	a2 := e.consumer(static)
	got := pollN(t, a2, 4)
	for _, m := range got {
		require.GreaterOrEqual(t, m.Offset, int64(3), "%v: from the commit of the closed instance", m.TopicPartition)
	}
	require.Equal(t, aHad, a2.Assigned())
	pollFor(t, b, 300*time.Millisecond)
	_, gen2 := b.Generation()
	require.Equal(t, gen, gen2, "no rebalance")
	_, genA := a2.Generation()
	require.Equal(t, gen, genA)
	require.Equal(t, bSettled, bEv.get(), "b never gave up a partition, nor got one")
}

// Two consumers with one InstanceID: the newer takes the place, the older
// is fenced (FENCED_INSTANCE_ID), loses its partitions and stops, rather
// than rejoin and fence the newer in turn.
func TestConsumerStaticMemberFenced(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 2})
	var oldEv events
	static := Options{Topics: []string{"t"}, InstanceID: "worker-1"}
	old := e.consumer(oldEv.options(static))
	pollAll(t, func() bool { return len(old.Assigned()) == 2 }, old)
	newer := e.consumer(static)
	pollAll(t, func() bool { return len(newer.Assigned()) == 2 }, newer)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	for err == nil {
		_, err = old.Poll(ctx)
	}
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
	_, err = old.Poll(ctx)
	require.ErrorIs(t, err, group.ErrFencedInstanceID, "it stays stopped")
	require.Equal(t, []string{fmt.Sprint("+", tps("t", 0, 1)), fmt.Sprint("!", tps("t", 0, 1))}, oldEv.get())
	e.produce("t", 1, 2)
	require.Len(t, pollN(t, newer, 2), 2)
	require.NoError(t, old.Close(context.Background()))
	require.Len(t, newer.Assigned(), 2, "the fenced one's Close does not remove the newer")
}

// max.poll.interval.ms (RebalanceTimeout): a consumer that does not call
// Poll for longer leaves the group, as Kafka's consumer's heartbeat thread
// makes it leave, and the member that polls takes its partitions long
// before its session would have expired. Its next Poll finds them lost
// (OnLost) and joins again. A static member does not send the LeaveGroup,
// which would end its session: it stays in the group with its partitions,
// and takes its place again when it polls.
//
// Only a has the short interval: b, which polls, would leave too if a
// loaded machine kept its Polls that far apart, and the rebalance would
// then remove a static a that did not rejoin in time.
func TestConsumerLeavesWhenItDoesNotPoll(t *testing.T) {
	for _, static := range []bool{false, true} {
		t.Run(fmt.Sprint("static ", static), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": 2})
			var ev events
			opts := Options{Topics: []string{"t"}, SessionTimeout: time.Minute, RebalanceTimeout: time.Minute}
			aOpts := ev.options(opts)
			aOpts.RebalanceTimeout = 300 * time.Millisecond
			if static {
				aOpts.InstanceID = "a"
			}
			a, b := e.consumer(aOpts), e.consumer(opts)
			pollAll(t, sizes(a, b), a, b)
			aHad := a.Assigned()
			idA, _ := a.Generation()
			before := len(ev.get())
			members := func() []string {
				d, ok, err := e.s.DescribeGroup(context.Background(), "g")
				require.NoError(t, err)
				require.True(t, ok)
				var ids []string
				for _, m := range d.Members {
					ids = append(ids, m.MemberID)
				}
				return ids
			}

			// a stops polling; b goes on.
			start := time.Now()
			if static {
				aLost := func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.lost }
				pollInto(t, aLost, func(int, []Message) {}, b)
				require.Contains(t, members(), idA, "a static member stays for its session")
				require.Len(t, b.Assigned(), 1)
			} else {
				pollAll(t, func() bool { return len(b.Assigned()) == 2 }, b)
				require.NotContains(t, members(), idA)
				require.Less(t, time.Since(start), opts.SessionTimeout, "a left: its session did not expire")
			}

			pollFor(t, a, 50*time.Millisecond)
			pollAll(t, sizes(a, b), a, b)
			got := ev.get()[before:]
			require.Equal(t, fmt.Sprint("!", aHad), got[0], "a finds its partitions lost")
			idA2, _ := a.Generation()
			require.NotEqual(t, idA, idA2, "a joined again")
			require.Contains(t, members(), idA2)
		})
	}
}

// Close returns when its context ends, whatever the group waits for:
// here the first join of a static member, which waits for a member that
// died with its session still running (a process restarted), and which
// names no member id the consumer could leave with.
func TestConsumerCloseHonoursItsContext(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 4})
	a := e.consumer(Options{Topics: []string{"t"}, SessionTimeout: 10 * time.Second})
	pollAll(t, func() bool { return len(a.Assigned()) == 4 }, a)
	a.crash()
	b := e.consumer(Options{Topics: []string{"t"}, InstanceID: "b"})
	require.Empty(t, pollFor(t, b, 100*time.Millisecond), "b's join waits for a")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_ = b.Close(ctx)
	require.Less(t, time.Since(began), time.Second, "Close waited past its context")
}

// A process that restarts over its Dir resumes its group at once: the
// dynamic members its previous incarnation registered in-process died with
// it (the Dir's lock proves it gone), so the Service opened again ends
// their sessions rather than wait them out. A static member keeps its
// place for its session, and its next incarnation takes it (KIP-345).
func TestConsumerGroupResumesAtOnceAfterARestart(t *testing.T) {
	e := newConsumerEnv(t, map[string]int32{"t": 6})
	opts := Options{Topics: []string{"t"}, SessionTimeout: 10 * time.Second}
	static := opts
	static.InstanceID = "s1"
	a, b, st := e.consumer(opts), e.consumer(opts), e.consumer(static)
	pollAll(t, sizes(a, b, st), a, b, st) // one generation of the three
	a.crash()
	b.crash()
	st.crash()
	require.NoError(t, e.s.Close())
	s, err := group.OpenService(e.d, group.ServiceOptions{Partitions: 3, Config: group.Config{InitialRebalanceDelay: -1, MinSessionTimeout: 100 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	e.s = s

	began := time.Now()
	c, st2 := e.consumer(opts), e.consumer(static)
	pollAll(t, func() bool { return len(c.Assigned())+len(st2.Assigned()) == 6 && len(st2.Assigned()) > 0 }, c, st2)
	took := time.Since(began)
	t.Logf("the restarted group resumed in %v", took)
	require.Less(t, took, 2*time.Second, "the dead incarnation's members held the rebalance")
	d, ok, err := s.DescribeGroup(context.Background(), "g")
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, d.Members, 2, "the dead dynamic members are gone: %+v", d.Members)
	require.NoError(t, c.Close(context.Background()))
	require.NoError(t, st2.Close(context.Background()))
}
