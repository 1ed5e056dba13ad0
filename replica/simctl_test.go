package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The simulator's second control plane: the real controller of package
// replica/controller instead of the harness's model. Brokers register and
// heartbeat to it over the simulated network (so network partitions
// between brokers and the controller fence brokers), leaders' AlterPartition
// requests go to it, and its LeaderAndISR decisions come back as messages.
// Its state is its record log: a failover replays the stored records into
// a standby controller of the next controller epoch, while the deposed one
// lives on for a while as a zombie whose records the store refuses and
// whose messages still in the network the brokers fence.
//
// Package controller imports package replica, so the tests of package
// replica cannot import it: the adapter lives in the external test package
// (sim_controller_test.go) and installs itself in NewSimController.

// SimController is the real controller as the simulator drives it, over
// one topic with one partition (testTopic-0).
type SimController interface {
	// Register registers a broker's incarnation; synced claims that its
	// replica acknowledged only what it had synced, so that an unclean
	// stop lost nothing acknowledged (controller.Registration.Synced).
	Register(id NodeID, incarnation uint64, clean, synced bool) (brokerEpoch int64, err error)
	// Heartbeat says whether a broker in controlled shutdown may stop.
	Heartbeat(id NodeID, brokerEpoch int64) (canStop bool, err error)
	Shutdown(id NodeID, brokerEpoch int64) error
	AlterPartition(m *AlterPartition) error
	ElectPreferred() error
	// SetUnclean enables or disables unclean election for the topic.
	SetUnclean(enabled bool) error
	Tick() error
	// Drain stores the records decided since the last Drain and returns
	// the messages to send and the leader epochs of the unclean elections
	// reported. A deposed controller's records are refused: Drain returns
	// replica.ErrStaleControllerEpoch and nothing to send.
	Drain() (msgs []Message, unclean []int32, err error)
	// Partition returns the partition's state as the controller decided it.
	Partition() SimPartition
	// Metadata is the partition's state as a broker catching up on the
	// metadata log learns it, for the broker epoch it is registered in.
	Metadata(to NodeID) *LeaderAndISR
	// Epoch is the controller epoch.
	Epoch() int32
	// Failover replays the stored records into a new controller on node,
	// active in the next controller epoch, after checking that the replay
	// gives the state this controller lived through.
	Failover(node NodeID) (SimController, error)
}

// SimPartition is the partition's state in the controller.
type SimPartition struct {
	Leader                      NodeID
	LeaderEpoch, PartitionEpoch int32
	Replicas, ISR, ELR          []NodeID
}

// NewSimController, set by the external test package, makes a controller
// on node with a fresh record store, registers and unfences the brokers
// (returning their broker epochs) and creates testTopic with one
// partition on them, unclean election enabled or not.
var NewSimController func(node NodeID, brokers []NodeID, minISR, sessionTimeout int, unclean bool) (SimController, map[NodeID]int64, error)

// The controller's messages come from a controller node; simControllerLink
// stands for every controller node in the network's cuts.
const (
	simControllerLink = NodeID(100)
	simSessionTimeout = 16
	simHeartbeatEvery = 4
	// simZombieEvents is how many events a deposed controller lives on.
	simZombieEvents = 30
)

// Registration and heartbeats (Kafka's BrokerRegistrationRequest and
// BrokerHeartbeatRequest), as the simulator's own messages. The
// incarnation (Kafka's incarnation ID) tells the controller a retry from a
// restart, and lets a broker ignore the answer to a registration of its
// previous life.
type simRegister struct {
	Header
	Incarnation uint64
	Clean       bool
	Synced      bool
}

type simRegistered struct {
	Header
	Incarnation uint64
	BrokerEpoch int64
}

type simHeartbeat struct {
	Header
	BrokerEpoch int64
	// ShuttingDown asks for a controlled shutdown (Kafka's WantShutDown).
	ShuttingDown bool
}

// simHeartbeatRefused answers a heartbeat the controller refused (a stale
// broker epoch, or one it does not know): the broker registers again.
type simHeartbeatRefused struct {
	Header
	BrokerEpoch int64
}

var errSimOnly = errors.New("a simulator message has no encoding")

