package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// testCluster is nodes in one process over a MemoryNetwork and a
// MemoryMetadata, each on a MemFS of its own, so that a test can crash a
// node and start it again on what a power cut would leave of its disk.
type testCluster struct {
	t     *testing.T
	ids   []replica.NodeID
	net   *MemoryNetwork
	md    *MemoryMetadata
	fs    map[replica.NodeID]*vfs.MemFS
	nodes map[replica.NodeID]*Node
	mds   map[replica.NodeID]*MemoryMetadataLog
	// incarnations grow with every start of a node.
	incarnation uint64
	// tweak, if set, adjusts every node's Options.
	tweak func(*Options)
	// logs, if set, keeps what the nodes log.
	logs *flightRecorder
}

func newTestCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t, net: NewMemoryNetwork(), fs: map[replica.NodeID]*vfs.MemFS{},
		nodes: map[replica.NodeID]*Node{}, mds: map[replica.NodeID]*MemoryMetadataLog{}}
	for i := range n {
		c.ids = append(c.ids, replica.NodeID(i+1))
	}
	c.md = NewMemoryMetadata(c.ids...)
	t.Cleanup(func() {
		for _, id := range slices.Sorted(mapsKeysOf(c.nodes)) {
			c.kill(id)
		}
		c.net.Close()
	})
	return c
}

