package replica

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The deterministic simulator: a seed drives random message delivery
// (reordering), loss and duplication, ticks, produces with every acks
// level, and node crashes and restarts, with a controller that fences a
// crashed node out of the ISR and elects cleanly from the rest (never
// uncleanly). After every event the invariants of research/replica.md
// section 4 that the partition can break are checked; at the end the
// faults stop, everything heals, and every acks=all acknowledged record
// must be on every replica at the offset it was acknowledged at. A failure
// names its seed and prints the trace; the same seed replays it exactly.
//
// This is a first version: one partition, three nodes, FsyncAlways (a
// crash loses nothing the state machine was told is written). Lossy
// crashes, network partitions, controller failover and the mutation
// switches are the next steps.

var simSeeds = flag.Int("sim.seeds", 0, "simulator seeds to run (default 100, 20 with -short)")

type simProduce struct {
	value string
	acks  Acks
}

type sim struct {
	c        *cluster
	r        *rand.Rand
	produced map[uint64]simProduce
	acked    map[string]int64 // acks=all values and the offsets acknowledged
	written  map[[2]int64]string
	// read is what a consumer read from a leader below its high
	// watermark: offset -> value. Invariant 10: never replaced.
	read     map[int64]string
	leaderHW map[[2]int64]int64 // (node, leader epoch) -> high watermark seen
	next     int
	events   int
	// cut holds the directed links that lose every message: network
	// partitions, symmetric or not. The controller's links never break.
	cut map[[2]NodeID]bool
}

func newSim(t testingT, seed uint64, bug bugs) *sim {
	c := newCluster(t, 1, 2, 3).start(func(cfg *Config) {
		cfg.bugs = bug
		cfg.ReplicaLagTime = 10
		cfg.RequestTimeout = 8
		cfg.FetchMaxWait = 2
		cfg.ProduceTimeout = 30
		cfg.MinInsyncReplicas = 2
	})
	s := &sim{
		c: c, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		produced: map[uint64]simProduce{}, acked: map[string]int64{},
		written: map[[2]int64]string{}, read: map[int64]string{}, leaderHW: map[[2]int64]int64{}, cut: map[[2]NodeID]bool{},
	}
	c.drop = func(m Message) bool { h := m.Head(); return s.cut[[2]NodeID{h.From, h.To}] }
	c.elect(1)
	return s
}

func (s *sim) live() []NodeID {
	var out []NodeID
	for _, n := range s.c.nodes {
		if !n.down {
			out = append(out, n.id)
		}
	}
	return out
}

// crash fails a node; the controller fences it out of the ISR unless it
// is the last member, and elects another leader if it led (Kafka's
// broker fencing and offline election, with unclean election off).
func (s *sim) crash(id NodeID) {
	c := s.c
	c.crash(id)
	ctl := &c.ctl
	changed := false
	if len(ctl.isr) > 1 && slices.Contains(ctl.isr, id) {
		ctl.isr = slices.DeleteFunc(slices.Clone(ctl.isr), func(n NodeID) bool { return n == id })
		changed = true
	}
	if ctl.leader == id {
		ctl.leader = NoNode
		for _, n := range ctl.isr {
			if !c.node(n).down {
				ctl.leader = n
				break
			}
		}
		ctl.leaderEpoch++
		changed = true
	}
	if changed {
		ctl.partitionEpoch++
		c.logf("controller: %d fenced; leader %d epoch %d isr %v", id, ctl.leader, ctl.leaderEpoch, ctl.isr)
		c.announce(NoNode)
	}
}

// restart brings a node back; the controller tells it the partition's
// state, and elects it if the partition had no leader and it is the ISR's
// last member.
func (s *sim) restart(id NodeID) {
	c := s.c
	c.restart(id)
	ctl := &c.ctl
	if ctl.leader == NoNode && slices.Contains(ctl.isr, id) {
		ctl.leader = id
		ctl.leaderEpoch++
		ctl.partitionEpoch++
		c.logf("controller: elect %d epoch %d", id, ctl.leaderEpoch)
		c.announce(NoNode)
		return
	}
	c.queue = append(c.queue, c.leaderAndISR(id))
}

