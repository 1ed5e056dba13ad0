package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// errNotController answers a request that reached a node that is not the
// active controller, or a controller that lost its place before what it
// decided was committed: the caller asks again, of the raft leader.
var errNotController = fmt.Errorf("%w: this node is not the active controller", replica.ErrNotController)

// control is a node's control plane, run by one goroutine: the node's
// etcd raft RawNode, which replicates the controller's records; the
// committed controller State every node builds by applying the committed
// records; and, on the node that leads the raft group, the active
// Controller, whose decisions become raft proposals.
//
// The active controller is built only once the leader has applied every
// entry of its log, its own first entry of the term included (raft commits
// earlier terms' entries only with one of the current term): its State is
// then the replay of every committed record, and its epoch is above every
// earlier controller's. A controller that loses raft leadership, or whose
// proposal raft refuses, is dropped at once; what it proposed and got
// committed stays, and records of an older controller epoch that commit
// after a newer controller's first record are refused by State.Apply on
// every node alike (the controller epoch fences them).
type control struct {
	id     replica.NodeID
	rn     *raft.RawNode
	store  *raftStore
	peers  map[replica.NodeID]string
	raftTr *poster
	dataTr replica.Transport
	cfg    controller.Config
	tick   time.Duration
	log    *slog.Logger

	state   *controller.State
	history []controller.Record // records that replay to state: the latest snapshot's, then those applied since
	applied struct{ index, term uint64 }
	ctrl    *controller.Controller
	snap    snapshots
	// Proposals are named by this process's nonce and a sequence number,
	// so that an entry proposed by an earlier incarnation of the node is
	// never taken for one of this one's.
	nonce   uint64
	seq     uint64
	waiting map[uint64]func(error)

	inbox   chan func()
	stopped chan struct{} // closed when run returns
	lead    atomic.Int32
	view    atomic.Pointer[metadata]
	// publish hands the partitions and topics the committed records
	// changed to the node's replicas.
	publish func(metadataUpdate)
	dirty   map[controller.TopicPartition]bool
	topics  map[string]bool // the topics the records changed since the last publish
	// complete says topics holds every topic of the state, loaded from a
	// snapshot the leader sent: the node's topics it does not hold were
	// deleted by records the node never saw.
	complete bool
	// recovered is the commit index the node's raft log had when it
	// started, until the node has applied it: from then on its state
	// holds every topic its log.Dir got from a record, and those it does
	// not hold were deleted by a record whose deletion a crash cut short
	// (or one of its own snapshot's past).
	recovered uint64
	// stamped is the broker epoch of this node in the committed records
	// when the partition states were last published (NoBrokerEpoch: not
	// registered).
	stamped int64
}

// metadataUpdate is what the committed records changed, for the node's
// replicas: the topics to create, and the partitions' states, each stamped
// with the broker epoch of the node's committed registration (KIP-380),
// so that a state published while the records still register the node's
// previous life is refused by this one. brokerEpoch and incarnation are
// that registration's, NoBrokerEpoch and 0 if there is none: a node takes
// its broker epoch from it once the incarnation is its own, as a KRaft
// broker acts only once its metadata has caught up with its registration.
type metadataUpdate struct {
	topics map[string]topicState
	// complete says topics names every topic there is (see control.complete).
	complete    bool
	parts       []*replica.LeaderAndISR
	brokerEpoch int64
	incarnation uint64
}

// topicState is a topic as the committed records leave it, for the
// node's log.Dir: its id, partition count and configs by Kafka name, or
// removed.
type topicState struct {
	id         [16]byte
	partitions int32
	configs    map[string]string
	removed    bool
}

// topicState returns a topic's committed state.
func (c *control) topicState(name string) topicState {
	t := c.state.Topics[name]
	if t == nil {
		return topicState{removed: true}
	}
	return topicState{id: topicID(t), partitions: t.Partitions, configs: maps.Clone(t.Configs)}
}

// topicID is a topic's id: the controller's, or, for a topic created
// without one, one derived from its name (group.TopicID), the same on
// every node.
func topicID(t *controller.Topic) [16]byte {
	if t.ID == ([16]byte{}) {
		return group.TopicID(t.Name)
	}
	return t.ID
}

