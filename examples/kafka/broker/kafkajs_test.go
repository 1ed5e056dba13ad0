package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// kafkajsDir holds check.js, the kafkajs script, with its package.json and
// package-lock.json; `npm ci` installs kafkajs into its node_modules.
const kafkajsDir = "../kafkajs"

// kafkajsNode finds node and installs kafkajs with npm ci when it is not
// installed yet, returning node's path. .ci/run installs node and npm and
// sets STRAND_REQUIRE_KAFKAJS, so that in CI a missing node fails instead of
// skipping.
func kafkajsNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = exec.LookPath("npm")
	}
	if err != nil {
		if os.Getenv("STRAND_REQUIRE_KAFKAJS") != "" {
			t.Fatalf("node and npm are required (STRAND_REQUIRE_KAFKAJS is set) but: %v", err)
		}
		t.Skip("SKIPPING: node or npm is not installed (apt-get install -y nodejs npm); the kafkajs client was NOT tested")
	}
	if _, err := os.Stat(filepath.Join(kafkajsDir, "node_modules", "kafkajs", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = kafkajsDir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci in %s: %s", kafkajsDir, out)
	}
	return node
}

// kafkajsLine is one JSON line check.js printed; one field is set.
type kafkajsLine struct {
	Sent *struct {
		Partition  int32    `json:"partition"`
		BaseOffset int64    `json:"baseOffset"`
		Keys       []string `json:"keys"`
	} `json:"sent"`
	Joined *struct {
		MemberID   string             `json:"memberId"`
		Assignment map[string][]int32 `json:"assignment"`
	} `json:"joined"`
	Record *struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Key       string `json:"key"`
		Value     string `json:"value"`
	} `json:"record"`
	Committed *struct {
		Partition int32 `json:"partition"`
		Offset    int64 `json:"offset"`
	} `json:"committed"`
}

// kafkajs runs check.js with args and returns the lines it printed.
func kafkajs(t *testing.T, node string, args ...string) []kafkajsLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"check.js"}, args...)...)
	cmd.Dir = kafkajsDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node check.js %v: %s", args, stderr.String())
	var lines []kafkajsLine
	for line := range strings.Lines(stdout.String()) {
		var l kafkajsLine
		require.NoError(t, json.Unmarshal([]byte(line), &l), "line %q", line)
		lines = append(lines, l)
	}
	return lines
}

// placed is where a record is in the log.
type placed struct {
	partition int32
	offset    int64
}

// groupOffsets returns the offsets group has committed for topic's
// partitions, from the broker's OffsetFetch.
func groupOffsets(t *testing.T, c *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.SetVersion(7)
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
	got := map[int32]int64{}
	for _, rt := range resp.Topics {
		require.Equal(t, topic, rt.Topic)
		for _, p := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(p.ErrorCode))
			got[p.Partition] = p.Offset
		}
	}
	return got
}

