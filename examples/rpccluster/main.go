// Command rpccluster composes a three-node Strand cluster over net/rpc:
// each node is a process running a cluster.Node, whose Transport is
// net/rpc and whose MetadataLog is etcd raft (examples/raftlog). `go run .`
// starts three nodes, writes a topic, commits a consumer group's offsets
// and runs a transaction across the SIGKILL of a leader, and checks it all.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/raftlog"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/replica"
)

func main() {
	id := flag.Int("id", 0, "run node ID (1 to 3); 0 runs the demo, which starts the three")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "strand-rpccluster"), "data directory")
	peers := flag.String("peers", "", "the nodes' host:port, comma-separated (set by the demo)")
	flag.Parse()
	var err error
	if *id == 0 {
		err = demo(*dir)
	} else {
		err = runNode(replica.NodeID(*id), *dir, strings.Split(*peers, ","))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpccluster:", err)
		os.Exit(1)
	}
}

// rpcTransport is a cluster.Transport over net/rpc, one client per peer,
// dialled again after it fails.
type rpcTransport struct {
	peers   []string // node N at peers[N-1]
	mu      sync.Mutex
	clients map[replica.NodeID]*rpc.Client
}

func (t *rpcTransport) Send(ctx context.Context, to replica.NodeID, msg []byte) error {
	return t.call(ctx, to, "Node.Receive", msg, new(struct{}))
}

func (t *rpcTransport) Call(ctx context.Context, to replica.NodeID, req []byte) ([]byte, error) {
	var answer []byte
	return answer, t.call(ctx, to, "Node.Serve", req, &answer)
}

func (t *rpcTransport) call(ctx context.Context, to replica.NodeID, method string, args, reply any) error {
	t.mu.Lock()
	c := t.clients[to]
	if c == nil && int(to) >= 1 && int(to) <= len(t.peers) {
		conn, err := net.DialTimeout("tcp", t.peers[to-1], time.Second)
		if err != nil {
			t.mu.Unlock()
			return err
		}
		c = rpc.NewClient(conn)
		t.clients[to] = c
	}
	t.mu.Unlock()
	if c == nil {
		return fmt.Errorf("no node %d", to)
	}
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

// Node is the net/rpc service of a node: the cluster's messages and
// requests, raft's messages, and the calls the demo makes (app.go).
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

func runNode(id replica.NodeID, dir string, peers []string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
	tr := &rpcTransport{peers: peers, clients: map[replica.NodeID]*rpc.Client{}}
	s := &Node{}
	var err error
	s.raft, err = raftlog.Open(raftlog.Config{ID: id, Voters: []replica.NodeID{1, 2, 3}, Dir: filepath.Join(dir, "raft"), Logger: logger,
		Send: func(to replica.NodeID, msg []byte) {
			go tr.call(context.Background(), to, "Node.Raft", msg, new(struct{})) // raft sends again what is lost
		}})
	if err != nil {
		return err
	}
	defer s.raft.Close()
	if s.n, err = cluster.New(cluster.Config{ID: id, Dir: dir, Transport: tr, Metadata: s.raft, Logger: logger, MinInsyncReplicas: 2}); err != nil {
		return err
	}
	defer s.n.Close()
	srv := rpc.NewServer()
	if err := srv.Register(s); err != nil {
		return err
	}
	ln, err := loopback.Listen(peers[id-1])
	if err != nil {
		return err
	}
	go srv.Accept(ln)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	return nil
}

// cluster3 is the demo's three node processes.
type cluster3 struct {
	dir   string
	peers []string
	procs [3]*exec.Cmd
}

func (c *cluster3) start(id replica.NodeID) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-id", fmt.Sprint(id), "-dir", filepath.Join(c.dir, fmt.Sprint("node-", id)), "-peers", strings.Join(c.peers, ","))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "RPCCLUSTER_NODE=1") // a test binary runs main for it
	c.procs[id-1] = cmd
	return cmd.Start()
}

func (c *cluster3) kill(id replica.NodeID) {
	c.procs[id-1].Process.Signal(syscall.SIGKILL)
	c.procs[id-1].Wait()
}

func (c *cluster3) stop() {
	for _, p := range c.procs {
		if p != nil && p.ProcessState == nil {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
	}
}
