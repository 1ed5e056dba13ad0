package log

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// TestAlterTopicConfigAppliesToOpenPartitions: Kafka's
// IncrementalAlterConfigs on a topic whose partition is open: segment
// size, compression and max batch bytes change the next append; the
// change is in the file, and survives a reopen.
func TestAlterTopicConfigAppliesToOpenPartitions(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{SegmentBytes: 1 << 20}))
	p := must(d.Partition("t", 0))
	_, err := p.Append([]segment.Record{record(0, 100)})
	require.NoError(t, err)
	require.Equal(t, 1, must(p.Stats()).Segments)

	cfg, err := d.AlterTopicConfig("t", func(c *TopicConfig) {
		c.SegmentBytes = 4 << 10
		c.Compression = segment.CodecLZ4
		c.MaxBatchBytes = 2 << 10
		c.Retention = Retention{Age: time.Hour}
		c.Fsync = FsyncNever()
	})
	require.NoError(t, err)
	require.Equal(t, int64(4<<10), cfg.SegmentBytes)
	require.Equal(t, cfg, must(d.TopicConfig("t")))

	noise := make([]byte, 3<<10) // lz4 cannot shrink it below MaxBatchBytes
	_, _ = rand.Read(noise)
	_, err = p.Append([]segment.Record{NewRecord(nil, noise)})
	require.ErrorIs(t, err, segment.ErrBatchTooLarge, "the new MaxBatchBytes")
	for range 60 {
		_, err := p.Append([]segment.Record{NewRecord(nil, noise[:200])})
		require.NoError(t, err)
	}
	require.Greater(t, must(p.Stats()).Segments, 2, "the new SegmentBytes rolls segments")
	bs, err := p.Read(1, 1<<20, ReadCommitted)
	require.NoError(t, err)
	for b, err := range bs.All() {
		require.NoError(t, err)
		require.Equal(t, segment.CodecLZ4, b.Codec(), "the new Compression")
		break
	}
	require.NoError(t, bs.Close())
	require.NoError(t, d.Close())

	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, cfg, must(d.TopicConfig("t")), "persisted")
}

// TestAlterTopicConfigRefusesBadValues: a change is checked as a new
// topic's configuration is, and a refused change leaves the old one.
func TestAlterTopicConfigRefusesBadValues(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 2}))
	before := must(d.TopicConfig("t"))
	for name, alter := range map[string]func(*TopicConfig){
		"SegmentBytes":    func(c *TopicConfig) { c.SegmentBytes = 10 },
		"Retention.Age":   func(c *TopicConfig) { c.Retention.Age = -time.Hour },
		"Retention.Bytes": func(c *TopicConfig) { c.Retention.Bytes = -2 },
		"Partitions":      func(c *TopicConfig) { c.Partitions = 3 },
		"MaxBatchBytes":   func(c *TopicConfig) { c.MaxBatchBytes = 1 },
		"Compression":     func(c *TopicConfig) { c.Compression = segment.CodecZstd },
	} {
		_, err := d.AlterTopicConfig("t", alter)
		require.ErrorIs(t, err, ErrInvalidOption, name)
		require.ErrorContains(t, err, strings.Split(name, ".")[0], name)
		require.Equal(t, before, must(d.TopicConfig("t")), name)
	}
	_, err := d.AlterTopicConfig("nope", func(*TopicConfig) {})
	require.ErrorIs(t, err, ErrUnknownTopic)
}

