package controller

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
)

// SCRAM credentials and ACLs are kept as KRaft's controller keeps them in
// the metadata log (ScramControlManager, AclControlManager), so that every
// broker of a cluster authenticates and authorizes by the same ones. The
// brokers check Kafka's per-request rules and answer each user or ACL of
// a request; the controller checks that what it writes is well formed,
// before any record, and State.Apply checks each record so again.

// ScramCredential is a user's SCRAM credential for one mechanism, as Kafka's
// UserScramCredentialRecord holds it: what a server checks a client's proof with
// (RFC 5802), never the password.
type ScramCredential struct {
	User       string
	Mechanism  string // "SCRAM-SHA-256" or "SCRAM-SHA-512"
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
	Iterations int32
}

// ScramCredentialKey names one credential: a user's for one mechanism.
type ScramCredentialKey struct{ User, Mechanism string }

// ACL is one access control entry in Kafka's codes (AccessControlEntryRecord):
// ResourceType 2 topic, 3 group, 4 cluster, 5 transactional id, 6 delegation
// token, 7 user; PatternType 3 literal, 4 prefixed; Operation 2 (all) to 14
// (as Kafka's AclOperation codes); Permission 2 deny, 3 allow.
type ACL struct {
	ResourceType int8
	ResourceName string
	PatternType  int8
	Principal    string // "User:alice", or "User:*"
	Host         string // "*" for any
	Operation    int8
	Permission   int8
}

// The SCRAM mechanisms, by Kafka's names (ScramMechanism).
var scramMechanisms = []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}

// Kafka's codes an ACL takes (ResourceType, PatternType, AclOperation,
// AclPermissionType). The codes below each range, UNKNOWN (0), ANY (1)
// and a pattern's MATCH (2), are values of filters, never of an ACL.
const (
	aclTopic, aclUser         int8 = 2, 7
	aclCluster                int8 = 4
	aclLiteral, aclPrefixed   int8 = 3, 4
	aclAll, aclDescribeTokens int8 = 2, 14
	aclDeny, aclAllow         int8 = 2, 3
	// clusterResourceName is the name of the one cluster resource.
	clusterResourceName = "kafka-cluster"
)

func (c *ScramCredential) key() ScramCredentialKey {
	return ScramCredentialKey{User: c.User, Mechanism: c.Mechanism}
}

// clone returns the credential with bytes of its own.
func (c *ScramCredential) clone() ScramCredential {
	d := *c
	d.Salt, d.StoredKey, d.ServerKey = bytes.Clone(c.Salt), bytes.Clone(c.StoredKey), bytes.Clone(c.ServerKey)
	return d
}

// Equal reports whether two credentials are the same: the same user,
// mechanism, iterations, salt and keys.
func (c ScramCredential) Equal(d ScramCredential) bool {
	return c.key() == d.key() && c.Iterations == d.Iterations && bytes.Equal(c.Salt, d.Salt) &&
		bytes.Equal(c.StoredKey, d.StoredKey) && bytes.Equal(c.ServerKey, d.ServerKey)
}

