package cluster

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/strandlog/strand/consumer"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// groupWorkload is consumers of one group (cluster.Consumer, KIP-848)
// reading a topic another workload produces to, each through a node it
// picks, and for a while only: it closes, now and then without
// committing, and another takes its place, through another node; a
// consumer whose node went down does the same. Between polls a consumer
// commits its positions.
//
// The check, once the cluster healed: the group's committed offset of
// each partition is at least the highest commit that was answered (no
// acknowledged commit lost, none gone back), and every record below it
// was delivered to some consumer (at least once: a commit never passes a
// record nobody was given).
type groupWorkload struct {
	group      string
	topic      string // produced to by another workload
	partitions int32
	consumers  int

	mu sync.Mutex
	// delivered are the offsets Poll returned, by partition.
	delivered map[int32]map[int64]bool
	// acked is the highest offset of each partition a commit was
	// answered for.
	acked map[int32]int64
}

func (w *groupWorkload) setup(ctx context.Context, s *sim) []simPartition {
	w.delivered, w.acked = map[int32]map[int64]bool{}, map[int32]int64{}
	for i := range w.partitions {
		w.delivered[i] = map[int64]bool{}
	}
	return nil // the producing workload's
}

func (w *groupWorkload) run(stop, drain context.Context, s *sim) {
	var wg sync.WaitGroup
	for i := range w.consumers {
		rng := rand.New(rand.NewPCG(s.seed, 0x6770+uint64(i)))
		wg.Go(func() {
			for stop.Err() == nil {
				w.consume(stop, s, rng)
			}
		})
	}
	wg.Wait()
}

// consume runs one consumer through a live node for a while, or until
// the node goes down.
func (w *groupWorkload) consume(stop context.Context, s *sim, rng *rand.Rand) {
	live := s.liveNodes()
	if len(live) == 0 {
		time.Sleep(10 * time.Millisecond)
		return
	}
	ids := slices.Sorted(maps.Keys(live))
	n := live[ids[rng.IntN(len(ids))]]
	c, err := NewConsumer(n, ConsumerOptions{Group: w.group, Topics: []string{w.topic}, Isolation: log.ReadCommitted})
	if err != nil {
		s.finding("a consumer through node %d: %v", n.cfg.ID, err)
		return
	}
	s.count("consumers", 1)
	until := time.Now().Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))))
	for stop.Err() == nil && time.Now().Before(until) && s.node(n.cfg.ID) == n {
		poll, cancel := context.WithTimeout(stop, 50*time.Millisecond)
		ms, err := c.Poll(poll)
		cancel()
		w.deliver(ms)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.count("poll errors", 1)
		}
		if len(ms) > 0 && rng.IntN(2) == 0 {
			w.commit(s, c)
		}
	}
	if rng.IntN(3) != 0 {
		w.commit(s, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		s.count("consumers closed with an error", 1)
	}
}

func (w *groupWorkload) deliver(ms []consumer.Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range ms {
		if m.Topic == w.topic {
			w.delivered[m.Partition][m.Offset] = true
		}
	}
}

// commit commits c's positions, as Commit does, and notes them if the
// commit is answered: they must stay committed.
func (w *groupWorkload) commit(s *sim, c *Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	positions, epoch := maps.Clone(c.owned), c.epoch
	c.mu.Unlock()
	if len(positions) == 0 {
		return
	}
	if err := c.commit(ctx, positions, epoch); err != nil {
		s.count("commits refused or unanswered", 1)
		return
	}
	s.count("commits answered", 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for tp, off := range positions {
		w.acked[tp.Partition] = max(w.acked[tp.Partition], off)
	}
}

func (w *groupWorkload) check(s *sim) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := group.OffsetFetchRequest{GroupID: w.group, RequireStable: true, Topics: []group.OffsetFetchTopic{{Name: w.topic}}}
	for i := range w.partitions {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, i)
	}
	var resp *group.OffsetFetchResponse
	err := s.c.retryGroup(ctx, func(n *Node) (err error) {
		resp, err = n.Groups().OffsetFetch(ctx, req)
		if err == nil {
			err = resp.Err
		}
		return err
	}, w.group)
	if err != nil {
		s.fatalf("fetching the committed offsets of group %q: %v", w.group, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range resp.Topics[0].Partitions {
		sp := simPartition{w.topic, p.Partition}
		if p.Err != nil {
			s.finding("%s: the committed offset of group %q: %v", sp, w.group, p.Err)
			continue
		}
		if acked, ok := w.acked[p.Partition]; ok && p.Offset < acked {
			s.finding("%s: group %q's committed offset is %d, below the commit of %d that was answered", sp, w.group, p.Offset, acked)
		}
		l, err := s.leaderOf(sp, replica.NoNode).leaderLog(ctx, sp.topic, sp.partition)
		if err != nil {
			s.fatalf("%s on its leader: %v", sp, err)
		}
		missed := 0
		for rec, err := range l.Records(0, log.ReadCommitted) {
			if err != nil {
				s.fatalf("reading %s: %v", sp, err)
			}
			if rec.Offset >= p.Offset {
				break
			}
			if !w.delivered[p.Partition][rec.Offset] {
				if missed == 0 {
					s.finding("%s: group %q committed %d, and the record at offset %d below it was delivered to no consumer", sp, w.group, p.Offset, rec.Offset)
				}
				missed++
			}
		}
		s.count("records delivered to the group", len(w.delivered[p.Partition]))
		if missed > 0 {
			s.finding("%s: %d records below group %q's committed offset %d were delivered to no consumer", sp, missed, w.group, p.Offset)
		}
	}
	s.count("group partitions checked", len(resp.Topics[0].Partitions))
}
