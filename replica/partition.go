package replica

import (
	"fmt"
	"slices"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// Config configures a Partition. Durations are in ticks: the application
// calls Tick at a fixed interval of its choosing; the defaults assume
// 100 milliseconds, so that they equal Kafka's.
type Config struct {
	// ID is this node.
	ID NodeID
	// Topic and Partition name the partition; messages for another are
	// refused with ErrUnknownTopicOrPartition.
	Topic     string
	Partition int32
	// Log is the partition's log, opened with ExternalHighWatermark.
	Log Log

	// MinInsyncReplicas is how many replicas, the leader included, an
	// AcksAll produce needs in the ISR (min.insync.replicas); default 1.
	MinInsyncReplicas int
	// The fields named Ticks count calls of Tick, as etcd raft's
	// ElectionTick does: the application picks the tick's length, and
	// converts Kafka's milliseconds by it.

	// ReplicaLagTicks is how long a follower may go without catching up to
	// the leader's log end before the leader removes it from the ISR
	// (replica.lag.time.max.ms); checked every half of it. Default 300.
	ReplicaLagTicks int
	// FetchMaxWaitTicks is how long a leader may hold a follower's fetch when
	// it has nothing new (replica.fetch.wait.max.ms); default 5.
	FetchMaxWaitTicks int
	// FetchMaxBytes bounds the records of one fetch response
	// (replica.fetch.max.bytes); default 1 MiB.
	FetchMaxBytes int
	// ProduceTimeoutTicks is how long an AcksAll produce waits for the high
	// watermark when its request names no timeout; default 300.
	ProduceTimeoutTicks int
	// RequestTimeoutTicks is how long a fetch or an ISR change may go
	// unanswered before it is sent again; default 300.
	RequestTimeoutTicks int
	// RetryBackoffTicks is how long a follower waits after an error before it
	// fetches again (replica.fetch.backoff.ms); default 10.
	RetryBackoffTicks int
	// SyncedAcks counts only what replicas have synced towards the high
	// watermark, the leader's own log included, so that an AcksAll result
	// means the batch is on disk on every member of the maximal ISR, not
	// only in their page caches (Kafka counts what they have written).
	// Under FsyncAlways the two are the same; under the other policies
	// the high watermark follows the syncs. Every replica of a partition
	// should use the same setting. A follower under SyncedAcks fetches
	// ahead of its writes, so that its fetches overlap its fsyncs, and a
	// leader admits a follower to the ISR on what it synced, which
	// survives its crash, rather than on what it wrote.
	SyncedAcks bool
	// MaxBatchBytes is the largest batch a produce may carry
	// (message.max.bytes); default log.DefaultMaxBatchBytes. The log's
	// own limit must not be lower.
	MaxBatchBytes int

	// bugs switches historical Kafka bugs back on, for the simulator to
	// prove it catches them, in a build with the strandbugs tag only.
	bugs bugs
}

func (c Config) withDefaults() (Config, error) {
	bad := func(name string, v any, allowed string) error {
		return fmt.Errorf("%w: %s is %v, allowed %s", ErrInvalidConfig, name, v, allowed)
	}
	if c.Log == nil {
		return c, bad("Log", nil, "a log")
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
		min  int
	}{
		{"MinInsyncReplicas", &c.MinInsyncReplicas, 1, 1},
		{"ReplicaLagTicks", &c.ReplicaLagTicks, 300, 2},
		{"FetchMaxWaitTicks", &c.FetchMaxWaitTicks, 5, 0},
		{"FetchMaxBytes", &c.FetchMaxBytes, 1 << 20, 1},
		{"ProduceTimeoutTicks", &c.ProduceTimeoutTicks, 300, 1},
		{"RequestTimeoutTicks", &c.RequestTimeoutTicks, 300, 1},
		{"RetryBackoffTicks", &c.RetryBackoffTicks, 10, 1},
		{"MaxBatchBytes", &c.MaxBatchBytes, log.DefaultMaxBatchBytes, segment.HeaderSize},
	} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < f.min:
			return c, bad(f.name, *f.v, fmt.Sprintf("%d or more", f.min))
		}
	}
	if len(c.Topic) > maxTopicBytes {
		return c, bad("Topic", c.Topic, fmt.Sprintf("at most %d bytes", maxTopicBytes))
	}
	return c, nil
}