func (*simRegister) MarshalBinary() ([]byte, error)         { return nil, errSimOnly }
func (*simRegister) UnmarshalBinary([]byte) error           { return errSimOnly }
func (*simRegister) kind() kind                             { return 0 }
func (*simRegistered) MarshalBinary() ([]byte, error)       { return nil, errSimOnly }
func (*simRegistered) UnmarshalBinary([]byte) error         { return errSimOnly }
func (*simRegistered) kind() kind                           { return 0 }
func (*simHeartbeat) MarshalBinary() ([]byte, error)        { return nil, errSimOnly }
func (*simHeartbeat) UnmarshalBinary([]byte) error          { return errSimOnly }
func (*simHeartbeat) kind() kind                            { return 0 }
func (*simHeartbeatRefused) MarshalBinary() ([]byte, error) { return nil, errSimOnly }
func (*simHeartbeatRefused) UnmarshalBinary([]byte) error   { return errSimOnly }
func (*simHeartbeatRefused) kind() kind                     { return 0 }

// simBroker is a node's side of the control plane.
type simBroker struct {
	incarnation uint64
	// clean says the incarnation began after a clean stop: its log holds
	// everything it wrote.
	clean bool
	// epoch is the broker epoch of this incarnation, 0 before it is
	// registered.
	epoch int64
	beat  int
	// shuttingDown is a controlled shutdown under way; stoppedCleanly
	// says the last incarnation ended with one.
	shuttingDown, stoppedCleanly bool
}

// realControl is the state of a seed run with the real controller.
type realControl struct {
	ctl     SimController
	node    NodeID // the active controller's node
	brokers map[NodeID]*simBroker
	// zombie is the deposed controller while it lives on, until
	// zombieUntil.
	zombie      SimController
	zombieUntil int
	// uncleanEpochs are the leader epochs of reported unclean elections.
	uncleanEpochs []int32
	failovers     int
	cleanStops    int // controlled shutdowns completed
	fencedStale   int // stale controller messages the brokers refused
	// staleBrokerEpoch counts the controller's messages the brokers
	// refused for another broker epoch of theirs (KIP-380).
	staleBrokerEpoch int
	// zombieRefused counts the deposed controllers' decisions the store
	// refused.
	zombieRefused int
	// hideUnclean is a mutation: the unclean elections go unreported.
	hideUnclean bool
	// uncleanEnabled is the topic's unclean.leader.election.enable.
	uncleanEnabled bool
	// leaderless says the partition had no leader after healing: every
	// replica that could lead cleanly restarted uncleanly.
	leaderless bool
	// syncedClaims: a broker restarted after a crash claims that its
	// replica acknowledged only synced records, which SyncedAcks makes
	// true, and keeps its place in the ELR.
	syncedClaims bool
	// reassign, if set, runs reassignments and rebalances (simreassign_test.go).
	reassign *simReassign
}

func (s *sim) startReal(unclean bool) {
	c := s.c
	ids := slices.Clone(c.ctl.replicas)
	ctl, epochs, err := NewSimController(simControllerLink, ids, 2, simSessionTimeout, unclean)
	if err != nil {
		c.t.Fatalf("starting the controller: %v", err)
	}
	s.real = &realControl{ctl: ctl, node: simControllerLink, brokers: map[NodeID]*simBroker{}, uncleanEnabled: unclean}
	for _, id := range ids {
		s.real.brokers[id] = &simBroker{incarnation: 1, clean: true, epoch: epochs[id]}
		if err := c.node(id).p.SetBrokerEpoch(epochs[id]); err != nil {
			c.t.Fatalf("node %d: %v", id, err)
		}
	}
	s.drainController()
}

// isController says whether a node id is a controller's (or the
// controller's address, NoNode).
func isController(id NodeID) bool { return id == NoNode || id >= simControllerLink }

// link is a message's link for the network's cuts: every controller node
// is one end.
func link(m Message) [2]NodeID {
	h := m.Head()
	from, to := h.From, h.To
	if isController(from) {
		from = simControllerLink
	}
	if isController(to) {
		to = simControllerLink
	}
	return [2]NodeID{from, to}
}

