package group

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/strandlog/strand"
)

// Config holds the coordinator's settings, named after Kafka's broker
// configuration. A zero field takes Kafka's default.
type Config struct {
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (group.min/max.session.timeout.ms; 6 s and 30 min).
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// InitialRebalanceDelay is how long the first rebalance of an empty
	// group waits for more members (group.initial.rebalance.delay.ms; 3 s).
	// A negative value means no delay.
	InitialRebalanceDelay time.Duration
	// NewMemberJoinTimeout bounds how long a new member's JoinGroup may stay
	// parked (5 min in Kafka, not configurable there).
	NewMemberJoinTimeout time.Duration
	// MaxSize is the largest number of members of a group (group.max.size);
	// 0 means no limit.
	MaxSize int
	// OffsetMetadataMaxBytes bounds the metadata of a committed offset
	// (offset.metadata.max.bytes; 4096).
	OffsetMetadataMaxBytes int
	// OffsetsRetention is how long committed offsets outlive their group's
	// use of them (offsets.retention.minutes; 7 days; KIP-211).
	OffsetsRetention time.Duration
	// OffsetsRetentionCheckInterval is how often expired offsets are removed
	// (offsets.retention.check.interval.ms; 10 min).
	OffsetsRetentionCheckInterval time.Duration
	// Partitions, if set, returns the number of partitions of a topic (0
	// for a topic that does not exist); commits to partitions it does not
	// know fail with UNKNOWN_TOPIC_OR_PARTITION, as Kafka's broker checks
	// them before its coordinator sees them.
	Partitions func(topic string) int32
	// ConsumerHeartbeatInterval is how often a member of a consumer group
	// (KIP-848) heartbeats, which is how soon it learns of a new
	// assignment or of partitions another member released
	// (group.consumer.heartbeat.interval.ms; 5 s). It must be below the
	// consumer group session timeout, 45 s.
	ConsumerHeartbeatInterval time.Duration
	// MigrationPolicy says which conversions between a classic group and a
	// consumer group a group with members may go through
	// (group.consumer.migration.policy; bidirectional, the zero value).
	MigrationPolicy MigrationPolicy
	// Rand generates member ids. Nil means a generator seeded from
	// crypto/rand; tests pass a seeded one to make ids reproducible.
	Rand *rand.Rand

	// Topics, if set, returns the names of the topics that members'
	// regular expressions (ConsumerGroupHeartbeat's SubscribedTopicRegex)
	// are matched against; without it they match nothing.
	Topics func() []string
}

// Kafka's defaults (GroupCoordinatorConfig).
const (
	DefaultMinSessionTimeout      = 6 * time.Second
	DefaultMaxSessionTimeout      = 30 * time.Minute
	DefaultInitialRebalanceDelay  = 3 * time.Second
	DefaultNewMemberJoinTimeout   = 5 * time.Minute
	DefaultOffsetMetadataMaxBytes = 4096
	DefaultOffsetsRetention       = 7 * 24 * time.Hour
	DefaultOffsetsRetentionCheck  = 10 * time.Minute
)

// ErrInvalidConfig reports a Config field out of range.
var ErrInvalidConfig = errors.New("group: invalid config")