// TestTopicTurnsOffTheDirsDefaults: Unlimited and NotCompacted override
// what the Dir's defaults turn on (zero would take them), and
// AlterTopicConfig turns them on again.
func TestTopicTurnsOffTheDirsDefaults(t *testing.T) {
	fs := newMemFS(t)
	now := time.UnixMilli(1_700_000_000_000)
	opts := dirOptions(fs)
	opts.Log.Now = func() time.Time { return now }
	opts.Defaults = TopicConfig{Retention: Retention{Age: time.Hour, Bytes: 1 << 30}, Compact: Compacted}
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()

	require.NoError(t, d.CreateTopic("dflt", TopicConfig{}))
	require.NoError(t, d.CreateTopic("keep", TopicConfig{Retention: Retention{Age: Unlimited}, Compact: NotCompacted}))
	require.Equal(t, Retention{Age: time.Hour, Bytes: 1 << 30}, must(d.TopicConfig("dflt")).Retention)
	require.Equal(t, Compacted, must(d.TopicConfig("dflt")).Compact)
	keep := must(d.TopicConfig("keep"))
	require.Equal(t, Retention{Age: Unlimited, Bytes: 1 << 30}, keep.Retention, "each retention field falls back on its own")
	require.Equal(t, NotCompacted, keep.Compact)

	p := must(d.Partition("keep", 0))
	for i := range 100 {
		_, err := p.Append([]segment.Record{NewRecordAt(nil, bytes.Repeat([]byte{'v'}, 200), now.Add(-48*time.Hour).Add(time.Duration(i)*time.Millisecond))})
		require.NoError(t, err, "a topic not compacted takes records without a key")
	}
	require.NoError(t, d.Maintain())
	start, _, _, err := p.Offsets()
	require.NoError(t, err)
	require.Equal(t, int64(0), start, "no retention by age: 48-hour-old records stay")

	_, err = d.AlterTopicConfig("keep", func(c *TopicConfig) { c.Retention.Age = 0 }) // back to the Dir's default
	require.NoError(t, err)
	require.Equal(t, time.Hour, must(d.TopicConfig("keep")).Retention.Age)
	require.NoError(t, d.Maintain())
	start, _, _, err = p.Offsets()
	require.NoError(t, err)
	require.Positive(t, start, "the Dir's hour of retention applies now")

	_, err = d.AlterTopicConfig("keep", func(c *TopicConfig) { c.Compact = Compacted })
	require.NoError(t, err)
	_, err = p.Append([]segment.Record{NewRecord(nil, []byte("v"))})
	require.ErrorIs(t, err, ErrKeyRequired, "compacted from now on")
}

// TestTopicsFilesUseOneNamingStyle: the file is snake case throughout, and
// a file of an earlier version, with "Age" and "Bytes" and compact true,
// reads the same.
func TestTopicsFilesUseOneNamingStyle(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Retention: Retention{Age: time.Hour, Bytes: Unlimited}, Compact: NotCompacted, SegmentAge: time.Minute}))
	data, err := vfs.ReadFile(fs, "/data/.topics/t.json")
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	require.Equal(t, map[string]any{"age": float64(time.Hour), "bytes": float64(-1)}, raw["retention"])
	require.Equal(t, false, raw["compact"])
	for key := range raw {
		require.Equal(t, strings.ToLower(key), key, "key %q in %s", key, data)
	}
	require.NoError(t, d.Close())

	old := `{"partitions": 2, "retention": {"Age": 3600000000000, "Bytes": 0}, "compact": true, "fsync": "never"}`
	require.NoError(t, vfs.WriteFileAtomic(fs, "/data/.topics/old.json", []byte(old)))
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	defer d.Close()
	cfg := must(d.TopicConfig("old"))
	require.Equal(t, TopicConfig{Partitions: 2, Retention: Retention{Age: time.Hour}, Compact: Compacted, Fsync: FsyncNever()}, cfg)
}

// TestTopicConfigRefusesNegativeValues: a negative partition count or
// retention (but Unlimited) is refused where the user gives it, in a
// topic's configuration and in the Dir's defaults; a zero partition
// count means the default, documented as such.
func TestTopicConfigRefusesNegativeValues(t *testing.T) {
	fs, d := openMemDir(t)
	require.ErrorIs(t, d.CreateTopic("a", TopicConfig{Retention: Retention{Age: -5 * time.Hour}}), ErrInvalidOption)
	require.ErrorIs(t, d.CreateTopic("b", TopicConfig{Retention: Retention{Bytes: -100}}), ErrInvalidOption)
	require.ErrorIs(t, d.CreateTopic("c", TopicConfig{Partitions: -1}), ErrInvalidOption)
	require.NoError(t, d.CreateTopic("d", TopicConfig{Partitions: 0}))
	require.Equal(t, int32(1), must(d.TopicConfig("d")).Partitions, "zero takes Defaults.Partitions, whose zero is 1")
	require.NoError(t, d.Close())

	for name, dflt := range map[string]TopicConfig{
		"Partitions":    {Partitions: -1},
		"Retention.Age": {Retention: Retention{Age: -time.Second}},
		"Compact":       {Compact: 7},
	} {
		opts := dirOptions(fs)
		opts.Defaults = dflt
		_, err := OpenDir("/data", opts)
		require.ErrorIs(t, err, ErrInvalidOption, name)
		require.ErrorContains(t, err, "Defaults", name)
	}
}

