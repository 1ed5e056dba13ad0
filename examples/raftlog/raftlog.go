// Package raftlog is a cluster.MetadataLog replicated by etcd raft among
// a fixed set of voters, each keeping its raft log durably in a directory
// of its own. The application carries raft's messages: Config.Send hands
// one to it for a peer, and the peer's Log.Step takes it in.
//
// The feed reports raft's leadership as it changes, with one rule for the
// node itself: it is reported the leader of a term only once the empty
// entry raft appends when it wins the term is committed and applied, that
// is once an entry of the term has been applied. Raft commits an earlier
// term's entries only along with one of the current term, so the Node
// then has in its feed every entry committed before the term. Until then
// the update reports no leader (replica.NoNode) for the term.
//
// Snapshots travel inside raft's messages (a MsgSnap carries the
// snapshot's data), so the transport must carry a message as large as
// the Node's state; the other messages stay under about a MiB.
package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/replica"
)

// Config configures a Log.
type Config struct {
	// ID is this voter.
	ID replica.NodeID
	// Voters are all the voters, this one included: a fixed membership,
	// of which a majority is a quorum. Every voter's Config lists the same.
	Voters []replica.NodeID
	// Dir is the directory of the voter's durable raft log, created if
	// missing.
	Dir string
	// Send carries a raft message, marshaled, to the voter to, whose Log
	// should Step it. It must not block, and may lose the message: raft
	// sends again what is not acknowledged.
	Send func(to replica.NodeID, msg []byte)
	// Tick is raft's clock: a leader sends heartbeats every tick, and a
	// follower that hears none for 10 to 20 ticks calls an election.
	// Zero means 100ms.
	Tick time.Duration
	// Logger receives raft's log; nil means slog.Default().
	Logger *slog.Logger
}

// Log is one voter's MetadataLog. Its methods may be called from any
// goroutine; one goroutine of its own runs raft.
type Log struct {
	id     uint64 // the raft id of this voter
	self   replica.NodeID
	voters map[uint64]bool
	tick   time.Duration
	send   func(to replica.NodeID, msg []byte)
	rn     *raft.RawNode
	store  *store
	feed   *feed

	// The loop's state, which only the loop touches.
	applied struct{ index, term uint64 } // the last entry applied, or snapshot loaded
	// replaying holds back the feed until the entries committed when the
	// log opened, up to recovered, are applied.
	replaying bool
	recovered uint64
	pending   cluster.MetadataUpdate // what the next update carries, leadership aside
	reported  struct {
		leader replica.NodeID
		term   uint64
	}

	lead    atomic.Uint64 // raft's leader as the loop last saw it, for TransferLeadership
	inbox   chan func()
	quit    chan struct{} // closed by Close
	closing sync.Once
	stopped chan struct{} // closed once the loop has returned; err is set then
	err     error         // why the loop returned: nil after Close
	done    sync.WaitGroup
}

var _ cluster.MetadataLog = (*Log)(nil)
var _ cluster.MetadataLeaderTransferer = (*Log)(nil)

var (
	// ErrClosed answers a call to a Log that is closed, or that stopped on
	// an error (which it then wraps).
	ErrClosed = errors.New("raftlog: closed")
	// ErrInvalid is a Config, argument or message a Log refuses.
	ErrInvalid = errors.New("raftlog: invalid")
)

const (
	defaultTick = 100 * time.Millisecond
	// electionTicks is raft's ElectionTick: a follower waits 10 to 20
	// ticks for a heartbeat before it calls an election.
	electionTicks = 10
)

// KeptEntries is how many entries before a snapshot a voter keeps in
// memory, so that a follower a little behind gets entries rather than the
// snapshot.
const KeptEntries = 64

