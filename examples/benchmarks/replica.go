package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// The replica suite runs three replicas of a partition, each a
// replica.Driver over its own log.Log, and produces to the leader with
// acks=all and MinInsyncReplicas 2: over an in-memory transport against a
// single Log.Append of the same batches in the same run (throughput), and
// over HTTP on loopback with acks=all beside acks=1 (latency).
func init() { suites["replica"] = replicaSuite }

type replicaShape struct {
	reps      int // runs of each throughput measurement; the median counts
	batches   int // batches per throughput run
	latencies int // produces per latency run
}

// replicaMode is a durability setting of the replicated runs.
type replicaMode struct {
	fsync log.FsyncPolicy
	// synced sets replica.Config.SyncedAcks: followers report what they
	// synced, and so may fetch ahead of their writes. Under FsyncAlways
	// an acknowledgement means the same with it or without.
	synced bool
	// groupSync opens the replicas' logs with FsyncNever and has each
	// driver's writer sync once per Ready (DriverOptions.SyncWrites),
	// under SyncedAcks: an acknowledgement still means on disk on every
	// ISR member, as under FsyncAlways, the policy of the baseline.
	groupSync bool
}

func (m replicaMode) String() string {
	switch {
	case m.groupSync:
		return m.fsync.String() + "-groupsync"
	case m.synced:
		return m.fsync.String() + "-synced"
	}
	return m.fsync.String()
}

var replicaModes = []replicaMode{
	{fsync: log.FsyncAlways()},
	{fsync: log.FsyncAlways(), synced: true},
	{fsync: log.FsyncAlways(), groupSync: true},
	{fsync: log.FsyncNever()},
}

// inflights are how many produces the throughput runs keep outstanding at
// once, beside the single one a plain Log.Append loop has.
var inflights = []int{1, 8}

func replicaSuite(quick bool) error {
	shape := replicaShape{reps: 5, batches: 500, latencies: 1000}
	if quick {
		shape = replicaShape{reps: 1, batches: 50, latencies: 100}
	}
	fmt.Printf("3 replicas, acks=all, MinInsyncReplicas 2, %d batches of %d x %d B records, %d runs (median)\n",
		shape.batches, batchRecords, recordSize, shape.reps)
	batches := replicaBatches(shape.batches)
	var cmps []comparison
	for _, mode := range replicaModes {
		for _, n := range inflights {
			c, err := compareReplicated(shape, batches, mode, n)
			if err != nil {
				return fmt.Errorf("replica suite: %w", err)
			}
			cmps = append(cmps, c)
		}
	}
	if err := produceLatencies(shape, batches); err != nil {
		return fmt.Errorf("replica suite: %w", err)
	}
	printComparisons(cmps)
	return nil
}

func replicaBatches(n int) [][]segment.Record {
	value := bytes.Repeat([]byte{'r'}, recordSize)
	batches := make([][]segment.Record, n)
	for i := range batches {
		batches[i] = make([]segment.Record, batchRecords)
		for j := range batches[i] {
			batches[i][j] = segment.Record{Value: value}
		}
	}
	return batches
}

// compareReplicated times producing batches to three replicas, n at a
// time, against appending them to one log, alternating the two run by run.
func compareReplicated(shape replicaShape, batches [][]segment.Record, mode replicaMode, n int) (comparison, error) {
	fsync := mode.fsync
	var single, replicated []time.Duration
	for range shape.reps {
		d, err := timeSingleLog(batches, fsync)
		if err != nil {
			return comparison{}, err
		}
		single = append(single, d)
		d, err = timeReplicated(batches, mode, n)
		if err != nil {
			return comparison{}, err
		}
		replicated = append(replicated, d)
	}
	s, r := medianOf(single), medianOf(replicated)
	mb := float64(len(batches)*batchRecords*recordSize) / (1 << 20)
	fmt.Printf("fsync %-13s %d in flight: single Log.Append %7.1f MB/s, 3 replicas acks=all %7.1f MB/s\n",
		mode, n, mb/s.Seconds(), mb/r.Seconds())
	c := comparison{name: fmt.Sprintf("replica-%s-inflight%d/log", mode, n), value: s.Seconds() / r.Seconds()}
	if fsync == log.FsyncAlways() {
		c.bound = 0.5
	}
	return c, nil
}

