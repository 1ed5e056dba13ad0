package cluster

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// netRecorder stands in for a Node: it records the numbers of the messages
// it receives, in order, and answers a call with its request.
type netRecorder struct {
	mu     sync.Mutex
	got    []uint32
	served int
}

func (r *netRecorder) Receive(_ context.Context, msg []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, binary.BigEndian.Uint32(msg))
	return nil
}

func (r *netRecorder) Serve(_ context.Context, req []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served++
	return req, nil
}

func (r *netRecorder) received() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func numbered(i int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(i)) }

// within says whether n is within 5 standard deviations of the number of
// successes expected in trials draws of probability p.
func within(n, trials int, p float64) bool {
	mean := float64(trials) * p
	sd := max(1, math.Sqrt(mean*(1-p)))
	return float64(n) > mean-5*sd && float64(n) < mean+5*sd
}

// The network's faults are what it counts, run in a synctest bubble, whose
// clock moves only when every goroutine waits: the check that no delivery
// comes too many is exact, not a hope that the last has come.
func TestMemoryNetworkFaults(t *testing.T) { synctest.Test(t, testMemoryNetworkFaults) }

func testMemoryNetworkFaults(t *testing.T) {
	net := NewMemoryNetwork()
	defer net.Close()
	r := &netRecorder{}
	net.attach(2, r)
	const drop, dup = 0.2, 0.1
	net.SetFaults(NetworkFaults{Drop: drop, Duplicate: dup, MaxDelay: 2 * time.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))})
	tr := net.Transport(1)
	const sends = 2000
	for i := range sends {
		tr.Send(context.Background(), 2, numbered(i))
	}
	c := net.snapshotCounts()
	require.Equal(t, sends, c.sent)
	require.True(t, within(c.dropped, sends, drop), "dropped %d of %d", c.dropped, sends)
	require.True(t, within(c.duplicated, sends-c.dropped, dup), "duplicated %d of %d", c.duplicated, sends-c.dropped)
	require.Positive(t, c.delayed)
	want := sends - c.dropped + c.duplicated
	waitFor(t, 5*time.Second, "every delivery", func() bool { return len(r.received()) >= want })
	time.Sleep(2 * time.Millisecond) // past the longest delay
	synctest.Wait()                  // and every delivery made
	got := r.received()
	require.Len(t, got, want)

	times := map[uint32]int{}
	for _, n := range got {
		times[n]++
	}
	missing, twice := 0, 0
	for i := range sends {
		switch times[uint32(i)] {
		case 0:
			missing++
		case 1:
		case 2:
			twice++
		default:
			t.Fatalf("message %d delivered %d times", i, times[uint32(i)])
		}
	}
	require.Equal(t, c.dropped, missing, "the dropped messages are the missing ones")
	require.Equal(t, c.duplicated, twice, "the duplicated messages are the ones delivered twice")
	require.False(t, slices.IsSorted(got), "delays reorder messages")

	// Shorter delays for the calls, which wait for theirs.
	net.SetFaults(NetworkFaults{Drop: drop, MaxDelay: 100 * time.Microsecond, Rand: rand.New(rand.NewPCG(5, 6))})
	const calls = 1000
	failed := 0
	for i := range calls {
		answer, err := tr.Call(context.Background(), 2, numbered(i))
		if err != nil {
			failed++
			continue
		}
		require.Equal(t, numbered(i), answer)
	}
	c = net.snapshotCounts()
	require.Equal(t, calls, c.calls)
	require.Equal(t, failed, c.callsLost+c.answersLost)
	require.True(t, within(failed, calls, drop), "%d of %d calls failed", failed, calls)
	require.Positive(t, c.callsLost)
	require.Positive(t, c.answersLost)
	r.mu.Lock()
	require.Equal(t, calls-c.callsLost, r.served, "a call whose answer is lost was served")
	r.mu.Unlock()

	// Without faults, a sender's messages come once each, in order.
	net.SetFaults(NetworkFaults{})
	before := len(r.received())
	for i := range 100 {
		tr.Send(context.Background(), 2, numbered(sends+i))
	}
	waitFor(t, 5*time.Second, "the messages sent without faults", func() bool { return len(r.received()) >= before+100 })
	tail := r.received()[before:]
	for i, n := range tail {
		require.Equal(t, uint32(sends+i), n)
	}
}

func TestMemoryNetworkCloseLeavesNoGoroutine(t *testing.T) {
	baseline := runtime.NumGoroutine()
	net := NewMemoryNetwork()
	rs := []*netRecorder{{}, {}, {}}
	for i, r := range rs {
		net.attach(replica.NodeID(i+1), r)
	}
	// Long delays: most deliveries are still waiting when the network
	// closes, and must be dropped, not waited for.
	net.SetFaults(NetworkFaults{Duplicate: 0.5, MaxDelay: time.Minute, Rand: rand.New(rand.NewPCG(3, 4))})
	for i := range 300 {
		net.Transport(replica.NodeID(i%3+1)).Send(context.Background(), replica.NodeID((i+1)%3+1), numbered(i))
	}
	start := time.Now()
	net.Close()
	require.Less(t, time.Since(start), 5*time.Second, "Close waits for no delayed message")
	delivered := 0
	for _, r := range rs {
		delivered += len(r.received())
	}
	// Nothing arrives after Close, and no goroutine of the network is left.
	net.Transport(1).Send(context.Background(), 2, numbered(0))
	_, err := net.Transport(1).Call(context.Background(), 2, numbered(0))
	require.Error(t, err)
	waitFor(t, 5*time.Second, "the network's goroutines to end", func() bool { return runtime.NumGoroutine() <= baseline })
	after := 0
	for _, r := range rs {
		after += len(r.received())
	}
	require.Equal(t, delivered, after)
}
