package log

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// FsyncPolicy says when appended data is made durable with fsync, and so
// what a power failure (not a process crash: the OS keeps written data then)
// can take away. The zero value means the default, FsyncAlways (a topic
// whose policy is zero takes its data directory's).
type FsyncPolicy struct {
	mode     fsyncMode
	interval time.Duration
	messages int64
	bytes    int64
}

// always reports whether p is FsyncAlways, the default.
func (p FsyncPolicy) always() bool { return p.mode == fsyncAlways || p.mode == fsyncDefault }

type fsyncMode int8

const (
	fsyncDefault fsyncMode = iota
	fsyncAlways
	fsyncNever
	fsyncInterval
	fsyncEvery
)

// FsyncAlways syncs before an append returns: an acknowledged record
// survives a power failure. Concurrent appends share one fsync (group
// commit). It is the default.
func FsyncAlways() FsyncPolicy { return FsyncPolicy{mode: fsyncAlways} }

// FsyncNever leaves flushing to the OS, as Kafka does by default (relying
// on replication): a power failure loses what the OS had not yet written,
// typically up to 30 seconds of appends. The log still syncs each segment
// when it rolls and on Close.
func FsyncNever() FsyncPolicy { return FsyncPolicy{mode: fsyncNever} }

// FsyncInterval syncs at most d after an append (Kafka's flush.ms): a power
// failure loses up to d of acknowledged appends.
func FsyncInterval(d time.Duration) FsyncPolicy { return FsyncPolicy{mode: fsyncInterval, interval: d} }

// FsyncEvery syncs once messages records or bytes bytes were appended since
// the last sync, whichever comes first; zero means no limit of that kind
// (Kafka's flush.messages). A power failure loses up to that many
// acknowledged records or bytes.
func FsyncEvery(messages, bytes int64) FsyncPolicy {
	return FsyncPolicy{mode: fsyncEvery, messages: messages, bytes: bytes}
}

// String returns the policy in the form ParseFsyncPolicy reads.
func (p FsyncPolicy) String() string {
	switch p.mode {
	case fsyncNever:
		return "never"
	case fsyncInterval:
		return "interval:" + p.interval.String()
	case fsyncEvery:
		return fmt.Sprintf("every:%d:%d", p.messages, p.bytes)
	}
	return "always"
}

// ParseFsyncPolicy reads a policy as String writes it: "always", "never",
// "interval:DURATION" (such as "interval:100ms") or
// "every:MESSAGES:BYTES" (such as "every:1000:0").
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "always":
		if arg == "" {
			return FsyncAlways(), nil
		}
	case "never":
		if arg == "" {
			return FsyncNever(), nil
		}
	case "interval":
		if d, err := time.ParseDuration(arg); err == nil && d > 0 {
			return FsyncInterval(d), nil
		}
	case "every":
		m, b, _ := strings.Cut(arg, ":")
		msgs, err1 := strconv.ParseInt(m, 10, 64)
		bytes, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil && msgs >= 0 && bytes >= 0 && (msgs > 0 || bytes > 0) {
			return FsyncEvery(msgs, bytes), nil
		}
	}
	return FsyncPolicy{}, fmt.Errorf("%w: fsync policy %q, allowed always, never, interval:DURATION or every:MESSAGES:BYTES", ErrInvalidOption, s)
}