// TestClosedDirRefusesEveryCall: after Close, every method of a Dir
// returns ErrClosed.
func TestClosedDirRefusesEveryCall(t *testing.T) {
	_, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	require.NoError(t, d.Close())
	_, err := d.NewProducer(ProducerOptions{})
	require.ErrorIs(t, err, ErrClosed, "NewProducer")
	require.ErrorIs(t, d.Maintain(), ErrClosed, "Maintain")
	_, err = d.TopicConfig("t")
	require.ErrorIs(t, err, ErrClosed, "TopicConfig")
	_, err = d.Topics()
	require.ErrorIs(t, err, ErrClosed, "Topics")
	_, err = d.AlterTopicConfig("t", func(*TopicConfig) {})
	require.ErrorIs(t, err, ErrClosed, "AlterTopicConfig")
	_, err = d.Partition("t", 0)
	require.ErrorIs(t, err, ErrClosed, "Partition")
	require.ErrorIs(t, d.CreateTopic("u", TopicConfig{}), ErrClosed, "CreateTopic")
	require.ErrorIs(t, d.AddPartitions("t", 2), ErrClosed, "AddPartitions")
	require.ErrorIs(t, d.DeleteTopic("t"), ErrClosed, "DeleteTopic")
	_, err = d.Strays()
	require.ErrorIs(t, err, ErrClosed, "Strays")
	require.ErrorIs(t, d.Close(), ErrClosed, "Close")
}

// TestDirWithExternalHighWatermark: a Dir whose replication owns the high
// watermark hides produced records from consumers until the owner moves it
// through the Partition.
func TestDirWithExternalHighWatermark(t *testing.T) {
	opts := dirOptions(newMemFS(t))
	opts.Log.ExternalHighWatermark = true
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	p := must(d.Partition("t", 0))
	_, err = p.Append([]segment.Record{NewRecord(nil, []byte("v"))})
	require.NoError(t, err)
	_, hw, end, err := p.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 0, hw, "not committed until replication says so")
	require.EqualValues(t, 1, end)
	hw, err = p.AdvanceHighWatermark(end)
	require.NoError(t, err)
	require.EqualValues(t, 1, hw)
	for rec, err := range p.Records(0, ReadCommitted) {
		require.NoError(t, err)
		require.Equal(t, "v", string(rec.Value))
	}
}

// TestStalePartitionHandle: a handle of a deleted topic says so, even once
// a topic of that name exists again; the new handle works.
func TestStalePartitionHandle(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	old := must(d.Partition("t", 0))
	require.NoError(t, d.DeleteTopic("t"))
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	_, err := old.Append([]segment.Record{NewRecord(nil, []byte("v"))})
	require.ErrorIs(t, err, ErrStalePartition)
	require.NotErrorIs(t, err, ErrUnknownTopic, "the topic exists")
	_, err = must(d.Partition("t", 0)).Append([]segment.Record{NewRecord(nil, []byte("v"))})
	require.NoError(t, err)
}

// TestUnknownPartitionNamesTopicAndPartition: partition -1 of t0 is not
// "t0--1".
func TestUnknownPartitionNamesTopicAndPartition(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t0", TopicConfig{}))
	_, err := d.Partition("t0", -1)
	require.ErrorIs(t, err, ErrUnknownPartition)
	require.ErrorContains(t, err, "topic t0 partition -1")
	require.NotContains(t, err.Error(), "t0--1")
}

