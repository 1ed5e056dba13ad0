// Command rpccluster composes a three-node Strand cluster over net/rpc, each
// node a cluster.Node with a net/rpc Transport and an etcd raft MetadataLog
// (examples/raftlog). `go run .` runs node 3 and the application, which
// starts nodes 1 and 2, writes a topic node 1 leads, reads it in a consumer
// group, opens a transaction, SIGKILLs node 1, and checks what survived.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/rpc"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/raftlog"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

func main() {
	id := flag.Int("id", 0, "run node ID (1 or 2, as the demo starts them) until SIGTERM; 0 runs the demo")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "strand-rpccluster"), "data directory")
	peers := flag.String("peers", "", "the nodes' host:port, comma-separated")
	flag.Parse()
	var err error
	var stop func()
	if *id == 0 {
		err = demo(*dir)
	} else if _, stop, err = startNode(replica.NodeID(*id), *dir, strings.Split(*peers, ",")); err == nil {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		<-ctx.Done()
		cancel()
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpccluster:", err)
		os.Exit(1)
	}
}

// rpcTransport is a cluster.Transport over net/rpc: a client per peer,
// dialled again once it fails.
type rpcTransport struct {
	peers   []string // node N at peers[N-1]
	mu      sync.Mutex
	clients map[replica.NodeID]*rpc.Client
}

func (t *rpcTransport) Send(ctx context.Context, to replica.NodeID, msg []byte) error {
	return t.call(ctx, to, "Node.Receive", msg, new(struct{}))
}

func (t *rpcTransport) Call(ctx context.Context, to replica.NodeID, req []byte) (answer []byte, err error) {
	return answer, t.call(ctx, to, "Node.Serve", req, &answer)
}

