package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/assign"
)

// memberChurn is what the members of TestConsumerMembersChurn saw, checked as they
// see it: each partition owned by one member at a time (from OnAssigned to
// OnRevoked or OnLost, or to a crash), records processed only by their
// partition's owner, in order, with nothing skipped; a new owner may start
// before where the last one stopped (at least once).
type memberChurn struct {
	mu          sync.Mutex
	owner       map[TopicPartition]int   // member incarnation; 0 for none
	tenure      map[TopicPartition]int64 // last offset its owner processed; -1 before its first
	last        map[TopicPartition]int64 // highest offset processed
	processed   int
	redelivered int
	handovers   int
	problems    []string
}

func (c *memberChurn) problem(format string, args ...any) {
	if len(c.problems) < 20 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

func (c *memberChurn) assigned(id int, tps []TopicPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tp := range tps {
		if o := c.owner[tp]; o != 0 {
			c.problem("%v assigned to member %d while member %d owns it", tp, id, o)
		}
		c.owner[tp], c.tenure[tp] = id, -1
		c.handovers++
	}
}

func (c *memberChurn) released(id int, tps []TopicPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tp := range tps {
		if o := c.owner[tp]; o != id {
			c.problem("%v released by member %d, but member %d owns it", tp, id, o)
			continue
		}
		c.owner[tp] = 0
	}
}

// crashed forgets what a member that stopped dead owned.
func (c *memberChurn) crashed(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for tp, o := range c.owner {
		if o == id {
			c.owner[tp] = 0
		}
	}
}

func (c *memberChurn) process(id int, ms []Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		tp := m.TopicPartition
		last, seen := c.last[tp]
		if !seen {
			last = -1
		}
		switch {
		case c.owner[tp] != id:
			c.problem("member %d processed %v offset %d, owned by member %d", id, tp, m.Offset, c.owner[tp])
		case c.tenure[tp] >= 0 && m.Offset != c.tenure[tp]+1:
			c.problem("member %d processed %v offset %d after %d", id, tp, m.Offset, c.tenure[tp])
		case m.Offset > last+1:
			c.problem("member %d skipped %v from %d to %d", id, tp, last, m.Offset)
		}
		if m.Offset <= last {
			c.redelivered++
		}
		c.tenure[tp], c.last[tp] = m.Offset, max(last, m.Offset)
		c.processed++
	}
}

func (c *memberChurn) done(partitions int32, perPartition int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range partitions {
		if last, ok := c.last[TopicPartition{Topic: "t", Partition: p}]; !ok || last != perPartition-1 {
			return false
		}
	}
	return true
}

var errCrash = errors.New("crash")

// member runs one consumer incarnation until ctx ends: Close, or with
// cause errCrash a crash.
func (c *memberChurn) member(ctx context.Context, e *consumerEnv, opts Options, id int) {
	opts.OnAssigned = func(_ context.Context, _ *Consumer, tps []TopicPartition) { c.assigned(id, tps) }
	opts.OnRevoked = func(_ context.Context, _ *Consumer, tps []TopicPartition) { c.released(id, tps) }
	opts.OnLost = opts.OnRevoked
	con, err := New(e.s, opts)
	if err != nil {
		c.mu.Lock()
		c.problem("member %d: %v", id, err)
		c.mu.Unlock()
		return
	}
	for {
		ms, err := con.Poll(ctx)
		c.process(id, ms) // what Poll returned is processed, even as ctx ends
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			c.mu.Lock()
			c.problem("member %d: Poll: %v", id, err)
			c.mu.Unlock()
		}
	}
	if errors.Is(context.Cause(ctx), errCrash) {
		con.crash()
		c.crashed(id)
		return
	}
	if err := con.Close(context.Background()); err != nil {
		c.mu.Lock()
		c.problem("member %d: Close: %v", id, err)
		c.mu.Unlock()
	}
}

// Eight consumers share 64 partitions while records flow and members are
// closed, crash and start: every record is processed, at least once, in
// order per partition, and no partition is ever owned by two members at
// once, with cooperative rebalancing (KIP-429) and also with eager.
func TestConsumerMembersChurn(t *testing.T) {
	const partitions, members = 64, 8
	perPartition, events := int64(30), 10
	if !testing.Short() {
		perPartition, events = 200, 40
	}
	for _, assignor := range []assign.Assignor{assign.CooperativeSticky, assign.Range} {
		t.Run(assignor.Name(), func(t *testing.T) {
			e := newConsumerEnv(t, map[string]int32{"t": partitions})
			c := &memberChurn{owner: map[TopicPartition]int{}, tenure: map[TopicPartition]int64{}, last: map[TopicPartition]int64{}}
			opts := Options{Group: "g", Topics: []string{"t"}, Assignor: assignor,
				SessionTimeout: 2 * time.Second, HeartbeatInterval: 50 * time.Millisecond, RebalanceTimeout: 3 * time.Second,
				AutoCommitInterval: 100 * time.Millisecond, MetadataInterval: time.Hour}
			var wg sync.WaitGroup
			stops := make([]context.CancelCauseFunc, members)
			next := 0
			start := func(slot int) {
				next++
				id := next
				ctx, cancel := context.WithCancelCause(context.Background())
				stops[slot] = cancel
				wg.Go(func() { c.member(ctx, e, opts, id) })
			}
			for slot := range members {
				start(slot)
			}

			produced := make(chan struct{})
			go func() {
				defer close(produced)
				for i := int64(0); i < perPartition; i += 5 {
					for p := range int32(partitions) {
						e.produce("t", p, 5)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range events {
				time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
				slot := rng.IntN(members)
				cause := error(nil)
				if i%4 == 3 {
					cause = errCrash
				}
				stops[slot](cause)
				start(slot)
			}
			<-produced
			require.Eventually(t, func() bool { return c.done(partitions, perPartition) }, 30*time.Second, 20*time.Millisecond,
				"every record processed")
			for _, stop := range stops {
				stop(nil)
			}
			wg.Wait()
			c.mu.Lock()
			defer c.mu.Unlock()
			require.Empty(t, c.problems)
			t.Logf("%s: %d records, %d processed (%d again), %d partition handovers", assignor.Name(),
				partitions*perPartition, c.processed, c.redelivered, c.handovers)
		})
	}
}
