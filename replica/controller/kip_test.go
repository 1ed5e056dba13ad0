package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// KIP-903 (Kafka 3.5, KAFKA-14139): the leader names each ISR member's
// broker epoch, from the fetches that made it caught up, and the
// controller refuses a member that registered again since: its new
// incarnation may lack what the previous one fetched (a replaced disk, an
// unsynced tail lost in a crash). Follower 2 catches up in broker epoch
// e2, the leader's proposal to add it is delayed, and 2 restarts: the
// proposal is ineligible, and the same proposal naming the new epoch is
// taken.
func TestKIP903AnISRMemberMustBeInTheBrokerEpochTheLeaderNames(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	require.NoError(t, h.alter("t", 1, 3))
	e2 := h.epochs[2]
	p := h.part("t", 0)
	proposal := func(epochOf2 int64) *replica.AlterPartition {
		return &replica.AlterPartition{
			Header:      replica.Header{From: 1, To: replica.NoNode, Topic: "t"},
			BrokerEpoch: h.epochs[1], LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
			ISR: []replica.ISRMember{{ID: 1, BrokerEpoch: h.epochs[1]}, {ID: 3, BrokerEpoch: h.epochs[3]}, {ID: 2, BrokerEpoch: epochOf2}},
		}
	}
	delayed := proposal(e2)

	h.start(2, true) // a new incarnation, unfenced: only its epoch tells it apart
	require.Greater(t, h.epochs[2], e2)
	require.False(t, h.c.State().Brokers[2].Fenced)
	before := *h.part("t", 0)
	err := h.c.AlterPartition(delayed)
	h.drain()
	require.ErrorIs(t, err, replica.ErrIneligibleReplica)
	require.ErrorContains(t, err, "replica 2 in broker epoch")
	require.Equal(t, replica.ErrIneligibleReplica, h.sent[len(h.sent)-1].(*replica.AlterPartitionResponse).Err)
	require.Equal(t, before, *h.part("t", 0), "the ISR stays without 2")

	require.NoError(t, h.c.AlterPartition(proposal(h.epochs[2])))
	h.drain()
	require.Equal(t, nodes(1, 3, 2), h.part("t", 0).ISR, "caught up in its new epoch, 2 joins")
}

// A broker epoch the leader does not know (NoBrokerEpoch, Kafka's -1) is
// not checked: a leader names none for a member it has not heard since
// it took the lead, and a controller without KIP-903's leaders works on.
func TestKIP903NoBrokerEpochIsNotChecked(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	h.start(2, true)
	p := h.part("t", 0)
	require.NoError(t, h.c.AlterPartition(&replica.AlterPartition{
		Header:      replica.Header{From: 1, To: replica.NoNode, Topic: "t"},
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: isrOf(1, 3, 2),
	}))
	h.drain()
	require.Equal(t, nodes(1, 3, 2), h.part("t", 0).ISR)
}

// KIP-380: every LeaderAndISR the controller sends carries the broker
// epoch its addressee is registered in, so that a broker refuses one
// meant for an earlier life of itself; after a restart the messages to
// the broker name its new epoch.
func TestKIP380LeaderAndISRCarriesTheAddresseesBrokerEpoch(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	h.start(3, false)
	require.NoError(t, h.alter("t", 1, 2, 3))
	var to3 []int64
	for _, m := range h.sent {
		l, ok := m.(*replica.LeaderAndISR)
		if !ok {
			continue
		}
		require.Positive(t, l.BrokerEpoch)
		if l.To == 3 {
			to3 = append(to3, l.BrokerEpoch)
		}
	}
	require.Equal(t, h.epochs[3], to3[len(to3)-1], "the latest message to 3 names its new epoch")
	require.Less(t, to3[0], h.epochs[3], "the first named its previous one")

	m := h.c.State().LeaderAndISR(TopicPartition{Topic: "t", Partition: 0}, 100, 2)
	require.Equal(t, h.epochs[2], m.BrokerEpoch, "the state a broker catches up on names its epoch too")
	require.Equal(t, h.part("t", 0).ISR, m.ISR)
	require.Nil(t, h.c.State().LeaderAndISR(TopicPartition{Topic: "t", Partition: 9}, 100, 2))
}

// Registration by incarnation (Kafka's BrokerRegistrationRequest
// IncarnationId): the same incarnation again is a retry whose answer was
// lost, and gets the epoch registered back with no record; a later one is
// a restart, a new epoch, the old one fenced and refused from then on; an
// earlier one is a previous life's request arriving late, refused and
// changing nothing.
func TestRegisterTellsARetryFromARestartByIncarnation(t *testing.T) {
	h := newHarness(t, 1, 1, 2)
	h.topic("t", false, nodes(1, 2))
	first := h.epochs[1]

	n := len(h.store)
	e, err := h.c.Register(1, h.incarnations[1], true)
	require.NoError(t, err)
	h.drain()
	require.Equal(t, first, e, "a retry gets its epoch back")
	require.Len(t, h.store, n, "and writes nothing")
	require.False(t, h.c.State().Brokers[1].Fenced, "nor fences the broker")

	h.start(1, true)
	require.Greater(t, h.epochs[1], first, "a restart gets a new epoch")
	_, err = h.c.Heartbeat(1, first)
	require.ErrorIs(t, err, replica.ErrStaleBrokerEpoch, "the previous life is fenced for good")

	before := *h.c.State().Brokers[1]
	n = len(h.store)
	_, err = h.c.Register(1, h.incarnations[1]-1, false)
	require.ErrorIs(t, err, replica.ErrStaleBrokerEpoch)
	h.drain()
	require.Len(t, h.store, n)
	require.Equal(t, before, *h.c.State().Brokers[1], "a late registration of an earlier life changes nothing")

	_, err = h.c.Register(3, 0, true)
	require.ErrorIs(t, err, replica.ErrInvalidRequest, "an incarnation must be positive")
}

// A record that registers an incarnation not after the one registered
// does not follow from the state: replay refuses it as live refuses the
// request.
func TestRegisterRecordOfAnEarlierIncarnationIsRefused(t *testing.T) {
	s := NewState()
	for _, r := range []Record{
		&ControllerRecord{Stamp: Stamp{0}},
		&RegisterRecord{Stamp: Stamp{0}, Broker: 1, BrokerEpoch: 1, Incarnation: 5},
	} {
		require.NoError(t, s.Apply(r))
	}
	err := s.Apply(&RegisterRecord{Stamp: Stamp{0}, Broker: 1, BrokerEpoch: 2, Incarnation: 5})
	require.ErrorIs(t, err, replica.ErrStaleBrokerEpoch)
	require.EqualValues(t, 1, s.Brokers[1].Epoch)
}
