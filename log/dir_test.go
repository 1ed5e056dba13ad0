package log

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

func dirOptions(fs vfs.FS) DirOptions {
	return DirOptions{Log: memOptions(fs), MaintenanceInterval: -1}
}

func TestTopicNamesFollowKafka(t *testing.T) {
	// Kafka's TopicTest.testTopicHasCollisionChars and testInvalidTopicNames
	// (clients/src/test/java/org/apache/kafka/common/internals/TopicTest.java).
	for _, name := range []string{"valid", "TOPIC", "nAmEs", "ar6", "VaL1d", "_0-9_.", "...", strings.Repeat("a", 249)} {
		require.NoError(t, ValidateTopic(name), name)
	}
	for _, name := range []string{"", "foo bar", "..", "foo:bar", "foo=bar", ".", strings.Repeat("a", 250), "bad/topic", "ümlaut"} {
		err := ValidateTopic(name)
		require.ErrorIs(t, err, ErrInvalidTopic, "%q", name)
	}
}

func TestDirTopics(t *testing.T) {
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("orders", TopicConfig{Partitions: 3, Retention: Retention{Age: time.Hour}}))
	require.NoError(t, d.CreateTopic("users", TopicConfig{Compact: Compacted}))
	require.ErrorIs(t, d.CreateTopic("orders", TopicConfig{}), ErrTopicExists)
	require.ErrorIs(t, d.CreateTopic("bad topic", TopicConfig{}), ErrInvalidTopic)
	require.ErrorIs(t, d.CreateTopic("neg", TopicConfig{Partitions: -2}), ErrInvalidOption)
	require.Equal(t, []string{"orders", "users"}, must(d.Topics()))

	_, err = d.Partition("nope", 0)
	require.ErrorIs(t, err, ErrUnknownTopic)
	_, err = d.Partition("orders", 3)
	require.ErrorIs(t, err, ErrUnknownPartition)
	require.ErrorContains(t, err, "topic orders partition 3, the topic has partitions 0 to 2")

	for p := int32(0); p < 3; p++ {
		part, err := d.Partition("orders", p)
		require.NoError(t, err)
		appendPartition(t, part, 0, 10*int(p+1))
	}
	require.NoError(t, d.AddPartitions("orders", 5))
	require.ErrorIs(t, d.AddPartitions("orders", 4), ErrInvalidOption)
	part, err := d.Partition("orders", 4)
	require.NoError(t, err)
	appendPartition(t, part, 0, 7)
	require.NoError(t, d.Close())

	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	cfg, err := d.TopicConfig("orders")
	require.NoError(t, err)
	require.Equal(t, int32(5), cfg.Partitions)
	require.Equal(t, time.Hour, cfg.Retention.Age)
	for p, n := range []int{10, 20, 30, 0, 7} {
		part, err := d.Partition("orders", int32(p))
		require.NoError(t, err)
		_, _, end, err := part.Offsets()
		require.NoError(t, err)
		require.EqualValues(t, n, end, "partition %d", p)
	}

	part = must(d.Partition("orders", 1))
	require.NoError(t, d.DeleteTopic("orders"))
	require.ErrorIs(t, d.DeleteTopic("orders"), ErrUnknownTopic)
	_, _, _, err = part.Offsets()
	require.ErrorIs(t, err, ErrStalePartition, "a deleted topic's handle fails")
	names, err := fs.List("/data")
	require.NoError(t, err)
	for _, n := range names {
		require.False(t, strings.HasPrefix(n, "orders-"), "folder %s left behind", n)
	}
	require.NoError(t, d.CreateTopic("orders", TopicConfig{Partitions: 1}))
	part, err = d.Partition("orders", 0)
	require.NoError(t, err)
	_, _, end, err := part.Offsets()
	require.NoError(t, err)
	require.Zero(t, end, "a recreated topic starts empty")
}

func appendPartition(t testing.TB, p *Partition, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		res, err := p.Append([]segment.Record{record(i, 50)})
		require.NoError(t, err)
		require.EqualValues(t, i, res.BaseOffset)
	}
}

