package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// nodeConfig is what a node process is started with.
type nodeConfig struct {
	id    replica.NodeID
	dir   string                    // the node's own data directory
	peers map[replica.NodeID]string // host:port of every node, this one included
	// tick is the replicas' tick; lag is ReplicaLagTime in those ticks,
	// requestTimeout their RequestTimeout and ProduceTimeout, retryBackoff
	// their RetryBackoff (0: the replica package's defaults).
	tick           time.Duration
	lag            int
	requestTimeout int
	retryBackoff   int
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
	// the node serves Kafka clients there.
	kafka map[replica.NodeID]string
	// logLevel is the least level the node logs.
	logLevel slog.Level
}

// The files of a node's data directory.
const (
	logDir      = "log"            // the partitions' log.Dir
	raftFile    = "raft.log"       // the raft log (raftStore)
	cleanMarker = "clean-shutdown" // left by a node that stopped cleanly
)

// node is one node process: a broker (its partitions' replicas, driven
// by a replica.Driver) and a member of the raft group that replicates the
// controller's records.
type node struct {
	cfg nodeConfig
	log *slog.Logger
	dir *log.Dir
	d   *replica.Driver
	ctl *control
	out replica.Transport // the replicas' and the controller's messages to the nodes

	mu    sync.Mutex
	parts map[controller.TopicPartition]*log.Partition // replicas added to the driver
	// replicaLogs are the same logs as their replicas see them.
	replicaLogs map[controller.TopicPartition]*loggedLog
	// Metadata the control loop published and the broker loop has not
	// applied yet: the latest state of each changed partition.
	pendingTopics map[string]topicState
	// pendingComplete says pendingTopics names every topic (see
	// metadataUpdate.complete).
	pendingComplete bool
	pendingParts    map[controller.TopicPartition]*replica.LeaderAndISR
	// minISRs are the min.insync.replicas set on topics, as applyMetadata
	// last applied them (owned by it).
	minISRs map[string]int
	// pendingEpoch is the broker epoch of this incarnation's committed
	// registration, NoBrokerEpoch until the control loop publishes one.
	pendingEpoch int64
	wake         chan struct{}

	// kafka is the node as its Kafka broker's Cluster, once it serves
	// Kafka: the transaction requests between nodes go to it.
	kafka atomic.Pointer[kafkaCluster]

	// failures limits how often a failed replica's refusals are logged.
	failures rateLimit
	// offline are the replicas whose logs failed (offline.go).
	offline *offlineReplicas
	// states are the latest partition states delivered to the replicas,
	// for a replica recreated after its log failed.
	states map[controller.TopicPartition]*replica.LeaderAndISR
	// damaged are the replicas whose logs were repaired at this start
	// (offline.go's startupDamage), until they rejoin the ISR; synced are
	// the topics whose replicas the registration claims lost nothing.
	damaged map[controller.TopicPartition]*log.Damage
	synced  []string

	brokerEpoch int64 // owned by the heartbeat loop
	// incarnation is this start of the node (Kafka's incarnation ID): the
	// controller tells a retried registration from a restart by it.
	incarnation int64
}

// runNode runs a node until SIGTERM or SIGINT, or until the process that
// started it is gone.
func runNode(cfg nodeConfig) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel})).With("node", cfg.id)
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	clean, err := takeCleanMarker(cfg.dir)
	if err != nil {
		return err
	}
	// The Dir holds replicas: it coordinates nothing itself (the
	// cluster's coordinators write through replication), checks every
	// batch of a partition at its first open, and repairs damage by
	// truncation, since the leader has the records to fetch again.
	dir, err := log.OpenDir(filepath.Join(cfg.dir, logDir), log.DirOptions{Replicated: true, Logger: logger,
		Log: log.Options{ExternalHighWatermark: true, VerifyOnOpen: true, TruncateCorruption: true}})
	if err != nil {
		return err
	}
	n := newNode(cfg, logger, dir, time.Now().UnixNano())
	if n.damaged, err = startupDamage(dir); err != nil {
		dir.Close()
		return err
	}
	if n.synced, err = syncedTopics(dir, n.damaged); err != nil {
		dir.Close()
		return err
	}
	if len(n.damaged) > 0 {
		// A repaired log lacks what it may have acknowledged: the
		// node registers as after a crash, so that those replicas leave
		// every ISR and ELR until they have fetched it again.
		clean = false
	}
	err = n.run(clean)
	if cerr := dir.Close(); err == nil && cerr == nil {
		// Everything the node acknowledged is on disk and its logs are
		// closed: the next incarnation registers clean (KIP-966).
		return os.WriteFile(filepath.Join(cfg.dir, cleanMarker), nil, 0o644)
	} else if err == nil {
		err = cerr
	}
	return err
}

