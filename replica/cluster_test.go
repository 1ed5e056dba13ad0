package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// The scenario harness: nodes, each a Partition over a log.Log on its own
// in-memory crash file system, a controller that applies Kafka's
// AlterPartition rules, and a FIFO of messages delivered one at a time.
// Writes are applied at once; crashes lose what was not synced.

const (
	testTopic = "orders"
	client    = NodeID(99)
)

type node struct {
	id    NodeID
	fs    *vfs.MemFS
	log   *log.Log
	p     *Partition
	down  bool
	fsync log.FsyncPolicy
	// ver counts the changes to the log through the harness, so that its
	// entries are read again only when they may differ.
	ver     uint64
	cached  []entry
	cacheAt [3]int64 // ver, log start and log end when cached was read
}

// controller is the harness's controller: the partition's committed state
// and Kafka's checks of an AlterPartition (ReplicationControlManager).
type controller struct {
	epoch                       int32
	leader                      NodeID
	leaderEpoch, partitionEpoch int32
	replicas, isr               []NodeID
	ineligible                  []NodeID
	// brokerEpochs are the registered broker epochs, for the nodes that
	// have one.
	brokerEpochs map[NodeID]int64
}

// testingT is what the harness needs of a test: a *testing.T, or a
// catcher that turns a failure into a value (mutation tests).
type testingT interface {
	require.TestingT
	Fatalf(format string, args ...any)
	Helper()
}

// bugSettings are the settings of a bug switch a scenario runs under: the
// rule as Kafka fixed it, and, in a build that has the switches (-tags
// strandbugs), the historical bug too, which the scenario must catch.
func bugSettings() []bool {
	if bugsBuild {
		return []bool{false, true}
	}
	return []bool{false}
}

type cluster struct {
	t       testingT
	nodes   []*node
	ctl     controller
	queue   []Message
	results map[uint64]ProduceResult
	// answered lists the results' IDs in the order they came.
	answered []uint64
	// hwAtResult is the leader log's high watermark when a result was
	// handed out, before that Ready's writes were applied: what a consumer
	// could read then.
	hwAtResult map[uint64]int64
	nextID     uint64
	cfg        func(*Config)
	// drop, if set, decides whether a message is lost instead of
	// delivered.
	drop  func(Message) bool
	trace []string
}

func newCluster(t testingT, ids ...NodeID) *cluster {
	c := &cluster{t: t, results: map[uint64]ProduceResult{}, hwAtResult: map[uint64]int64{}, ctl: controller{leader: NoNode}}
	c.ctl.replicas = slices.Clone(ids)
	for _, id := range ids {
		fs := vfs.NewMem()
		require.NoError(t, fs.MkdirAll("/data", 0o755))
		require.NoError(t, vfs.SyncDir(fs, "/"))
		n := &node{id: id, fs: fs, fsync: log.FsyncAlways()}
		c.nodes = append(c.nodes, n)
	}
	return c
}

// configure sets a Config hook, applied to every partition (re)created
// from now on, and (re)starts every node that is not running.
func (c *cluster) start(cfg func(*Config)) *cluster {
	c.cfg = cfg
	for _, n := range c.nodes {
		if n.p == nil {
			c.open(n)
		}
	}
	return c
}

func (c *cluster) open(n *node) {
	l, err := log.Open("/data/"+testTopic+"-0", log.Options{
		FS: n.fs, ExternalHighWatermark: true, Fsync: n.fsync, SegmentBytes: 64 << 10, MaxIndexBytes: 1024,
		Now: func() time.Time { return time.Unix(1, 0) }, // deterministic: no checkpoint by the clock
	})
	require.NoError(c.t, err)
	cfg := Config{ID: n.id, Topic: testTopic, Log: l, ReplicaLagTicks: 20, RequestTimeoutTicks: 20, RetryBackoffTicks: 2}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	p, err := New(cfg)
	require.NoError(c.t, err)
	n.log, n.p, n.down = l, p, false
	n.ver++
}