func (c *Config) withDefaults() (Config, error) {
	out := *c
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&out.MinSessionTimeout, DefaultMinSessionTimeout)
	def(&out.MaxSessionTimeout, DefaultMaxSessionTimeout)
	def(&out.InitialRebalanceDelay, DefaultInitialRebalanceDelay)
	def(&out.NewMemberJoinTimeout, DefaultNewMemberJoinTimeout)
	def(&out.OffsetsRetention, DefaultOffsetsRetention)
	def(&out.OffsetsRetentionCheckInterval, DefaultOffsetsRetentionCheck)
	def(&out.ConsumerHeartbeatInterval, DefaultConsumerHeartbeatInterval)
	if out.InitialRebalanceDelay < 0 {
		out.InitialRebalanceDelay = 0
	}
	if out.OffsetMetadataMaxBytes == 0 {
		out.OffsetMetadataMaxBytes = DefaultOffsetMetadataMaxBytes
	}
	switch {
	case out.MinSessionTimeout < 0 || out.MinSessionTimeout > out.MaxSessionTimeout:
		return out, fmt.Errorf("%w: MinSessionTimeout %v must be within 0 and MaxSessionTimeout %v", ErrInvalidConfig, out.MinSessionTimeout, out.MaxSessionTimeout)
	case out.MaxSessionTimeout.Milliseconds() > math.MaxInt32:
		return out, fmt.Errorf("%w: MaxSessionTimeout %v exceeds an int32 of milliseconds", ErrInvalidConfig, out.MaxSessionTimeout)
	case out.NewMemberJoinTimeout < 0:
		return out, fmt.Errorf("%w: NewMemberJoinTimeout %v is negative", ErrInvalidConfig, out.NewMemberJoinTimeout)
	case out.OffsetsRetention < 0 || out.OffsetsRetentionCheckInterval <= 0:
		return out, fmt.Errorf("%w: OffsetsRetention %v and OffsetsRetentionCheckInterval %v must be positive", ErrInvalidConfig, out.OffsetsRetention, out.OffsetsRetentionCheckInterval)
	case out.ConsumerHeartbeatInterval < 0 || out.ConsumerHeartbeatInterval >= DefaultConsumerSessionTimeout:
		return out, fmt.Errorf("%w: ConsumerHeartbeatInterval %v must be positive and below the consumer group session timeout %v",
			ErrInvalidConfig, out.ConsumerHeartbeatInterval, DefaultConsumerSessionTimeout)
	case out.MigrationPolicy > MigrationDisabled:
		return out, fmt.Errorf("%w: MigrationPolicy %d is not one of the four policies", ErrInvalidConfig, out.MigrationPolicy)
	case out.MaxSize < 0:
		return out, fmt.Errorf("%w: MaxSize %d is negative", ErrInvalidConfig, out.MaxSize)
	case out.OffsetMetadataMaxBytes < 0 || out.OffsetMetadataMaxBytes > maxStringLen:
		return out, fmt.Errorf("%w: OffsetMetadataMaxBytes %d outside 0-%d, what a record's string holds", ErrInvalidConfig, out.OffsetMetadataMaxBytes, maxStringLen)
	}
	if out.Rand == nil {
		var seed [16]byte
		_, _ = crand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
		out.Rand = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	return out, nil
}

// Coordinator is the group coordinator of one offsets log: the classic
// groups whose records that log holds and their committed offsets. It is a
// deterministic state machine in the style of etcd's raft: requests and Tick
// change its state, and what it wants done is collected until Ready hands it
// out. It starts no goroutines and is not safe for concurrent use; its owner
// drives it from one goroutine.
//
// The owner's loop:
//
//	c.Tick(now)                      // fires session, join and sync timers
//	c.JoinGroup(id, req)             // ... any requests, each with an id
//	rd := c.Ready()
//	append rd.Records to the offsets log, in order, with nothing between them
//	deliver rd.Responses             // only after the records are durable
//
// Responses that depend on records are only in the Ready that carries those
// records, so an owner that delivers responses after a successful append
// never acknowledges what it has not stored. If the append fails, the state
// the coordinator already moved to is not durable: the owner calls Unload,
// answers its responses with an error clients retry (the Service answers
// the coordinator error Kafka maps the append's error to), and builds a new
// Coordinator from the log with Replay and Loaded, as Kafka's coordinator
// runtime reverts to its last written offset.
type Coordinator struct {
	cfg    Config
	now    int64 // milliseconds since the Unix epoch
	groups map[string]*classicGroup
	// consumerGroups are the KIP-848 groups; a group id names a classic
	// group or a consumer group, not both (but a consumer group's offsets
	// may outlive it in a simple classic group).
	consumerGroups map[string]*consumerGroup
	// consumerImages are what the offsets log holds of the consumer
	// groups (records_image.go).
	consumerImages map[string]*consumerImage
	topicNames     map[[16]byte]string // by TopicID, to read those records
	offsets        offsetStore
	txns           pendingTxns
	timers         timers
	ready          Ready
	nextOffset     int64 // log offset of the next record of the offsets log
	loaded         bool
	unloaded       bool
}

