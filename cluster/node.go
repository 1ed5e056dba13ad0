package cluster

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/vfs"
)

// Options configure a Node. ID, Dir, Transport and Metadata are required;
// the zero value of every other field is its default.
type Options struct {
	// ID is the node's id, unique in the cluster and the same across its
	// restarts; positive.
	ID replica.NodeID
	// Dir is the node's data directory: the partitions' log.Dir and the
	// clean-shutdown marker live in it.
	Dir string
	// FS is the file system Dir is on; default vfs.Default.
	FS vfs.FS
	// Transport carries the node's messages to the other nodes.
	Transport Transport
	// Metadata is the node's replica of the controller's records. The node
	// reads it from New until Close; the application opens it before New
	// and closes it after Close.
	Metadata MetadataLog
	// Logger receives the node's log; default slog.Default() with the node
	// id.
	Logger *slog.Logger
	// Rand draws the node's random choices (topic ids, where a topic's
	// first leader goes, proposal nonces); default a random seed.
	Rand *rand.Rand
	// Incarnation identifies this start of the node to the controller
	// (Kafka's incarnation id): it must grow with every start. Default
	// the time of New in nanoseconds.
	Incarnation uint64

	// Tick is how often the replicas tick; default 100 ms.
	Tick time.Duration
	// ReplicaLagTime is how long a follower may go without catching up
	// before it leaves the ISR (replica.lag.time.max.ms); default 30 s.
	ReplicaLagTime time.Duration
	// RequestTimeout is how long a follower's fetch or a leader's ISR
	// change goes unanswered before it is sent again, and how long an
	// acks=all produce waits (replica.socket.timeout.ms,
	// request.timeout.ms); default 30 s.
	RequestTimeout time.Duration
	// RetryBackoff is how long a follower waits to fetch again after an
	// error; default 100 ms, so that a follower answered
	// NOT_LEADER_OR_FOLLOWER by a leader that has not applied the new
	// metadata yet fetches again soon (Kafka's replica.fetch.backoff.ms
	// of 1 s would add a second to every failover).
	RetryBackoff time.Duration

	// ControlTick is how often the active controller ticks; default 100 ms.
	ControlTick time.Duration
	// SessionTimeout is how long a broker may go without a heartbeat
	// before the controller fences it (broker.session.timeout.ms);
	// default 3 s.
	SessionTimeout time.Duration
	// Heartbeat is how often the node heartbeats to the controller
	// (broker.heartbeat.interval.ms); default 500 ms.
	Heartbeat time.Duration
	// MinInsyncReplicas is the cluster's min.insync.replicas, for topics
	// that set none; default 1, Kafka's.
	MinInsyncReplicas int
	// RebalanceInterval is how often the controller gives partitions back
	// to their preferred leaders (leader.imbalance.check.interval.seconds
	// with auto.leader.rebalance.enable); 0: never.
	RebalanceInterval time.Duration
	// SnapshotEntries is how many applied metadata entries pass between
	// snapshots handed to the metadata log; default 1000; negative: never.
	SnapshotEntries int

	// Groups configures the node's group coordinator (session and
	// rebalance timeouts, offset retention, ...); its Topic, Partitions,
	// Unloaded, Append and AppendBatch are the node's own.
	Groups group.ServiceOptions
	// OffsetsPartitions is the partition count of the offsets topic
	// (offsets.topic.num.partitions), the same on every node; default 6,
	// where Kafka's is 50: each partition costs its replicas' fetches even
	// when idle.
	OffsetsPartitions int32
	// InternalReplicationFactor is the replication factor of the offsets
	// and transaction state topics (offsets.topic.replication.factor);
	// default 3, or the number of voters a MetadataLog with fewer names
	// (MetadataVoters). The controller creates them once that many brokers
	// are live.
	InternalReplicationFactor int32

	// Transactions configures the transaction coordinator's transactional
	// ids (their timeouts and expiry); its AllocateProducerID and
	// CoordinatorEpoch are the node's own.
	Transactions idempotence.TxnCoordinatorConfig
	// TransactionPartitions is the partition count of the transaction
	// state topic (transaction.state.log.num.partitions), the same on
	// every node; default 3, where Kafka's is 50.
	TransactionPartitions int32

	// MaxIndexBytes is the size a segment's offset and time indexes are
	// preallocated to, and the segment rolls once one is full
	// (log.index.size.max.bytes, log.Options.MaxIndexBytes); default
	// 10 MiB, Kafka's. A node with many small partitions, or a test on
	// an in-memory disk, takes a smaller one.
	MaxIndexBytes int

	// TopicConfig maps a topic's configs by Kafka name onto its replicas'
	// log.TopicConfig, from base (the node's defaults for the topic);
	// default: base, with only min.insync.replicas read (by the node).
	TopicConfig func(base log.TopicConfig, configs map[string]string) (log.TopicConfig, error)

	// stepErrors, if set, hears what the replicas refused too (tests).
	stepErrors func(error)
	// How often failed replicas are looked at, and how long one waits to
	// be recovered (tests shorten them).
	recoverEvery, retryFailedAfter time.Duration
}

