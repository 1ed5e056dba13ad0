package log

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// crashSeed is added to the seeds of the power cuts of the crash tests
// that use crashedAt, to explore other crashes than CI's:
//
//	for s in $(seq 1 50); do go test ./log -run Crash -args -strand.crashseed=$s; done
var crashSeed = flag.Uint64("strand.crashseed", 0, "added to the seeds of the crash tests' power cuts")

// TestCrashDuringTruncation cuts the power before every file-system
// operation of a follower's truncations (KIP-101): one that cuts the tail,
// one below the first segment that empties the log and restarts it
// (Kafka's truncateFullyAndStartAt), and the appends around them. Every
// record at offset o is record(o), so whatever a crash keeps of a
// truncation, the log must reopen with contiguous offsets from its start,
// each holding its own record, and hold everything acknowledged below the
// last truncation begun.
func TestCrashDuringTruncation(t *testing.T) {
	appendFrom := func(l *Log, from, to int, acked *int) bool {
		for i := from; i < to; i += 5 {
			var recs []segment.Record
			for j := i; j < i+5; j++ {
				recs = append(recs, record(j, 150))
			}
			if _, err := l.Append(recs); err != nil {
				return false
			}
			*acked = i + 5
		}
		return true
	}
	script := func(fs *vfs.MemFS, acked *int) {
		l, err := Open("/data/t-0", memOptions(fs))
		if err != nil {
			return
		}
		defer l.Close()
		if !appendFrom(l, 0, 100, acked) {
			return
		}
		// A truncation may remove what it was asked to from its start.
		*acked = 60 // the batch holding 63 goes whole
		if l.TruncateTo(63) != nil || !appendFrom(l, 60, 90, acked) || l.DeleteRecordsBefore(45) != nil {
			return
		}
		*acked = 20
		if l.TruncateTo(20) != nil {
			return
		}
		appendFrom(l, 20, 40, acked)
	}
	var acked int
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, &acked) })
	require.Equal(t, 40, acked)

	for stop := 0; stop < total; stop++ {
		acked := 0
		after := crashedAt(t, stop, 5, func(fs *vfs.MemFS) { script(fs, &acked) })
		l, err := Open("/data/t-0", memOptions(after))
		require.NoError(t, err, "stop %d of %d", stop, total)
		start, leo := int(l.LogStartOffset()), int(l.LogEndOffset())
		require.GreaterOrEqual(t, leo, acked, "stop %d: acknowledged records lost", stop)
		requireRecords(t, l, start, leo, 150)
		appendN(t, l, leo, 5, 5, 150) // and it takes appends again
		require.NoError(t, l.Close())
	}
}

// TestCrashDuringTopicChanges cuts the power before every file-system
// operation of a Dir whose topics are created, grown, written, deleted and
// created again. The Dir must reopen; each partition must hold the records
// of one incarnation of its topic, contiguous and intact; and every record
// acknowledged since the last change of its topic began must be there.
func TestCrashDuringTopicChanges(t *testing.T) {
	type acked map[string][]string // partition folder: keys acknowledged
	key := func(topic string, p int32, gen, i int) string {
		return fmt.Sprintf("%s-%d g%d %d", topic, p, gen, i)
	}
	script := func(fs *vfs.MemFS, ack acked) {
		d, err := OpenDir("/data", dirOptions(fs))
		if err != nil {
			return
		}
		defer d.Close()
		write := func(topic string, p int32, gen, n int) bool {
			part, err := d.Partition(topic, p)
			if err != nil {
				return false
			}
			name := fmt.Sprintf("%s-%d", topic, p)
			for i := 0; i < n; i += 4 {
				var recs []segment.Record
				var keys []string
				for j := i; j < i+4; j++ {
					k := key(topic, p, gen, j)
					recs = append(recs, segment.Record{Key: []byte(k), Value: killValue(k)})
					keys = append(keys, k)
				}
				if _, err := part.Append(recs); err != nil {
					return false
				}
				ack[name] = append(ack[name], keys...)
			}
			return true
		}
		if d.CreateTopic("a", TopicConfig{Partitions: 2}) != nil || !write("a", 0, 1, 12) || !write("a", 1, 1, 8) ||
			d.CreateTopic("b", TopicConfig{}) != nil || !write("b", 0, 1, 8) ||
			d.AddPartitions("a", 3) != nil || !write("a", 2, 1, 4) {
			return
		}
		for _, p := range []string{"a-0", "a-1", "a-2"} {
			delete(ack, p) // the deletion may take them from here on
		}
		if d.DeleteTopic("a") != nil || d.CreateTopic("a", TopicConfig{}) != nil {
			return
		}
		write("a", 0, 2, 8)
	}
	ack := acked{}
	total := countOps(t, func(fs *vfs.MemFS) { script(fs, ack) })
	require.Equal(t, acked{"a-0": ack["a-0"], "b-0": ack["b-0"]}, ack)
	require.Len(t, ack["a-0"], 8)

	for stop := 0; stop < total; stop++ {
		ack := acked{}
		after := crashedAt(t, stop, 11, func(fs *vfs.MemFS) { script(fs, ack) })
		msg := fmt.Sprintf("stop %d of %d", stop, total)
		d, err := OpenDir("/data", dirOptions(after))
		require.NoError(t, err, msg)
		found := map[string][]string{}
		for _, topic := range must(d.Topics()) {
			cfg, err := d.TopicConfig(topic)
			require.NoError(t, err, msg)
			for p := range cfg.Partitions {
				part, err := d.Partition(topic, p)
				require.NoError(t, err, msg)
				name := fmt.Sprintf("%s-%d", topic, p)
				var keys []string
				for r, err := range part.Records(0, ReadLogEnd) {
					require.NoError(t, err, msg)
					k := string(r.Key)
					require.Equal(t, killValue(k), r.Value, "%s: %s", msg, k)
					require.True(t, strings.HasPrefix(k, name+" "), "%s: %s holds %q", msg, name, k)
					if len(keys) > 0 {
						require.Equal(t, strings.Fields(keys[0])[1], strings.Fields(k)[1], "%s: %s mixes incarnations", msg, name)
					}
					keys = append(keys, k)
				}
				found[name] = keys
			}
		}
		for name, keys := range ack {
			require.GreaterOrEqual(t, len(found[name]), len(keys), "%s: %s lost acknowledged records", msg, name)
			require.Equal(t, keys, found[name][:len(keys)], "%s: %s", msg, name)
		}
		require.NoError(t, d.Close(), msg)
	}
}
