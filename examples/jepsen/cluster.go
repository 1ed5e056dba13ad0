//go:build linux

// Package jepsen attacks examples/cluster as Jepsen attacks Kafka: three
// real `node -kafka` processes, franz-go idempotent producers with
// acks=all and a consumer group against them, faults injected into the
// processes, their network and their disks, and a checker (package
// checker) that reads every partition back and judges what the clients
// were told. The scenarios are in jepsen_test.go; README.md says how to
// run them.
package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strandlog/strand/internal/loopback"
)

// BuildNode builds the cluster example's command (the source in
// clusterDir) into dir and returns the binary's path: the nodes run what
// the tree holds, as a user would run them.
func BuildNode(clusterDir, dir string) (string, error) {
	bin := filepath.Join(dir, "node")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = clusterDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the node in %s: %w\n%s", clusterDir, err, out)
	}
	return bin, nil
}

// Node is one node process of the cluster.
type Node struct {
	ID int
	// Dir is the node's data directory (its raft log and its partitions'
	// log.Dir, LogDir).
	Dir         string
	Peer, Kafka string // host:port of its HTTP transport and of its Kafka broker
	netns       string // the network namespace it runs in, if any

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// LogDir is the node's log.Dir, where its partitions' replicas live.
func (n *Node) LogDir() string { return filepath.Join(n.Dir, "log") }

// Cluster is three node processes serving Kafka clients.
type Cluster struct {
	Nodes []*Node
	bin   string
	dir   string
	args  []string // flags every node gets beyond its addresses
}

// NewCluster lays out three nodes under dir: on loopback, or, with a
// network, each in its namespace at its address there.
func NewCluster(bin, dir string, network *Network, args ...string) (*Cluster, error) {
	c := &Cluster{bin: bin, dir: dir, args: args}
	var addrs []string
	if network == nil {
		var err error
		if addrs, err = loopback.Addrs(6); err != nil {
			return nil, err
		}
	}
	for i := range 3 {
		n := &Node{ID: i + 1, Dir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1))}
		if network == nil {
			n.Peer, n.Kafka = addrs[i], addrs[3+i]
		} else {
			n.netns = network.NS[i]
			n.Peer, n.Kafka = network.Addr(i)+":7000", network.Addr(i)+":9092"
		}
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

func (c *Cluster) list(addr func(*Node) string) string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, addr(n))
	}
	return strings.Join(out, ",")
}

// Node returns the node of an id.
func (c *Cluster) Node(id int) *Node { return c.Nodes[id-1] }

// Start starts a node's process (again), its output appended to
// DIR/node-N.out.
func (c *Cluster) Start(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("node %d: already running", n.ID)
	}
	args := append([]string{"node", "-id", fmt.Sprint(n.ID), "-dir", n.Dir,
		"-peers", c.list(func(n *Node) string { return n.Peer }), "-kafka", c.list(func(n *Node) string { return n.Kafka })}, c.args...)
	name := c.bin
	if n.netns != "" {
		// ip netns exec runs the node in place of itself: the pid is the node's.
		args = append([]string{"netns", "exec", n.netns, c.bin}, args...)
		name = "ip"
	}
	out, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("node-%d.out", n.ID)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s: started\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	return nil
}

// StartAll starts every node that does not run.
func (c *Cluster) StartAll() error {
	for _, n := range c.Nodes {
		if n.Running() {
			continue
		}
		if err := c.Start(n); err != nil {
			return err
		}
	}
	return nil
}

// Running reports whether the node's process was started and not ended.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// End sends SIGKILL or SIGTERM and waits until the process is gone (a
// SIGTERM, a controlled shutdown, gets 30 s before a SIGKILL).
func (n *Node) End(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	if sig == syscall.SIGTERM {
		cmd.Process.Signal(syscall.SIGCONT) // a frozen node cannot shut down
	}
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("node %d: no controlled shutdown within 30 s: killed", n.ID)
	}
}