// Open opens the voter's raft log in cfg.Dir and starts it. Its first
// update carries what the directory holds: its latest snapshot, if any,
// and the entries committed since.
func Open(cfg Config) (*Log, error) {
	voters, err := cfg.voters()
	if err != nil {
		return nil, err
	}
	if cfg.Tick <= 0 {
		cfg.Tick = defaultTick
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	st, err := openStore(filepath.Join(cfg.Dir, storeFile), slices.Sorted(maps.Keys(voters)))
	if err != nil {
		return nil, err
	}
	l, err := newLog(cfg, voters, st)
	if err != nil {
		st.close()
		return nil, err
	}
	l.done.Add(2)
	go l.pump()
	go l.loop()
	return l, nil
}

// voters checks cfg and returns its voters' raft ids.
func (cfg *Config) voters() (map[uint64]bool, error) {
	voters := map[uint64]bool{}
	for _, v := range cfg.Voters {
		if v < 0 {
			return nil, fmt.Errorf("%w: config: voter %d: a node id is not negative", ErrInvalid, v)
		}
		voters[raftID(v)] = true
	}
	switch {
	case len(voters) < len(cfg.Voters):
		return nil, fmt.Errorf("%w: config: voters %v name a node twice", ErrInvalid, cfg.Voters)
	case cfg.ID < 0 || !voters[raftID(cfg.ID)]:
		return nil, fmt.Errorf("%w: config: node %d is not among the voters %v", ErrInvalid, cfg.ID, cfg.Voters)
	case cfg.Dir == "":
		return nil, fmt.Errorf("%w: config: no Dir", ErrInvalid)
	case cfg.Send == nil:
		return nil, fmt.Errorf("%w: config: no Send", ErrInvalid)
	}
	return voters, nil
}

func newLog(cfg Config, voters map[uint64]bool, st *store) (l *Log, err error) {
	defer recoverRaft(&err)
	rn, err := raft.NewRawNode(&raft.Config{
		ID: raftID(cfg.ID), ElectionTick: electionTicks, HeartbeatTick: 1, Storage: st.ms,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256,
		// A leader cut off from a majority steps down, and a voter that
		// rejoins does not disrupt a working leader.
		CheckQuorum: true, PreVote: true,
		// Only Propose on the leader proposes.
		DisableProposalForwarding: true,
		Logger:                    raftLogger{cfg.Logger},
	})
	if err != nil {
		return nil, err
	}
	snap, err := st.ms.Snapshot()
	if err != nil {
		return nil, err
	}
	hs, _, err := st.ms.InitialState()
	if err != nil {
		return nil, err
	}
	l = &Log{
		id: raftID(cfg.ID), self: cfg.ID, voters: voters, tick: cfg.Tick, send: cfg.Send,
		rn: rn, store: st, feed: newFeed(),
		replaying: true, recovered: hs.GetCommit(),
		inbox: make(chan func()), quit: make(chan struct{}), stopped: make(chan struct{}),
	}
	l.reported.leader, l.reported.term = replica.NoNode, hs.GetTerm()
	if !raft.IsEmptySnap(snap) {
		l.loadSnapshot(snap)
	}
	return l, nil
}

// raftID is a node's raft id: raft reserves 0 for none, which is a
// NodeID.
func raftID(n replica.NodeID) uint64 { return uint64(n) + 1 }

func nodeID(id uint64) replica.NodeID {
	if id == raft.None {
		return replica.NoNode
	}
	return replica.NodeID(id - 1)
}

// Updates is the feed of committed entries and leadership; see
// cluster.MetadataLog. Close closes it. A Log that stops on an error
// closes it too, once the updates it had pushed are read.
func (l *Log) Updates() <-chan cluster.MetadataUpdate { return l.feed.out }

// Propose proposes data as an entry of term. It returns an error matching
// cluster.ErrNotMetadataLeader unless this voter leads term and has
// reported so in the feed, or if raft drops the proposal (a leadership
// transfer is under way). Data must not be empty: raft's own entries are
// the empty ones.
func (l *Log) Propose(term uint64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: an empty proposal", ErrInvalid)
	}
	data = bytes.Clone(data) // raft keeps it past the return
	return l.do(func() error {
		st := l.rn.BasicStatus()
		if st.RaftState != raft.StateLeader || st.GetTerm() != term || l.reported.leader != l.self || l.reported.term != term {
			return fmt.Errorf("%w: node %d proposed in term %d, and is %s in term %d, reported as led by %d",
				cluster.ErrNotMetadataLeader, l.self, term, st.RaftState, st.GetTerm(), l.reported.leader)
		}
		if err := l.rn.Propose(data); err != nil {
			return fmt.Errorf("%w: node %d, term %d: %w", cluster.ErrNotMetadataLeader, l.self, term, err)
		}
		return nil
	})
}

