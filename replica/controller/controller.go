package controller

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/replica"
)

// Config configures a Controller.
type Config struct {
	// Node is the node the controller runs on; it is the From of the
	// messages it sends.
	Node replica.NodeID
	// SessionTimeoutTicks is how many ticks a broker may go without a heartbeat
	// before it is fenced (Kafka's broker.session.timeout.ms).
	SessionTimeoutTicks int
	// MinInsyncReplicas is min.insync.replicas: while an ISR is smaller,
	// the replicas that leave it stay eligible leaders (KIP-966's ELR).
	MinInsyncReplicas int
	// RebalanceIntervalTicks is how many ticks pass between checks of leader
	// imbalance (Kafka's leader.imbalance.check.interval.seconds with
	// auto.leader.rebalance.enable); 0 checks never.
	RebalanceIntervalTicks int
	// ImbalanceRatio is the share of a broker's preferred partitions it
	// may not lead before they are given back to it (Kafka's
	// leader.imbalance.per.broker.percentage / 100; Kafka's default 0.10).
	ImbalanceRatio float64
}

func (cfg *Config) validate() error {
	if cfg.SessionTimeoutTicks <= 0 {
		return fmt.Errorf("%w: SessionTimeoutTicks %d, must be positive", replica.ErrInvalidConfig, cfg.SessionTimeoutTicks)
	}
	if cfg.RebalanceIntervalTicks < 0 || cfg.ImbalanceRatio < 0 || cfg.ImbalanceRatio > 1 {
		return fmt.Errorf("%w: RebalanceIntervalTicks %d must not be negative, ImbalanceRatio %v within [0, 1]",
			replica.ErrInvalidConfig, cfg.RebalanceIntervalTicks, cfg.ImbalanceRatio)
	}
	if cfg.MinInsyncReplicas <= 0 {
		return fmt.Errorf("%w: MinInsyncReplicas %d, must be positive", replica.ErrInvalidConfig, cfg.MinInsyncReplicas)
	}
	return nil
}

// Controller is the active controller: it decides broker liveness,
// leaders and ISRs, and writes every decision as a Record. It is a
// deterministic state machine driven by its methods and Tick, with no
// clock, goroutine or I/O inside.
//
// A decision is applied to the controller's State at once and handed out
// by Ready: the application stores Ready.Records in its replicated store
// first, then sends Ready.Messages (LeaderAndISR to the replicas,
// AlterPartitionResponse to leaders), then calls Advance. A controller
// that loses its place (the store refuses its records) must stop; the next
// one is built by New over the replayed records with a higher epoch.
type Controller struct {
	cfg Config
	s   *State
	now int64
	// deadline is when each unfenced broker's session ends. Sessions are
	// not state: a new controller gives every broker a fresh one, as
	// Kafka's does.
	deadline map[replica.NodeID]int64
	rd       Ready
}

// Ready is what the controller decided since the last Advance.
type Ready struct {
	// Records to store, in order, before sending Messages.
	Records []Record
	// Messages to send: LeaderAndISR and AlterPartitionResponse.
	Messages []replica.Message
	// Unclean lists partitions whose leader was elected outside the ISR
	// and ELR: acknowledged records may be lost.
	Unclean []TopicPartition
}

// New makes a controller over s (the replayed records, which it takes
// over) active in the next controller epoch. Its first record says so.
func New(cfg Config, s *State) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, s: s, deadline: map[replica.NodeID]int64{}}
	if err := c.emit(&ControllerRecord{Stamp: Stamp{s.Epoch + 1}, Node: cfg.Node}); err != nil {
		return nil, err
	}
	for id, b := range s.Brokers {
		if !b.Fenced {
			c.deadline[id] = c.now + int64(cfg.SessionTimeoutTicks)
		}
	}
	return c, nil
}

// State returns the controller's state. It must not be changed.
func (c *Controller) State() *State { return c.s }

// Ready returns what was decided since the last Advance.
func (c *Controller) Ready() Ready { return c.rd }

// HasReady says whether Ready has anything.
func (c *Controller) HasReady() bool {
	return len(c.rd.Records)+len(c.rd.Messages)+len(c.rd.Unclean) > 0
}

// Advance acknowledges a Ready: its records are stored and its messages sent.
func (c *Controller) Advance(rd Ready) {
	c.rd.Records = c.rd.Records[len(rd.Records):]
	c.rd.Messages = c.rd.Messages[len(rd.Messages):]
	c.rd.Unclean = c.rd.Unclean[len(rd.Unclean):]
}

