package broker

import (
	"context"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/replica/controller"
)

// The broker keeps its SCRAM credentials and ACLs in one of two places:
// the broker alone in files of its data directory (credentials,
// authorizer's aclFile), a broker of a SecureCluster in the cluster's
// controller records, as a KRaft broker does, so that every broker of
// the cluster authenticates and authorizes alike.

// SecureCluster is a Cluster that keeps SCRAM credentials and ACLs for
// all its brokers, as Kafka's controller keeps them in the metadata log
// (UserScramCredentialRecord and AccessControlEntryRecord, by
// ScramControlManager and AclControlManager): what one broker's admin
// request sets holds on every broker once its metadata has it. A broker of
// a Cluster serves SASL and authorizes by ACLs only if the Cluster is one;
// NodeCluster's is.
type SecureCluster interface {
	Cluster
	// ScramCredentials returns the credentials by user and mechanism
	// name (SCRAM-SHA-256, SCRAM-SHA-512), as this broker's metadata
	// has them. The caller does not modify them.
	ScramCredentials() map[string]map[string]controller.ScramCredential
	// AlterScramCredentials sets and removes credentials, all or none,
	// and returns once this broker's metadata has the change.
	AlterScramCredentials(ctx context.Context, set []controller.ScramCredential, remove []controller.ScramCredentialKey) error
	// ACLs returns the ACLs as this broker's metadata has them. The
	// caller does not modify them.
	ACLs() []controller.ACL
	// AlterACLs adds and removes ACLs, all or none, and returns once
	// this broker's metadata has the change.
	AlterACLs(ctx context.Context, add, remove []controller.ACL) error
}

// credentialStore is where the broker's SCRAM credentials are, by user
// and mechanism name.
type credentialStore interface {
	lookup(user, mechanism string) (scramCredential, bool)
	// snapshot returns the credentials, which the caller does not
	// modify.
	snapshot() map[string]map[string]scramCredential
	// alter applies change to a copy of the credentials and makes the
	// copy current once it is durable.
	alter(ctx context.Context, change func(users map[string]map[string]scramCredential)) error
}

// aclStore is where the broker's ACLs are.
type aclStore interface {
	// snapshot returns the ACLs, which the caller does not modify.
	snapshot() []acl
	// alter replaces the ACLs with what change makes of a copy of them,
	// once that is durable.
	alter(ctx context.Context, change func([]acl) []acl) error
}

// clusterCredentials are a SecureCluster's credentials.
type clusterCredentials struct{ c SecureCluster }

func (s clusterCredentials) lookup(user, mechanism string) (scramCredential, bool) {
	c, ok := s.c.ScramCredentials()[user][mechanism]
	return scramCredential{Salt: c.Salt, Iterations: c.Iterations, StoredKey: c.StoredKey, ServerKey: c.ServerKey}, ok
}

func (s clusterCredentials) snapshot() map[string]map[string]scramCredential {
	users := map[string]map[string]scramCredential{}
	for user, ms := range s.c.ScramCredentials() {
		users[user] = map[string]scramCredential{}
		for m, c := range ms {
			users[user][m] = scramCredential{Salt: c.Salt, Iterations: c.Iterations, StoredKey: c.StoredKey, ServerKey: c.ServerKey}
		}
	}
	return users
}

// alter sends the controller the difference change makes: a concurrent
// change on another broker is not lost, only one of the same credential
// is overwritten, as two requests to Kafka's controller would.
func (s clusterCredentials) alter(ctx context.Context, change func(users map[string]map[string]scramCredential)) error {
	before := s.snapshot()
	after := s.snapshot()
	change(after)
	var set []controller.ScramCredential
	var remove []controller.ScramCredentialKey
	for user, ms := range after {
		for m, c := range ms {
			if was, ok := before[user][m]; !ok || !was.record(user, m).Equal(c.record(user, m)) {
				set = append(set, c.record(user, m))
			}
		}
	}
	for user, ms := range before {
		for m := range ms {
			if _, ok := after[user][m]; !ok {
				remove = append(remove, controller.ScramCredentialKey{User: user, Mechanism: m})
			}
		}
	}
	return s.c.AlterScramCredentials(ctx, set, remove)
}

// record is the credential as the controller keeps it.
func (c scramCredential) record(user, mechanism string) controller.ScramCredential {
	return controller.ScramCredential{User: user, Mechanism: mechanism,
		Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: c.Iterations}
}

// clusterACLs are a SecureCluster's ACLs. The broker checks them on
// every request: the conversion of the metadata's list is kept until the
// metadata has another.
type clusterACLs struct {
	c SecureCluster

	mu     sync.Mutex
	source []controller.ACL
	acls   []acl
}

func (s *clusterACLs) snapshot() []acl {
	src := s.c.ACLs()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(src) == len(s.source) && (len(src) == 0 || &src[0] == &s.source[0]) {
		return s.acls
	}
	acls := make([]acl, len(src))
	for i, a := range src {
		acls[i] = acl{ResourceType: kmsg.ACLResourceType(a.ResourceType), Name: a.ResourceName,
			Pattern: kmsg.ACLResourcePatternType(a.PatternType), Principal: a.Principal, Host: a.Host,
			Operation: kmsg.ACLOperation(a.Operation), Permission: kmsg.ACLPermissionType(a.Permission)}
	}
	s.source, s.acls = src, acls
	return acls
}

func (s *clusterACLs) alter(ctx context.Context, change func([]acl) []acl) error {
	before := s.snapshot()
	after := change(slices.Clone(before))
	var add, remove []controller.ACL
	for _, a := range after {
		if !slices.Contains(before, a) {
			add = append(add, a.record())
		}
	}
	for _, a := range before {
		if !slices.Contains(after, a) {
			remove = append(remove, a.record())
		}
	}
	return s.c.AlterACLs(ctx, add, remove)
}

// record is the ACL as the controller keeps it.
func (a acl) record() controller.ACL {
	return controller.ACL{ResourceType: int8(a.ResourceType), ResourceName: a.Name, PatternType: int8(a.Pattern),
		Principal: a.Principal, Host: a.Host, Operation: int8(a.Operation), Permission: int8(a.Permission)}
}