func mapsKeysOf[V any](m map[replica.NodeID]V) func(func(replica.NodeID) bool) {
	return func(yield func(replica.NodeID) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (c *testCluster) startAll() {
	for _, id := range c.ids {
		c.start(id)
	}
}

// start starts node id on its disk as the last crash or stop left it.
func (c *testCluster) start(id replica.NodeID) *Node {
	c.t.Helper()
	if c.fs[id] == nil {
		c.fs[id] = vfs.NewMem()
	}
	mdl, err := c.md.Open(id)
	require.NoError(c.t, err)
	c.incarnation++
	logger := testLogger(c.t)
	if c.logs != nil {
		logger = c.logs.logger()
	}
	cfg := Options{
		ID: id, Dir: "/node", FS: c.fs[id], Transport: c.net.Transport(id), Metadata: mdl,
		Logger:      logger.With("node", id),
		Rand:        rand.New(rand.NewPCG(uint64(id), c.incarnation)),
		Incarnation: c.incarnation,
		Tick:        10 * time.Millisecond, ControlTick: 10 * time.Millisecond,
		Heartbeat: 20 * time.Millisecond, SessionTimeout: 300 * time.Millisecond,
		ReplicaLagTime: time.Second, RequestTimeout: time.Second, RetryBackoff: 10 * time.Millisecond,
		MinInsyncReplicas: min(2, len(c.ids)),
		// Every index preallocated at 10 MiB on a MemFS costs a restart
		// half a second under -race.
		MaxIndexBytes: 64 << 10,
	}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	n, err := New(cfg)
	require.NoError(c.t, err)
	c.net.Attach(id, n)
	c.nodes[id], c.mds[id] = n, mdl
	return n
}

// kill stops node id as a power cut would: off the network at once, no
// controlled shutdown, and its disk left with only what it synced.
func (c *testCluster) kill(id replica.NodeID) {
	n := c.nodes[id]
	if n == nil {
		return
	}
	c.net.Detach(id)
	close(n.closing) // the node's process ends, and its callers with it
	n.beats()
	<-n.beatsDone
	n.closeCoordinators()
	n.stop()
	n.wg.Wait()
	n.out.close()
	n.dir.Close()
	c.mds[id].Close()
	c.fs[id] = c.fs[id].Crash(vfs.CrashOptions{})
	delete(c.nodes, id)
	delete(c.mds, id)
}

// stop closes node id cleanly.
func (c *testCluster) stop(id replica.NodeID) {
	c.t.Helper()
	c.net.Detach(id) // after Close the network must not deliver to it
	require.NoError(c.t, c.nodes[id].Close())
	c.mds[id].Close()
	delete(c.nodes, id)
	delete(c.mds, id)
}

// any returns a live node.
func (c *testCluster) any() *Node {
	for _, id := range c.ids {
		if n := c.nodes[id]; n != nil {
			return n
		}
	}
	c.t.Fatal("no live node")
	return nil
}

// leaderOf returns the live node the metadata names the partition's
// leader, or nil.
func (c *testCluster) leaderOf(topic string, partition int32) *Node {
	p := c.any().Metadata().Partition(topic, partition)
	if p == nil {
		return nil
	}
	return c.nodes[p.Leader]
}

// waitFor waits until cond holds, at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitRegistered waits until every live node is registered and unfenced.
func (c *testCluster) waitRegistered() {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, "every node registered", func() bool {
		md := c.any().Metadata()
		for id := range c.nodes {
			if b := md.Broker(id); b == nil || b.Fenced {
				return false
			}
		}
		return true
	})
}

// produce sends values to the partition's leader, following the leader
// through NOT_LEADER answers, until ctx ends.
func (c *testCluster) produce(ctx context.Context, topic string, partition int32, acks replica.Acks, batch []byte) (replica.ProduceResult, error) {
	for {
		md := c.any().Metadata()
		var err error
		if p := md.Partition(topic, partition); p != nil && c.nodes[p.Leader] != nil {
			var r replica.ProduceResult
			r, err = c.nodes[p.Leader].Produce(ctx, topic, partition, acks, batch)
			if err == nil {
				return r, nil
			}
			if !retriable(err) {
				return r, err
			}
		}
		select {
		case <-ctx.Done():
			return replica.ProduceResult{}, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func retriable(err error) bool {
	return errorsIsAny(err, replica.ErrNotLeaderOrFollower, replica.ErrUnknownTopicOrPartition, replica.ErrNotEnoughReplicas,
		replica.ErrNotEnoughReplicasAfterAppend, replica.ErrRequestTimedOut, replica.ErrStopped, replica.ErrKafkaStorageError)
}

func batchOf(t *testing.T, values ...string) []byte {
	t.Helper()
	return idempotentBatch(t, nil, values...)
}

// idempotentBatch is a batch of values, of producer p if not nil: the
// producer's next sequence, so that a retry the partition has is
// answered as a duplicate.
func idempotentBatch(t *testing.T, p *segment.ProducerFields, values ...string) []byte {
	t.Helper()
	var recs []segment.Record
	for _, v := range values {
		recs = append(recs, segment.Record{Value: []byte(v)})
	}
	var opts segment.BuildOptions
	if p != nil {
		opts.Producer = &segment.ProducerFields{ID: p.ID, Epoch: p.Epoch, BaseSequence: p.BaseSequence}
		p.BaseSequence += int32(len(values))
	}
	b, err := segment.AppendBatch(nil, recs, opts)
	require.NoError(t, err)
	return b
}

// readAll reads a partition from its leader below the high watermark.
func (c *testCluster) readAll(ctx context.Context, topic string, partition int32) []string {
	c.t.Helper()
	return c.read(ctx, topic, partition, log.ReadUncommitted)
}

// read reads a partition from its leader below the bound iso sets.
func (c *testCluster) read(ctx context.Context, topic string, partition int32, iso log.Isolation) []string {
	c.t.Helper()
	var values []string
	waitFor(c.t, 10*time.Second, "a leader to read from", func() bool {
		p := c.any().Metadata().Partition(topic, partition)
		if p == nil || c.nodes[p.Leader] == nil {
			return false
		}
		l, err := c.nodes[p.Leader].leaderLog(ctx, topic, partition)
		if err != nil {
			return false
		}
		values = nil
		for rec, err := range l.Records(0, iso) {
			if err != nil {
				return false
			}
			values = append(values, string(rec.Value))
		}
		return true
	})
	return values
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() && os.Getenv("CLUSTER_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func TestNodeSingleVoterProducesAndReads(t *testing.T) {
	c := newTestCluster(t, 1)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := c.nodes[1]
	require.NoError(t, n.CreateTopic(ctx, "events", TopicSpec{Partitions: 2, ReplicationFactor: 1}))
	err := n.CreateTopic(ctx, "events", TopicSpec{Partitions: 2, ReplicationFactor: 1})
	require.ErrorIs(t, err, replica.ErrTopicAlreadyExists)

	for i := range 5 {
		r, err := c.produce(ctx, "events", 1, replica.AcksAll, batchOf(t, fmt.Sprint("v", i)))
		require.NoError(t, err)
		require.Equal(t, int64(i), r.BaseOffset)
	}
	require.Equal(t, []string{"v0", "v1", "v2", "v3", "v4"}, c.readAll(ctx, "events", 1))

	// A clean restart keeps everything and registers clean.
	c.stop(1)
	c.start(1)
	waitFor(t, 10*time.Second, "the clean registration", func() bool {
		b := c.nodes[1].Metadata().Broker(1)
		return b != nil && b.Clean && !b.Fenced
	})
	require.Equal(t, []string{"v0", "v1", "v2", "v3", "v4"}, c.readAll(ctx, "events", 1))
	r, err := c.produce(ctx, "events", 1, replica.AcksAll, batchOf(t, "v5"))
	require.NoError(t, err)
	require.Equal(t, int64(5), r.BaseOffset)
}

func TestNodeAcksAllSurvivesLeaderKill(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 3}))
	// Idempotent: a retry of a batch the leader appended but could not
	// acknowledge is answered as a duplicate, not appended again.
	producer := &segment.ProducerFields{ID: 7}
	var acked []string
	for i := range 20 {
		v := fmt.Sprint("a", i)
		_, err := c.produce(ctx, "t", 0, replica.AcksAll, idempotentBatch(t, producer, v))
		require.NoError(t, err)
		acked = append(acked, v)
	}
	leader := c.any().Metadata().Partition("t", 0).Leader
	c.kill(leader)
	waitFor(t, 10*time.Second, "a new leader", func() bool {
		p := c.any().Metadata().Partition("t", 0)
		return p != nil && p.Leader != leader && p.Leader != replica.NoNode
	})
	for i := range 20 {
		v := fmt.Sprint("b", i)
		_, err := c.produce(ctx, "t", 0, replica.AcksAll, idempotentBatch(t, producer, v))
		require.NoError(t, err)
		acked = append(acked, v)
	}
	c.start(leader)
	waitFor(t, 20*time.Second, "the killed leader back in the ISR", func() bool {
		p := c.nodes[leader].Metadata().Partition("t", 0)
		return p != nil && slices.Contains(p.ISR, leader)
	})
	require.Equal(t, acked, c.readAll(ctx, "t", 0))
}

func TestNodeRequestsDecode(t *testing.T) {
	for _, r := range []controllerRequest{
		&registerRequest{Node: 3, Incarnation: 7},
		&heartbeatRequest{Node: 1, Epoch: 9},
		&createTopicRequest{Name: "x", TopicSpec: TopicSpec{Assignment: [][]replica.NodeID{{1, 2}, {2, 3}}, Configs: map[string]string{"a": "b"}}},
		&alterConfigsRequest{Topic: "x", Replace: true},
		&alterScramRequest{Set: []controller.ScramCredential{{User: "alice", Mechanism: "SCRAM-SHA-256", Salt: []byte("s"),
			StoredKey: []byte("k"), ServerKey: []byte("v"), Iterations: 4096}}, Remove: []controller.ScramCredentialKey{{User: "bob", Mechanism: "SCRAM-SHA-512"}}},
		&alterACLsRequest{Add: []controller.ACL{{ResourceType: 2, ResourceName: "t", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}},
			Remove: []controller.ACL{{ResourceType: 4, ResourceName: "kafka-cluster", PatternType: 3, Principal: "User:*", Host: "*", Operation: 2, Permission: 2}}},
	} {
		got, err := decodeRequest(encodeRequest(r))
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	_, err := decodeRequest([]byte{byte(kindCreateTopic), 0xff})
	require.ErrorIs(t, err, ErrBadRequest)
	a, err := decodeAnswer(encodeAnswer(&answer{}, fmt.Errorf("wrapped: %w", replica.ErrTopicAlreadyExists)))
	require.NotNil(t, a)
	require.ErrorIs(t, err, replica.ErrTopicAlreadyExists)
	var re *RemoteError
	require.True(t, errors.As(err, &re))
}

func TestNodePipelinesAnIdempotentProducer(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 3}))
	var leader *Node
	waitFor(t, 10*time.Second, "a leader with the whole ISR", func() bool {
		leader = c.leaderOf("t", 0)
		if leader == nil {
			return false
		}
		st, err := leader.Status(ctx, "t", 0)
		return err == nil && st.Role == replica.RoleLeader && len(st.ISR) == 3
	})

	// Five batches in flight at once, as Kafka's idempotent producer
	// sends them (max.in.flight.requests.per.connection=5): appended in
	// the order sent, each acknowledged at its own offsets.
	producer := &segment.ProducerFields{ID: 11}
	var batches [][]byte
	var results []<-chan replica.ProduceResult
	for i := range 5 {
		b := idempotentBatch(t, producer, fmt.Sprint("p", i), fmt.Sprint("q", i))
		batches = append(batches, b)
		ch, err := leader.ProduceAsync(ctx, "t", 0, replica.AcksAll, b)
		require.NoError(t, err)
		results = append(results, ch)
	}
	for i, ch := range results {
		r := <-ch
		require.NoError(t, r.Err)
		require.Equal(t, int64(2*i), r.BaseOffset)
		require.False(t, r.Duplicate)
	}
	// Retried, all five at once again: each is a duplicate answered with
	// the offsets it got, and nothing is appended.
	results = results[:0]
	for _, b := range batches {
		ch, err := leader.ProduceAsync(ctx, "t", 0, replica.AcksAll, b)
		require.NoError(t, err)
		results = append(results, ch)
	}
	for i, ch := range results {
		r := <-ch
		require.NoError(t, r.Err)
		require.True(t, r.Duplicate, "batch %d retried", i)
		require.Equal(t, int64(2*i), r.BaseOffset)
	}
	require.Len(t, c.readAll(ctx, "t", 0), 10)
}
