package cluster

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// The simulator runs whole Nodes of a three-node cluster (testCluster:
// MemoryMetadata, MemoryNetwork, a MemFS disk each) under client
// workloads while a fault schedule kills nodes (a power cut: the disk
// keeps only what was synced), stops them cleanly, kills the active
// controller's node, moves the controller, cuts a node off the network,
// turns message faults on and off (drops, duplicates, delays that
// reorder; SetFaults), and now and then kills every node at once. At the
// end it heals everything, waits until every replica is back in its ISR
// and caught up, and checks what the cluster holds against what the
// clients were told.
//
// A seed draws the fault schedule, the network's faults and the
// workloads' choices, but not the interleaving: the Nodes run on their own
// goroutines against the real clock, so a seed replays the same schedule,
// not the same run. A failure names its seed; replay it with
// -sim.seed, and run it many times (-count) if it does not fail at once.
var (
	simSeeds = flag.Int("sim.seeds", 0, "TestSimulateNodes: how many seeds to run, from -sim.first on (default 3 with -short, 5 without)")
	simFirst = flag.Uint64("sim.first", 1, "TestSimulateNodes: the first seed to run")
	simSeed  = flag.Uint64("sim.seed", 0, "TestSimulateNodes: run only this seed")
	simTime  = flag.Duration("sim.time", 0, "TestSimulateNodes: how long each seed's workloads run under faults (default 1.5s with -short, 3s without)")
)

// TestSimulateNodes runs its seeds -parallel at a time: a seed's cluster
// is its own, and its nodes spend most of their time waiting.
func TestSimulateNodes(t *testing.T) {
	seeds := []uint64{*simSeed}
	if *simSeed == 0 {
		n := *simSeeds
		if n == 0 {
			n = 5
			if testing.Short() {
				n = 3
			}
		}
		seeds = seeds[:0]
		for i := range uint64(n) {
			seeds = append(seeds, *simFirst+i)
		}
	}
	duration := *simTime
	if duration == 0 {
		duration = 3 * time.Second
		if testing.Short() {
			duration = 1500 * time.Millisecond
		}
	}
	var mu sync.Mutex
	totals := map[string]int{}
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				s := newSim(t, seed, simWorkloads{
					&recordsWorkload{topic: "records", partitions: 3, producers: 4},
					&groupWorkload{group: "readers", topic: "records", partitions: 3, consumers: 2},
					&txnWorkload{topic: "txns", partitions: 2, producers: 2},
				})
				s.run(duration)
				mu.Lock()
				defer mu.Unlock()
				for k, v := range s.counts {
					totals[k] += v
				}
			})
		}
	})
	t.Logf("%d seeds: %s", len(seeds), formatCounts(totals))
}

// simWorkload is one kind of client traffic: it runs while the faults
// happen and checks, once the cluster healed, what the cluster holds
// against what its clients were told: idempotent producers
// (recordsWorkload), a consumer group (groupWorkload), transactions
// (txnWorkload).
type simWorkload interface {
	// setup creates what the workload needs, before any fault, and
	// returns the partitions it creates.
	setup(ctx context.Context, s *sim) []simPartition
	// run runs clients until stop ends, then lets them finish what they
	// have in flight until drain ends, and returns once they all have.
	run(stop, drain context.Context, s *sim)
	// check runs on the test goroutine once every replica caught up.
	check(s *sim)
}

// simWorkloads run together, set up in order.
type simWorkloads []simWorkload

func (ws simWorkloads) setup(ctx context.Context, s *sim) []simPartition {
	var parts []simPartition
	for _, w := range ws {
		parts = append(parts, w.setup(ctx, s)...)
	}
	return parts
}

func (ws simWorkloads) run(stop, drain context.Context, s *sim) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { w.run(stop, drain, s) })
	}
	wg.Wait()
}

func (ws simWorkloads) check(s *sim) {
	for _, w := range ws {
		w.check(s)
	}
}

type simPartition struct {
	topic     string
	partition int32
}

func (p simPartition) String() string { return fmt.Sprintf("%s-%d", p.topic, p.partition) }

// sim is one seed's run.
type sim struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand // the fault schedule's: the test goroutine's only
	c    *testCluster
	w    simWorkload
	// parts are the workload's partitions.
	parts []simPartition
	// highest is the highest high watermark a leader of each partition
	// reported, committed the batches under the advances past it; the
	// sampler's until it returns.
	highest   map[simPartition]int64
	committed map[simPartition][]committedBatch

	began time.Time
	// netFaults are the message faults the schedule set last.
	netFaults NetworkFaults
	// history is what the seed did when, for a failure to show.
	history []string

	mu sync.Mutex
	// live are the nodes the clients and the sampler reach: the test
	// goroutine owns c, whose maps change while a node starts or stops.
	live     map[replica.NodeID]*Node
	counts   map[string]int
	findings []string
}

func newSim(t *testing.T, seed uint64, w simWorkload) *sim {
	s := &sim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), w: w,
		live: map[replica.NodeID]*Node{}, counts: map[string]int{},
		highest: map[simPartition]int64{}, committed: map[simPartition][]committedBatch{}}
	// Registered first, so run last. The testing package keeps a finished
	// parallel subtest until its parent ends, and with it the cleanups it
	// ran (runCleanup shortens the slice, leaving the functions in its
	// array): without this a run of thousands of seeds held every seed's
	// disks and grew by about 14 MB a seed.
	t.Cleanup(func() {
		*s.c = testCluster{}
		*s = sim{}
	})
	s.c = newTestCluster(t, 3)
	s.c.logs = newFlightRecorder(simLogLines)
	return s
}

