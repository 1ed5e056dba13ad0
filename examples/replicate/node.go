package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// The example's one partition.
const (
	topic     = "orders"
	partition = 0
	leaderID  = replica.NodeID(1)
)

// nodeConfig is what a node process is started with.
type nodeConfig struct {
	id    replica.NodeID
	dir   string                    // the node's own data directory
	peers map[replica.NodeID]string // host:port of every node, this one included
	tick  time.Duration
	lag   int // replica.Config.ReplicaLagTicks
}

// runNode runs one node until SIGTERM or SIGINT: its log.Dir, a Driver
// over the HTTP transport, and the HTTP server peers post messages to.
// Node 1 leads and also plays the controller (see controller).
func runNode(cfg nodeConfig) error {
	dir, err := log.OpenDir(cfg.dir, log.DirOptions{Log: log.Options{ExternalHighWatermark: true}})
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.CreateTopic(topic, log.TopicConfig{Partitions: 1, Fsync: log.FsyncAlways()}); err != nil && !errors.Is(err, log.ErrTopicExists) {
		return err
	}
	plog, err := dir.Partition(topic, partition)
	if err != nil {
		return err
	}

	ln, err := loopback.Listen(cfg.peers[cfg.id])
	if err != nil {
		return err
	}
	tr := newHTTPTransport(cfg.peers)
	defer tr.close()
	d, err := replica.NewDriver(replica.DriverOptions{Node: replica.NewNode(cfg.id), Transport: tr, TickInterval: cfg.tick})
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	go stopWithParent(ctx, cancel)
	running := make(chan error, 1)
	go func() { running <- d.Run(ctx) }()
	defer func() { cancel(); <-running }()

	if err := d.AddPartition(ctx, replica.Config{
		Topic: topic, Partition: partition, Log: truncationLogger{plog, cfg.id},
		MinInsyncReplicas:   2,
		ReplicaLagTicks:     cfg.lag,
		RequestTimeoutTicks: cfg.lag,
		ProduceTimeoutTicks: 10 * cfg.lag,
	}); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /replica", func(w http.ResponseWriter, r *http.Request) {
		m, err := readMessage(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A stale or refused message is the protocol's business, not the sender's.
		_ = d.Receive(r.Context(), m)
		w.WriteHeader(http.StatusNoContent)
	})
	if cfg.id == leaderID {
		c, err := newController(cfg, plog)
		if err != nil {
			return err
		}
		c.routes(mux, d, tr)
		if err := d.Receive(ctx, c.leaderAndISR(cfg.id)); err != nil {
			return fmt.Errorf("node %d: lead: %w", cfg.id, err)
		}
	} else {
		go join(ctx, cfg, d)
	}
	srv := newServer(mux)
	go srv.Serve(ln)
	<-ctx.Done()
	shutdown, done := context.WithTimeout(context.Background(), shutdownBudget)
	defer done()
	return srv.Shutdown(shutdown)
}

// shutdownBudget is how long a stopping node waits for the requests in
// progress.
const shutdownBudget = 2 * time.Second

// newServer serves mux to the peers. A connection must send its first
// request's header within half a second of opening (peers on loopback send
// it at once): Go's HTTP client may keep a connection it dialed and never
// used (the dial lost the race to an idle one), and Shutdown waits five
// seconds for a connection that has sent nothing, past shutdownBudget.
func newServer(mux http.Handler) *http.Server {
	return &http.Server{Handler: mux, ReadHeaderTimeout: 500 * time.Millisecond}
}

// truncationLogger is the partition's log, saying when the replica
// truncates records away: what a follower does when it finds its log
// diverged from its leader's.
type truncationLogger struct {
	*log.Partition
	id replica.NodeID
}

func (l truncationLogger) TruncateTo(offset int64) error {
	_, _, end, err := l.Offsets()
	if err == nil && offset < end {
		fmt.Printf("node %d: truncating its log from offset %d to %d: records its leader does not have\n", l.id, end, offset)
	}
	return l.Partition.TruncateTo(offset)
}