// Role is what a replica does for its partition.
type Role uint8

// The roles.
const (
	// RoleNone: not a replica of the partition, or not told yet.
	RoleNone Role = iota
	RoleLeader
	RoleFollower
)

func (r Role) String() string {
	return [...]string{"none", "leader", "follower"}[min(int(r), 2)]
}

// Ready is what the application must do for a partition. Writes go to the
// log in order (ApplyWrites), after those of earlier Readies; Messages go
// to their nodes and Results to their producers at once: the partition
// emits them only when what they report is done. Once Writes are applied,
// call Advance with the Ready; Readies are advanced in the order they
// came, and several may be outstanding.
type Ready struct {
	Writes   []Write
	Messages []Message
	Results  []ProduceResult
	seq      uint64
}

// inflight is a Ready handed out and not yet advanced.
type inflight struct {
	seq         uint64
	end         int64 // the log end once its writes and all before are applied
	hw          int64 // the high watermark then
	writes      bool
	reshapes    bool  // a write that removes records or sets an epoch
	leaderEpoch int32 // the epoch it sets, or -1
}

// Partition is the replication state machine of one partition on one
// node, in the style of etcd-io/raft's RawNode: deterministic and
// single-threaded, driven by Step and Tick, its output taken with Ready.
// It is not safe for concurrent use.
type Partition struct {
	cfg Config
	now int64

	// brokerEpoch is this node's, NoBrokerEpoch until SetBrokerEpoch.
	brokerEpoch     int64
	controllerEpoch int32
	leader          NodeID
	leaderEpoch     int32
	partitionEpoch  int32
	replicas, isr   []NodeID
	role            Role

	logStart int64
	hw       int64
	end      int64 // the log end once every write handed out is applied
	written  int64 // the log end as far as writes are applied
	// hwWritten is the high watermark as far as writes are applied: what
	// consumers reading the log see. AcksAll results wait for it, so
	// that a producer told its batch is committed can read it back.
	hwWritten int64

	writes       []Write
	msgs         []Message
	results      []ProduceResult
	inflight     []inflight
	seq          uint64
	epochPending int32 // a leader epoch write not yet handed out, or -1

	failed error

	// logRetries are the retries answered under bugs.retriesFromLog.
	logRetries []*waitingProduce

	ld leaderState
	fl followerState
}

// New returns a partition over cfg.Log with no role: it waits for a
// LeaderAndISR.
func New(cfg Config) (*Partition, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start, hw, end, err := cfg.Log.Offsets()
	if err != nil {
		return nil, fmt.Errorf("replica: reading the log: %w", err)
	}
	return &Partition{
		cfg: cfg, leader: NoNode, leaderEpoch: -1, partitionEpoch: -1, controllerEpoch: -1,
		logStart: start, hw: hw, hwWritten: hw, end: end, written: end, epochPending: -1,
	}, nil
}

// SetBrokerEpoch tells the partition the broker epoch the controller
// registered this node in (Kafka's broker epoch): its fetches carry it
// (KIP-903), and from then on it takes the controller's messages for that
// epoch only (KIP-380). Until it is set, a message for any epoch but
// NoBrokerEpoch is refused, as a broker applies metadata only once it has
// registered. A broker epoch never goes back: an earlier one is refused
// with ErrStaleBrokerEpoch.
func (p *Partition) SetBrokerEpoch(epoch int64) error {
	if epoch < p.brokerEpoch {
		return fmt.Errorf("%w: broker epoch %d, node %d is in %d", ErrStaleBrokerEpoch, epoch, p.cfg.ID, p.brokerEpoch)
	}
	p.brokerEpoch = epoch
	return nil
}

