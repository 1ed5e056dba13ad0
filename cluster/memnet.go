package cluster

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/strandlog/strand/replica"
)

// MemoryNetwork connects Nodes in one process, for tests and simulators:
// each node's Transport delivers to the Node attached under the
// destination's id, from one goroutine per destination. A test cuts links
// between nodes to make network partitions, detaches a node to take it off
// the network, as a crash would, and sets faults (SetFaults) to lose,
// repeat, delay and reorder what the Transports carry.
//
// Without faults a destination gets one sender's messages in the order
// they were sent.
type MemoryNetwork struct {
	mu     sync.Mutex
	nodes  map[replica.NodeID]*memoryPeer
	cut    map[[2]replica.NodeID]bool // from, to
	faults NetworkFaults
	counts networkCounts
}

// NetworkFaults are the faults a MemoryNetwork injects, each drawn on its
// own for every message. The zero value injects none.
type NetworkFaults struct {
	// Drop is the probability that a Send is lost, and that a Call fails:
	// half of the failed calls are lost on the way (the node never sees
	// the request), half on the way back (the node served it, the caller
	// gets an error instead of the answer).
	Drop float64
	// Duplicate is the probability that a Send is delivered twice.
	Duplicate float64
	// MaxDelay bounds the delay of each delivery of a Send, and of each
	// Call before it reaches the node, drawn evenly from [0, MaxDelay]:
	// messages to a node overtake one another.
	MaxDelay time.Duration
	// Rand draws the faults; nil: a random seed. The network draws from it
	// under its own lock: the caller must not use it while the faults are
	// set. The draws follow the order the nodes send in, which their
	// goroutines decide: the same seed does not make the same faults.
	Rand *rand.Rand
}

// networkCounts counts what a MemoryNetwork carried and the faults it
// injected, for tests.
type networkCounts struct {
	sent, dropped, duplicated, delayed int
	calls, callsLost, answersLost      int
}

// receiver is what a MemoryNetwork delivers to: a Node, or a test's
// stand-in.
type receiver interface {
	Receive(ctx context.Context, msg []byte) error
	Serve(ctx context.Context, req []byte) ([]byte, error)
}

// NewMemoryNetwork returns a network with no node attached and no faults.
func NewMemoryNetwork() *MemoryNetwork {
	return &MemoryNetwork{nodes: map[replica.NodeID]*memoryPeer{}, cut: map[[2]replica.NodeID]bool{}}
}

// Attach makes n receive what is sent to id; a node attached before is
// detached first.
func (net *MemoryNetwork) Attach(id replica.NodeID, n *Node) { net.attach(id, n) }

func (net *MemoryNetwork) attach(id replica.NodeID, r receiver) {
	net.Detach(id)
	p := newMemoryPeer(r)
	net.mu.Lock()
	net.nodes[id] = p
	net.mu.Unlock()
}

// Detach takes id off the network: what is sent to it is lost, delayed
// messages included, and calls to it fail. It returns once nothing is
// delivered to the node any more.
func (net *MemoryNetwork) Detach(id replica.NodeID) {
	net.mu.Lock()
	p := net.nodes[id]
	delete(net.nodes, id)
	net.mu.Unlock()
	if p != nil {
		p.close()
	}
}

// Close detaches every node: no goroutine of the network runs after it.
func (net *MemoryNetwork) Close() {
	net.mu.Lock()
	var ids []replica.NodeID
	for id := range net.nodes {
		ids = append(ids, id)
	}
	net.mu.Unlock()
	for _, id := range ids {
		net.Detach(id)
	}
}