// ErrInvalidConfig means an Options field is out of range; the message
// names it.
var ErrInvalidConfig = errors.New("cluster: invalid config")

// ErrClosed is returned by a Node that was closed.
var ErrClosed = errors.New("cluster: node closed")

func (cfg Options) withDefaults() (Options, error) {
	if cfg.ID <= 0 {
		return cfg, fmt.Errorf("%w: ID %d, must be positive", ErrInvalidConfig, cfg.ID)
	}
	if cfg.Dir == "" || cfg.Transport == nil || cfg.Metadata == nil {
		return cfg, fmt.Errorf("%w: Dir, Transport and Metadata are required", ErrInvalidConfig)
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default().With("node", cfg.ID)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(time.Now().UnixNano())
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"Tick", &cfg.Tick, 100 * time.Millisecond},
		{"ReplicaLagTime", &cfg.ReplicaLagTime, 30 * time.Second},
		{"RequestTimeout", &cfg.RequestTimeout, 30 * time.Second},
		{"RetryBackoff", &cfg.RetryBackoff, 100 * time.Millisecond},
		{"ControlTick", &cfg.ControlTick, 100 * time.Millisecond},
		{"SessionTimeout", &cfg.SessionTimeout, 3 * time.Second},
		{"Heartbeat", &cfg.Heartbeat, 500 * time.Millisecond},
	}
	for _, f := range durations {
		if *f.d < 0 {
			return cfg, fmt.Errorf("%w: %s %v, must not be negative", ErrInvalidConfig, f.name, *f.d)
		}
		if *f.d == 0 {
			*f.d = f.def
		}
	}
	if cfg.RebalanceInterval < 0 {
		return cfg, fmt.Errorf("%w: RebalanceInterval %v, must not be negative", ErrInvalidConfig, cfg.RebalanceInterval)
	}
	if cfg.MinInsyncReplicas < 0 {
		return cfg, fmt.Errorf("%w: MinInsyncReplicas %d, must not be negative", ErrInvalidConfig, cfg.MinInsyncReplicas)
	}
	if cfg.MinInsyncReplicas == 0 {
		cfg.MinInsyncReplicas = 1
	}
	if cfg.SnapshotEntries == 0 {
		cfg.SnapshotEntries = 1000
	}
	if cfg.OffsetsPartitions < 0 || cfg.TransactionPartitions < 0 || cfg.InternalReplicationFactor < 0 {
		return cfg, fmt.Errorf("%w: OffsetsPartitions %d, TransactionPartitions %d and InternalReplicationFactor %d must not be negative",
			ErrInvalidConfig, cfg.OffsetsPartitions, cfg.TransactionPartitions, cfg.InternalReplicationFactor)
	}
	if cfg.TransactionPartitions == 0 {
		cfg.TransactionPartitions = 3
	}
	if cfg.OffsetsPartitions == 0 {
		cfg.OffsetsPartitions = 6
	}
	if cfg.InternalReplicationFactor == 0 {
		cfg.InternalReplicationFactor = 3
		if v, ok := cfg.Metadata.(MetadataVoters); ok {
			cfg.InternalReplicationFactor = int32(min(3, max(len(v.Voters()), 1)))
		}
	}
	if cfg.recoverEvery == 0 {
		cfg.recoverEvery, cfg.retryFailedAfter = recoverEvery, retryFailedAfter
	}
	if cfg.TopicConfig == nil {
		cfg.TopicConfig = func(base log.TopicConfig, _ map[string]string) (log.TopicConfig, error) { return base, nil }
	}
	return cfg, nil
}