// Step takes in a raft message a peer's Send carried here. It returns an
// error matching ErrInvalid for one that does not decode, is not from a
// voter to this one, or is of a kind no peer sends (a proposal, a message
// raft keeps to itself).
func (l *Log) Step(msg []byte) error {
	m := new(pb.Message)
	if err := proto.Unmarshal(msg, m); err != nil {
		return fmt.Errorf("%w: a raft message that does not decode: %w", ErrInvalid, err)
	}
	// Proposals are never forwarded, and local messages are raft's own.
	if m.GetTo() != l.id || m.GetFrom() == l.id || !l.voters[m.GetFrom()] || m.GetType() == pb.MsgProp || raft.IsLocalMsg(m.GetType()) {
		return fmt.Errorf("%w: a raft %s from %d to %d, received by node %d",
			ErrInvalid, m.GetType(), nodeID(m.GetFrom()), nodeID(m.GetTo()), l.self)
	}
	return l.do(func() error { return l.rn.Step(m) })
}

// Snapshot records data as the state once the entries up to index, an
// entry the feed delivered, are applied, and drops those entries: the
// file keeps none, memory the last few. Raft sends the snapshot to a
// follower that lacks entries it dropped. A snapshot at or below the
// latest one is ignored.
func (l *Log) Snapshot(index uint64, data []byte) error {
	data = bytes.Clone(data) // the snapshot keeps it
	return l.do(func() error {
		if index > l.applied.index {
			return fmt.Errorf("%w: a snapshot at index %d, beyond the applied index %d", ErrInvalid, index, l.applied.index)
		}
		err := l.store.compact(index, data, KeptEntries)
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil
		}
		return err
	})
}

// TransferLeadership hands raft leadership, if this voter has it, to the
// most caught-up recently active peer, and returns once another voter
// leads or this one no longer does, or after an election timeout, when
// raft gives the transfer up.
func (l *Log) TransferLeadership() { l.transfer(raft.None) }

// TransferLeadershipTo hands the lead to voter to, if this node leads
// (etcd's move-leader), and returns once another node leads, or with an
// error if to is not a voter or the lead did not move before an election
// timeout.
func (l *Log) TransferLeadershipTo(to replica.NodeID) error {
	if !l.voters[raftID(to)] {
		return fmt.Errorf("%w: node %d is not a voter", ErrInvalid, to)
	}
	if l.transfer(raftID(to)) && l.lead.Load() == l.id {
		return fmt.Errorf("raftlog: the lead did not move to node %d within an election timeout", to)
	}
	return nil
}

// transfer starts a transfer of the lead to raft id to, or to the
// recently active peer furthest along if to is raft.None, and waits until
// this node no longer leads or an election timeout passed; it reports
// whether a transfer started.
func (l *Log) transfer(to uint64) bool {
	started := false
	err := l.do(func() error {
		st := l.rn.Status()
		if st.RaftState != raft.StateLeader {
			return nil
		}
		if to == raft.None {
			var match uint64
			for _, id := range slices.Sorted(maps.Keys(st.Progress)) {
				if pr := st.Progress[id]; id != l.id && pr.RecentActive && (to == raft.None || pr.Match > match) {
					to, match = id, pr.Match
				}
			}
		}
		if to != raft.None && to != l.id {
			l.rn.TransferLeader(to)
			started = true
		}
		return nil
	})
	if err != nil || !started {
		return false
	}
	deadline := time.NewTimer(electionTicks * l.tick)
	defer deadline.Stop()
	poll := time.NewTicker(l.tick)
	defer poll.Stop()
	for l.lead.Load() == l.id {
		select {
		case <-poll.C:
		case <-deadline.C:
			return true
		case <-l.stopped:
			return true
		}
	}
	return true
}

// Close stops the Log, closes Updates and the raft log file. It returns
// the error that had stopped the Log, if one had.
func (l *Log) Close() error {
	l.closing.Do(func() { close(l.quit) })
	l.done.Wait()
	return l.err
}

// do runs fn on the loop and returns its error, or an ErrClosed if the
// Log stopped before it ran.
func (l *Log) do(fn func() error) error {
	res := make(chan error, 1)
	select {
	case l.inbox <- func() { res <- fn() }:
	case <-l.stopped:
		return l.stoppedErr()
	}
	select {
	case err := <-res:
		return err
	case <-l.stopped: // fn stopped the loop: raft gave up
		return l.stoppedErr()
	}
}