// SetFaults sets the faults of what is sent from now on; the zero
// NetworkFaults turns them off. Messages already delayed keep their delay.
func (net *MemoryNetwork) SetFaults(f NetworkFaults) {
	if f.Rand == nil && f != (NetworkFaults{}) {
		f.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	net.mu.Lock()
	defer net.mu.Unlock()
	net.faults = f
}

// Cut loses every message from a to b and from b to a until Heal.
func (net *MemoryNetwork) Cut(a, b replica.NodeID) {
	net.mu.Lock()
	defer net.mu.Unlock()
	net.cut[[2]replica.NodeID{a, b}], net.cut[[2]replica.NodeID{b, a}] = true, true
}

// Isolate cuts id off from every other node of ids.
func (net *MemoryNetwork) Isolate(id replica.NodeID, ids ...replica.NodeID) {
	for _, other := range ids {
		if other != id {
			net.Cut(id, other)
		}
	}
}

// Heal restores every link; the faults stay as SetFaults left them.
func (net *MemoryNetwork) Heal() {
	net.mu.Lock()
	defer net.mu.Unlock()
	clear(net.cut)
}

// Transport returns node from's Transport.
func (net *MemoryNetwork) Transport(from replica.NodeID) Transport {
	return memoryTransport{net: net, from: from}
}

// snapshotCounts returns what the network counted so far.
func (net *MemoryNetwork) snapshotCounts() networkCounts {
	net.mu.Lock()
	defer net.mu.Unlock()
	return net.counts
}

// route returns the peer a Send from from to to goes to and the delays of
// its deliveries (none if it is lost), or nil.
func (net *MemoryNetwork) route(from, to replica.NodeID) (*memoryPeer, []time.Duration) {
	net.mu.Lock()
	defer net.mu.Unlock()
	p := net.nodes[to]
	if p == nil || net.cut[[2]replica.NodeID{from, to}] {
		return nil, nil
	}
	net.counts.sent++
	f := &net.faults
	if f.Rand == nil {
		return p, []time.Duration{0}
	}
	if f.Rand.Float64() < f.Drop {
		net.counts.dropped++
		return p, nil
	}
	copies := 1
	if f.Rand.Float64() < f.Duplicate {
		net.counts.duplicated++
		copies++
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		if delays[i] = net.delayLocked(); delays[i] > 0 {
			net.counts.delayed++
		}
	}
	return p, delays
}

// routeCall returns the peer a Call from from to to goes to, its delay,
// and whether the request or the answer is lost.
func (net *MemoryNetwork) routeCall(from, to replica.NodeID) (p *memoryPeer, delay time.Duration, lostRequest, lostAnswer bool) {
	net.mu.Lock()
	defer net.mu.Unlock()
	p = net.nodes[to]
	if p == nil || net.cut[[2]replica.NodeID{from, to}] {
		return nil, 0, false, false
	}
	net.counts.calls++
	f := &net.faults
	if f.Rand == nil {
		return p, 0, false, false
	}
	if f.Rand.Float64() < f.Drop {
		if f.Rand.IntN(2) == 0 {
			lostRequest = true
			net.counts.callsLost++
		} else {
			lostAnswer = true
			net.counts.answersLost++
		}
	}
	return p, net.delayLocked(), lostRequest, lostAnswer
}

func (net *MemoryNetwork) delayLocked() time.Duration {
	if net.faults.MaxDelay <= 0 {
		return 0
	}
	return time.Duration(net.faults.Rand.Int64N(int64(net.faults.MaxDelay) + 1))
}

type memoryTransport struct {
	net  *MemoryNetwork
	from replica.NodeID
}

// Send delivers msg, or loses it without an error (a fault: the
// protocol sends again what matters); an unreachable node is an error, so
// that the sender's outbox retries.
func (t memoryTransport) Send(_ context.Context, to replica.NodeID, msg []byte) error {
	p, delays := t.net.route(t.from, to)
	if p == nil {
		return fmt.Errorf("cluster: node %d cannot reach node %d", t.from, to)
	}
	for i, d := range delays {
		if i > 0 {
			// The receiver may keep what it decodes, aliasing msg.
			msg = slices.Clone(msg)
		}
		p.push(msg, d)
	}
	return nil
}

func (t memoryTransport) Call(ctx context.Context, to replica.NodeID, req []byte) ([]byte, error) {
	p, delay, lostRequest, lostAnswer := t.net.routeCall(t.from, to)
	if p == nil {
		return nil, fmt.Errorf("cluster: node %d cannot reach node %d", t.from, to)
	}
	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: calling node %d from node %d: %w", to, t.from, ctx.Err())
		case <-timer.C:
		}
	}
	if lostRequest {
		return nil, fmt.Errorf("cluster: the request of node %d to node %d was lost", t.from, to)
	}
	answer, err := p.node.Serve(ctx, req)
	if lostAnswer && err == nil {
		return nil, fmt.Errorf("cluster: the answer of node %d to node %d was lost", to, t.from)
	}
	return answer, err
}

// memoryPeer delivers the messages sent to one node, each once its delay
// is over, from one goroutine.
type memoryPeer struct {
	node receiver
	mu   sync.Mutex
	q    deliveries
	seq  uint64 // orders deliveries due at the same time as they were pushed
	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newMemoryPeer(r receiver) *memoryPeer {
	p := &memoryPeer{node: r, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *memoryPeer) push(msg []byte, delay time.Duration) {
	p.mu.Lock()
	p.seq++
	heap.Push(&p.q, delivery{due: time.Now().Add(delay), seq: p.seq, msg: msg})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// close stops the deliveries, dropping those not made, and returns once
// the goroutine has.
func (p *memoryPeer) close() {
	close(p.stop)
	<-p.done
}

func (p *memoryPeer) run() {
	defer close(p.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		var wait <-chan time.Time
		if len(p.q) > 0 {
			if until := time.Until(p.q[0].due); until > 0 {
				timer.Reset(until)
				wait = timer.C
			} else {
				d := heap.Pop(&p.q).(delivery)
				p.mu.Unlock()
				select {
				case <-p.stop:
					return
				default:
				}
				p.node.Receive(context.Background(), d.msg)
				continue
			}
		}
		p.mu.Unlock()
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-wait:
		}
	}
}

// delivery is a message due at a time.
type delivery struct {
	due time.Time
	seq uint64
	msg []byte
}

// deliveries is a heap of deliveries, the earliest due first.
type deliveries []delivery

func (d deliveries) Len() int { return len(d) }
func (d deliveries) Less(i, j int) bool {
	if c := d[i].due.Compare(d[j].due); c != 0 {
		return c < 0
	}
	return d[i].seq < d[j].seq
}
func (d deliveries) Swap(i, j int) { d[i], d[j] = d[j], d[i] }
func (d *deliveries) Push(x any)   { *d = append(*d, x.(delivery)) }
func (d *deliveries) Pop() any {
	old := *d
	x := old[len(old)-1]
	old[len(old)-1] = delivery{} // the heap's array must not keep the message
	*d = old[:len(old)-1]
	return x
}