// newNode returns the node of one incarnation over its log directory,
// before it has a driver or a control loop.
func newNode(cfg nodeConfig, logger *slog.Logger, dir *log.Dir, incarnation int64) *node {
	return &node{cfg: cfg, log: logger, dir: dir,
		parts: map[controller.TopicPartition]*log.Partition{}, replicaLogs: map[controller.TopicPartition]*loggedLog{}, pendingTopics: map[string]topicState{}, minISRs: map[string]int{},
		pendingParts: map[controller.TopicPartition]*replica.LeaderAndISR{}, wake: make(chan struct{}, 1),
		incarnation: incarnation, offline: newOfflineReplicas(), states: map[controller.TopicPartition]*replica.LeaderAndISR{}}
}

// takeCleanMarker reports whether the previous incarnation stopped
// cleanly, and removes the marker so that a crash of this one is seen.
func takeCleanMarker(dir string) (bool, error) {
	err := os.Remove(filepath.Join(dir, cleanMarker))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()
	return true, d.Sync()
}

func (n *node) run(clean bool) error {
	cfg := n.cfg
	var voters []uint64
	for id := range cfg.peers {
		voters = append(voters, uint64(id))
	}
	slices.Sort(voters)
	store, err := openRaftStore(filepath.Join(cfg.dir, raftFile), voters)
	if err != nil {
		return err
	}
	defer store.close()
	n.ctl, err = newControl(cfg.id, store, cfg.peers, controller.Config{
		Node: cfg.id, SessionTimeout: cfg.session, MinInsyncReplicas: cfg.minISR,
		RebalanceInterval: cfg.rebalance, ImbalanceRatio: 0.1,
	}, cfg.controlTick, n.log)
	if err != nil {
		return err
	}
	// The transport outlives the loops that send through it.
	tr := newReplicaTransport(cfg.id, cfg.peers, n.ctl.leader, n.log)
	defer tr.close()
	n.out = tr
	n.ctl.dataTr = tr
	n.ctl.publish = n.update
	n.ctl.snap.every = uint64(max(cfg.snapshotEntries, 0))
	n.d, err = replica.NewDriver(replica.DriverConfig{
		Node: replica.NewNode(cfg.id), Transport: tr, TickInterval: cfg.tick,
		OnError: n.stepErrors,
	})
	if err != nil {
		return err
	}
	ln, err := loopback.Listen(cfg.peers[cfg.id])
	if err != nil {
		return err
	}

	sig, stopSig := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stopSig()
	go stopWithParent(sig, stopSig)
	// The loops run until stop; the HTTP server stops first, so that no
	// handler waits on a loop that has ended.
	loops, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() { errc <- n.d.Run(loops) })
	wg.Go(func() {
		if err := n.ctl.run(loops); err != nil {
			errc <- err
			stopSig()
		}
	})
	wg.Go(func() { n.applyMetadata(loops) })
	wg.Go(func() { n.recoverReplicas(loops) })
	// Kafka is served before the broker registers: a live broker in the
	// metadata answers Kafka clients.
	stopKafka := func() {}
	if cfg.kafka != nil {
		if stop, err := n.serveKafka(); err != nil {
			errc <- fmt.Errorf("serving Kafka: %w", err)
			stopSig()
		} else {
			stopKafka = stop
		}
	}
	beats, stopBeats := context.WithCancel(loops)
	beatsDone := make(chan struct{})
	go func() { defer close(beatsDone); n.heartbeats(beats, clean) }()

	srv := &http.Server{Handler: n.routes()}
	go srv.Serve(ln)
	n.log.Info("node started", "addr", cfg.peers[cfg.id], "clean", clean)
	<-sig.Done()

	stopBeats()
	<-beatsDone
	// Kafka clients are told NOT_LEADER_OR_FOLLOWER while leadership
	// moves away, and find the new leaders.
	n.controlledShutdown(loops)
	stopKafka()
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	stop()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
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