func (s *sim) produce() {
	s.next++
	value := fmt.Sprintf("v%d", s.next)
	acks := []Acks{AcksNone, AcksLeader, AcksAll, AcksAll}[s.r.IntN(4)]
	live := s.live()
	at := live[s.r.IntN(len(live))]
	if s.c.ctl.leader != NoNode && !s.c.node(s.c.ctl.leader).down && s.r.IntN(4) > 0 {
		at = s.c.ctl.leader
	}
	id, err := s.c.produce(at, acks, value)
	if err == nil {
		s.produced[id] = simProduce{value: value, acks: acks}
	}
}

// step runs one random event.
func (s *sim) step() {
	c := s.c
	c.flush()
	s.collectResults()
	s.events++
	switch k := s.r.IntN(100); {
	case k < 45 && len(c.queue) > 0:
		i := s.r.IntN(min(len(c.queue), 4)) // mostly in order, sometimes not
		m := c.queue[i]
		switch d := s.r.IntN(100); {
		case d < 4:
			c.queue = slices.Delete(c.queue, i, i+1)
			c.logf("drop %s", describe(m))
			return
		case d < 7:
			c.queue = append(c.queue, m)
			c.logf("duplicate %s", describe(m))
		}
		c.queue = slices.Delete(c.queue, i, i+1)
		c.queue = slices.Insert(c.queue, 0, m)
		c.deliverOne()
	case k < 60:
		s.produce()
	case k < 95:
		for _, n := range c.nodes {
			if !n.down {
				n.p.Tick()
			}
		}
	case k < 96:
		if live := s.live(); len(live) > 1 {
			s.crash(live[s.r.IntN(len(live))])
		}
	case k < 97:
		s.partition()
	default:
		for _, n := range c.nodes {
			if n.down {
				s.restart(n.id)
				break
			}
		}
	}
	c.flush()
	s.collectResults()
	s.check()
}

// partition cuts a link, both ways or one, or heals every cut.
func (s *sim) partition() {
	if len(s.cut) > 0 && s.r.IntN(2) == 0 {
		clear(s.cut)
		s.c.logf("network healed")
		return
	}
	a := NodeID(1 + s.r.IntN(3))
	b := NodeID(1 + (int(a)+s.r.IntN(2))%3)
	s.cut[[2]NodeID{a, b}] = true
	if s.r.IntN(2) == 0 {
		s.cut[[2]NodeID{b, a}] = true
		s.c.logf("network: cut %d <-> %d", a, b)
		return
	}
	s.c.logf("network: cut %d -> %d", a, b)
}

// collectResults checks every new acks=all success against the leader
// that gave it: the record is in its log at the offset acknowledged, below
// its high watermark (invariant 9).
func (s *sim) collectResults() {
	for _, id := range slices.Sorted(maps.Keys(s.c.results)) {
		r := s.c.results[id]
		pr, ok := s.produced[id]
		if !ok {
			continue
		}
		delete(s.produced, id)
		if r.Err != nil || pr.acks != AcksAll {
			continue
		}
		n := s.c.node(r.From)
		if n.down {
			continue // it crashed after the result; the result stands
		}
		hw := s.c.hwAtResult[id]
		s.requiref(r.LastOffset < hw, "acks=all %s at %d acknowledged while the log's HW was %d", pr.value, r.LastOffset, hw)
		es := s.c.entries(r.From)
		i := slices.IndexFunc(es, func(e entry) bool { return e.Offset == r.BaseOffset })
		s.requiref(i >= 0 && es[i].Value == pr.value, "acks=all %s acknowledged at %d, not there", pr.value, r.BaseOffset)
		s.acked[pr.value] = r.BaseOffset
	}
}

