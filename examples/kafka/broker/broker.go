// Package broker serves a Strand data directory to Kafka clients over
// Kafka's wire protocol, as one Kafka broker that leads every partition.
//
// Every request and response is encoded and decoded by franz-go's kmsg; this
// package frames them (the 4-byte size and the request header) and maps each
// request onto Strand's packages: topics and partitions are a log.Dir, groups
// and committed offsets a group.Service over the Dir's __consumer_offsets
// topic, producer ids the Dir's. Produced batches are appended as they arrive
// (an idempotent producer's checked by the log's sequence rules, compressed
// ones kept compressed; snappy and zstd ones, which the log cannot read,
// recompressed with lz4 as a Kafka broker recompresses to a topic's
// compression.type), and fetches return whole batches from the segment
// files.
//
// Each connection is served by one goroutine, one request at a time, so that
// its responses go out in request order, as a Kafka broker mutes a connection
// while a request of it is in flight. A request larger than
// Config.MaxRequestBytes, a frame cut short or a request body that does not
// decode closes the connection (Kafka closes it too: there is no response it
// could frame); an API or version the broker does not serve is answered with
// UNSUPPORTED_VERSION. Each refused request is logged.
//
// # What is served
//
// ApiVersions, Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
// IncrementalAlterConfigs (a cluster that is a TopicConfigs: SET, DELETE,
// APPEND, SUBTRACT; the standalone broker: SET) and AlterConfigs (a
// TopicConfigs cluster), DeleteRecords; Produce (acks 0, 1 and all) and InitProducerId for
// idempotent producers; Fetch (read_uncommitted and read_committed, long
// polls with max wait and min bytes, fetch sessions of KIP-227 with
// incremental fetches: fetchsession.go), ListOffsets (earliest, latest, by
// time), OffsetForLeaderEpoch; transactions (see below); FindCoordinator,
// JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
// DescribeGroups for classic groups, ListGroups (v5: by type too) for both kinds, and
// ConsumerGroupHeartbeat (subscriptions by name or by regular expression)
// and ConsumerGroupDescribe for KIP-848 consumer groups. Topics have the ids of the data directory (log.Dir.TopicID), by
// which Metadata, Fetch v13+, OffsetCommit and OffsetFetch v10,
// DeleteTopics v6, TxnOffsetCommit v6 and consumer groups name them (see
// topicids.go). ApiVersions lists the versions of each.
//
// # Transactions
//
// The Dir's transaction coordinator (log.Transactions) is this broker's:
// FindCoordinator of type transaction names it, and InitProducerId with a
// transactional id, AddPartitionsToTxn (v0-v3), AddOffsetsToTxn, EndTxn,
// DescribeTransactions and ListTransactions are its requests, and
// DescribeProducers shows the producers a partition knows. Offsets
// committed in a transaction (TxnOffsetCommit; v5 and later add the
// group's offsets partition to the transaction itself) are staged by the
// group.Service and count at the transaction's COMMIT marker, which the
// coordinator writes through it; a commit decided before a crash completes
// them when the broker opens again. It keeps the rules of transactions
// version 2 (KIP-890), which ApiVersions announces as the finalized
// feature transaction.version=2: a transactional Produce of version 12 adds
// its partition to the transaction, an older one must find it added, and
// every EndTxn bumps the producer epoch, so EndTxn is served at version 5
// only (a client of version 1, which keeps its epoch, could not be served).
// Read_committed fetches see the commits and skip the aborts.
//
// # Not yet
//
//   - WriteTxnMarkers (one broker writes its markers itself).
//   - Produce v13 (topics by id) and Fetch v18 (a follower's, KIP-1166).
//   - Client ids and hosts of KIP-848 members in ConsumerGroupDescribe
//     (the group coordinator's heartbeat request does not carry them).
//
// # Several brokers
//
// Alone (Config.Cluster nil), the broker leads each partition of its data
// directory, in a new leader epoch for each run of the broker (see
// partition). Given a Cluster, it is one broker of several: Metadata
// lists the live brokers and each partition's leader, leader epoch, replicas
// and ISR as the Cluster says; Produce, Fetch, ListOffsets,
// OffsetForLeaderEpoch, DeleteRecords and DescribeProducers for a partition
// it does not lead are answered NOT_LEADER_OR_FOLLOWER, and those whose
// current leader epoch is older than the partition's FENCED_LEADER_EPOCH,
// newer UNKNOWN_LEADER_EPOCH (KIP-320); produces go to Cluster.Append, which
// waits for the ISR under acks=all; fetches read this node's replica
// below its high watermark, which the Cluster moves. Topic ids are the
// Cluster's (Cluster.TopicID). Consumer groups and
// committed offsets stay with the group.Service of this broker's own data
// directory (Config.DataDir): FindCoordinator names the broker
// Cluster.GroupCoordinator says, and the group requests another broker
// receives are answered NOT_COORDINATOR; a Cluster that replicates them
// (ReplicatedGroups) has each group coordinated by the leader of its
// offsets partition instead. Transactions are served by a standalone
// broker, or by a Cluster that replicates their coordinators
// (ReplicatedTransactions).
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
)

