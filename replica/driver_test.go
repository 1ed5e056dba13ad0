package replica

import (
	"context"
	"slices"
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

// startDrivers runs nodes 1, 2 and 3, each a Driver with dcfg's options
// over a log on its own MemFS opened with opts, with a partition "orders"
// configured as pcfg, node 1 leading and every node in the ISR.
func startDrivers(t *testing.T, ctx context.Context, dcfg DriverOptions, opts log.Options, pcfg Config) (*memTransport, map[NodeID]*log.Log, *sync.WaitGroup) {
	tr := &memTransport{ctx: ctx, drivers: map[NodeID]*Driver{}}
	logs := map[NodeID]*log.Log{}
	runs := &sync.WaitGroup{}
	opts.ExternalHighWatermark, opts.MaxIndexBytes = true, 1024
	for _, id := range []NodeID{1, 2, 3} {
		opts.FS = vfs.NewMem()
		l, err := log.Open("/orders-0", opts)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		logs[id] = l
		dcfg.Node, dcfg.Transport, dcfg.TickInterval = NewNode(id), tr, time.Millisecond
		d, err := NewDriver(dcfg)
		require.NoError(t, err)
		tr.drivers[id] = d
	}
	// Ticks are 1 ms: generous timeouts keep a loaded machine from failing the test.
	pcfg.Topic, pcfg.MinInsyncReplicas, pcfg.ProduceTimeoutTicks, pcfg.ReplicaLagTicks = "orders", 2, 1<<20, 1<<20
	for id, d := range tr.drivers {
		runs.Add(1)
		go func() { defer runs.Done(); _ = d.Run(ctx) }()
		pcfg.Log = logs[id]
		require.NoError(t, d.AddPartition(ctx, pcfg))
		require.NoError(t, d.Receive(ctx, &LeaderAndISR{Header: Header{From: NoNode, To: id, Topic: "orders"},
			Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []NodeID{1, 2, 3}, ISR: []NodeID{1, 2, 3}}))
	}
	return tr, logs, runs
}

// Three nodes, each run by a Driver with goroutines, replicate over a
// transport: an acks=all produce returns once every replica has it.
func TestDriversReplicate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, logs, runs := startDrivers(t, ctx, DriverOptions{}, log.Options{}, Config{})

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
	st, err := tr.drivers[1].Status(ctx, "orders", 0)
	require.NoError(t, err)
	require.Equal(t, RoleLeader, st.Role)
	require.EqualValues(t, 1, st.LeaderEpoch)
	require.EqualValues(t, 10, st.HighWatermark, "the high watermark of what was acknowledged")
	st, err = tr.drivers[2].Status(ctx, "orders", 0)
	require.NoError(t, err)
	require.Equal(t, RoleFollower, st.Role)
	require.Equal(t, NodeID(1), st.Leader)
	_, err = tr.drivers[2].Status(ctx, "payments", 0)
	require.ErrorIs(t, err, ErrUnknownTopicOrPartition)

	for _, d := range tr.drivers {
		d.Stop()
	}
	runs.Wait()
	tr.wg.Wait()
	_, err = tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "late"))
	require.ErrorIs(t, err, ErrStopped)
}

// Under SyncWrites, with logs that do not sync their appends and
// SyncedAcks, the writers sync after each Ready: an acks=all result comes
// once the batch is synced on every ISR member, though no log syncs by
// itself.
func TestDriverSyncWritesAcknowledgesWhatIsSynced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, logs, runs := startDrivers(t, ctx, DriverOptions{SyncWrites: true}, log.Options{Fsync: log.FsyncNever()}, Config{SyncedAcks: true})
	for range 5 {
		r, err := tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "a", "b"))
		require.NoError(t, err)
		require.NoError(t, r.Err)
		for id, l := range logs {
			synced, err := l.SyncedEndOffset()
			require.NoError(t, err)
			require.Greater(t, synced, r.LastOffset, "node %d has not synced what was acknowledged", id)
		}
	}
	cancel()
	runs.Wait()
	tr.wg.Wait()
}

// syncGate is a log whose Sync waits, once armed, until the test opens it:
// a writer held in a slow fsync.
type syncGate struct {
	*log.Log
	armed   chan struct{} // closed to make Sync wait
	entered chan struct{} // closed when a Sync waits
	open    chan struct{} // closed to let it go on
	once    sync.Once
}

func (l *syncGate) Sync() error {
	select {
	case <-l.armed:
		l.once.Do(func() { close(l.entered) })
		<-l.open
	default:
	}
	return l.Log.Sync()
}

