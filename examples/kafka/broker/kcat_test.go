package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

// kcatPath finds kcat or skips t (kafkatest.KcatPath).
func kcatPath(t *testing.T) string { return kafkatest.KcatPath(t, "the librdkafka client") }

// kcat runs kcat against the broker with stdin and returns its output.
func kcat(t *testing.T, addr, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), append([]string{"-b", addr}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "kcat %v: %s", args, stderr.String())
	return stdout.String()
}

// kcatRecord is one record kcat printed with the format
// "%p:%o:%k=%s\n".
type kcatRecord struct {
	partition  int32
	offset     int64
	key, value string
}

const kcatFormat = "%p:%o:%k=%s\n"

// consumeArgs make kcat's consumers long-poll for 100ms, not librdkafka's
// 500ms, so that they see the end of the partitions sooner.
var consumeArgs = []string{"-X", "fetch.wait.max.ms=100", "-f", kcatFormat}

// kcatConsume runs a kcat consumer and returns the records it printed.
func kcatConsume(t *testing.T, addr string, args ...string) []kcatRecord {
	t.Helper()
	return parseKcat(t, kcat(t, addr, "", slices.Concat(consumeArgs, args)...))
}

func parseKcat(t *testing.T, out string) []kcatRecord {
	t.Helper()
	var recs []kcatRecord
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		pos, kv, ok := strings.Cut(line, "=")
		require.True(t, ok, "line %q", line)
		fields := strings.Split(pos, ":")
		require.Len(t, fields, 3, "line %q", line)
		p, err := strconv.ParseInt(fields[0], 10, 32)
		require.NoError(t, err)
		o, err := strconv.ParseInt(fields[1], 10, 64)
		require.NoError(t, err)
		recs = append(recs, kcatRecord{int32(p), o, fields[2], kv})
	}
	return recs
}

// keyedLines are kcat producer input "key-i:value-i" for i in [first, last).
func keyedLines(first, last int) string {
	var b strings.Builder
	for i := first; i < last; i++ {
		fmt.Fprintf(&b, "%s:%s\n", key(i), value(i))
	}
	return b.String()
}

// checkKcatRecords checks that recs are the records first..last-1, each
// partition's offsets contiguous from its first, and returns them by key.
func checkKcatRecords(t *testing.T, recs []kcatRecord, first, last int) map[string]kcatRecord {
	t.Helper()
	byKey := map[string]kcatRecord{}
	next := map[int32]int64{}
	for _, r := range recs {
		if n, ok := next[r.partition]; ok {
			require.Equal(t, n, r.offset, "partition %d: offsets follow each other", r.partition)
		}
		next[r.partition] = r.offset + 1
		require.NotContains(t, byKey, r.key)
		byKey[r.key] = r
	}
	require.Len(t, byKey, last-first)
	for i := first; i < last; i++ {
		require.Equal(t, value(i), byKey[key(i)].value, key(i))
	}
	return byKey
}

// TestKcat: librdkafka's kcat lists metadata, produces keyed messages
// idempotently with acks=all (uncompressed, snappy and zstd), and consumes them from the beginning, from an
// offset, from a time and as a group member whose offsets are committed;
// franz-go reads the same records at the same offsets.
func TestKcat(t *testing.T) {
	kcatPath(t)
	tb := startBroker(t, t.TempDir())
	const topic = "words"
	c := tb.client()
	createTopic(t, c, topic, 2)

	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic      string `json:"topic"`
			Partitions []struct {
				Partition int32 `json:"partition"`
				Leader    int32 `json:"leader"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	require.NoError(t, json.Unmarshal([]byte(kcat(t, tb.addr, "", "-L", "-J", "-t", topic)), &md))
	require.Len(t, md.Brokers, 1)
	require.Equal(t, tb.addr, md.Brokers[0].Name)
	require.Len(t, md.Topics, 1)
	require.Equal(t, topic, md.Topics[0].Topic)
	require.Len(t, md.Topics[0].Partitions, 2)
	for _, p := range md.Topics[0].Partitions {
		require.Equal(t, md.Brokers[0].ID, p.Leader)
	}

	produceArgs := []string{"-P", "-t", topic, "-K:", "-X", "acks=all", "-X", "enable.idempotence=true"}
	kcat(t, tb.addr, keyedLines(0, 20), produceArgs...)
	all := checkKcatRecords(t, kcatConsume(t, tb.addr, "-C", "-t", topic, "-o", "beginning", "-e"), 0, 20)

	// franz-go sees the same records at the same places.
	kc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for _, r := range consume(t, kc, 20) {
		k := all[string(r.Key)]
		require.Equal(t, k.partition, r.Partition, k.key)
		require.Equal(t, k.offset, r.Offset, k.key)
		require.Equal(t, k.value, string(r.Value))
	}

	// From an offset of one partition.
	var p0 []kcatRecord
	for _, r := range all {
		if r.partition == 0 && r.offset >= 2 {
			p0 = append(p0, r)
		}
	}
	fromOffset := kcatConsume(t, tb.addr, "-C", "-t", topic, "-p", "0", "-o", "2", "-e")
	require.ElementsMatch(t, p0, fromOffset)

	// From a time: only what was produced after it.
	time.Sleep(20 * time.Millisecond)
	since := time.Now().UnixMilli()
	time.Sleep(20 * time.Millisecond)
	kcat(t, tb.addr, keyedLines(20, 25), append(produceArgs, "-z", "snappy")...)
	kcat(t, tb.addr, keyedLines(25, 30), append(produceArgs, "-z", "zstd")...)
	later := kcatConsume(t, tb.addr, "-C", "-t", topic, "-o", fmt.Sprintf("s@%d", since), "-e")
	checkKcatRecords(t, later, 20, 30)

	// As a group member: everything once, offsets committed on exit, and a
	// second member of the group gets nothing more.
	grouped := kcatConsume(t, tb.addr, "-G", "kcat-group", "-o", "beginning", "-e", topic)
	checkKcatRecords(t, grouped, 0, 30)
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "kcat-group"
	fetch.SetVersion(7)
	committed, err := fetch.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(committed.ErrorCode))
	ends := map[int32]int64{}
	for _, r := range grouped {
		ends[r.partition] = max(ends[r.partition], r.offset+1)
	}
	require.Len(t, committed.Topics, 1)
	got := map[int32]int64{}
	for _, p := range committed.Topics[0].Partitions {
		require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
		got[p.Partition] = p.Offset
	}
	require.Equal(t, ends, got, "committed offsets are the ends of what the member read")
	again := kcatConsume(t, tb.addr, "-G", "kcat-group", "-e", topic)
	require.Empty(t, again, "the group resumes at its committed offsets")
}