// ticks is d in ticks of tick, at least one.
func ticks(d, tick time.Duration) int { return max(int((d+tick-1)/tick), 1) }

// The files of a node's data directory.
const (
	logDir      = "log"            // the partitions' log.Dir
	cleanMarker = "clean-shutdown" // left by a node that stopped cleanly
)

// Node is one broker of a Strand cluster: the replicas of its partitions
// over its log.Dir, driven by a replica.Driver; the active controller
// when its metadata log leads; and its registration with the controller,
// renewed by heartbeats. Its goroutines run from New until Close.
type Node struct {
	cfg Options
	log *slog.Logger
	dir *log.Dir
	d   *replica.Driver
	ctl *control
	out *outboxes
	// groups and txns are the group and transaction coordinators;
	// stopCoordinators stops their following of their partitions' leaders.
	groups           *group.Service
	txns             *idempotence.TxnRuntime
	stopCoordinators context.CancelFunc
	coordinators     sync.WaitGroup
	stop             context.CancelFunc
	wg               sync.WaitGroup
	// beats stops the heartbeat loop before the controlled shutdown.
	beats     context.CancelFunc
	beatsDone chan struct{}
	closeOnce sync.Once
	closeErr  error
	// closing is closed when Close begins: a request still retrying
	// towards a coordinator ends with ErrClosed.
	closing chan struct{}

	mu    sync.Mutex
	parts map[controller.TopicPartition]*log.Partition // replicas added to the driver
	// replicaLogs are the same logs as their replicas see them.
	replicaLogs map[controller.TopicPartition]*replicaLog
	// Metadata the control loop published and the metadata loop has not
	// applied yet: the latest state of each changed partition.
	pendingTopics   map[string]topicState
	pendingComplete bool
	pendingParts    map[controller.TopicPartition]*replica.LeaderAndISR
	// pendingEpoch is the broker epoch of this incarnation's committed
	// registration, NoBrokerEpoch until the control loop publishes one.
	pendingEpoch int64
	wake         chan struct{}
	// minISRs are the min.insync.replicas set on topics, as applyMetadata
	// last applied them.
	minISRs map[string]int
	// states are the latest partition states delivered to the replicas,
	// for a replica recreated after its log failed.
	states map[controller.TopicPartition]*replica.LeaderAndISR
	// offline are the replicas whose logs failed (offline.go).
	offline *offlineReplicas
	// damaged are the replicas whose logs were repaired at this start,
	// until they rejoin the ISR; synced are the topics whose replicas the
	// registration claims lost nothing.
	damaged map[controller.TopicPartition]*log.Damage
	synced  []string
	clean   bool
	// held are the topics the data directory had at this start, by id,
	// if it is the directory the node ran on before (nil for a new one);
	// see registerClaims.
	held map[string][16]byte

	brokerEpoch int64 // owned by the heartbeat loop until Close
	// registered is the broker epoch of this life's registration once the
	// controller answered it, NoBrokerEpoch before.
	registered atomic.Int64
	failures   rateLimit
}

