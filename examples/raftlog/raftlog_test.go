package raftlog

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/replica"
)

const (
	testTick = 10 * time.Millisecond
	waitFor  = 5 * time.Second
)

// testNet carries raft messages among Logs in one process. Each voter
// has an inbox that a goroutine of its own empties into the voter's Step,
// so that Send never blocks; a full inbox loses the message, as a network
// may. cut drops the messages it says to, at sending and at delivery: a
// partition, or a message lost.
type testNet struct {
	mu    sync.Mutex
	logs  map[replica.NodeID]*Log
	cut   func(from, to replica.NodeID, msg []byte) bool
	inbox map[replica.NodeID]chan envelope
	quit  chan struct{}
	wg    sync.WaitGroup
}

type envelope struct {
	from replica.NodeID
	msg  []byte
}

func newTestNet(ids []replica.NodeID) *testNet {
	n := &testNet{logs: map[replica.NodeID]*Log{}, inbox: map[replica.NodeID]chan envelope{}, quit: make(chan struct{})}
	for _, id := range ids {
		in := make(chan envelope, 4096)
		n.inbox[id] = in
		n.wg.Go(func() { n.deliver(id, in) })
	}
	return n
}

func (n *testNet) deliver(to replica.NodeID, in chan envelope) {
	for {
		select {
		case <-n.quit:
			return
		case e := <-in:
			if l := n.route(e.from, to, e.msg); l != nil {
				l.Step(e.msg) // a closed Log refuses it, as a stopped node would
			}
		}
	}
}

// route returns the Log of to if msg from from reaches it.
func (n *testNet) route(from, to replica.NodeID, msg []byte) *Log {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut != nil && n.cut(from, to, msg) {
		return nil
	}
	return n.logs[to]
}

func (n *testNet) sender(from replica.NodeID) func(replica.NodeID, []byte) {
	return func(to replica.NodeID, msg []byte) {
		if n.route(from, to, msg) == nil {
			return
		}
		select {
		case n.inbox[to] <- envelope{from, msg}:
		default:
		}
	}
}

func (n *testNet) attach(id replica.NodeID, l *Log) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.logs[id] = l
}

func (n *testNet) setCut(cut func(from, to replica.NodeID, msg []byte) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = cut
}

// isolate cuts every message to and from id.
func (n *testNet) isolate(id replica.NodeID) {
	n.setCut(func(from, to replica.NodeID, _ []byte) bool { return from == id || to == id })
}

func (n *testNet) heal() { n.setCut(nil) }

func (n *testNet) stop() {
	close(n.quit)
	n.wg.Wait()
}

// testNode is a voter's Log and what a Node would make of its feed: the
// updates since it opened, and the state they give (a snapshot's data,
// the entries' data joined by commas, then the entries after it).
type testNode struct {
	id   replica.NodeID
	dir  string
	log  *Log
	gate sync.Mutex // held, it stops the reading of the feed
	done chan struct{}

	mu      sync.Mutex
	updates []cluster.MetadataUpdate
	state   []string
	index   uint64
}

func (n *testNode) read(t *testing.T) {
	defer close(n.done)
	for u := range n.log.Updates() {
		n.gate.Lock()
		n.mu.Lock()
		n.updates = append(n.updates, u)
		if u.Snapshot != nil {
			n.state, n.index = decodeState(u.Snapshot.Data), u.Snapshot.Index
		}
		for _, e := range u.Entries {
			if e.Index <= n.index {
				t.Errorf("node %d: entry %d delivered after entry %d", n.id, e.Index, n.index)
			}
			n.state, n.index = append(n.state, string(e.Data)), e.Index
		}
		n.mu.Unlock()
		n.gate.Unlock()
	}
}

func decodeState(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), ",")
}

// applied returns the node's state and the index it is at.
func (n *testNode) applied() ([]string, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.state), n.index
}

func (n *testNode) feed() []cluster.MetadataUpdate {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.updates)
}

// leadership is the leadership the feed last reported.
func (n *testNode) leadership() (replica.NodeID, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.updates) == 0 {
		return replica.NoNode, 0
	}
	u := n.updates[len(n.updates)-1]
	return u.Leader, u.Term
}

// delivered is the data of every entry the feed delivered.
func (n *testNode) delivered() []string {
	var out []string
	for _, u := range n.feed() {
		for _, e := range u.Entries {
			out = append(out, string(e.Data))
		}
	}
	return out
}

type testCluster struct {
	t     *testing.T
	ids   []replica.NodeID
	net   *testNet
	nodes map[replica.NodeID]*testNode
}