func (t *rpcTransport) call(ctx context.Context, to replica.NodeID, method string, args, reply any) error {
	if to < 1 || int(to) > len(t.peers) {
		return fmt.Errorf("no node %d", to)
	}
	t.mu.Lock()
	c := t.clients[to]
	if c == nil {
		conn, err := net.DialTimeout("tcp", t.peers[to-1], time.Second)
		if err != nil {
			t.mu.Unlock()
			return err
		}
		c = rpc.NewClient(conn)
		t.clients[to] = c
	}
	t.mu.Unlock()
	select {
	case done := <-c.Go(method, args, reply, make(chan *rpc.Call, 1)).Done:
		if errors.Is(done.Error, rpc.ErrShutdown) {
			t.mu.Lock()
			delete(t.clients, to)
			t.mu.Unlock()
		}
		return done.Error
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Node is a node's net/rpc service: the cluster's messages and requests,
// and raft's messages.
type Node struct {
	n    *cluster.Node
	raft *raftlog.Log
}

func (s *Node) Receive(msg []byte, _ *struct{}) error { return s.n.Receive(context.Background(), msg) }
func (s *Node) Raft(msg []byte, _ *struct{}) error    { return s.raft.Step(msg) }
func (s *Node) Serve(req []byte, answer *[]byte) (err error) {
	*answer, err = s.n.Serve(context.Background(), req)
	return err
}

// startNode starts node id and serves it on its address; stop stops it.
func startNode(id replica.NodeID, dir string, peers []string) (n *cluster.Node, stop func(), err error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
	tr := &rpcTransport{peers: peers, clients: map[replica.NodeID]*rpc.Client{}}
	s := &Node{}
	s.raft, err = raftlog.Open(raftlog.Config{ID: id, Voters: []replica.NodeID{1, 2, 3}, Dir: filepath.Join(dir, "raft"), Logger: logger,
		Send: func(to replica.NodeID, msg []byte) {
			go tr.call(context.Background(), to, "Node.Raft", msg, new(struct{}))
		}})
	if err != nil {
		return nil, nil, err
	}
	if s.n, err = cluster.New(cluster.Options{ID: id, Dir: dir, Transport: tr, Metadata: s.raft, Logger: logger, MinInsyncReplicas: 2}); err != nil {
		return nil, nil, errors.Join(err, s.raft.Close())
	}
	srv := rpc.NewServer()
	ln, err := loopback.Listen(peers[id-1])
	if err == nil {
		err = srv.Register(s)
	}
	if err != nil {
		return nil, nil, errors.Join(err, s.n.Close(), s.raft.Close())
	}
	go srv.Accept(ln)
	return s.n, func() { ln.Close(); s.n.Close(); s.raft.Close() }, nil
}

const topic, groupID, txnID = "orders", "billing", "payments"

// demo runs nodes 1 and 2 as processes, node 3 and the application here.
func demo(dir string) error {
	peers, err := loopback.Addrs(3)
	if err != nil {
		return err
	}
	exe, _ := os.Executable()
	var procs [2]*exec.Cmd
	for i, p := range procs {
		p = exec.Command(exe, "-id", fmt.Sprint(i+1), "-dir", filepath.Join(dir, fmt.Sprint("node-", i+1)), "-peers", strings.Join(peers, ","))
		p.Stderr, p.Env = os.Stderr, append(os.Environ(), "RPCCLUSTER_NODE=1") // a test binary runs main for it
		if err := p.Start(); err != nil {
			return err
		}
		defer func() { p.Process.Signal(syscall.SIGTERM); p.Wait() }()
		procs[i] = p
	}
	n, stop, err := startNode(3, filepath.Join(dir, "node-3"), peers)
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var want []string
	var producer, txn *cluster.Producer
	produce := func(p *cluster.Producer, values ...string) error {
		var recs []log.Record
		for _, v := range values {
			recs, want = append(recs, log.Record{Value: []byte(v)}), append(want, v)
		}
		_, err := p.Produce(ctx, topic, 0, recs...)
		return err
	}
	// Node 1 leads the topic; an idempotent producer writes it, the
	// group's first member reads it and commits, a transaction opens; then
	// node 1 dies. The transaction commits at its coordinator of the
	// moment, the producer writes on at the next leader, and the group's
	// next member reads on from the first one's commit.
	steps := []func() error{
		func() error { return n.WaitBrokers(ctx, 3) },
		func() error {
			return n.CreateTopic(ctx, topic, cluster.TopicSpec{Assignment: [][]replica.NodeID{{1, 2, 3}}})
		},
		func() (err error) { producer, err = cluster.NewProducer(ctx, n, cluster.ProducerOptions{}); return err },
		func() error { return produce(producer, "order-0", "order-1", "order-2") },
		func() error { return consume(ctx, n, want[:3]) },
		func() (err error) {
			txn, err = cluster.NewProducer(ctx, n, cluster.ProducerOptions{TransactionalID: txnID})
			return err
		},
		func() error { return produce(txn, "paid") },
		func() error {
			fmt.Printf("SIGKILL node 1, the leader of %s-0, with a transaction open\n", topic)
			procs[0].Process.Kill()
			procs[0].Wait()
			return txn.Commit(ctx)
		},
		func() error { return produce(producer, "order-3", "order-4") },
		func() error { return consume(ctx, n, want[3:]) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	fmt.Printf("node %d leads now: every acknowledged record read once, from the group's commit on, the transaction's too\n",
		n.Metadata().Partition(topic, 0).Leader)
	return nil
}

// consume runs a member of the group until it has read as many records
// as want has, read committed, checks them, commits and leaves.
func consume(ctx context.Context, n *cluster.Node, want []string) error {
	c, err := cluster.NewConsumer(n, cluster.ConsumerOptions{Group: groupID, Topics: []string{topic}})
	if err != nil {
		return err
	}
	var got []string
	for len(got) < len(want) && ctx.Err() == nil {
		ms, _ := c.Poll(ctx) // a heartbeat's failure, which the consumer retries
		for _, m := range ms {
			got = append(got, string(m.Value))
		}
	}
	if !slices.Equal(got, want) {
		err = fmt.Errorf("the group's member read %q, want %q", got, want)
	}
	return errors.Join(err, ctx.Err(), c.Commit(ctx), c.Close(ctx))
}