func newControl(id replica.NodeID, store *raftStore, peers map[replica.NodeID]string, cfg controller.Config, tick time.Duration, logger *slog.Logger) (*control, error) {
	rn, err := raft.NewRawNode(&raft.Config{
		ID: uint64(id), ElectionTick: 10, HeartbeatTick: 1, Storage: store.ms,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256,
		// A leader cut off from a majority steps down, and a node that
		// rejoins does not disrupt a working leader.
		CheckQuorum: true, PreVote: true,
		// Only the active controller proposes.
		DisableProposalForwarding: true,
		Logger:                    raftLogger{logger},
	})
	if err != nil {
		return nil, err
	}
	c := &control{
		id: id, rn: rn, store: store, peers: peers, raftTr: newPoster(peers), cfg: cfg, tick: tick, log: logger,
		state: controller.NewState(), nonce: rand.Uint64(), waiting: map[uint64]func(error){},
		inbox: make(chan func()), stopped: make(chan struct{}), dirty: map[controller.TopicPartition]bool{}, topics: map[string]bool{},
		snap: snapshots{every: defaultSnapshotEntries},
	}
	snap, err := store.ms.Snapshot()
	if err == nil {
		// The node's own snapshot: its log.Dir may hold topics of the
		// entries after it, which raft replays.
		err = c.restore(snap, false)
	}
	if err != nil {
		return nil, err
	}
	hs, _, err := store.ms.InitialState()
	if err != nil {
		return nil, err
	}
	c.recovered = hs.GetCommit()
	c.view.Store(c.metadata())
	return c, nil
}

// leader returns the node that leads the raft group, as far as this node
// knows, or NoNode.
func (c *control) leader() replica.NodeID {
	if l := c.lead.Load(); l != int32(raft.None) {
		return replica.NodeID(l)
	}
	return replica.NoNode
}

// transferLeadership hands raft leadership, and with it the controller,
// to node to (NoNode: the most caught-up live peer), if this node leads;
// it waits until another node is known to lead or ctx ends.
func (c *control) transferLeadership(ctx context.Context, to replica.NodeID) {
	started := make(chan bool, 1)
	err := c.do(ctx, func() {
		st := c.rn.Status()
		if st.RaftState != raft.StateLeader {
			started <- false
			return
		}
		if to == replica.NoNode {
			var match uint64
			for id, pr := range st.Progress {
				if id != uint64(c.id) && pr.RecentActive && pr.Match >= match {
					to, match = replica.NodeID(id), pr.Match
				}
			}
		}
		if to != replica.NoNode {
			c.rn.TransferLeader(uint64(to))
		}
		started <- to != replica.NoNode
	})
	if err != nil || !<-started {
		return
	}
	for (c.leader() == c.id || c.leader() == replica.NoNode) && ctx.Err() == nil {
		time.Sleep(c.tick)
	}
}

// run runs the loop until ctx ends.
func (c *control) run(ctx context.Context) error {
	defer c.startSnapshots(ctx)()
	defer close(c.stopped)
	defer c.raftTr.close()
	c.publishChanges() // what a snapshot loaded at start holds
	ticker := time.NewTicker(c.tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			c.resign()
			return nil
		case <-ticker.C:
			c.rn.Tick()
			if c.ctrl != nil {
				if err := c.ctrl.Tick(); err != nil {
					c.log.Error("controller tick", "err", err)
				}
				c.flush(nil)
			}
		case fn := <-c.inbox:
			fn()
		}
		if err := c.ready(); err != nil {
			return err
		}
	}
}

// do runs fn on the loop.
func (c *control) do(ctx context.Context, fn func()) error {
	select {
	case c.inbox <- fn:
		return nil
	case <-c.stopped:
		return errNotController
	case <-ctx.Done():
		return ctx.Err()
	}
}

// step hands the loop a raft message from a peer.
func (c *control) step(ctx context.Context, m *pb.Message) error {
	return c.do(ctx, func() {
		if err := c.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			c.log.Debug("raft step", "err", err)
		}
	})
}

// ready does what raft asks, in its order: persist, send, apply.
func (c *control) ready() error {
	for c.rn.HasReady() {
		rd := c.rn.Ready()
		if err := c.store.save(rd.Snapshot, rd.HardState, rd.Entries); err != nil {
			return fmt.Errorf("persisting the raft log: %w", err)
		}
		if err := c.restore(rd.Snapshot, true); err != nil {
			return err
		}
		for _, m := range rd.Messages {
			if m.GetType() == pb.MsgSnap {
				if err := c.sendSnapshot(m); err != nil {
					return err
				}
				continue
			}
			b, err := proto.Marshal(m)
			if err != nil {
				return err
			}
			to := replica.NodeID(m.GetTo())
			c.raftTr.send(to, "http://"+c.peers[to]+"/raft", b)
		}
		if rd.SoftState != nil {
			c.lead.Store(int32(rd.SoftState.Lead))
			if rd.SoftState.RaftState != raft.StateLeader {
				c.resign()
			}
		}
		for _, e := range rd.CommittedEntries {
			c.apply(e)
		}
		if err := c.maybeSnapshot(); err != nil {
			return err
		}
		c.rn.Advance(rd)
		if len(rd.CommittedEntries) > 0 || rd.SoftState != nil || !raft.IsEmptySnap(rd.Snapshot) {
			c.publishChanges()
		}
	}
	c.maybeActivate()
	return nil
}

