//go:build linux

package jepsen

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/strandlog/strand/examples/jepsen/checker"
)

var (
	long      = flag.Bool("jepsen.long", false, "run every scenario, with longer fault windows and more faults (default: the short set, as with -short)")
	runs      = flag.Int("jepsen.runs", 1, "run each scenario this many times")
	scenarios = flag.String("jepsen.scenario", "", "comma-separated scenario names to run (default: the short set, or every one with -jepsen.long)")
	window    = flag.Duration("jepsen.window", 0, "how long each fault lasts (default 4s, 15s with -jepsen.long)")
	faults    = flag.Int("jepsen.faults", 0, "how many faults a scenario injects (default 2, 4 with -jepsen.long; kill-all and power-failure half as many)")
	fastMeta  = flag.Bool("jepsen.fast-metadata", false, "the workload's clients refresh metadata as often as every 100 ms (franz-go's default: 5 s), as examples/cluster's own tests do")
	keep      = flag.Bool("jepsen.keep", false, "keep each run's data directories and node logs (printed) instead of removing them")
)

const (
	topic      = "jepsen"
	partitions = 6
	producers  = 4
	rate       = 100 // records a second per producer: 400 in all, as in the issue
)

// scenario is one kind of fault. prepare, if set, sets up what its fault
// needs before the nodes start (a namespace per node, file systems under
// their data directories) and returns an error wrapping ErrUnavailable
// when the machine lacks it; run injects the faults into a running,
// producing cluster and heals them.
type scenario struct {
	name    string
	short   bool // in the short set (CI)
	about   string
	configs map[string]string // topic configs beyond min.insync.replicas
	prepare func(e *env) error
	run     func(e *env)
}

var all = []scenario{
	{name: "kill-leader", short: true, about: "SIGKILL a partition leader (not the controller), restart it", run: killLeader},
	{name: "kill-controller", about: "SIGKILL the controller (raft leader), restart it", run: killController},
	{name: "pause-leader", short: true, about: "SIGSTOP a partition leader for longer than the broker session, then SIGCONT", run: pauseLeader},
	{name: "rolling-restart", about: "SIGTERM (controlled shutdown) and restart each node in turn", run: rollingRestart},
	{name: "partition-leader", short: true, about: "cut a partition leader off from the other nodes (network namespaces); clients still reach it", prepare: withNetwork, run: partitionLeader},
	{name: "full-disk", about: "fill a partition leader's log directory (a 64 MiB tmpfs), then free it", prepare: withTmpfs, run: fullDisk},
	{name: "kill-all", about: "SIGKILL every node at once, restart them", run: killAll},
	{name: "power-failure", about: "freeze every node, copy its data directory's ext4 image, SIGKILL, put the copies back, restart", prepare: withImages, run: powerFailure},
	{name: "damage-follower", about: "damage a stopped follower's files (a bit of a batch's base offset, a record's bit, a cut segment, a cut index, the epoch checkpoint), restart it, then SIGKILL the partition's leader",
		configs: map[string]string{"segment.bytes": "16384"}, run: damageFollower},
}

var (
	buildOnce sync.Once
	nodeBin   string
	buildErr  error
)