// Defaults of Config, Kafka's where Kafka has one.
const (
	DefaultMaxRequestBytes = 100 << 20        // socket.request.max.bytes
	DefaultIdleTimeout     = 10 * time.Minute // connections.max.idle.ms
	DefaultClusterID       = "strand"
)

// Config configures a Broker.
type Config struct {
	// DataDir is the data directory, opened with log.OpenDir.
	DataDir string
	// Dir are the options of the data directory.
	Dir log.DirOptions
	// Groups are the options of the group coordinator.
	Groups group.ServiceOptions
	// NodeID is the broker's id in Metadata; default 0.
	NodeID int32
	// Advertise is the host:port clients are told to connect to; default
	// the address of the listener Serve was given.
	Advertise string
	// ClusterID is the cluster id in Metadata; default DefaultClusterID.
	ClusterID string
	// MaxRequestBytes bounds a request's size; a larger one closes its
	// connection. Default DefaultMaxRequestBytes.
	MaxRequestBytes int32
	// IdleTimeout closes a connection that sends nothing for this long;
	// default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// AutoCreateTopics creates a topic that a Metadata request names, and
	// allows to be created, if it does not exist, with Dir.Defaults
	// (auto.create.topics.enable). A Produce never creates a topic.
	AutoCreateTopics bool
	// FetchSessionCacheSlots bounds the fetch sessions (KIP-227) kept
	// (max.incremental.fetch.session.cache.slots); default
	// DefaultFetchSessionCacheSlots, negative for none (every fetch is a
	// full one).
	FetchSessionCacheSlots int
	// Logger receives a line for each refused request and connection
	// error; default slog.Default().
	Logger *slog.Logger
	// Cluster, if set, is the cluster the broker serves in, NodeID its id
	// there: topics, partitions, leadership and produces are the
	// Cluster's, and DataDir keeps only the broker's own state (consumer
	// groups and committed offsets, unless the Cluster replicates them:
	// ReplicatedGroups). Nil: the broker alone, leading every partition of
	// DataDir.
	Cluster Cluster
}

// Broker is a Kafka broker over one data directory.
type Broker struct {
	cfg     Config
	cluster Cluster // cfg.Cluster, or standalone
	dir     *log.Dir
	groups  *group.Service
	logger  *slog.Logger

	ctx    context.Context // canceled by Close: ends long polls
	cancel context.CancelFunc

	sessions *fetchSessions // fetch sessions (KIP-227)
	ids      topicIDCache

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	advertise struct {
		host string
		port int32
	}
	epochs map[topicPartition]int32 // leader epochs of the partitions used so far
	elect  sync.Mutex               // held while a partition gets its epoch

	wg sync.WaitGroup // connection goroutines
}

