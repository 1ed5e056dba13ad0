package cluster

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/strandlog/strand/replica/controller"
)

// AlterScramCredentials has the active controller set the SCRAM
// credentials of set and remove those of remove, all or none, and returns
// once this node's metadata has the change (Kafka's
// AlterUserScramCredentials reaches the controller so, and every broker
// authenticates by the credentials its metadata holds). The caller checks
// Kafka's per-user rules first (iterations, a user named once); the
// controller refuses what is no credential at all.
func (n *Node) AlterScramCredentials(ctx context.Context, set []controller.ScramCredential, remove []controller.ScramCredentialKey) error {
	if len(set)+len(remove) == 0 {
		return nil
	}
	if _, err := n.callController(ctx, &alterScramRequest{Set: set, Remove: remove}); err != nil {
		return fmt.Errorf("altering SCRAM credentials: %w", err)
	}
	return n.waitMetadata(ctx, func(md *Metadata) bool {
		for _, c := range set {
			if have, ok := md.Credentials[c.User][c.Mechanism]; !ok || !have.Equal(c) {
				return false
			}
		}
		for _, k := range remove {
			if _, ok := md.Credentials[k.User][k.Mechanism]; ok {
				return false
			}
		}
		return true
	})
}

// AlterACLs has the active controller add the ACLs of add and remove
// those of remove, all or none, and returns once this node's metadata has
// the change. Adding an ACL there already, or removing one not there,
// changes nothing for it.
func (n *Node) AlterACLs(ctx context.Context, add, remove []controller.ACL) error {
	if len(add)+len(remove) == 0 {
		return nil
	}
	if _, err := n.callController(ctx, &alterACLsRequest{Add: add, Remove: remove}); err != nil {
		return fmt.Errorf("altering ACLs: %w", err)
	}
	return n.waitMetadata(ctx, func(md *Metadata) bool {
		for _, a := range add {
			if !slices.Contains(md.ACLs, a) {
				return false
			}
		}
		for _, a := range remove {
			if slices.Contains(md.ACLs, a) {
				return false
			}
		}
		return true
	})
}

// alterScramRequest sets and removes SCRAM credentials.
type alterScramRequest struct {
	Set    []controller.ScramCredential
	Remove []controller.ScramCredentialKey
}

func (*alterScramRequest) kind() requestKind { return kindAlterScram }
func (r *alterScramRequest) encode(e *encoder) {
	e.uint(uint64(len(r.Set)))
	for _, c := range r.Set {
		e.string(c.User)
		e.string(c.Mechanism)
		e.bytes(c.Salt)
		e.bytes(c.StoredKey)
		e.bytes(c.ServerKey)
		e.int(int64(c.Iterations))
	}
	e.uint(uint64(len(r.Remove)))
	for _, k := range r.Remove {
		e.string(k.User)
		e.string(k.Mechanism)
	}
}
func (r *alterScramRequest) decode(d *decoder) {
	for range d.count(6) {
		// The decoder's bytes alias the message, which its transport
		// may reuse: a credential the state keeps has its own.
		r.Set = append(r.Set, controller.ScramCredential{User: d.string(), Mechanism: d.string(),
			Salt: bytes.Clone(d.bytes()), StoredKey: bytes.Clone(d.bytes()), ServerKey: bytes.Clone(d.bytes()), Iterations: d.int32()})
	}
	for range d.count(2) {
		r.Remove = append(r.Remove, controller.ScramCredentialKey{User: d.string(), Mechanism: d.string()})
	}
}
func (r *alterScramRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	return c.AlterScramCredentials(r.Set, r.Remove)
}

// alterACLsRequest adds and removes ACLs.
type alterACLsRequest struct {
	Add, Remove []controller.ACL
}

func (*alterACLsRequest) kind() requestKind { return kindAlterACLs }
func (r *alterACLsRequest) encode(e *encoder) {
	for _, acls := range [][]controller.ACL{r.Add, r.Remove} {
		e.uint(uint64(len(acls)))
		for _, a := range acls {
			e.int(int64(a.ResourceType))
			e.string(a.ResourceName)
			e.int(int64(a.PatternType))
			e.string(a.Principal)
			e.string(a.Host)
			e.int(int64(a.Operation))
			e.int(int64(a.Permission))
		}
	}
}
func (r *alterACLsRequest) decode(d *decoder) {
	for _, acls := range []*[]controller.ACL{&r.Add, &r.Remove} {
		for range d.count(7) {
			*acls = append(*acls, controller.ACL{ResourceType: d.int8(), ResourceName: d.string(), PatternType: d.int8(),
				Principal: d.string(), Host: d.string(), Operation: d.int8(), Permission: d.int8()})
		}
	}
}
func (r *alterACLsRequest) decide(c *controller.Controller, _ *rand.Rand, _ *answer) error {
	return c.AlterACLs(r.Add, r.Remove)
}
