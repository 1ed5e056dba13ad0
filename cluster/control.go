package cluster

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

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// errNotController answers a request that reached a node that is not the
// active controller, or a controller that lost its place before what it
// decided was committed: the caller asks again, of the metadata leader.
var errNotController = fmt.Errorf("%w: this node is not the active controller", replica.ErrNotController)

// control is a node's control plane, run by one goroutine: it applies the
// metadata log's committed records to the controller State every node
// builds, and, on the node that leads the metadata log, runs the active
// Controller, whose decisions become the log's proposals.
//
// The active controller is built only once the log reports this node as
// the leader of a term, which it does once every entry of earlier terms
// is in its feed: the State is then the replay of every committed record,
// and the new controller's epoch is above every earlier one's. A
// controller that loses the lead, or whose proposal the log refuses, is
// dropped at once; what it proposed and got committed stays, and records
// of an older controller epoch that commit after a newer controller's
// first record are refused by State.Apply on every node alike (the
// controller epoch fences them).
type control struct {
	id   replica.NodeID
	md   MetadataLog
	cfg  controller.Config
	tick time.Duration
	log  *slog.Logger
	rng  *rand.Rand
	// send carries the controller's AlterPartitionResponses.
	send func(replica.Message)

	state   *controller.State
	history []controller.Record // records that replay to state: the latest snapshot's, then those applied since
	applied uint64              // the index of the latest entry applied
	term    uint64              // the metadata log's term as last reported
	ctrl    *controller.Controller
	// snapshotEvery is how many applied entries pass between snapshots (0:
	// never); snapshotAt is the index of the latest one.
	snapshotEvery, snapshotAt uint64
	// Proposals are named by this incarnation's nonce and a sequence
	// number, so that an entry proposed by an earlier incarnation of the
	// node is never taken for one of this one's.
	nonce   uint64
	seq     uint64
	waiting map[uint64]func(error)

	inbox   chan func()
	stopped chan struct{} // closed when run returns
	lead    atomic.Int32
	view    atomic.Pointer[Metadata] // the state as published, for readers off the loop
	// publish hands the partitions and topics the committed records
	// changed to the node's replicas.
	publish func(metadataUpdate)
	dirty   map[controller.TopicPartition]bool
	topics  map[string]bool // the topics the records changed since the last publish
	// complete says topics holds every topic of the state: the node's
	// topics it does not hold were deleted by records it never saw.
	complete bool
	// replayed says the log's entries committed at its opening are
	// applied: from then on, a snapshot comes from the leader.
	replayed bool
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

func newControl(id replica.NodeID, md MetadataLog, cfg controller.Config, tick time.Duration, rng *rand.Rand, logger *slog.Logger) *control {
	c := &control{
		id: id, md: md, cfg: cfg, tick: tick, log: logger, rng: rng,
		state: controller.NewState(), nonce: rng.Uint64(), waiting: map[uint64]func(error){},
		inbox: make(chan func()), stopped: make(chan struct{}), dirty: map[controller.TopicPartition]bool{}, topics: map[string]bool{},
		stamped: replica.NoBrokerEpoch,
	}
	c.lead.Store(int32(replica.NoNode))
	c.view.Store(c.metadata())
	return c
}

// leader returns the node that leads the metadata log, as far as this
// node knows, or NoNode.
func (c *control) leader() replica.NodeID { return replica.NodeID(c.lead.Load()) }

// run runs the loop until ctx ends or the metadata log closes its feed.
func (c *control) run(ctx context.Context) error {
	defer close(c.stopped)
	ticker := time.NewTicker(c.tick)
	defer ticker.Stop()
	updates := c.md.Updates()
	for {
		select {
		case <-ctx.Done():
			c.resign()
			return nil
		case u, ok := <-updates:
			if !ok {
				c.resign()
				return errors.New("cluster: the metadata log closed its feed")
			}
			if err := c.update(u); err != nil {
				c.resign()
				return err
			}
		case <-ticker.C:
			if c.ctrl != nil {
				if err := c.ctrl.Tick(); err != nil {
					c.log.Error("controller tick", "err", err)
				}
				c.flush(nil)
			}
		case fn := <-c.inbox:
			fn()
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

// update applies one step of the metadata log's feed.
func (c *control) update(u MetadataUpdate) error {
	if u.Snapshot != nil {
		if err := c.restore(u.Snapshot); err != nil {
			return err
		}
	}
	for _, e := range u.Entries {
		if e.Index <= c.applied {
			continue // in the snapshot
		}
		c.apply(e)
	}
	if u.Replayed && !c.replayed {
		c.replayed = true
		if c.applied > 0 {
			// Everything the node's log.Dir got from a record is in the
			// state: a topic the Dir has and the state lacks was deleted by
			// a record whose deletion a crash cut short.
			c.complete = true
			for name := range c.state.Topics {
				c.topics[name] = true
			}
		}
	}
	if u.Term != c.term || c.leader() != u.Leader {
		c.term = u.Term
		c.lead.Store(int32(u.Leader))
		if u.Leader != c.id {
			c.resign()
		} else {
			c.resign() // a controller of an earlier term of this node's
			c.activate()
		}
	}
	if err := c.maybeSnapshot(); err != nil {
		return err
	}
	c.publishChanges()
	return nil
}

// activate makes this node the active controller: the log reports it
// leads, with every entry of earlier terms applied.
func (c *control) activate() {
	s, err := controller.Replay(c.history)
	if err == nil {
		c.ctrl, err = controller.New(c.cfg, s)
	}
	if err != nil {
		c.log.Error("becoming the controller", "err", err)
		return
	}
	c.log.Info("active controller", "epoch", s.Epoch, "term", c.term)
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
	c.flush(func(ferr error) { done(cmp.Or(ferr, err)) })
}

// flush proposes what the controller decided, as one entry, and sends
// its messages once that entry is committed (the controller's contract:
// records stored before messages sent). Only the AlterPartitionResponses
// are sent: every node learns a partition's state from the committed
// records themselves, as KRaft brokers do from the metadata log, so the
// controller's LeaderAndISRs would only repeat them.
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
				c.send(m)
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
		err = c.md.Propose(c.term, data)
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
func (c *control) apply(e MetadataEntry) {
	c.applied = e.Index
	if len(e.Data) == 0 {
		return
	}
	nonce, seq, records, err := decodeProposal(e.Data)
	if err != nil {
		c.log.Error("undecodable metadata entry", "index", e.Index, "err", err)
		return
	}
	for _, r := range records {
		if err := c.state.Apply(r); err != nil {
			// A deposed controller's record, committed after its successor's
			// first one: every node refuses it alike.
			c.log.Info("record refused", "index", e.Index, "err", err)
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

// restore makes the state a snapshot holds the node's committed state and
// history, and marks all of it to be published. A snapshot the leader
// sent is complete: the node applied no entry after it, so a topic its
// log.Dir holds that the snapshot does not was deleted by a record it
// never saw (and one under a name the snapshot gives another id, deleted
// and created again); the node deletes those when the state is published.
func (c *control) restore(snap *MetadataSnapshot) error {
	_, _, records, err := decodeProposal(snap.Data)
	if err != nil {
		return fmt.Errorf("metadata snapshot at index %d: %w", snap.Index, err)
	}
	s, err := controller.Replay(records)
	if err != nil {
		return fmt.Errorf("metadata snapshot at index %d: %w", snap.Index, err)
	}
	c.state, c.history = s, records
	c.applied, c.snapshotAt = snap.Index, snap.Index
	for tp := range s.Partitions {
		c.dirty[tp] = true
	}
	for name := range s.Topics {
		c.topics[name] = true
	}
	c.complete = c.complete || c.replayed
	return nil
}

// maybeSnapshot hands the metadata log a snapshot once snapshotEvery
// entries were applied since the last one. The history a new controller
// replays becomes the image too, so that it stays as short as the log.
func (c *control) maybeSnapshot() error {
	if c.snapshotEvery == 0 || c.applied < c.snapshotAt+c.snapshotEvery {
		return nil
	}
	data, err := encodeProposal(0, 0, c.state.Records())
	if err != nil {
		return err
	}
	if err := c.md.Snapshot(c.applied, data); err != nil {
		return fmt.Errorf("metadata snapshot at index %d: %w", c.applied, err)
	}
	c.snapshotAt = c.applied
	c.history = c.state.Records()
	c.log.Debug("metadata snapshot", "index", c.applied, "records", len(c.history))
	return nil
}

// publishChanges hands the changed partitions to the node's replicas and
// refreshes the state others read. When the committed records register
// the node in another broker epoch (it restarted and registered again),
// every partition is published again in that epoch: the states published
// in the previous one are refused by the node's new life, and it would
// otherwise miss those the registration did not change. Until the records
// register the node, it is sent no partition state: the one it is first
// registered in brings them all.
func (c *control) publishChanges() {
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
	changed := registered || len(u.parts) > 0 || len(u.topics) > 0 || u.complete
	if c.publish != nil && changed {
		c.publish(u)
	}
	if v := c.view.Load(); v == nil || v.Applied != c.applied || v.Term != c.term || v.Controller != c.leader() {
		c.view.Store(c.metadata())
	}
	clear(c.dirty)
	clear(c.topics)
	c.complete = false
}

func compareTP(a, b controller.TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// A proposal's entry: the proposer's nonce and sequence number, then the
// records, each a length (uvarint) and its encoding. A snapshot is the
// image's records encoded the same way, nonce and sequence 0.
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

// ErrBadMetadataEntry means an entry of the metadata log that does not
// decode as the controller's records.
var ErrBadMetadataEntry = errors.New("cluster: bad metadata entry")

func decodeProposal(b []byte) (nonce, seq uint64, records []controller.Record, err error) {
	d := &decoder{b: b}
	nonce, seq = d.uint(), d.uint()
	for d.err == nil && len(d.b) > 0 {
		rb := d.bytes()
		if d.err != nil {
			break
		}
		r, rerr := controller.DecodeRecord(rb)
		if rerr != nil {
			return 0, 0, nil, fmt.Errorf("%w: %w", ErrBadMetadataEntry, rerr)
		}
		records = append(records, r)
	}
	if d.err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %w", ErrBadMetadataEntry, d.err)
	}
	return nonce, seq, records, nil
}
