package log

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// requireNoConfig checks that no configuration file of topic was written.
func requireNoConfig(t *testing.T, fs vfs.FS, topic string) {
	t.Helper()
	names, err := fs.List("/data/.topics")
	require.NoError(t, err)
	for _, n := range names {
		require.False(t, strings.HasPrefix(n, topic+"."), "%s written", n)
	}
}

// TestPartitionCountIsBounded: a topic of MaxInt32 partitions ran the
// process out of memory, and, its configuration written first, every
// later OpenDir too. The count is bounded by MaxPartitions, checked before
// anything is written, and a configuration on disk past it is refused.
func TestPartitionCountIsBounded(t *testing.T) {
	fs, d := openMemDir(t)
	for _, n := range []int32{MaxPartitions + 1, math.MaxInt32} {
		err := d.CreateTopic("huge", TopicConfig{Partitions: n})
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("Partitions is %d, allowed 1 to %d", n, MaxPartitions))
	}
	requireNoConfig(t, fs, "huge")
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	for _, n := range []int32{MaxPartitions + 1, math.MaxInt32} {
		err := d.AddPartitions("t", n)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("allowed 1 to %d", MaxPartitions))
	}
	require.NoError(t, d.Close())

	d, err := OpenDir("/data", dirOptions(fs))
	require.NoError(t, err)
	cfg, err := d.TopicConfig("t")
	require.NoError(t, err)
	require.EqualValues(t, 1, cfg.Partitions, "a refused increase wrote nothing")
	require.NoError(t, d.Close())

	opts := dirOptions(fs)
	opts.Defaults.Partitions = MaxPartitions + 1
	_, err = OpenDir("/data", opts)
	require.ErrorIs(t, err, ErrInvalidOption)

	writeFile(t, fs, "/data/.topics/t.json", []byte(`{"partitions": 2147483647}`))
	_, err = OpenDir("/data", dirOptions(fs))
	require.ErrorIs(t, err, ErrBadTopicConfig)
	require.ErrorContains(t, err, "/data/.topics/t.json")
}

// TestTopicConfigThatCannotOpenIsNeverWritten: a configuration whose
// partitions could not open is refused before it is written.
func TestTopicConfigThatCannotOpenIsNeverWritten(t *testing.T) {
	fs, d := openMemDir(t)
	defer d.Close()
	for _, cfg := range []TopicConfig{
		{SegmentBytes: 100},
		{Compression: segment.CodecZstd},
		{Compact: Compacted, MinCleanableDirtyRatio: 2},
	} {
		require.ErrorIs(t, d.CreateTopic("t", cfg), ErrInvalidOption, "%+v", cfg)
	}
	requireNoConfig(t, fs, "t")
}

// TestBadTopicConfigHasItsOwnError: a configuration file that is not JSON
// was reported as a corrupt batch.
func TestBadTopicConfigHasItsOwnError(t *testing.T) {
	for _, text := range []string{`{"partitions": `, `{"partitions": 0}`, `{"partitions": 1, "segment_bytes": 10}`, `[]`} {
		fs := newMemFS(t)
		require.NoError(t, fs.MkdirAll("/data/.topics", 0o755))
		writeFile(t, fs, "/data/.topics/t.json", []byte(text))
		_, err := OpenDir("/data", dirOptions(fs))
		require.ErrorIs(t, err, ErrBadTopicConfig, text)
		require.NotErrorIs(t, err, ErrCorrupt, text)
		require.ErrorContains(t, err, "/data/.topics/t.json", text)
	}
}

// TestKeyMapBytesIsBounded: a huge KeyMapBytes was allocated as asked.
// Kafka caps the cleaner's dedupe buffer at 2 GiB - 1 per thread
// (LogCleaner: math.min(dedupeBufferSize / numThreads, Int.MaxValue)).
func TestKeyMapBytesIsBounded(t *testing.T) {
	_, err := CompactOptions{KeyMapBytes: math.MaxInt32 + 1}.withDefaults()
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "KeyMapBytes is 2147483648, allowed 1024 to 2147483647")

	fs := newMemFS(t)
	l, err := Open("/data/t-0", memOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	appendN(t, l, 0, 10, 1, 10)
	_, err = l.Compact(time.Now(), CompactOptions{KeyMapBytes: math.MaxInt, Force: true})
	require.ErrorIs(t, err, ErrInvalidOption)
}

