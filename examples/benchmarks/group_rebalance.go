package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/consumer"
	strandgroup "github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
)

// The rebalance of issue 13: members of one group share a topic's
// partitions through consumer.Consumer, a member joins (scale out) and then
// one leaves (scale in), with eager rebalancing (range) and with
// cooperative (cooperative-sticky, KIP-429). Each row gives how long the
// group took to own every partition again and how many partitions stopped
// being processed on the way (given up by their member).
func init() { suites["group-rebalance"] = groupRebalanceSuite }

func groupRebalanceSuite(quick bool) error {
	members, partitions := 100, int32(1000)
	if quick {
		members, partitions = 10, 100
	}
	fmt.Printf("%d members over %d partitions, heartbeats every %v; a rebalance ends when every partition is owned again\n",
		members, partitions, rebalanceHeartbeat)
	fmt.Printf("%-20s %-11s %12s %10s\n", "assignor", "change", "rebalance", "stopped")
	for _, a := range []assign.Assignor{assign.Range, assign.CooperativeSticky} {
		rows, err := measureRebalances(a, members, partitions)
		if err != nil {
			return fmt.Errorf("%s: %w", a.Name(), err)
		}
		for _, r := range rows {
			fmt.Printf("%-20s %-11s %12v %10d\n", a.Name(), r.change, r.took.Round(time.Millisecond), r.stopped)
		}
	}
	return nil
}

// rebalanceHeartbeat is the members' heartbeat interval: a member learns of
// a rebalance from its next heartbeat, so this bounds how soon each rejoins.
const rebalanceHeartbeat = 100 * time.Millisecond

type rebalanceRow struct {
	change  string
	took    time.Duration
	stopped int
}

// ownership is what the members' callbacks report: each partition's owner
// count, and how many partitions were given up (revoked, or closed with
// their member): those stop being processed until their next owner has
// them.
type ownership struct {
	mu      sync.Mutex
	owners  map[int32]int
	byID    map[int]int // member -> partitions owned
	running map[int]bool
	revoked int
}

func (o *ownership) options(opts consumer.Options, id int) consumer.Options {
	opts.OnAssigned = func(_ context.Context, _ *consumer.Consumer, tps []consumer.TopicPartition) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, tp := range tps {
			o.owners[tp.Partition]++
		}
		o.byID[id] += len(tps)
	}
	opts.OnRevoked = func(_ context.Context, _ *consumer.Consumer, tps []consumer.TopicPartition) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, tp := range tps {
			o.owners[tp.Partition]--
		}
		o.byID[id] -= len(tps)
		o.revoked += len(tps)
	}
	return opts
}

// settled reports whether every partition has one owner and the members
// that run own as many as the assignors balance them to (within one).
func (o *ownership) settled(partitions int32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p := range partitions {
		if o.owners[p] != 1 {
			return false
		}
	}
	least := int(partitions) / len(o.running)
	for id := range o.running {
		if n := o.byID[id]; n < least || n > least+1 {
			return false
		}
	}
	for id, n := range o.byID {
		if !o.running[id] && n > 0 {
			return false
		}
	}
	return true
}

func (o *ownership) takeRevoked() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.revoked
	o.revoked = 0
	return n
}

func measureRebalances(a assign.Assignor, members int, partitions int32) ([]rebalanceRow, error) {
	dir, err := os.MkdirTemp("", "strand-bench-rebalance-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Four files a partition (three per segment and a lock), so that
	// the members' reads do not close and reopen partitions.
	d, err := log.OpenDir(dir, log.DirOptions{MaxOpenFiles: 4*int(partitions) + 64})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := d.CreateTopic("t", log.TopicConfig{Partitions: partitions}); err != nil {
		return nil, err
	}
	// A short initial rebalance delay gathers the members that start
	// together into one generation (Kafka's default is 3 s).
	s, err := strandgroup.OpenService(d, strandgroup.ServiceOptions{Partitions: 1, Config: strandgroup.Config{InitialRebalanceDelay: 500 * time.Millisecond}})
	if err != nil {
		return nil, err
	}
	defer s.Close()

	o := &ownership{owners: map[int32]int{}, byID: map[int]int{}, running: map[int]bool{}}
	opts := consumer.Options{Group: "bench", Topics: []string{"t"}, Assignor: a,
		HeartbeatInterval: rebalanceHeartbeat, SessionTimeout: 30 * time.Second, RebalanceTimeout: time.Minute}
	var wg sync.WaitGroup
	errs := make(chan error, members+1)
	stops := map[int]context.CancelFunc{}
	start := func(id int) error {
		c, err := consumer.New(s, o.options(opts, id))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		stops[id] = cancel
		o.mu.Lock()
		o.running[id] = true
		o.mu.Unlock()
		wg.Go(func() {
			for {
				_, err := c.Poll(ctx)
				if ctx.Err() != nil {
					break
				}
				if err != nil {
					errs <- err
					break
				}
			}
			if err := c.Close(context.Background()); err != nil {
				errs <- err
			}
		})
		return nil
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	}()
	await := func() error {
		for began := time.Now(); !o.settled(partitions); {
			select {
			case err := <-errs:
				return err
			case <-time.After(time.Millisecond):
			}
			if time.Since(began) > 5*time.Minute {
				return errors.New("the group did not settle within 5 minutes")
			}
		}
		return nil
	}

	began := time.Now()
	for id := range members {
		if err := start(id); err != nil {
			return nil, err
		}
	}
	if err := await(); err != nil {
		return nil, err
	}
	rows := []rebalanceRow{{"start", time.Since(began), o.takeRevoked()}}
	began = time.Now()
	if err := start(members); err != nil {
		return nil, err
	}
	if err := await(); err != nil {
		return nil, err
	}
	rows = append(rows, rebalanceRow{"join", time.Since(began), o.takeRevoked()})

	began = time.Now()
	o.mu.Lock()
	delete(o.running, 0)
	o.mu.Unlock()
	stops[0]()
	if err := await(); err != nil {
		return nil, err
	}
	rows = append(rows, rebalanceRow{"leave", time.Since(began), o.takeRevoked()})
	return rows, nil
}