// TestJepsen runs the scenarios: every acknowledged record must be read
// back at its offset, exactly once, in each producer's order, nothing read
// that was never sent, and the group's committed offsets must never go
// back or past the log end (package checker). Kafka's promise for acks=all
// with min.insync.replicas (the producer's acks docs; KIP-101, KIP-279,
// KIP-966 for what holds across leader changes and unclean shutdowns).
func TestJepsen(t *testing.T) {
	var selected []scenario
	names := strings.Split(*scenarios, ",")
	for _, sc := range all {
		if *scenarios != "" && slices.Contains(names, sc.name) || *scenarios == "" && (*long || sc.short) {
			selected = append(selected, sc)
		}
	}
	if len(selected) == 0 {
		t.Fatalf("no scenario named in -jepsen.scenario %q; there are %v", *scenarios, scenarioNames())
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jepsen-node")
		if err != nil {
			buildErr = err
			return
		}
		nodeBin, buildErr = BuildNode("../cluster", dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	for _, sc := range selected {
		for run := range *runs {
			t.Run(fmt.Sprintf("%s/%d", sc.name, run+1), func(t *testing.T) { runScenario(t, sc) })
		}
	}
}

func scenarioNames() []string {
	var out []string
	for _, sc := range all {
		out = append(out, sc.name)
	}
	return out
}

// env is one run of a scenario.
type env struct {
	t       *testing.T
	dir     string
	c       *Cluster
	adm     *kadm.Client
	net     *Network
	images  []*Image
	window  time.Duration // how long a fault lasts
	repeats int           // how many faults a scenario injects
	faults  []fault
}

type fault struct {
	what string
	at   time.Time
}

// inject records a fault's moment, which the figures count from.
func (e *env) inject(format string, args ...any) {
	f := fault{what: fmt.Sprintf(format, args...), at: time.Now()}
	e.faults = append(e.faults, f)
	e.t.Logf("%s: %s", f.at.Format("15:04:05.000"), f.what)
}

func runScenario(t *testing.T, sc scenario) {
	e := &env{t: t, window: 4 * time.Second, repeats: 2}
	if *long {
		e.window, e.repeats = 15*time.Second, 4
	}
	if *window > 0 {
		e.window = *window
	}
	if *faults > 0 {
		e.repeats = *faults
	}
	if *keep {
		dir, err := os.MkdirTemp("", "jepsen-"+sc.name)
		if err != nil {
			t.Fatal(err)
		}
		e.dir = dir
		t.Cleanup(func() { t.Logf("data and node logs kept in %s", dir) })
	} else {
		e.dir = t.TempDir()
	}
	if sc.prepare != nil {
		if err := sc.prepare(e); errors.Is(err, ErrUnavailable) {
			t.Skipf("scenario %s skipped: %v", sc.name, err)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	e.c, err = NewCluster(nodeBin, e.dir, e.net)
	if err != nil {
		t.Fatal(err)
	}
	if e.images != nil {
		for i, im := range e.images {
			if im.Mount != e.c.Nodes[i].Dir {
				t.Fatalf("image %d is mounted at %s, not node %d's data directory %s", i, im.Mount, i+1, e.c.Nodes[i].Dir)
			}
		}
	}
	t.Cleanup(func() {
		e.c.Close()
		reportNodeLogs(t, e.dir)
	})
	if err := e.c.StartAll(); err != nil {
		t.Fatal(err)
	}
	cl, err := e.c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.adm = kadm.NewClient(cl)
	createTopic(t, e.adm, sc.configs)
	e.waitISR(60 * time.Second)

	w, err := StartWorkload(e.c, topic, partitions, producers, rate, *fastMeta)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	waitFor(t, 30*time.Second, "an acknowledgement from every partition and a commit of the group", func() (bool, string) {
		got := w.FirstAcksAfter(time.Time{})
		return len(got) == partitions && len(w.Commits()) > 0, fmt.Sprintf("%d partitions acknowledged, %d commits", len(got), len(w.Commits()))
	})
	time.Sleep(2 * time.Second)
	start := time.Now()
	t.Logf("scenario %s: %s", sc.name, sc.about)
	sc.run(e)
	e.waitWrites(w, 60*time.Second)
	time.Sleep(3 * time.Second) // produce on the healed cluster
	stopped := time.Now()
	w.StopWithin(35 * time.Second)
	t.Logf("faults and healing took %v", time.Since(start).Round(time.Millisecond))

	agreeErr := e.c.WaitAgree(context.Background(), topic, partitions, 60*time.Second)
	if err := w.FinalCommits(e.c); err != nil {
		t.Errorf("fetching the group's final offsets: %v", err)
	}
	reads, logStart, logEnd, unreadable, readErr := ReadBack(e.c, topic, partitions, 30*time.Second)
	res := checker.Check(checker.History{Sends: w.Sends(), Reads: reads, LogStart: logStart, LogEnd: logEnd, Commits: w.Commits(), Unreadable: unreadable})
	report(t, sc.name, e, w, res, stopped)
	if len(unreadable) > 0 {
		onDisk(t, e, w.Sends(), unreadable)
	}
	if agreeErr != nil {
		t.Errorf("after healing: %v", agreeErr)
	}
	if readErr != nil {
		t.Errorf("%v", readErr)
	}
	if !res.OK() {
		const show = 25
		var lines []string
		for _, a := range res.Anomalies[:min(show, len(res.Anomalies))] {
			lines = append(lines, "  "+a.String())
		}
		t.Errorf("scenario %s broke the rules: %s\n%s", sc.name, res.Summary(), strings.Join(lines, "\n"))
	}
}

// report prints a run's figures: the checker's counts, and per fault the
// failover (from the fault to the moment every partition had acknowledged
// a record sent after it) and the first produce after the fault per
// partition (the same, for each partition), as median and p99.
func report(t *testing.T, name string, e *env, w *Workload, res checker.Result, stopped time.Time) {
	var failovers, firsts []time.Duration
	never := 0
	for _, f := range e.faults {
		got := w.FirstAcksAfter(f.at)
		worst := time.Duration(0)
		for p := range int32(partitions) {
			d, ok := got[p]
			if !ok {
				never++
				continue
			}
			firsts = append(firsts, d)
			worst = max(worst, d)
		}
		if len(got) == partitions {
			failovers = append(failovers, worst)
		}
	}
	silences := w.LongestSilences(stopped)
	longest, longestAt := time.Duration(0), int32(-1)
	for p, d := range silences {
		if d > longest {
			longest, longestAt = d, p
		}
	}
	t.Logf("RESULT %s: acknowledged %d, lost %d, unverified %d (unreadable partitions %d), duplicated %d, unknown %d (%d in the log), reordered %d, phantom %d, gaps %d; group offsets seen %d, backwards %d, past end %d; "+
		"faults %d: failover median %v p99 %v; first produce after a fault median %v p99 %v (partitions never acknowledging again: %d); "+
		"longest time without an acknowledgement %v (partition %d)",
		name, res.Acknowledged, res.Count(checker.Lost), res.Unverified, res.Count(checker.Unreadable), res.Count(checker.Duplicated), res.Unknown, res.UnknownFound,
		res.Count(checker.Reordered), res.Count(checker.Phantom), res.Count(checker.Gap), len(w.Commits()), res.Count(checker.CommitBackwards), res.Count(checker.CommitPastEnd),
		len(e.faults), quantile(failovers, 0.5), quantile(failovers, 0.99), quantile(firsts, 0.5), quantile(firsts, 0.99), never, longest.Round(time.Millisecond), longestAt)
	errs := w.Errors()
	keys := slices.SortedFunc(maps.Keys(errs), func(a, b string) int { return errs[b] - errs[a] })
	for _, k := range keys[:min(5, len(keys))] {
		t.Logf("  produce error x%d: %s", errs[k], k)
	}
}

// onDisk stops the nodes and looks for the acknowledged records of the
// partitions no leader served in the replicas' files: each is at its
// offset in how many of the three replicas. What is in none was
// acknowledged and is on no disk.
func onDisk(t *testing.T, e *env, sends []checker.Send, unreadable map[int32]string) {
	e.c.Close()
	for _, p := range slices.Sorted(maps.Keys(unreadable)) {
		var replicas []map[int64]string
		for _, n := range e.c.Nodes {
			r, err := ReadReplica(filepath.Join(n.LogDir(), fmt.Sprintf("%s-%d", topic, p)), topic, p)
			if err != nil {
				t.Logf("partition %d on node %d: %v", p, n.ID, err)
			}
			replicas = append(replicas, r)
		}
		var copies [4]int
		for _, s := range sends {
			if !s.Acked || s.Partition != p {
				continue
			}
			n := 0
			for _, r := range replicas {
				if r[s.Offset] == s.Value {
					n++
				}
			}
			copies[n]++
		}
		t.Logf("partition %d, unreadable (%s): on disk, of its acknowledged records %d are at their offset in 3 replicas, %d in 2, %d in 1, %d in none",
			p, unreadable[p], copies[3], copies[2], copies[1], copies[0])
		if copies[0] > 0 {
			t.Errorf("partition %d: %d acknowledged records are on no replica's disk at their offset", p, copies[0])
		}
	}
}

// quantile returns the q-quantile of ds (nearest rank), or "never" for
// none (no partition, or not all of them, acknowledged again).
func quantile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "never"
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond).String()
}

// reportNodeLogs prints how many WARN and ERROR lines each node logged,
// with the first few distinct messages: what the nodes said about the
// faults.
func reportNodeLogs(t *testing.T, dir string) {
	for i := 1; i <= 3; i++ {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("node-%d.out", i)))
		if err != nil {
			continue
		}
		counts := map[string]int{}
		var first []string
		seen := map[string]bool{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, lvl := range []string{"level=WARN", "level=ERROR", "panic:", "fatal error:"} {
				if !strings.Contains(line, lvl) {
					continue
				}
				counts[lvl]++
				msg := line
				if j := strings.Index(line, "msg="); j >= 0 {
					msg = line[j:min(len(line), j+160)]
					if k := strings.Index(msg[5:], `"`); msg[4] == '"' && k >= 0 {
						msg = msg[:k+6] // the message without its attributes, for telling them apart
					}
				}
				if !seen[msg] && len(first) < 6 {
					seen[msg] = true
					first = append(first, lvl+" "+msg)
				}
			}
		}
		f.Close()
		if len(counts) > 0 {
			t.Logf("node %d logged %v; first: %s", i, counts, strings.Join(first, " | "))
		}
	}
}

