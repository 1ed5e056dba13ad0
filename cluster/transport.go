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
// Send carries replication's messages: the other end hands them to its
// Node.Receive. Call carries a request that needs an answer (to the
// active controller, or from a coordinator to a partition's leader): the
// other end hands it to its Node.Serve and sends back what that returns.
type Transport interface {
	// Send delivers msg to node to and returns once the other end's
	// Node.Receive has taken it, or with the error that stopped it. The
	// node calls it from one goroutine per destination: while it waits,
	// newer messages replace older ones of the same partition (a fetch
	// replaces the fetch before it), and what fails is sent again after a
	// backoff. A message lost without an error is allowed too: the
	// protocol sends again what matters.
	Send(ctx context.Context, to replica.NodeID, msg []byte) error
	// Call sends req to node to and returns its answer, or an error if it
	// got none before ctx ended.
	Call(ctx context.Context, to replica.NodeID, req []byte) ([]byte, error)
}