// TestKafkajsProducesAndConsumesInAGroup: kafkajs, a client with its own
// implementation of the protocol, creates a topic, produces keyed records
// idempotently with acks -1 (one gzip send, then one send per record) and
// consumes them all as a group member that commits its offsets; a second
// member of the group gets nothing more. The offsets kafkajs was told at
// produce, the records it consumed, what franz-go reads, the group's
// committed offsets and the batches in the Dir all agree.
func TestKafkajsProducesAndConsumesInAGroup(t *testing.T) {
	node := kafkajsNode(t)
	dir := t.TempDir()
	tb := startBroker(t, dir)
	const topic, group, partitions, n = "kafkajs", "kafkajs-group", 3, 30

	// Where each produce response put each record: within a partition a
	// send's records follow its base offset in the order sent.
	where := map[string]placed{}
	for _, l := range kafkajs(t, node, "produce", tb.addr, topic, strconv.Itoa(partitions), "0", strconv.Itoa(n)) {
		require.NotNil(t, l.Sent)
		for i, k := range l.Sent.Keys {
			require.NotContains(t, where, k)
			where[k] = placed{l.Sent.Partition, l.Sent.BaseOffset + int64(i)}
		}
	}
	require.Len(t, where, n)
	ends := map[int32]int64{}
	for _, p := range where {
		ends[p.partition]++
	}
	require.Len(t, ends, partitions, "the keys spread over every partition")
	seen := map[placed]bool{}
	for k, p := range where {
		require.Less(t, p.offset, ends[p.partition], "%s: each partition's offsets are 0..its count-1", k)
		require.False(t, seen[p], "%s: an offset given twice", k)
		seen[p] = true
	}

	// franz-go reads every record where the produce responses said.
	kc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for k, r := range recordsByKey(t, consume(t, kc, n), 0, n) {
		require.Equal(t, where[k], placed{r.Partition, r.Offset}, k)
	}
	kc.Close()

	// The group member reads each record once, in offset order per
	// partition, and commits the ends.
	var joined int
	got := map[string]placed{}
	next := map[int32]int64{}
	committed := map[int32]int64{}
	for _, l := range kafkajs(t, node, "consume", tb.addr, topic, group) {
		switch {
		case l.Joined != nil:
			joined++
			require.ElementsMatch(t, []int32{0, 1, 2}, l.Joined.Assignment[topic], "the only member is assigned every partition")
		case l.Record != nil:
			r := l.Record
			require.Equal(t, next[r.Partition], r.Offset, "partition %d: offsets follow each other", r.Partition)
			next[r.Partition] = r.Offset + 1
			i, err := strconv.Atoi(strings.TrimPrefix(r.Key, "key-"))
			require.NoError(t, err, "key %q", r.Key)
			require.Equal(t, value(i), r.Value, r.Key)
			require.NotContains(t, got, r.Key)
			got[r.Key] = placed{r.Partition, r.Offset}
		case l.Committed != nil:
			committed[l.Committed.Partition] = l.Committed.Offset
		}
	}
	require.Equal(t, 1, joined)
	require.Equal(t, where, got, "kafkajs consumed every record where it produced it")
	require.Equal(t, ends, committed, "kafkajs committed the end of each partition")
	c := tb.client()
	require.Equal(t, ends, groupOffsets(t, c, group, topic), "the broker holds the offsets kafkajs committed")

	// Another member of the group starts at the committed offsets: nothing.
	for _, l := range kafkajs(t, node, "consume", tb.addr, topic, group) {
		require.Nil(t, l.Record, "the group resumes at its committed offsets")
		require.Nil(t, l.Committed)
	}
	require.Equal(t, ends, groupOffsets(t, c, group, topic))
	c.Close()

	// On disk: the first send is one gzip batch per partition, the others
	// one record each, all from one idempotent producer whose sequence
	// numbers follow each other per partition.
	tb.stop()
	d, err := log.OpenDir(dir, log.DirOptions{MaintenanceInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	producerID := int64(-1)
	for id := range int32(partitions) {
		p, err := d.Partition(topic, id)
		require.NoError(t, err)
		bs, err := p.Read(0, 1<<20, log.ReadUncommitted)
		require.NoError(t, err)
		var sequence int32
		for batch, err := range bs.All() {
			require.NoError(t, err)
			require.GreaterOrEqual(t, batch.ProducerID(), int64(0), "an idempotent producer's batch")
			if producerID < 0 {
				producerID = batch.ProducerID()
			}
			require.Equal(t, producerID, batch.ProducerID())
			require.Equal(t, sequence, batch.BaseSequence(), "partition %d offset %d", id, batch.BaseOffset())
			want := segment.CodecNone
			if sequence == 0 {
				want = segment.CodecGzip
			}
			require.Equal(t, want, batch.Codec(), "partition %d offset %d", id, batch.BaseOffset())
			sequence += batch.NumRecords()
		}
		require.NoError(t, bs.Close())
		require.EqualValues(t, ends[id], sequence, "partition %d", id)
	}
}
