package log

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/segment"
)

// Errors of a data directory (Dir); those a Kafka broker answers with a
// code carry it (kafkaerr.CodeOf).
var (
	// ErrUnknownTopic means no topic of that name exists.
	ErrUnknownTopic = kafkaerr.New(kafkaerr.ErrUnknownTopicOrPartition, "log: unknown topic")
	// ErrTopicExists means a topic of that name already exists.
	ErrTopicExists = kafkaerr.New(kafkaerr.ErrTopicAlreadyExists, "log: topic already exists")
	// ErrInvalidTopic means a topic name breaks Kafka's rules.
	ErrInvalidTopic = kafkaerr.New(kafkaerr.ErrInvalidTopicException, "log: invalid topic name")
	// ErrUnknownPartition means a partition number outside the topic.
	ErrUnknownPartition = kafkaerr.New(kafkaerr.ErrUnknownTopicOrPartition, "log: unknown partition")
	// ErrStalePartition means a Partition handle of a deleted topic: even
	// if a topic of the same name exists now, the handle names the old one.
	ErrStalePartition = kafkaerr.New(kafkaerr.ErrUnknownTopicOrPartition, "log: stale partition handle")
	// ErrDirLocked means another Dir (or a Log), of this process or
	// another, has the data directory open; the message says which
	// process.
	ErrDirLocked = errors.New("log: data directory locked")
	// ErrStray means a folder in the data directory that no topic owns is
	// in the way of a topic's partition; see Dir.Strays.
	ErrStray = errors.New("log: folder in the data directory not owned by the topic")
	// ErrBadTopicConfig means a topic's configuration file in the data
	// directory cannot be read or used; the message names the file.
	ErrBadTopicConfig = kafkaerr.New(kafkaerr.ErrInvalidConfig, "log: bad topic configuration")
	// ErrKeyRequired means a record without a key was appended to a
	// compacted topic, which Kafka refuses too (InvalidRecordException):
	// compaction keeps the latest record per key, and would delete it.
	ErrKeyRequired = kafkaerr.New(kafkaerr.ErrInvalidRecord, "log: compacted topic cannot accept a record without a key")
	// ErrReplicated means a Dir opened with DirOptions.Replicated was asked
	// to coordinate something itself (Dir.Transactions and what uses it):
	// under replication, the node's replicated coordinators do that.
	ErrReplicated = errors.New("log: the data directory is replicated: it coordinates nothing itself")
)

// MaxPartitions bounds a topic's partitions. Kafka has no such bound, but
// a partition count comes from input and sizes the Dir's memory; and with
// partition numbers of at most 5 digits, the folder <topic>-<partition> of
// a topic of 249 characters, Kafka's longest, is 255 bytes, the file name
// limit of the common file systems.
const MaxPartitions = 100_000

// maxTopicLength is Kafka's limit (Topic.java): 249, so that
// "<topic>-<partition>" fits in a 255-byte file name. Every other name
// Strand makes for a topic fits too: ".topics/<topic>.json", its temporary
// file <topic>.tmp and the delete tombstone <topic>.del are at most 254
// bytes, and a folder renamed for deletion cuts the topic short, as Kafka
// does.
const maxTopicLength = 249

// ValidateTopic reports whether name is a legal topic name by Kafka's rules
// (org.apache.kafka.common.internals.Topic.validate): 1 to 249 characters
// from ASCII letters, digits, '.', '_' and '-', and not "." or "..". Every
// name it accepts works on disk: see MaxPartitions.
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrInvalidTopic)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q is not allowed", ErrInvalidTopic, name)
	case len(name) > maxTopicLength:
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidTopic, len(name), maxTopicLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q has %q at byte %d; allowed are ASCII letters, digits, '.', '_' and '-'", ErrInvalidTopic, name, c, i)
		}
	}
	return nil
}

// TopicConfig is a topic's configuration (Kafka's topic configs). Passed
// to CreateTopic or AlterTopicConfig, a zero field takes the value of the
// Dir's defaults (DirOptions.Defaults), and then the Log's; Unlimited (for
// Retention) and NotCompacted turn off what the defaults turn on. Dir.TopicConfig
// returns it with the defaults filled in.
//
// It is stored in the data directory as .topics/<topic>.json, a JSON
// object whose keys are the fields' names in snake case: "partitions",
// "retention" (an object: "age", "bytes"), "compact" (true, false, or
// absent for the default), "delete_retention", "min_cleanable_dirty_ratio",
// "min_compaction_lag", "max_compaction_lag", "segment_bytes",
// "segment_age", "fsync" (as FsyncPolicy.String writes it),
// "compression" (Kafka's codec number: 0 none, 1 gzip, 3 lz4) and
// "max_batch_bytes", and beside them the topic's "id" (see Dir.TopicID);
// durations are in nanoseconds (Go's time.Duration),
// -1 is Unlimited, and an absent key is zero. A file is replaced whole,
// atomically (a temporary file, synced, renamed over it). Keys are read
// without regard to case, so the files of earlier versions, which spelled
// "Age" and "Bytes", read the same.
type TopicConfig struct {
	// Partitions is the number of partitions, 1 to MaxPartitions; zero
	// takes Defaults.Partitions (whose own zero means 1).
	Partitions int32 `json:"partitions"`

	// Retention deletes old segments (cleanup.policy=delete); each field
	// is a limit, zero for the Dir's, or Unlimited. Other negative values
	// are refused.
	Retention Retention `json:"retention"`

	// Compact keeps the latest record per key (cleanup.policy=compact; with
	// a Retention too, compact,delete), by the CompactOptions rules; the
	// four fields after it are the topic's CompactOptions. A compacted
	// topic refuses records without a key (ErrKeyRequired).
	Compact                Compaction    `json:"compact,omitempty"`
	DeleteRetention        time.Duration `json:"delete_retention,omitempty"`
	MinCleanableDirtyRatio float64       `json:"min_cleanable_dirty_ratio,omitempty"`
	MinCompactionLag       time.Duration `json:"min_compaction_lag,omitempty"`
	MaxCompactionLag       time.Duration `json:"max_compaction_lag,omitempty"`

	// SegmentBytes, SegmentAge, Fsync, Compression and MaxBatchBytes are
	// the Log options of the topic's partitions (Kafka's segment.bytes,
	// segment.ms, flush.messages and flush.ms, compression.type,
	// max.message.bytes).
	SegmentBytes  int64         `json:"segment_bytes,omitempty"`
	SegmentAge    time.Duration `json:"segment_age,omitempty"`
	Fsync         FsyncPolicy   `json:"fsync"`
	Compression   segment.Codec `json:"compression,omitempty"`
	MaxBatchBytes int           `json:"max_batch_bytes,omitempty"`
}