// update is how the control loop hands the node what the committed
// records changed; the latest state of a partition replaces an older one
// not yet applied. A registration is this node's own, and its broker
// epoch the one the replicas take, only if its incarnation is this one:
// the records may still register the node's previous life.
func (n *node) update(u metadataUpdate) {
	n.mu.Lock()
	if u.complete {
		n.pendingTopics, n.pendingComplete = map[string]topicState{}, true
	}
	maps.Copy(n.pendingTopics, u.topics)
	for _, m := range u.parts {
		n.pendingParts[controller.TopicPartition{Topic: m.Topic, Partition: m.Partition}] = m
	}
	if u.incarnation == uint64(n.incarnation) {
		n.pendingEpoch = max(n.pendingEpoch, u.brokerEpoch)
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// applyMetadata creates the topics and replicas the committed records
// name and tells each replica its partition's state (Kafka's
// LeaderAndIsr, or a KRaft broker's metadata listener). The replicas take
// the broker epoch of the node's committed registration before the
// states published with it, and refuse a state stamped with another
// (KIP-380): one meant for the node's previous life, or published before
// this life's registration was committed. Fetches and ISR proposals carry
// that epoch (KIP-903).
func (n *node) applyMetadata(ctx context.Context) {
	registered := replica.NoBrokerEpoch
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		}
		n.mu.Lock()
		topics, complete, parts, epoch := n.pendingTopics, n.pendingComplete, n.pendingParts, n.pendingEpoch
		n.pendingTopics, n.pendingComplete, n.pendingParts = map[string]topicState{}, false, map[controller.TopicPartition]*replica.LeaderAndISR{}
		n.mu.Unlock()
		if epoch != registered {
			if err := n.d.SetBrokerEpoch(ctx, epoch); err != nil {
				n.log.Error("broker epoch", "epoch", epoch, "err", err)
				continue
			}
			registered = epoch
			n.log.Info("registration applied", "epoch", epoch)
		}
		if complete {
			n.removeStrays(ctx, topics)
		}
		for _, name := range slices.Sorted(maps.Keys(topics)) {
			if err := n.applyTopic(ctx, name, topics[name]); err != nil {
				n.log.Error("applying a topic", "topic", name, "err", err)
			}
		}
		for _, tp := range slices.SortedFunc(maps.Keys(parts), compareTP) {
			if err := n.deliver(ctx, tp, parts[tp]); err != nil {
				n.log.Error("applying metadata", "partition", tp, "err", err)
			}
		}
	}
}

func (n *node) deliver(ctx context.Context, tp controller.TopicPartition, m *replica.LeaderAndISR) error {
	n.mu.Lock()
	_, have := n.parts[tp]
	n.states[tp] = m
	n.mu.Unlock()
	if !have {
		if !slices.Contains(m.Replicas, n.cfg.id) {
			return nil
		}
		plog, err := n.dir.Partition(tp.Topic, tp.Partition)
		if err != nil {
			return err
		}
		rlog, err := n.addReplica(ctx, tp, plog)
		if err != nil {
			return err
		}
		n.mu.Lock()
		n.parts[tp], n.replicaLogs[tp] = plog, rlog
		n.mu.Unlock()
	}
	if d := n.damaged[tp]; d != nil && slices.Contains(m.ISR, n.cfg.id) {
		n.clearDamage(tp)
	}
	return n.d.Receive(ctx, m)
}