// stopWithParent stops the node when the supervisor that started it is
// gone (killed, or a test binary that timed out), rather than leaving an
// orphan that holds its port and data directory.
func stopWithParent(ctx context.Context, stop func()) {
	parent := os.Getppid()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
			if os.Getppid() != parent {
				stop()
				return
			}
		}
	}
}

// join asks the controller (on node 1) for the partition's state until it
// answers: a restarted follower learns the current leader epoch so.
func join(ctx context.Context, cfg nodeConfig, d *replica.Driver) {
	url := fmt.Sprintf("http://%s/join?node=%d", cfg.peers[leaderID], cfg.id)
	for ctx.Err() == nil {
		if resp, err := http.Get(url); err == nil {
			m, err := readMessage(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && d.Receive(ctx, m) == nil {
				return
			}
		}
		time.Sleep(cfg.tick * 10)
	}
}

func readMessage(r io.Reader) (replica.Message, error) {
	b, err := io.ReadAll(io.LimitReader(r, replica.MaxMessageBytes))
	if err != nil {
		return nil, err
	}
	return replica.Decode(b)
}

// controller is the smallest controller that lets the ISR change: it holds
// the partition's state in node 1's memory, answers the leader's
// AlterPartition compare-and-set on the partition epoch (Kafka's
// controller does the same check), and tells a joining follower the
// state. Leadership never moves: the real controller is a later issue.
type controller struct {
	mu             sync.Mutex
	leaderEpoch    int32
	partitionEpoch int32
	replicas, isr  []replica.NodeID
}

func newController(cfg nodeConfig, plog *log.Partition) (*controller, error) {
	// A restarted leader takes a new epoch: reusing one its log holds
	// would let two different records share an (epoch, offset).
	latest, err := plog.LatestEpoch()
	if err != nil {
		return nil, err
	}
	c := &controller{leaderEpoch: max(latest+1, 1), partitionEpoch: 1}
	for id := range replica.NodeID(len(cfg.peers)) {
		c.replicas = append(c.replicas, id+1)
	}
	c.isr = c.replicas
	return c, nil
}

func (c *controller) leaderAndISR(to replica.NodeID) *replica.LeaderAndISR {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &replica.LeaderAndISR{
		Header: replica.Header{From: replica.NoNode, To: to, Topic: topic, Partition: partition},
		Leader: leaderID, LeaderEpoch: c.leaderEpoch, PartitionEpoch: c.partitionEpoch,
		Replicas: c.replicas, ISR: c.isr,
	}
}

// alter applies an ISR proposal if it was made against the current state.
func (c *controller) alter(m *replica.AlterPartition) *replica.AlterPartitionResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &replica.AlterPartitionResponse{Header: replica.Header{From: replica.NoNode, To: m.From, Topic: topic, Partition: partition}}
	switch {
	case m.LeaderEpoch != c.leaderEpoch:
		resp.Err = replica.ErrFencedLeaderEpoch
	case m.PartitionEpoch != c.partitionEpoch:
		resp.Err = replica.ErrInvalidUpdateVersion
	default:
		c.isr = m.Nodes()
		c.partitionEpoch++
	}
	resp.Leader, resp.LeaderEpoch, resp.PartitionEpoch, resp.ISR = leaderID, c.leaderEpoch, c.partitionEpoch, c.isr
	return resp
}

// state is what GET /isr returns.
type state struct {
	LeaderEpoch    int32            `json:"leader_epoch"`
	PartitionEpoch int32            `json:"partition_epoch"`
	ISR            []replica.NodeID `json:"isr"`
}

// produced is what POST /produce returns.
type produced struct {
	BaseOffset int64        `json:"base_offset"`
	LastOffset int64        `json:"last_offset"`
	Code       replica.Code `json:"code"`
	Err        string       `json:"err,omitempty"`
}