// Ready is what the coordinator wants done since the last call to Ready.
type Ready struct {
	// Records are to be appended to the offsets log in this order, before
	// any of Responses is delivered. The coordinator has already applied
	// them; their log offsets must follow, one each, from the offset of the
	// last record replayed or appended.
	Records []Record
	// Responses answer requests, each naming the request it answers.
	Responses []Response
}

// NewCoordinator returns a coordinator whose clock reads now. Before it
// serves requests, its owner replays the offsets log into it and calls
// Loaded; an empty log needs only Loaded.
func NewCoordinator(cfg Config, now time.Time) (*Coordinator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Coordinator{
		cfg:    cfg,
		now:    now.UnixMilli(),
		groups: map[string]*classicGroup{},

		consumerGroups: map[string]*consumerGroup{},
	}, nil
}

// Now returns the coordinator's clock.
func (c *Coordinator) Now() time.Time { return time.UnixMilli(c.now) }

// Tick advances the clock to now and fires every timer due by then, in
// deadline order; each fires with the clock at its own deadline, so the
// outcome does not depend on how often Tick is called. A now earlier than
// the clock is ignored.
func (c *Coordinator) Tick(now time.Time) {
	ms := now.UnixMilli()
	for {
		t := c.timers.popDue(ms)
		if t == nil {
			break
		}
		c.now = max(c.now, t.deadline)
		t.fire()
		c.syncConsumerGroups(t.key.group)
	}
	c.now = max(c.now, ms)
}

// NextDeadline returns when the earliest timer is due, so that an owner can
// sleep until then; ok is false when no timer is armed.
func (c *Coordinator) NextDeadline() (deadline time.Time, ok bool) {
	if len(c.timers.heap) == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(c.timers.heap[0].deadline), true
}

// HasReady reports whether Ready would return anything.
func (c *Coordinator) HasReady() bool {
	return len(c.ready.Records) > 0 || len(c.ready.Responses) > 0
}

// Ready returns and clears what the coordinator wants done.
func (c *Coordinator) Ready() Ready {
	rd := c.ready
	c.ready = Ready{}
	return rd
}

func (c *Coordinator) respond(r Response) { c.ready.Responses = append(c.ready.Responses, r) }

// emit queues a record for the offsets log and returns the log offset it
// will have.
func (c *Coordinator) emit(r Record) int64 {
	c.ready.Records = append(c.ready.Records, r)
	c.nextOffset++
	return c.nextOffset - 1
}

// emitGroup queues the record of a classic group's current state. The live
// group already is what the record says. The subscribed topics are read
// again from what is persisted, so that a replay finds the same; Kafka reads
// them only when a generation starts, and so misses a static member that
// restarts with another subscription.
func (c *Coordinator) emitGroup(g *classicGroup) {
	g.computeSubscribed()
	c.emit(EncodeGroupMetadata(GroupMetadataKey{Group: g.id}, g.metadataValue()))
}

// Replay applies one record read back from the offsets log at the given log
// offset. Records of types this package does not know (share and streams
// groups) are skipped, as Kafka's loader skips unknown record types.
func (c *Coordinator) Replay(offset int64, r Record) error {
	if c.loaded {
		return fmt.Errorf("group: Replay of offset %d after Loaded", offset)
	}
	d, err := Decode(r)
	if errors.Is(err, ErrUnknownRecordType) {
		c.nextOffset = max(c.nextOffset, offset+1)
		return nil
	}
	if err != nil {
		return fmt.Errorf("group: offsets log offset %d: %w", offset, err)
	}
	c.nextOffset = max(c.nextOffset, offset+1)
	c.apply(offset, d, r.Producer)
	return nil
}