// addReplica adds the replica of tp over plog to the driver.
func (n *node) addReplica(ctx context.Context, tp controller.TopicPartition, plog *log.Partition) (*loggedLog, error) {
	rlog := newLoggedLog(plog, tp, n.log)
	rlog.onFail = n.replicaFailed
	err := n.d.AddPartition(ctx, replica.Config{
		Topic: tp.Topic, Partition: tp.Partition, Log: rlog,
		MinInsyncReplicas: n.minISR(tp.Topic),
		ReplicaLagTime:    n.cfg.lag,
		RequestTimeout:    n.cfg.requestTimeout,
		ProduceTimeout:    n.cfg.requestTimeout,
		RetryBackoff:      n.cfg.retryBackoff,
	})
	return rlog, err
}

// clearDamage forgets a repaired replica's damage once the controller has
// it in the ISR again: it fetched what the repair cut.
func (n *node) clearDamage(tp controller.TopicPartition) {
	plog := n.partition(tp)
	if plog == nil {
		return
	}
	if err := plog.ClearDamage(); err != nil {
		n.log.Error("clearing a repaired replica's damage", "partition", tp, "err", err)
		return
	}
	delete(n.damaged, tp)
	n.log.Warn("repaired replica rejoined the ISR", "partition", tp)
}

// applyTopic makes the node's log.Dir hold a topic as the committed
// records leave it (a KRaft broker's metadata listener): created with the
// controller's id and configs, its configs changed (Dir.AlterTopicConfig:
// at once on the open partitions), or deleted with its replicas. A topic
// the Dir holds under another id was deleted and created again under its
// name: its replicas go first.
func (n *node) applyTopic(ctx context.Context, name string, t topicState) error {
	delete(n.minISRs, name)
	if t.removed {
		return n.removeTopic(ctx, name)
	}
	if m, err := strconv.Atoi(t.configs[minISRConfig]); err == nil {
		n.minISRs[name] = m
	}
	cfg, err := broker.LogTopicConfig(replicaTopicConfig(name, t.partitions), t.configs)
	if err != nil {
		return err
	}
	id, err := n.dir.TopicID(name)
	if err == nil && id != t.id && !internal(name) {
		if err := n.removeTopic(ctx, name); err != nil {
			return err
		}
		err = log.ErrUnknownTopic
	}
	if errors.Is(err, log.ErrUnknownTopic) {
		return n.dir.CreateTopicWithID(name, t.id, cfg)
	}
	if err != nil {
		return err
	}
	_, err = n.dir.AlterTopicConfig(name, func(c *log.TopicConfig) { *c = cfg })
	return err
}

// removeTopic takes a deleted topic's replicas off the node and deletes
// their logs (Kafka's StopReplica with deletion).
func (n *node) removeTopic(ctx context.Context, name string) error {
	n.mu.Lock()
	var gone []controller.TopicPartition
	for tp := range n.parts {
		if tp.Topic == name {
			gone = append(gone, tp)
			delete(n.parts, tp)
			delete(n.replicaLogs, tp)
		}
	}
	n.mu.Unlock()
	for _, tp := range gone {
		if _, err := n.d.RemovePartition(ctx, tp.Topic, tp.Partition); err != nil {
			return err
		}
	}
	err := n.dir.DeleteTopic(name)
	if errors.Is(err, log.ErrUnknownTopic) {
		return nil
	}
	if err == nil {
		n.log.Info("topic deleted", "topic", name)
	}
	return err
}

// removeStrays deletes the topics of the node's log.Dir that the state of
// a snapshot from the leader (every topic there is) does not hold.
func (n *node) removeStrays(ctx context.Context, topics map[string]topicState) {
	names, err := n.dir.Topics()
	if err != nil {
		n.log.Error("listing topics", "err", err)
		return
	}
	for _, name := range names {
		if t, ok := topics[name]; (!ok || t.removed) && !internal(name) {
			if err := n.removeTopic(ctx, name); err != nil {
				n.log.Error("deleting a topic", "topic", name, "err", err)
			}
		}
	}
}