// simLogLines is how many of the nodes' last log lines a failed seed
// shows.
const simLogLines = 400

func (s *sim) count(what string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[what] += n
}

// finding records a violation; the seed fails at its end with every one.
func (s *sim) finding(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.findings = append(s.findings, fmt.Sprintf(format, args...))
}

// event records a step in the seed's history; test goroutine only.
func (s *sim) event(format string, args ...any) {
	s.history = append(s.history, fmt.Sprintf("%7.3fs ", time.Since(s.began).Seconds())+fmt.Sprintf(format, args...))
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("%s: %s", s.name(), fmt.Sprintf(format, args...))
}

// name names the seed and how to replay it.
func (s *sim) name() string {
	return fmt.Sprintf("seed %d (replay: -run 'TestSimulateNodes' -sim.seed=%d)", s.seed, s.seed)
}

// node returns live node id, or nil.
func (s *sim) node(id replica.NodeID) *Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[id]
}

func (s *sim) liveNodes() map[replica.NodeID]*Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.live)
}

// leaderOf returns the live node a client sends p's records to: hint, if
// it is live, or the leader of the newest leader epoch that a live node's
// metadata names.
func (s *sim) leaderOf(p simPartition, hint replica.NodeID) *Node {
	live := s.liveNodes()
	if n := live[hint]; n != nil {
		return n
	}
	var best *PartitionInfo
	for _, n := range live {
		if info := n.Metadata().Partition(p.topic, p.partition); info != nil && live[info.Leader] != nil &&
			(best == nil || info.LeaderEpoch > best.LeaderEpoch) {
			best = info
		}
	}
	if best == nil {
		return nil
	}
	return live[best.Leader]
}

// controllerMetadata returns the metadata of the active controller's node,
// or nil if it is down.
func (s *sim) controllerMetadata() *Metadata {
	id, _ := s.c.md.Leader()
	if n := s.node(id); n != nil {
		return n.Metadata()
	}
	return nil
}

func (s *sim) start(id replica.NodeID) {
	s.event("start node %d", id)
	n := s.c.start(id)
	s.mu.Lock()
	s.live[id] = n
	s.mu.Unlock()
}

// kill cuts node id's power. The clients may still reach it while it
// dies, and get its errors.
func (s *sim) kill(id replica.NodeID) {
	s.event("kill node %d", id)
	s.c.kill(id)
	s.mu.Lock()
	delete(s.live, id)
	s.mu.Unlock()
}

// stop closes node id cleanly; the clients reach it while it shuts down.
func (s *sim) stop(id replica.NodeID) {
	s.event("stop node %d", id)
	s.c.stop(id)
	s.mu.Lock()
	delete(s.live, id)
	s.mu.Unlock()
}

// run runs the seed: the workload under the fault schedule for d, then
// the drain, the heal and the checks.
func (s *sim) run(d time.Duration) {
	s.began = time.Now()
	s.t.Cleanup(func() {
		if s.t.Failed() || testing.Verbose() {
			s.t.Logf("seed %d: the faults:\n%s", s.seed, strings.Join(s.history, "\n"))
		}
		if s.t.Failed() {
			s.t.Logf("seed %d: %s", s.seed, formatCounts(s.counts))
			s.t.Logf("seed %d: the nodes' last %d log lines:\n%s", s.seed, simLogLines, strings.Join(s.c.logs.last(), "\n"))
		}
	})
	for _, id := range s.c.ids {
		s.start(id)
	}
	s.c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.parts = s.w.setup(ctx, s)
	s.event("set up")

	stop, stopClients := context.WithCancel(context.Background())
	drain, endDrain := context.WithCancel(context.Background())
	sampling, stopSampling := context.WithCancel(context.Background())
	var clients, sampler sync.WaitGroup
	// Registered after the cluster's cleanup, so run before it: no client
	// outlives the nodes, even when the seed fails.
	s.t.Cleanup(func() {
		stopClients()
		endDrain()
		stopSampling()
		clients.Wait()
		sampler.Wait()
	})
	clients.Go(func() { s.w.run(stop, drain, s) })
	sampler.Go(func() { s.sample(sampling) })

	s.faults(s.schedule(d))
	stopClients()
	s.c.net.SetFaults(NetworkFaults{})
	nc := s.c.net.snapshotCounts()
	s.count("messages dropped", nc.dropped)
	s.count("messages duplicated", nc.duplicated)
	s.count("calls failed", nc.callsLost+nc.answersLost)
	s.c.net.Heal()
	for _, id := range s.c.ids {
		if s.node(id) == nil {
			s.start(id)
		}
	}
	drainTimer := time.AfterFunc(30*time.Second, endDrain)
	defer drainTimer.Stop()
	clients.Wait()
	stopSampling()
	sampler.Wait()
	s.event("clients done")
	s.waitUntil(20*time.Second, "the healed cluster to converge", func() string {
		if why := s.unhealthy(); why != "" {
			return why
		}
		return s.unconverged()
	})
	s.event("converged")
	s.checkCommitted()
	s.w.check(s)
	s.event("checked")

	s.mu.Lock()
	findings := slices.Clone(s.findings)
	s.mu.Unlock()
	for _, f := range findings {
		s.t.Errorf("%s: %s", s.name(), f)
	}
	s.t.Logf("seed %d: %v: %s", s.seed, time.Since(s.began).Round(time.Millisecond), formatCounts(s.counts))
}