// maybeActivate makes this node the active controller if it leads the
// raft group and has applied all its log.
func (c *control) maybeActivate() {
	st := c.rn.BasicStatus()
	if c.ctrl != nil || st.RaftState != raft.StateLeader {
		return
	}
	last, err := c.store.ms.LastIndex()
	if err != nil || c.applied.term != st.GetTerm() || c.applied.index != last {
		return
	}
	s, err := controller.Replay(c.history)
	if err == nil {
		c.ctrl, err = controller.New(c.cfg, s)
	}
	if err != nil {
		c.log.Error("becoming the controller", "err", err)
		return
	}
	c.log.Info("active controller", "epoch", s.Epoch, "term", st.GetTerm())
	c.flush(nil)
}

// resign drops the active controller: what it decided and did not see
// committed is answered errNotController.
func (c *control) resign() {
	if c.ctrl == nil {
		return
	}
	c.log.Info("controller resigns", "epoch", c.ctrl.State().Epoch)
	c.ctrl = nil
	for _, id := range slices.Sorted(maps.Keys(c.waiting)) {
		c.waiting[id](errNotController)
	}
	clear(c.waiting)
}

// decide runs fn on the active controller and calls done, on the loop,
// once what fn decided is committed, with fn's error; errNotController if
// there is no active controller here or it lost its place first.
func (c *control) decide(fn func(*controller.Controller) error, done func(error)) {
	if c.ctrl == nil {
		done(errNotController)
		return
	}
	err := fn(c.ctrl)
	c.flush(func(ferr error) { done(firstErr(ferr, err)) })
}

func firstErr(first, second error) error {
	if first != nil {
		return first
	}
	return second
}

// flush proposes what the controller decided, as one raft entry, and
// sends its messages once that entry is committed (the controller's
// contract: records stored before messages sent). Only the
// AlterPartitionResponses are sent: every node learns a partition's state
// from the committed records themselves, as KRaft brokers do from the
// metadata log, so the controller's LeaderAndISRs would only repeat them.
func (c *control) flush(done func(error)) {
	rd := c.ctrl.Ready()
	c.ctrl.Advance(rd)
	for _, tp := range rd.Unclean {
		c.log.Warn("unclean leader election: acknowledged records may be lost", "partition", tp)
	}
	var msgs []replica.Message
	for _, m := range rd.Messages {
		if _, ok := m.(*replica.AlterPartitionResponse); ok {
			msgs = append(msgs, m)
		}
	}
	send := func(err error) {
		if err == nil {
			for _, m := range msgs {
				c.dataTr.Send(m)
			}
		}
		if done != nil {
			done(err)
		}
	}
	if len(rd.Records) == 0 {
		send(nil)
		return
	}
	c.seq++
	data, err := encodeProposal(c.nonce, c.seq, rd.Records)
	if err == nil {
		err = c.rn.Propose(data)
	}
	if err != nil {
		c.log.Warn("proposal refused", "err", err)
		c.resign()
		send(errNotController)
		return
	}
	c.waiting[c.seq] = send
}

