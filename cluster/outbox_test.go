package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// holdTransport records what it is sent, per destination; while a
// destination is held its sends wait, as sends to a node whose loop is
// busy do, and it fails the first failures sends.
type holdTransport struct {
	mu       sync.Mutex
	held     map[replica.NodeID]chan struct{}
	got      map[replica.NodeID][]replica.Message
	sends    map[replica.NodeID]int
	failures int
}

func newHoldTransport() *holdTransport {
	return &holdTransport{held: map[replica.NodeID]chan struct{}{}, got: map[replica.NodeID][]replica.Message{}, sends: map[replica.NodeID]int{}}
}

func (h *holdTransport) hold(to replica.NodeID) {
	h.mu.Lock()
	h.held[to] = make(chan struct{})
	h.mu.Unlock()
}

func (h *holdTransport) release(to replica.NodeID) {
	h.mu.Lock()
	close(h.held[to])
	delete(h.held, to)
	h.mu.Unlock()
}

func (h *holdTransport) Send(ctx context.Context, to replica.NodeID, msg []byte) error {
	h.mu.Lock()
	h.sends[to]++
	held := h.held[to]
	fail := h.failures > 0
	h.failures--
	h.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("restarting")
	}
	m, err := replica.Decode(msg)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.got[to] = append(h.got[to], m.(*replica.Envelope).Messages...)
	h.mu.Unlock()
	return nil
}

func (h *holdTransport) Call(context.Context, replica.NodeID, []byte) ([]byte, error) {
	return nil, errors.New("no calls")
}

func (h *holdTransport) messages(to replica.NodeID) []replica.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]replica.Message(nil), h.got[to]...)
}

func (h *holdTransport) sendCount(to replica.NodeID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sends[to]
}

// outboxNode is node 1 with only what its outboxes use: its id, logger,
// transport and view of the metadata leader.
func outboxNode(t *testing.T, tr Transport) (*Node, *outboxes) {
	n := &Node{cfg: Options{ID: 1, Transport: tr}, log: testLogger(t)}
	n.ctl = newControl(1, nil, controller.Config{}, time.Second, testRand(), n.log)
	o := newOutboxes(n)
	t.Cleanup(o.close)
	return n, o
}

// A follower's fetches and a leader's produce results, sent while the
// receiving node takes nothing: queuing never waits, what waits is
// bounded by the partitions (the newest fetch of each, which is the only
// one the leader answers in time: Kafka's fetcher has one fetch in flight
// per partition), and once the node takes messages again it gets the
// newest fetch of every partition and every produce result. A queue that
// dropped what came past its end would drop the newest fetches, which the
// follower sends again only after its RequestTimeout.
func TestOutboxCoalescesInsteadOfDropping(t *testing.T) {
	tr := newHoldTransport()
	tr.hold(2)
	_, o := outboxNode(t, tr)
	const partitions, rounds = 50, 600
	start := time.Now()
	results := 0
	for round := range rounds {
		for p := range int32(partitions) {
			h := replica.Header{From: 1, To: 2, Topic: "t", Partition: p}
			o.put(&replica.Fetch{Header: h, ID: uint64(round + 1), FetchOffset: int64(round)})
		}
		results++
		o.put(&replica.ProduceResult{Header: replica.Header{From: 1, To: 2, Topic: "t"}, ID: uint64(results)})
	}
	require.Less(t, time.Since(start), time.Second, "queuing does not wait for the receiver")
	box := o.boxes[2]
	box.mu.Lock()
	waiting := len(box.order)
	box.mu.Unlock()
	// One send may have taken the first messages before it was held.
	require.LessOrEqual(t, waiting, partitions+results, "one fetch per partition waits, and each produce result")

	tr.release(2)
	waitFor(t, 10*time.Second, "the newest fetch of every partition and every produce result", func() bool {
		newest := map[int32]uint64{}
		got := map[uint64]bool{}
		for _, m := range tr.messages(2) {
			switch m := m.(type) {
			case *replica.Fetch:
				newest[m.Partition] = max(newest[m.Partition], m.ID)
			case *replica.ProduceResult:
				got[m.ID] = true
			}
		}
		for p := range int32(partitions) {
			if newest[p] != rounds {
				return false
			}
		}
		return len(got) == results
	})
	require.Less(t, len(tr.messages(2)), rounds*partitions/10, "fetches a newer one replaced were not sent")
}

// A send that fails is made again, after a backoff, until the node takes
// it: a node that restarts gets what was sent to it meanwhile.
func TestOutboxRetriesUntilDelivered(t *testing.T) {
	tr := newHoldTransport()
	tr.failures = 3
	_, o := outboxNode(t, tr)
	o.put(&replica.Fetch{Header: replica.Header{From: 1, To: 2, Topic: "t"}, ID: 7})
	waitFor(t, 5*time.Second, "the fetch delivered after three failed sends", func() bool { return len(tr.messages(2)) == 1 })
	require.Equal(t, 4, tr.sendCount(2))
}

// A message for the controller goes to the metadata log's leader of the
// moment; a send in flight to a leader that stopped answering (paused, or
// cut off) is given up as soon as another leads, and the message goes
// there.
func TestOutboxFollowsTheControllerWhenItMoves(t *testing.T) {
	tr := newHoldTransport()
	tr.hold(2)
	defer tr.release(2)
	n, o := outboxNode(t, tr)
	n.ctl.lead.Store(2)
	o.put(&replica.AlterPartition{Header: replica.Header{From: 1, To: replica.NoNode, Topic: "t"}, LeaderEpoch: 4})
	waitFor(t, 5*time.Second, "the send to the old controller", func() bool { return tr.sendCount(2) > 0 })
	moved := time.Now()
	n.ctl.lead.Store(3)
	waitFor(t, 5*time.Second, "the AlterPartition at the new controller", func() bool { return len(tr.messages(3)) == 1 })
	require.Less(t, time.Since(moved), time.Second, "the send to the old controller was given up when the lead moved")
	ap, ok := tr.messages(3)[0].(*replica.AlterPartition)
	require.True(t, ok)
	require.Equal(t, int32(4), ap.LeaderEpoch)
	require.Equal(t, replica.NodeID(3), ap.To, fmt.Sprintf("addressed to the controller's node, not %d", ap.To))
}
