package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
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
		Member     int     `json:"member"`
		MemberID   string  `json:"memberId"`
		Assignment []int32 `json:"assignment"`
	} `json:"joined"`
	Record *struct {
		Member    int    `json:"member"`
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
	return kafkajsWith(t, node, nil, args...)
}

// kafkajsWith is kafkajs with env added to check.js's environment.
func kafkajsWith(t *testing.T, node string, env []string, args ...string) []kafkajsLine {
	t.Helper()
	cmd, cancel := checkJS(node, env, args)
	defer cancel()
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

// checkJS is node running check.js with args, env added to its
// environment, for at most 90 seconds.
func checkJS(node string, env, args []string) (*exec.Cmd, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cmd := exec.CommandContext(ctx, node, append([]string{"check.js"}, args...)...)
	cmd.Dir = kafkajsDir
	cmd.Env = append(os.Environ(), env...)
	return cmd, cancel
}

// kafkajsFails runs check.js with env, which must fail, and returns what
// it printed to stderr.
func kafkajsFails(t *testing.T, node string, env []string, args ...string) string {
	t.Helper()
	cmd, cancel := checkJS(node, env, args)
	defer cancel()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.Error(t, cmd.Run(), "node check.js %v: %s", args, stderr.String())
	return stderr.String()
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

// kafkajsRun is what one run of check.js printed.
type kafkajsRun struct {
	// sent is where the produce responses put each record, by key: within
	// a partition a send's records follow its base offset in the order
	// sent.
	sent map[string]placed
	// read is where the consumer read each record, by key.
	read map[string]placed
	// readBy is the member that read each partition's records.
	readBy map[int32]int
	// assigned is each member's last assignment.
	assigned map[int][]int32
	// committed is the last offset committed for each partition.
	committed map[int32]int64
}

// parseKafkajs checks that each record was sent and read once, read in
// offset order per partition from its from offset on, with the value of its
// key, and returns the run.
func parseKafkajs(t *testing.T, lines []kafkajsLine, from map[int32]int64) kafkajsRun {
	t.Helper()
	run := kafkajsRun{
		sent: map[string]placed{}, read: map[string]placed{}, readBy: map[int32]int{},
		assigned: map[int][]int32{}, committed: map[int32]int64{},
	}
	next := maps.Clone(from)
	for _, l := range lines {
		switch {
		case l.Sent != nil:
			for i, k := range l.Sent.Keys {
				require.NotContains(t, run.sent, k)
				run.sent[k] = placed{l.Sent.Partition, l.Sent.BaseOffset + int64(i)}
			}
		case l.Joined != nil:
			run.assigned[l.Joined.Member] = l.Joined.Assignment
		case l.Record != nil:
			r := l.Record
			require.Equal(t, next[r.Partition], r.Offset, "partition %d: offsets follow each other", r.Partition)
			next[r.Partition] = r.Offset + 1
			i, err := strconv.Atoi(strings.TrimPrefix(r.Key, "key-"))
			require.NoError(t, err, "key %q", r.Key)
			require.Equal(t, value(i), r.Value, r.Key)
			require.NotContains(t, run.read, r.Key)
			run.read[r.Key] = placed{r.Partition, r.Offset}
			run.readBy[r.Partition] = r.Member
		case l.Committed != nil:
			run.committed[l.Committed.Partition] = l.Committed.Offset
		}
	}
	return run
}

// endsAfter returns the end offsets of partitions starting at from once
// records is appended.
func endsAfter(from map[int32]int64, records map[string]placed) map[int32]int64 {
	ends := maps.Clone(from)
	for _, p := range records {
		ends[p.partition]++
	}
	return ends
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
	zero := map[int32]int64{0: 0, 1: 0, 2: 0}

	produced := parseKafkajs(t, kafkajs(t, node, "produce", tb.addr, topic, strconv.Itoa(partitions), "0", strconv.Itoa(n)), zero).sent
	require.Len(t, produced, n)
	ends := endsAfter(zero, produced)
	require.Len(t, ends, partitions, "the keys spread over every partition")
	seen := map[placed]bool{}
	for k, p := range produced {
		require.Less(t, p.offset, ends[p.partition], "%s: each partition's offsets are 0..its count-1", k)
		require.False(t, seen[p], "%s: an offset given twice", k)
		seen[p] = true
	}

	// franz-go reads every record where the produce responses said.
	kc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for k, r := range recordsByKey(t, consume(t, kc, n), 0, n) {
		require.Equal(t, produced[k], placed{r.Partition, r.Offset}, k)
	}
	kc.Close()

	// The group's one member reads each record once and commits the ends.
	alone := parseKafkajs(t, kafkajs(t, node, "consume", tb.addr, topic, group), zero)
	require.Equal(t, map[int][]int32{0: {0, 1, 2}}, alone.assigned, "the only member is assigned every partition")
	require.Equal(t, produced, alone.read, "kafkajs consumed every record where it produced it")
	require.Equal(t, ends, alone.committed, "kafkajs committed the end of each partition")
	c := tb.client()
	require.Equal(t, ends, groupOffsets(t, c, group, topic), "the broker holds the offsets kafkajs committed")

	// Another member of the group starts at the committed offsets: nothing.
	again := parseKafkajs(t, kafkajs(t, node, "consume", tb.addr, topic, group), ends)
	require.Empty(t, again.read, "the group resumes at its committed offsets")
	require.Empty(t, again.committed)
	require.Equal(t, ends, groupOffsets(t, c, group, topic))

	// Two members split the partitions (kafkajs's leader assigns them
	// through SyncGroup); each reads only what was produced since to its
	// own partitions, and the group commits the new ends.
	pair := parseKafkajs(t, kafkajs(t, node, "group", tb.addr, topic, group, strconv.Itoa(n), strconv.Itoa(n+10), "2"), ends)
	require.Len(t, pair.assigned, 2)
	owner := map[int32]int{}
	for m, ps := range pair.assigned {
		require.NotEmpty(t, ps, "member %d", m)
		for _, p := range ps {
			require.NotContains(t, owner, p, "partition %d assigned twice", p)
			owner[p] = m
		}
	}
	require.Len(t, owner, partitions)
	require.Len(t, pair.sent, 10)
	require.Equal(t, pair.sent, pair.read, "the members consumed every new record where it was produced")
	for p, m := range pair.readBy {
		require.Equal(t, owner[p], m, "partition %d read by its owner", p)
	}
	newEnds := endsAfter(ends, pair.sent)
	require.Equal(t, newEnds, pair.committed)
	require.Equal(t, newEnds, groupOffsets(t, c, group, topic))
	c.Close()
	maps.Copy(produced, pair.sent)

	// On disk: each producer's first send is one gzip batch per partition,
	// its others one record each; the sequence numbers of each idempotent
	// producer follow each other per partition.
	gzipped := func(k string) bool {
		i, err := strconv.Atoi(strings.TrimPrefix(k, "key-"))
		require.NoError(t, err)
		return i < n/2 || n <= i && i < n+5
	}
	onDisk := map[string]placed{}
	producers := map[int64]bool{}
	for id := range int32(partitions) {
		p, err := tb.b.Node().Log(topic, id)
		require.NoError(t, err)
		bs, err := p.Read(0, 1<<20, log.ReadUncommitted)
		require.NoError(t, err)
		sequences := map[int64]int32{}
		for batch, err := range bs.All() {
			require.NoError(t, err)
			pid := batch.ProducerID()
			require.GreaterOrEqual(t, pid, int64(0), "an idempotent producer's batch")
			producers[pid] = true
			require.Equal(t, sequences[pid], batch.BaseSequence(), "partition %d offset %d", id, batch.BaseOffset())
			sequences[pid] += batch.NumRecords()
			for r, err := range batch.Records() {
				require.NoError(t, err)
				require.Equal(t, gzipped(string(r.Key)), batch.Codec() == segment.CodecGzip, "%s at partition %d offset %d", r.Key, id, r.Offset)
				onDisk[string(r.Key)] = placed{id, r.Offset}
			}
		}
		require.NoError(t, bs.Close())
	}
	require.Len(t, producers, 2, "one producer id per kafkajs producer")
	require.Equal(t, produced, onDisk)
}
