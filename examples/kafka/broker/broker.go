// Package broker serves a Strand cluster to Kafka clients over Kafka's wire
// protocol, as one Kafka broker of it.
//
// Every request and response is encoded and decoded by franz-go's kmsg; this
// package frames them (the 4-byte size and the request header) and maps each
// request onto a Cluster: NodeCluster makes one of a cluster.Node, whose
// topics and partitions are its replicas, whose groups and committed offsets
// are its group.Service over the replicated __consumer_offsets topic, and
// whose transactions are its coordinators over __transaction_state. A broker
// alone (Config.Cluster nil) is a cluster of one voter: Open starts a
// cluster.Node on a cluster.FileMetadata in its data directory, which is its
// own controller and leads every partition, and serves it the same way.
// Produced batches are appended through the partition's leader as they
// arrive (an idempotent producer's checked by the log's sequence rules,
// compressed ones kept compressed; snappy and zstd ones, which the log cannot
// read, recompressed with lz4 as a Kafka broker recompresses to a topic's
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
// IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and AlterConfigs,
// DeleteRecords; Produce (acks 0, 1 and all) and InitProducerId for
// idempotent producers; Fetch (read_uncommitted and read_committed, long
// polls with max wait and min bytes, fetch sessions of KIP-227 with
// incremental fetches: fetchsession.go), ListOffsets (earliest, latest, by
// time), OffsetForLeaderEpoch; transactions (see below); FindCoordinator,
// JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
// DescribeGroups for classic groups, ListGroups (v5: by type too) for both kinds, and
// ConsumerGroupHeartbeat (subscriptions by name or by regular expression)
// and ConsumerGroupDescribe for KIP-848 consumer groups; SaslHandshake,
// SaslAuthenticate, DescribeUserScramCredentials,
// AlterUserScramCredentials, CreateAcls, DescribeAcls and DeleteAcls (see
// Security). Topics have the
// Cluster's ids (Cluster.TopicID), by which Metadata, Fetch v13+,
// OffsetCommit and OffsetFetch v10, DeleteTopics v6, TxnOffsetCommit v6 and
// consumer groups name them (see topicids.go). ApiVersions lists the
// versions of each.
//
// # Transactions
//
// A cluster's transaction coordinators (ReplicatedTransactions) serve
// them: FindCoordinator of type transaction names the leader of the
// transactional id's state partition, and InitProducerId with a
// transactional id, AddPartitionsToTxn (v0-v3), AddOffsetsToTxn, EndTxn,
// DescribeTransactions and ListTransactions are its requests, and
// DescribeProducers shows the producers a partition knows. Offsets
// committed in a transaction (TxnOffsetCommit; v5 and later add the
// group's offsets partition to the transaction itself) are staged by the
// group.Service and count at the transaction's COMMIT marker; a commit
// decided before a crash completes them when the node starts again. It
// keeps the rules of transactions version 2 (KIP-890), which ApiVersions
// announces as the finalized feature transaction.version=2: a
// transactional Produce of version 12 adds its partition to the
// transaction, an older one must find it added, and every EndTxn bumps the
// producer epoch, so EndTxn is served at version 5 only (a client of
// version 1, which keeps its epoch, could not be served). Read_committed
// fetches see the commits and skip the aborts.
//
// # Security
//
// Serve serves a plaintext listener; ServeListener serves one with TLS
// (crypto/tls, client certificates optional), SASL (PLAIN, SCRAM-SHA-256
// and SCRAM-SHA-512, SaslHandshake v0 and v1, SaslAuthenticate v0 to v2,
// re-authentication of KIP-368 with Config.MaxReauth), or both, each
// listener telling its clients its own address for this broker. The users
// are SCRAM credentials: Config.Users sets them from passwords at Open,
// AlterUserScramCredentials and DescribeUserScramCredentials manage them
// (Kafka's rules: 4096 to 16384 iterations, one change per user and
// request), and the broker alone keeps them, hashed, in
// DataDir/security/scram.json. PLAIN checks a password against the
// user's SCRAM credential, so no password is kept for it either. Until a
// client of a SASL listener has authenticated, only ApiVersions and SASL's
// requests are served and a request larger than Config.MaxSASLReceiveBytes
// closes the connection; a failed authentication is answered after
// Config.FailedAuthenticationDelay, logged without its secret, counted
// (FailedAuthentications) and closes its connection.
//
// With Config.Authorize every request is checked against ACLs, as Kafka's
// StandardAuthorizer checks them (super users, DENY over ALLOW, DESCRIBE
// implied by READ, WRITE, DELETE and ALTER, literal, wildcard and
// prefixed names, no ACL for a resource denying unless
// Config.AllowEveryoneIfNoACLFound), each API on the resources KafkaApis
// checks it on, with Kafka's TOPIC_, GROUP_, CLUSTER_ and
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED: a topic a client may not
// describe is not listed to it at all. CreateAcls, DescribeAcls and
// DeleteAcls manage the ACLs, which the broker alone keeps in
// DataDir/security/acls.json, and a broker of a SecureCluster (a
// NodeCluster) in the cluster's controller records with the SCRAM
// credentials, so that every broker of the cluster authenticates and
// authorizes alike. A connection's principal is User:NAME after
// SASL, User: and its certificate's subject on a TLS listener with client
// certificates, User:ANONYMOUS otherwise.
//
// # Not yet
//
//   - ACLs on a KIP-848 group's regular-expression subscription: the
//     topics it matches are not filtered by DESCRIBE.
//   - WriteTxnMarkers (the coordinators write their markers through the
//     partitions' leaders themselves).
//   - Produce v13 (topics by id) and Fetch v18 (a follower's, KIP-1166).
//   - Client ids and hosts of KIP-848 members in ConsumerGroupDescribe
//     (the group coordinator's heartbeat request does not carry them).
//
// # Leadership
//
// Metadata lists the live brokers and each partition's leader, leader
// epoch, replicas and ISR as the Cluster says; Produce, Fetch, ListOffsets,
// OffsetForLeaderEpoch, DeleteRecords and DescribeProducers for a partition
// the broker does not lead are answered NOT_LEADER_OR_FOLLOWER, and those
// whose current leader epoch is older than the partition's
// FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (KIP-320); produces go to
// Cluster.Append, which waits for the ISR under acks=all; fetches read this
// node's replica below its high watermark, which the Cluster moves. A
// group's coordinator is the leader of its offsets partition
// (Cluster.GroupCoordinator). Every start of a node, the broker alone's
// too, leads its partitions in new leader epochs, so that clients tell a
// log that may have lost records in a crash from the one they read.
package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/cluster"
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
	// DataDir is the data directory of the broker alone (Cluster nil): its
	// cluster.Node's, with the node's metadata log (a
	// cluster.FileMetadata) in DataDir/metadata.
	DataDir string
	// Node configures the broker alone's cluster.Node; its ID (NodeID),
	// Dir (DataDir), Transport, Metadata and TopicConfig are the
	// broker's, and its Logger is Logger if unset.
	Node cluster.Options
	// Partitions is the partition count of a topic the broker alone
	// creates without one (num.partitions); default 1.
	Partitions int32
	// Fsync is the fsync policy of the broker alone's topics that set no
	// flush config (flush.messages, flush.ms); default log.FsyncAlways.
	// The coordinators' topics are always synced.
	Fsync log.FsyncPolicy
	// NodeID is the broker's id in Metadata, and the id of the broker
	// alone's cluster.Node; default 1.
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
	// allows to be created, if it does not exist, with the cluster's
	// default partition count and replication factor
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
	// Users are users whose SCRAM credentials (SCRAM-SHA-256 and
	// SCRAM-SHA-512, with a new salt) Open sets from their passwords
	// (name to password), replacing those kept, as Kafka's
	// `kafka-storage format --add-scram` adds them: the first users of a
	// SASL listener (ServeListener), which AlterUserScramCredentials
	// manages from then on. The broker alone keeps the credentials in
	// DataDir/security/scram.json, never the passwords; a broker of a
	// SecureCluster in the cluster's controller records, where it sets
	// only those a user lacks (every broker of a cluster is given the
	// same), once the cluster has a controller.
	Users map[string]string
	// Authorize checks every request against the broker's ACLs (Kafka's
	// StandardAuthorizer, authorizer.class.name), which CreateAcls,
	// DescribeAcls and DeleteAcls manage; the broker alone keeps them in
	// DataDir/security/acls.json, a SecureCluster in its controller
	// records. Without it, any client may do anything.
	Authorize bool
	// SuperUsers are principals ("User:admin") the authorizer allows
	// everything (super.users).
	SuperUsers []string
	// AllowEveryoneIfNoACLFound authorizes a request on a resource no ACL
	// names (allow.everyone.if.no.acl.found); without it, it is denied.
	AllowEveryoneIfNoACLFound bool
	// MaxReauth is the lifetime of a SASL session
	// (connections.max.reauth.ms, KIP-368): a client that authenticated
	// with SaslAuthenticate v1 or later re-authenticates before it ends,
	// or its next request closes the connection. Zero: no lifetime.
	MaxReauth time.Duration
	// FailedAuthenticationDelay holds the answer to a failed
	// authentication this long before the connection closes; default
	// DefaultFailedAuthenticationDelay.
	FailedAuthenticationDelay time.Duration
	// MaxSASLReceiveBytes bounds a request before its connection has
	// authenticated; default DefaultMaxSASLReceiveBytes.
	MaxSASLReceiveBytes int32
	// Cluster, if set, is the cluster the broker serves in, NodeID its id
	// there (NodeCluster makes one of a cluster.Node that the application
	// runs). Nil: the broker alone, a cluster.Node of one voter on
	// DataDir that Open starts and Close stops.
	Cluster Cluster
}