func formatCounts(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// The fault schedule's events.
type simEvent int

const (
	eventKill           simEvent = iota // a node's power cut, and its restart a while after
	eventKillController                 // the same for the active controller's node
	eventStop                           // a clean shutdown and restart
	eventIsolate                        // a node cut off from the others, healed a while after
	eventMessageFaults                  // message faults on, or off
	eventElect                          // the metadata log's lead moves to another voter
	eventKillAll                        // every node's power cut at once, and their restart
)

var simEvents = []struct {
	name   string
	weight int
}{
	eventKill:           {"kill", 4},
	eventKillController: {"kill controller", 2},
	eventStop:           {"stop", 2},
	eventIsolate:        {"isolate", 3},
	eventMessageFaults:  {"message faults", 3},
	eventElect:          {"elect controller", 1},
	eventKillAll:        {"kill all", 1}, // and once in every seed
}

// simStep is one event of a seed's fault schedule, drawn before the run
// so that the seed decides it whatever the timing.
type simStep struct {
	event simEvent
	pause time.Duration // before the event
	hold  time.Duration // how long the node stays down or cut off
	node  replica.NodeID
	// order is the order of the kills of eventKillAll, restart of the
	// restarts.
	order, restart []replica.NodeID
	faults         NetworkFaults // eventMessageFaults: these; zero: off
	pick           int           // eventElect: which other live voter, modulo their number
}

// schedule draws steps until their pauses and holds add up to d.
func (s *sim) schedule(d time.Duration) []simStep {
	total := 0
	for _, e := range simEvents {
		total += e.weight
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(s.rng.Int64N(int64(hi-lo))) }
	shuffled := func() []replica.NodeID {
		ids := slices.Clone(s.c.ids)
		s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		return ids
	}
	killAll := func(st *simStep) {
		st.hold = between(100*time.Millisecond, 500*time.Millisecond)
		st.order, st.restart = shuffled(), shuffled()
	}
	var steps []simStep
	faultsOn := false
	for sum := time.Duration(0); sum < d; {
		st := simStep{pause: between(50*time.Millisecond, 300*time.Millisecond),
			node: s.c.ids[s.rng.IntN(len(s.c.ids))], pick: s.rng.IntN(len(s.c.ids))}
		for n := s.rng.IntN(total); n >= simEvents[st.event].weight; st.event++ {
			n -= simEvents[st.event].weight
		}
		switch st.event {
		case eventKill, eventKillController, eventStop:
			st.hold = between(100*time.Millisecond, 800*time.Millisecond)
		case eventIsolate:
			st.hold = between(200*time.Millisecond, 1200*time.Millisecond)
		case eventMessageFaults:
			if faultsOn = !faultsOn; faultsOn {
				st.faults = NetworkFaults{
					Drop: 0.1 * s.rng.Float64(), Duplicate: 0.05 * s.rng.Float64(),
					MaxDelay: between(time.Millisecond, 10*time.Millisecond),
					Rand:     rand.New(rand.NewPCG(s.seed, s.rng.Uint64())),
				}
			}
		case eventKillAll:
			killAll(&st)
		}
		sum += st.pause + st.hold
		steps = append(steps, st)
	}
	// Every seed cuts every node's power once: the acknowledged records
	// survive it only if every ISR member synced them.
	st := simStep{event: eventKillAll, pause: between(50*time.Millisecond, 300*time.Millisecond)}
	killAll(&st)
	return slices.Insert(steps, s.rng.IntN(len(steps)+1), st)
}

// faults runs the fault schedule on the test goroutine. At most one node
// is down or cut off at a time, and only once the cluster recovered from
// the last such event (every replica back in its ISR), so that
// min.insync.replicas 2 of 3 keeps the partitions writable; but for the
// event that kills every node, after which the acknowledged records
// survive only because every ISR member synced them.
func (s *sim) faults(steps []simStep) {
	for _, st := range steps {
		time.Sleep(st.pause)
		s.count("event "+simEvents[st.event].name, 1)
		switch st.event {
		case eventKill, eventKillController, eventStop:
			s.waitHealthy()
			id := st.node
			if st.event == eventKillController {
				id, _ = s.c.md.Leader()
			}
			if st.event == eventStop {
				s.stop(id)
			} else {
				s.kill(id)
			}
			time.Sleep(st.hold)
			s.start(id)
		case eventIsolate:
			s.waitHealthy()
			s.event("isolate node %d", st.node)
			s.c.net.Isolate(st.node, s.c.ids...)
			// The MemoryMetadata is not on the network: the cut-off node
			// would lose the metadata log's lead to the majority, as raft's
			// CheckQuorum makes it, so it does here. It still sees the
			// committed entries, which a cut-off raft voter would not.
			if leader, _ := s.c.md.Leader(); leader == st.node {
				s.elect(st.node, st.pick)
			}
			time.Sleep(st.hold)
			s.event("heal")
			s.c.net.Heal()
		case eventMessageFaults:
			if st.faults == (NetworkFaults{}) {
				s.event("message faults off")
			} else {
				s.event("message faults on: drop %.3f, duplicate %.3f, delay up to %v", st.faults.Drop, st.faults.Duplicate, st.faults.MaxDelay)
			}
			s.netFaults = st.faults
			s.c.net.SetFaults(st.faults)
		case eventElect:
			leader, _ := s.c.md.Leader()
			s.elect(leader, st.pick)
		case eventKillAll:
			s.waitHealthy()
			// One power cut: every node off the network at once, so that
			// none replicates or acknowledges while the others die one
			// by one.
			for _, id := range st.order {
				s.c.net.Detach(id)
			}
			for _, id := range st.order {
				s.kill(id)
			}
			time.Sleep(st.hold)
			for _, id := range st.restart {
				s.start(id)
			}
		}
	}
}

// elect moves the metadata log's lead from not to another live voter,
// the pick-th modulo their number.
func (s *sim) elect(not replica.NodeID, pick int) {
	var others []replica.NodeID
	for id := range s.liveNodes() {
		if id != not {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return
	}
	slices.Sort(others)
	id := others[pick%len(others)]
	s.event("elect node %d to lead the metadata log", id)
	if err := s.c.md.Elect(id); err != nil {
		s.fatalf("electing a metadata leader: %v", err)
	}
}

// waitHealthy waits until every replica of the workload's partitions is
// in its ISR as the active controller has it, lifting the message faults
// for a second wait if the first runs out, or fails the seed: the cluster
// did not recover from the last fault.
func (s *sim) waitHealthy() {
	s.t.Helper()
	why := s.waitFor(healthWait, s.unhealthy)
	if why != "" && s.netFaults != (NetworkFaults{}) {
		s.count("recoveries waited for with message faults lifted", 1)
		s.event("message faults lifted for the cluster to recover: %s", why)
		s.c.net.SetFaults(NetworkFaults{})
		why = s.waitFor(healthWait, s.unhealthy)
		s.event("message faults on again")
		s.c.net.SetFaults(s.netFaults)
	}
	if why != "" {
		s.fatalf("timed out waiting for the cluster to recover from the last fault: %s; %s", why, s.replicaStates())
	}
}

// healthWait is how long waitHealthy gives the cluster to recover, with
// the message faults on and again with them lifted. Under steady loss the
// ISRs churn: a follower whose fetch is lost asks again after
// RequestTimeout, as long as ReplicaLagTime, so one lost message costs the
// follower its place, and a lost AlterPartition delays its return as
// long; every replica in its ISR at one moment may take longer than any
// bound. With the faults lifted, only a fault of the cluster keeps one
// out.
const healthWait = 10 * time.Second

// waitUntil waits until not says nothing is wrong, or fails the seed with
// what it said last.
func (s *sim) waitUntil(d time.Duration, what string, not func() string) {
	s.t.Helper()
	if why := s.waitFor(d, not); why != "" {
		s.fatalf("timed out after %v waiting for %s: %s", d, what, why)
	}
}

// waitFor waits at most d until not says nothing is wrong, and returns
// what it said last.
func (s *sim) waitFor(d time.Duration, not func() string) string {
	deadline := time.Now().Add(d)
	for {
		why := not()
		if why == "" || time.Now().After(deadline) {
			return why
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unhealthy says which replica is out of its ISR, or returns "".
func (s *sim) unhealthy() string {
	md := s.controllerMetadata()
	if md == nil {
		return "no active controller"
	}
	for _, p := range s.parts {
		info := md.Partition(p.topic, p.partition)
		if info == nil {
			return fmt.Sprintf("%s unknown to the controller", p)
		}
		if info.Leader == replica.NoNode || len(info.ISR) != len(s.c.ids) {
			return fmt.Sprintf("%s has leader %d, leader epoch %d, ISR %v, ELR %v, recovering %v; brokers %+v",
				p, info.Leader, info.LeaderEpoch, info.ISR, info.ELR, info.Recovering, md.Brokers)
		}
	}
	return ""
}

// replicaStates says how each live node sees its replica of every
// partition whose ISR is not whole.
func (s *sim) replicaStates() string {
	md := s.controllerMetadata()
	if md == nil {
		return "no active controller"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var states []string
	for _, p := range s.parts {
		if info := md.Partition(p.topic, p.partition); info != nil && len(info.ISR) == len(s.c.ids) {
			continue
		}
		for id, n := range s.liveNodes() {
			st, err := n.Status(ctx, p.topic, p.partition)
			if err != nil {
				states = append(states, fmt.Sprintf("%s on node %d: %v", p, id, err))
				continue
			}
			states = append(states, fmt.Sprintf("%s on node %d: %+v", p, id, st))
		}
	}
	slices.Sort(states)
	return strings.Join(states, "; ")
}

// unconverged says what keeps a replica's log from ending at its
// leader's high watermark, or returns "".
func (s *sim) unconverged() string {
	md := s.controllerMetadata()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, p := range s.parts {
		leader := md.Partition(p.topic, p.partition).Leader
		n := s.node(leader)
		if n == nil {
			return fmt.Sprintf("%s: its leader %d is down", p, leader)
		}
		st, err := n.Status(ctx, p.topic, p.partition)
		if err != nil {
			return fmt.Sprintf("%s on its leader %d: %v", p, leader, err)
		}
		if st.Role != replica.RoleLeader || len(st.ISR) != len(s.c.ids) || st.HighWatermark != st.LogEndOffset {
			return fmt.Sprintf("%s on its leader %d: role %v, ISR %v, high watermark %d, log end %d",
				p, leader, st.Role, st.ISR, st.HighWatermark, st.LogEndOffset)
		}
		for _, id := range s.c.ids {
			l, err := s.node(id).Log(p.topic, p.partition)
			if err != nil {
				return err.Error()
			}
			_, hw, end, err := l.Offsets()
			if err != nil {
				return fmt.Sprintf("%s on node %d: %v", p, id, err)
			}
			if hw != st.LogEndOffset || end != st.LogEndOffset {
				return fmt.Sprintf("%s on node %d: high watermark %d, log end %d; the leader %d's log ends at %d",
					p, id, hw, end, leader, st.LogEndOffset)
			}
		}
	}
	return ""
}

// sample watches the live nodes until ctx ends. A leader's high
// watermark must never go back while it leads an epoch; for each advance
// past the highest one any leader reported, the sampler notes the batch
// under it, which must stay in the log as it was (checkCommitted). A
// follower takes its leader's high watermark, which after a leader change
// may be lower than the old leader's (Kafka's follower does the same, in
// UnifiedLog.maybeUpdateHighWatermark): that is only counted. The sampler
// also counts the leader and controller changes it sees.
func (s *sim) sample(ctx context.Context) {
	type replicaLife struct {
		node *Node
		p    simPartition
	}
	type leadership struct {
		replicaLife
		epoch int32
	}
	leaderHWs := map[leadership]int64{}
	followerHWs := map[replicaLife]int64{}
	leads := map[simPartition]leadership{}
	controller := replica.NoNode
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if id, _ := s.c.md.Leader(); id != replica.NoNode && id != controller {
			if controller != replica.NoNode {
				s.count("controller changes", 1)
			}
			controller = id
		}
		for id, n := range s.liveNodes() {
			for _, p := range s.parts {
				st, err := n.Status(ctx, p.topic, p.partition)
				if err != nil {
					continue // not created yet, or the node is going down
				}
				life := replicaLife{n, p}
				if st.Role != replica.RoleLeader {
					if prev, ok := followerHWs[life]; ok && st.HighWatermark < prev {
						s.count("follower high watermarks gone back", 1)
					}
					followerHWs[life] = st.HighWatermark
					continue
				}
				k := leadership{life, st.LeaderEpoch}
				if prev, ok := leaderHWs[k]; ok && st.HighWatermark < prev {
					s.finding("%s on node %d (incarnation %d): the leader's high watermark went back from %d to %d in leader epoch %d",
						p, id, n.cfg.Incarnation, prev, st.HighWatermark, st.LeaderEpoch)
				}
				leaderHWs[k] = max(leaderHWs[k], st.HighWatermark)
				if l := leads[p]; st.LeaderEpoch > l.epoch {
					if l.node != nil && l.node != n {
						s.count("leader changes", 1)
					}
					leads[p] = k
				}
				if st.HighWatermark > s.highest[p] {
					s.noteCommitted(n, p, st)
				}
			}
		}
	}
}

// committedBatch is a batch below a high watermark a leader reported.
type committedBatch struct {
	base, last int64
	crc        uint32
	from       string // who reported it
}

// noteCommitted notes the batch under the high watermark st reports, the
// highest yet; on the sampler's goroutine, which owns s.highest and
// s.committed until it returns.
func (s *sim) noteCommitted(n *Node, p simPartition, st replica.Status) {
	l, err := n.Log(p.topic, p.partition)
	if err != nil {
		return
	}
	bs, err := l.Read(st.HighWatermark-1, 1, log.ReadLogEnd)
	if err != nil {
		return // the node is going down
	}
	defer bs.Close()
	for b, err := range bs.All() { // the first batch, which holds the offset
		if err == nil && b.LastOffset() >= st.HighWatermark-1 {
			s.highest[p] = st.HighWatermark
			s.committed[p] = append(s.committed[p], committedBatch{base: b.BaseOffset(), last: b.LastOffset(), crc: b.CRC(),
				from: fmt.Sprintf("node %d (incarnation %d) leading epoch %d at high watermark %d", n.cfg.ID, n.cfg.Incarnation, st.LeaderEpoch, st.HighWatermark)})
		}
		return
	}
}

// checkCommitted checks that each partition's log, as its leader has it
// once the cluster converged, reaches the highest high watermark a leader
// reported and holds every batch the sampler saw committed as it was.
func (s *sim) checkCommitted() {
	md := s.controllerMetadata()
	for _, p := range s.parts {
		leader := md.Partition(p.topic, p.partition).Leader
		l, err := s.node(leader).Log(p.topic, p.partition)
		if err != nil {
			s.fatalf("%s on its leader %d: %v", p, leader, err)
		}
		_, hw, _, err := l.Offsets()
		if err != nil {
			s.fatalf("%s on its leader %d: %v", p, leader, err)
		}
		if hw < s.highest[p] {
			s.finding("%s: the log ends at %d on its leader %d, below the high watermark %d reported before", p, hw, leader, s.highest[p])
		}
		batches, err := committedBatches(l)
		if err != nil {
			s.fatalf("reading %s on node %d: %v", p, leader, err)
		}
		for _, c := range s.committed[p] {
			i, found := slices.BinarySearchFunc(batches, c.base, func(b segment.Batch, off int64) int { return cmp.Compare(b.BaseOffset(), off) })
			if !found || batches[i].LastOffset() != c.last || batches[i].CRC() != c.crc {
				s.finding("%s: the batch [%d, %d] with CRC %#x that %s had committed is not in the final log as it was",
					p, c.base, c.last, c.crc, c.from)
			}
		}
		s.count("committed batches checked", len(s.committed[p]))
	}
}

// recordsWorkload is idempotent producers, each sending batches of
// records to one partition and retrying each, with the same sequence and
// bytes, until it is acknowledged with acks=all, as Kafka's producer does
// with enable.idempotence. The check: every acknowledged batch is in the
// log at the offsets it was acknowledged with; each producer's records
// are there once each, in sequence order, with no gap; and every
// replica's log is the leader's.
//
// Node.Produce waits for the acknowledgement, so each batch in flight has
// a goroutine of its own, and a producer's batches reach the leader in
// any order, not in the order of one connection as Kafka's do. So that
// the leader's window of five batches still covers every one in flight,
// a producer sends a batch only within idempotence.MaxInFlight of its
// oldest unacknowledged one, as one connection's ordered answers bound
// Kafka's max.in.flight.requests.per.connection; and it sends its first
// batch alone, because a partition takes any sequence from a producer it
// does not know (KIP-360): a later batch that overtook the first would be
// taken, and the first refused.
//
// A batch that overtook an earlier one is answered
// OUT_OF_ORDER_SEQUENCE_NUMBER, and sent again, as Kafka's producer does
// while an earlier batch is in flight. One answered so once a later batch
// is acknowledged was written, as Kafka's producer concludes
// (idempotence.Sequencer): its first answer was lost and the leader's
// window no longer holds it, which happens when a replica reloads its
// producer state from a snapshot, which keeps one batch per producer, as
// Kafka's does. Its offsets are then unknown: the check finds its records
// in order among the producer's.
type recordsWorkload struct {
	topic      string
	partitions int32
	producers  int
	ps         []*simProducer
}

func (w *recordsWorkload) setup(ctx context.Context, s *sim) []simPartition {
	if err := s.node(s.c.ids[0]).CreateTopic(ctx, w.topic, TopicSpec{Partitions: w.partitions, ReplicationFactor: 3}); err != nil {
		s.fatalf("creating topic %q: %v", w.topic, err)
	}
	var parts []simPartition
	for i := range w.partitions {
		parts = append(parts, simPartition{w.topic, i})
	}
	for i := range w.producers {
		p := &simProducer{id: int64(1000 + i), newest: -1, part: parts[i%len(parts)], rng: rand.New(rand.NewPCG(s.seed, uint64(i)))}
		p.cond = sync.NewCond(&p.mu)
		w.ps = append(w.ps, p)
	}
	return parts
}

func (w *recordsWorkload) run(stop, drain context.Context, s *sim) {
	var wg sync.WaitGroup
	for _, p := range w.ps {
		wg.Go(func() { p.run(stop, drain, s) })
	}
	wg.Wait()
}

// simProducer is one idempotent producer of a recordsWorkload.
type simProducer struct {
	id   int64
	part simPartition
	rng  *rand.Rand // the producer's run goroutine's only

	mu      sync.Mutex
	cond    *sync.Cond  // signalled when a batch is acknowledged
	batches []*simBatch // in sequence order
	// acked is how many of the first batches are acknowledged.
	acked int
	// newest is the index of the newest acknowledged batch, -1 if none.
	newest int
}

// simBatch is a batch of a simProducer, the same bytes at every send.
type simBatch struct {
	index  int   // in its producer's batches
	seq    int32 // of its first record
	values []string
	bytes  []byte
	// Set once acknowledged (under the producer's mu).
	done       bool
	base, last int64 // -1 if the batch was found written without its offsets
	duplicate  bool
}

// recordValue is the value of a producer's record of sequence seq.
func recordValue(producer int64, seq int32) string { return fmt.Sprintf("%d:%d", producer, seq) }

func parseRecordValue(v []byte) (producer int64, seq int32, ok bool) {
	a, b, ok := strings.Cut(string(v), ":")
	p, err1 := strconv.ParseInt(a, 10, 64)
	q, err2 := strconv.ParseInt(b, 10, 32)
	return p, int32(q), ok && err1 == nil && err2 == nil
}

// newBatch waits until the producer may have another batch in flight and
// returns it, or nil once stop ended.
func (p *simProducer) newBatch(stop context.Context) *simBatch {
	records := 1 + p.rng.IntN(4)
	p.mu.Lock()
	defer p.mu.Unlock()
	for stop.Err() == nil && len(p.batches)-p.acked >= p.window() {
		p.cond.Wait()
	}
	if stop.Err() != nil {
		return nil
	}
	b := &simBatch{index: len(p.batches)}
	if n := len(p.batches); n > 0 {
		last := p.batches[n-1]
		b.seq = last.seq + int32(len(last.values))
	}
	// The time a producer stamps, not 0: the log forgets a producer its
	// last batch's timestamp puts longer ago than ProducerIDExpiration
	// when it reloads its state, and then takes any sequence from it.
	now := time.Now().UnixMilli()
	recs := make([]segment.Record, records)
	for i := range recs {
		v := recordValue(p.id, b.seq+int32(i))
		b.values = append(b.values, v)
		recs[i] = segment.Record{Value: []byte(v), Timestamp: now}
	}
	var err error
	b.bytes, err = segment.AppendBatch(nil, recs, segment.BuildOptions{Producer: &segment.ProducerFields{ID: p.id, Epoch: 0, BaseSequence: b.seq}})
	if err != nil {
		panic(err) // the records are the test's own
	}
	p.batches = append(p.batches, b)
	return b
}

// window is how many batches from the oldest unacknowledged one may be in
// flight: one until the partition knows the producer.
func (p *simProducer) window() int {
	if p.acked == 0 {
		return 1
	}
	return idempotence.MaxInFlight
}

// run sends new batches until stop ends, then waits for those in flight.
func (p *simProducer) run(stop, drain context.Context, s *sim) {
	defer context.AfterFunc(stop, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.cond.Broadcast()
	})()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		b := p.newBatch(stop)
		if b == nil {
			return
		}
		wg.Go(func() { p.send(drain, s, b) })
	}
}

// send sends b to its partition's leader until it is acknowledged, or
// ctx ends.
func (p *simProducer) send(ctx context.Context, s *sim, b *simBatch) {
	hint := replica.NoNode
	var last error
	reported := false
	backoff := time.Duration(0)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			s.count("retries", 1)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
		backoff = 10 * time.Millisecond
		n := s.leaderOf(p.part, hint)
		hint = replica.NoNode
		if n == nil {
			last = errors.New("no live leader known")
			continue
		}
		call, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := n.Produce(call, p.part.topic, p.part.partition, replica.AcksAll, b.bytes)
		cancel()
		if err == nil {
			p.ack(s, b, r, n.cfg.ID)
			return
		}
		last = fmt.Errorf("node %d, attempt %d: %w", n.cfg.ID, attempt, err)
		switch {
		case errors.Is(err, idempotence.ErrOutOfOrderSequence):
			s.count("out-of-order answers", 1)
			backoff = 3 * time.Millisecond // an earlier batch is on its way
			if p.writtenAfter(b) {
				s.count("batches found written by a later acknowledgement", 1)
				p.ack(s, b, replica.ProduceResult{BaseOffset: -1, LastOffset: -1}, n.cfg.ID)
				return
			}
		case retriable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrClosed):
			if nl, ok := errors.AsType[*replica.NotLeaderError](err); ok {
				hint = nl.Leader
			}
		default:
			if !reported {
				reported = true
				s.finding("producer %d, %s: the batch of sequence %d got an unexpected error: %v", p.id, p.part, b.seq, last)
			}
		}
	}
	s.finding("producer %d, %s: the batch of sequence %d (%d records) was never acknowledged; last: %v", p.id, p.part, b.seq, len(b.values), last)
}

// writtenAfter says whether a batch after b is acknowledged: then b is
// written too, the partition taking a producer's sequences only in order.
func (p *simProducer) writtenAfter(b *simBatch) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newest > b.index
}

