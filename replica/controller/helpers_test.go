package controller

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// harness drives a Controller the way an application does: it drains
// Ready into a store (the records) and an outbox (the messages). At the end
// of every test it checks that replaying the stored records, each encoded
// and decoded, gives the controller's state.
type harness struct {
	t       *testing.T
	c       *Controller
	store   []Record
	sent    []replica.Message
	unclean []TopicPartition
	epochs  map[replica.NodeID]int64
	// incarnations is each broker's latest start.
	incarnations map[replica.NodeID]uint64
}

const session = 3

func newHarness(t *testing.T, minISR int, brokers ...replica.NodeID) *harness {
	t.Helper()
	c, err := New(Config{Node: 100, SessionTimeoutTicks: session, MinInsyncReplicas: minISR}, NewState())
	require.NoError(t, err)
	h := &harness{t: t, c: c, epochs: map[replica.NodeID]int64{}, incarnations: map[replica.NodeID]uint64{}}
	for _, b := range brokers {
		h.start(b, true)
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		h.drain()
		var decoded []Record
		for _, r := range h.store {
			b, err := r.MarshalBinary()
			require.NoError(t, err)
			d, err := DecodeRecord(b)
			require.NoError(t, err)
			decoded = append(decoded, d)
		}
		s, err := Replay(decoded)
		require.NoError(t, err)
		require.Equal(t, h.c.State(), s, "replaying the records gives the state lived through")
	})
	return h
}

func (h *harness) drain() {
	rd := h.c.Ready()
	h.store = append(h.store, rd.Records...)
	h.sent = append(h.sent, rd.Messages...)
	h.unclean = append(h.unclean, rd.Unclean...)
	h.c.Advance(rd)
}

// start registers a broker's next incarnation and unfences it with a
// heartbeat.
func (h *harness) start(b replica.NodeID, clean bool) {
	h.startWith(b, Registration{Clean: clean})
}

// startWith is start with all the registration says.
func (h *harness) startWith(b replica.NodeID, reg Registration) {
	h.t.Helper()
	e, err := h.registerWith(b, reg)
	require.NoError(h.t, err)
	_, err = h.c.Heartbeat(b, e)
	require.NoError(h.t, err)
	h.drain()
}

// register registers a broker's next incarnation.
func (h *harness) register(b replica.NodeID, clean bool) (int64, error) {
	return h.registerWith(b, Registration{Clean: clean})
}

func (h *harness) registerWith(b replica.NodeID, reg Registration) (int64, error) {
	h.incarnations[b]++
	e, err := h.c.RegisterWith(b, h.incarnations[b], reg)
	if err == nil {
		h.epochs[b] = e
	}
	return e, err
}

// crash stops the brokers' heartbeats until their sessions end; the
// others keep beating. Brokers whose sessions end on the same tick are
// fenced in id order.
func (h *harness) crash(bs ...replica.NodeID) {
	h.t.Helper()
	for i := 0; i < session; i++ {
		for o, e := range h.epochs {
			if !slices.Contains(bs, o) && !h.c.State().Brokers[o].Fenced {
				_, err := h.c.Heartbeat(o, e)
				require.NoError(h.t, err)
			}
		}
		require.NoError(h.t, h.c.Tick())
	}
	for _, b := range bs {
		require.True(h.t, h.c.State().Brokers[b].Fenced, "broker %d fenced after its session", b)
	}
	h.drain()
}

// unfence heartbeats a fenced broker in the epoch it is registered in:
// it comes back without restarting (a network partition healed).
func (h *harness) unfence(b replica.NodeID) {
	h.t.Helper()
	_, err := h.c.Heartbeat(b, h.epochs[b])
	require.NoError(h.t, err)
	h.drain()
}

func (h *harness) topic(name string, unclean bool, assignment ...[]replica.NodeID) {
	h.t.Helper()
	require.NoError(h.t, h.c.CreateTopic(name, assignment, TopicSpec{Unclean: unclean}))
	h.drain()
}

func (h *harness) part(name string, p int32) *Partition {
	return h.c.State().Partitions[TopicPartition{Topic: name, Partition: p}]
}

// alter sends an AlterPartition for partition 0 of a topic.
func (h *harness) alter(name string, isr ...replica.NodeID) error {
	return h.alterAt(TopicPartition{Topic: name, Partition: 0}, isr...)
}

// alterAt sends an AlterPartition from the partition's leader in its
// current epochs, naming each member's registered broker epoch.
func (h *harness) alterAt(tp TopicPartition, isr ...replica.NodeID) error {
	p := h.part(tp.Topic, tp.Partition)
	members := isrOf(isr...)
	for i := range members {
		members[i].BrokerEpoch = h.epochs[members[i].ID]
	}
	m := &replica.AlterPartition{
		Header:      replica.Header{From: p.Leader, To: replica.NoNode, Topic: tp.Topic, Partition: tp.Partition},
		BrokerEpoch: h.epochs[p.Leader], LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: members,
	}
	err := h.c.AlterPartition(m)
	h.drain()
	return err
}

// requireAltered checks the answer to an AlterPartition from a leader:
// applied, and ErrNewLeaderElected exactly when the change moved the lead
// off it (a reassignment it completed removed it).
func (h *harness) requireAltered(tp TopicPartition, from replica.NodeID, err error) {
	h.t.Helper()
	if l := h.part(tp.Topic, tp.Partition).Leader; l != from {
		require.ErrorIs(h.t, err, replica.ErrNewLeaderElected, "the lead moved from %d to %d", from, l)
		return
	}
	require.NoError(h.t, err)
}

func nodes(ns ...replica.NodeID) []replica.NodeID { return ns }

// isrOf is a proposed ISR whose broker epochs the leader does not know.
func isrOf(ns ...replica.NodeID) []replica.ISRMember {
	ms := make([]replica.ISRMember, len(ns))
	for i, n := range ns {
		ms[i] = replica.ISRMember{ID: n, BrokerEpoch: replica.NoBrokerEpoch}
	}
	return ms
}
