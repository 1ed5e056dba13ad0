package replica

import (
	"testing"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// nodeCluster is two Nodes, each with the partitions orders-0 and
// payments-0, and a network that counts what goes between them.
type nodeCluster struct {
	t     *testing.T
	nodes map[NodeID]*Node
	logs  map[NodeID]map[string]*log.Log
	net   []Message
}

func newNodeCluster(t *testing.T) *nodeCluster {
	nc := &nodeCluster{t: t, nodes: map[NodeID]*Node{}, logs: map[NodeID]map[string]*log.Log{}}
	for _, id := range []NodeID{1, 2} {
		fs := vfs.NewMem()
		n := NewNode(id)
		nc.nodes[id], nc.logs[id] = n, map[string]*log.Log{}
		for _, topic := range []string{"orders", "payments"} {
			l, err := log.Open("/"+topic+"-0", log.Options{FS: fs, ExternalHighWatermark: true, MaxIndexBytes: 1024})
			require.NoError(t, err)
			nc.logs[id][topic] = l
			_, err = n.Add(Config{Topic: topic, Log: l})
			require.NoError(t, err)
		}
	}
	return nc
}

// round applies every node's Ready and returns the messages they sent.
func (nc *nodeCluster) round() []Message {
	var sent []Message
	for _, id := range []NodeID{1, 2} {
		n := nc.nodes[id]
		for n.HasReady() {
			rd := n.Ready()
			for _, pr := range rd.Partitions {
				require.NoError(nc.t, ApplyWrites(nc.logs[id][pr.Partition.cfg.Topic], pr.Ready.Writes))
			}
			require.NoError(nc.t, n.Advance(rd))
			sent = append(sent, rd.Messages...)
		}
	}
	for _, m := range sent {
		if m.Head().To != NoNode {
			require.NoError(nc.t, nc.nodes[m.Head().To].Step(m))
		}
	}
	return sent
}

// A follower node sends one message to its leader node per round, however
// many partitions it follows there: one fetch for all of them.
func TestNodeBatchesFetchesPerLeader(t *testing.T) {
	nc := newNodeCluster(t)
	for _, id := range []NodeID{1, 2} {
		for _, topic := range []string{"orders", "payments"} {
			require.NoError(t, nc.nodes[id].Step(&LeaderAndISR{Header: Header{From: NoNode, To: id, Topic: topic},
				Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []NodeID{1, 2}, ISR: []NodeID{1, 2}}))
		}
	}
	sent := nc.round()
	require.Len(t, sent, 1, "one batch from node 2 to node 1")
	b := sent[0].(*Envelope)
	require.Equal(t, Header{From: 2, To: 1}, b.Header)
	require.Len(t, b.Messages, 2, "carrying both partitions' fetches")

	for i, topic := range []string{"orders", "payments"} {
		require.NoError(t, nc.nodes[1].Step(&Produce{Header: Header{From: client, To: 1, Topic: topic}, ID: uint64(i), Acks: AcksAll, Batch: batchOf(t, topic)}))
	}
	var results []ProduceResult
	for range 6 {
		for _, id := range []NodeID{1, 2} {
			nc.nodes[id].Tick()
		}
		for _, id := range []NodeID{1, 2} {
			n := nc.nodes[id]
			for n.HasReady() {
				rd := n.Ready()
				for _, pr := range rd.Partitions {
					require.NoError(t, ApplyWrites(nc.logs[id][pr.Partition.cfg.Topic], pr.Ready.Writes))
				}
				require.NoError(t, n.Advance(rd))
				results = append(results, rd.Results...)
				for _, m := range rd.Messages {
					if b := m.(*Envelope); b.To != NoNode {
						require.LessOrEqual(t, len(b.Messages), 2)
						nc.net = append(nc.net, b)
					}
				}
			}
		}
		msgs := nc.net
		nc.net = nil
		for _, m := range msgs {
			require.NoError(t, nc.nodes[m.Head().To].Step(m))
		}
	}
	require.Len(t, results, 2)
	for _, r := range results {
		require.NoError(t, r.Err)
	}
	for _, topic := range []string{"orders", "payments"} {
		require.EqualValues(t, 1, nc.logs[2][topic].LogEndOffset(), topic)
	}
}

func TestNodeRefusesBadInput(t *testing.T) {
	nc := newNodeCluster(t)
	n := nc.nodes[1]
	_, err := n.Add(Config{Topic: "orders", Log: nc.logs[1]["orders"]})
	require.ErrorIs(t, err, ErrInvalidConfig, "a partition twice")
	_, err = n.Add(Config{ID: 5, Topic: "other", Log: nc.logs[1]["orders"]})
	require.ErrorIs(t, err, ErrInvalidConfig, "another node's ID")
	require.ErrorIs(t, n.Step(&Fetch{Header: Header{From: 2, To: 1, Topic: "nope"}}), ErrUnknownTopicOrPartition)
	require.ErrorIs(t, n.Step(&Envelope{Header: Header{From: 2, To: 3}}), ErrInvalidMessage, "an envelope for another node")

	// In an envelope, a message that fails does not stop the others.
	lai := &LeaderAndISR{Header: Header{From: NoNode, To: 1, Topic: "orders"}, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1,
		Replicas: []NodeID{1}, ISR: []NodeID{1}}
	err = n.Step(&Envelope{Header: Header{From: NoNode, To: 1}, Messages: []Message{
		&Fetch{Header: Header{From: 2, To: 1, Topic: "orders"}}, // From differs from the batch's
		nil,
		lai,
	}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.Equal(t, RoleLeader, n.Partition("orders", 0).Status().Role)

	_, err = (&Envelope{Messages: []Message{&Envelope{}}}).MarshalBinary()
	require.ErrorIs(t, err, ErrInvalidMessage, "no batch in a batch")
	inner, err := (&Envelope{}).MarshalBinary()
	require.NoError(t, err)
	e := newEncoder(kindEnvelope, &Header{})
	e.uint(1)
	e.bytes(inner)
	_, err = Decode(e.b)
	require.ErrorContains(t, err, "a batch inside a batch")
	require.True(t, n.Remove("orders", 0))
	require.False(t, n.Remove("orders", 0))
	require.Nil(t, n.Partition("orders", 0))
}