// lockDirEnv makes the test binary a child that opens the data directory
// it names (or, after lockChildLog, the log directory) and exits with
// lockChildRefused if the lock refused it.
const (
	lockDirEnv       = "STRAND_LOCK_CHILD"
	lockChildLog     = "log:"
	lockChildRefused = 3
)

func runLockChild(dir string) int {
	var c io.Closer
	var err error
	if logDir, ok := strings.CutPrefix(dir, lockChildLog); ok {
		c, err = Open(logDir, Options{})
	} else {
		c, err = OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	}
	if errors.Is(err, ErrDirLocked) || errors.Is(err, ErrLogLocked) {
		fmt.Println(err)
		return lockChildRefused
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	c.Close()
	return 0
}

// lockChild runs the test binary as a lock child for arg (see lockDirEnv)
// and returns its exit code and output.
func lockChild(t *testing.T, arg string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockDirEnv+"="+arg)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

func TestDirIsLockedAgainstASecondProcess(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	code, out := lockChild(t, dir)
	require.Equal(t, lockChildRefused, code, "the second process must be refused: %s", out)
	require.Contains(t, out, dir, "the error names the directory")
	require.Contains(t, out, "in use by another process")

	require.NoError(t, d.Close())
	code, out = lockChild(t, dir)
	require.Zero(t, code, "once the first closes, the second opens: %s", out)
}

func TestDirIsLockedAgainstASecondOpen(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	_, err = OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.ErrorIs(t, err, ErrDirLocked)
	require.ErrorContains(t, err, dir)
	require.NoError(t, d.Close())
	d, err = OpenDir(dir, DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

func TestDirBoundsOpenFiles(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaxOpenFiles = 12 // four single-segment partitions
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 20}))
	for round := 0; round < 3; round++ {
		for p := int32(0); p < 20; p++ {
			part, err := d.Partition("t", p)
			require.NoError(t, err)
			appendPartition(t, part, round*5, 5)
			d.mu.Lock()
			open := d.open.Len()
			d.mu.Unlock()
			require.LessOrEqual(t, open, 4, "open partitions after appending to %d", p)
		}
	}
	for p := int32(0); p < 20; p++ {
		part, err := d.Partition("t", p)
		require.NoError(t, err)
		requireRecords(t, must(part.acquire(false)), 0, 15, 50)
		part.release(nil)
	}
	require.NoError(t, d.Close())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestDirFullDiskKeepsAcknowledgedRecords(t *testing.T) {
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	part := must(d.Partition("t", 0))
	appendPartition(t, part, 0, 10)
	var full sync.Mutex
	isFull := true
	fs.SetHook(func(op vfs.Op) error {
		full.Lock()
		defer full.Unlock()
		if isFull && op.Kind == vfs.OpWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	_, err = part.Append([]segment.Record{record(10, 50)})
	require.ErrorIs(t, err, syscall.ENOSPC)
	full.Lock()
	isFull = false
	full.Unlock()
	appendPartition(t, part, 10, 5)
	require.NoError(t, d.Close())
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	l := must(must(d.Partition("t", 0)).acquire(false))
	requireRecords(t, l, 0, 15, 50)
}

func TestDirMaintainAppliesRetention(t *testing.T) {
	fs := newMemFS(t)
	now := time.UnixMilli(1_000_000)
	opts := dirOptions(fs)
	opts.Log.Now = func() time.Time { return now }
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Retention: Retention{Age: time.Minute}}))
	part := must(d.Partition("t", 0))
	for i := 0; i < 400; i += 10 {
		var recs []segment.Record
		for j := i; j < i+10; j++ {
			recs = append(recs, record(j, 100)) // timestamps 1000+j ms: long expired
		}
		_, err := part.Append(recs)
		require.NoError(t, err)
	}
	require.NoError(t, d.Maintain())
	start, _, end, err := part.Offsets()
	require.NoError(t, err)
	require.Equal(t, end, start, "everything expired")
}

func TestProducerBatchesConcurrentProduces(t *testing.T) {
	for _, linger := range []time.Duration{0, 2 * time.Millisecond} {
		t.Run(fmt.Sprint("linger=", linger), func(t *testing.T) { testProducer(t, linger) })
	}
}