type topicPartition struct {
	topic     string
	partition int32
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("broker: closed")

// Open opens the data directory and its group coordinator.
func Open(cfg Config) (*Broker, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = DefaultClusterID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dir.Logger == nil {
		cfg.Dir.Logger = cfg.Logger
	}
	if c := cfg.Cluster; c != nil && cfg.Groups.Config.Partitions == nil {
		// Offsets are committed for the cluster's topics, not the
		// broker's own directory's.
		cfg.Groups.Config.Partitions = func(topic string) int32 {
			tc, err := c.TopicConfig(topic)
			if err != nil {
				return 0
			}
			return tc.Partitions
		}
	}
	if c := cfg.Cluster; c != nil && cfg.Groups.Config.Topics == nil {
		// Subscriptions by regular expression match the cluster's
		// topics; internal ones are no subscription's.
		cfg.Groups.Config.Topics = func() []string {
			topics, _ := c.Topics() // an error: none to match until it passes
			return slices.DeleteFunc(topics, internalTopic)
		}
	}
	d, err := log.OpenDir(cfg.DataDir, cfg.Dir)
	if err != nil {
		return nil, err
	}
	var g *group.Service
	if rg, ok := cfg.Cluster.(ReplicatedGroups); ok {
		g = rg.Groups()
	} else if g, err = group.OpenService(d, cfg.Groups); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	b := &Broker{cfg: cfg, dir: d, groups: g, logger: cfg.Logger,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}, epochs: map[topicPartition]int32{}}
	b.cluster = cfg.Cluster
	if b.cluster == nil {
		b.cluster = standalone{b}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.sessions = newFetchSessions(cfg.FetchSessionCacheSlots)
	if _, err := d.TopicConfig(log.TransactionStateTopic); err == nil {
		// The Dir has a transaction coordinator: the markers it writes
		// again from now on (after failures) reach the group coordinator.
		if _, err := b.txns(); err != nil {
			return nil, errors.Join(err, b.Close())
		}
	}
	if cfg.Advertise != "" {
		if err := b.setAdvertise(cfg.Advertise); err != nil {
			return nil, errors.Join(err, b.Close())
		}
	}
	return b, nil
}

// Dir returns the broker's data directory.
func (b *Broker) Dir() *log.Dir { return b.dir }

func (b *Broker) setAdvertise(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("broker: advertised address %q: %w", hostport, err)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return fmt.Errorf("broker: advertised address %q: port: %w", hostport, err)
	}
	b.mu.Lock()
	b.advertise.host, b.advertise.port = host, int32(p)
	b.mu.Unlock()
	return nil
}

func (b *Broker) address() (string, int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.advertise.host, b.advertise.port
}

// Serve accepts connections on l until Close, serving each on its own
// goroutine. It returns ErrClosed after Close.
func (b *Broker) Serve(l net.Listener) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.listeners[l] = struct{}{}
	unset := b.advertise.host == ""
	b.mu.Unlock()
	if unset {
		if err := b.setAdvertise(l.Addr().String()); err != nil {
			return err
		}
	}
	for {
		c, err := l.Accept()
		if err != nil {
			b.mu.Lock()
			closed := b.closed
			b.mu.Unlock()
			if closed {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("broker: accept: %w", err)
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			return ErrClosed
		}
		b.conns[c] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go b.serveConn(c)
	}
}

// Close stops the listeners, closes the connections, ends the group
// coordinator (which answers requests parked in it) and closes the data
// directory once every connection's goroutine has returned.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.closed = true
	for l := range b.listeners {
		l.Close()
	}
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.cancel()
	var gerr error
	if _, replicated := b.cluster.(ReplicatedGroups); !replicated {
		gerr = b.groups.Close()
	}
	b.wg.Wait()
	return errors.Join(gerr, b.dir.Close())
}

// partition returns a partition and its leader epoch. The first time this
// run of the broker leads a partition, it starts a new leader epoch, the
// log's latest plus one (0 for a new partition), as each election of a
// Kafka leader does: a run that opens the log after a crash may have lost
// records the last one served, and clients tell the two apart by epoch
// (KIP-320: a client of the old epoch is FENCED_LEADER_EPOCH, and asks
// OffsetForLeaderEpoch where the old one ended).
func (b *Broker) partition(topic string, id int32) (*log.Partition, int32, error) {
	p, err := b.dir.Partition(topic, id)
	if err != nil {
		return nil, 0, err
	}
	tp := topicPartition{topic, id}
	b.mu.Lock()
	epoch, ok := b.epochs[tp]
	b.mu.Unlock()
	if ok {
		return p, epoch, nil
	}
	b.elect.Lock() // one new epoch per run, whoever asks first
	defer b.elect.Unlock()
	b.mu.Lock()
	epoch, ok = b.epochs[tp]
	b.mu.Unlock()
	if ok {
		return p, epoch, nil
	}
	if epoch, err = p.LatestEpoch(); err != nil {
		return nil, 0, err
	}
	epoch++
	if err := p.SetLeaderEpoch(epoch); err != nil {
		return nil, 0, err
	}
	b.mu.Lock()
	b.epochs[tp] = epoch
	b.mu.Unlock()
	return p, epoch, nil
}

// forgetTopic drops the epochs of a deleted topic's partitions.
func (b *Broker) forgetTopic(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for tp := range b.epochs {
		if tp.topic == topic {
			delete(b.epochs, tp)
		}
	}
}