// TestEveryAppendPathChecksMaxBatchBytes: Append, Partition.Append and the
// Producer built batches past MaxBatchBytes and appended them.
func TestEveryAppendPathChecksMaxBatchBytes(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.Log.MaxBatchBytes = 4096
	big := segment.Record{Key: []byte("k"), Value: make([]byte, 5000)}

	l, err := Open("/data/log", opts.Log)
	require.NoError(t, err)
	_, err = l.Append([]segment.Record{big})
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)
	require.ErrorContains(t, err, "MaxBatchBytes is 4096")
	require.Zero(t, l.LogEndOffset())
	require.NoError(t, l.Close())

	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	p := must(d.Partition("t", 0))
	_, err = p.Append([]segment.Record{big})
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)

	pr, err := d.NewProducer(ProducerOptions{Linger: 20 * time.Millisecond, BatchBytes: 1 << 20})
	require.NoError(t, err)
	defer pr.Close()
	_, err = pr.Produce(context.Background(), "t", 0, big)
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)

	// Many small records that would make one batch past the bound are
	// split into batches within it, and none of them fails.
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pr.Produce(context.Background(), "t", 0, record(i, 100)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	n, next := 0, int64(0)
	for next < 100 {
		bs, err := p.Read(next, math.MaxInt32, ReadLogEnd) // up to a segment's end
		require.NoError(t, err)
		for b, err := range bs.All() {
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), 4096)
			n += int(b.NumRecords())
			next = b.LastOffset() + 1
		}
		require.NoError(t, bs.Close())
	}
	require.Equal(t, 100, n)
}

// lz4Zeros returns an lz4 batch of one record, key "k" and n zeros for
// its value: a few hundred KiB that decompress to n bytes. Past
// segment.MaxDecompressedSize segment.AppendBatch refuses to build it, but
// another producer may send it.
func lz4Zeros(t *testing.T, n int) segment.Batch {
	t.Helper()
	var body bytes.Buffer
	zw := lz4.NewWriter(&body)
	rec := []byte{0, 0, 0}                   // attributes, timestamp delta, offset delta
	rec = binary.AppendVarint(rec, 1)        // key length
	rec = append(rec, 'k')                   // key
	rec = binary.AppendVarint(rec, int64(n)) // value length
	size := len(rec) + n + 1                 // ... value, header count
	_, err := zw.Write(append(binary.AppendVarint(nil, int64(size)), rec...))
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for left := n; left > 0; left -= len(zeros) {
		_, err := zw.Write(zeros[:min(left, len(zeros))])
		require.NoError(t, err)
	}
	_, err = zw.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, zw.Close())

	// A real batch's header, with the records swapped and the length and
	// CRC fixed up.
	b, err := segment.AppendBatch(nil, []segment.Record{{Key: []byte("k")}}, segment.BuildOptions{Codec: segment.CodecLZ4})
	require.NoError(t, err)
	b = append(b[:segment.HeaderSize:segment.HeaderSize], body.Bytes()...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	require.NoError(t, segment.Batch(b).Validate())
	return b
}

// TestCompressedBatchesMustDecompress: an lz4 topic accepted 80 MiB of
// zeros (a few hundred KiB compressed) that Records can never decompress
// (it stops at segment.MaxDecompressedSize), so reading and compacting the
// partition failed forever. The write path refuses what the read path
// cannot read: records too large are refused before a batch is built, and
// a producer's compressed batch is decompressed and checked.
func TestCompressedBatchesMustDecompress(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("z", TopicConfig{Compression: segment.CodecLZ4, Compact: Compacted}))
	p := must(d.Partition("z", 0))
	_, err := p.Append([]segment.Record{{Key: []byte("k"), Value: make([]byte, 80<<20)}})
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)
	require.ErrorContains(t, err, "decompress")

	garbled := lz4Zeros(t, 1<<10)
	garbled[len(garbled)-3] ^= 0xff
	binary.BigEndian.PutUint32(garbled[17:], crc32.Checksum(garbled[21:], crc32.MakeTable(crc32.Castagnoli)))
	_, err = p.AppendBatch(garbled)
	require.ErrorIs(t, err, segment.ErrCorrupt, "the records are read before the batch is appended")
	_, err = p.AppendBatch(lz4Zeros(t, 1<<20))
	require.NoError(t, err, "one that decompresses is appended")
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 1, end)
	require.NoError(t, d.Maintain())
}

// TestUndecompressibleBatchesAreRefused: a producer's batch that
// decompresses past segment.MaxDecompressedSize is refused, and so are
// records whose keys and values fit but whose encoding does not, when the
// batch is built.
func TestUndecompressibleBatchesAreRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("compresses and decompresses 64 MiB; TestCompressedBatchesMustDecompress is the short variant")
	}
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("z", TopicConfig{Compression: segment.CodecLZ4}))
	p := must(d.Partition("z", 0))
	_, err := p.AppendBatch(lz4Zeros(t, segment.MaxDecompressedSize+1))
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)
	_, err = p.Append([]segment.Record{{Key: []byte("k"), Value: make([]byte, segment.MaxDecompressedSize-1)}})
	require.ErrorIs(t, err, segment.ErrBatchTooLarge)
	require.ErrorContains(t, err, "uncompressed")
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	require.Zero(t, end)
}

