package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// commitDecision makes what decide has ctrl decide the next committed raft
// entry of c's node and applies it as the control loop does, publishing
// what changed.
func commitDecision(t *testing.T, c *control, ctrl *controller.Controller, decide func() error) {
	t.Helper()
	require.NoError(t, decide())
	index := c.applied.index + 1
	e := drain(t, ctrl, 9, index, index)
	require.NoError(t, c.store.save(nil, &pb.HardState{Term: new(uint64(1)), Commit: new(index)}, []*pb.Entry{e}))
	c.apply(e)
	c.publishChanges()
}

// registerLive registers a broker incarnation and unfences it with a
// heartbeat, and returns its broker epoch.
func registerLive(t *testing.T, c *control, ctrl *controller.Controller, id replica.NodeID, incarnation uint64, clean bool) int64 {
	t.Helper()
	var epoch int64
	commitDecision(t, c, ctrl, func() (err error) { epoch, err = ctrl.Register(id, incarnation, clean); return err })
	commitDecision(t, c, ctrl, func() error { _, err := ctrl.Heartbeat(id, epoch); return err })
	return epoch
}

func newTestController(t *testing.T) *controller.Controller {
	t.Helper()
	ctrl, err := controller.New(controller.Config{Node: 2, SessionTimeout: 10, MinInsyncReplicas: 2}, controller.NewState())
	require.NoError(t, err)
	return ctrl
}

// The control loop sends the node's replicas each partition's state
// stamped with the broker epoch the committed records register the node
// in (KIP-380), nothing before they register it, and every partition
// again, changed or not, when they register it anew.
func TestPublishStampsTheCommittedBrokerEpoch(t *testing.T) {
	c := newTestControl(t)
	var got []metadataUpdate
	c.publish = func(u metadataUpdate) { got = append(got, u) }
	ctrl := newTestController(t)
	registerLive(t, c, ctrl, 2, 1, true)
	registerLive(t, c, ctrl, 3, 1, true)
	got = nil
	commitDecision(t, c, ctrl, func() error { return ctrl.CreateTopic("a", [][]replica.NodeID{{2, 3}}, false) })
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
	got = nil
	first := registerLive(t, c, ctrl, 1, 100, true)
	require.Equal(t, metadataUpdate{topics: map[string]topicState{}, brokerEpoch: first, incarnation: 100,
		parts: []*replica.LeaderAndISR{c.state.LeaderAndISR(controller.TopicPartition{Topic: "a"}, replica.NoNode, 1)}}, got[0],
		"the registration brings every partition's state, in its epoch")
	require.Equal(t, map[string]int64{"a": first}, stamps(got[0]))

	got = nil
	commitDecision(t, c, ctrl, func() error { return ctrl.CreateTopic("b", [][]replica.NodeID{{1, 2, 3}}, false) })
	require.Len(t, got, 1)
	require.Equal(t, map[string]int64{"b": first}, stamps(got[0]), "a change is published alone, in the node's epoch")

	got = nil
	var second int64
	commitDecision(t, c, ctrl, func() (err error) { second, err = ctrl.Register(1, 200, true); return err })
	require.Greater(t, second, first)
	require.Len(t, got, 1)
	require.Equal(t, uint64(200), got[0].incarnation)
	require.Equal(t, map[string]int64{"a": second, "b": second}, stamps(got[0]),
		"the restarted node's registration republishes every partition in its new epoch")
}

// testNode is node 1 without a process or HTTP: its replica driver and
// metadata loop run over a log directory; what its replicas send, and the
// messages they refuse, are recorded.
type testNode struct {
	*node
	mu      sync.Mutex
	sent    []replica.Message
	refused []error
	stop    func()
}

func (tn *testNode) Send(m replica.Message) {
	msgs := []replica.Message{m}
	if b, ok := m.(*replica.Batch); ok {
		msgs = b.Messages
	}
	tn.mu.Lock()
	tn.sent = append(tn.sent, msgs...)
	tn.mu.Unlock()
}

func (tn *testNode) refuse(err error) {
	tn.mu.Lock()
	tn.refused = append(tn.refused, err)
	tn.mu.Unlock()
}

func (tn *testNode) refusedAny(target error) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return slices.ContainsFunc(tn.refused, func(err error) bool { return errors.Is(err, target) })
}

func (tn *testNode) fetchedWith(epoch int64) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return slices.ContainsFunc(tn.sent, func(m replica.Message) bool {
		f, ok := m.(*replica.Fetch)
		return ok && f.To == 2 && f.Topic == "t" && f.BrokerEpoch == epoch
	})
}

func startTestNode(t *testing.T, logPath string, incarnation int64) *testNode {
	t.Helper()
	dir, err := log.OpenDir(logPath, log.DirOptions{Log: log.Options{ExternalHighWatermark: true}})
	require.NoError(t, err)
	tn := &testNode{node: newNode(nodeConfig{id: 1, lag: 100, minISR: 2}, slog.New(slog.NewTextHandler(io.Discard, nil)), dir, incarnation)}
	tn.d, err = replica.NewDriver(replica.DriverConfig{Node: replica.NewNode(1), Transport: tn, TickInterval: 10 * time.Millisecond, OnError: tn.refuse})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { tn.d.Run(ctx) })
	wg.Go(func() { tn.applyMetadata(ctx) })
	tn.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		require.NoError(t, dir.Close())
	})
	t.Cleanup(tn.stop)
	return tn
}