// TestPartitionSyncUnderFsyncNever: Partition.Sync makes a FsyncNever
// topic's appends survive a power cut, which they would not without it.
func TestPartitionSyncUnderFsyncNever(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Fsync: FsyncNever()}))
	p := must(d.Partition("t", 0))
	_, err := p.Append([]segment.Record{NewRecord(nil, []byte("synced"))})
	require.NoError(t, err)
	require.NoError(t, p.Sync())
	_, err = p.Append([]segment.Record{NewRecord(nil, []byte("not synced"))})
	require.NoError(t, err)

	after := fs.Crash(vfs.CrashOptions{})
	d2, err := OpenDir("/data", dirOptions(after))
	require.NoError(t, err)
	defer d2.Close()
	var got []string
	for r, err := range must(d2.Partition("t", 0)).Records(0, ReadCommitted) {
		require.NoError(t, err)
		got = append(got, string(r.Value))
	}
	require.Equal(t, []string{"synced"}, got)
}

// TestOffsetForTimestampLatestAndEarliest: Kafka's ListOffsets timestamps
// -1 (latest: the high watermark) and -2 (earliest: the log start).
func TestOffsetForTimestampLatestAndEarliest(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	p := must(d.Partition("t", 0))
	base := time.UnixMilli(1_700_000_000_000)
	for i := range 10 {
		_, err := p.Append([]segment.Record{NewRecordAt(nil, []byte("v"), base.Add(time.Duration(i)*time.Second))})
		require.NoError(t, err)
	}
	require.NoError(t, p.DeleteRecordsBefore(3))
	off, ok, err := p.OffsetForTimestamp(LatestTimestamp)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(10), off)
	off, ok, err = p.OffsetForTimestamp(EarliestTimestamp)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(3), off)
	off, ok, err = p.OffsetForTimestamp(base.Add(5 * time.Second).UnixMilli())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(5), off, "NewRecordAt stored milliseconds")
	_, _, err = p.OffsetForTimestamp(-3)
	require.ErrorIs(t, err, ErrInvalidOption)
}

// TestNewRecordAt: a time.Time becomes Kafka's milliseconds, and the zero
// time leaves the timestamp to the append.
func TestNewRecordAt(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 123_456_789, time.UTC)
	r := NewRecordAt([]byte("k"), []byte("v"), at)
	require.Equal(t, at.UnixMilli(), r.Timestamp)
	require.Equal(t, []byte("k"), r.Key)
	require.Equal(t, []byte("v"), r.Value)
	require.Zero(t, NewRecordAt(nil, nil, time.Time{}).Timestamp)
	require.Zero(t, NewRecord(nil, nil).Timestamp)
}

