package replica

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

// memTransport delivers each message on its own goroutine, through its
// binary encoding, in no particular order; messages to the controller are
// lost (no ISR change is expected).
type memTransport struct {
	ctx     context.Context
	drivers map[NodeID]*Driver
	wg      sync.WaitGroup
}

func (t *memTransport) Send(m Message) {
	d := t.drivers[m.Head().To]
	if d == nil {
		return
	}
	b, err := m.MarshalBinary()
	if err != nil {
		panic(err)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		m, err := Decode(b)
		if err != nil {
			panic(err)
		}
		_ = d.Receive(t.ctx, m)
	}()
}

// Three nodes, each run by a Driver with goroutines, replicate over a
// transport: an acks=all produce returns once every replica has it.
func TestDriversReplicate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &memTransport{ctx: ctx, drivers: map[NodeID]*Driver{}}
	logs := map[NodeID]*log.Log{}
	var runs sync.WaitGroup
	for _, id := range []NodeID{1, 2, 3} {
		l, err := log.Open("/orders-0", log.Options{FS: vfs.NewMem(), ExternalHighWatermark: true, MaxIndexBytes: 1024})
		require.NoError(t, err)
		defer l.Close()
		logs[id] = l
		d, err := NewDriver(DriverConfig{Node: NewNode(id), Transport: tr, TickInterval: time.Millisecond})
		require.NoError(t, err)
		tr.drivers[id] = d
	}
	for id, d := range tr.drivers {
		runs.Add(1)
		go func() { defer runs.Done(); _ = d.Run(ctx) }()
		// Ticks are 1 ms: generous timeouts keep a loaded machine from failing the test.
		require.NoError(t, d.AddPartition(ctx, Config{Topic: "orders", Log: logs[id], MinInsyncReplicas: 2, ProduceTimeout: 1 << 20, ReplicaLagTime: 1 << 20}))
		require.NoError(t, d.Receive(ctx, &LeaderAndISR{Header: Header{From: NoNode, To: id, Topic: "orders"},
			Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []NodeID{1, 2, 3}, ISR: []NodeID{1, 2, 3}}))
	}

	for i := range 5 {
		r, err := tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "a", "b"))
		require.NoError(t, err)
		require.NoError(t, r.Err)
		require.EqualValues(t, 2*i, r.BaseOffset)
	}
	_, err := tr.drivers[2].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "x"))
	var nl *NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.Equal(t, NodeID(1), nl.Leader)
	for _, id := range []NodeID{2, 3} {
		require.GreaterOrEqual(t, logs[id].LogEndOffset(), int64(10), "node %d has what the HW passed", id)
	}

	for _, d := range tr.drivers {
		d.Stop()
	}
	runs.Wait()
	tr.wg.Wait()
	_, err = tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "late"))
	require.ErrorIs(t, err, ErrStopped)
}