// drainController sends what the active controller decided, mirrors its
// partition state in the harness's controller (which the checks and the
// producers read), and notes unclean elections.
func (s *sim) drainController() {
	r, c := s.real, s.c
	msgs, unclean, err := r.ctl.Drain()
	if err != nil {
		s.failf("the active controller's records are refused: %v", err)
	}
	c.queue = append(c.queue, msgs...)
	for _, e := range unclean {
		if !r.uncleanEnabled {
			s.failf("an unclean election (leader epoch %d) with unclean election disabled", e)
		}
		if r.hideUnclean {
			continue
		}
		r.uncleanEpochs = append(r.uncleanEpochs, e)
		c.logf("controller: UNCLEAN election, leader epoch %d", e)
	}
	p := r.ctl.Partition()
	if p.LeaderEpoch != c.ctl.leaderEpoch || p.PartitionEpoch != c.ctl.partitionEpoch || r.ctl.Epoch() != c.ctl.epoch {
		c.logf("controller %d (epoch %d): leader %d epoch %d/%d isr %v elr %v", r.node, r.ctl.Epoch(), p.Leader, p.LeaderEpoch, p.PartitionEpoch, p.ISR, p.ELR)
	}
	c.ctl.epoch, c.ctl.leader, c.ctl.leaderEpoch, c.ctl.partitionEpoch = r.ctl.Epoch(), p.Leader, p.LeaderEpoch, p.PartitionEpoch
	c.ctl.replicas, c.ctl.isr = slices.Clone(p.Replicas), slices.Clone(p.ISR)
	s.checkReassignments()
}

// drainZombie runs the deposed controller's decisions into the store,
// which must refuse every one: nothing of it is sent.
func (s *sim) drainZombie() {
	r := s.real
	if r.zombie == nil {
		return
	}
	msgs, _, err := r.zombie.Drain()
	if err != nil {
		r.zombieRefused++
	}
	if len(msgs) > 0 {
		s.failf("the deposed controller of epoch %d sent %d messages: its records were stored", r.zombie.Epoch(), len(msgs))
	}
	if err != nil && !errors.Is(err, ErrStaleControllerEpoch) {
		s.failf("the deposed controller's records refused for another reason: %v", err)
	}
	if s.events >= r.zombieUntil {
		r.zombie = nil
	}
}

// deliverControl delivers a message of the control plane: anything to or
// from a controller. It reports false for the others, which the harness
// delivers.
func (s *sim) deliverControl(m Message) bool {
	r, c := s.real, s.c
	h := m.Head()
	if !isController(h.From) && !isController(h.To) {
		return false
	}
	if s.cut[link(m)] {
		c.logf("drop %s", describe(m))
		return true
	}
	if isController(h.To) {
		s.toController(m)
		return true
	}
	n := c.node(h.To)
	if n.down {
		c.logf("lost (node down) %s", describe(m))
		return true
	}
	b := r.brokers[h.To]
	switch m := m.(type) {
	case *simRegistered:
		if m.Incarnation == b.incarnation && m.BrokerEpoch > b.epoch {
			b.epoch = m.BrokerEpoch
			b.beat = simHeartbeatEvery // heartbeat at the next tick
			if err := n.p.SetBrokerEpoch(m.BrokerEpoch); err != nil {
				s.failf("node %d registered in broker epoch %d: %v", h.To, m.BrokerEpoch, err)
			}
		}
		c.logf("deliver %d: registered, broker epoch %d (incarnation %d)", h.To, m.BrokerEpoch, m.Incarnation)
	case *simHeartbeatRefused:
		if m.BrokerEpoch == b.epoch {
			b.epoch = 0 // register again
		}
		c.logf("deliver %d: heartbeat of epoch %d refused", h.To, m.BrokerEpoch)
	default:
		// The partition refuses a LeaderAndISR for another broker epoch
		// of its node (KIP-380), and any before its node registered, as
		// a Kafka broker applies the metadata log only once caught up to
		// its own registration (BrokerLifecycleManager's initial
		// catch-up), which fenced its previous life: a restarted node
		// must not take up the leadership it had, in the epoch it had,
		// having lost what it wrote in it.
		err := n.p.Step(m)
		c.logf("deliver %s: %v", describe(m), err)
		switch {
		case errors.Is(err, ErrStaleControllerEpoch):
			r.fencedStale++
		case errors.Is(err, ErrStaleBrokerEpoch):
			r.staleBrokerEpoch++
		case err != nil && !errors.Is(err, ErrStale) && !errors.Is(err, ErrLeaderEpochReused):
			s.failf("step %s: %v", describe(m), err)
		}
	}
	return true
}

