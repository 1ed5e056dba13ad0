// The tests start real node processes and signal them: Unix only.

//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/replica"
)

var kills = flag.Int("kills", 0, "TestKillLeader: how many leaders to SIGKILL (default 3 with -short, else 10; the long run is 50)")

// The test binary is also the node: started with this variable set, it
// runs main, so the tests spawn real node processes without building the
// command.
const childEnv = "STRAND_CLUSTER_NODE=1"

func TestMain(m *testing.M) {
	if os.Getenv("STRAND_CLUSTER_NODE") == "1" {
		main()
		os.Exit(0)
	}
	if os.Getenv("STRAND_CLUSTER_SPIN") == "1" {
		spin()
	}
	os.Exit(m.Run())
}

// startCluster starts three node processes and waits until every broker
// is registered and live.
func startCluster(t *testing.T, opts ...func(*supervisor)) (*supervisor, *client) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	var nf nodeFlags
	nf.register(flag.NewFlagSet("defaults", flag.PanicOnError))
	s := &supervisor{exe: self, env: []string{childEnv}, dir: t.TempDir(), args: nf.args()}
	for _, o := range opts {
		o(s)
	}
	require.NoError(t, s.start(3))
	t.Cleanup(func() {
		s.kill()
		for _, id := range s.ids() {
			out, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("node-%d.out", id)))
			if i := strings.Index(string(out), "WARNING: DATA RACE"); i >= 0 {
				t.Errorf("node %d's process had a data race:\n%s", id, out[i:min(len(out), i+3000)])
			}
		}
		if t.Failed() {
			for _, id := range s.ids() {
				out, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("node-%d.out", id)))
				lines := strings.Split(string(out), "\n")
				t.Logf("node %d's last lines:\n%s", id, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	cl := newClient(s.peers, s.tls)
	waitFor(t, 20*time.Second, "three live brokers", func() (bool, string) {
		md, err := cl.metadata(context.Background(), replica.NoNode)
		if err != nil {
			return false, err.Error()
		}
		live := 0
		for _, b := range md.Brokers {
			if !b.Fenced {
				live++
			}
		}
		return live == 3, fmt.Sprintf("brokers %+v", md.Brokers)
	})
	return s, cl
}

// waitFor polls cond until it holds, failing the test after timeout with
// cond's last description.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("waited %v for %s; last: %s", timeout, what, last)
}

// metadataFrom asks the nodes that run for the most recent metadata (a
// killed node's address may hang or answer nothing).
func metadataFrom(s *supervisor, cl *client) (*metadata, error) {
	running := map[replica.NodeID]string{}
	for id, addr := range cl.peers {
		if s.running(id) {
			running[id] = addr
		}
	}
	return cl.of(running).metadata(context.Background(), replica.NoNode)
}

// waitISR waits until every partition of topic has a leader and an ISR
// of want members.
func waitISR(t *testing.T, s *supervisor, cl *client, topic string, want int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("an ISR of %d in every partition of %s", want, topic), func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		ok, n := true, 0
		for _, p := range md.Partitions {
			if p.Topic == topic {
				n++
				ok = ok && p.Leader != replica.NoNode && len(p.ISR) == want
			}
		}
		return ok && n > 0, fmt.Sprintf("%+v", md.Partitions)
	})
}

func createTopicT(t *testing.T, cl *client, req topicRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.callRetry(ctx, "/controller/topics", req, nil))
}

// ack is a record the cluster acknowledged (acks=all).
type ack struct {
	offset int64
	value  string
	// sent and at are when the produce was sent and acknowledged.
	sent, at time.Time
}

// producer produces one record at a time, acks=all, to a partition's
// leader, each attempt with a new value, and keeps what was acknowledged.
// A produce that fails (the leader died, moved, or the outcome is unknown)
// promises nothing about its value; the producer finds the leader again
// and goes on with the next.
type producer struct {
	cl        *client
	topic     string
	partition int32
	stop      chan struct{}
	done      chan struct{}

	mu       sync.Mutex
	acked    []ack
	attempts int
}