// live returns the running nodes.
func (c *cluster) live() []NodeID {
	var out []NodeID
	for _, n := range c.nodes {
		if !n.down {
			out = append(out, n.id)
		}
	}
	return out
}

func (c *cluster) node(id NodeID) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %d", id)
	return nil
}

// traceLines is how much of the trace a failure prints.
const traceLines = 120

func (c *cluster) logf(format string, args ...any) {
	if len(c.trace) >= 4*traceLines {
		c.trace = append(c.trace[:0], c.trace[len(c.trace)-traceLines:]...)
	}
	c.trace = append(c.trace, fmt.Sprintf(format, args...))
}

// elect makes the controller elect leader with the ISR given (all
// replicas if none), bumping both epochs, and tell every replica.
func (c *cluster) elect(leader NodeID, isr ...NodeID) {
	if len(isr) == 0 {
		isr = c.ctl.replicas
	}
	c.ctl.leader = leader
	c.ctl.leaderEpoch++
	c.ctl.partitionEpoch++
	c.ctl.isr = slices.Clone(isr)
	c.logf("controller: elect %d epoch %d isr %v", leader, c.ctl.leaderEpoch, isr)
	c.announce(NoNode)
}

// announce sends the controller's state to every replica but skip.
func (c *cluster) announce(skip NodeID) {
	for _, id := range c.ctl.replicas {
		if id == skip {
			continue
		}
		c.queue = append(c.queue, c.leaderAndISR(id))
	}
}

func (c *cluster) leaderAndISR(to NodeID) *LeaderAndISR {
	return &LeaderAndISR{
		Header:          Header{From: NoNode, To: to, Topic: testTopic},
		ControllerEpoch: c.ctl.epoch, Leader: c.ctl.leader, LeaderEpoch: c.ctl.leaderEpoch,
		PartitionEpoch: c.ctl.partitionEpoch, Replicas: slices.Clone(c.ctl.replicas), ISR: slices.Clone(c.ctl.isr),
	}
}

// alterPartition applies Kafka's checks, in Kafka's order.
func (c *cluster) alterPartition(m *AlterPartition) *AlterPartitionResponse {
	ctl := &c.ctl
	resp := &AlterPartitionResponse{Header: Header{From: NoNode, To: m.From, Topic: testTopic}}
	isr := m.Nodes()
	isSubset := !slices.ContainsFunc(isr, func(n NodeID) bool { return !slices.Contains(ctl.replicas, n) })
	// KIP-903: a member named in another broker epoch than registered.
	stale := slices.ContainsFunc(m.ISR, func(b ISRMember) bool {
		e, ok := ctl.brokerEpochs[b.ID]
		return ok && b.BrokerEpoch != NoBrokerEpoch && b.BrokerEpoch != e
	})
	switch {
	case m.LeaderEpoch > ctl.leaderEpoch || m.PartitionEpoch > ctl.partitionEpoch:
		resp.Err = ErrNotController
	case m.LeaderEpoch < ctl.leaderEpoch:
		resp.Err = ErrFencedLeaderEpoch
	case m.From != ctl.leader:
		resp.Err = ErrInvalidRequest
	case m.PartitionEpoch < ctl.partitionEpoch:
		resp.Err = ErrInvalidUpdateVersion
	case !isSubset || !slices.Contains(isr, ctl.leader):
		resp.Err = ErrInvalidRequest
	case slices.ContainsFunc(isr, func(n NodeID) bool { return slices.Contains(ctl.ineligible, n) }) || stale:
		resp.Err = ErrIneligibleReplica
	default:
		ctl.isr = isr
		ctl.partitionEpoch++
		resp.Leader, resp.LeaderEpoch, resp.PartitionEpoch, resp.ISR = ctl.leader, ctl.leaderEpoch, ctl.partitionEpoch, slices.Clone(ctl.isr)
		c.logf("controller: isr %v partition epoch %d", ctl.isr, ctl.partitionEpoch)
		c.announce(m.From)
	}
	return resp
}