// toController hands a broker's message to the active controller: the
// controller's address names whichever controller is active.
func (s *sim) toController(m Message) {
	r, c := s.real, s.c
	h := m.Head()
	reply := Header{From: r.node, To: h.From, Topic: testTopic}
	switch m := m.(type) {
	case *simRegister:
		epoch, err := r.ctl.Register(h.From, m.Incarnation, m.Clean, m.Synced)
		c.logf("deliver %d->controller: register incarnation %d (clean %v, synced %v): epoch %d %v", h.From, m.Incarnation, m.Clean, m.Synced, epoch, err)
		switch {
		case err == nil:
			c.queue = append(c.queue, &simRegistered{Header: reply, Incarnation: m.Incarnation, BrokerEpoch: epoch})
		case !errors.Is(err, ErrStaleBrokerEpoch):
			s.failf("register: %v", err)
		}
	case *simHeartbeat:
		var err error
		if m.ShuttingDown {
			err = r.ctl.Shutdown(h.From, m.BrokerEpoch)
		}
		canStop := false
		if err == nil {
			canStop, err = r.ctl.Heartbeat(h.From, m.BrokerEpoch)
		}
		if err != nil {
			c.logf("deliver %d->controller: heartbeat epoch %d: %v", h.From, m.BrokerEpoch, err)
			c.queue = append(c.queue, &simHeartbeatRefused{Header: reply, BrokerEpoch: m.BrokerEpoch})
		}
		if canStop && m.ShuttingDown {
			defer s.stopCleanly(h.From)
		}
	case *AlterPartition:
		err := r.ctl.AlterPartition(m)
		c.logf("deliver %s: %v", describe(m), err)
	default:
		s.failf("the controller got a %T", m)
	}
	s.drainController()
	if n := c.node(h.From); !n.down {
		// The broker fetches the metadata log: what it lacks comes.
		if st := n.p.Status(); st.LeaderEpoch < c.ctl.leaderEpoch || st.LeaderEpoch == c.ctl.leaderEpoch && st.PartitionEpoch < c.ctl.partitionEpoch {
			s.metadata(h.From)
		}
	}
}

// stabilize delivers every message, in order, until none is left.
func (s *sim) stabilize() {
	c := s.c
	for i := 0; ; i++ {
		c.flush()
		if len(c.queue) == 0 {
			return
		}
		if i >= 100000 {
			s.failf("no quiescence")
		}
		m := c.queue[0]
		c.queue = c.queue[1:]
		if !s.deliverControl(m) {
			c.queue = slices.Insert(c.queue, 0, m)
			c.deliverOne()
		}
		c.checkInvariants()
	}
}

// tickControl is a tick of the control plane: the controllers' clocks,
// and every running broker's heartbeat (or registration).
func (s *sim) tickControl() {
	r, c := s.real, s.c
	if err := r.ctl.Tick(); err != nil {
		s.failf("controller tick: %v", err)
	}
	s.drainController()
	if r.zombie != nil {
		if err := r.zombie.Tick(); err != nil {
			s.failf("deposed controller tick: %v", err)
		}
		s.drainZombie()
	}
	for _, id := range c.live() {
		b := r.brokers[id]
		if b.beat++; b.beat < simHeartbeatEvery {
			continue
		}
		b.beat = 0
		h := Header{From: id, To: NoNode, Topic: testTopic}
		switch {
		case b.epoch == 0:
			c.queue = append(c.queue, &simRegister{Header: h, Incarnation: b.incarnation, Clean: b.clean, Synced: r.syncedClaims})
		case s.cut[[2]NodeID{id, simControllerLink}] || s.r.IntN(25) == 0:
			c.logf("heartbeat of %d lost", id)
		default:
			// Heartbeats arrive at once, or are lost: queued, they
			// would crowd out the replication messages (the
			// simulator delivers one message per event), and their
			// delays are the session timeout's business.
			s.toController(&simHeartbeat{Header: h, BrokerEpoch: b.epoch, ShuttingDown: b.shuttingDown})
		}
	}
}

// restartBroker begins a node's next incarnation: it registers at once.
// A crash under FsyncNever may lose what it wrote, so it says it stopped
// uncleanly and leaves every ISR and ELR (KIP-966), unless the seed's
// brokers claim synced replicas (SyncedAcks acknowledged nothing they had
// not synced); under FsyncAlways its log is whole, as a clean shutdown
// leaves it.
func (s *sim) restartBroker(id NodeID) {
	b := s.real.brokers[id]
	b.incarnation++
	b.clean, b.epoch, b.beat = !s.lossy || b.stoppedCleanly, 0, simHeartbeatEvery
	b.shuttingDown, b.stoppedCleanly = false, false
}

// shutdown begins a node's controlled shutdown: its heartbeats ask for it,
// the controller moves leadership away and takes it out of the ISR, and
// once it leads nothing a heartbeat lets it stop (stopCleanly).
func (s *sim) shutdown(id NodeID) {
	s.real.brokers[id].shuttingDown = true
	s.c.logf("controlled shutdown of %d begins", id)
}