// routes adds the leader's and the controller's endpoints.
func (c *controller) routes(mux *http.ServeMux, d *replica.Driver, tr *httpTransport) {
	mux.HandleFunc("POST /controller", func(w http.ResponseWriter, r *http.Request) {
		m, err := readMessage(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A node sends its messages to one destination as a Batch.
		msgs := []replica.Message{m}
		if b, ok := m.(*replica.Envelope); ok {
			msgs = b.Messages
		}
		for _, m := range msgs {
			if ap, ok := m.(*replica.AlterPartition); ok {
				tr.Send(c.alter(ap))
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /join", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.URL.Query().Get("node"))
		if err != nil {
			http.Error(w, "node: "+err.Error(), http.StatusBadRequest)
			return
		}
		b, _ := c.leaderAndISR(replica.NodeID(id)).MarshalBinary()
		w.Write(b)
	})
	// POST /elect?epoch=N makes node 1 lead again in epoch N (or the next
	// one, if N is not above the current), and tells every node.
	mux.HandleFunc("POST /elect", func(w http.ResponseWriter, r *http.Request) {
		epoch, err := strconv.Atoi(r.URL.Query().Get("epoch"))
		if err != nil {
			http.Error(w, "epoch: "+err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.leaderEpoch = max(int32(epoch), c.leaderEpoch+1)
		c.partitionEpoch++
		c.mu.Unlock()
		for _, id := range c.replicas {
			if id == leaderID {
				err = d.Receive(r.Context(), c.leaderAndISR(id))
				continue
			}
			tr.Send(c.leaderAndISR(id))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /isr", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		s := state{c.leaderEpoch, c.partitionEpoch, c.isr}
		c.mu.Unlock()
		json.NewEncoder(w).Encode(s)
	})
	// POST /produce?acks=all|1|0 appends the body, one record batch.
	mux.HandleFunc("POST /produce", func(w http.ResponseWriter, r *http.Request) {
		acks, err := parseAcks(r.URL.Query().Get("acks"))
		batch, rerr := io.ReadAll(r.Body)
		if err = errors.Join(err, rerr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := d.Produce(r.Context(), topic, partition, acks, batch)
		if err == nil {
			err = res.Err
		}
		out := produced{BaseOffset: res.BaseOffset, LastOffset: res.LastOffset, Code: replica.CodeOf(err)}
		if err != nil {
			out.Err = err.Error()
		}
		json.NewEncoder(w).Encode(out)
	})
}

func parseAcks(s string) (replica.Acks, error) {
	switch s {
	case "all", "-1":
		return replica.AcksAll, nil
	case "1":
		return replica.AcksLeader, nil
	case "0":
		return replica.AcksNone, nil
	}
	return 0, fmt.Errorf("acks %q: want all, 1 or 0", s)
}

// httpTransport posts each message, binary-encoded, to its node's
// /replica (or to node 1's /controller for the controller). Each
// destination has a queue and a goroutine, so Send never waits for the
// network; a message that cannot be delivered is dropped, which the
// protocol allows (it fetches and proposes again).
type httpTransport struct {
	peers  map[replica.NodeID]string
	client *http.Client
	queues map[replica.NodeID]chan []byte
	wg     sync.WaitGroup
}

func newHTTPTransport(peers map[replica.NodeID]string) *httpTransport {
	t := &httpTransport{peers: peers, client: &http.Client{Timeout: 2 * time.Second}, queues: map[replica.NodeID]chan []byte{}}
	for id := range peers {
		t.start(id, "http://"+peers[id]+"/replica")
	}
	t.start(replica.NoNode, "http://"+peers[leaderID]+"/controller")
	return t
}

func (t *httpTransport) start(to replica.NodeID, url string) {
	q := make(chan []byte, 1024)
	t.queues[to] = q
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for b := range q {
			resp, err := t.client.Post(url, "application/octet-stream", bytes.NewReader(b))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
}

func (t *httpTransport) Send(m replica.Message) {
	q, ok := t.queues[m.Head().To]
	if !ok {
		return
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return
	}
	select {
	case q <- b:
	default: // the node is not keeping up, or is down: drop
	}
}

func (t *httpTransport) close() {
	for _, q := range t.queues {
		close(q)
	}
	t.wg.Wait()
}