// lockedBuffer is a bytes.Buffer for a logger's handler and a test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBackgroundMaintenanceLogsFailures: a retention that fails in the
// background is reported to DirOptions.Logger, naming the partition.
func TestBackgroundMaintenanceLogsFailures(t *testing.T) {
	fs := newMemFS(t)
	var out lockedBuffer
	opts := dirOptions(fs)
	opts.Logger = slog.New(slog.NewTextHandler(&out, nil))
	opts.MaintenanceInterval = 5 * time.Millisecond
	opts.Defaults.Retention.Age = time.Hour
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	p := must(d.Partition("t", 0))
	_, err = p.Append([]segment.Record{NewRecordAt(nil, []byte("old"), time.Now().Add(-48*time.Hour))})
	require.NoError(t, err)
	fs.SetHook(func(op vfs.Op) error {
		if strings.HasPrefix(op.Name, "/data/t-0/") {
			return syscall.EIO
		}
		return nil
	})
	defer fs.SetHook(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !strings.Contains(out.String(), "level=ERROR") {
		select {
		case <-ctx.Done():
			t.Fatalf("nothing logged: %q", out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.Contains(t, out.String(), "topic t partition 0")
	require.Contains(t, out.String(), "input/output error")
}

// TestAlterTopicConfigWhileAppending: changes race appends, and
// partitions that the open-file bound keeps closing and reopening; every
// append succeeds under the old options or the new, and every partition
// ends with the last change (the race detector checks the rest).
func TestAlterTopicConfigWhileAppending(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaxOpenFiles = 8 // fewer than the partitions' files: they close and reopen
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	const parts = 4
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: parts}))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range int32(parts) {
		wg.Go(func() {
			p := must(d.Partition("t", i))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.Append([]segment.Record{record(int(i), 300)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 40 {
		_, err := d.AlterTopicConfig("t", func(c *TopicConfig) {
			c.Compression = []segment.Codec{segment.CodecNone, segment.CodecLZ4}[i%2]
			c.SegmentBytes = []int64{4 << 10, 16 << 10}[i%2]
			c.Fsync = []FsyncPolicy{FsyncAlways(), FsyncNever()}[i%2]
		})
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	require.Equal(t, segment.CodecLZ4, must(d.TopicConfig("t")).Compression)
	for i := range int32(parts) {
		p := must(d.Partition("t", i))
		res, err := p.Append([]segment.Record{record(0, 300)})
		require.NoError(t, err)
		bs, err := p.Read(res.BaseOffset, 1<<20, ReadCommitted)
		require.NoError(t, err)
		for b, err := range bs.All() {
			require.NoError(t, err)
			require.Equal(t, segment.CodecLZ4, b.Codec(), "partition %d", i)
			break
		}
		require.NoError(t, bs.Close())
	}
}

// TestTopicIDs: a topic gets a random id when created (KIP-516), stored
// with its configuration in Kafka's text form and kept by reopens,
// configuration changes and added partitions; a topic deleted and created
// again under its name gets a new one; a file of an earlier version, with
// no id, gets one at OpenDir that stays; a malformed id is
// ErrBadTopicConfig.
func TestTopicIDs(t *testing.T) {
	fs, d := openMemDir(t)
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	require.NoError(t, d.CreateTopic("u", TopicConfig{}))
	id := must(d.TopicID("t"))
	require.NotEqual(t, [16]byte{}, id)
	require.NotEqual(t, id, must(d.TopicID("u")))
	_, err := d.TopicID("nope")
	require.ErrorIs(t, err, ErrUnknownTopic)

	var raw map[string]any
	require.NoError(t, json.Unmarshal(must(vfs.ReadFile(fs, "/data/.topics/t.json")), &raw))
	require.Equal(t, base64.RawURLEncoding.EncodeToString(id[:]), raw["id"])

	_, err = d.AlterTopicConfig("t", func(c *TopicConfig) { c.SegmentBytes = 1 << 20 })
	require.NoError(t, err)
	require.NoError(t, d.AddPartitions("t", 3))
	require.Equal(t, id, must(d.TopicID("t")))
	require.NoError(t, d.Close())

	old := `{"partitions": 1, "fsync": "never"}`
	require.NoError(t, vfs.WriteFileAtomic(fs, "/data/.topics/old.json", []byte(old)))
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	require.Equal(t, id, must(d.TopicID("t")), "kept by a reopen")
	oldID := must(d.TopicID("old"))
	require.NotEqual(t, [16]byte{}, oldID)
	require.NoError(t, d.Close())
	d, err = OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	require.Equal(t, oldID, must(d.TopicID("old")), "the id given at the first open was stored")

	require.NoError(t, d.DeleteTopic("t"))
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	require.NotEqual(t, id, must(d.TopicID("t")), "a new topic of the same name")

	given := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	require.NoError(t, d.CreateTopicWithID("replica", given, TopicConfig{}), "a replica of a cluster's topic")
	require.Equal(t, given, must(d.TopicID("replica")))
	require.ErrorIs(t, d.CreateTopicWithID("zero", [16]byte{}, TopicConfig{}), ErrInvalidOption)
	require.NoError(t, d.Close())

	bad := `{"id": "not-an-id", "partitions": 1}`
	require.NoError(t, vfs.WriteFileAtomic(fs, "/data/.topics/bad.json", []byte(bad)))
	_, err = OpenDir("/data", dirOptions(fs))
	require.ErrorIs(t, err, ErrBadTopicConfig)
	require.ErrorContains(t, err, "bad.json")
}
