package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/examples/raftlog"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/replica"
)

// nodeConfig is what a node process is started with.
type nodeConfig struct {
	id    replica.NodeID
	dir   string                    // the node's own data directory
	peers map[replica.NodeID]string // host:port of every node, this one included
	// tick is the replicas' tick; lag their ReplicaLagTime, requestTimeout
	// their RequestTimeout and ProduceTimeout.
	tick, lag, requestTimeout time.Duration
	// controlTick is raft's and the controller's tick (raft's election
	// timeout is 10 to 20 of them); session is the controller's broker
	// session timeout in them, heartbeat how often brokers beat.
	controlTick time.Duration
	session     int
	heartbeat   time.Duration
	minISR      int
	// rebalance is the controller's RebalanceInterval in control ticks (0: never).
	rebalance int
	// snapshotEntries is how many applied raft entries pass between
	// snapshots (0: never).
	snapshotEntries int
	// kafka, if set, is every node's Kafka address, this one's included:
	// the node serves Kafka clients there; kafkaSASL, if set, every
	// node's SASL/SCRAM listener (SASL_PLAINTEXT), its clients
	// authenticating by the credentials the cluster's controller keeps.
	kafka, kafkaSASL map[replica.NodeID]string
	// kafkaUsers are users whose credentials the brokers set if missing
	// (-kafka-users); kafkaAuthorize checks every Kafka request against
	// the cluster's ACLs, which allow kafkaSuperUsers everything.
	kafkaUsers      map[string]string
	kafkaAuthorize  bool
	kafkaSuperUsers []string
	// logLevel is the least level the node logs.
	logLevel slog.Level
	// tls, if set, is the mutual TLS of the nodes' HTTP.
	tls *peerTLS
}

// raftDir is where a node keeps its raft log, beside the cluster.Node's
// own files in its data directory.
const raftDir = "raft"

// node is one node process: a cluster.Node over the HTTP transport and a
// raft metadata log (examples/raftlog), and the Kafka broker that
// translates Kafka's requests onto it.
type node struct {
	cfg  nodeConfig
	log  *slog.Logger
	n    *cluster.Node
	raft *raftlog.Log
}

// runNode runs a node until SIGTERM or SIGINT, or until the process that
// started it is gone.
func runNode(cfg nodeConfig) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel})).With("node", cfg.id)
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	nd := &node{cfg: cfg, log: logger}
	// The transports outlive the node and the raft log, which send
	// through them until they close.
	raftOut := newPoster(cfg.peers, cfg.tls)
	defer raftOut.close()
	tr := newHTTPTransport(cfg.peers, cfg.tls)
	voters := slices.Sorted(maps.Keys(cfg.peers))
	var err error
	nd.raft, err = raftlog.Open(raftlog.Config{
		ID: cfg.id, Voters: voters, Dir: filepath.Join(cfg.dir, raftDir), Tick: cfg.controlTick, Logger: logger,
		Send: func(to replica.NodeID, msg []byte) { raftOut.send(to, cfg.tls.url(cfg.peers[to], "/raft"), msg) },
	})
	if err != nil {
		return err
	}
	defer nd.raft.Close()
	nd.n, err = cluster.New(cluster.Options{
		ID: cfg.id, Dir: cfg.dir, Transport: tr, Metadata: nd.raft, Logger: logger,
		Tick: cfg.tick, ReplicaLagTime: cfg.lag, RequestTimeout: cfg.requestTimeout,
		ControlTick: cfg.controlTick, SessionTimeout: time.Duration(cfg.session) * cfg.controlTick, Heartbeat: cfg.heartbeat,
		MinInsyncReplicas: cfg.minISR, RebalanceInterval: time.Duration(cfg.rebalance) * cfg.controlTick,
		SnapshotEntries: snapshotEntries(cfg.snapshotEntries), TopicConfig: broker.LogTopicConfig,
		OffsetsPartitions: offsetsPartitions, TransactionPartitions: txnStatePartitions,
	})
	if err != nil {
		return err
	}
	ln, err := loopback.Listen(cfg.peers[cfg.id])
	if err != nil {
		return errors.Join(err, nd.n.Close())
	}
	// A peer refused at the TLS handshake is the node's debug line, not
	// net/http's own print.
	srv := &http.Server{Handler: nd.routes(), ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
	go srv.Serve(cfg.tls.listen(ln))

	sig, stopSig := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stopSig()
	go stopWithParent(sig, stopSig)
	stopKafka := func() {}
	if cfg.kafka != nil {
		if stopKafka, err = nd.serveKafka(); err != nil {
			stopSig()
			err = fmt.Errorf("serving Kafka: %w", err)
			stopKafka = func() {}
		}
	}
	logger.Info("node started", "addr", cfg.peers[cfg.id])
	<-sig.Done()

	stopKafka()
	// Close moves leadership away first (controlled shutdown): the HTTP
	// server still serves, for the controller's answers and raft.
	cerr := nd.n.Close()
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	return errors.Join(err, cerr)
}

// snapshotEntries is the node's -snapshot-entries as Config wants it:
// 0 (never) is negative there.
func snapshotEntries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// stopWithParent stops the node when the process that started it is gone
// (killed, or a test binary that timed out), rather than leaving an orphan
// that holds its port and data directory.
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