// Status is a partition's state, for monitoring and tests.
type Status struct {
	Role                        Role
	Leader                      NodeID
	LeaderEpoch, PartitionEpoch int32
	Replicas, ISR, MaximalISR   []NodeID
	// PendingISR is the ISR proposed and not yet answered, if any.
	PendingISR []NodeID
	// HighWatermark is the partition's; LogEndOffset counts every append
	// handed out, applied or not.
	HighWatermark, LogStartOffset, LogEndOffset int64
	// LeaderEpochStartOffset is where the leader's epoch began.
	LeaderEpochStartOffset int64
	Failed                 error
}

// Status returns the partition's state.
func (p *Partition) Status() Status {
	s := Status{
		Role: p.role, Leader: p.leader, LeaderEpoch: p.leaderEpoch, PartitionEpoch: p.partitionEpoch,
		Replicas: slices.Clone(p.replicas), ISR: slices.Clone(p.isr),
		HighWatermark: p.hw, LogStartOffset: p.logStart, LogEndOffset: p.end, Failed: p.failed,
	}
	if p.role == RoleLeader {
		s.MaximalISR = p.maximalISR()
		s.LeaderEpochStartOffset = p.ld.leso
		if p.ld.pending != nil {
			s.PendingISR = slices.Clone(p.ld.pending.isr)
		}
	}
	return s
}

// HasReady reports whether Ready has anything.
func (p *Partition) HasReady() bool {
	return len(p.writes) > 0 || len(p.msgs) > 0 || len(p.results) > 0
}

// Ready returns what the application must do, and takes it off the
// partition: the next Ready holds only what came after.
func (p *Partition) Ready() Ready {
	rd := Ready{Writes: p.writes, Messages: p.msgs, Results: p.results, seq: p.seq}
	p.inflight = append(p.inflight, inflight{seq: p.seq, end: p.end, hw: p.hw, writes: len(p.writes) > 0,
		reshapes: slices.ContainsFunc(p.writes, Write.reshapes), leaderEpoch: p.epochPending})
	p.seq++
	p.writes, p.msgs, p.results, p.epochPending = nil, nil, nil, -1
	return rd
}

// Advance tells the partition that rd's writes are applied. Readies must
// be advanced in the order Ready returned them.
func (p *Partition) Advance(rd Ready) error {
	if len(p.inflight) == 0 || p.inflight[0].seq != rd.seq {
		return fmt.Errorf("%w: Advance of Ready %d out of order", ErrInvalidRequest, rd.seq)
	}
	in := p.inflight[0]
	p.inflight = p.inflight[1:]
	if p.failed != nil {
		return nil
	}
	if in.writes {
		p.written, p.hwWritten = in.end, in.hw
	}
	p.answerLogRetries()
	switch p.role {
	case RoleLeader:
		if !p.ld.ready && in.leaderEpoch == p.leaderEpoch {
			p.leaderReady()
		}
		p.leaderProgress()
	case RoleFollower:
		p.followerSynced()
	}
	return nil
}

// Synced tells the partition that its log synced more of what was
// written, for an application that syncs the log itself (a log that does
// not sync its appends, under Config.SyncedAcks; see DriverOptions.
// SyncWrites): a leader may move its high watermark, and a follower tells
// its leader at once. Without it, Advance and Tick notice syncs.
func (p *Partition) Synced() {
	if p.failed != nil {
		return
	}
	switch p.role {
	case RoleLeader:
		p.leaderProgress()
	case RoleFollower:
		p.followerSynced()
	}
}

// Fail tells the partition that a write failed: what the log holds is no
// longer what the partition handed out, so it stops. Produces waiting for
// a result fail with ErrKafkaStorageError; Step and Tick do nothing from then on.
// Recreate the partition over the reopened log to go on.
func (p *Partition) Fail(err error) {
	if p.failed != nil {
		return
	}
	p.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	p.failProduces(fmt.Errorf("%w: %w", ErrKafkaStorageError, err))
	p.writes = nil
}