func (s *sim) requiref(ok bool, format string, args ...any) {
	if !ok {
		s.c.t.Fatalf("%s\nevent %d; trace:\n%s", fmt.Sprintf(format, args...), s.events, s.c.dumpTrace())
	}
}

// check verifies the invariants after an event: one value per (epoch,
// offset) across nodes and time (2), leader high watermark monotonic in
// its epoch (4), logs matching below the lower high watermark of any two
// running nodes (5), every acknowledged acks=all record on every running
// member of the controller's ISR (6), and what a consumer read from a
// leader below its high watermark never replaced on any node below its
// own (10).
func (s *sim) check() {
	c := s.c
	logs := map[NodeID][]entry{}
	for _, n := range c.nodes {
		if n.down {
			continue
		}
		es := c.entries(n.id)
		logs[n.id] = es
		for _, e := range es {
			key := [2]int64{int64(e.Epoch), e.Offset}
			if v, ok := s.written[key]; ok {
				s.requiref(v == e.Value, "epoch %d offset %d holds %s on node %d and %s elsewhere", e.Epoch, e.Offset, e.Value, n.id, v)
			}
			s.written[key] = e.Value
		}
		// Whatever any replica holds below its high watermark is
		// committed: a consumer may have read it, and it must stay.
		hw := c.hw(n.id)
		for _, e := range es {
			if e.Offset >= hw {
				break
			}
			if v, ok := s.read[e.Offset]; ok {
				s.requiref(v == e.Value, "offset %d was read as %s, node %d now has %s below its HW %d", e.Offset, v, n.id, e.Value, hw)
			}
			if n.p.Status().Role == RoleLeader {
				s.read[e.Offset] = e.Value
			}
		}
		st := n.p.Status()
		if st.Role == RoleLeader {
			key := [2]int64{int64(n.id), int64(st.LeaderEpoch)}
			s.requiref(st.HighWatermark >= s.leaderHW[key], "node %d's HW went back from %d to %d in epoch %d", n.id, s.leaderHW[key], st.HighWatermark, st.LeaderEpoch)
			s.leaderHW[key] = st.HighWatermark
		}
	}
	for _, na := range c.nodes {
		for _, nb := range c.nodes {
			a, b := na.id, nb.id
			ea, okA := logs[a]
			eb, okB := logs[b]
			if a >= b || !okA || !okB {
				continue
			}
			bound := min(c.hw(a), c.hw(b))
			for i := 0; i < len(ea) && i < len(eb) && ea[i].Offset < bound; i++ {
				s.requiref(ea[i] == eb[i], "nodes %d and %d differ below %d: %v vs %v", a, b, bound, ea[i], eb[i])
			}
		}
	}
	for _, value := range slices.Sorted(maps.Keys(s.acked)) { // sorted: a replay reports the same
		off := s.acked[value]
		for _, id := range c.ctl.isr {
			if es, ok := logs[id]; ok && c.ctl.leader != NoNode {
				i := slices.IndexFunc(es, func(e entry) bool { return e.Offset == off })
				s.requiref(i >= 0 && es[i].Value == value, "acknowledged %s at %d missing from ISR member %d", value, off, id)
			}
		}
	}
}

// heal stops the faults, restarts every node and lets the cluster settle;
// then every log is the leader's, and holds every acknowledged record.
func (s *sim) heal() {
	c := s.c
	for _, n := range c.nodes {
		if n.down {
			s.restart(n.id)
		}
	}
	// The simulation loses control messages, which Kafka's brokers would
	// get again from the metadata log: repeat the controller's state.
	clear(s.cut)
	c.announce(NoNode)
	for range 100 {
		c.tick(1)
		s.collectResults()
		s.check()
	}
	leader := c.ctl.leader
	s.requiref(leader != NoNode, "no leader after healing")
	want := c.entries(leader)
	for _, n := range c.nodes {
		s.requiref(slices.Equal(c.entries(n.id), want), "node %d's log differs from the leader's after healing", n.id)
	}
	for _, value := range slices.Sorted(maps.Keys(s.acked)) {
		off := s.acked[value]
		i := slices.IndexFunc(want, func(e entry) bool { return e.Offset == off })
		s.requiref(i >= 0 && want[i].Value == value, "acknowledged %s at %d lost", value, off)
	}
}

