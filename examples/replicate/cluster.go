package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// cluster starts, kills and restarts the node processes: exe run with
// -node flags (and env, for a test binary that runs as a node).
type cluster struct {
	exe   string
	env   []string
	nodes int
	dir   string
	tick  time.Duration
	lag   int

	peers []string
	procs map[replica.NodeID]*exec.Cmd
}

func (c *cluster) start() error {
	c.procs = map[replica.NodeID]*exec.Cmd{}
	peers, err := loopback.Addrs(c.nodes)
	if err != nil {
		return err
	}
	c.peers = peers
	for id := range replica.NodeID(c.nodes) {
		if err := c.startNode(id + 1); err != nil {
			return err
		}
	}
	return c.waitISR(c.all())
}

func (c *cluster) all() []replica.NodeID {
	ids := make([]replica.NodeID, c.nodes)
	for i := range ids {
		ids[i] = replica.NodeID(i + 1)
	}
	return ids
}

func (c *cluster) startNode(id replica.NodeID) error {
	cmd := exec.Command(c.exe, "-node", fmt.Sprint(id), "-dir", c.nodeDir(id),
		"-peers", strings.Join(c.peers, ","), "-tick", c.tick.String(), "-lag", fmt.Sprint(c.lag))
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	c.procs[id] = cmd
	return nil
}

func (c *cluster) nodeDir(id replica.NodeID) string {
	return filepath.Join(c.dir, fmt.Sprintf("node-%d", id))
}

// signal sends sig to a node and waits for its process to end.
func (c *cluster) signal(id replica.NodeID, sig syscall.Signal) error {
	cmd := c.procs[id]
	if cmd == nil {
		return nil
	}
	delete(c.procs, id)
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	err := cmd.Wait()
	if sig == syscall.SIGKILL {
		return nil
	}
	return err
}