// newTestCluster opens a Log for each of voters 0 to size-1 (0 is a node
// id like any other).
func newTestCluster(t *testing.T, size int) *testCluster {
	c := &testCluster{t: t, nodes: map[replica.NodeID]*testNode{}}
	for i := range size {
		c.ids = append(c.ids, replica.NodeID(i))
	}
	c.net = newTestNet(c.ids)
	dir := t.TempDir()
	for _, id := range c.ids {
		c.nodes[id] = &testNode{id: id, dir: filepath.Join(dir, fmt.Sprint("node", id))}
		c.open(id)
	}
	t.Cleanup(func() {
		for _, id := range c.ids {
			if c.nodes[id].log != nil {
				c.kill(id)
			}
		}
		c.net.stop()
	})
	return c
}

// open opens node id's Log on its directory, with an empty feed.
func (c *testCluster) open(id replica.NodeID) *testNode {
	n := c.nodes[id]
	l, err := Open(Config{
		ID: id, Voters: c.ids, Dir: n.dir, Send: c.net.sender(id), Tick: testTick,
		Logger: slog.New(slog.NewTextHandler(c.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(c.t, err)
	n.mu.Lock()
	n.log, n.updates, n.state, n.index, n.done = l, nil, nil, 0, make(chan struct{})
	n.mu.Unlock()
	c.net.attach(id, l)
	go n.read(c.t)
	return n
}

// kill closes node id's Log and waits for its feed to close.
func (c *testCluster) kill(id replica.NodeID) {
	n := c.nodes[id]
	c.net.attach(id, nil)
	if err := n.log.Close(); err != nil {
		c.t.Errorf("closing node %d: %v", id, err)
	}
	<-n.done
	n.log = nil
}

// leader waits until one of the nodes named (all if none) reports itself
// the leader of a term, and returns it and the term.
func (c *testCluster) leader(among ...replica.NodeID) (*testNode, uint64) {
	c.t.Helper()
	if len(among) == 0 {
		among = c.ids
	}
	var leader *testNode
	var term uint64
	require.Eventually(c.t, func() bool {
		for _, id := range among {
			if l, tm := c.nodes[id].leadership(); l == id {
				leader, term = c.nodes[id], tm
				return true
			}
		}
		return false
	}, waitFor, time.Millisecond, "no leader among %v", among)
	return leader, term
}

func (c *testCluster) others(id replica.NodeID) []replica.NodeID {
	return slices.DeleteFunc(slices.Clone(c.ids), func(o replica.NodeID) bool { return o == id })
}

// propose proposes each of data on n in term.
func (c *testCluster) propose(n *testNode, term uint64, data ...string) {
	c.t.Helper()
	for _, d := range data {
		require.NoError(c.t, n.log.Propose(term, []byte(d)))
	}
}

// waitState waits until the nodes named have the state want.
func (c *testCluster) waitState(want []string, ids ...replica.NodeID) {
	c.t.Helper()
	for _, id := range ids {
		require.Eventually(c.t, func() bool {
			got, _ := c.nodes[id].applied()
			return slices.Equal(got, want)
		}, waitFor, time.Millisecond, "node %d never got %d entries", id, len(want))
		got, _ := c.nodes[id].applied()
		require.Equal(c.t, want, got, "node %d", id)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// A fresh cluster elects one leader. The first update of every feed says
// the (empty) replay is done; the leader reports itself exactly once, the
// others report it, and no other voter ever reports itself.
func TestElectsOneLeaderThatReportsItselfOnce(t *testing.T) {
	c := newTestCluster(t, 3)
	leader, term := c.leader()
	for _, id := range c.ids {
		require.Eventually(t, func() bool {
			l, tm := c.nodes[id].leadership()
			return l == leader.id && tm == term
		}, waitFor, time.Millisecond, "node %d never reports leader %d of term %d", id, leader.id, term)
	}
	c.propose(leader, term, "a")
	c.waitState([]string{"a"}, c.ids...)
	for _, id := range c.ids {
		feed := c.nodes[id].feed()
		require.True(t, feed[0].Replayed, "node %d: the first update ends the replay of an empty log", id)
		require.Nil(t, feed[0].Snapshot)
		require.Empty(t, feed[0].Entries)
		// Every update carries the leadership; a report is a change of it.
		selfReports := 0
		for i, u := range feed {
			require.Equal(t, i == 0, u.Replayed, "node %d, update %d: only the first one ends the replay", id, i)
			if u.Leader == id && (i == 0 || feed[i-1].Leader != id || feed[i-1].Term != u.Term) {
				selfReports++
				require.Equal(t, leader.id, id, "node %d reports itself the leader of term %d", id, u.Term)
				require.Equal(t, term, u.Term)
			}
		}
		if id == leader.id {
			require.Equal(t, 1, selfReports, "the leader reports itself once")
		}
	}
}

// Proposals commit in the order the leader made them, on every voter,
// each entry once, with raft's increasing indexes and the leader's term;
// a Node that does not read its feed does not hold its proposals back.
func TestProposalsCommitInOrderEverywhere(t *testing.T) {
	c := newTestCluster(t, 3)
	leader, term := c.leader()
	want := names("p", 200)
	leader.gate.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, d := range want {
			if err := leader.log.Propose(term, []byte(d)); err != nil {
				t.Errorf("proposing %s: %v", d, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("proposals blocked while the leader's feed was not read")
	}
	c.waitState(want, c.others(leader.id)...)
	leader.gate.Unlock()
	c.waitState(want, c.ids...)
	for _, id := range c.ids {
		var last uint64
		for _, u := range c.nodes[id].feed() {
			for _, e := range u.Entries {
				require.Greater(t, e.Index, last, "node %d", id)
				require.Equal(t, term, e.Term, "node %d, entry %d", id, e.Index)
				last = e.Index
			}
		}
	}
}

// When the leader is closed another is elected, in a later term, and its
// proposals follow those already committed. The old leader reopened from
// its directory replays exactly the entries it had committed, once, in its
// first update, which ends the replay; then it catches up.
func TestKilledLeaderIsReplacedAndReopensReplaying(t *testing.T) {
	c := newTestCluster(t, 3)
	old, term := c.leader()
	first := names("e", 20)
	c.propose(old, term, first...)
	c.waitState(first, c.ids...)
	c.kill(old.id)

	next, nextTerm := c.leader(c.others(old.id)...)
	require.Greater(t, nextTerm, term)
	second := names("f", 20)
	c.propose(next, nextTerm, second...)
	all := append(slices.Clone(first), second...)
	c.waitState(all, c.others(old.id)...)

	c.open(old.id)
	c.waitState(all, old.id)
	feed := old.feed()
	require.True(t, feed[0].Replayed, "the first update ends the replay")
	require.Nil(t, feed[0].Snapshot)
	var replayed []string
	for _, e := range feed[0].Entries {
		replayed = append(replayed, string(e.Data))
	}
	require.Equal(t, first, replayed, "the replay is what was committed before the close")
	for i, u := range feed[1:] {
		require.False(t, u.Replayed, "update %d ends the replay again", i+1)
	}
	require.Equal(t, all, old.delivered(), "each entry delivered once")
	l, tm := old.leadership()
	require.Equal(t, [2]uint64{uint64(next.id), nextTerm}, [2]uint64{uint64(l), tm}, "the reopened node follows the new leader")
}

// An entry the old leader got onto the followers but never committed is
// committed by the next leader along with its own first entry: the next
// leader reports itself only once that entry is in its feed.
func TestNewLeaderReportsItselfAfterEarlierEntries(t *testing.T) {
	c := newTestCluster(t, 3)
	old, term := c.leader()
	c.propose(old, term, "a")
	c.waitState([]string{"a"}, c.ids...)
	_, aIndex := old.applied()

	// The followers get x, but their acknowledgements never reach the
	// leader, which so never commits it.
	c.net.setCut(func(_, to replica.NodeID, _ []byte) bool { return to == old.id })
	c.propose(old, term, "x")
	for _, id := range c.others(old.id) {
		require.Eventually(t, func() bool {
			last, err := c.nodes[id].log.store.ms.LastIndex()
			return err == nil && last > aIndex
		}, waitFor, time.Millisecond, "node %d never got x", id)
	}
	c.kill(old.id)
	c.net.heal()

	next, nextTerm := c.leader(c.others(old.id)...)
	require.Greater(t, nextTerm, term)
	feed := next.feed()
	self := slices.IndexFunc(feed, func(u cluster.MetadataUpdate) bool { return u.Leader == next.id && u.Term == nextTerm })
	var before []string
	for _, u := range feed[:self+1] {
		for _, e := range u.Entries {
			before = append(before, string(e.Data))
		}
	}
	require.Equal(t, []string{"a", "x"}, before, "x, of the previous term, is in the feed once the leader reports itself")
	c.waitState([]string{"a", "x"}, c.others(old.id)...)
	c.open(old.id)
	c.waitState([]string{"a", "x"}, old.id)
}

// A leader cut off from the majority still takes a proposal, but it never
// commits anywhere; the majority elects another leader, whose proposals
// commit, and once the partition heals the old leader follows it, takes
// no proposal for its old term, and has the majority's log.
func TestMinorityLeaderCommitsNothing(t *testing.T) {
	c := newTestCluster(t, 3)
	old, term := c.leader()
	c.propose(old, term, "before")
	c.waitState([]string{"before"}, c.ids...)

	c.net.isolate(old.id)
	require.NoError(t, old.log.Propose(term, []byte("lost")), "the cut-off leader does not know it yet")
	next, nextTerm := c.leader(c.others(old.id)...)
	require.Greater(t, nextTerm, term)
	c.propose(next, nextTerm, "kept")
	c.waitState([]string{"before", "kept"}, c.others(old.id)...)
	require.Eventually(t, func() bool {
		l, _ := old.leadership()
		return l != old.id
	}, waitFor, time.Millisecond, "the cut-off leader never steps down")
	require.ErrorIs(t, old.log.Propose(term, []byte("late")), cluster.ErrNotMetadataLeader)

	c.net.heal()
	c.waitState([]string{"before", "kept"}, old.id)
	require.Eventually(t, func() bool {
		l, tm := old.leadership()
		return l == next.id && tm == nextTerm
	}, waitFor, time.Millisecond, "the old leader never follows the new one")
	for _, id := range c.ids {
		require.Equal(t, []string{"before", "kept"}, c.nodes[id].delivered(), "node %d", id)
	}
}

// A follower that missed entries the leader has dropped into a snapshot
// gets the snapshot, in an update of its own, then the entries after it,
// though the first snapshot message is lost; reopened, its first update
// carries that snapshot and those entries.
func TestLaggingFollowerGetsTheSnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	leader, term := c.leader()
	lagging := c.nodes[c.others(leader.id)[0]]
	c.net.isolate(lagging.id)
	// The lagging follower's PreVote fails while it is cut off, so the
	// leader keeps its place.
	before := names("s", 2*KeptEntries+10)
	c.propose(leader, term, before...)
	c.waitState(before, leader.id, c.others(lagging.id)[1])
	state, index := leader.applied()
	data := []byte(strings.Join(state, ","))
	require.NoError(t, leader.log.Snapshot(index, data))
	after := names("t", 5)
	c.propose(leader, term, after...)
	all := append(slices.Clone(before), after...)
	c.waitState(all, leader.id)

	var snapsSent atomic.Int32
	c.net.setCut(func(_, _ replica.NodeID, msg []byte) bool {
		m := new(pb.Message)
		return proto.Unmarshal(msg, m) == nil && m.GetType() == pb.MsgSnap && snapsSent.Add(1) == 1
	})
	c.waitState(all, lagging.id)
	require.GreaterOrEqual(t, snapsSent.Load(), int32(2), "the lost snapshot is sent again")
	feed := lagging.feed()
	snaps := slices.IndexFunc(feed, func(u cluster.MetadataUpdate) bool { return u.Snapshot != nil })
	require.GreaterOrEqual(t, snaps, 0, "no snapshot in the lagging follower's feed")
	require.Equal(t, cluster.MetadataSnapshot{Index: index, Term: term, Data: data}, *feed[snaps].Snapshot)
	var since []string
	for i, u := range feed {
		if i != snaps {
			require.Nil(t, u.Snapshot, "update %d: a second snapshot", i)
		}
		for _, e := range u.Entries {
			require.GreaterOrEqual(t, i, snaps, "entry %d delivered before the snapshot", e.Index)
			since = append(since, string(e.Data))
		}
	}
	require.Equal(t, after, since, "the entries after the snapshot, once")

	c.kill(lagging.id)
	c.open(lagging.id)
	c.waitState(all, lagging.id)
	first := lagging.feed()[0]
	require.True(t, first.Replayed)
	require.Equal(t, cluster.MetadataSnapshot{Index: index, Term: term, Data: data}, *first.Snapshot)
	var replayed []string
	for _, e := range first.Entries {
		replayed = append(replayed, string(e.Data))
	}
	require.Equal(t, after, replayed, "the reopened follower replays its snapshot and the entries after it")
}

// Propose answers ErrNotMetadataLeader for a term the voter does not
// lead: another term, a follower's, and the term a leader handed over.
func TestProposeRefusesATermNotLed(t *testing.T) {
	c := newTestCluster(t, 3)
	leader, term := c.leader()
	require.ErrorIs(t, leader.log.Propose(term+1, []byte("a")), cluster.ErrNotMetadataLeader)
	require.ErrorIs(t, leader.log.Propose(term-1, []byte("a")), cluster.ErrNotMetadataLeader)
	for _, id := range c.others(leader.id) {
		require.ErrorIs(t, c.nodes[id].log.Propose(term, []byte("a")), cluster.ErrNotMetadataLeader, "node %d follows", id)
	}
	c.propose(leader, term, "a")
	c.waitState([]string{"a"}, c.ids...)

	leader.log.TransferLeadership()
	next, nextTerm := c.leader(c.others(leader.id)...)
	require.Greater(t, nextTerm, term)
	require.ErrorIs(t, leader.log.Propose(term, []byte("stale")), cluster.ErrNotMetadataLeader)
	c.propose(next, nextTerm, "b")
	c.waitState([]string{"a", "b"}, c.ids...)
}

// A Log refuses a bad Config, bad arguments and bad messages with
// ErrInvalid, and once closed answers ErrClosed, its feed closed.
func TestRefusesBadInputAndAnswersClosed(t *testing.T) {
	send := func(replica.NodeID, []byte) {}
	for _, cfg := range []Config{
		{ID: 0, Voters: []replica.NodeID{1, 2}, Dir: t.TempDir(), Send: send},
		{ID: 1, Voters: []replica.NodeID{1, 1}, Dir: t.TempDir(), Send: send},
		{ID: -1, Voters: []replica.NodeID{-1}, Dir: t.TempDir(), Send: send},
		{ID: 1, Voters: []replica.NodeID{1}, Send: send},
		{ID: 1, Voters: []replica.NodeID{1}, Dir: t.TempDir()},
	} {
		_, err := Open(cfg)
		require.ErrorIs(t, err, ErrInvalid, "%+v", cfg)
	}

	// A single voter is its own quorum.
	c := newTestCluster(t, 1)
	n, term := c.leader()
	c.propose(n, term, "a")
	c.waitState([]string{"a"}, n.id)
	_, index := n.applied()

	require.ErrorIs(t, n.log.Propose(term, nil), ErrInvalid)
	require.ErrorIs(t, n.log.Snapshot(index+10, []byte("x")), ErrInvalid)
	require.ErrorIs(t, n.log.Step([]byte{0xff, 0xff}), ErrInvalid)
	for _, m := range []*pb.Message{
		{Type: pb.MsgHeartbeat.Enum(), From: new(uint64(5)), To: new(raftID(n.id))}, // from no voter
		{Type: pb.MsgHeartbeat.Enum(), From: new(raftID(n.id)), To: new(uint64(5))}, // to another
		{Type: pb.MsgHup.Enum(), From: new(raftID(n.id)), To: new(raftID(n.id))},    // raft's own
	} {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		require.ErrorIs(t, n.log.Step(b), ErrInvalid, "%v", m)
	}
	require.NoError(t, n.log.Snapshot(index, []byte("a")))
	require.NoError(t, n.log.Snapshot(index, []byte("a")), "a snapshot at the latest one's index changes nothing")

	l := n.log
	c.kill(n.id)
	require.ErrorIs(t, l.Propose(term, []byte("b")), ErrClosed)
	require.ErrorIs(t, l.Snapshot(index, []byte("b")), ErrClosed)
	l.TransferLeadership()
	require.NoError(t, l.Close(), "closing again")
	_, open := <-l.Updates()
	require.False(t, open)
}

// A log whose committed entries take raft more than one Ready to hand
// back (over MaxCommittedSizePerReady, 1 MiB) still replays them all in
// its first update, which alone says Replayed.
func TestReopenReplaysALargeLogInTheFirstUpdate(t *testing.T) {
	c := newTestCluster(t, 1)
	n, term := c.leader()
	var want []string
	for i := range 24 {
		want = append(want, fmt.Sprintf("%03d%s", i, strings.Repeat("x", 100<<10)))
	}
	c.propose(n, term, want...)
	c.waitState(want, n.id)
	c.kill(n.id)
	c.open(n.id)
	c.waitState(want, n.id)
	feed := n.feed()
	require.True(t, feed[0].Replayed)
	require.Len(t, feed[0].Entries, len(want))
	for i, u := range feed[1:] {
		require.False(t, u.Replayed, "update %d", i+1)
	}
}