func createTopic(t *testing.T, adm *kadm.Client, configs map[string]string) {
	t.Helper()
	cfg := map[string]*string{}
	minISR := "2"
	cfg["min.insync.replicas"] = &minISR
	for k, v := range configs {
		cfg[k] = &v
	}
	waitFor(t, 60*time.Second, "the topic to be created", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := adm.CreateTopic(ctx, partitions, 3, cfg, topic)
		if err == nil {
			err = resp.Err
		}
		return err == nil, fmt.Sprint(err)
	})
}

// waitISR waits until every partition has a leader and all three replicas
// in its ISR, as the brokers' Metadata says.
func (e *env) waitISR(timeout time.Duration) {
	e.t.Helper()
	if err := e.tryWaitISR(timeout); err != nil {
		e.t.Errorf("%v", err)
	}
}

func (e *env) tryWaitISR(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		md, err := e.adm.Metadata(ctx, topic)
		cancel()
		if err == nil {
			ok, desc := true, []string{}
			td := md.Topics[topic]
			for p := range int32(partitions) {
				pd, found := td.Partitions[p]
				ok = ok && found && pd.Err == nil && pd.Leader >= 0 && len(pd.ISR) == 3
				desc = append(desc, fmt.Sprintf("p%d leader %d isr %v", p, pd.Leader, pd.ISR))
			}
			if ok && td.Err == nil {
				return nil
			}
			last = strings.Join(desc, ", ")
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("no full ISR in every partition within %v: %s", timeout, last)
}

// waitWrites waits until every partition has acknowledged a record sent
// after the last fault: a cluster whose metadata looks whole may still
// refuse every write (no leader after SIGKILL of every node).
func (e *env) waitWrites(w *Workload, timeout time.Duration) {
	if len(e.faults) == 0 {
		return
	}
	last := e.faults[len(e.faults)-1].at
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(w.FirstAcksAfter(last)) == partitions {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Errorf("within %v of healing, only partitions %v acknowledged a record sent after the last fault", timeout,
		slices.Sorted(maps.Keys(w.FirstAcksAfter(last))))
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("waited %v for %s; last: %s", timeout, what, last)
}

// leaders returns the partitions' leaders and the controller, retrying
// while no running node answers.
func (e *env) leaders() (map[int32]int, int) {
	e.t.Helper()
	var leaders map[int32]int
	controller := -1
	waitFor(e.t, 30*time.Second, "the partitions' leaders", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var err error
		leaders, controller, err = e.c.Leaders(ctx, e.adm, topic)
		if err != nil {
			return false, err.Error()
		}
		for _, l := range leaders {
			if l < 1 {
				return false, fmt.Sprintf("leaders %v", leaders)
			}
		}
		return len(leaders) == partitions, fmt.Sprintf("leaders %v", leaders)
	})
	return leaders, controller
}

// leaderNotController picks a partition whose leader is not the
// controller, the i-th such if there are several (or any partition's
// leader if the controller leads them all), so that the fault is the
// partition leader's alone.
func (e *env) leaderNotController(i int) (partition int32, node *Node) {
	leaders, controller := e.leaders()
	var candidates []int32
	for p := range int32(partitions) {
		if leaders[p] != controller {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		p := int32(i % partitions)
		return p, e.c.Node(leaders[p])
	}
	p := candidates[i%len(candidates)]
	return p, e.c.Node(leaders[p])
}

func (e *env) end(n *Node, sig syscall.Signal) {
	if err := n.End(sig); err != nil {
		e.t.Errorf("%v", err)
	}
}

func (e *env) start(n *Node) {
	if err := e.c.Start(n); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) signal(n *Node, sig syscall.Signal) {
	if err := n.Signal(sig); err != nil {
		e.t.Fatal(err)
	}
}

func killLeader(e *env) {
	for i := range e.repeats {
		p, n := e.leaderNotController(i)
		e.inject("SIGKILL node %d, leader of partition %d", n.ID, p)
		e.end(n, syscall.SIGKILL)
		time.Sleep(e.window)
		e.start(n)
		e.waitISR(60 * time.Second)
	}
}

func killController(e *env) {
	for range e.repeats {
		_, controller := e.leaders()
		n := e.c.Node(controller)
		e.inject("SIGKILL node %d, the controller", n.ID)
		e.end(n, syscall.SIGKILL)
		time.Sleep(e.window)
		e.start(n)
		e.waitISR(60 * time.Second)
	}
}

func pauseLeader(e *env) {
	for i := range e.repeats {
		p, n := e.leaderNotController(i)
		e.inject("SIGSTOP node %d, leader of partition %d, for %v (the broker session is 3 s)", n.ID, p, e.window)
		e.signal(n, syscall.SIGSTOP)
		time.Sleep(e.window)
		e.signal(n, syscall.SIGCONT)
		e.waitISR(60 * time.Second)
	}
}

func rollingRestart(e *env) {
	rounds := 1
	if *long {
		rounds = 3
	}
	for range rounds {
		for _, n := range e.c.Nodes {
			e.inject("SIGTERM node %d (controlled shutdown)", n.ID)
			e.end(n, syscall.SIGTERM)
			time.Sleep(time.Second)
			e.start(n)
			e.waitISR(60 * time.Second)
		}
	}
}

func withNetwork(e *env) error {
	n, err := NewNetwork(3)
	if err != nil {
		return err
	}
	e.net = n
	e.t.Cleanup(n.Close)
	return nil
}

func partitionLeader(e *env) {
	for i := range e.repeats {
		p, n := e.leaderNotController(i)
		if i%2 == 1 {
			// Every other time the controller's own node: raft and the
			// partitions' leadership move together.
			leaders, controller := e.leaders()
			n = e.c.Node(controller)
			for q, l := range leaders {
				if l == controller {
					p = q
				}
			}
		}
		e.inject("cut node %d, leader of partition %d, off from the other nodes for %v", n.ID, p, e.window)
		if err := e.net.Isolate(n.ID - 1); err != nil {
			e.t.Fatal(err)
		}
		time.Sleep(e.window)
		if err := e.net.Heal(); err != nil {
			e.t.Fatal(err)
		}
		e.t.Logf("healed the network")
		e.waitISR(60 * time.Second)
	}
}

func withTmpfs(e *env) error {
	for i := 1; i <= 3; i++ {
		dir := filepath.Join(e.dir, fmt.Sprintf("node-%d", i), "log")
		if err := MountTmpfs(dir, "64m"); err != nil {
			return err
		}
		e.t.Cleanup(func() { Unmount(dir) })
	}
	return nil
}

func fullDisk(e *env) {
	p, n := e.leaderNotController(0)
	path, size, err := Fill(n.LogDir())
	if err != nil {
		e.t.Fatalf("filling %s: %v", n.LogDir(), err)
	}
	e.inject("filled node %d's log directory (leader of partition %d) with %d bytes for %v", n.ID, p, size, e.window)
	time.Sleep(e.window)
	if err := os.Remove(path); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("freed %s", n.LogDir())
	e.waitISR(60 * time.Second)
}

func killAll(e *env) {
	for range max(1, e.repeats/2) {
		e.inject("SIGKILL every node")
		for _, n := range e.c.Nodes {
			n.Signal(syscall.SIGKILL)
		}
		for _, n := range e.c.Nodes {
			e.end(n, syscall.SIGKILL)
		}
		time.Sleep(time.Second)
		if err := e.c.StartAll(); err != nil {
			e.t.Fatal(err)
		}
		e.waitISR(60 * time.Second)
	}
}

func withImages(e *env) error {
	for i := 1; i <= 3; i++ {
		dir := filepath.Join(e.dir, fmt.Sprintf("node-%d", i))
		im, err := NewImage(filepath.Join(e.dir, fmt.Sprintf("node-%d.ext4", i)), dir, 256<<20)
		if err != nil {
			return err
		}
		e.images = append(e.images, im)
		e.t.Cleanup(func() { im.Close() })
	}
	return nil
}

// powerFailure freezes every node (SIGSTOP: no process writes), copies
// each node's disk (the image file, which holds what the loop device was
// sent: everything fsynced, but not what only ext4's page cache holds),
// SIGKILLs the nodes, throws the page cache away with the image it would
// be flushed to, and starts the nodes on the copies: what a power failure
// of the three machines at the moment of the freeze leaves.
func powerFailure(e *env) {
	for range max(1, e.repeats/2) {
		e.inject("power failure of every node")
		for _, n := range e.c.Nodes {
			e.signal(n, syscall.SIGSTOP)
		}
		snaps := make([]string, len(e.images))
		for i, im := range e.images {
			s, err := im.Snapshot()
			if err != nil {
				e.t.Fatal(err)
			}
			snaps[i] = s
		}
		for _, n := range e.c.Nodes {
			e.end(n, syscall.SIGKILL)
		}
		for i, im := range e.images {
			if err := im.Restore(snaps[i]); err != nil {
				e.t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		if err := e.c.StartAll(); err != nil {
			e.t.Fatal(err)
		}
		e.waitISR(60 * time.Second)
	}
}

func damageFollower(e *env) {
	damages := []Damage{FlipBaseOffset, TruncateSealed}
	if *long {
		damages = []Damage{FlipBaseOffset, FlipRecordBit, TruncateSealed, TruncateIndex, GarbleCheckpoint}
	}
	for i, d := range damages {
		// A follower of a partition whose leader is not the controller
		// (when there is one), and not the controller either if the
		// controller does not lead the partition.
		_, controller := e.leaders()
		p, leader := e.leaderNotController(i)
		var f *Node
		for _, n := range e.c.Nodes {
			if n.ID != leader.ID && n.ID != controller {
				f = n
			}
		}
		if f == nil {
			f = e.c.Nodes[slices.IndexFunc(e.c.Nodes, func(n *Node) bool { return n.ID != leader.ID })]
		}
		partDir := filepath.Join(f.LogDir(), fmt.Sprintf("%s-%d", topic, p))
		waitFor(e.t, 60*time.Second, "a sealed segment in "+partDir, func() (bool, string) {
			_, err := sealedSegment(partDir)
			return err == nil, fmt.Sprint(err)
		})
		e.inject("SIGKILL node %d, follower of partition %d, and damage it: %s", f.ID, p, d)
		e.end(f, syscall.SIGKILL)
		what, err := d.Apply(partDir)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Logf("damaged %s", what)
		e.start(f)
		time.Sleep(e.window)
		e.inject("SIGKILL node %d, leader of partition %d, whose follower node %d was damaged", leader.ID, p, f.ID)
		e.end(leader, syscall.SIGKILL)
		time.Sleep(e.window)
		e.start(leader)
		e.waitISR(60 * time.Second)
	}
}