// stop ends every node cleanly (SIGTERM: each closes its Dir).
func (c *cluster) stop() error {
	var errs []error
	for _, id := range c.all() {
		if err := c.signal(id, syscall.SIGTERM); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// kill ends whatever still runs, for a scenario that failed.
func (c *cluster) kill() {
	for _, id := range c.all() {
		c.signal(id, syscall.SIGKILL)
	}
}

func (c *cluster) leaderURL(path string) string { return "http://" + c.peers[0] + path }

func (c *cluster) isr() (state, error) {
	var s state
	resp, err := http.Get(c.leaderURL("/isr"))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&s)
	return s, err
}

// waitISR waits until the controller's ISR is want.
func (c *cluster) waitISR(want []replica.NodeID) error {
	deadline := time.Now().Add(200 * c.tick * time.Duration(max(c.lag, 10)) / 10)
	var last state
	for time.Now().Before(deadline) {
		if s, err := c.isr(); err == nil {
			last = s
			if slices.Equal(s.ISR, want) {
				return nil
			}
		}
		time.Sleep(c.tick * 5)
	}
	return fmt.Errorf("ISR is %v, not %v, after waiting", last.ISR, want)
}

// produce sends one batch of values to the leader.
func (c *cluster) produce(acks string, values ...[]byte) (produced, error) {
	recs := make([]segment.Record, len(values))
	for i, v := range values {
		recs[i] = segment.Record{Value: v}
	}
	batch, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	if err != nil {
		return produced{}, err
	}
	var p produced
	resp, err := http.Post(c.leaderURL("/produce?acks="+acks), "application/octet-stream", bytes.NewReader(batch))
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p, fmt.Errorf("produce: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	return p, err
}

// readLog returns every record of a stopped node's log, by offset.
func (c *cluster) readLog(id replica.NodeID) (map[int64]string, error) {
	dir, err := log.OpenDir(c.nodeDir(id), log.DirOptions{Log: log.Options{ExternalHighWatermark: true}})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	p, err := dir.Partition(topic, partition)
	if err != nil {
		return nil, err
	}
	recs := map[int64]string{}
	for r, err := range p.Records(0, log.ReadLogEnd) {
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", id, err)
		}
		recs[r.Offset] = string(r.Value)
	}
	return recs, nil
}

// report is what a scenario saw.
type report struct {
	acked                         map[int64]string
	ackedWhileDown                int
	isrAfterKill, isrAfterRestart []replica.NodeID
	// diverged are the records the restarted node had that no other
	// replica had, by offset; truncated says they are gone from its log.
	diverged  map[int64]string
	truncated bool
	// latency is the p50 and p99 of a produce, one at a time, by acks.
	latency map[string][2]time.Duration
}

// diverge gives a stopped node's log records that no other replica has,
// in the epoch after the leader's: as if, cut off from the others, it had
// been made leader of that epoch by a controller and taken writes before
// leadership moved back (the fast failovers of Kafka's KIP-279). Then the
// controller moves node 1 to the epoch after that one, as it would. The
// node, restarted, must find that its log diverged and truncate it.
func (c *cluster) diverge(id replica.NodeID, values ...string) (map[int64]string, error) {
	s, err := c.isr()
	if err != nil {
		return nil, err
	}
	dir, err := log.OpenDir(c.nodeDir(id), log.DirOptions{Log: log.Options{ExternalHighWatermark: true}})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	p, err := dir.Partition(topic, partition)
	if err != nil {
		return nil, err
	}
	_, _, end, err := p.Offsets()
	if err != nil {
		return nil, err
	}
	recs := make([]segment.Record, len(values))
	out := map[int64]string{}
	for i, v := range values {
		recs[i] = segment.Record{Value: []byte(v)}
		out[end+int64(i)] = v
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{BaseOffset: end})
	if err != nil {
		return nil, err
	}
	segment.Batch(b).SetPartitionLeaderEpoch(s.LeaderEpoch + 1)
	if _, err := p.AppendReplicated(b); err != nil {
		return nil, err
	}
	if err := dir.Close(); err != nil {
		return nil, err
	}
	resp, err := http.Post(c.leaderURL(fmt.Sprintf("/elect?epoch=%d", s.LeaderEpoch+2)), "", nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("elect: %s", resp.Status)
	}
	return out, nil
}

// latencies produces n batches one at a time with acks, and returns the
// p50 and p99 of their times and the records acknowledged.
func (c *cluster) latencies(acks string, n int) ([2]time.Duration, map[int64]string, error) {
	ds := make([]time.Duration, n)
	acked := map[int64]string{}
	for i := range ds {
		v := fmt.Sprintf("acks=%s %d", acks, i)
		start := time.Now()
		p, err := c.produce(acks, []byte(v))
		ds[i] = time.Since(start)
		if err != nil {
			return [2]time.Duration{}, nil, err
		}
		if p.Code != kafkaerr.None {
			return [2]time.Duration{}, nil, fmt.Errorf("acks=%s: %s", acks, p.Err)
		}
		acked[p.BaseOffset] = v
	}
	slices.Sort(ds)
	return [2]time.Duration{ds[n/2], ds[n*99/100]}, acked, nil
}

// scenario produces acks=all batches to a started cluster; a third of the
// way it SIGKILLs the last node, and the ISR shrinks as produces go on;
// two thirds of the way it gives that node's log records no other replica
// has (diverge) and restarts it: it truncates them and rejoins the ISR.
// Then it times n produces one at a time with acks=1 and n with acks=all,
// stops every node and checks that each acknowledged record is, at its
// offset, in the log of every member of the final ISR, and that the
// diverging records are gone.
func scenario(c *cluster, batches, n int, logf func(string, ...any)) (report, error) {
	rep := report{acked: map[int64]string{}, latency: map[string][2]time.Duration{}}
	victim := replica.NodeID(c.nodes)
	rest := c.all()[:c.nodes-1]
	down := false
	for i := range batches {
		switch i {
		case batches / 3:
			logf("SIGKILL node %d", victim)
			if err := c.signal(victim, syscall.SIGKILL); err != nil {
				return rep, err
			}
			down = true
		case batches/3 + 1:
			// A follower as far as the leader's log end is caught up
			// however long it is silent (Kafka's ReplicaState.isCaughtUp):
			// the ISR shrinks once a produce leaves it behind, and that
			// produce waits until it has.
			if err := c.waitISR(rest); err != nil {
				return rep, fmt.Errorf("after the kill: %w", err)
			}
			rep.isrAfterKill = rest
			logf("ISR shrank to %v", rest)
		case 2 * batches / 3:
			var err error
			if rep.diverged, err = c.diverge(victim, "diverging 0", "diverging 1"); err != nil {
				return rep, fmt.Errorf("diverge: %w", err)
			}
			logf("node %d's log now ends with %d records no other replica has, in an epoch the leader skipped: %v", victim, len(rep.diverged), rep.diverged)
			logf("restart node %d", victim)
			if err := c.startNode(victim); err != nil {
				return rep, err
			}
			if err := c.waitISR(c.all()); err != nil {
				return rep, fmt.Errorf("after the restart: %w", err)
			}
			rep.isrAfterRestart = c.all()
			down = false
			logf("node %d rejoined the ISR", victim)
		}
		values := [][]byte{fmt.Appendf(nil, "batch %d record 0", i), fmt.Appendf(nil, "batch %d record 1", i)}
		p, err := c.produce("all", values...)
		if err != nil {
			return rep, err
		}
		if p.Code != kafkaerr.None {
			// Not acknowledged: nothing is promised about it.
			logf("batch %d: %s", i, p.Err)
			continue
		}
		for j, v := range values {
			rep.acked[p.BaseOffset+int64(j)] = string(v)
		}
		if down {
			rep.ackedWhileDown += len(values)
		}
	}
	for _, acks := range []string{"1", "all"} {
		lat, acked, err := c.latencies(acks, n)
		if err != nil {
			return rep, err
		}
		rep.latency[acks] = lat
		if acks == "all" {
			maps.Copy(rep.acked, acked)
		}
	}
	logf("%d produces of one record, one at a time, over HTTP on loopback, FsyncAlways: acks=1 p50 %v p99 %v; acks=all p50 %v p99 %v",
		n, rep.latency["1"][0], rep.latency["1"][1], rep.latency["all"][0], rep.latency["all"][1])
	final, err := c.isr()
	if err != nil {
		return rep, err
	}
	if err := c.stop(); err != nil {
		return rep, err
	}
	for _, id := range final.ISR {
		recs, err := c.readLog(id)
		if err != nil {
			return rep, err
		}
		for off, v := range rep.acked {
			if recs[off] != v {
				return rep, fmt.Errorf("node %d (in the ISR %v) has %q at offset %d, not the acknowledged %q", id, final.ISR, recs[off], off, v)
			}
		}
		logf("node %d holds all %d acknowledged records", id, len(rep.acked))
		if id != victim {
			continue
		}
		rep.truncated = true
		for off, v := range rep.diverged {
			rep.truncated = rep.truncated && recs[off] != v
			logf("node %d: offset %d held %q, now %q", id, off, v, recs[off])
		}
	}
	return rep, nil
}