func (p *simProducer) ack(s *sim, b *simBatch, r replica.ProduceResult, from replica.NodeID) {
	if r.BaseOffset >= 0 && r.LastOffset-r.BaseOffset+1 != int64(len(b.values)) {
		s.finding("producer %d, %s: the batch of sequence %d (%d records) was acknowledged by node %d at offsets [%d, %d] (duplicate %v)",
			p.id, p.part, b.seq, len(b.values), from, r.BaseOffset, r.LastOffset, r.Duplicate)
	}
	p.mu.Lock()
	b.done, b.base, b.last, b.duplicate = true, r.BaseOffset, r.LastOffset, r.Duplicate
	p.newest = max(p.newest, b.index)
	for p.acked < len(p.batches) && p.batches[p.acked].done {
		p.acked++
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	if r.BaseOffset >= 0 {
		s.count("acknowledged batches", 1)
	}
	if r.Duplicate {
		s.count("duplicates answered", 1)
	}
}

func (w *recordsWorkload) check(s *sim) {
	md := s.controllerMetadata()
	leaders := map[simPartition][]segment.Batch{}
	for _, part := range s.parts {
		leader := md.Partition(part.topic, part.partition).Leader
		// A coordinator may still append (a transaction's markers, after
		// a restart) while the logs are read one after another: a log
		// that is another's prefix is read again until they agree, and
		// only a difference that stays is a finding.
		var logs map[replica.NodeID][]segment.Batch
		var diffs []string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			logs, diffs = map[replica.NodeID][]segment.Batch{}, nil
			for _, id := range s.c.ids {
				l, err := s.node(id).Log(part.topic, part.partition)
				if err == nil {
					logs[id], err = committedBatches(l)
				}
				if err != nil {
					s.fatalf("reading %s on node %d: %v", part, id, err)
				}
			}
			for _, id := range s.c.ids {
				if diff := diffBatches(logs[leader], logs[id]); diff != "" {
					diffs = append(diffs, fmt.Sprintf("%s: node %d's log differs from its leader %d's below the high watermark: %s", part, id, leader, diff))
				}
			}
			if len(diffs) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, d := range diffs {
			s.finding("%s", d)
		}
		leaders[part] = logs[leader]
	}
	for _, p := range w.ps {
		w.checkProducer(s, p, leaders[p.part])
	}
}

// checkProducer checks a producer's records in its partition's log: each
// once, in sequence order, without a gap, and every acknowledged one at
// its offset. It reports the first violation of each kind.
func (w *recordsWorkload) checkProducer(s *sim, p *simProducer, batches []segment.Batch) {
	at := map[int32][]int64{} // the offsets of the producer's record of each sequence
	records, next := 0, int32(0)
	var prev segment.Batch
	disordered := false
	for _, b := range batches {
		if b.ProducerID() != p.id {
			continue
		}
		for rec, err := range b.Records() {
			if err != nil {
				s.finding("%s: reading the batch at offset %d: %v", p.part, b.BaseOffset(), err)
				return
			}
			id, seq, ok := parseRecordValue(rec.Value)
			if !ok || id != p.id {
				s.finding("%s: the record at offset %d of producer %d's batch has value %q", p.part, rec.Offset, p.id, rec.Value)
				return
			}
			if seq != next && !disordered {
				disordered = true
				after := "none"
				if prev != nil {
					after = fmt.Sprintf("the batch [%d, %d] of sequence %d, leader epoch %d", prev.BaseOffset(), prev.LastOffset(), prev.BaseSequence(), prev.PartitionLeaderEpoch())
				}
				s.finding("%s: producer %d's record of sequence %d is at offset %d (batch [%d, %d] of sequence %d, leader epoch %d), where sequence %d was due (last batch: %s): a record lost, repeated or out of order",
					p.part, p.id, seq, rec.Offset, b.BaseOffset(), b.LastOffset(), b.BaseSequence(), b.PartitionLeaderEpoch(), next, after)
			}
			next = seq + 1
			at[seq] = append(at[seq], rec.Offset)
			records++
		}
		prev = b
	}
	s.count("records checked", records)
	p.mu.Lock()
	defer p.mu.Unlock()
	produced := 0
	lost, moved := false, false
	for _, b := range p.batches {
		produced += len(b.values)
		if !b.done {
			continue
		}
		for i := range b.values {
			seq := b.seq + int32(i)
			how := fmt.Sprintf("acknowledged at offset %d (duplicate %v)", b.base+int64(i), b.duplicate)
			if b.base < 0 {
				how = "written as a later batch's acknowledgement showed"
			}
			switch offsets := at[seq]; {
			case len(offsets) == 0 && !lost:
				lost = true
				s.finding("%s: producer %d's record of sequence %d, %s, is not in the log", p.part, p.id, seq, how)
			case len(offsets) > 0 && b.base >= 0 && !slices.Contains(offsets, b.base+int64(i)) && !moved:
				moved = true
				s.finding("%s: producer %d's record of sequence %d, %s, is at offsets %v", p.part, p.id, seq, how, offsets)
			}
		}
	}
	if records > produced {
		s.finding("%s: the log has %d records of producer %d, which produced %d", p.part, records, p.id, produced)
	}
}

// committedBatches returns the batches of l below its high watermark.
func committedBatches(l *log.Partition) ([]segment.Batch, error) {
	start, hw, _, err := l.Offsets()
	if err != nil {
		return nil, err
	}
	var out []segment.Batch
	for off := start; off < hw; {
		bs, err := l.Read(off, 1<<20, log.ReadUncommitted)
		if err != nil {
			return nil, err
		}
		next := off
		for b, err := range bs.All() {
			if err != nil {
				bs.Close()
				return nil, err
			}
			out = append(out, slices.Clone(b))
			next = b.LastOffset() + 1
		}
		bs.Close()
		if next == off {
			return nil, fmt.Errorf("no batch at offset %d below the high watermark %d", off, hw)
		}
		off = next
	}
	return out, nil
}

// diffBatches describes the first difference of two logs' batches, or
// returns "".
func diffBatches(want, got []segment.Batch) string {
	for i := range min(len(want), len(got)) {
		if !slices.Equal(want[i], got[i]) {
			return fmt.Sprintf("batch %d: offsets [%d, %d] epoch %d producer %d sequence %d, want [%d, %d] epoch %d producer %d sequence %d",
				i, got[i].BaseOffset(), got[i].LastOffset(), got[i].PartitionLeaderEpoch(), got[i].ProducerID(), got[i].BaseSequence(),
				want[i].BaseOffset(), want[i].LastOffset(), want[i].PartitionLeaderEpoch(), want[i].ProducerID(), want[i].BaseSequence())
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("%d batches, the leader has %d", len(got), len(want))
	}
	return ""
}

// A power cut keeps a node's data directory with what it synced. Found by
// TestSimulateNodes (seed 1: every node killed at once, and every replica
// of every partition came back empty, so that no replica could lead):
// New creates Options.Dir with FS.MkdirAll, which does not sync the entry
// of the directory it creates in its parent, so the node's first power
// cut takes the whole directory away (the log syncs Dir's own entries,
// not Dir's in its parent). vfs.MkdirAll syncs them.
func TestNodePowerCutKeepsItsDataDir(t *testing.T) {
	c := newTestCluster(t, 1)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 1, ReplicationFactor: 1}))
	_, err := c.produce(ctx, "t", 0, replica.AcksAll, batchOf(t, "synced"))
	require.NoError(t, err)
	c.kill(1)
	dirs, err := c.fs[1].List("/")
	require.NoError(t, err)
	require.Contains(t, dirs, "node", "the power cut took the node's data directory away")
	c.start(1)
	require.Equal(t, []string{"synced"}, c.readAll(ctx, "t", 0))
}