// Tick advances the partition's clock by one tick.
func (p *Partition) Tick() {
	if p.failed != nil {
		return
	}
	p.now++
	switch p.role {
	case RoleLeader:
		p.leaderTick()
	case RoleFollower:
		p.followerTick()
	}
}

// Step hands the partition a message addressed to it. A message it cannot
// use returns an error and changes nothing: ErrUnknownTopicOrPartition for
// another partition, ErrInvalidMessage for contradictory fields, ErrStale
// for one that no longer matters, ErrStaleControllerEpoch,
// ErrStaleBrokerEpoch, ErrLeaderEpochReused; a Produce it refuses returns
// the refusal (a *NotLeaderError, ErrInvalidRequiredAcks, ErrNotEnoughReplicas,
// ...) and has no Result.
func (p *Partition) Step(m Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	h := m.Head()
	if h.Topic != p.cfg.Topic || h.Partition != p.cfg.Partition {
		return fmt.Errorf("%w: %s-%d, this is %s-%d", ErrUnknownTopicOrPartition, h.Topic, h.Partition, p.cfg.Topic, p.cfg.Partition)
	}
	if h.To != p.cfg.ID {
		return fmt.Errorf("%w: message for node %d stepped on node %d", ErrInvalidMessage, h.To, p.cfg.ID)
	}
	if p.failed != nil {
		return p.failed
	}
	switch m := m.(type) {
	case *LeaderAndISR:
		return p.stepLeaderAndISR(m)
	case *Produce:
		return p.stepProduce(m)
	case *Fetch:
		return p.stepFetch(m)
	case *FetchResponse:
		return p.stepFetchResponse(m)
	case *AlterPartitionResponse:
		return p.stepAlterPartitionResponse(m)
	default:
		return fmt.Errorf("%w: a partition does not take %T", ErrInvalidMessage, m)
	}
}

// header addresses a message from this node to another about this
// partition.
func (p *Partition) header(to NodeID) Header {
	return Header{From: p.cfg.ID, To: to, Topic: p.cfg.Topic, Partition: p.cfg.Partition}
}

func (p *Partition) send(m Message) { p.msgs = append(p.msgs, m) }

func (p *Partition) write(w Write) { p.writes = append(p.writes, w) }

// writesPending reports whether a write handed out or queued is not yet
// applied.
func (p *Partition) writesPending() bool {
	return len(p.writes) > 0 || slices.ContainsFunc(p.inflight, func(in inflight) bool { return in.writes })
}

// reshapingWritesPending reports whether a write that removes records or
// sets an epoch is handed out or queued and not yet applied.
func (p *Partition) reshapingWritesPending() bool {
	return slices.ContainsFunc(p.writes, Write.reshapes) || slices.ContainsFunc(p.inflight, func(in inflight) bool { return in.reshapes })
}

func (p *Partition) notLeader() error {
	return &NotLeaderError{Leader: p.leader, LeaderEpoch: p.leaderEpoch}
}