// Once the loop has stopped taking work, a message is refused with
// ErrStopped at once, though the driver still waits for a writer in a slow
// sync before Run returns: a caller is not held for as long as the disk
// takes (a node's HTTP handlers were, and its server's shutdown ran out
// of time in the replicate example's TestKillAndRestartFollower).
func TestDriverRefusesMessagesOnceItStops(t *testing.T) {
	l, err := log.Open("/orders-0", log.Options{FS: vfs.NewMem(), Fsync: log.FsyncNever(), ExternalHighWatermark: true, MaxIndexBytes: 1024})
	require.NoError(t, err)
	defer l.Close()
	gate := &syncGate{Log: l, armed: make(chan struct{}), entered: make(chan struct{}), open: make(chan struct{})}
	d, err := NewDriver(DriverOptions{Node: NewNode(1), Transport: &memTransport{}, TickInterval: time.Millisecond, SyncWrites: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	require.NoError(t, d.AddPartition(ctx, Config{Topic: "orders", Log: gate, MinInsyncReplicas: 1, ProduceTimeoutTicks: 1 << 20, ReplicaLagTicks: 1 << 20}))
	leader := &LeaderAndISR{Header: Header{From: NoNode, To: 1, Topic: "orders"}, Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1,
		Replicas: []NodeID{1}, ISR: []NodeID{1}}
	require.NoError(t, d.Receive(ctx, leader))

	close(gate.armed)
	go func() { _, _ = d.Produce(ctx, "orders", 0, AcksLeader, batchOf(t, "a")) }()
	<-gate.entered
	cancel()
	refused := make(chan error, 1)
	go func() {
		// The loop may take a message or two before it sees ctx end.
		for {
			if err := d.Receive(context.Background(), leader); err != nil {
				refused <- err
				return
			}
		}
	}()
	select {
	case err := <-refused:
		require.ErrorIs(t, err, ErrStopped)
	case <-time.After(10 * time.Second):
		t.Error("Receive waits for the writer's sync")
	}
	close(gate.open)
	require.ErrorIs(t, <-ran, context.Canceled)
}

// A partition removed from a running driver (a deleted topic) is gone:
// produces to it are refused, the node can add it again over a new log,
// and the driver stops with no writer left behind.
func TestDriverRemovePartition(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, _, runs := startDrivers(t, ctx, DriverOptions{}, log.Options{}, Config{})
	r, err := tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "a"))
	require.NoError(t, err)
	require.NoError(t, r.Err)

	for _, d := range tr.drivers {
		had, err := d.RemovePartition(ctx, "orders", 0)
		require.NoError(t, err)
		require.True(t, had)
	}
	had, err := tr.drivers[1].RemovePartition(ctx, "orders", 0)
	require.NoError(t, err)
	require.False(t, had, "removed already")
	_, err = tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "b"))
	require.ErrorIs(t, err, ErrUnknownTopicOrPartition)

	l, err := log.Open("/orders-0", log.Options{FS: vfs.NewMem(), ExternalHighWatermark: true, MaxIndexBytes: 1024})
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, tr.drivers[1].AddPartition(ctx, Config{Topic: "orders", Log: l, MinInsyncReplicas: 1, ProduceTimeoutTicks: 1 << 20, ReplicaLagTicks: 1 << 20}))
	require.NoError(t, tr.drivers[1].Receive(ctx, &LeaderAndISR{Header: Header{From: NoNode, To: 1, Topic: "orders"},
		Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []NodeID{1}, ISR: []NodeID{1}}))
	r, err = tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "again"))
	require.NoError(t, err)
	require.NoError(t, r.Err)
	require.Zero(t, r.BaseOffset, "a new partition over a new log")

	for _, d := range tr.drivers {
		d.Stop()
	}
	runs.Wait()
	tr.wg.Wait()
}

// A driver leaves the caller's batch as it was: the partition stamps
// offsets into a copy. Found by TestSimulateNodes under -race: a producer
// retried its batch at the partition's next leader while the old
// leader's writer still read the same bytes, which the new leader's
// partition stamped; and a retry to the same leader would stamp another
// base offset into a batch its writer had yet to append.
func TestDriverProduceLeavesTheBatchAsItWas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, _, runs := startDrivers(t, ctx, DriverOptions{}, log.Options{}, Config{})
	defer func() {
		for _, d := range tr.drivers {
			d.Stop()
		}
		runs.Wait()
		tr.wg.Wait()
	}()
	_, err := tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, batchOf(t, "a", "b"))
	require.NoError(t, err)
	b := batchOf(t, "c")
	sent := slices.Clone(b)
	r, err := tr.drivers[1].Produce(ctx, "orders", 0, AcksAll, b)
	require.NoError(t, err)
	require.NoError(t, r.Err)
	require.EqualValues(t, 2, r.BaseOffset)
	require.Equal(t, sent, b, "the caller's batch was changed")
	ch, err := tr.drivers[1].ProduceAsync(ctx, "orders", 0, AcksAll, b)
	require.NoError(t, err)
	require.Equal(t, sent, b, "the caller's batch was changed")
	require.NoError(t, (<-ch).Err)
}