// apply applies a committed entry to the committed state.
func (c *control) apply(e *pb.Entry) {
	c.applied.index, c.applied.term = e.GetIndex(), e.GetTerm()
	if e.GetType() != pb.EntryNormal || len(e.GetData()) == 0 {
		return // the empty entry of a new leader
	}
	nonce, seq, records, err := decodeProposal(e.GetData())
	if err != nil {
		c.log.Error("undecodable raft entry", "index", e.GetIndex(), "err", err)
		return
	}
	for _, r := range records {
		if err := c.state.Apply(r); err != nil {
			// A deposed controller's record, committed after its successor's
			// first one: every node refuses it alike.
			c.log.Info("record refused", "index", e.GetIndex(), "err", err)
			continue
		}
		c.history = append(c.history, r)
		switch r := r.(type) {
		case *controller.PartitionRecord:
			c.dirty[controller.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = true
		case *controller.TopicRecord:
			c.topics[r.Name] = true
		case *controller.ConfigRecord:
			c.topics[r.Topic] = true
		case *controller.RemoveTopicRecord:
			c.topics[r.Topic] = true
		}
	}
	if nonce == c.nonce {
		if done := c.waiting[seq]; done != nil {
			delete(c.waiting, seq)
			done(nil)
		}
	}
}

// publishChanges hands the changed partitions to the node's replicas and
// refreshes the metadata others read. When the committed records register
// the node in another broker epoch (it restarted and registered again),
// every partition is published again in that epoch: the states published
// in the previous one are refused by the node's new life, and it would
// otherwise miss those the registration did not change. Until the records
// register the node, it is sent no partition state: the one it is first
// registered in brings them all.
//
// Once the node has applied what its raft log had committed when it
// started, and once it loads a snapshot the leader sent, every topic is
// published as the complete set: the node deletes the topics of its
// log.Dir the state lacks or gives another id.
func (c *control) publishChanges() {
	if c.recovered > 0 && c.applied.index >= c.recovered {
		c.recovered, c.complete = 0, true
		for name := range c.state.Topics {
			c.topics[name] = true
		}
	}
	u := metadataUpdate{topics: map[string]topicState{}, complete: c.complete, brokerEpoch: replica.NoBrokerEpoch}
	for name := range c.topics {
		u.topics[name] = c.topicState(name)
	}
	if b := c.state.Brokers[c.id]; b != nil {
		u.brokerEpoch, u.incarnation = b.Epoch, b.Incarnation
	}
	registered := u.brokerEpoch != c.stamped
	if registered {
		c.stamped = u.brokerEpoch
		for tp := range c.state.Partitions {
			c.dirty[tp] = true
		}
	}
	if u.brokerEpoch != replica.NoBrokerEpoch {
		for _, tp := range slices.SortedFunc(maps.Keys(c.dirty), compareTP) {
			if m := c.state.LeaderAndISR(tp, replica.NoNode, c.id); m != nil { // else deleted
				u.parts = append(u.parts, m)
			}
		}
	}
	if c.publish != nil && (registered || len(u.parts) > 0 || len(u.topics) > 0 || u.complete) {
		c.publish(u)
	}
	clear(c.dirty)
	clear(c.topics)
	c.complete = false
	c.view.Store(c.metadata())
}

func compareTP(a, b controller.TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// The raft entry of a proposal: the proposer's nonce and sequence number,
// then the records, each a length (uvarint) and its encoding.
func encodeProposal(nonce, seq uint64, records []controller.Record) ([]byte, error) {
	b := binary.AppendUvarint(nil, nonce)
	b = binary.AppendUvarint(b, seq)
	for _, r := range records {
		rb, err := r.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(rb)))
		b = append(b, rb...)
	}
	return b, nil
}

var errBadProposal = errors.New("cluster: bad proposal")

func decodeProposal(b []byte) (nonce, seq uint64, records []controller.Record, err error) {
	next := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			err = firstErr(err, errBadProposal)
			return 0
		}
		b = b[n:]
		return v
	}
	nonce, seq = next(), next()
	for err == nil && len(b) > 0 {
		n := next()
		if err != nil {
			return 0, 0, nil, fmt.Errorf("%w: a record length does not decode", errBadProposal)
		}
		if n > uint64(len(b)) {
			return 0, 0, nil, fmt.Errorf("%w: record length %d past the entry's end", errBadProposal, n)
		}
		r, rerr := controller.DecodeRecord(b[:n])
		if rerr != nil {
			return 0, 0, nil, rerr
		}
		records = append(records, r)
		b = b[n:]
	}
	return nonce, seq, records, err
}

// raftLogger sends etcd raft's log to the node's logger.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                 {}
func (r raftLogger) Debugf(format string, v ...any) {}
func (r raftLogger) Error(v ...any)                 { r.l.Error("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any) { r.l.Error("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...any)                  { r.l.Info("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)  { r.l.Info("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)               { r.l.Warn("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.l.Warn("raft: " + fmt.Sprintf(format, v...))
}
func (r raftLogger) Fatal(v ...any) { r.l.Error("raft: " + fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...any) {
	r.Fatal(fmt.Sprintf(format, v...))
}
func (r raftLogger) Panic(v ...any)                 { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