func (l *Log) stoppedErr() error {
	if l.err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, l.err)
	}
	return ErrClosed
}

func (l *Log) pump() {
	defer l.done.Done()
	l.feed.pump(l.quit)
}

func (l *Log) loop() {
	defer l.done.Done()
	err := l.run()
	if cerr := l.store.close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", l.store.path, cerr)
	}
	l.err = err
	close(l.stopped)
	l.feed.end()
}

// run runs raft until Close, or until persisting fails or raft gives up.
func (l *Log) run() (err error) {
	defer recoverRaft(&err)
	ticker := time.NewTicker(l.tick)
	defer ticker.Stop()
	l.publish() // a log with nothing to replay tells so at once
	for {
		if err := l.ready(); err != nil {
			return err
		}
		select {
		case <-l.quit:
			return nil
		case <-ticker.C:
			l.rn.Tick()
		case fn := <-l.inbox:
			fn()
		}
	}
}

// ready does what raft asks, in its order: persist, send, apply; and
// publishes what each Ready changed.
func (l *Log) ready() error {
	for l.rn.HasReady() {
		rd := l.rn.Ready()
		if err := l.store.save(rd.Snapshot, rd.HardState, rd.Entries); err != nil {
			return fmt.Errorf("raftlog: node %d: persisting the raft log: %w", l.self, err)
		}
		var snapsTo []uint64
		for _, m := range rd.Messages {
			b, err := proto.Marshal(m)
			if err != nil {
				return fmt.Errorf("raftlog: node %d: marshaling a raft %s: %w", l.self, m.GetType(), err)
			}
			l.send(nodeID(m.GetTo()), b)
			if m.GetType() == pb.MsgSnap {
				snapsTo = append(snapsTo, m.GetTo())
			}
		}
		if !raft.IsEmptySnap(rd.Snapshot) {
			l.loadSnapshot(rd.Snapshot)
		}
		for _, e := range rd.CommittedEntries {
			l.applied.index, l.applied.term = e.GetIndex(), e.GetTerm()
			// Raft's own entries are skipped: a new leader's empty one, and
			// configuration changes, which a fixed membership never has.
			if e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
				l.pending.Entries = append(l.pending.Entries, cluster.MetadataEntry{Index: e.GetIndex(), Term: e.GetTerm(), Data: e.GetData()})
			}
		}
		l.rn.Advance(rd)
		// Send may lose a snapshot without a word: it is reported
		// delivered, and raft probes the follower with the entries after
		// it. If it was lost, the follower refuses them, and raft sends
		// the snapshot again.
		for _, to := range snapsTo {
			l.rn.ReportSnapshot(to, raft.SnapshotFinish)
		}
		l.publish()
	}
	return nil
}

// loadSnapshot makes snap the state the next update carries, in place of
// the entries before it.
func (l *Log) loadSnapshot(snap *pb.Snapshot) {
	md := snap.GetMetadata()
	l.applied.index, l.applied.term = md.GetIndex(), md.GetTerm()
	l.pending.Snapshot = &cluster.MetadataSnapshot{Index: md.GetIndex(), Term: md.GetTerm(), Data: snap.GetData()}
	l.pending.Entries = nil
}

// publish pushes an update if there is anything new to tell: entries, a
// snapshot, a change of leadership, or the end of the replay. Until the
// replay ends it holds everything back, so that the first update carries
// all that the log had committed when it opened.
func (l *Log) publish() {
	st := l.rn.BasicStatus()
	l.lead.Store(st.Lead)
	leader := nodeID(st.Lead)
	if st.Lead == l.id && (st.RaftState != raft.StateLeader || l.applied.term != st.GetTerm()) {
		leader = replica.NoNode // the leader's empty entry is not applied yet
	}
	changed := leader != l.reported.leader || st.GetTerm() != l.reported.term
	if l.replaying {
		if l.applied.index < l.recovered {
			return
		}
		l.replaying = false
		l.pending.Replayed = true
	}
	if !changed && l.pending.Snapshot == nil && len(l.pending.Entries) == 0 && !l.pending.Replayed {
		return
	}
	u := l.pending
	u.Leader, u.Term = leader, st.GetTerm()
	l.reported.leader, l.reported.term = leader, st.GetTerm()
	l.feed.push(u)
	l.pending = cluster.MetadataUpdate{}
}