// MarshalText implements encoding.TextMarshaler.
func (p FsyncPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *FsyncPolicy) UnmarshalText(b []byte) error {
	v, err := ParseFsyncPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Options configure a Log. The zero value is usable: each field's comment
// gives its default, which is Kafka's where Kafka has one.
type Options struct {
	// FS is the file system; default the operating system's.
	FS vfs.FS

	// Fsync is the durability policy; default FsyncAlways.
	Fsync FsyncPolicy

	// SegmentBytes is the size at which the log rolls a new segment
	// (segment.bytes); default 1 GiB, allowed 4 KiB to 2 GiB-1.
	SegmentBytes int64

	// SegmentAge rolls a new segment once the timestamps in the active one
	// span this long (segment.ms); default 7 days.
	SegmentAge time.Duration

	// IndexIntervalBytes and MaxIndexBytes size the segments' indexes
	// (index.interval.bytes, segment.index.bytes); defaults 4096 and 10 MiB.
	IndexIntervalBytes int
	MaxIndexBytes      int

	// MaxBatchBytes is the largest batch an append accepts
	// (message.max.bytes); default 1 MiB + 12 bytes, as Kafka.
	MaxBatchBytes int

	// Compression is the codec Append uses to build batches; default none.
	Compression segment.Codec

	// CheckpointInterval is how often the recovery point and high
	// watermark are written while appends go on
	// (log.flush.offset.checkpoint.interval.ms); default 60 seconds.
	CheckpointInterval time.Duration

	// ExternalHighWatermark hands the high watermark to the log's owner,
	// the replication layer, which sets it with SetHighWatermark. By
	// default the log advances it to the log end as appends become durable
	// under the fsync policy, as a single-replica Kafka partition does.
	ExternalHighWatermark bool

	// ProducerIDExpiration is how long the log remembers an idempotent
	// producer after the timestamp of its last batch, unless it has a
	// transaction open (producer.id.expiration.ms, KIP-854): the log looks
	// for such producers every 10 minutes of appends and forgets them, and
	// a forgotten producer's next batch is taken at whatever sequence it
	// carries, as a new producer's is (KIP-360: Kafka no longer answers
	// UNKNOWN_PRODUCER_ID), losing the check for duplicates of what it
	// sent before. Default 1 day, allowed 1ms or more. Kafka sets it for
	// the whole broker; here, for each Log (a Dir's, from DirOptions.Log).
	ProducerIDExpiration time.Duration

	// VerifyOnOpen makes Open read and check every batch of every
	// segment, CRC and headers, as it does for the segments after the
	// recovery point after a crash, and rebuild the indexes from them, so
	// that damage anywhere in the log is found when it opens rather than
	// when it is read. It costs a read of the whole log. A Dir verifies a
	// partition's log when it first opens it, not when it reopens it after
	// MaxOpenFiles closed it.
	VerifyOnOpen bool

	// TruncateCorruption makes Open repair a damaged log instead of
	// refusing it with ErrCorrupt: it cuts the log before its first bad
	// batch and the one before it, removes the segments after them, reads
	// a damaged checkpoint as 0 and rebuilds a damaged leader epoch
	// checkpoint from the batches (which Open then all reads), and
	// reports what it found and cut as a *Damage (Log.Damage,
	// Partition.Damage), kept until ClearDamage. Only a replica may set
	// it: it has another copy, on its leader, and must stay out of the
	// ISR and of elections until it has fetched what was cut. A log
	// without another copy keeps the default, which never cuts synced
	// records. Damage in a segment Open does not read whole (see
	// VerifyOnOpen) is found by a read, as ErrCorrupt, and not repaired.
	TruncateCorruption bool

	// Now is the clock, for append times and segment age; default
	// time.Now.
	Now func() time.Time
}

// Option defaults and limits.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultSegmentAge         = 7 * 24 * time.Hour
	DefaultMaxBatchBytes      = 1<<20 + 12
	DefaultCheckpointInterval = time.Minute
	minSegmentBytes           = 4 << 10
)

