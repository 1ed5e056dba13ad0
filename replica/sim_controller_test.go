package replica_test

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// The simulator's adapter of the real controller (see simctl_test.go):
// package controller imports replica, so only this external test package
// can hold both.

func init() { replica.NewSimController = newSimController }

const simTopic = "orders" // the harness's testTopic

var simTP = controller.TopicPartition{Topic: simTopic}

// simStore is the controllers' replicated record store: it keeps every
// record it accepts and refuses one that does not apply to the state it
// holds, as a quorum refuses a deposed leader's writes.
type simStore struct {
	records []controller.Record
	state   *controller.State
}

type simController struct {
	c     *controller.Controller
	cfg   controller.Config
	store *simStore
}

func newSimController(node replica.NodeID, brokers []replica.NodeID, minISR, session int, unclean bool) (replica.SimController, map[replica.NodeID]int64, error) {
	// Kafka's default leader.imbalance.per.broker.percentage, 10, for the
	// leader-imbalance checks of simreassign_test.go.
	cfg := controller.Config{Node: node, SessionTimeoutTicks: session, MinInsyncReplicas: minISR, ImbalanceRatio: 0.1}
	c, err := controller.New(cfg, controller.NewState())
	if err != nil {
		return nil, nil, err
	}
	sc := &simController{c: c, cfg: cfg, store: &simStore{state: controller.NewState()}}
	epochs := map[replica.NodeID]int64{}
	for _, b := range brokers {
		if epochs[b], err = c.Register(b, 1, true); err != nil { // each broker's first start
			return nil, nil, err
		}
		if _, err := c.Heartbeat(b, epochs[b]); err != nil {
			return nil, nil, err
		}
	}
	if err := c.CreateTopic(simTopic, [][]replica.NodeID{brokers}, controller.TopicSpec{Unclean: unclean}); err != nil {
		return nil, nil, err
	}
	return sc, epochs, nil
}

func (sc *simController) Register(id replica.NodeID, incarnation uint64, clean, synced bool) (int64, error) {
	reg := controller.Registration{Clean: clean}
	if synced {
		reg.Synced = []string{simTopic}
	}
	return sc.c.RegisterWith(id, incarnation, reg)
}

func (sc *simController) Heartbeat(id replica.NodeID, epoch int64) (bool, error) {
	return sc.c.Heartbeat(id, epoch)
}

func (sc *simController) Shutdown(id replica.NodeID, epoch int64) error {
	return sc.c.Shutdown(id, epoch)
}

func (sc *simController) AlterPartition(m *replica.AlterPartition) error {
	return sc.c.AlterPartition(m)
}
func (sc *simController) SetUnclean(on bool) error { return sc.c.SetUnclean(simTopic, on) }
func (sc *simController) Tick() error              { return sc.c.Tick() }
func (sc *simController) Epoch() int32             { return sc.c.State().Epoch }

func (sc *simController) ElectPreferred() error {
	err := sc.c.ElectPreferred(simTP)
	if errors.Is(err, replica.ErrElectionNotNeeded) || errors.Is(err, replica.ErrPreferredLeaderNotAvailable) {
		return nil
	}
	return err
}

// Drain stores the records, each encoded and decoded as a store would
// keep them, then hands out the messages; a refused record refuses the
// rest and every message.
func (sc *simController) Drain() ([]replica.Message, []int32, error) {
	rd := sc.c.Ready()
	sc.c.Advance(rd)
	for _, r := range rd.Records {
		b, err := r.MarshalBinary()
		if err != nil {
			return nil, nil, err
		}
		d, err := controller.DecodeRecord(b)
		if err != nil {
			return nil, nil, err
		}
		if err := sc.store.state.Apply(d); err != nil {
			return nil, nil, fmt.Errorf("the store refuses controller epoch %d's record: %w", r.ControllerEpoch(), err)
		}
		sc.store.records = append(sc.store.records, d)
	}
	var unclean []int32
	for range rd.Unclean {
		unclean = append(unclean, sc.c.State().Partitions[simTP].LeaderEpoch)
	}
	return rd.Messages, unclean, nil
}

func (sc *simController) Partition() replica.SimPartition {
	p := sc.c.State().Partitions[simTP]
	return replica.SimPartition{
		Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		Replicas: p.Replicas, ISR: p.ISR, ELR: p.ELR,
	}
}

func (sc *simController) Metadata(to replica.NodeID) *replica.LeaderAndISR {
	return sc.c.State().LeaderAndISR(simTP, sc.cfg.Node, to)
}

// Failover replays the store into a standby controller (replay = live).
func (sc *simController) Failover(node replica.NodeID) (replica.SimController, error) {
	if _, _, err := sc.Drain(); err != nil {
		return nil, err
	}
	s, err := controller.Replay(sc.store.records)
	if err != nil {
		return nil, fmt.Errorf("replaying %d records: %w", len(sc.store.records), err)
	}
	if !reflect.DeepEqual(s, sc.c.State()) {
		return nil, fmt.Errorf("replaying %d records gives %+v, the controller lived through %+v", len(sc.store.records), s, sc.c.State())
	}
	cfg := sc.cfg
	cfg.Node = node
	c, err := controller.New(cfg, s)
	if err != nil {
		return nil, err
	}
	return &simController{c: c, cfg: cfg, store: sc.store}, nil
}