// check says why c is no credential a server could check a proof with,
// if it is not, by the codes of Kafka's ScramControlManager:
// UNSUPPORTED_SASL_MECHANISM for an unknown mechanism,
// UNACCEPTABLE_CREDENTIAL for the rest (an empty user, as Kafka's; no
// iteration, an empty salt or key, a name or key too long to encode,
// which Kafka's broker never sends). Kafka's bounds on iterations (4096
// to 16384) are the broker's to check: a credential of fewer is still
// one. what names c in the error.
func (c *ScramCredential) check(what string) error {
	unacceptable := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", kafkaerr.ErrUnacceptableCredential, what, fmt.Sprintf(format, args...))
	}
	switch {
	case c.User == "":
		return unacceptable("an empty user name")
	case max(len(c.User), len(c.Salt), len(c.StoredKey), len(c.ServerKey)) > maxSecurityBytes:
		return unacceptable("a user name, salt or key of more than %d bytes", maxSecurityBytes)
	case !slices.Contains(scramMechanisms, c.Mechanism):
		return fmt.Errorf("%w: %s: user %q: unknown SCRAM mechanism %q, want %s",
			kafkaerr.ErrUnsupportedSASLMechanism, what, c.User, c.Mechanism, strings.Join(scramMechanisms, " or "))
	case c.Iterations < 1:
		return unacceptable("user %q %s: %d iterations, want at least 1", c.User, c.Mechanism, c.Iterations)
	case len(c.Salt) == 0 || len(c.StoredKey) == 0 || len(c.ServerKey) == 0:
		return unacceptable("user %q %s: a salt of %d bytes, a stored key of %d and a server key of %d: none may be empty",
			c.User, c.Mechanism, len(c.Salt), len(c.StoredKey), len(c.ServerKey))
	}
	return nil
}

// check says why a is no ACL, if it is not (INVALID_REQUEST): Kafka's
// AclControlManager.validateNewAcl (codes within their ranges, a
// non-empty resource name, a principal with a colon between its type and
// name), and, as the authorizer reads them, a non-empty principal type,
// name and host, and a cluster resource named kafka-cluster. what names a
// in the error.
func (a *ACL) check(what string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", replica.ErrInvalidRequest, what, fmt.Sprintf(format, args...))
	}
	typ, name, _ := strings.Cut(a.Principal, ":")
	switch {
	case a.ResourceType < aclTopic || a.ResourceType > aclUser:
		return fail("resource type %d out of range %d (TOPIC) to %d (USER)", a.ResourceType, aclTopic, aclUser)
	case a.PatternType != aclLiteral && a.PatternType != aclPrefixed:
		return fail("pattern type %d is neither %d (LITERAL) nor %d (PREFIXED)", a.PatternType, aclLiteral, aclPrefixed)
	case a.Operation < aclAll || a.Operation > aclDescribeTokens:
		return fail("operation %d out of range %d (ALL) to %d (DESCRIBE_TOKENS)", a.Operation, aclAll, aclDescribeTokens)
	case a.Permission != aclDeny && a.Permission != aclAllow:
		return fail("permission %d is neither %d (DENY) nor %d (ALLOW)", a.Permission, aclDeny, aclAllow)
	case max(len(a.ResourceName), len(a.Principal), len(a.Host)) > maxSecurityBytes:
		return fail("a resource name, principal or host of more than %d bytes", maxSecurityBytes)
	case a.ResourceName == "":
		return fail("an empty resource name")
	case a.ResourceType == aclCluster && a.ResourceName != clusterResourceName:
		return fail("a cluster resource named %q, not %q", a.ResourceName, clusterResourceName)
	case typ == "" || name == "":
		return fail("principal %q is not of the form Type:name", a.Principal)
	case a.Host == "":
		return fail("an empty host (* is any)")
	}
	return nil
}

