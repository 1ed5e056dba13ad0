package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// SCRAM credentials and ACLs go through the active controller into the
// metadata log, as KRaft keeps them: what one node alters every node's
// metadata holds, a node restarted from its disk has them again, and
// what the controller refuses changes nothing anywhere.
func TestNodesShareCredentialsAndACLs(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := controller.ScramCredential{User: "alice", Mechanism: "SCRAM-SHA-256", Salt: []byte("salt"),
		StoredKey: []byte("stored"), ServerKey: []byte("server"), Iterations: 4096}
	readOrders := controller.ACL{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice",
		Host: "*", Operation: 3, Permission: 3}
	require.NoError(t, c.nodes[1].AlterScramCredentials(ctx, []controller.ScramCredential{alice}, nil))
	require.NoError(t, c.nodes[2].AlterACLs(ctx, []controller.ACL{readOrders}, nil))
	holds := func(n *Node) bool {
		md := n.Metadata()
		cred, ok := md.Credentials["alice"]["SCRAM-SHA-256"]
		return ok && cred.Equal(alice) && len(md.ACLs) == 1 && md.ACLs[0] == readOrders
	}
	for _, id := range c.ids {
		waitFor(t, 10*time.Second, "node's metadata with alice and her ACL", func() bool { return holds(c.nodes[id]) })
	}

	c.kill(3)
	restarted := c.start(3)
	waitFor(t, 10*time.Second, "node 3 back with what its metadata log holds", func() bool { return holds(restarted) })

	bad := alice
	bad.Mechanism = "SCRAM-MD5"
	err := c.nodes[2].AlterScramCredentials(ctx, []controller.ScramCredential{bad}, nil)
	require.ErrorIs(t, err, kafkaerr.ErrUnsupportedSASLMechanism)
	err = c.nodes[1].AlterScramCredentials(ctx, nil, []controller.ScramCredentialKey{{User: "nobody", Mechanism: "SCRAM-SHA-512"}})
	require.ErrorIs(t, err, kafkaerr.ErrResourceNotFound)
	anyOp := readOrders
	anyOp.Operation = 1 // ANY: a filter's, never an ACL's
	require.ErrorIs(t, c.nodes[3].AlterACLs(ctx, []controller.ACL{anyOp}, nil), replica.ErrInvalidRequest)
	require.True(t, holds(c.nodes[1]), "nothing refused changed anything")

	require.NoError(t, c.nodes[3].AlterScramCredentials(ctx, nil, []controller.ScramCredentialKey{{User: "alice", Mechanism: "SCRAM-SHA-256"}}))
	require.NoError(t, c.nodes[1].AlterACLs(ctx, nil, []controller.ACL{readOrders}))
	for _, id := range c.ids {
		waitFor(t, 10*time.Second, "node's metadata without them", func() bool {
			md := c.nodes[id].Metadata()
			return md.Credentials == nil && len(md.ACLs) == 0
		})
	}
}