// Compaction says whether a topic is compacted. The zero value,
// CompactDefault, takes the Dir's default.
type Compaction int8

// Compaction values.
const (
	CompactDefault Compaction = iota
	Compacted
	NotCompacted
)

// MarshalJSON writes Compacted as true and NotCompacted as false.
func (c Compaction) MarshalJSON() ([]byte, error) {
	switch c {
	case Compacted:
		return []byte("true"), nil
	case NotCompacted:
		return []byte("false"), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads true, false or null.
func (c *Compaction) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*c = Compacted
	case "false":
		*c = NotCompacted
	case "null":
		*c = CompactDefault
	default:
		return fmt.Errorf("compact is %s, allowed true, false or null", b)
	}
	return nil
}

// String returns "compacted", "not compacted" or "default".
func (c Compaction) String() string {
	switch c {
	case Compacted:
		return "compacted"
	case NotCompacted:
		return "not compacted"
	}
	return "default"
}

// compacted reports whether a merged configuration compacts its topic.
func (c TopicConfig) compacted() bool { return c.Compact == Compacted }

// merged returns c with its zero fields taken from d.
func (c TopicConfig) merged(d TopicConfig) TopicConfig {
	c.Partitions = cmp.Or(c.Partitions, d.Partitions)
	c.Retention.Age = cmp.Or(c.Retention.Age, d.Retention.Age)
	c.Retention.Bytes = cmp.Or(c.Retention.Bytes, d.Retention.Bytes)
	c.Compact = cmp.Or(c.Compact, d.Compact)
	c.DeleteRetention = cmp.Or(c.DeleteRetention, d.DeleteRetention)
	c.MinCleanableDirtyRatio = cmp.Or(c.MinCleanableDirtyRatio, d.MinCleanableDirtyRatio)
	c.MinCompactionLag = cmp.Or(c.MinCompactionLag, d.MinCompactionLag)
	c.MaxCompactionLag = cmp.Or(c.MaxCompactionLag, d.MaxCompactionLag)
	c.SegmentBytes = cmp.Or(c.SegmentBytes, d.SegmentBytes)
	c.SegmentAge = cmp.Or(c.SegmentAge, d.SegmentAge)
	c.Fsync = cmp.Or(c.Fsync, d.Fsync)
	c.Compression = cmp.Or(c.Compression, d.Compression)
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, d.MaxBatchBytes)
	return c
}

// check refuses the fields the Log options do not check: retention below
// Unlimited, an unknown Compaction, a bad partition count.
func (c TopicConfig) check() error {
	if err := checkPartitions("Partitions", c.Partitions); err != nil {
		return err
	}
	if c.Retention.Age < Unlimited {
		return fmt.Errorf("%w: Retention.Age is %v, allowed 0 (the default), Unlimited (-1) or more than 0", ErrInvalidOption, c.Retention.Age)
	}
	if c.Retention.Bytes < Unlimited {
		return fmt.Errorf("%w: Retention.Bytes is %d, allowed 0 (the default), Unlimited (-1) or more than 0", ErrInvalidOption, c.Retention.Bytes)
	}
	if c.Compact < CompactDefault || c.Compact > NotCompacted {
		return fmt.Errorf("%w: Compact is %d, allowed CompactDefault, Compacted or NotCompacted", ErrInvalidOption, c.Compact)
	}
	return nil
}

// maintained reports whether the Dir's maintenance has work for the topic.
func (c TopicConfig) maintained() bool {
	return c.Retention.Age > 0 || c.Retention.Bytes > 0 || c.compacted()
}

func (c TopicConfig) compactOptions() CompactOptions {
	return CompactOptions{
		DeleteRetention:        c.DeleteRetention,
		MinCleanableDirtyRatio: c.MinCleanableDirtyRatio,
		MinCompactionLag:       c.MinCompactionLag,
		MaxCompactionLag:       c.MaxCompactionLag,
	}
}

// logOptions returns the options of a partition of the topic: the Dir's
// base options with the topic's set fields on top.
func (c TopicConfig) logOptions(base Options) Options {
	base.SegmentBytes = cmp.Or(c.SegmentBytes, base.SegmentBytes)
	base.SegmentAge = cmp.Or(c.SegmentAge, base.SegmentAge)
	base.Fsync = cmp.Or(c.Fsync, base.Fsync)
	base.Compression = cmp.Or(c.Compression, base.Compression)
	base.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, base.MaxBatchBytes)
	return base
}
