package cluster

import (
	"context"

	"github.com/strandlog/strand/replica"
)

// Transport carries a node's messages to the other nodes of the cluster
// by id; the application implements it over its own RPC. The messages are
// opaque bytes in the library's binary encodings: the application moves
// them and need not know what they hold.
//
// Send carries replication's messages, which the protocol sends again when
// they are lost: the other end hands them to its Node.Receive. Call
// carries a request that needs an answer (to the active controller, or
// from a coordinator to a partition's leader): the other end hands it to
// its Node.Serve and sends back what that returns.
type Transport interface {
	// Send queues msg for node to and returns at once; it may lose it,
	// and it must not wait for the network.
	Send(to replica.NodeID, msg []byte)
	// Call sends req to node to and returns its answer, or an error if it
	// got none before ctx ended.
	Call(ctx context.Context, to replica.NodeID, req []byte) ([]byte, error)
}