// AlterScramCredentials sets the credentials of set and removes those of remove,
// all or nothing, in one batch of records (Kafka's ScramControlManager.alterCredentials
// writes one record per change). The broker checks Kafka's per-user rules before
// (ScramControlManager: iterations within 4096..16384, a known mechanism, a user
// named once per request) and answers per user; this checks that what it writes is a
// credential at all: a non-empty user, a known mechanism, Iterations >= 1, and a
// non-empty salt, stored key and server key; removing a credential that is not
// there is an error wrapping kafkaerr.ErrResourceNotFound (Kafka's
// RESOURCE_NOT_FOUND; package replica has no name for it).
//
// The errors carry Kafka's codes: an unfit credential
// kafkaerr.ErrUnacceptableCredential, an unknown mechanism
// kafkaerr.ErrUnsupportedSASLMechanism, a credential named twice (set
// twice, or set and removed) kafkaerr.ErrDuplicateResource. The records
// are the removals, then the credentials set, in the order given, as
// Kafka's writes them; a credential set to what it is gets none, and a
// call with nothing to write proposes nothing. The records hold their own
// copies of the bytes.
func (c *Controller) AlterScramCredentials(set []ScramCredential, remove []ScramCredentialKey) error {
	named := map[ScramCredentialKey]string{}
	name := func(k ScramCredentialKey, what string) error {
		if was, ok := named[k]; ok {
			return fmt.Errorf("%w: %s: user %q's %s credential, named in %s too",
				kafkaerr.ErrDuplicateResource, what, k.User, k.Mechanism, was)
		}
		named[k] = what
		return nil
	}
	var records []Record
	for i, k := range remove {
		what := fmt.Sprintf("credential %d of remove", i)
		if err := name(k, what); err != nil {
			return err
		}
		if _, ok := c.s.Credentials[k.User][k.Mechanism]; !ok {
			return fmt.Errorf("%w: %s: user %q has no %s credential", kafkaerr.ErrResourceNotFound, what, k.User, k.Mechanism)
		}
		records = append(records, &RemoveScramCredentialRecord{Stamp: c.stamp(), ScramCredentialKey: k})
	}
	for i := range set {
		cred, what := &set[i], fmt.Sprintf("credential %d of set", i)
		if err := cred.check(what); err != nil {
			return err
		}
		if err := name(cred.key(), what); err != nil {
			return err
		}
		if have, ok := c.s.Credentials[cred.User][cred.Mechanism]; ok && have.Equal(*cred) {
			continue
		}
		records = append(records, &ScramCredentialRecord{Stamp: c.stamp(), ScramCredential: cred.clone()})
	}
	return c.emitAll(records)
}

// AlterACLs adds the ACLs of add and removes those of remove, all or nothing, in
// one batch of records; adding one already there and removing one not there write
// nothing for it. Each ACL is checked: codes within Kafka's ranges above (no
// "any"/"match"/"unknown" codes: those are filter values), a non-empty principal of
// the form "Type:name", a non-empty host, a non-empty resource name, a cluster
// resource named "kafka-cluster".
//
// Every error wraps replica.ErrInvalidRequest (Kafka's InvalidRequestException)
// and names the ACL ("ACL 2 of add: operation 99 out of range ..."); so
// does an ACL both added and removed, which could not be both. An ACL
// named twice in add or in remove gets one record (Kafka's
// AclControlManager.createAcls dedupes). The records are the removals,
// then the additions, in the order given; a call with nothing to write
// proposes nothing.
func (c *Controller) AlterACLs(add, remove []ACL) error {
	for i := range add {
		if err := add[i].check(fmt.Sprintf("ACL %d of add", i)); err != nil {
			return err
		}
	}
	for i := range remove {
		if err := remove[i].check(fmt.Sprintf("ACL %d of remove", i)); err != nil {
			return err
		}
		if j := slices.Index(add, remove[i]); j >= 0 {
			return fmt.Errorf("%w: ACL %d of remove is ACL %d of add too", replica.ErrInvalidRequest, i, j)
		}
	}
	var records []Record
	for i, a := range remove {
		if slices.Contains(c.s.ACLs, a) && slices.Index(remove, a) == i {
			records = append(records, &RemoveACLRecord{Stamp: c.stamp(), ACL: a})
		}
	}
	for i, a := range add {
		if !slices.Contains(c.s.ACLs, a) && slices.Index(add, a) == i {
			records = append(records, &ACLRecord{Stamp: c.stamp(), ACL: a})
		}
	}
	return c.emitAll(records)
}

// emitAll emits records checked before any is: all of them apply, or it
// is a bug.
func (c *Controller) emitAll(records []Record) error {
	for _, r := range records {
		if err := c.emit(r); err != nil {
			return err
		}
	}
	return nil
}