// New opens the node's data directory and starts the node: it applies its
// metadata log, registers with the active controller, and serves its
// replicas. A node whose previous run did not end with Close registers as
// after a crash (KIP-966: its replicas leave every ISR and ELR until they
// catch up), as does one whose logs needed repair.
func New(cfg Options) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	// Each directory made durable in its parent: a data directory whose
	// name a power cut takes away loses the node's logs whole.
	if err := vfs.MkdirAll(cfg.FS, cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	clean, err := takeCleanMarker(cfg.FS, cfg.Dir)
	if err != nil {
		return nil, err
	}
	// The Dir holds replicas: it coordinates nothing itself (the
	// cluster's coordinators write through replication), checks every
	// batch of a partition at its first open, and repairs damage by
	// truncation, since the leader has the records to fetch again.
	_, statErr := cfg.FS.Stat(filepath.Join(cfg.Dir, logDir))
	ranBefore := statErr == nil
	dir, err := log.OpenDir(filepath.Join(cfg.Dir, logDir), log.DirOptions{Replicated: true, Logger: logger,
		Log: log.Options{FS: cfg.FS, MaxIndexBytes: cfg.MaxIndexBytes, ExternalHighWatermark: true, VerifyOnOpen: true, TruncateCorruption: true}})
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, log: logger, dir: dir, clean: clean, closing: make(chan struct{}),
		parts: map[controller.TopicPartition]*log.Partition{}, replicaLogs: map[controller.TopicPartition]*replicaLog{},
		pendingTopics: map[string]topicState{}, pendingParts: map[controller.TopicPartition]*replica.LeaderAndISR{},
		pendingEpoch: replica.NoBrokerEpoch, wake: make(chan struct{}, 1), minISRs: map[string]int{},
		states: map[controller.TopicPartition]*replica.LeaderAndISR{}, offline: newOfflineReplicas(),
	}
	n.registered.Store(replica.NoBrokerEpoch)
	if n.damaged, err = startupDamage(dir); err == nil {
		n.synced, err = syncedTopics(dir, n.damaged)
	}
	if err == nil && ranBefore {
		n.held, err = heldTopics(dir)
	}
	if err != nil {
		dir.Close()
		return nil, err
	}
	if len(n.damaged) > 0 {
		// A repaired log lacks what it may have acknowledged: the node
		// registers as after a crash, so that those replicas leave every
		// ISR and ELR until they have fetched it again.
		n.clean = false
	}
	n.ctl = newControl(cfg.ID, cfg.Metadata, controller.Config{
		Node: cfg.ID, SessionTimeoutTicks: ticks(cfg.SessionTimeout, cfg.ControlTick), MinInsyncReplicas: cfg.MinInsyncReplicas,
		RebalanceIntervalTicks: rebalanceTicks(cfg.RebalanceInterval, cfg.ControlTick), ImbalanceRatio: 0.1,
	}, cfg.ControlTick, cfg.Rand, logger)
	n.out = newOutboxes(n)
	n.ctl.send = n.send
	n.ctl.publish = n.update
	if cfg.SnapshotEntries > 0 {
		n.ctl.snapshotEvery = uint64(cfg.SnapshotEntries)
	}
	n.d, err = replica.NewDriver(replica.DriverOptions{
		Node: replica.NewNode(cfg.ID), Transport: transportFunc(n.send), TickInterval: cfg.Tick, OnError: n.stepErrors,
	})
	if err != nil {
		dir.Close()
		return nil, err
	}
	if n.groups, err = n.openGroups(); err != nil {
		dir.Close()
		return nil, err
	}
	if n.txns, err = n.openTxns(); err != nil {
		n.groups.Close()
		dir.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	n.stop = stop
	n.wg.Go(func() {
		if err := n.d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("replica driver stopped", "err", err)
		}
	})
	n.wg.Go(func() {
		if err := n.ctl.run(ctx); err != nil {
			logger.Error("control loop stopped", "err", err)
		}
	})
	n.wg.Go(func() { n.applyMetadata(ctx) })
	n.wg.Go(func() { n.recoverReplicas(ctx) })
	coordinators, stopCoordinators := context.WithCancel(ctx)
	n.stopCoordinators = stopCoordinators
	n.coordinators.Go(func() { n.followLeaders(coordinators, group.OffsetsTopic, n.cfg.OffsetsPartitions, n.groups) })
	n.coordinators.Go(func() {
		n.followLeaders(coordinators, log.TransactionStateTopic, n.cfg.TransactionPartitions, n.txns)
	})
	n.coordinators.Go(func() { n.tickTxns(coordinators) })
	beats, stopBeats := context.WithCancel(ctx)
	n.beats, n.beatsDone = stopBeats, make(chan struct{})
	go func() { defer close(n.beatsDone); n.heartbeats(beats) }()
	logger.Info("node started", "clean", n.clean, "damaged", len(n.damaged))
	return n, nil
}

func rebalanceTicks(d, tick time.Duration) int {
	if d == 0 {
		return 0
	}
	return ticks(d, tick)
}