// Broker is a Kafka broker of a Cluster.
type Broker struct {
	cfg     Config
	cluster Cluster
	groups  *group.Service
	alone   *alone // the broker alone's node, or nil
	logger  *slog.Logger

	ctx    context.Context // canceled by Close: ends long polls
	cancel context.CancelFunc

	sessions *fetchSessions // fetch sessions (KIP-227)
	ids      topicIDCache

	creds      credentialStore // the SCRAM credentials; nil in a Cluster that keeps none
	authz      *authorizer     // the ACLs, if Config.Authorize
	failedAuth atomic.Int64

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	advertise BrokerAddr // Host empty until known
	// advertiseSecure says a secure listener gave advertise, which a
	// plaintext listener's address replaces.
	advertiseSecure bool

	wg sync.WaitGroup // connection goroutines
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("broker: closed")

// Open opens a broker of cfg.Cluster or, if it is nil, starts the broker
// alone's cluster.Node on cfg.DataDir and waits until it is registered
// with its own controller.
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
	if cfg.NodeID == 0 {
		cfg.NodeID = 1
	}
	if cfg.FailedAuthenticationDelay <= 0 {
		cfg.FailedAuthenticationDelay = DefaultFailedAuthenticationDelay
	}
	if cfg.MaxSASLReceiveBytes <= 0 {
		cfg.MaxSASLReceiveBytes = DefaultMaxSASLReceiveBytes
	}
	b := &Broker{cfg: cfg, cluster: cfg.Cluster, logger: cfg.Logger,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	if cfg.Advertise != "" {
		if err := b.setAdvertise(cfg.Advertise); err != nil {
			return nil, err
		}
	}
	var users map[string]map[string]scramCredential // of Config.Users, for a SecureCluster
	if b.cluster == nil {
		var err error
		if b.alone, b.cluster, err = openAlone(cfg, b.address); err != nil {
			return nil, err
		}
		creds, err := openUsers(cfg)
		var acls *aclFile
		if err == nil && cfg.Authorize {
			acls, err = openACLFile(filepath.Join(cfg.DataDir, aclsFile))
		}
		if err != nil {
			return nil, errors.Join(err, b.alone.close())
		}
		b.setSecurity(creds, acls)
	} else if sc, ok := b.cluster.(SecureCluster); ok {
		b.setSecurity(clusterCredentials{sc}, &clusterACLs{c: sc})
		if len(cfg.Users) > 0 {
			var err error
			if users, err = passwordCredentials(cfg.Users); err != nil {
				return nil, err
			}
		}
	} else if len(cfg.Users) > 0 || cfg.Authorize {
		return nil, fmt.Errorf("%w: Config.Users and Config.Authorize need the broker alone or a SecureCluster, which keep credentials and ACLs", ErrListener)
	}
	b.groups = b.cluster.Groups()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.sessions = newFetchSessions(cfg.FetchSessionCacheSlots)
	if users != nil {
		b.wg.Go(func() { b.addMissingUsers(users) })
	}
	return b, nil
}

// setSecurity takes the broker's credentials and, with
// Config.Authorize, its ACLs from their stores.
func (b *Broker) setSecurity(creds credentialStore, acls aclStore) {
	b.creds = creds
	if b.cfg.Authorize {
		b.authz = &authorizer{store: acls, superUsers: b.cfg.SuperUsers, allowIfNo: b.cfg.AllowEveryoneIfNoACLFound}
	}
}

// Node returns the broker alone's cluster.Node, or nil if the broker
// serves a Config.Cluster.
func (b *Broker) Node() *cluster.Node {
	if b.alone == nil {
		return nil
	}
	return b.alone.n
}

func (b *Broker) setAdvertise(hostport string) error {
	a, err := parseAddr(hostport)
	if err != nil {
		return fmt.Errorf("broker: advertised address: %w", err)
	}
	a.ID = b.cfg.NodeID
	b.mu.Lock()
	b.advertise = a
	b.mu.Unlock()
	return nil
}

// address returns the address clients are told to connect to, once the
// broker has one.
func (b *Broker) address() (BrokerAddr, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.advertise, b.advertise.Host != ""
}

// Serve accepts connections on l until Close, serving each on its own
// goroutine, in plaintext and without authentication (Kafka's PLAINTEXT
// listener). It returns ErrClosed after Close.
func (b *Broker) Serve(l net.Listener) error { return b.ServeListener(l, Listener{}) }

// ServeListener is Serve for a listener with security: TLS, SASL, or
// both.
func (b *Broker) ServeListener(l net.Listener, sec Listener) error {
	if err := b.checkListener(sec); err != nil {
		return err
	}
	var own BrokerAddr // what this listener's clients are told of this broker, if not b.advertise
	ownAddr := cmp.Or(sec.Advertise, l.Addr().String())
	if sec.TLS != nil || len(sec.SASL) > 0 {
		var err error
		if own, err = parseAddr(ownAddr); err != nil {
			return fmt.Errorf("%w: advertised address: %w", ErrListener, err)
		}
		own.ID = b.cfg.NodeID
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.listeners[l] = struct{}{}
	// The broker's address, which its node registers, is its plaintext
	// listener's, or the first secure listener's until a plaintext one
	// serves: a broker served on secure listeners only has one too.
	plain := own.Host == ""
	set := b.advertise.Host == "" || plain && b.advertiseSecure
	if set {
		b.advertiseSecure = !plain
	}
	b.mu.Unlock()
	if set {
		if err := b.setAdvertise(ownAddr); err != nil {
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
		go b.serveConn(c, sec, own)
	}
}

// Close stops the listeners, closes the connections, stops the broker
// alone's node, and returns once every connection's goroutine has.
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
	var err error
	if b.alone != nil {
		// Its group coordinator answers the requests parked in it
		// (JoinGroup, SyncGroup) only as it closes.
		err = b.alone.close()
	}
	b.wg.Wait()
	return err
}