func startProducer(s *supervisor, cl *client, topic string, partition int32) *producer {
	p := &producer{cl: cl, topic: topic, partition: partition, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		leader := replica.NoNode
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			if leader == replica.NoNode {
				if md, err := metadataFrom(s, cl); err == nil {
					if pv := md.partition(topic, partition); pv != nil {
						leader = pv.Leader
					}
				}
				if leader == replica.NoNode {
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			v := fmt.Sprintf("%s-%d-%07d", topic, partition, i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			sent := time.Now()
			res, err := cl.produce(ctx, leader, topic, partition, "all", []byte(v))
			cancel()
			p.mu.Lock()
			p.attempts++
			if err == nil {
				p.acked = append(p.acked, ack{res.BaseOffset, v, sent, time.Now()})
			}
			p.mu.Unlock()
			if err != nil {
				leader = replica.NoNode
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	return p
}

func (p *producer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *producer) snapshot() []ack {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acked)
}

// firstAckAfter waits for the first acknowledgement of a produce sent
// after t, and returns when it came.
func (p *producer) firstAckAfter(t time.Time, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		i := slices.IndexFunc(p.acked, func(a ack) bool { return a.sent.After(t) })
		var at time.Time
		if i >= 0 {
			at = p.acked[i].at
		}
		p.mu.Unlock()
		if i >= 0 {
			return at, true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, false
}

// checkAcked reads the partition from node up to its high watermark and
// checks that every acknowledged record is there, at the offset it was
// acknowledged with, exactly once, in the order acknowledged; and that no
// value (acknowledged or not) is in the log twice.
func checkAcked(t *testing.T, cl *client, node replica.NodeID, topic string, partition int32, acked []ack) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recs, err := cl.consumeAll(ctx, node, topic, partition)
	require.NoError(t, err)
	where := map[string][]int64{}
	for _, r := range recs {
		where[string(r.Value)] = append(where[string(r.Value)], r.Offset)
	}
	for v, offs := range where {
		require.Len(t, offs, 1, "value %q is in the log of node %d %d times, at %v", v, node, len(offs), offs)
	}
	last := int64(-1)
	for i, a := range acked {
		offs := where[a.value]
		require.Equal(t, []int64{a.offset}, offs, "acknowledged record %d (%q) on node %d", i, a.value, node)
		require.Greater(t, a.offset, last, "acknowledged record %d (%q) is in acknowledgement order", i, a.value)
		last = a.offset
	}
	return len(recs)
}

// moveController moves raft leadership, and the active controller, from
// node from to node to.
func moveController(t *testing.T, s *supervisor, cl *client, from, to replica.NodeID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.do(ctx, "POST", from, fmt.Sprintf("/raft/transfer?to=%d", to), nil, nil))
	waitFor(t, 10*time.Second, fmt.Sprintf("node %d to be the controller", to), func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		return md.RaftLeader == to, fmt.Sprintf("raft leader %d", md.RaftLeader)
	})
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("median %v, p99 %v, max %v over %d", r(percentile(ds, 0.5)), r(percentile(ds, 0.99)), r(slices.Max(ds)), len(ds))
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1)*p + 0.5)
	return s[min(i, len(s)-1)]
}