// transportFunc is the replica driver's Transport: the node's send.
type transportFunc func(replica.Message)

func (f transportFunc) Send(m replica.Message) { f(m) }

// send queues a replica or controller message in its destination's
// outbox; a Batch goes message by message, so that what it carries
// coalesces with what waits already. One addressed to the controller (To
// NoNode) goes to the metadata log's leader.
func (n *Node) send(m replica.Message) {
	if b, ok := m.(*replica.Envelope); ok {
		for _, m := range b.Messages {
			n.out.put(m)
		}
		return
	}
	n.out.put(m)
}

// Receive hands the node a message another node's Transport.Send
// carried. It waits only while the loop the message is for is busy, and
// fails if that loop did not take it (the node is closing): the sender
// sends it again. Bytes that do not decode, and a partition state, are
// refused with ErrBadRequest: a node takes partition states from the
// controller's committed records only, stamped with its broker epoch,
// and one from a peer would get round KIP-380.
func (n *Node) Receive(ctx context.Context, msg []byte) error {
	m, err := replica.Decode(msg)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	msgs := []replica.Message{m}
	if b, ok := m.(*replica.Envelope); ok {
		msgs = b.Messages
	}
	known := msgs[:0:0]
	for _, m := range msgs {
		switch m := m.(type) {
		case *replica.LeaderAndISR:
			return fmt.Errorf("%w: partition states come from the controller's committed records, not from peers", ErrBadRequest)
		case *replica.Fetch:
			if n.partition(controller.TopicPartition{Topic: m.Topic, Partition: m.Partition}) == nil {
				n.unknownPartition(m)
				continue
			}
		}
		known = append(known, m)
	}
	switch {
	case len(known) == 0:
		return nil
	case len(known) < len(msgs):
		m = &replica.Envelope{Header: *m.Head(), Messages: known}
	}
	return n.receive(ctx, m)
}

// unknownPartition answers a fetch for a partition the node has no
// replica of (it has not applied the topic's metadata yet, or deleted it)
// UNKNOWN_TOPIC_OR_PARTITION, as a Kafka broker answers it, rather than
// leave the follower to send it again after its RequestTimeout: the
// follower backs off and fetches again.
func (n *Node) unknownPartition(f *replica.Fetch) {
	n.send(&replica.FetchResponse{
		Header: replica.Header{From: f.To, To: f.From, Topic: f.Topic, Partition: f.Partition},
		ID:     f.ID, Err: replica.ErrUnknownTopicOrPartition, Leader: replica.NoNode, LeaderEpoch: f.CurrentLeaderEpoch,
		FetchOffset: f.FetchOffset, DivergingEpoch: -1, DivergingEndOffset: -1,
	})
}