func (c *Controller) emit(r Record) error {
	var before []replica.NodeID
	p, isPartition := r.(*PartitionRecord)
	if isPartition {
		if old := c.s.Partitions[TopicPartition{Topic: p.Topic, Partition: p.Partition}]; old != nil {
			before = old.Replicas
		}
	}
	if err := c.s.Apply(r); err != nil {
		return fmt.Errorf("controller: its own decision does not apply (a bug): %w", err)
	}
	c.rd.Records = append(c.rd.Records, r)
	if !isPartition {
		return nil
	}
	// The replicas a reassignment removed learn it too, so that they stop.
	for _, n := range slices.Concat(p.Replicas, minus(before, p.Replicas)) {
		c.rd.Messages = append(c.rd.Messages, c.s.LeaderAndISR(TopicPartition{Topic: p.Topic, Partition: p.Partition}, c.cfg.Node, n))
	}
	return nil
}

func (c *Controller) stamp() Stamp { return Stamp{c.s.Epoch} }

// Tick advances the clock by one tick, fences the brokers whose session
// ended and, every RebalanceIntervalTicks ticks, rebalances leaders.
func (c *Controller) Tick() error {
	c.now++
	for _, id := range slices.Sorted(maps.Keys(c.deadline)) {
		if c.deadline[id] <= c.now {
			if err := c.fence(c.s.Brokers[id]); err != nil {
				return err
			}
		}
	}
	if c.cfg.RebalanceIntervalTicks > 0 && c.now%int64(c.cfg.RebalanceIntervalTicks) == 0 {
		return c.Rebalance()
	}
	return nil
}