// stopCleanly stops a node at the end of its controlled shutdown: its log
// is flushed first, so that it loses nothing, and it registers clean.
func (s *sim) stopCleanly(id NodeID) {
	n := s.c.node(id)
	if n.down || len(s.c.live()) == 1 {
		return // the simulator keeps a node running: this one waits
	}
	s.c.sync(id)
	n.p.Synced()
	s.crashOnly(id)
	s.real.brokers[id].stoppedCleanly = true
	s.real.cleanStops++
	s.c.logf("%d stopped cleanly", id)
}

// failover makes a standby controller active: it replays the stored
// records in the next controller epoch and tells every replica the
// partition's state, as a broker reads it from the metadata log. The
// deposed controller lives on for a while, unaware.
func (s *sim) failover() {
	r, c := s.real, s.c
	next := simControllerLink + NodeID(1+r.failovers%2)
	ctl, err := r.ctl.Failover(next)
	if err != nil {
		s.failf("failover: %v", err)
	}
	r.failovers++
	r.zombie, r.zombieUntil = r.ctl, s.events+s.r.IntN(simZombieEvents)
	r.ctl, r.node = ctl, next
	c.logf("controller failover to %d, controller epoch %d", next, ctl.Epoch())
	s.drainController()
	s.metadata(c.ctl.replicas...)
}

// metadata sends the active controller's partition state to replicas, as
// a broker catches up on the metadata log (Kafka's KRaft brokers fetch
// it); the harness's controller mirrors that state.
func (s *sim) metadata(to ...NodeID) {
	for _, id := range to {
		s.c.queue = append(s.c.queue, s.real.ctl.Metadata(id))
	}
}

// lost decides whether the loss of a record of leader epoch epoch, found
// by an invariant, is allowed: only an unclean election to a later leader
// epoch may lose an acknowledged or read record. Where two records
// conflict, epoch is the older one's: it is what is lost. An allowed loss
// forgets what was expected from that offset on in the epochs before the
// unclean election, so that the checks go on with what remains; the
// records forgotten are counted.
func (s *sim) lost(off int64, epoch int32, format string, args ...any) {
	r := s.real
	var after int32 = -1
	if r != nil {
		for _, e := range r.uncleanEpochs {
			if e > epoch {
				after = max(after, e)
			}
		}
	}
	if after < 0 {
		s.failf(format, args...)
		return
	}
	s.c.logf("loss after the unclean election of epoch %d: "+format, append([]any{after}, args...)...)
	for o, v := range s.read {
		if o >= off && v.epoch < after {
			delete(s.read, o)
			s.uncleanLost++
		}
	}
	for value, a := range s.acked {
		if a.offset >= off && a.epoch < after {
			delete(s.acked, value)
			s.uncleanLost++
		}
	}
	s.trueHW = min(s.trueHW, off)
	clear(s.checked)
	clear(s.committed)
}

func (s *sim) describeReal() string {
	if s.real == nil {
		return ""
	}
	r := s.real
	return fmt.Sprintf("real controller on %d epoch %d, failovers %d, unclean elections %v, brokers %v\n",
		r.node, r.ctl.Epoch(), r.failovers, r.uncleanEpochs, r.brokerEpochs())
}

func (r *realControl) brokerEpochs() map[NodeID]int64 {
	out := map[NodeID]int64{}
	for id, b := range r.brokers {
		out[id] = b.epoch
	}
	return out
}

// recoverUncleanly is what an operator does with a partition that has no
// leader after every fault healed: every ISR and ELR member restarted
// uncleanly (KIP-966 keeps such a partition offline while unclean
// election is disabled). Nothing acknowledged may be lost yet: each
// acknowledged record is still on some replica. Then the operator enables
// unclean election, and what it loses is reported.
func (s *sim) recoverUncleanly() {
	r, c := s.real, s.c
	r.leaderless = true
	for _, value := range slices.Sorted(maps.Keys(s.acked)) {
		a := s.acked[value]
		if !slices.ContainsFunc(c.nodes, func(n *node) bool {
			es := c.entries(n.id)
			i := entryAt(es, a.offset)
			return i >= 0 && es[i].Value == value
		}) {
			s.lost(a.offset, a.epoch, "acknowledged %s at %d is on no replica of the leaderless partition", value, a.offset)
		}
	}
	c.logf("operator: the partition has no leader; enable unclean election")
	r.uncleanEnabled = true
	if err := r.ctl.SetUnclean(true); err != nil {
		s.failf("enabling unclean election: %v", err)
	}
	s.drainController()
}