// internal says whether a topic is a coordinator's: the node's group
// service creates the offsets topic in its Dir, under an id of its own,
// before the controller may have it (kafka_groups.go), and clients cannot
// delete it. Its replicas keep the Dir's id.
func internal(name string) bool {
	return name == group.OffsetsTopic || name == log.TransactionStateTopic
}

// minISR is the topic's min.insync.replicas, or the cluster's.
func (n *node) minISR(topic string) int {
	if m, ok := n.minISRs[topic]; ok {
		return m
	}
	return n.cfg.minISR
}

// partition returns a replica's log, or nil.
func (n *node) partition(tp controller.TopicPartition) *log.Partition {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[tp]
}

// heartbeats registers the broker with the active controller and renews
// its session, registering again if the controller no longer knows this
// incarnation's epoch.
func (n *node) heartbeats(ctx context.Context, clean bool) {
	cl := n.controllerClient()
	n.brokerEpoch = -1
	t := time.NewTicker(n.cfg.heartbeat)
	defer t.Stop()
	for {
		offline, _ := n.offline.list()
		if n.brokerEpoch < 0 {
			var rep reply
			q := fmt.Sprintf("/controller/register?node=%d&incarnation=%d&clean=%t&synced=%s&offline=%s", n.cfg.id, n.incarnation, clean,
				url.QueryEscape(strings.Join(n.synced, ",")), url.QueryEscape(formatTPs(offline)))
			if err := cl.call(ctx, q, nil, &rep); err == nil {
				n.brokerEpoch = rep.BrokerEpoch
				// The replicas take the epoch once this node has applied
				// the registration's record (applyMetadata).
				n.log.Info("registered", "epoch", rep.BrokerEpoch, "clean", clean, "synced", len(n.synced), "offline", len(offline))
			}
		} else {
			q := fmt.Sprintf("/controller/heartbeat?node=%d&epoch=%d&offline=%s", n.cfg.id, n.brokerEpoch, url.QueryEscape(formatTPs(offline)))
			err := cl.call(ctx, q, nil, nil)
			if errors.Is(err, replica.ErrStaleBrokerEpoch) || errors.Is(err, replica.ErrBrokerNotRegistered) {
				n.brokerEpoch = -1
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.offline.changed:
		}
	}
}

// controlledShutdown asks the controller to move leadership away from the
// node (Kafka's controlled shutdown) and waits, heartbeating, until it
// leads nothing, at most a few seconds; a node leading the raft group then
// hands that over too, so that the controller moves without an election
// timeout.
func (n *node) controlledShutdown(ctx context.Context) {
	if n.brokerEpoch < 0 {
		return
	}
	cl := n.controllerClient()
	deadline, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q := fmt.Sprintf("?node=%d&epoch=%d", n.cfg.id, n.brokerEpoch)
	if err := cl.call(deadline, "/controller/shutdown"+q, nil, nil); err != nil {
		n.log.Warn("controlled shutdown", "err", err)
		return
	}
	for deadline.Err() == nil {
		var rep reply
		if err := cl.call(deadline, "/controller/heartbeat"+q, nil, &rep); err == nil && rep.CanStop {
			n.log.Info("controlled shutdown: leads no partition")
			break
		}
		time.Sleep(n.cfg.heartbeat)
	}
	n.ctl.transferLeadership(deadline, replica.NoNode)
}

// controllerClient calls the active controller, found as this node's raft
// view of the leader.
func (n *node) controllerClient() *client {
	return &client{http: &http.Client{Timeout: 5 * time.Second}, peers: n.cfg.peers, lead: n.ctl.leader,
		controller: func(context.Context) (replica.NodeID, error) {
			if l := n.ctl.leader(); l != replica.NoNode && l != 0 {
				return l, nil
			}
			return 0, errNotController
		}}
}
