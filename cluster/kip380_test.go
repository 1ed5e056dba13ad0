package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// scriptedController is a test's own active controller on voter 9 of a
// MemoryMetadata: what it decides becomes the metadata log's entries,
// which the node under test (voter 1) applies as it applies any
// controller's, while its own control loop never leads.
type scriptedController struct {
	t    *testing.T
	md   *MemoryMetadata
	log  *MemoryMetadataLog
	ctrl *controller.Controller
	seq  uint64
}

func newScriptedController(t *testing.T) *scriptedController {
	md := NewMemoryMetadata(1, 9)
	l, err := md.Open(9)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ctrl, err := controller.New(controller.Config{Node: 9, SessionTimeoutTicks: 1000, MinInsyncReplicas: 2}, controller.NewState())
	require.NoError(t, err)
	s := &scriptedController{t: t, md: md, log: l, ctrl: ctrl}
	s.commit(func() error { return nil }) // the controller's first record
	return s
}

// commit makes what decide has the controller decide the next entry of
// the metadata log.
func (s *scriptedController) commit(decide func() error) {
	s.t.Helper()
	require.NoError(s.t, decide())
	rd := s.ctrl.Ready()
	s.ctrl.Advance(rd)
	if len(rd.Records) == 0 {
		return
	}
	s.seq++
	data, err := encodeProposal(1, s.seq, rd.Records)
	require.NoError(s.t, err)
	_, term := s.md.Leader()
	require.NoError(s.t, s.log.Propose(term, data))
}

// registerLive registers a broker incarnation and unfences it.
func (s *scriptedController) registerLive(id replica.NodeID, incarnation uint64, clean bool) int64 {
	s.t.Helper()
	var epoch int64
	s.commit(func() (err error) { epoch, err = s.ctrl.Register(id, incarnation, clean); return err })
	s.commit(func() error { _, err := s.ctrl.Heartbeat(id, epoch); return err })
	return epoch
}

// recorder is a Transport that delivers nothing and records what the node
// sends.
type recorder struct {
	mu   sync.Mutex
	sent []replica.Message
}

func (r *recorder) Send(_ context.Context, _ replica.NodeID, msg []byte) error {
	m, err := replica.Decode(msg)
	if err != nil {
		return err
	}
	msgs := []replica.Message{m}
	if b, ok := m.(*replica.Envelope); ok {
		msgs = b.Messages
	}
	r.mu.Lock()
	r.sent = append(r.sent, msgs...)
	r.mu.Unlock()
	return nil
}

func (r *recorder) Call(context.Context, replica.NodeID, []byte) ([]byte, error) {
	return nil, errors.New("recorder: no calls")
}

func (r *recorder) fetchedWith(epoch int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.sent, func(m replica.Message) bool {
		f, ok := m.(*replica.Fetch)
		return ok && f.To == 2 && f.Topic == "t" && f.BrokerEpoch == epoch
	})
}

// refusals collects what a node's replicas refused.
type refusals struct {
	mu   sync.Mutex
	errs []error
}

func (r *refusals) add(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *refusals) any(target error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.errs, func(err error) bool { return errors.Is(err, target) })
}

// startScriptedNode starts node 1 over fs, following s's metadata.
func startScriptedNode(t *testing.T, s *scriptedController, fs vfs.FS, incarnation uint64, tr Transport, refused *refusals) *Node {
	t.Helper()
	l, err := s.md.Open(1)
	require.NoError(t, err)
	n, err := New(Options{ID: 1, Dir: "/node", FS: fs, Transport: tr, Metadata: l, Logger: testLogger(t), Incarnation: incarnation,
		Tick: 10 * time.Millisecond, ControlTick: 10 * time.Millisecond, MinInsyncReplicas: 2, InternalReplicationFactor: 3,
		stepErrors: refused.add})
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); l.Close() })
	return n
}

func testRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// produceOne appends one record to t-0, acks=1, if the node leads it.
func produceOne(t *testing.T, n *Node) error {
	t.Helper()
	b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("v")}}, segment.BuildOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = n.Produce(ctx, "t", 0, replica.AcksLeader, b)
	return err
}

