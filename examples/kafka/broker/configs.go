package broker

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// topicConfig is one of Kafka's topic configs that a log.TopicConfig holds:
// how to show it (DescribeConfigs) and how to set it (CreateTopics).
type topicConfig struct {
	name string
	get  func(c *log.TopicConfig) string
	set  func(c *log.TopicConfig, v string) error
}

// topicConfigs are the topic configs served, in Kafka's names and units.
var topicConfigs = []topicConfig{
	{"cleanup.policy",
		func(c *log.TopicConfig) string {
			if c.Compact == log.Compacted {
				if c.Retention.Age > 0 || c.Retention.Bytes > 0 {
					return "compact,delete"
				}
				return "compact"
			}
			return "delete"
		},
		func(c *log.TopicConfig, v string) error {
			switch v {
			case "delete":
				c.Compact = log.NotCompacted
			case "compact", "compact,delete", "delete,compact":
				c.Compact = log.Compacted
			default:
				return fmt.Errorf("cleanup.policy %q: want delete, compact or compact,delete", v)
			}
			return nil
		}},
	{"retention.ms", func(c *log.TopicConfig) string { return durationMs(c.Retention.Age) },
		func(c *log.TopicConfig, v string) error {
			return setDurationMs("retention.ms", &c.Retention.Age, v, true)
		}},
	{"retention.bytes", func(c *log.TopicConfig) string { return limit(c.Retention.Bytes) },
		func(c *log.TopicConfig, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < -1 || n == 0 {
				return fmt.Errorf("retention.bytes %q: want -1 or a positive number", v)
			}
			c.Retention.Bytes = n
			return nil
		}},
	// A zero size or age is the log's default.
	{"segment.bytes", func(c *log.TopicConfig) string {
		return strconv.FormatInt(cmp.Or(c.SegmentBytes, log.DefaultSegmentBytes), 10)
	},
		func(c *log.TopicConfig, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 14 { // Kafka's minimum: one batch header's worth
				return fmt.Errorf("segment.bytes %q: want at least 14", v)
			}
			c.SegmentBytes = n
			return nil
		}},
	{"segment.ms", func(c *log.TopicConfig) string { return durationMs(cmp.Or(c.SegmentAge, log.DefaultSegmentAge)) },
		func(c *log.TopicConfig, v string) error { return setDurationMs("segment.ms", &c.SegmentAge, v, false) }},
	{"max.message.bytes", func(c *log.TopicConfig) string {
		return strconv.Itoa(cmp.Or(c.MaxBatchBytes, log.DefaultMaxBatchBytes))
	},
		func(c *log.TopicConfig, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("max.message.bytes %q: want a positive number", v)
			}
			c.MaxBatchBytes = n
			return nil
		}},
	{"delete.retention.ms", func(c *log.TopicConfig) string { return durationMs(c.DeleteRetention) },
		func(c *log.TopicConfig, v string) error {
			return setDurationMs("delete.retention.ms", &c.DeleteRetention, v, false)
		}},
	{"min.compaction.lag.ms", func(c *log.TopicConfig) string { return durationMs(c.MinCompactionLag) },
		func(c *log.TopicConfig, v string) error {
			return setDurationMs("min.compaction.lag.ms", &c.MinCompactionLag, v, false)
		}},
	{"max.compaction.lag.ms", func(c *log.TopicConfig) string {
		if c.MaxCompactionLag == 0 {
			return strconv.FormatInt(math.MaxInt64, 10) // Kafka's "no limit"
		}
		return durationMs(c.MaxCompactionLag)
	}, func(c *log.TopicConfig, v string) error {
		return setDurationMs("max.compaction.lag.ms", &c.MaxCompactionLag, v, false)
	}},
	{"min.cleanable.dirty.ratio", func(c *log.TopicConfig) string { return strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64) },
		func(c *log.TopicConfig, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return fmt.Errorf("min.cleanable.dirty.ratio %q: want 0 to 1", v)
			}
			c.MinCleanableDirtyRatio = f
			return nil
		}},
	// Strand's fsync policy, in Kafka's two flush configs: flush.messages=1
	// is FsyncAlways, Kafka's default of Long.MAX_VALUE is FsyncNever.
	{"flush.messages", func(c *log.TopicConfig) string {
		switch s := c.Fsync.String(); {
		case s == "always":
			return "1"
		case strings.HasPrefix(s, "every:"):
			return strings.Split(s, ":")[1]
		}
		return strconv.FormatInt(math.MaxInt64, 10)
	}, func(c *log.TopicConfig, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < 1:
			return fmt.Errorf("flush.messages %q: want a positive number", v)
		case n == 1:
			c.Fsync = log.FsyncAlways()
		case n == math.MaxInt64:
			c.Fsync = log.FsyncNever()
		default:
			c.Fsync = log.FsyncEvery(n, 0)
		}
		return nil
	}},
	{"flush.ms", func(c *log.TopicConfig) string {
		if s := c.Fsync.String(); strings.HasPrefix(s, "interval:") {
			d, _ := time.ParseDuration(strings.TrimPrefix(s, "interval:"))
			return durationMs(d)
		}
		return strconv.FormatInt(math.MaxInt64, 10)
	}, func(c *log.TopicConfig, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("flush.ms %q: want a number of milliseconds", v)
		}
		if n < math.MaxInt64 {
			c.Fsync = log.FsyncInterval(time.Duration(n) * time.Millisecond)
		}
		return nil
	}},
	// Batches are stored as the producer compressed them (but snappy and
	// zstd ones, recompressed with lz4: see transcode), which is Kafka's
	// compression.type=producer; the topic's own Compression applies only
	// to records a Go program appends through the Dir.
	{"compression.type", func(c *log.TopicConfig) string {
		if c.Compression == segment.CodecNone {
			return "producer"
		}
		return c.Compression.String()
	}, func(c *log.TopicConfig, v string) error {
		if v != "producer" {
			return fmt.Errorf("compression.type %q: only producer is served (batches are kept as the producer compressed them)", v)
		}
		return nil
	}},
}

func durationMs(d time.Duration) string {
	if d <= 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

func limit(n int64) string {
	if n <= 0 {
		return "-1"
	}
	return strconv.FormatInt(n, 10)
}

// setDurationMs reads milliseconds; -1 is allowed where Kafka allows it
// (retention.ms: no limit).
func setDurationMs(name string, d *time.Duration, v string, unlimited bool) error {
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil && n == -1 && unlimited:
		*d = log.Unlimited
	case err != nil || n < 0 || n > math.MaxInt64/int64(time.Millisecond):
		return fmt.Errorf("%s %q is not a number of milliseconds", name, v)
	default:
		*d = time.Duration(n) * time.Millisecond
	}
	return nil
}

// applyConfigs sets the configs of a CreateTopics request on c.
func applyConfigs(c *log.TopicConfig, configs map[string]*string) error {
	for name, v := range configs {
		i := findConfig(name)
		if i < 0 {
			return fmt.Errorf("%w: unknown or unsupported topic config %q", kafkaerr.ErrInvalidConfig, name)
		}
		if v == nil {
			continue
		}
		if err := topicConfigs[i].set(c, *v); err != nil {
			return fmt.Errorf("%w: %w", kafkaerr.ErrInvalidConfig, err)
		}
	}
	return nil
}

func findConfig(name string) int {
	for i, tc := range topicConfigs {
		if tc.name == name {
			return i
		}
	}
	return -1
}
