package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/strandlog/strand/replica"
)

// MemoryNetwork connects Nodes in one process, for tests: each node's
// Transport delivers to the Node attached under the destination's id, in
// order, from one goroutine per destination. A test cuts links between
// nodes to make network partitions, and detaches a node to take it off
// the network, as a crash would.
type MemoryNetwork struct {
	mu    sync.Mutex
	nodes map[replica.NodeID]*memoryPeer
	cut   map[[2]replica.NodeID]bool // from, to
}

type memoryPeer struct {
	node  *Node
	inbox *feed[[]byte]
	done  chan struct{}
}

// NewMemoryNetwork returns a network with no node attached.
func NewMemoryNetwork() *MemoryNetwork {
	return &MemoryNetwork{nodes: map[replica.NodeID]*memoryPeer{}, cut: map[[2]replica.NodeID]bool{}}
}

// Attach makes n receive what is sent to id; a node attached before is
// detached first.
func (net *MemoryNetwork) Attach(id replica.NodeID, n *Node) {
	net.Detach(id)
	p := &memoryPeer{node: n, inbox: newFeed[[]byte](), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for msg := range p.inbox.out {
			n.Receive(context.Background(), msg)
		}
	}()
	net.mu.Lock()
	net.nodes[id] = p
	net.mu.Unlock()
}

// Detach takes id off the network: what is sent to it is lost, and calls
// to it fail. It returns once nothing is delivered to the node any more.
func (net *MemoryNetwork) Detach(id replica.NodeID) {
	net.mu.Lock()
	p := net.nodes[id]
	delete(net.nodes, id)
	net.mu.Unlock()
	if p != nil {
		p.inbox.close()
		<-p.done
	}
}

// Close detaches every node.
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

// Heal restores every link.
func (net *MemoryNetwork) Heal() {
	net.mu.Lock()
	defer net.mu.Unlock()
	clear(net.cut)
}

// peer returns the node to deliver to from from, or nil.
func (net *MemoryNetwork) peer(from, to replica.NodeID) *memoryPeer {
	net.mu.Lock()
	defer net.mu.Unlock()
	if net.cut[[2]replica.NodeID{from, to}] {
		return nil
	}
	return net.nodes[to]
}

// Transport returns node from's Transport.
func (net *MemoryNetwork) Transport(from replica.NodeID) Transport {
	return memoryTransport{net: net, from: from}
}

type memoryTransport struct {
	net  *MemoryNetwork
	from replica.NodeID
}

func (t memoryTransport) Send(_ context.Context, to replica.NodeID, msg []byte) error {
	p := t.net.peer(t.from, to)
	if p == nil {
		return fmt.Errorf("cluster: node %d cannot reach node %d", t.from, to)
	}
	p.inbox.push(msg)
	return nil
}

func (t memoryTransport) Call(ctx context.Context, to replica.NodeID, req []byte) ([]byte, error) {
	p := t.net.peer(t.from, to)
	if p == nil {
		return nil, fmt.Errorf("cluster: node %d cannot reach node %d", t.from, to)
	}
	return p.node.Serve(ctx, req)
}