// Signal sends a signal that does not end the process (SIGSTOP, SIGCONT).
func (n *Node) Signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("node %d: not running", n.ID)
	}
	return n.cmd.Process.Signal(sig)
}

// Close kills every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Signal(syscall.SIGCONT)
		n.End(syscall.SIGKILL)
	}
}

// Seeds are the nodes' Kafka addresses.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Kafka)
	}
	return out
}

// Client returns a franz-go client of the cluster for the test's own
// requests (topic creation, metadata, reading back). Metadata may be
// refreshed every 100 ms: the default, 5 s, would be most of a wait.
func (c *Cluster) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return c.UserClient(append([]kgo.Opt{
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.MetadataMaxAge(2 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	}, opts...)...)
}

// UserClient returns a franz-go client of the cluster with franz-go's
// defaults, as a user starts one, but for opts.
func (c *Cluster) UserClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds()...)}, opts...)...)
}

// Leaders returns each partition's leader and the controller, as the
// brokers' Metadata names them (asked of the running nodes only).
func (c *Cluster) Leaders(ctx context.Context, adm *kadm.Client, topic string) (leaders map[int32]int, controller int, err error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, -1, err
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil {
		return nil, -1, fmt.Errorf("metadata of %s: %v", topic, t.Err)
	}
	leaders = map[int32]int{}
	for p, pd := range t.Partitions {
		leaders[p] = int(pd.Leader)
	}
	return leaders, int(md.Controller), nil
}

// ReplicaLog is one replica's offsets, as its node reports them on GET
// /local (the cluster's own HTTP endpoint).
type ReplicaLog struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Log       struct {
		LogStart      int64  `json:"log_start"`
		HighWatermark int64  `json:"high_watermark"`
		LogEnd        int64  `json:"log_end"`
		Error         string `json:"error"`
	} `json:"log"`
}

// Local asks a node for its replicas' offsets.
func (n *Node) Local(ctx context.Context) ([]ReplicaLog, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Peer+"/local", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []ReplicaLog
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("node %d's /local: %w", n.ID, err)
	}
	return out, nil
}

// ErrDisagree is returned by WaitAgree when the replicas did not agree in
// time.
var ErrDisagree = errors.New("replicas do not agree")

// WaitAgree waits until every replica of each of the topic's partitions
// reports the same log end, equal to its high watermark, twice in a row.
func (c *Cluster) WaitAgree(ctx context.Context, topic string, partitions int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	agreedOnce := false
	for time.Now().Before(deadline) {
		ok, desc := c.agree(ctx, topic, partitions)
		if ok && agreedOnce {
			return nil
		}
		agreedOnce, last = ok, desc
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%w after %v: %s", ErrDisagree, timeout, last)
}

func (c *Cluster) agree(ctx context.Context, topic string, partitions int) (bool, string) {
	type replicaEnd struct {
		node       int
		end, hw    int64
		replicaErr string
	}
	byPartition := map[int32][]replicaEnd{}
	for _, n := range c.Nodes {
		logs, err := n.Local(ctx)
		if err != nil {
			return false, fmt.Sprintf("node %d: %v", n.ID, err)
		}
		for _, l := range logs {
			if l.Topic == topic {
				byPartition[l.Partition] = append(byPartition[l.Partition], replicaEnd{n.ID, l.Log.LogEnd, l.Log.HighWatermark, l.Log.Error})
			}
		}
	}
	ok := true
	var desc []string
	for p := range int32(partitions) {
		rs := byPartition[p]
		ok = ok && len(rs) == len(c.Nodes)
		var vals []string
		for _, r := range rs {
			ok = ok && r.replicaErr == "" && r.hw == r.end && r.end == rs[0].end
			v := fmt.Sprintf("%d:%d/%d", r.node, r.end, r.hw)
			if r.replicaErr != "" {
				v += " (" + r.replicaErr + ")"
			}
			vals = append(vals, v)
		}
		desc = append(desc, fmt.Sprintf("p%d %v", p, vals))
	}
	return ok, strings.Join(desc, "; ")
}