// A client produces with acks=all and MinInsyncReplicas 2 to a partition
// of three replicas while the leader's process is SIGKILLed at random
// moments, every other time with the controller on the same node. Each
// time the controller fences the dead broker when its
// session ends and elects the first live ISR member (the controller moves
// too when the dead node led the raft group); every acknowledged record is
// then readable from the new leader, at its offset, in order, exactly
// once; the killed node, restarted, registers as unclean (it found no
// clean-shutdown marker), catches up and rejoins the ISR. The failover time
// is from the kill to the first acknowledged produce after it.
func TestKillLeader(t *testing.T) {
	n := *kills
	if n == 0 {
		n = 10
		if testing.Short() {
			n = 3
		}
	}
	s, cl := startCluster(t)
	const topic = "kills"
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: 1, ReplicationFactor: 3})
	waitISR(t, s, cl, topic, 3)
	p := startProducer(s, cl, topic, 0)
	defer p.halt()

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var failovers, controllerFailovers []time.Duration
	for k := range n {
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond))))
		md, err := metadataFrom(s, cl)
		require.NoError(t, err)
		victim := md.partition(topic, 0).Leader
		require.True(t, s.running(victim), "leader %d runs", victim)
		if k%2 == 1 && md.RaftLeader != victim {
			// Every other kill takes the controller with the leader.
			moveController(t, s, cl, md.RaftLeader, victim)
			md, err = metadataFrom(s, cl)
			require.NoError(t, err)
			require.Equal(t, victim, md.partition(topic, 0).Leader, "the partition leader stayed")
		}
		wasController := md.RaftLeader == victim
		killed := time.Now()
		require.NoError(t, s.signal(victim, syscall.SIGKILL))

		at, ok := p.firstAckAfter(killed, 30*time.Second)
		require.True(t, ok, "kill %d: a produce succeeded after node %d was killed", k, victim)
		failovers = append(failovers, at.Sub(killed))
		if wasController {
			controllerFailovers = append(controllerFailovers, at.Sub(killed))
		}
		md, err = metadataFrom(s, cl)
		require.NoError(t, err)
		leader := md.partition(topic, 0).Leader
		require.NotEqual(t, victim, leader)
		acked := p.snapshot()
		read := checkAcked(t, cl, leader, topic, 0, acked)
		t.Logf("kill %d: node %d (controller too: %t) killed; node %d leads after %v; %d acknowledged records all there (%d in the log)",
			k, victim, wasController, leader, at.Sub(killed).Round(time.Millisecond), len(acked), read)

		require.NoError(t, s.startNode(victim))
		waitFor(t, 30*time.Second, fmt.Sprintf("node %d back in the ISR", victim), func() (bool, string) {
			md, err := metadataFrom(s, cl)
			if err != nil {
				return false, err.Error()
			}
			pv := md.partition(topic, 0)
			return slices.Contains(pv.ISR, victim), fmt.Sprintf("ISR %v", pv.ISR)
		})
		md, err = metadataFrom(s, cl)
		require.NoError(t, err)
		i := slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == victim })
		require.False(t, md.Brokers[i].Clean, "node %d, killed, registered as unclean", victim)
	}
	p.halt()
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	acked := p.snapshot()
	checkAcked(t, cl, md.partition(topic, 0).Leader, topic, 0, acked)
	t.Logf("%d kills, %d produces, %d acknowledged; failover (kill to first acknowledged produce) %s; when the controller died too %s",
		n, p.attempts, len(acked), summary(failovers), summary(controllerFailovers))
	require.NotEmpty(t, acked)
}

// Killing the node that leads the raft group moves the controller: another
// node takes over in a higher controller epoch, fences the dead broker,
// and moves the leadership of the partitions it led; produces go on in
// every partition; the dead node, restarted, rejoins every ISR.
func TestControllerFailover(t *testing.T) {
	s, cl := startCluster(t)
	const topic = "failover"
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: 3, ReplicationFactor: 3})
	waitISR(t, s, cl, topic, 3)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	old, epoch := md.RaftLeader, md.ControllerEpoch
	oldBroker := md.Brokers[slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == old })]
	require.NoError(t, s.signal(old, syscall.SIGKILL))

	waitFor(t, 30*time.Second, "a new controller that moved every leader off the dead node", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		ok := md.RaftLeader != old && md.RaftLeader != replica.NoNode && md.ControllerEpoch > epoch
		for _, b := range md.Brokers {
			ok = ok && (b.ID != old || b.Fenced)
		}
		for _, p := range md.Partitions {
			ok = ok && p.Leader != old && p.Leader != replica.NoNode && !slices.Contains(p.ISR, old)
		}
		return ok, fmt.Sprintf("controller %d epoch %d, brokers %+v, partitions %+v", md.RaftLeader, md.ControllerEpoch, md.Brokers, md.Partitions)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for part := range int32(3) {
		_, err := cl.produceTo(ctx, topic, part, "all", []byte("after the controller moved"))
		require.NoError(t, err, "partition %d", part)
	}
	require.NoError(t, s.startNode(old))
	waitISR(t, s, cl, topic, 3)
	// The restarted node registered anew, in a later broker epoch: the
	// dead incarnation's is refused from now on (controller.Heartbeat).
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	restarted := md.Brokers[slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == old })]
	require.Greater(t, restarted.Epoch, oldBroker.Epoch)
	require.False(t, restarted.Fenced)
}