// A leader's ISR change sent again goes to the active controller of the
// time, not to the one of its first send. Found by TestSimulateNodes
// (seed 2: the controller's node stopped cleanly and came back; a
// partition's leader sent its pending ISR change again every
// RequestTimeout to that node, which no longer led the metadata log, and
// the node never rejoined the ISR): the replica keeps the AlterPartition
// to send it again, and Node.sendTo writes the controller's id into that
// very message, so every retry went to the first send's controller, and
// there, inside a Batch, the driver refused it ("a partition does not
// take *replica.AlterPartition").
func TestNodeRetriedISRChangeFollowsTheController(t *testing.T) {
	c := newTestCluster(t, 3)
	// The leader is cut off from the controller for a moment: it must
	// not be fenced meanwhile.
	c.tweak = func(cfg *Options) { cfg.SessionTimeout = 3 * time.Second }
	c.startAll()
	c.waitRegistered()
	require.NoError(t, c.md.Elect(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.nodes[1].CreateTopic(ctx, "t", TopicSpec{Assignment: [][]replica.NodeID{{3, 1, 2}}}))
	_, err := c.produce(ctx, "t", 0, replica.AcksAll, batchOf(t, "a"))
	require.NoError(t, err)
	c.stop(2)
	waitFor(t, 10*time.Second, "node 2 out of the ISR", func() bool {
		p := c.nodes[1].Metadata().Partition("t", 0)
		return p != nil && !slices.Contains(p.ISR, 2)
	})

	// Node 2 comes back and catches up: the leader, 3, proposes it to the
	// ISR, and the proposal is lost on its way to the controller, 1.
	c.net.Cut(3, 1)
	c.start(2)
	waitFor(t, 10*time.Second, "the leader's proposal", func() bool {
		st, err := c.nodes[3].Status(ctx, "t", 0)
		return err == nil && len(st.PendingISR) == 3
	})
	// Another node leads the metadata log before the leader sends it
	// again: the retry must go there.
	require.NoError(t, c.md.Elect(2))
	c.net.Heal()
	waitFor(t, 10*time.Second, "node 2 back in the ISR", func() bool {
		p := c.nodes[2].Metadata().Partition("t", 0)
		return p != nil && slices.Contains(p.ISR, 2)
	})
}