// Rebalance gives leadership back to preferred replicas (the first of
// each assignment) on every broker that leads too few of the partitions
// it prefers: more than ImbalanceRatio of them led by others (Kafka's
// checkAndTriggerAutoLeaderRebalance). A partition moves only if its
// preferred replica is live and in the ISR, and not while it is being
// reassigned.
func (c *Controller) Rebalance() error {
	preferred := map[replica.NodeID][]TopicPartition{}
	for _, tp := range c.partitions(func(*Partition) bool { return true }) {
		p := c.s.Partitions[tp]
		preferred[p.Replicas[0]] = append(preferred[p.Replicas[0]], tp)
	}
	for _, b := range slices.Sorted(maps.Keys(preferred)) {
		var imbalanced []TopicPartition
		for _, tp := range preferred[b] {
			if c.s.Partitions[tp].Leader != b {
				imbalanced = append(imbalanced, tp)
			}
		}
		if float64(len(imbalanced)) <= c.cfg.ImbalanceRatio*float64(len(preferred[b])) {
			continue
		}
		for _, tp := range imbalanced {
			p := c.s.Partitions[tp]
			if len(p.Adding)+len(p.Removing) > 0 || !slices.Contains(p.ISR, b) || !c.eligible(tp, b) {
				continue
			}
			if err := c.change(tp, change{isr: p.ISR, preferred: true}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Registration is what a broker says of itself when it registers (Kafka's
// BrokerRegistrationRequest).
type Registration struct {
	// Clean says the previous incarnation shut down cleanly: it found its
	// clean-shutdown marker (KIP-966's PreviousBrokerEpoch).
	Clean bool
	// Synced names the topics whose replicas on the broker acknowledged
	// only what they had synced (their log's FsyncAlways, or
	// replica.Config.SyncedAcks), of those whose logs the broker found in
	// its data directory: an unclean shutdown lost nothing acknowledged
	// from them. A broker that lost its directory, or does not sync before
	// it acknowledges, names none. Names of no topic are ignored.
	Synced []string
	// Offline names the replicas whose logs the broker could not open
	// (KIP-858: a log directory missing from the registration's LogDirs).
	Offline []TopicPartition
}

// Register registers a broker incarnation with only whether it shut down
// cleanly; see RegisterWith.
func (c *Controller) Register(id replica.NodeID, incarnation uint64, clean bool) (int64, error) {
	return c.RegisterWith(id, incarnation, Registration{Clean: clean})
}

// RegisterWith registers a broker incarnation and returns its broker epoch
// (Kafka's ClusterControlManager.registerBroker). The incarnation
// identifies one start of the broker's process (Kafka's incarnation ID)
// and must increase with every start: a registration of the incarnation
// registered is a retry, answered with its epoch and no record; one of an
// earlier incarnation comes from a previous life and is refused with
// ErrStaleBrokerEpoch; a later one is a restart and gets a new epoch. A
// restart while the previous incarnation is unfenced replaces it: the old
// one is fenced first. The broker stays fenced until its first Heartbeat.
//
// An unclean incarnation (not reg.Clean) leaves every ISR and ELR
// (KIP-966's unclean exclusion: Kafka acknowledges from the page cache, so
// it may have lost acknowledged records), but for its replicas of the
// reg.Synced topics, which acknowledged nothing they had not synced and
// stay eligible: a cluster whose every broker was killed elects them from
// the ELR, cleanly. The reg.Offline replicas leave every ISR and ELR
// however the broker shut down, and are offline until ReportOffline says
// otherwise; the others are online again, whatever the previous
// incarnation reported.
func (c *Controller) RegisterWith(id replica.NodeID, incarnation uint64, reg Registration) (int64, error) {
	if id < 0 || incarnation == 0 {
		return 0, fmt.Errorf("%w: broker id %d incarnation %d: the id must not be negative, the incarnation must be positive",
			replica.ErrInvalidRequest, id, incarnation)
	}
	if b := c.s.Brokers[id]; b != nil {
		switch {
		case incarnation == b.Incarnation:
			return b.Epoch, nil
		case incarnation < b.Incarnation:
			return 0, fmt.Errorf("%w: broker %d incarnation %d, registered is the later %d",
				replica.ErrStaleBrokerEpoch, id, incarnation, b.Incarnation)
		case !b.Fenced:
			if err := c.fence(b); err != nil {
				return 0, err
			}
		}
	}
	epoch := c.s.LastBrokerEpoch + 1
	// Only the topics the state has: the claim is about their replicas,
	// and a name no topic has could not even be encoded.
	var synced []string
	for _, t := range slices.Compact(slices.Sorted(slices.Values(reg.Synced))) {
		if c.s.Topics[t] != nil {
			synced = append(synced, t)
		}
	}
	r := &RegisterRecord{Stamp: c.stamp(), Broker: id, BrokerEpoch: epoch, Incarnation: incarnation, Clean: reg.Clean,
		Synced: synced, Offline: c.hosted(id, reg.Offline)}
	if err := c.emit(r); err != nil {
		return 0, err
	}
	b := c.s.Brokers[id]
	for _, tp := range c.partitions(func(p *Partition) bool {
		return slices.Contains(p.ISR, id) || slices.Contains(p.ELR, id)
	}) {
		if lost := !reg.Clean && !slices.Contains(synced, tp.Topic); lost || b.offline(tp) {
			if err := c.exclude(tp, id); err != nil {
				return 0, err
			}
		}
	}
	return epoch, nil
}

// ReportOffline replaces the broker's replicas whose logs failed (Kafka's
// BrokerHeartbeatRequest OfflineLogDirs, KIP-858, here per replica: a
// Strand node has one data directory, and its replicas fail one by one,
// when a write to their log fails or their log is found damaged). Each
// replica newly offline leaves its ISR and ELR, which elects another
// leader where it led (ReplicationControlManager.handleDirectoriesOffline);
// it is never elected while offline, even uncleanly, and an AlterPartition
// naming it is refused (INELIGIBLE_REPLICA). A replica that leaves the set
// (its log reopened: space freed, damage repaired) is eligible again: it
// rejoins the ISR when its leader says it caught up, and a partition
// without a leader whose topic allows unclean election may elect it.
// Only the broker's replicas of partitions the state has count; an
// unchanged set writes nothing, so the broker may send its set with every
// heartbeat. Report before the Heartbeat that unfences, so that the
// elections the unfencing runs know the offline replicas.
func (c *Controller) ReportOffline(id replica.NodeID, epoch int64, offline []TopicPartition) error {
	b, err := c.s.broker(id, epoch)
	if err != nil {
		return err
	}
	was, next := b.Offline, c.hosted(id, offline)
	if slices.Equal(was, next) {
		return nil
	}
	if err := c.emit(&OfflineRecord{Stamp: c.stamp(), Broker: id, BrokerEpoch: epoch, Offline: next}); err != nil {
		return err
	}
	for _, tp := range partitionSet(slices.Concat(was, next)) {
		p := c.s.Partitions[tp]
		switch {
		case p == nil:
		case b.offline(tp) && (slices.Contains(p.ISR, id) || slices.Contains(p.ELR, id)):
			err = c.exclude(tp, id)
		case !b.offline(tp) && p.Leader == replica.NoNode:
			err = c.change(tp, change{isr: p.ISR})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// hosted returns the partitions of tps the state has with the broker
// among their replicas, as a set.
func (c *Controller) hosted(id replica.NodeID, tps []TopicPartition) []TopicPartition {
	return partitionSet(slices.DeleteFunc(slices.Clone(tps), func(tp TopicPartition) bool {
		p := c.s.Partitions[tp]
		return p == nil || !slices.Contains(p.Replicas, id)
	}))
}

// exclude takes a replica out of a partition's ISR and ELR.
func (c *Controller) exclude(tp TopicPartition, id replica.NodeID) error {
	return c.change(tp, change{isr: without(c.s.Partitions[tp].ISR, id), exclude: []replica.NodeID{id}})
}

// Heartbeat renews a broker's session and unfences it if fenced; the
// partitions it could lead that have no leader then elect one. It returns
// whether a broker in controlled shutdown may stop: it leads nothing.
func (c *Controller) Heartbeat(id replica.NodeID, epoch int64) (canStop bool, err error) {
	b, err := c.s.broker(id, epoch)
	if err != nil {
		return false, err
	}
	c.deadline[id] = c.now + int64(c.cfg.SessionTimeoutTicks)
	if b.ShuttingDown {
		return len(c.partitions(func(p *Partition) bool { return p.Leader == id })) == 0, nil
	}
	if !b.Fenced {
		return false, nil
	}
	if err := c.emit(&UnfenceRecord{Stamp: c.stamp(), Broker: id, BrokerEpoch: epoch}); err != nil {
		return false, err
	}
	for _, tp := range c.partitions(func(p *Partition) bool {
		return p.Leader == replica.NoNode && slices.Contains(p.Replicas, id)
	}) {
		if err := c.change(tp, change{isr: c.s.Partitions[tp].ISR}); err != nil {
			return false, err
		}
	}
	return false, nil
}

// Shutdown begins a broker's controlled shutdown: it leaves every ISR, so
// that leadership moves to another ISR member before it stops. Heartbeat
// says when it may stop.
func (c *Controller) Shutdown(id replica.NodeID, epoch int64) error {
	b, err := c.s.broker(id, epoch)
	if err != nil {
		return err
	}
	if b.Fenced || b.ShuttingDown {
		return nil
	}
	if err := c.emit(&ShutdownRecord{Stamp: c.stamp(), Broker: id, BrokerEpoch: epoch}); err != nil {
		return err
	}
	return c.leaveISRs(id)
}

func (c *Controller) fence(b *Broker) error {
	delete(c.deadline, b.ID)
	if err := c.emit(&FenceRecord{Stamp: c.stamp(), Broker: b.ID, BrokerEpoch: b.Epoch}); err != nil {
		return err
	}
	return c.leaveISRs(b.ID)
}

func (c *Controller) leaveISRs(id replica.NodeID) error {
	for _, tp := range c.partitions(func(p *Partition) bool { return slices.Contains(p.ISR, id) }) {
		if err := c.change(tp, change{isr: without(c.s.Partitions[tp].ISR, id)}); err != nil {
			return err
		}
	}
	return nil
}

// partitions returns the partitions that match, in a fixed order so that
// the records are the same on every run.
func (c *Controller) partitions(match func(*Partition) bool) []TopicPartition {
	var tps []TopicPartition
	for tp, p := range c.s.Partitions {
		if match(p) {
			tps = append(tps, tp)
		}
	}
	slices.SortFunc(tps, compareTP)
	return tps
}

func compareTP(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// CreateTopic creates a topic with the given replicas per partition
// (assign.PlaceReplicas computes them as Kafka does, and PlaceTopic with
// it), and the id, configs and unclean election of spec. Every replica must be a registered
// broker, and each partition needs a live one (Kafka's createTopic
// refuses a manual assignment without); the ISR starts as the live ones,
// led by the first. Each config is checked before any record is written
// (a *ConfigError names the first refused). The records are the topic's,
// its configs', then its partitions', as Kafka's createTopic writes them.
func (c *Controller) CreateTopic(name string, assignment [][]replica.NodeID, spec TopicSpec) error {
	if name == "" || len(name) > maxTopicBytes {
		return fmt.Errorf("%w: topic name %q", replica.ErrInvalidRequest, name)
	}
	if c.s.Topics[name] != nil {
		return fmt.Errorf("%w: %q", replica.ErrTopicAlreadyExists, name)
	}
	if len(assignment) == 0 {
		return fmt.Errorf("%w: topic %q without partitions", replica.ErrInvalidReplicaAssignment, name)
	}
	for i, rs := range assignment {
		if len(rs) == 0 || len(rs) > maxNodes || hasDuplicate(rs) {
			return fmt.Errorf("%w: topic %q partition %d replicas %v", replica.ErrInvalidReplicaAssignment, name, i, rs)
		}
		for _, n := range rs {
			if c.s.Brokers[n] == nil {
				return fmt.Errorf("%w: topic %q partition %d: broker %d is not registered",
					replica.ErrInvalidReplicaAssignment, name, i, n)
			}
		}
		if c.first(TopicPartition{Topic: name, Partition: int32(i)}, rs, rs) == replica.NoNode {
			return fmt.Errorf("%w: topic %q partition %d: every replica %v is fenced or in controlled shutdown",
				replica.ErrInvalidReplicaAssignment, name, i, rs)
		}
	}
	if err := CheckTopicConfigs(name, spec.Configs); err != nil {
		return err
	}
	if err := c.emit(&TopicRecord{Stamp: c.stamp(), Name: name, ID: spec.ID, Partitions: int32(len(assignment)), Unclean: spec.Unclean}); err != nil {
		return err
	}
	for _, n := range slices.Sorted(maps.Keys(spec.Configs)) {
		v := spec.Configs[n]
		if err := c.emit(&ConfigRecord{Stamp: c.stamp(), Topic: name, Name: n, Value: &v}); err != nil {
			return err
		}
	}
	for i, rs := range assignment {
		r := &PartitionRecord{Stamp: c.stamp(), Topic: name, Partition: int32(i),
			Replicas: slices.Clone(rs), Leader: replica.NoNode, LastLeader: replica.NoNode}
		for _, n := range rs {
			if c.eligible(TopicPartition{Topic: name, Partition: int32(i)}, n) {
				r.ISR = append(r.ISR, n)
			}
		}
		if len(r.ISR) > 0 {
			r.Leader = r.ISR[0]
		}
		if err := c.emit(r); err != nil {
			return err
		}
	}
	return nil
}

// PlaceTopic creates a topic, as CreateTopic does with spec, whose
// replicas assign.PlaceReplicas places on the live brokers as Kafka's
// AdminUtils does, the first partition's leader at startIndex of the
// brokers in id order (Kafka draws it at random; the caller does, to keep
// the controller deterministic).
func (c *Controller) PlaceTopic(name string, partitions, replicationFactor, startIndex int, spec TopicSpec) error {
	var live []assign.Broker
	for _, id := range slices.Sorted(maps.Keys(c.s.Brokers)) {
		if c.acceptable(id) {
			live = append(live, assign.Broker{ID: int32(id)})
		}
	}
	placed, err := assign.PlaceReplicas(live, partitions, replicationFactor, startIndex, startIndex, -1)
	if err != nil {
		return fmt.Errorf("%w: topic %q: %w", replica.ErrInvalidReplicaAssignment, name, err)
	}
	assignment := make([][]replica.NodeID, len(placed))
	for i, rs := range placed {
		for _, id := range rs {
			assignment[i] = append(assignment[i], replica.NodeID(id))
		}
	}
	return c.CreateTopic(name, assignment, spec)
}

// SetUnclean enables or disables unclean leader election for a topic,
// in place of its unclean.leader.election.enable config if it has one.
// Enabling it elects a leader, uncleanly, for each of its partitions that
// has none and a live replica.
func (c *Controller) SetUnclean(name string, unclean bool) error {
	t := c.s.Topics[name]
	if t == nil {
		return fmt.Errorf("%w: topic %q", replica.ErrUnknownTopicOrPartition, name)
	}
	if err := c.emit(&TopicRecord{Stamp: c.stamp(), Name: name, ID: t.ID, Partitions: t.Partitions, Unclean: unclean}); err != nil {
		return err
	}
	if _, ok := t.Configs[uncleanConfig]; ok {
		if err := c.emit(&ConfigRecord{Stamp: c.stamp(), Topic: name, Name: uncleanConfig}); err != nil {
			return err
		}
	}
	return c.reconsider(name)
}

// ElectPreferred makes the first replica of the assignment the leader, if
// it is live and in the ISR (Kafka's preferred leader election).
func (c *Controller) ElectPreferred(tp TopicPartition) error {
	p := c.s.Partitions[tp]
	if p == nil {
		return fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	}
	pref := p.Replicas[0]
	if p.Leader == pref {
		return fmt.Errorf("%w: %v is led by its preferred replica %d", replica.ErrElectionNotNeeded, tp, pref)
	}
	if !slices.Contains(p.ISR, pref) || !c.eligible(tp, pref) {
		return fmt.Errorf("%w: %v: replica %d is not live and in the ISR %v",
			replica.ErrPreferredLeaderNotAvailable, tp, pref, p.ISR)
	}
	return c.change(tp, change{isr: p.ISR, preferred: true})
}

// ElectUnclean elects a leader for a partition that has none, uncleanly if
// it must, whatever its topic allows: an operator's explicit consent to
// losing acknowledged records on this partition (Kafka's ElectLeaders with
// ElectionType UNCLEAN). The election is the one change makes, the
// ISR and ELR first, and is reported in Ready.Unclean if unclean. A
// partition with a leader needs none (ErrElectionNotNeeded); one without a
// live replica gets none (ErrEligibleLeadersNotAvailable).
func (c *Controller) ElectUnclean(tp TopicPartition) error {
	p := c.s.Partitions[tp]
	switch {
	case p == nil:
		return fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	case p.Leader != replica.NoNode:
		return fmt.Errorf("%w: %v is led by %d", replica.ErrElectionNotNeeded, tp, p.Leader)
	}
	if err := c.change(tp, change{isr: p.ISR, unclean: true}); err != nil {
		return err
	}
	if c.s.Partitions[tp].Leader == replica.NoNode {
		return fmt.Errorf("%w: %v: none of the replicas %v is live", replica.ErrEligibleLeadersNotAvailable, tp, p.Replicas)
	}
	return nil
}

// AlterPartition handles a leader's ISR change, checked in Kafka's order
// (ReplicationControlManager.alterPartition): an epoch from the future
// means this controller is stale (NOT_CONTROLLER), an older leader epoch
// is fenced, only the leader may ask, the partition epoch is compared and
// set (INVALID_UPDATE_VERSION), the ISR must be a set of replicas holding
// the leader, and every member must be a registered, unfenced broker not
// shutting down, in the broker epoch the leader names for it
// (INELIGIBLE_REPLICA; KIP-903). Before all that, as Kafka checks the
// request before its partitions, the leader's own broker epoch must be
// its registered one (STALE_BROKER_EPOCH). NoBrokerEpoch skips a broker
// epoch check. The leader gets an AlterPartitionResponse in Ready either
// way; the error is also returned.
//
// An ISR that completes a reassignment removing the leader moves the
// lead: the change is made, and answered with ErrNewLeaderElected, as
// KRaft answers it (NEW_LEADER_ELECTED), since the sender leads no more.
//
// The message carries no LeaderRecoveryState: the replica package's
// leaders recover at once, as Kafka's brokers do, which say RECOVERED in
// every AlterPartition (Partition.prepareIsrExpand). So any proposal of a
// recovering leader ends its recovery (KIP-704), the first growth of its
// ISR included.
func (c *Controller) AlterPartition(m *replica.AlterPartition) error {
	tp := TopicPartition{Topic: m.Topic, Partition: m.Partition}
	err := c.alterPartition(m)
	p := c.s.Partitions[tp]
	if err == nil && p.Leader != m.From {
		err = fmt.Errorf("%w: %v: the ISR completed a reassignment that moved the lead from %d to %d",
			replica.ErrNewLeaderElected, tp, m.From, p.Leader)
	}
	resp := &replica.AlterPartitionResponse{
		Header: replica.Header{From: c.cfg.Node, To: m.From, Topic: m.Topic, Partition: m.Partition},
		Err:    replica.CodeOf(err),
	}
	if err == nil {
		resp.Leader, resp.LeaderEpoch, resp.PartitionEpoch, resp.ISR = p.Leader, p.LeaderEpoch, p.PartitionEpoch, p.ISR
	}
	c.rd.Messages = append(c.rd.Messages, resp)
	return err
}

func (c *Controller) alterPartition(m *replica.AlterPartition) error {
	tp := TopicPartition{Topic: m.Topic, Partition: m.Partition}
	p := c.s.Partitions[tp]
	isr := m.Nodes()
	switch {
	case m.BrokerEpoch != replica.NoBrokerEpoch && !c.registeredIn(m.From, m.BrokerEpoch):
		return fmt.Errorf("%w: %v: the leader %d asks in broker epoch %d, not its registered one",
			replica.ErrStaleBrokerEpoch, tp, m.From, m.BrokerEpoch)
	case p == nil:
		return fmt.Errorf("%w: %v", replica.ErrUnknownTopicOrPartition, tp)
	case m.LeaderEpoch > p.LeaderEpoch || m.PartitionEpoch > p.PartitionEpoch:
		return fmt.Errorf("%w: %v leader epoch %d partition epoch %d, ahead of %d and %d",
			replica.ErrNotController, tp, m.LeaderEpoch, m.PartitionEpoch, p.LeaderEpoch, p.PartitionEpoch)
	case m.LeaderEpoch < p.LeaderEpoch:
		return fmt.Errorf("%w: %v leader epoch %d, current %d", replica.ErrFencedLeaderEpoch, tp, m.LeaderEpoch, p.LeaderEpoch)
	case m.From != p.Leader:
		return fmt.Errorf("%w: %v: node %d is not the leader %d", replica.ErrInvalidRequest, tp, m.From, p.Leader)
	case m.PartitionEpoch < p.PartitionEpoch:
		return fmt.Errorf("%w: %v partition epoch %d, current %d", replica.ErrInvalidUpdateVersion, tp, m.PartitionEpoch, p.PartitionEpoch)
	case hasDuplicate(isr) || !subset(isr, p.Replicas) || !slices.Contains(isr, p.Leader):
		return fmt.Errorf("%w: %v: ISR %v is not a set of the replicas %v holding the leader %d",
			replica.ErrInvalidRequest, tp, isr, p.Replicas, p.Leader)
	}
	for _, b := range m.ISR {
		if !c.acceptable(b.ID) {
			return fmt.Errorf("%w: %v: replica %d is not a live broker", replica.ErrIneligibleReplica, tp, b.ID)
		}
		if c.offline(tp, b.ID) {
			return fmt.Errorf("%w: %v: replica %d is offline: its broker reported its log failed",
				replica.ErrIneligibleReplica, tp, b.ID)
		}
		if b.BrokerEpoch != replica.NoBrokerEpoch && !c.registeredIn(b.ID, b.BrokerEpoch) {
			// KIP-903: the leader counted fetches of an earlier life of
			// the broker, which the one registered since may lack.
			return fmt.Errorf("%w: %v: replica %d in broker epoch %d, registered in %d",
				replica.ErrIneligibleReplica, tp, b.ID, b.BrokerEpoch, c.s.Brokers[b.ID].Epoch)
		}
	}
	return c.change(tp, change{isr: isr, recovered: p.Recovering})
}

// registeredIn says whether a broker's registration is in the epoch.
func (c *Controller) registeredIn(id replica.NodeID, epoch int64) bool {
	b := c.s.Brokers[id]
	return b != nil && b.Epoch == epoch
}

// acceptable says whether a broker's replicas may lead or be in an ISR: a
// registered broker, unfenced, not shutting down.
func (c *Controller) acceptable(n replica.NodeID) bool {
	b := c.s.Brokers[n]
	return b != nil && !b.Fenced && !b.ShuttingDown
}

// eligible says whether a broker's replica of tp may lead or be in its
// ISR: the broker is acceptable and the replica online (Kafka's
// LeaderAcceptor, which asks hasOnlineDir of the replica's directory).
func (c *Controller) eligible(tp TopicPartition, n replica.NodeID) bool {
	return c.acceptable(n) && !c.offline(tp, n)
}

// change is a partition change: the ISR it gets, and what else happens.
type change struct {
	isr []replica.NodeID
	// exclude leaves the ELR (an unclean shutdown, an offline replica).
	exclude []replica.NodeID
	// preferred makes the first replica leader (checked by the caller).
	preferred bool
	// recovered ends a RECOVERING state.
	recovered bool
	// unclean allows an unclean election whatever the topic allows.
	unclean bool
	// layout, if set, replaces the replicas (a reassignment's steps).
	layout *layout
	// bumpLeaderEpoch takes a new leader epoch even if the leader stays:
	// replicas left the partition, and a leader epoch is how they learn it
	// (KAFKA-13972).
	bumpLeaderEpoch bool
}

type layout struct{ replicas, adding, removing []replica.NodeID }

// change writes a partition's next state, if it differs (Kafka's
// PartitionChangeBuilder): the ISR, the ELR that KIP-966 keeps while the
// ISR is below MinInsyncReplicas, and a leader.
//
// The leader stays while valid (in the ISR, live). Otherwise it is the
// first live replica in assignment order that is in the ISR; with an empty
// ISR, the first live ELR member, which becomes the ISR; only if the topic
// allows unclean election (or ElectUnclean asks for one), the last leader
// if the ISR and ELR are empty and it is live (KIP-966's last known
// leader, which Kafka elects even where the topic does not allow unclean
// election), else the first live replica, alone in the ISR, RECOVERING,
// reported in Ready.Unclean. Else there is no leader, and the one lost is
// remembered as the last leader. Live means eligible: an acceptable
// broker whose replica is online; an offline replica never joins the ELR.
// A new leader takes a new leader epoch; every change takes a new
// partition epoch.
func (c *Controller) change(tp TopicPartition, ch change) error {
	old := c.s.Partitions[tp]
	next := PartitionRecord{
		Stamp: c.stamp(), Topic: tp.Topic, Partition: tp.Partition,
		Replicas: old.Replicas, Adding: old.Adding, Removing: old.Removing,
		ISR: slices.Clone(ch.isr), Leader: replica.NoNode,
		LeaderEpoch: old.LeaderEpoch, PartitionEpoch: old.PartitionEpoch + 1,
		Recovering: old.Recovering && !ch.recovered, LastLeader: old.LastLeader,
	}
	if l := ch.layout; l != nil {
		next.Replicas, next.Adding, next.Removing = l.replicas, l.adding, l.removing
	}
	if len(next.ISR) < c.minISR(tp.Topic) {
		for _, n := range append(slices.Clone(old.ELR), old.ISR...) {
			if slices.Contains(next.Replicas, n) && !slices.Contains(ch.exclude, n) && !c.offline(tp, n) &&
				!slices.Contains(next.ISR, n) && !slices.Contains(next.ELR, n) {
				next.ELR = append(next.ELR, n)
			}
		}
	}
	unclean := false
	switch {
	case ch.preferred:
		next.Leader = next.Replicas[0]
	case slices.Contains(next.ISR, old.Leader) && c.eligible(tp, old.Leader):
		next.Leader = old.Leader
	default:
		next.Leader = c.first(tp, next.Replicas, next.ISR)
		if next.Leader == replica.NoNode && len(next.ISR) == 0 {
			if next.Leader = c.first(tp, next.Replicas, next.ELR); next.Leader != replica.NoNode {
				next.ISR, next.ELR = []replica.NodeID{next.Leader}, without(next.ELR, next.Leader)
				if len(next.ISR) >= c.minISR(tp.Topic) {
					// The leader alone may now commit, which the rest of
					// the ELR would miss (Kafka's PartitionChangeBuilder
					// keeps them, computing the ELR before the election).
					next.ELR = nil
				}
			}
		}
		if next.Leader == replica.NoNode && (ch.unclean || c.s.Topics[tp.Topic].unclean()) {
			next.Leader = c.first(tp, next.Replicas, next.Replicas)
			if len(next.ISR)+len(next.ELR) == 0 {
				if last := c.first(tp, next.Replicas, []replica.NodeID{old.LastLeader}); last != replica.NoNode {
					next.Leader = last
				}
			}
			if next.Leader != replica.NoNode {
				next.ISR, next.ELR, next.Recovering, unclean = []replica.NodeID{next.Leader}, nil, true, true
			}
		}
	}
	if next.Leader == replica.NoNode && old.Leader != replica.NoNode {
		next.LastLeader = old.Leader
	}
	if next.Leader != replica.NoNode || !slices.Contains(next.Replicas, next.LastLeader) {
		next.LastLeader = replica.NoNode
	}
	if next.Leader != old.Leader || ch.bumpLeaderEpoch {
		next.LeaderEpoch++
	}
	if next.LeaderEpoch == old.LeaderEpoch && next.Leader == old.Leader && next.Recovering == old.Recovering &&
		slices.Equal(next.ISR, old.ISR) && slices.Equal(next.ELR, old.ELR) && slices.Equal(next.Replicas, old.Replicas) &&
		slices.Equal(next.Adding, old.Adding) && slices.Equal(next.Removing, old.Removing) {
		return nil
	}
	if err := c.emit(&next); err != nil {
		return err
	}
	if unclean {
		c.rd.Unclean = append(c.rd.Unclean, tp)
	}
	return c.maybeCompleteReassignment(tp)
}

// first returns the first replica of tp in assignment order that is in
// set and eligible, or NoNode.
func (c *Controller) first(tp TopicPartition, replicas, set []replica.NodeID) replica.NodeID {
	for _, n := range replicas {
		if slices.Contains(set, n) && c.eligible(tp, n) {
			return n
		}
	}
	return replica.NoNode
}

// offline says whether a broker's replica of tp is offline.
func (c *Controller) offline(tp TopicPartition, n replica.NodeID) bool {
	b := c.s.Brokers[n]
	return b != nil && b.offline(tp)
}

func without(ns []replica.NodeID, n replica.NodeID) []replica.NodeID {
	return minus(ns, []replica.NodeID{n})
}

// minus returns a without the members of b, in a's order.
func minus(a, b []replica.NodeID) []replica.NodeID {
	return slices.DeleteFunc(slices.Clone(a), func(n replica.NodeID) bool { return slices.Contains(b, n) })
}