// The node's control loop hands its replicas each partition's state
// stamped with the broker epoch the committed records register the node
// in (KIP-380), nothing before they register it, and every partition
// again, changed or not, when they register it anew.
func TestPublishStampsTheCommittedBrokerEpoch(t *testing.T) {
	s := newScriptedController(t)
	c := newControl(1, nil, controller.Config{}, time.Second, testRand(), testLogger(t))
	var got []metadataUpdate
	c.publish = func(u metadataUpdate) { got = append(got, u) }
	apply := func() {
		got = nil
		l, err := s.md.Open(1) // replays everything: c skips what it applied
		require.NoError(t, err)
		defer l.Close()
		require.NoError(t, c.update(<-l.Updates()))
	}
	s.registerLive(2, 1, true)
	s.registerLive(3, 1, true)
	apply()
	s.commit(func() error { return s.ctrl.CreateTopic("a", [][]replica.NodeID{{2, 3}}, controller.TopicSpec{}) })
	apply()
	require.Len(t, got, 1)
	require.Equal(t, map[string]topicState{"a": {id: group.TopicID("a"), partitions: 1}}, got[0].topics, "the topic is created")
	require.Empty(t, got[0].parts, "no state before the records register the node")
	require.Equal(t, replica.NoBrokerEpoch, got[0].brokerEpoch)

	stamps := func(u metadataUpdate) map[string]int64 {
		m := map[string]int64{}
		for _, p := range u.parts {
			m[p.Topic] = p.BrokerEpoch
			require.Equal(t, replica.NodeID(1), p.To)
		}
		return m
	}
	first := s.registerLive(1, 100, true)
	apply()
	require.Len(t, got, 1)
	require.Equal(t, uint64(100), got[0].incarnation)
	require.Equal(t, map[string]int64{"a": first}, stamps(got[0]), "the registration brings every partition's state, in its epoch")

	s.commit(func() error { return s.ctrl.CreateTopic("b", [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{}) })
	apply()
	require.Equal(t, map[string]int64{"b": first}, stamps(got[0]), "a change is published alone, in the node's epoch")

	var second int64
	s.commit(func() (err error) { second, err = s.ctrl.Register(1, 200, true); return err })
	apply()
	require.Greater(t, second, first)
	require.Equal(t, uint64(200), got[0].incarnation)
	require.Equal(t, map[string]int64{"a": second, "b": second}, stamps(got[0]),
		"the restarted node's registration republishes every partition in its new epoch")
}

// KIP-380: a node restarted while the committed records still register
// its previous life replays them to its replicas stamped with that life's
// broker epoch, and its replicas refuse them all (it led the partition
// then, and must not lead it on that strength now); once its new
// registration is committed, the states come again in the new epoch and
// the node follows the new leader, its fetches carrying that epoch
// (KIP-903).
func TestRestartedNodeRefusesItsPreviousLifesStates(t *testing.T) {
	s := newScriptedController(t)
	fs := vfs.NewMem()
	old := s.registerLive(1, 100, true)
	s.registerLive(2, 1, true)
	s.registerLive(3, 1, true)
	s.commit(func() error { return s.ctrl.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}}, controller.TopicSpec{}) })
	life := startScriptedNode(t, s, fs, 100, &recorder{}, &refusals{})
	waitFor(t, 5*time.Second, "the first life leads t-0", func() bool { return produceOne(t, life) == nil })
	require.NoError(t, life.Close())

	// The restart: the metadata log replays the records, which register
	// the previous life as t-0's leader.
	tr, refused := &recorder{}, &refusals{}
	life = startScriptedNode(t, s, fs, 200, tr, refused)
	waitFor(t, 5*time.Second, "the previous life's states refused", func() bool { return refused.any(replica.ErrStaleBrokerEpoch) })
	var notLeader *replica.NotLeaderError
	require.ErrorAs(t, produceOne(t, life), &notLeader, "the restarted node does not lead on its previous life's state")
	require.Equal(t, old, life.Metadata().Broker(1).Epoch)

	var epoch int64
	s.commit(func() (err error) { epoch, err = s.ctrl.Register(1, 200, false); return err })
	s.commit(func() error { _, err := s.ctrl.Heartbeat(1, epoch); return err })
	require.Equal(t, replica.NodeID(2), s.ctrl.State().Partitions[controller.TopicPartition{Topic: "t"}].Leader,
		"leadership moved off the restarted node")
	waitFor(t, 5*time.Second, "the new life fetches from the new leader in its epoch", func() bool { return tr.fetchedWith(epoch) })
	require.ErrorAs(t, produceOne(t, life), &notLeader)
	require.Equal(t, replica.NodeID(2), notLeader.Leader, "the node follows node 2")
}

// A partition state sent by a peer is refused: a node takes them from the
// committed records only, stamped with its broker epoch, and one without
// an epoch (NoBrokerEpoch skips the check) would get round KIP-380.
func TestPeersCannotSendPartitionStates(t *testing.T) {
	s := newScriptedController(t)
	n := startScriptedNode(t, s, vfs.NewMem(), 100, &recorder{}, &refusals{})
	state := &replica.LeaderAndISR{Header: replica.Header{From: 2, To: 1, Topic: "t"},
		Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []replica.NodeID{1}, ISR: []replica.NodeID{1}}
	b, err := (&replica.Envelope{Header: replica.Header{From: 2, To: 1}, Messages: []replica.Message{state}}).MarshalBinary()
	require.NoError(t, err)
	err = n.Receive(context.Background(), b)
	require.ErrorIs(t, err, ErrBadRequest)
	require.ErrorContains(t, err, "committed records")
	require.Error(t, produceOne(t, n), "the node does not lead on a peer's word")
}