// withDefaults validates o and fills in its defaults. A bad value is an
// ErrInvalidOption naming the option and its allowed range.
func (o Options) withDefaults() (Options, error) {
	bad := func(name string, v any, allowed string) error {
		return fmt.Errorf("%w: %s is %v, allowed %s", ErrInvalidOption, name, v, allowed)
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.SegmentBytes == 0:
		o.SegmentBytes = DefaultSegmentBytes
	case o.SegmentBytes < minSegmentBytes || o.SegmentBytes > math.MaxInt32:
		return o, bad("SegmentBytes", o.SegmentBytes, "4096 to 2147483647")
	}
	switch {
	case o.SegmentAge == 0:
		o.SegmentAge = DefaultSegmentAge
	case o.SegmentAge < time.Millisecond:
		return o, bad("SegmentAge", o.SegmentAge, "1ms or more")
	}
	switch {
	case o.IndexIntervalBytes == 0:
		o.IndexIntervalBytes = segment.DefaultIndexIntervalBytes
	case o.IndexIntervalBytes < 0:
		return o, bad("IndexIntervalBytes", o.IndexIntervalBytes, "0 or more")
	}
	switch {
	case o.MaxIndexBytes == 0:
		o.MaxIndexBytes = segment.DefaultMaxIndexBytes
	case o.MaxIndexBytes < 1024 || o.MaxIndexBytes > math.MaxInt32:
		return o, bad("MaxIndexBytes", o.MaxIndexBytes, "1024 to 2147483647")
	}
	switch {
	case o.MaxBatchBytes == 0:
		o.MaxBatchBytes = DefaultMaxBatchBytes
	case o.MaxBatchBytes < segment.HeaderSize || int64(o.MaxBatchBytes) > o.SegmentBytes:
		return o, bad("MaxBatchBytes", o.MaxBatchBytes, fmt.Sprintf("%d to SegmentBytes (%d)", segment.HeaderSize, o.SegmentBytes))
	}
	switch o.Compression {
	case segment.CodecNone, segment.CodecGzip, segment.CodecLZ4:
	default:
		return o, bad("Compression", o.Compression, "none, gzip or lz4")
	}
	switch {
	case o.CheckpointInterval == 0:
		o.CheckpointInterval = DefaultCheckpointInterval
	case o.CheckpointInterval < 0:
		return o, bad("CheckpointInterval", o.CheckpointInterval, "more than 0")
	}
	switch {
	case o.ProducerIDExpiration == 0:
		o.ProducerIDExpiration = idempotence.DefaultProducerIDExpiration
	case o.ProducerIDExpiration < time.Millisecond:
		return o, bad("ProducerIDExpiration", o.ProducerIDExpiration, "1ms or more")
	}
	switch p := o.Fsync; p.mode {
	case fsyncInterval:
		if p.interval <= 0 {
			return o, bad("Fsync", p, "an interval above 0")
		}
	case fsyncEvery:
		if p.messages < 0 || p.bytes < 0 || (p.messages == 0 && p.bytes == 0) {
			return o, bad("Fsync", p, "a message or byte count above 0")
		}
	}
	return o, nil
}

// checkRecordsSize refuses, before a batch of recs is built, records whose
// keys, values and headers alone are more than a batch may hold:
// MaxBatchBytes, or, compressed, what Records can decompress
// (segment.MaxDecompressedSize). The built batch is checked again; this
// spares building a batch of a gigabyte to refuse it.
func (o *Options) checkRecordsSize(recs []segment.Record) error {
	n := 0
	for i := range recs {
		n += len(recs[i].Key) + len(recs[i].Value)
		for _, h := range recs[i].Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	switch {
	case o.Compression == segment.CodecNone && n > o.MaxBatchBytes-segment.HeaderSize:
		return fmt.Errorf("%w: records of %d bytes, MaxBatchBytes is %d", segment.ErrBatchTooLarge, n, o.MaxBatchBytes)
	case n > segment.MaxDecompressedSize:
		return fmt.Errorf("%w: records of %d bytes, more than Records can decompress (%d)", segment.ErrBatchTooLarge, n, segment.MaxDecompressedSize)
	}
	return nil
}

// segmentOptions returns the options of the log's segments, whose batches
// are checked against the log's epoch cache.
func (l *Log) segmentOptions() segment.Options {
	o := &l.opts
	return segment.Options{FS: o.FS, IndexIntervalBytes: o.IndexIntervalBytes, MaxIndexBytes: o.MaxIndexBytes, CheckBatch: l.epochs.checkBatch}
}

// liveOptions returns the log's options for a reader outside the writer
// lock: reconfigure may change the fields a topic's configuration sets.
func (l *Log) liveOptions() Options {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.opts
}

// syncsEveryGroup reports whether the log's fsync policy syncs every group
// of appends.
func (l *Log) syncsEveryGroup() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.opts.Fsync.always()
}

// reconfigure gives an open log new values of the options a topic's
// configuration sets: SegmentBytes and SegmentAge (the next roll checks
// them), Fsync (the next append follows it; a change to FsyncAlways syncs
// what was appended before), Compression and MaxBatchBytes (the next
// append). The other fields of o are ignored: they cannot change while the
// log is open. It takes the writer lock, so an append is under the old
// options or the new ones, never a mix.
func (l *Log) reconfigure(o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	if err := l.lockWriter(false); err != nil {
		return err
	}
	defer l.wmu.Unlock()
	l.mu.Lock()
	l.opts.SegmentBytes, l.opts.SegmentAge = o.SegmentBytes, o.SegmentAge
	l.opts.Fsync, l.opts.Compression, l.opts.MaxBatchBytes = o.Fsync, o.Compression, o.MaxBatchBytes
	l.mu.Unlock()
	if l.syncsEveryGroup() && l.failed == nil {
		return l.flushLocked()
	}
	return nil
}
