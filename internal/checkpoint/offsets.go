package checkpoint

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/strandlog/strand"
	"github.com/strandlog/strand/vfs"
)

// OffsetsVersion is the version of Kafka's offset checkpoint files
// (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
// replication-offset-checkpoint).
const OffsetsVersion = 0

// TopicPartition names one partition of a topic.
type TopicPartition = strand.TopicPartition

// WriteOffsets atomically replaces the offset checkpoint file name with
// one "topic partition offset" line per entry of offsets (apache/kafka:
// storage/src/main/java/org/apache/kafka/storage/internals/checkpoint/OffsetCheckpointFile.java).
// Lines are sorted by topic and partition so that equal maps give equal
// files. A topic that is empty or holds white space cannot be read back and
// fails with ErrInvalidEntry.
func WriteOffsets(fs vfs.FS, name string, offsets map[TopicPartition]int64) error {
	tps := slices.SortedFunc(maps.Keys(offsets), func(a, b TopicPartition) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	entries := make([]string, len(tps))
	for i, tp := range tps {
		if tp.Topic == "" || strings.ContainsFunc(tp.Topic, isSpace) {
			return fmt.Errorf("%w: topic %q for %s", ErrInvalidEntry, tp.Topic, name)
		}
		entries[i] = tp.Topic + " " + strconv.FormatInt(int64(tp.Partition), 10) + " " + strconv.FormatInt(offsets[tp], 10)
	}
	return Write(fs, name, OffsetsVersion, entries)
}

// ReadOffsets reads an offset checkpoint file written by WriteOffsets or by
// Kafka. Errors are as for Read; a negative partition, a number out of
// range and a partition listed twice are ErrCorrupt.
func ReadOffsets(fs vfs.FS, name string) (map[TopicPartition]int64, error) {
	offsets := make(map[TopicPartition]int64)
	err := Read(fs, name, OffsetsVersion, func(entry string) error {
		f := strings.FieldsFunc(entry, isSpace)
		if len(f) != 3 {
			return fmt.Errorf("want \"topic partition offset\", got %q", entry)
		}
		p, err := strconv.ParseInt(f[1], 10, 32)
		if err != nil || p < 0 {
			return fmt.Errorf("partition %q is not a non-negative int32", f[1])
		}
		off, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("offset %q is not an int64", f[2])
		}
		tp := TopicPartition{Topic: f[0], Partition: int32(p)}
		if _, dup := offsets[tp]; dup {
			return fmt.Errorf("partition %s-%d listed twice", tp.Topic, tp.Partition)
		}
		offsets[tp] = off
		return nil
	})
	if err != nil {
		return nil, err
	}
	return offsets, nil
}

// isSpace reports the characters Kafka's readers split entries on (Java's
// regular expression \s).
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}