// TestCompactedTopicRefusesRecordsWithoutKey is Kafka's rule
// (LogValidator: "Compacted topic cannot accept message without key"):
// compaction would delete such records silently.
func TestCompactedTopicRefusesRecordsWithoutKey(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("c", TopicConfig{Compact: Compacted}))
	p := must(d.Partition("c", 0))
	keyless := segment.Record{Value: []byte("v"), Timestamp: 1}

	_, err := p.Append([]segment.Record{{Key: []byte("k"), Value: []byte("v")}, keyless})
	require.ErrorIs(t, err, ErrKeyRequired)
	require.ErrorContains(t, err, "topic c partition 0")
	b := must(segment.AppendBatch(nil, []segment.Record{keyless}, segment.BuildOptions{}))
	_, err = p.AppendBatch(b)
	require.ErrorIs(t, err, ErrKeyRequired)

	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	defer pr.Close()
	_, err = pr.Produce(context.Background(), "c", AnyPartition, keyless)
	require.ErrorIs(t, err, ErrKeyRequired)

	_, err = p.Append([]segment.Record{{Key: []byte("k"), Value: nil}}) // a tombstone
	require.NoError(t, err)
	_, err = pr.Produce(context.Background(), "c", 0, segment.Record{Key: []byte{}, Value: []byte("v")})
	require.NoError(t, err, "an empty key is a key, as in Kafka")
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 2, end)
}

// TestProduceChecksTheContextFirst: Produce with a context already done
// wrote the record and returned the context's error.
func TestProduceChecksTheContextFirst(t *testing.T) {
	_, d := openMemDir(t)
	defer d.Close()
	require.NoError(t, d.CreateTopic("t", TopicConfig{}))
	pr, err := d.NewProducer(ProducerOptions{})
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = pr.Produce(cancelled, "t", 0, segment.Record{Value: []byte("v")})
	require.ErrorIs(t, err, context.Canceled)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = pr.Produce(expired, "t", AnyPartition, segment.Record{Value: []byte("v")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, pr.Close())
	_, _, end, err := must(d.Partition("t", 0)).Offsets()
	require.NoError(t, err)
	require.Zero(t, end, "nothing was written")
}

// TestLongestTopicNameWorksOnDisk: a 249-character name, Kafka's limit,
// passed ValidateTopic and failed CreateTopic, whose temporary
// configuration file name passed 255 bytes. Every name Strand makes for a
// topic must fit: <topic>-<partition> for partitions below MaxPartitions,
// the configuration and its temporary file, the tombstone, and the
// -delete folders (whose topic part is cut short, as Kafka does).
func TestLongestTopicNameWorksOnDisk(t *testing.T) {
	dir := t.TempDir()
	opts := DirOptions{MaintenanceInterval: -1, Log: Options{SegmentBytes: 64 << 10, MaxIndexBytes: 4096}}
	d, err := OpenDir(dir, opts)
	require.NoError(t, err)
	name := strings.Repeat("a", 249)
	require.NoError(t, ValidateTopic(name))
	require.ErrorIs(t, ValidateTopic(name+"a"), ErrInvalidTopic)
	require.NoError(t, d.CreateTopic(name, TopicConfig{Partitions: 2}))
	require.NoError(t, d.AddPartitions(name, MaxPartitions))
	for _, p := range []int32{0, MaxPartitions - 1} {
		appendPartition(t, must(d.Partition(name, p)), 0, 3)
	}
	require.NoError(t, d.Close())

	d, err = OpenDir(dir, opts)
	require.NoError(t, err)
	defer d.Close()
	_, _, end, err := must(d.Partition(name, MaxPartitions-1)).Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 3, end)
	for _, dir := range []string{name + "-0", fmt.Sprint(name, "-", MaxPartitions-1), "t-0"} {
		gone := deletingName(dir)
		require.LessOrEqual(t, len(gone), 255, gone)
		require.True(t, isDeletingDir(gone), "OpenDir removes %s", gone)
	}
	require.NoError(t, d.DeleteTopic(name))
	strays, err := d.Strays()
	require.NoError(t, err)
	require.Empty(t, strays)
	require.NoError(t, d.CreateTopic(name, TopicConfig{}))
}

// TestFsyncPolicyTextTakesLargeCounts: "every:M:B" added M and B to see
// that one was set, and the sum overflowed.
func TestFsyncPolicyTextTakesLargeCounts(t *testing.T) {
	for _, text := range []string{"every:9223372036854775807:1", "every:9223372036854775807:9223372036854775807", "every:0:9223372036854775807"} {
		p, err := ParseFsyncPolicy(text)
		require.NoError(t, err, text)
		require.Equal(t, text, p.String())
		_, err = Options{Fsync: p}.withDefaults()
		require.NoError(t, err, text)
	}
	for _, text := range []string{"every:9223372036854775808:0", "every:-1:5"} {
		_, err := ParseFsyncPolicy(text)
		require.ErrorIs(t, err, ErrInvalidOption, text)
	}
}