// produce hands a batch of values to node at and returns the produce's
// ID, or the refusal.
func (c *cluster) produce(at NodeID, acks Acks, values ...string) (uint64, error) {
	recs := make([]segment.Record, len(values))
	for i, v := range values {
		recs[i] = segment.Record{Value: []byte(v), Timestamp: 1}
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	require.NoError(c.t, err)
	c.nextID++
	err = c.stepOn(at, &Produce{Header: Header{From: client, To: at, Topic: testTopic}, ID: c.nextID, Acks: acks, Batch: b})
	c.logf("produce %v acks %d to %d: id %d err %v", values, acks, at, c.nextID, err)
	return c.nextID, err
}

func (c *cluster) stepOn(id NodeID, m Message) error {
	n := c.node(id)
	if n.down {
		return errors.New("node down")
	}
	return n.p.Step(m)
}

// flush applies every node's Ready: writes first, then Advance; messages
// join the queue and results are kept.
func (c *cluster) flush() {
	for _, n := range c.nodes {
		for !n.down && n.p.HasReady() {
			rd := n.p.Ready()
			for _, r := range rd.Results {
				c.hwAtResult[r.ID] = n.log.HighWatermark()
			}
			for _, w := range rd.Writes {
				c.logf("%d: write %s", n.id, w)
			}
			if len(rd.Writes) > 0 {
				n.ver++
			}
			if err := ApplyWrites(n.log, rd.Writes); err != nil {
				n.p.Fail(err)
			}
			c.queue = append(c.queue, rd.Messages...)
			for _, r := range rd.Results {
				c.logf("%d: result %s", n.id, &r)
				if _, dup := c.results[r.ID]; dup {
					c.t.Fatalf("produce %d has two results", r.ID)
				}
				c.results[r.ID] = r
				c.answered = append(c.answered, r.ID)
			}
			require.NoError(c.t, n.p.Advance(rd))
		}
	}
}

// deliverOne delivers the oldest queued message; it reports false when
// the queue is empty.
func (c *cluster) deliverOne() bool {
	c.flush()
	if len(c.queue) == 0 {
		return false
	}
	m := c.queue[0]
	c.queue = c.queue[1:]
	h := m.Head()
	if c.drop != nil && c.drop(m) {
		c.logf("drop %s", describe(m))
		return true
	}
	if h.To == NoNode {
		if ap, ok := m.(*AlterPartition); ok {
			c.logf("deliver %s", describe(m))
			c.queue = append(c.queue, c.alterPartition(ap))
		}
		return true
	}
	if i := slices.IndexFunc(c.nodes, func(n *node) bool { return n.id == h.To }); i < 0 || c.nodes[i].down {
		c.logf("lost (no such node running) %s", describe(m))
		return true
	}
	err := c.stepOn(h.To, m)
	c.logf("deliver %s: %v", describe(m), err)
	// Stale state refused is fine: to a restarted leader, an old
	// LeaderAndISR of its own epoch is a reuse it refuses.
	if err != nil && !errors.Is(err, ErrStale) && !errors.Is(err, ErrLeaderEpochReused) {
		c.t.Fatalf("step %s: %v\n%s", describe(m), err, c.dumpTrace())
	}
	return true
}

// stabilize delivers until nothing is left to deliver, and checks the
// invariants after every delivery.
func (c *cluster) stabilize() {
	for i := 0; c.deliverOne(); i++ {
		if i >= 100000 {
			c.t.Fatalf("no quiescence\n%s", c.dumpTrace())
		}
		c.checkInvariants()
	}
	c.flush()
	c.checkInvariants()
}

// tick ticks every running node n times, stabilizing after each.
func (c *cluster) tick(n int) {
	for range n {
		for _, nd := range c.nodes {
			if !nd.down {
				nd.p.Tick()
			}
		}
		c.stabilize()
	}
}

// crash stops a node as a power failure would: what it did not sync is
// lost, and its partition forgets everything.
func (c *cluster) crash(id NodeID) { c.crashWith(id, vfs.CrashOptions{}) }

// crashWith is crash with cfg saying which unsynced writes survive.
func (c *cluster) crashWith(id NodeID, cfg vfs.CrashOptions) {
	n := c.node(id)
	n.fs = n.fs.Crash(cfg)
	n.down, n.p, n.log = true, nil, nil
	n.ver++
	c.logf("crash %d", id)
}

func (c *cluster) restart(id NodeID) {
	n := c.node(id)
	c.open(n)
	c.logf("restart %d", id)
}

// sync makes a node's log durable, as a flush under FsyncNever would.
func (c *cluster) sync(id NodeID) { require.NoError(c.t, c.node(id).log.Sync()) }

type entry struct {
	Offset int64
	Epoch  int32
	Value  string
}

func (e entry) String() string { return fmt.Sprintf("%d:%s/e%d", e.Offset, e.Value, e.Epoch) }

// entries returns a node's log: each record's offset, epoch and value.
// The slice is shared until the log changes: do not modify it.
func (c *cluster) entries(id NodeID) []entry {
	n := c.node(id)
	at := [3]int64{int64(n.ver), n.log.LogStartOffset(), n.log.LogEndOffset()}
	if n.cached != nil && n.cacheAt == at {
		return n.cached
	}
	out, err := readEntries(n.log)
	if err != nil {
		c.t.Fatalf("reading node %d's log: %v", id, err)
	}
	n.cached, n.cacheAt = out, at
	return out
}

func readEntries(l *log.Log) ([]entry, error) {
	var out []entry
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		bs, err := l.Read(off, 1<<20, log.ReadLogEnd)
		if err != nil {
			return nil, err
		}
		for b, err := range bs.All() {
			if err != nil {
				bs.Close()
				return nil, err
			}
			for r, err := range b.Records() {
				if err != nil {
					bs.Close()
					return nil, err
				}
				out = append(out, entry{r.Offset, b.PartitionLeaderEpoch(), string(r.Value)})
			}
			off = b.LastOffset() + 1
		}
		bs.Close()
	}
	return out, nil
}