func medianOf(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func timeSingleLog(batches [][]segment.Record, fsync log.FsyncPolicy) (time.Duration, error) {
	dir, err := os.MkdirTemp(*logParent, "strand-replica-single")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	l, err := log.Open(dir, log.Options{Fsync: fsync})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	start := time.Now()
	for _, recs := range batches {
		if _, err := l.Append(recs); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

func timeReplicated(batches [][]segment.Record, mode replicaMode, n int) (time.Duration, error) {
	c, err := startReplicas(mode, false)
	if err != nil {
		return 0, err
	}
	defer c.close()
	work := make(chan []segment.Record)
	errs := make(chan error, n)
	start := time.Now()
	for range n {
		go func() {
			for recs := range work {
				if _, err := c.produce(replica.AcksAll, recs); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for _, recs := range batches {
		work <- recs
	}
	close(work)
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

// produceLatencies prints the latency of one produce at a time over HTTP
// on loopback, acks=all beside acks=1, FsyncAlways.
func produceLatencies(shape replicaShape, batches [][]segment.Record) error {
	c, err := startReplicas(replicaMode{fsync: log.FsyncAlways()}, true)
	if err != nil {
		return err
	}
	defer c.close()
	for _, acks := range []replica.Acks{replica.AcksLeader, replica.AcksAll} {
		ds := make([]time.Duration, shape.latencies)
		for i := range ds {
			start := time.Now()
			if _, err := c.produce(acks, batches[i%len(batches)]); err != nil {
				return err
			}
			ds[i] = time.Since(start)
		}
		slices.Sort(ds)
		fmt.Printf("HTTP on loopback, FsyncAlways, acks=%-3d %d produces of %d x %d B: p50 %v, p99 %v\n", acks, len(ds),
			batchRecords, recordSize, ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond))
	}
	return nil
}

// replicas is three nodes in this process, node 1 leading.
type replicas struct {
	dir     string
	drivers map[replica.NodeID]*replica.Driver
	logs    []*log.Log
	servers []*http.Server
	tr      *queuedTransport
	cancel  context.CancelFunc
	runs    sync.WaitGroup
}

// startReplicas starts three drivers over logs with the fsync policy;
// their messages go through their binary encoding, to Receive directly or
// as HTTP POSTs to each node's server on loopback.
func startReplicas(mode replicaMode, overHTTP bool) (*replicas, error) {
	dir, err := os.MkdirTemp(*logParent, "strand-replica")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &replicas{dir: dir, drivers: map[replica.NodeID]*replica.Driver{}, cancel: cancel}
	ids := []replica.NodeID{1, 2, 3}
	c.tr = newQueuedTransport(c.deliverDirect)
	listeners := map[replica.NodeID]net.Listener{}
	if overHTTP {
		urls := map[replica.NodeID]string{}
		for _, id := range ids {
			if listeners[id], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				c.close()
				return nil, err
			}
			urls[id] = "http://" + listeners[id].Addr().String()
		}
		c.tr.deliver = httpDelivery(urls)
	}
	logFsync := mode.fsync
	if mode.groupSync {
		logFsync = log.FsyncNever()
	}
	for _, id := range ids {
		l, err := log.Open(filepath.Join(dir, fmt.Sprint(id)), log.Options{Fsync: logFsync, ExternalHighWatermark: true})
		if err != nil {
			c.close()
			return nil, err
		}
		c.logs = append(c.logs, l)
		d, err := replica.NewDriver(replica.DriverOptions{Node: replica.NewNode(id), Transport: c.tr, TickInterval: time.Millisecond, SyncWrites: mode.groupSync})
		if err != nil {
			c.close()
			return nil, err
		}
		c.drivers[id] = d
		c.runs.Add(1)
		go func() { defer c.runs.Done(); d.Run(ctx) }()
		if err := d.AddPartition(ctx, replica.Config{Topic: "bench", Log: l, MinInsyncReplicas: 2, SyncedAcks: mode.synced || mode.groupSync,
			ReplicaLagTicks: 1 << 20, ProduceTimeoutTicks: 1 << 20, RequestTimeoutTicks: 1000}); err != nil {
			c.close()
			return nil, err
		}
		if ln := listeners[id]; ln != nil {
			c.serve(ln, d)
		}
	}
	for _, id := range ids {
		if err := c.drivers[id].Receive(ctx, &replica.LeaderAndISR{Header: replica.Header{From: replica.NoNode, To: id, Topic: "bench"},
			Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: ids, ISR: ids}); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *replicas) deliverDirect(to replica.NodeID, b []byte) {
	d := c.drivers[to]
	if m, err := replica.Decode(b); err == nil && d != nil {
		d.Receive(context.Background(), m)
	}
}

// serve serves d's messages, POSTed to ln.
func (c *replicas) serve(ln net.Listener, d *replica.Driver) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if m, derr := replica.Decode(b); err == nil && derr == nil {
			d.Receive(r.Context(), m)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	c.servers = append(c.servers, srv)
	go srv.Serve(ln)
}

func httpDelivery(urls map[replica.NodeID]string) func(replica.NodeID, []byte) {
	client := &http.Client{Timeout: 5 * time.Second}
	return func(to replica.NodeID, b []byte) {
		if url, ok := urls[to]; ok {
			if resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(b)); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}

func (c *replicas) produce(acks replica.Acks, recs []segment.Record) (replica.ProduceResult, error) {
	batch, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	if err != nil {
		return replica.ProduceResult{}, err
	}
	r, err := c.drivers[1].Produce(context.Background(), "bench", 0, acks, batch)
	if err == nil {
		err = r.Err
	}
	return r, err
}

func (c *replicas) close() {
	for _, srv := range c.servers {
		srv.Close()
	}
	c.cancel()
	c.runs.Wait()
	c.tr.close()
	for _, l := range c.logs {
		l.Close()
	}
	os.RemoveAll(c.dir)
}

// queuedTransport hands each message, encoded, to a goroutine per
// destination, so that Send never waits for the receiver's loop (two
// loops sending to each other would otherwise deadlock).
type queuedTransport struct {
	deliver func(to replica.NodeID, b []byte)
	mu      sync.Mutex
	queues  map[replica.NodeID]chan []byte
	wg      sync.WaitGroup
}

func newQueuedTransport(deliver func(replica.NodeID, []byte)) *queuedTransport {
	return &queuedTransport{deliver: deliver, queues: map[replica.NodeID]chan []byte{}}
}

func (t *queuedTransport) Send(m replica.Message) {
	b, err := m.MarshalBinary()
	if err != nil {
		return
	}
	to := m.Head().To
	t.mu.Lock()
	q, ok := t.queues[to]
	if !ok {
		q = make(chan []byte, 4096)
		t.queues[to] = q
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for b := range q {
				t.deliver(to, b)
			}
		}()
	}
	t.mu.Unlock()
	select {
	case q <- b:
	default: // a receiver this far behind loses messages, which the protocol allows
	}
}

func (t *queuedTransport) close() {
	t.mu.Lock()
	for _, q := range t.queues {
		close(q)
	}
	t.mu.Unlock()
	t.wg.Wait()
}