// A topic's replicas move to other nodes while a client produces to it
// (kafka-reassign-partitions' execute, then verify until complete): the
// new replica catches up and enters the ISR through its leader, the
// leader moves off the replica being removed, and no acknowledged record
// is lost. Bad reassignment files are refused and change nothing.
func TestReassignWhileProducing(t *testing.T) {
	s, cl := startCluster(t)
	const topic = "moves"
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: 1, ReplicationFactor: 2})
	waitISR(t, s, cl, topic, 2)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	before := *md.partition(topic, 0)
	// Move off the leader, onto the node that has no replica.
	var spare replica.NodeID
	for _, id := range s.ids() {
		if !slices.Contains(before.Replicas, id) {
			spare = id
		}
	}
	var kept replica.NodeID
	for _, id := range before.Replicas {
		if id != before.Leader {
			kept = id
		}
	}
	target := []int32{int32(kept), int32(spare)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for name, bad := range map[string]assign.Reassignment{
		"unknown broker": {Version: 1, Partitions: []assign.PartitionReplicas{{Topic: topic, Replicas: []int32{int32(kept), 9}}}},
		"duplicate":      {Version: 1, Partitions: []assign.PartitionReplicas{{Topic: topic, Replicas: []int32{int32(kept), int32(kept)}}}},
		"empty replicas": {Version: 1, Partitions: []assign.PartitionReplicas{{Topic: topic, Replicas: []int32{}}}},
		"version 2":      {Version: 2, Partitions: []assign.PartitionReplicas{{Topic: topic, Replicas: target}}},
	} {
		err := cl.callRetry(ctx, "/controller/reassign", bad, nil)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, replica.ErrInvalidReplicaAssignment) || errors.Is(err, replica.ErrInvalidRequest), "%s: %v", name, err)
	}
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	require.Equal(t, before.PartitionEpoch, md.partition(topic, 0).PartitionEpoch, "refused reassignments changed nothing")

	p := startProducer(s, cl, topic, 0)
	defer p.halt()
	time.Sleep(500 * time.Millisecond)
	ra := assign.Reassignment{Version: 1, Partitions: []assign.PartitionReplicas{{Topic: topic, Partition: 0, Replicas: target}}}
	require.NoError(t, cl.callRetry(ctx, "/controller/reassign", ra, nil))
	var statuses []string
	waitFor(t, 30*time.Second, "the reassignment to complete", func() (bool, string) {
		var rep reply
		if err := cl.callRetry(ctx, "/controller/verify", ra, &rep); err != nil {
			return false, err.Error()
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != rep.Verify[0].Status {
			statuses = append(statuses, rep.Verify[0].Status)
		}
		return rep.Verify[0].Status == "complete", rep.Verify[0].Status
	})
	time.Sleep(500 * time.Millisecond) // produce under the new replicas too
	p.halt()
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	after := md.partition(topic, 0)
	require.Equal(t, []replica.NodeID{kept, spare}, after.Replicas)
	require.NotEqual(t, before.Leader, after.Leader, "the leader moved off the removed replica")
	acked := p.snapshot()
	require.NotEmpty(t, acked)
	checkAcked(t, cl, after.Leader, topic, 0, acked)
	t.Logf("replicas %v -> %v (leader %d -> %d), verify said %v; %d records acknowledged, all there",
		before.Replicas, after.Replicas, before.Leader, after.Leader, statuses, len(acked))
}

// SIGTERM makes a node shut down under control (Kafka's controlled
// shutdown): it asks the controller to move the leadership of its
// partitions away and exits only once it leads none, handing the raft
// group's leadership over too when it holds it. So when its process has
// ended, its partitions already have other leaders and another node is the
// controller, without waiting for a session to expire; restarted, it
// registers clean (it left its clean-shutdown marker).
func TestControlledShutdown(t *testing.T) {
	s, cl := startCluster(t)
	const topic = "shutdown"
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: 1, ReplicationFactor: 3})
	waitISR(t, s, cl, topic, 3)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	victim := md.partition(topic, 0).Leader
	if md.RaftLeader != victim {
		moveController(t, s, cl, md.RaftLeader, victim)
	}
	p := startProducer(s, cl, topic, 0)
	defer p.halt()
	time.Sleep(300 * time.Millisecond)

	require.NoError(t, s.signal(victim, syscall.SIGTERM), "node %d stopped cleanly", victim)
	stopped := time.Now()
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	pv := md.partition(topic, 0)
	require.NotEqual(t, victim, pv.Leader, "leadership moved before the node stopped")
	require.NotContains(t, pv.ISR, victim)
	require.NotEqual(t, victim, md.RaftLeader, "the controller moved before the node stopped")
	require.NotEqual(t, replica.NoNode, md.RaftLeader)
	at, ok := p.firstAckAfter(stopped, 10*time.Second)
	require.True(t, ok)
	p.halt()
	checkAcked(t, cl, pv.Leader, topic, 0, p.snapshot())
	t.Logf("node %d stopped; node %d leads, node %d is the controller; first produce acknowledged %v after the stop",
		victim, pv.Leader, md.RaftLeader, at.Sub(stopped).Round(time.Millisecond))

	i := slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == victim })
	before := md.Brokers[i].Epoch
	require.NoError(t, s.startNode(victim))
	// The ISR alone does not say the node is back: it may be the one its
	// last fetches before it stopped left.
	waitFor(t, 30*time.Second, fmt.Sprintf("node %d registered again", victim), func() (bool, string) {
		if md, err = metadataFrom(s, cl); err != nil {
			return false, err.Error()
		}
		b := md.Brokers[slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == victim })]
		return b.Epoch > before && !b.Fenced, fmt.Sprintf("%+v", b)
	})
	b := md.Brokers[slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == victim })]
	require.True(t, b.Clean, "node %d registered clean after a controlled shutdown", victim)
	waitISR(t, s, cl, topic, 3)
}