// apply changes the state by one decoded record (GroupMetadataManager.replay
// and OffsetMetadataManager.replay); producer is set for a transactional
// offset commit.
func (c *Coordinator) apply(offset int64, d Decoded, producer *strand.ProducerIDAndEpoch) {
	switch {
	case d.ConsumerKey != nil:
		c.applyConsumerRecord(*d.ConsumerKey, EncodeConsumerGroup(*d.ConsumerKey, d.ConsumerValue), d.ConsumerValue)
	case d.GroupKey != nil && d.GroupValue == nil:
		delete(c.groups, d.GroupKey.Group)
	case d.GroupKey != nil:
		c.groups[d.GroupKey.Group] = loadClassicGroup(d.GroupKey.Group, *d.GroupValue)
	case d.OffsetValue == nil:
		c.offsets.remove(*d.OffsetKey)
		c.txns.dropPartition(*d.OffsetKey)
	default:
		// Offsets committed without group membership create a "simple"
		// group: Empty, with no protocol type. Kafka stamps it with the
		// clock of whoever creates it, the committer or the loader; no
		// rule reads the stamp of a group without protocol type, and -1
		// makes the two agree.
		if _, ok := c.groups[d.OffsetKey.Group]; !ok && c.consumerGroups[d.OffsetKey.Group] == nil {
			c.groups[d.OffsetKey.Group] = newClassicGroup(d.OffsetKey.Group, Empty, -1)
		}
		c.LearnTopics(d.OffsetKey.Topic)
		v := committed{OffsetCommitValue: *d.OffsetValue, recordOffset: offset}
		if producer != nil {
			c.txns.stage(producer.ProducerID, *d.OffsetKey, v)
		} else {
			c.offsets.put(*d.OffsetKey, v)
		}
	}
}

// Loaded ends loading: every member of a loaded group gets a session timer
// starting now (GroupMetadataManager.onLoaded), and requests are served.
func (c *Coordinator) Loaded() {
	c.loaded = true
	c.scheduleExpiration()
	c.loadedConsumerGroups()
	for _, g := range c.sortedGroups() {
		for _, m := range g.members {
			c.scheduleHeartbeat(g, m, int64(m.sessionTimeoutMs))
		}
		if c.cfg.MaxSize > 0 && len(g.members) > c.cfg.MaxSize {
			c.prepareRebalance(g)
		}
	}
}

// Unload gives up the groups, as a broker does when it stops leading the
// offsets log's partition (GroupMetadataManager.onUnloaded): every classic
// group becomes Dead, parked JoinGroup and SyncGroup requests are answered
// with NOT_COORDINATOR, and timers stop. Later requests get
// COORDINATOR_NOT_AVAILABLE for a Dead group and NOT_COORDINATOR for any
// other, and clients look for the coordinator again.
func (c *Coordinator) Unload() {
	for _, g := range c.sortedGroups() {
		g.transition(Dead, c.now)
		for _, m := range g.members {
			c.completeJoin(g, m, &JoinGroupResponse{GenerationID: -1, MemberID: m.id, Err: errorf(ErrNotCoordinator, "group %q unloaded", g.id)})
			c.completeSync(g, m, &SyncGroupResponse{Err: errorf(ErrNotCoordinator, "group %q unloaded", g.id)})
		}
	}
	c.timers = timers{}
	c.unloaded = true
}

// sortedGroups returns the groups in id order, so that work over all groups
// happens in the same order on every run.
func (c *Coordinator) sortedGroups() []*classicGroup {
	ids := slices.Sorted(maps.Keys(c.groups))
	out := make([]*classicGroup, len(ids))
	for i, id := range ids {
		out[i] = c.groups[id]
	}
	return out
}

// newMemberID returns clientID (or the instance id of a static member)
// followed by "-" and a random UUID, as Kafka makes member ids
// (ClassicGroup.generateMemberId).
func (c *Coordinator) newMemberID(prefix string) string { return prefix + "-" + c.newUUID() }

// newUUID returns a random (version 4) UUID in its text form.
func (c *Coordinator) newUUID() string {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], c.cfg.Rand.Uint64())
	binary.BigEndian.PutUint64(u[8:], c.cfg.Rand.Uint64())
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}