// values returns a node's record values in offset order.
func (c *cluster) values(id NodeID) []string {
	var vs []string
	for _, e := range c.entries(id) {
		vs = append(vs, e.Value)
	}
	return vs
}

func (c *cluster) hw(id NodeID) int64 { return c.node(id).log.HighWatermark() }

func (c *cluster) status(id NodeID) Status { return c.node(id).p.Status() }

// result returns a produce's result, failing the test if it has none yet.
func (c *cluster) result(id uint64) ProduceResult {
	r, ok := c.results[id]
	if !ok {
		c.t.Fatalf("produce %d has no result\n%s", id, c.dumpTrace())
	}
	return r
}

// checkInvariants checks what must hold after every event (the invariants
// of hachikuji/kafka-specification's TLA+ model): leader in ISR, high watermark within the log, and log
// matching below the lower high watermark of any two running nodes.
func (c *cluster) checkInvariants() {
	for _, n := range c.nodes {
		if n.down {
			continue
		}
		s := n.p.Status()
		if s.Role == RoleLeader && !slices.Contains(s.ISR, n.id) {
			c.t.Fatalf("leader %d not in its ISR %v\n%s", n.id, s.ISR, c.dumpTrace())
		}
		start, hw, end, err := n.log.Offsets()
		if err != nil || start > hw || hw > end {
			c.t.Fatalf("node %d: want log start %d <= hw %d <= end %d (%v)\n%s", n.id, start, hw, end, err, c.dumpTrace())
		}
	}
}