// stepLeaderAndISR applies the controller's decision (Kafka's
// Partition.makeLeader and makeFollower).
func (p *Partition) stepLeaderAndISR(m *LeaderAndISR) error {
	if err := validLeaderAndISR(m); err != nil {
		return err
	}
	switch {
	case m.BrokerEpoch != NoBrokerEpoch && m.BrokerEpoch != p.brokerEpoch && !(bugsBuild && p.cfg.bugs.preKIP380):
		// Checked first, as Kafka's KafkaApis does: for an epoch above
		// this node's, it has not registered yet (or has not heard the
		// answer), and the message may still name the leadership its
		// previous life had, in an epoch whose records it may have lost.
		return fmt.Errorf("%w: LeaderAndISR for broker epoch %d, node %d is in %d", ErrStaleBrokerEpoch, m.BrokerEpoch, p.cfg.ID, p.brokerEpoch)
	case m.ControllerEpoch < p.controllerEpoch:
		return fmt.Errorf("%w: controller epoch %d, this node knows %d", ErrStaleControllerEpoch, m.ControllerEpoch, p.controllerEpoch)
	case m.LeaderEpoch < p.leaderEpoch:
		return fmt.Errorf("%w: leader epoch %d, current %d", ErrStale, m.LeaderEpoch, p.leaderEpoch)
	case m.LeaderEpoch == p.leaderEpoch && m.PartitionEpoch <= p.partitionEpoch:
		return fmt.Errorf("%w: partition epoch %d, current %d", ErrStale, m.PartitionEpoch, p.partitionEpoch)
	}
	newEpoch := m.LeaderEpoch > p.leaderEpoch
	if m.Leader == p.cfg.ID && newEpoch && !(bugsBuild && p.cfg.bugs.reuseEpoch) {
		latest, err := p.cfg.Log.LatestEpoch()
		if err != nil {
			return fmt.Errorf("replica: reading the log's epoch: %w", err)
		}
		if latest >= m.LeaderEpoch {
			return fmt.Errorf("%w: told to lead epoch %d, the log already holds epoch %d", ErrLeaderEpochReused, m.LeaderEpoch, latest)
		}
	}
	p.controllerEpoch = m.ControllerEpoch
	wasLeader := p.role == RoleLeader
	oldISR := p.isr
	p.leader, p.leaderEpoch, p.partitionEpoch = m.Leader, m.LeaderEpoch, m.PartitionEpoch
	p.replicas, p.isr = slices.Clone(m.Replicas), slices.Clone(m.ISR)
	switch {
	case m.Leader == p.cfg.ID:
		p.becomeLeader(newEpoch, oldISR)
	case slices.Contains(m.Replicas, p.cfg.ID):
		if wasLeader {
			p.resignLeadership()
		}
		p.becomeFollower(newEpoch || wasLeader)
	default:
		if wasLeader {
			p.resignLeadership()
		}
		p.role = RoleNone
		p.fl = followerState{fetchID: p.fl.fetchID}
	}
	return nil
}

func validLeaderAndISR(m *LeaderAndISR) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: LeaderAndISR: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
	}
	switch {
	case m.LeaderEpoch < 0 || m.PartitionEpoch < 0 || m.ControllerEpoch < 0:
		return bad("negative epoch (controller %d, leader %d, partition %d)", m.ControllerEpoch, m.LeaderEpoch, m.PartitionEpoch)
	case m.Leader != NoNode && !slices.Contains(m.Replicas, m.Leader):
		return bad("leader %d is not a replica %v", m.Leader, m.Replicas)
	case m.Leader != NoNode && !slices.Contains(m.ISR, m.Leader):
		return bad("leader %d is not in the ISR %v", m.Leader, m.ISR)
	}
	for _, list := range [][]NodeID{m.Replicas, m.ISR} {
		for i, n := range list {
			if n < 0 || slices.Contains(list[:i], n) {
				return bad("node %d is negative or repeated in %v", n, list)
			}
		}
	}
	for _, n := range slices.Concat(m.ISR, m.Adding, m.Removing) {
		if !slices.Contains(m.Replicas, n) {
			return bad("node %d is not a replica %v", n, m.Replicas)
		}
	}
	return nil
}

// effectiveMinISR is Kafka's min(min.insync.replicas, replicas).
func (p *Partition) effectiveMinISR() int {
	return min(p.cfg.MinInsyncReplicas, len(p.replicas))
}

// refresh reads the log's offsets, for a replica whose writes are all
// applied: truncations end where the log decides (a batch goes whole).
func (p *Partition) refresh() error {
	start, hw, end, err := p.cfg.Log.Offsets()
	if err != nil {
		p.Fail(err)
		return p.failed
	}
	p.logStart, p.end, p.written = start, end, end
	p.hw, p.hwWritten = hw, hw
	return nil
}

// ownBrokerEpoch is the broker epoch this node's requests carry.
func (p *Partition) ownBrokerEpoch() int64 {
	if bugsBuild && p.cfg.bugs.preKIP903 {
		return NoBrokerEpoch
	}
	return p.brokerEpoch
}