// cli runs the command as a user would (the test binary is the command),
// and returns its standard output.
func cli(t *testing.T, s *supervisor, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.exe, append(args[:1:1], append([]string{"-dir", s.dir}, args[1:]...)...)...)
	cmd.Env = append(os.Environ(), childEnv)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "cluster %s: %s", strings.Join(args, " "), stderr.String())
	return string(out)
}

// The CLI creates a topic, produces (acks=all) and consumes, prints the
// status, and runs a reassignment from a kafka-reassign-partitions file
// (execute, then verify until complete); the status page lists the
// brokers and each replica's log end and high watermark, in HTML and JSON.
func TestCLI(t *testing.T) {
	s, cl := startCluster(t)
	require.Contains(t, cli(t, s, "", "create-topic", "-topic", "cli", "-partitions", "2", "-replication-factor", "2"),
		"created topic cli with 2 partitions")
	require.Equal(t, "cli-1@0\ncli-1@1\ncli-1@2\n", cli(t, s, "", "produce", "-topic", "cli", "-partition", "1", "a", "b", "c"))
	require.Equal(t, "cli-1@3\ncli-1@4\n", cli(t, s, "d\ne\n", "produce", "-topic", "cli", "-partition", "1"))
	require.Equal(t, "0\ta\n1\tb\n2\tc\n3\td\n4\te\n", cli(t, s, "", "consume", "-topic", "cli", "-partition", "1"))

	gen := cli(t, s, "", "reassign", "-generate", "-topics", "cli", "-brokers", "1,2,3")
	require.Contains(t, gen, "Current partition replica assignment")
	require.Contains(t, gen, "Proposed partition reassignment configuration")
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	current := md.partition("cli", 1).Replicas
	target := []replica.NodeID{}
	for _, id := range s.ids() {
		if !slices.Contains(current, id) {
			target = append(target, id)
		}
	}
	target = append(target, current[0])
	plan := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(plan, fmt.Appendf(nil, `{"version":1,"partitions":[{"topic":"cli","partition":1,"replicas":[%d,%d]}]}`, target[0], target[1]), 0o644))
	require.Contains(t, cli(t, s, "", "reassign", "-execute", "-reassignment-json-file", plan), "Successfully started")
	waitFor(t, 30*time.Second, "the reassignment to complete", func() (bool, string) {
		out := cli(t, s, "", "reassign", "-verify", "-reassignment-json-file", plan)
		return strings.Contains(out, "Status of partition reassignment for cli-1: complete"), out
	})
	require.Equal(t, "0\ta\n1\tb\n2\tc\n3\td\n4\te\n", cli(t, s, "", "consume", "-topic", "cli", "-partition", "1"),
		"the records moved with the replicas")

	status := cli(t, s, "", "status")
	require.Contains(t, status, "BROKER")
	require.Regexp(t, fmt.Sprintf(`cli-1 +\d +\d+ +\[%d %d\]`, target[0], target[1]), status)

	var full metadata
	require.NoError(t, cl.getJSON(context.Background(), 1, "/status", &full))
	require.Len(t, full.Brokers, 3)
	p := full.partition("cli", 1)
	require.Len(t, p.Logs, 2)
	for _, l := range p.Logs {
		require.Empty(t, l.Error)
		require.Equal(t, int64(5), l.LogEnd, "node %d", l.Node)
	}
	resp, err := http.Get(cl.url(2, "/"))
	require.NoError(t, err)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(page), "<h2>Brokers</h2>")
	require.Contains(t, string(page), "cli-1")
}