// requireLogsMatch checks that the running nodes' logs agree below the
// lowest of their high watermarks, by offset, epoch and value.
func (c *cluster) requireLogsMatch(ids ...NodeID) {
	bound := int64(1 << 62)
	for _, id := range ids {
		bound = min(bound, c.hw(id))
	}
	var first []entry
	for i, id := range ids {
		es := slices.DeleteFunc(slices.Clone(c.entries(id)), func(e entry) bool { return e.Offset >= bound })
		if i == 0 {
			first = es
			continue
		}
		require.Equal(c.t, first, es, "nodes %d and %d below %d\n%s", ids[0], id, bound, c.dumpTrace())
	}
}

func (c *cluster) dumpTrace() string {
	start := max(0, len(c.trace)-traceLines)
	return strings.Join(c.trace[start:], "\n")
}

func describe(m Message) string {
	h := m.Head()
	var body string
	switch m := m.(type) {
	case *Fetch:
		body = fmt.Sprintf("Fetch id=%d epoch=%d offset=%d last=%d", m.ID, m.CurrentLeaderEpoch, m.FetchOffset, m.LastFetchedEpoch)
	case *FetchResponse:
		body = fmt.Sprintf("FetchResponse id=%d err=%d hw=%d diverging=%d/%d records=%dB", m.ID, m.Err, m.HighWatermark, m.DivergingEpoch, m.DivergingEndOffset, len(m.Records))
	case *LeaderAndISR:
		body = fmt.Sprintf("LeaderAndISR leader=%d epoch=%d/%d isr=%v", m.Leader, m.LeaderEpoch, m.PartitionEpoch, m.ISR)
	case *AlterPartition:
		body = fmt.Sprintf("AlterPartition epoch=%d/%d isr=%v", m.LeaderEpoch, m.PartitionEpoch, m.ISR)
	case *AlterPartitionResponse:
		body = fmt.Sprintf("AlterPartitionResponse err=%d epoch=%d/%d isr=%v", m.Err, m.LeaderEpoch, m.PartitionEpoch, m.ISR)
	default:
		body = fmt.Sprintf("%T", m)
	}
	return fmt.Sprintf("%d->%d %s", h.From, h.To, body)
}

// seed writes records straight into a node's log, one batch per record,
// each with its epoch, as if replicated earlier; then sets its high
// watermark. Records are "epoch:value".
func (c *cluster) seed(id NodeID, hw int64, records ...string) {
	n := c.node(id)
	for _, r := range records {
		var epoch int32
		var value string
		_, err := fmt.Sscanf(strings.Replace(r, ":", " ", 1), "%d %s", &epoch, &value)
		require.NoError(c.t, err, r)
		b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte(value), Timestamp: 1}},
			segment.BuildOptions{BaseOffset: n.log.LogEndOffset()})
		require.NoError(c.t, err)
		segment.Batch(b).SetPartitionLeaderEpoch(epoch)
		_, err = n.log.AppendReplicated(b)
		require.NoError(c.t, err)
	}
	n.ver++
	_, err := n.log.SetHighWatermark(hw)
	require.NoError(c.t, err)
}

// deliverUntil delivers messages one by one until cond holds, failing if
// the queue runs dry first.
func (c *cluster) deliverUntil(cond func() bool) {
	for !cond() {
		if !c.deliverOne() {
			c.t.Fatalf("the queue ran dry\n%s", c.dumpTrace())
		}
		c.checkInvariants()
	}
}

// electOnly is elect, told to the nodes given only (the others miss it).
func (c *cluster) electOnly(leader NodeID, isr []NodeID, tell ...NodeID) {
	c.ctl.leader = leader
	c.ctl.leaderEpoch++
	c.ctl.partitionEpoch++
	c.ctl.isr = slices.Clone(isr)
	c.logf("controller: elect %d epoch %d isr %v, told to %v", leader, c.ctl.leaderEpoch, isr, tell)
	for _, id := range tell {
		c.queue = append(c.queue, c.leaderAndISR(id))
	}
}

func logFsyncNever() log.FsyncPolicy { return log.FsyncNever() }