// produce appends one record to t-0 if the node leads it.
func (tn *testNode) produce(t *testing.T) error {
	t.Helper()
	batch, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("v")}}, segment.BuildOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := tn.d.Produce(ctx, "t", 0, replica.AcksLeader, batch)
	return firstErr(err, res.Err)
}

// KIP-380 in the example: a node restarted while the committed records
// still register its previous life replays them to its replicas stamped
// with that life's broker epoch, and its replicas refuse them all (it led
// the partition then, and must not lead it on that strength now); once
// its new registration is committed, the states come again in the new
// epoch and the node follows the new leader, its fetches carrying that
// epoch (KIP-903). A state stamped for the previous life that arrives
// late is still refused.
func TestRestartedNodeRefusesItsPreviousLifesStates(t *testing.T) {
	raftPath := filepath.Join(t.TempDir(), raftFile)
	logPath := filepath.Join(t.TempDir(), logDir)
	ctrl := newTestController(t)
	c := openTestControl(t, raftPath)
	life := startTestNode(t, logPath, 100)
	c.publish = life.update
	old := registerLive(t, c, ctrl, 1, 100, true)
	registerLive(t, c, ctrl, 2, 1, true)
	registerLive(t, c, ctrl, 3, 1, true)
	commitDecision(t, c, ctrl, func() error { return ctrl.CreateTopic("t", [][]replica.NodeID{{1, 2, 3}}, false) })
	require.Equal(t, replica.NodeID(1), c.state.Partitions[controller.TopicPartition{Topic: "t"}].Leader)
	waitFor(t, 5*time.Second, "the first life leads t-0", func() (bool, string) {
		err := life.produce(t)
		return err == nil, errString(err)
	})
	life.stop()
	require.NoError(t, c.store.close())

	// The restart: the raft log replays the records, which register the
	// previous life as t-0's leader.
	c = openTestControl(t, raftPath)
	life = startTestNode(t, logPath, 200)
	c.publish = life.update
	require.NoError(t, c.ready())
	require.Equal(t, old, c.state.Brokers[1].Epoch)
	waitFor(t, 5*time.Second, "the previous life's states refused", func() (bool, string) {
		return life.refusedAny(replica.ErrStaleBrokerEpoch), ""
	})
	var notLeader *replica.NotLeaderError
	require.ErrorAs(t, life.produce(t), &notLeader, "the restarted node does not lead on its previous life's state")

	var epoch int64
	commitDecision(t, c, ctrl, func() (err error) { epoch, err = ctrl.Register(1, 200, false); return err })
	commitDecision(t, c, ctrl, func() error { _, err := ctrl.Heartbeat(1, epoch); return err })
	p := c.state.Partitions[controller.TopicPartition{Topic: "t"}]
	require.Equal(t, replica.NodeID(2), p.Leader, "leadership moved off the restarted node")
	waitFor(t, 5*time.Second, "the new life fetches from the new leader in its epoch", func() (bool, string) {
		return life.fetchedWith(epoch), ""
	})

	// A state naming the node leader in a later leader epoch, stamped
	// for the previous life, is refused; the same state stamped for this
	// life is taken.
	late := c.state.LeaderAndISR(controller.TopicPartition{Topic: "t"}, replica.NoNode, 1)
	late.BrokerEpoch, late.Leader, late.LeaderEpoch, late.ISR = old, 1, p.LeaderEpoch+1, late.Replicas
	life.mu.Lock()
	life.refused = nil
	life.mu.Unlock()
	life.update(metadataUpdate{parts: []*replica.LeaderAndISR{late}})
	waitFor(t, 5*time.Second, "a late state for the previous life refused", func() (bool, string) {
		return life.refusedAny(replica.ErrStaleBrokerEpoch), ""
	})
	require.ErrorAs(t, life.produce(t), &notLeader)
	require.Equal(t, replica.NodeID(2), notLeader.Leader, "the node still follows node 2")

	current := *late
	current.BrokerEpoch = epoch
	life.update(metadataUpdate{parts: []*replica.LeaderAndISR{&current}})
	waitFor(t, 5*time.Second, "the same state for this life taken: the node leads", func() (bool, string) {
		err := life.produce(t)
		return err == nil, errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A partition state sent by a peer over /replica is refused: a node takes
// them from the committed records only, stamped with its broker epoch, and
// one without an epoch (NoBrokerEpoch skips the check) would get round
// KIP-380.
func TestPeersCannotSendPartitionStates(t *testing.T) {
	tn := startTestNode(t, filepath.Join(t.TempDir(), logDir), 100)
	srv := httptest.NewServer(tn.routes())
	defer srv.Close()
	state := &replica.LeaderAndISR{Header: replica.Header{From: 2, To: 1, Topic: "t"},
		Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []replica.NodeID{1}, ISR: []replica.NodeID{1}}
	body, err := state.MarshalBinary()
	require.NoError(t, err)
	resp, err := http.Post(srv.URL+"/replica", "application/octet-stream", bytes.NewReader(body))
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(msg))
	require.Contains(t, string(msg), "committed records")
	require.Error(t, tn.produce(t), "the node does not lead on a peer's word")
}