func testProducer(t *testing.T, linger time.Duration) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.Log.SegmentBytes = 1 << 20
	opts.Log.MaxIndexBytes = 64 << 10
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("events", TopicConfig{Partitions: 4}))
	pr, err := d.NewProducer(ProducerOptions{Linger: linger})
	require.NoError(t, err)

	const goroutines, each = 32, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := make(map[Produced]string)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("g%d-%d", g, i)
				res, err := pr.Produce(context.Background(), "events", AnyPartition, segment.Record{Key: []byte(key), Value: []byte(key)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				_, dup := got[res]
				got[res] = key
				mu.Unlock()
				if dup {
					t.Errorf("%v assigned twice", res)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, pr.Close())
	require.Len(t, got, goroutines*each)

	var appends int64
	for p := int32(0); p < 4; p++ {
		part := must(d.Partition("events", p))
		st, err := part.Stats()
		require.NoError(t, err)
		appends += st.Appends
		for r, err := range part.Records(0, ReadCommitted) {
			require.NoError(t, err)
			require.Equal(t, got[Produced{Partition: p, Offset: r.Offset}], string(r.Value))
			// Kafka's murmur2 routing: the same key, the same partition.
			require.Equal(t, p, HashPartitioner(nil).Partition(r.Key, 4))
		}
	}
	require.Less(t, appends, int64(goroutines*each), "records were batched")
	t.Logf("%d records in %d appends", goroutines*each, appends)

	_, err = pr.Produce(context.Background(), "events", 0, segment.Record{})
	require.ErrorIs(t, err, ErrClosed)
}

func TestDirMaintainCompacts(t *testing.T) {
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("users", TopicConfig{Compact: Compacted}))
	part := must(d.Partition("users", 0))
	for i := 0; i < 600; i++ {
		_, err := part.Append([]segment.Record{{Key: fmt.Appendf(nil, "user-%d", i%10), Value: fmt.Appendf(nil, "v%d", i), Timestamp: int64(1000 + i)}})
		require.NoError(t, err)
	}
	require.NoError(t, d.Maintain())
	latest := make(map[string]string)
	n := 0
	for r, err := range part.Records(0, ReadCommitted) {
		require.NoError(t, err)
		latest[string(r.Key)] = string(r.Value)
		n++
	}
	require.Less(t, n, 300, "older versions of the keys were compacted away")
	require.Len(t, latest, 10)
	require.Equal(t, "v599", latest["user-9"])
}

func TestFsyncPolicyText(t *testing.T) {
	for _, p := range []FsyncPolicy{FsyncAlways(), FsyncNever(), FsyncInterval(250 * time.Millisecond), FsyncEvery(1000, 0), FsyncEvery(0, 1<<20)} {
		text, err := p.MarshalText()
		require.NoError(t, err)
		var back FsyncPolicy
		require.NoError(t, back.UnmarshalText(text), "%s", text)
		require.Equal(t, p, back, "%s", text)
	}
	for _, bad := range []string{"", "sometimes", "interval:", "interval:-1s", "every:0:0", "every:x:1", "always:1"} {
		_, err := ParseFsyncPolicy(bad)
		require.ErrorIs(t, err, ErrInvalidOption, "%q", bad)
		require.ErrorContains(t, err, "allowed")
	}
}

func TestPartitionHandle(t *testing.T) {
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	p := must(d.Partition("t", 0))
	require.Equal(t, "t", p.Topic())
	require.EqualValues(t, 0, p.ID())

	b, err := segment.AppendBatch(nil, []segment.Record{record(0, 10), record(1, 10)}, segment.BuildOptions{})
	require.NoError(t, err)
	res, err := p.AppendBatch(b)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.LastOffset)
	appendPartition(t, p, 2, 8)

	bs, err := p.Read(0, 1<<20, ReadCommitted)
	require.NoError(t, err)
	n := 0
	for b, err := range bs.All() {
		require.NoError(t, err)
		n += int(b.NumRecords())
	}
	require.NoError(t, bs.Close())
	require.Equal(t, 10, n)

	off, ok, err := p.OffsetForTimestamp(1005)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 5, off)

	require.NoError(t, p.DeleteRecordsBefore(4))
	start, hw, end, err := p.Offsets()
	require.NoError(t, err)
	require.Equal(t, [3]int64{4, 10, 10}, [3]int64{start, hw, end})
}

