package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/replica"
)

// supervisor starts, kills and restarts the node processes: exe run with
// the node subcommand (and env, for a test binary that runs as a node).
type supervisor struct {
	exe  string
	env  []string
	dir  string
	args []string // tuning flags passed to every node
	// tls is the nodes' mutual TLS (nodeFlags.tls, among args), for the
	// supervisor's own calls to them.
	tls *peerTLS
	// logs, if set, receives each node's output; otherwise it goes to
	// DIR/node-N.out.
	stdout *os.File

	peers map[replica.NodeID]string
	// withKafka has every node serve Kafka clients, at its address in
	// kafka (picked by start, kept across restarts).
	withKafka bool
	kafka     map[replica.NodeID]string
	// withSASL has every node serve SASL/SCRAM Kafka clients too, at its
	// address in sasl.
	withSASL bool
	sasl     map[replica.NodeID]string
	mu       sync.Mutex // procs is read by tests' producers too
	procs    map[replica.NodeID]*exec.Cmd
}

// peersFile is where the supervisor writes the nodes' addresses, for the
// CLI to find them; kafkaFile their Kafka addresses.
const (
	peersFile = "peers"
	kafkaFile = "kafka-peers"
	saslFile  = "kafka-sasl-peers"
)

// setOfAddrs is one address of every node: its peer address, Kafka's,
// its SASL listener's; wanted or not, and the file start writes it to.
type setOfAddrs struct {
	want  bool
	addrs *map[replica.NodeID]string
	file  string
}

// start picks a free loopback port for each of n nodes, unless peers are
// set already, and starts them.
func (s *supervisor) start(n int) error {
	s.procs = map[replica.NodeID]*exec.Cmd{}
	// Each set of addresses is picked once, and kept across restarts:
	// the raft log names the peers, clients the Kafka addresses.
	sets := []setOfAddrs{{true, &s.peers, peersFile}, {s.withKafka, &s.kafka, kafkaFile}, {s.withSASL, &s.sasl, saslFile}}
	missing := slices.DeleteFunc(slices.Clone(sets), func(set setOfAddrs) bool { return !set.want || len(*set.addrs) == n })
	addrs, err := loopback.Addrs(n * len(missing)) // at once, so that no two are the same
	if err != nil {
		return err
	}
	for i, set := range missing {
		*set.addrs = map[replica.NodeID]string{}
		for id := range replica.NodeID(n) {
			(*set.addrs)[id+1] = addrs[i*n+int(id)]
		}
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	for _, set := range sets {
		if set.want {
			if err := os.WriteFile(filepath.Join(s.dir, set.file), []byte(formatPeers(*set.addrs)+"\n"), 0o644); err != nil {
				return err
			}
		}
	}
	for _, id := range s.ids() {
		if err := s.startNode(id); err != nil {
			return err
		}
	}
	return nil
}

func (s *supervisor) ids() []replica.NodeID {
	var ids []replica.NodeID
	for id := range s.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *supervisor) nodeDir(id replica.NodeID) string {
	return filepath.Join(s.dir, fmt.Sprintf("node-%d", id))
}

func (s *supervisor) startNode(id replica.NodeID) error {
	args := append([]string{"node", "-id", fmt.Sprint(id), "-dir", s.nodeDir(id), "-peers", formatPeers(s.peers)}, s.args...)
	if s.withKafka {
		args = append(args, "-kafka", formatPeers(s.kafka))
	}
	if s.withSASL {
		args = append(args, "-kafka-sasl", formatPeers(s.sasl))
	}
	cmd := exec.Command(s.exe, args...)
	cmd.Env = append(os.Environ(), s.env...)
	out := s.stdout
	if out == nil {
		f, err := os.OpenFile(filepath.Join(s.dir, fmt.Sprintf("node-%d.out", id)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close() // the child has its own descriptor
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	s.mu.Lock()
	s.procs[id] = cmd
	s.mu.Unlock()
	return nil
}

// running reports whether the node's process was started and not stopped.
func (s *supervisor) running(id replica.NodeID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id] != nil
}

// signal sends sig to a node and waits for its process to end.
func (s *supervisor) signal(id replica.NodeID, sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.procs[id]
	delete(s.procs, id)
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	err := cmd.Wait()
	if sig == syscall.SIGKILL {
		return nil
	}
	return err
}

// pause stops a node's process (SIGSTOP), as a long GC pause or a
// stalled VM would, and resume lets it go on (SIGCONT).
func (s *supervisor) pause(id replica.NodeID) error  { return s.signalRunning(id, syscall.SIGSTOP) }
func (s *supervisor) resume(id replica.NodeID) error { return s.signalRunning(id, syscall.SIGCONT) }

func (s *supervisor) signalRunning(id replica.NodeID, sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.procs[id]
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("node %d does not run", id)
	}
	return cmd.Process.Signal(sig)
}

// stop ends every node cleanly (SIGTERM: a controlled shutdown).
func (s *supervisor) stop() error {
	var errs []error
	for _, id := range s.ids() {
		if err := s.signal(id, syscall.SIGTERM); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// kill ends whatever still runs.
func (s *supervisor) kill() {
	for _, id := range s.ids() {
		s.signal(id, syscall.SIGKILL)
	}
}

func formatPeers(peers map[replica.NodeID]string) string {
	var addrs []string
	for id := range replica.NodeID(len(peers)) {
		addrs = append(addrs, peers[id+1])
	}
	return strings.Join(addrs, ",")
}

// parsePeers reads "host:port,host:port,...", node 1 first.
func parsePeers(s string) (map[replica.NodeID]string, error) {
	peers := map[replica.NodeID]string{}
	for i, addr := range strings.Split(strings.TrimSpace(s), ",") {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %d: %w", i+1, err)
		}
		peers[replica.NodeID(i+1)] = addr
	}
	return peers, nil
}

// readPeers reads the peers file a supervisor wrote in dir.
func readPeers(dir string) (map[replica.NodeID]string, error) {
	return readAddrs(dir, peersFile)
}

// readAddrs reads a file of addresses a supervisor wrote in dir.
func readAddrs(dir, name string) (map[replica.NodeID]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s (start one with: cluster up -dir %s): %w", dir, dir, err)
	}
	return parsePeers(string(b))
}
