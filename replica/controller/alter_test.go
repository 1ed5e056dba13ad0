package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// AlterPartition is checked in Kafka's order
// (ReplicationControlManager.alterPartition): when a request is wrong in
// several ways, the first check decides the code. Each case starts from
// leader 1 in leader epoch 0 and partition epoch 1 (after one change),
// replicas {1,2,3}, ISR {1,2}, broker 4 registered but no replica.
func TestAlterPartitionChecksInKafkasOrder(t *testing.T) {
	type req = replica.AlterPartition
	for _, tc := range []struct {
		name string
		edit func(m *req)
		want error
	}{
		{"the leader's own broker epoch comes first", func(m *req) { m.BrokerEpoch = 99; m.Partition = 5 }, replica.ErrStaleBrokerEpoch},
		{"a later leader epoch: this controller is stale", func(m *req) { m.LeaderEpoch++; m.From = 9 }, replica.ErrNotController},
		{"a later partition epoch: this controller is stale", func(m *req) { m.PartitionEpoch++ }, replica.ErrNotController},
		{"an older leader epoch is fenced before the sender is checked", func(m *req) { m.LeaderEpoch--; m.From = 2 }, replica.ErrFencedLeaderEpoch},
		{"only the leader may ask", func(m *req) { m.From = 2; m.PartitionEpoch-- }, replica.ErrInvalidRequest},
		{"an older partition epoch fails the compare-and-set", func(m *req) { m.PartitionEpoch--; m.ISR = isrOf(1, 7) }, replica.ErrInvalidUpdateVersion},
		{"an ISR member outside the replicas", func(m *req) { m.ISR = isrOf(1, 4) }, replica.ErrInvalidRequest},
		{"an ISR without the leader", func(m *req) { m.ISR = isrOf(2, 3) }, replica.ErrInvalidRequest},
		{"an ISR with a duplicate", func(m *req) { m.ISR = isrOf(1, 2, 2) }, replica.ErrInvalidRequest},
		{"a fenced member is ineligible", func(m *req) { m.ISR = isrOf(1, 2, 3) }, replica.ErrIneligibleReplica},
		{"a member in another broker epoch is ineligible (KIP-903)", func(m *req) { m.ISR[1].BrokerEpoch = 99 }, replica.ErrIneligibleReplica},
		{"an unknown partition", func(m *req) { m.Partition = 5 }, replica.ErrUnknownTopicOrPartition},
		{"a valid shrink", func(m *req) { m.ISR = isrOf(1) }, nil},
		{"a valid shrink naming the registered broker epochs", func(m *req) {
			m.BrokerEpoch, m.ISR = 1, []replica.ISRMember{{ID: 1, BrokerEpoch: 1}}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, 1, 2, 3, 4)
			h.topic("t", false, nodes(1, 2, 3))
			require.NoError(t, h.alter("t", 1, 2))
			h.crash(3)
			p := h.part("t", 0)
			require.EqualValues(t, 1, p.PartitionEpoch)
			m := &req{Header: replica.Header{From: 1, To: replica.NoNode, Topic: "t"},
				LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: isrOf(1, 2)}
			tc.edit(m)
			before := *p
			err := h.c.AlterPartition(m)
			h.drain()
			resp := h.sent[len(h.sent)-1].(*replica.AlterPartitionResponse)
			require.Equal(t, m.From, resp.To)
			require.Equal(t, replica.CodeOf(err), resp.Err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				require.Equal(t, before, *h.part("t", 0), "a refused request changes nothing")
				return
			}
			require.NoError(t, err)
			after := h.part("t", 0)
			require.Equal(t, nodes(1), after.ISR)
			require.Equal(t, before.LeaderEpoch, after.LeaderEpoch, "an ISR change keeps the leader epoch")
			require.Equal(t, before.PartitionEpoch+1, after.PartitionEpoch)
			require.Equal(t, after.PartitionEpoch, resp.PartitionEpoch)
			require.Equal(t, after.ISR, resp.ISR)
		})
	}
}

// A stale request from a leader that did not hear of its own ISR change
// (the compare-and-set) is refused and the leader learns nothing new; a
// request naming the state it has is a no-op success with no record.
func TestAlterPartitionCompareAndSet(t *testing.T) {
	h := newHarness(t, 1, 1, 2, 3)
	h.topic("t", false, nodes(1, 2, 3))
	p := h.part("t", 0)
	stale := &replica.AlterPartition{Header: replica.Header{From: 1, Topic: "t"},
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: isrOf(1, 3)}
	require.NoError(t, h.alter("t", 1, 2))
	require.ErrorIs(t, h.c.AlterPartition(stale), replica.ErrInvalidUpdateVersion)
	h.drain()
	n := len(h.store)
	require.NoError(t, h.alter("t", 1, 2))
	require.Len(t, h.store, n, "no change, no record")
}