func runSim(t testingT, seed uint64, events int, bug bugs) int {
	s := newSim(t, seed, bug)
	for range events {
		s.step()
	}
	s.heal()
	return s.events
}

func TestSimulator(t *testing.T) {
	seeds := *simSeeds
	switch {
	case seeds > 0:
	case testing.Short():
		seeds = 20
	default:
		seeds = 100
	}
	start := time.Now()
	events := 0
	for seed := range uint64(seeds) {
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { events += runSim(t, seed, 400, bugs{}) })
		if !ok {
			break
		}
	}
	t.Logf("%d seeds, %d events, %.0f events/s", seeds, events, float64(events)/time.Since(start).Seconds())
}

// catcher is a testingT whose failure ends the run with a panic that
// simFails recovers, so that a test can expect a simulation to fail.
type catcher struct{ msg string }

func (c *catcher) Errorf(format string, args ...any) { c.msg = fmt.Sprintf(format, args...) }
func (c *catcher) FailNow()                          { panic(c) }
func (c *catcher) Helper()                           {}
func (c *catcher) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	c.FailNow()
}

// simFails runs a seed and returns the failure it ended with, if any.
func simFails(seed uint64, bug bugs) (msg string, failed bool) {
	c := &catcher{}
	defer func() {
		if r := recover(); r != nil {
			if r != c {
				panic(r)
			}
			msg, failed = c.msg, true
		}
	}()
	runSim(c, seed, 400, bug)
	return "", false
}

// Each historical bug, switched back on, is caught by the simulator's
// checks within a bounded number of seeds: the checks have teeth.
func TestSimulatorCatchesHistoricalBugs(t *testing.T) {
	// The seeds that catch each bug today: 12, 323, 37 and 66. The bound
	// leaves room for changes to the simulator's event mix.
	const maxSeeds = 500
	for _, tc := range []struct {
		name string
		bug  bugs
		long bool // caught only after hundreds of seeds: not under -short
	}{
		{"truncation to the high watermark (before KIP-101)", bugs{truncateToHighWatermark: true}, false},
		{"the epoch-less answer (KIP-101 before KIP-279)", bugs{pre279: true}, true},
		{"ISR expansion without the epoch-start guard (KIP-320 rule 4)", bugs{noEpochStartGuard: true}, false},
		{"leader epoch reuse after a restart (KAFKA-10527)", bugs{reuseEpoch: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("long variant: run without -short")
			}
			for seed := range uint64(maxSeeds) {
				if msg, failed := simFails(seed, tc.bug); failed {
					first, _, _ := strings.Cut(msg, "\n")
					t.Logf("caught at seed %d: %s", seed, first)
					return
				}
			}
			t.Fatalf("not caught in %d seeds", maxSeeds)
		})
	}
}

// A seed replays exactly: two runs of one seed make the same trace and
// end with the same logs, so a failing seed can be studied at leisure.
func TestSimulatorReplaysASeedExactly(t *testing.T) {
	run := func() ([]string, map[NodeID][]entry) {
		s := newSim(t, 7, bugs{})
		for range 400 {
			s.step()
		}
		logs := map[NodeID][]entry{}
		for _, n := range s.c.nodes {
			if !n.down {
				logs[n.id] = s.c.entries(n.id)
			}
		}
		return slices.Clone(s.c.trace), logs
	}
	trace1, logs1 := run()
	trace2, logs2 := run()
	require.Equal(t, trace1, trace2)
	require.Equal(t, logs1, logs2)
	require.NotEmpty(t, logs1)
}