func TestProduceBadInput(t *testing.T) {
	fs := newMemFS(t)
	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 2}))
	_, err = d.NewProducer(ProducerOptions{BatchBytes: -1})
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = d.NewProducer(ProducerOptions{Linger: -time.Second})
	require.ErrorIs(t, err, ErrInvalidOption)
	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	defer pr.Close()
	ctx := context.Background()
	_, err = pr.Produce(ctx, "nope", AnyPartition, segment.Record{Value: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	_, err = pr.Produce(ctx, "t", 2, segment.Record{Value: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownPartition)
	res, err := pr.Produce(ctx, "t", 1, segment.Record{Value: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, Produced{Partition: 1, Offset: 0}, res)
}

// TestDirConcurrentEviction appends to and reads from many partitions from
// many goroutines while the open-file bound keeps closing them, a topic is
// deleted and the Dir is closed: every append that succeeded is read back
// in order, and nothing but ErrClosed, ErrUnknownTopic (Dir.Partition of
// the deleted topic) or ErrStalePartition (a handle to it) comes out.
func TestDirConcurrentEviction(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaxOpenFiles = 9
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("kept", TopicConfig{Partitions: 8}))
	require.NoError(t, d.CreateTopic("doomed", TopicConfig{Partitions: 4}))

	var mu sync.Mutex
	acked := make(map[int32][]string) // kept's partitions: values in offset order
	allowed := func(err error) bool {
		return errors.Is(err, ErrClosed) || errors.Is(err, ErrUnknownTopic) || errors.Is(err, ErrStalePartition)
	}
	// The topic is deleted once the workers have appended to it a few
	// times, so that the delete lands among their calls.
	var doomedAppends atomic.Int32
	warm := make(chan struct{})
	var wg, workers sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		workers.Add(1)
		go func() {
			defer wg.Done()
			defer workers.Done()
			for i := 0; i < 60; i++ {
				topic, parts := "kept", int32(8)
				if i%5 == 0 {
					topic, parts = "doomed", 4
				}
				p, err := d.Partition(topic, int32((g+i)%int(parts)))
				if err != nil {
					if !allowed(err) {
						t.Error(err)
					}
					return
				}
				v := fmt.Sprintf("g%d-%d", g, i)
				if topic == "kept" {
					mu.Lock() // offsets and the model move together
				}
				res, err := p.Append([]segment.Record{{Value: []byte(v), Timestamp: 1}})
				if topic == "kept" {
					if err == nil {
						if want := int64(len(acked[p.ID()])); res.BaseOffset != want {
							t.Errorf("partition %d: appended at %d, want %d", p.ID(), res.BaseOffset, want)
						}
						acked[p.ID()] = append(acked[p.ID()], v)
					}
					mu.Unlock()
				}
				if err != nil && !allowed(err) {
					t.Error(err)
				}
				if topic == "doomed" && err == nil && doomedAppends.Add(1) == 6 {
					close(warm)
				}
				for r, err := range p.Records(0, ReadCommitted) {
					if err != nil {
						if !allowed(err) {
							t.Error(err)
						}
						break
					}
					_ = r
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-warm:
		case <-workersDone:
		}
		if err := d.DeleteTopic("doomed"); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	for p := int32(0); p < 8; p++ {
		var got []string
		for r, err := range must(d.Partition("kept", p)).Records(0, ReadCommitted) {
			require.NoError(t, err)
			got = append(got, string(r.Value))
		}
		require.Equal(t, acked[p], got, "partition %d", p)
	}
	require.NoError(t, d.Close())
	_, err = d.Partition("kept", 0)
	require.ErrorIs(t, err, ErrClosed)
}