// receive steps a message: ISR changes to the controller, the rest to
// the replicas (a Batch split so).
func (n *Node) receive(ctx context.Context, m replica.Message) error {
	b, ok := m.(*replica.Envelope)
	if !ok {
		if ap, ok := m.(*replica.AlterPartition); ok {
			return n.alterPartition(ctx, ap)
		}
		return n.d.Receive(ctx, m)
	}
	rest := b.Messages[:0:0]
	for _, m := range b.Messages {
		if ap, ok := m.(*replica.AlterPartition); ok {
			if err := n.alterPartition(ctx, ap); err != nil {
				return err
			}
		} else {
			rest = append(rest, m)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	b.Messages = rest
	return n.d.Receive(ctx, b)
}

// alterPartition hands a leader's ISR change to the active controller.
func (n *Node) alterPartition(ctx context.Context, m *replica.AlterPartition) error {
	return n.ctl.do(ctx, func() {
		n.ctl.decide(func(c *controller.Controller) error { return c.AlterPartition(m) }, func(err error) {
			if err != nil {
				n.log.Debug("alter partition", "partition", fmt.Sprintf("%s-%d", m.Topic, m.Partition), "err", err)
			}
		})
	})
}

// Serve answers a request another node's Transport.Call carried; its
// answer is bytes for the Transport to carry back. Only bytes that do not
// decode are an error: a request refused is an answer too.
func (n *Node) Serve(ctx context.Context, req []byte) ([]byte, error) {
	r, err := decodeRequest(req)
	if err != nil {
		return nil, err
	}
	a := &answer{}
	switch r := r.(type) {
	case controllerRequest:
		a, err = n.decide(ctx, r)
	case nodeRequest:
		err = r.serve(ctx, n)
	case dataRequest:
		a.Payload = r.answer(ctx, n)
	}
	return encodeAnswer(a, err), nil
}

// decide has the active controller, which must be on this node, decide r,
// and returns once what it decided is committed.
func (n *Node) decide(ctx context.Context, r controllerRequest) (*answer, error) {
	type result struct {
		a   *answer
		err error
	}
	done := make(chan result, 1)
	err := n.ctl.do(ctx, func() {
		a := &answer{}
		n.ctl.decide(func(c *controller.Controller) error { return r.decide(c, n.ctl.rng, a) }, func(err error) {
			done <- result{a, err}
		})
	})
	if err != nil {
		return &answer{}, err
	}
	select {
	case res := <-done:
		return res.a, res.err
	case <-ctx.Done():
		return &answer{}, fmt.Errorf("%w: %w", replica.ErrRequestTimedOut, ctx.Err())
	}
}

// callController sends r to the active controller, found as the metadata
// log's leader, and retries while there is none or it moves, until ctx
// ends.
func (n *Node) callController(ctx context.Context, r controllerRequest) (*answer, error) {
	backoff := n.cfg.ControlTick
	for {
		a, err := n.callControllerOnce(ctx, r)
		if !errors.Is(err, replica.ErrNotController) {
			return a, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

func (n *Node) callControllerOnce(ctx context.Context, r controllerRequest) (*answer, error) {
	to := n.ctl.leader()
	switch to {
	case replica.NoNode:
		return nil, errNotController
	case n.cfg.ID:
		return n.decide(ctx, r)
	}
	a, err := n.call(ctx, to, r)
	if errors.Is(err, ErrUnreachable) {
		// The controller's node is down or cut off: another takes over.
		return nil, fmt.Errorf("%w: %w", replica.ErrNotController, err)
	}
	return a, err
}

// call sends r to another node and returns its answer.
func (n *Node) call(ctx context.Context, to replica.NodeID, r request) (*answer, error) {
	b, err := n.cfg.Transport.Call(ctx, to, encodeRequest(r))
	if err != nil {
		return nil, fmt.Errorf("%w: calling node %d: %w", ErrUnreachable, to, err)
	}
	return decodeAnswer(b)
}

// update is how the control loop hands the node what the committed
// records changed; the latest state of a partition replaces an older one
// not yet applied. A registration is this node's own, and its broker
// epoch the one the replicas take, only if its incarnation is this one:
// the records may still register the node's previous life.
func (n *Node) update(u metadataUpdate) {
	n.mu.Lock()
	if u.complete {
		n.pendingTopics, n.pendingComplete = map[string]topicState{}, true
	}
	maps.Copy(n.pendingTopics, u.topics)
	for _, m := range u.parts {
		n.pendingParts[controller.TopicPartition{Topic: m.Topic, Partition: m.Partition}] = m
	}
	if u.incarnation == n.cfg.Incarnation {
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
func (n *Node) applyMetadata(ctx context.Context) {
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
			if err := n.deliver(ctx, tp, parts[tp]); err != nil && ctx.Err() == nil {
				n.log.Error("applying metadata", "partition", tp, "err", err)
			}
		}
	}
}

func (n *Node) deliver(ctx context.Context, tp controller.TopicPartition, m *replica.LeaderAndISR) error {
	n.mu.Lock()
	_, have := n.parts[tp]
	n.states[tp] = m
	n.mu.Unlock()
	if !have {
		if !slices.Contains(m.Replicas, n.cfg.ID) {
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
	if d := n.damaged[tp]; d != nil && slices.Contains(m.ISR, n.cfg.ID) {
		n.clearDamage(tp)
	}
	return n.d.Receive(ctx, m)
}

// addReplica adds the replica of tp over plog to the driver.
func (n *Node) addReplica(ctx context.Context, tp controller.TopicPartition, plog *log.Partition) (*replicaLog, error) {
	rlog := newReplicaLog(plog, tp, n.log, n.replicaFailed)
	err := n.d.AddPartition(ctx, replica.Config{
		Topic: tp.Topic, Partition: tp.Partition, Log: rlog,
		MinInsyncReplicas:   n.minISR(tp.Topic),
		ReplicaLagTicks:     max(ticks(n.cfg.ReplicaLagTime, n.cfg.Tick), 2),
		RequestTimeoutTicks: ticks(n.cfg.RequestTimeout, n.cfg.Tick),
		ProduceTimeoutTicks: ticks(n.cfg.RequestTimeout, n.cfg.Tick),
		RetryBackoffTicks:   ticks(n.cfg.RetryBackoff, n.cfg.Tick),
		// The topic's max.message.bytes, which changes live, is
		// Produce's to check (checkBatchSize).
		MaxBatchBytes: replica.MaxMessageBytes,
	})
	return rlog, err
}

// clearDamage forgets a repaired replica's damage once the controller has
// it in the ISR again: it fetched what the repair cut.
func (n *Node) clearDamage(tp controller.TopicPartition) {
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

// minISRConfig is the topic config the node reads itself: its replicas'
// MinInsyncReplicas.
const minISRConfig = "min.insync.replicas"

// applyTopic makes the node's log.Dir hold a topic as the committed
// records leave it (a KRaft broker's metadata listener): created with the
// controller's id and configs, its configs changed (Dir.AlterTopicConfig:
// at once on the open partitions), or deleted with its replicas. A topic
// the Dir holds under another id was deleted and created again under its
// name: its replicas go first.
func (n *Node) applyTopic(ctx context.Context, name string, t topicState) error {
	n.mu.Lock()
	delete(n.minISRs, name)
	if m, err := strconv.Atoi(t.configs[minISRConfig]); err == nil && !t.removed {
		n.minISRs[name] = m
	}
	n.mu.Unlock()
	if t.removed {
		return n.removeTopic(ctx, name)
	}
	cfg, err := n.cfg.TopicConfig(replicaTopicConfig(name, t.partitions), t.configs)
	if err != nil {
		return err
	}
	id, err := n.dir.TopicID(name)
	if err == nil && id != t.id && !internalTopic(name) {
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

// replicaTopicConfig is a topic's log configuration before its configs:
// synced appends (a node acknowledges only what is on its disk), and for
// a coordinator's topic compaction and no retention.
func replicaTopicConfig(name string, partitions int32) log.TopicConfig {
	cfg := log.TopicConfig{Partitions: partitions, Fsync: log.FsyncAlways()}
	if internalTopic(name) {
		cfg.Compact = log.Compacted
		cfg.Retention = log.Retention{Age: log.Unlimited, Bytes: log.Unlimited}
	}
	return cfg
}

// internalTopic says whether a topic is a coordinator's.
func internalTopic(name string) bool {
	return name == group.OffsetsTopic || name == log.TransactionStateTopic
}

// removeTopic takes a deleted topic's replicas off the node and deletes
// their logs (Kafka's StopReplica with deletion).
func (n *Node) removeTopic(ctx context.Context, name string) error {
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

// removeStrays deletes the topics of the node's log.Dir that the state
// naming every topic there is does not hold.
func (n *Node) removeStrays(ctx context.Context, topics map[string]topicState) {
	names, err := n.dir.Topics()
	if err != nil {
		n.log.Error("listing topics", "err", err)
		return
	}
	for _, name := range names {
		if t, ok := topics[name]; (!ok || t.removed) && !internalTopic(name) {
			if err := n.removeTopic(ctx, name); err != nil {
				n.log.Error("deleting a topic", "topic", name, "err", err)
			}
		}
	}
}

// minISR is the topic's min.insync.replicas, or the cluster's.
func (n *Node) minISR(topic string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m, ok := n.minISRs[topic]; ok {
		return m
	}
	return n.cfg.MinInsyncReplicas
}

// partition returns a replica's log, or nil.
func (n *Node) partition(tp controller.TopicPartition) *log.Partition {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[tp]
}

// heartbeats registers the broker with the active controller and renews
// its session, registering again if the controller no longer knows this
// incarnation's epoch.
func (n *Node) heartbeats(ctx context.Context) {
	n.brokerEpoch = replica.NoBrokerEpoch
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		offline, _ := n.offline.list()
		call, cancel := context.WithTimeout(ctx, n.cfg.Heartbeat*4)
		if n.brokerEpoch == replica.NoBrokerEpoch {
			a, err := n.callControllerOnce(call, &registerRequest{Node: n.cfg.ID, Incarnation: n.cfg.Incarnation,
				Registration: controller.Registration{Clean: n.clean, Synced: n.registerClaims(), Offline: offline}})
			if err == nil {
				// The replicas take the epoch once this node has applied the
				// registration's record (applyMetadata).
				n.brokerEpoch = a.BrokerEpoch
				n.registered.Store(a.BrokerEpoch)
				n.log.Info("registered", "epoch", a.BrokerEpoch, "clean", n.clean, "synced", len(n.synced), "offline", len(offline))
			}
		} else {
			_, err := n.callControllerOnce(call, &heartbeatRequest{Node: n.cfg.ID, Epoch: n.brokerEpoch, Offline: offline})
			if errors.Is(err, replica.ErrStaleBrokerEpoch) || errors.Is(err, replica.ErrBrokerIDNotRegistered) {
				n.brokerEpoch = replica.NoBrokerEpoch
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.offline.changed:
		}
	}
}

// Close shuts the node down: it asks the controller to move leadership
// away (Kafka's controlled shutdown) and waits for that a few seconds at
// most, hands the metadata log's lead to another voter if it can, stops
// every goroutine and closes the data directory. A node closed this way
// registers clean at its next start (KIP-966).
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.closing)
		n.beats()
		<-n.beatsDone
		n.controlledShutdown()
		err := n.closeCoordinators()
		n.stop()
		n.wg.Wait()
		n.out.close()
		err = errors.Join(err, n.dir.Close())
		if err == nil {
			// Everything the node acknowledged is on disk and its logs are
			// closed: the next incarnation registers clean (KIP-966).
			err = writeCleanMarker(n.cfg.FS, n.cfg.Dir)
		}
		n.closeErr = err
	})
	return n.closeErr
}

func (n *Node) registeredEpoch() int64 { return n.registered.Load() }

// closeCoordinators stops the coordinators while the replicas they write
// through still run.
func (n *Node) closeCoordinators() error {
	n.stopCoordinators()
	n.txns.Close()
	n.coordinators.Wait()
	return n.groups.Close()
}

// controlledShutdown asks the controller to move leadership away from the
// node and waits, heartbeating, until it leads nothing, at most a few
// seconds; a node leading the metadata log then hands that over too, so
// that the controller moves without an election timeout.
func (n *Node) controlledShutdown() {
	if n.brokerEpoch == replica.NoBrokerEpoch {
		return
	}
	deadline, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.callController(deadline, &shutdownRequest{Node: n.cfg.ID, Epoch: n.brokerEpoch}); err != nil {
		n.log.Warn("controlled shutdown", "err", err)
		return
	}
	for deadline.Err() == nil {
		a, err := n.callController(deadline, &heartbeatRequest{Node: n.cfg.ID, Epoch: n.brokerEpoch})
		if err == nil && a.CanStop {
			n.log.Info("controlled shutdown: leads no partition")
			break
		}
		time.Sleep(n.cfg.Heartbeat)
	}
	if t, ok := n.cfg.Metadata.(MetadataLeaderTransferer); ok && n.ctl.leader() == n.cfg.ID {
		t.TransferLeadership()
	}
}

// takeCleanMarker reports whether the previous incarnation stopped
// cleanly, and removes the marker so that a crash of this one is seen.
func takeCleanMarker(fs vfs.FS, dir string) (bool, error) {
	err := fs.Remove(filepath.Join(dir, cleanMarker))
	if errors.Is(err, iofs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, vfs.SyncDir(fs, dir)
}

func writeCleanMarker(fs vfs.FS, dir string) error {
	f, err := fs.Create(filepath.Join(dir, cleanMarker))
	if err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	return vfs.SyncDir(fs, dir)
}
