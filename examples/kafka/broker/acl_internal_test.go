package broker

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	topicType = kmsg.ACLResourceTypeTopic
	groupType = kmsg.ACLResourceTypeGroup
	literal   = kmsg.ACLResourcePatternTypeLiteral
	prefixed  = kmsg.ACLResourcePatternTypePrefixed
	allow     = kmsg.ACLPermissionTypeAllow
	deny      = kmsg.ACLPermissionTypeDeny
	read      = kmsg.ACLOperationRead
	write     = kmsg.ACLOperationWrite
	describe  = kmsg.ACLOperationDescribe
)

func newAuthorizer(t *testing.T, allowIfNo bool, acls ...acl) *authorizer {
	f, err := openACLFile(filepath.Join(t.TempDir(), "acls.json"))
	require.NoError(t, err)
	require.NoError(t, f.alter(context.Background(), func([]acl) []acl { return acls }))
	return &authorizer{store: f, superUsers: []string{"User:admin"}, allowIfNo: allowIfNo}
}

func topicACL(name string, pattern kmsg.ACLResourcePatternType, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) acl {
	return acl{ResourceType: topicType, Name: name, Pattern: pattern, Principal: principal, Host: host, Operation: op, Permission: perm}
}

// The rules of Kafka's StandardAuthorizer (StandardAuthorizerData's
// findAclRule and findResult; StandardAuthorizerTest), one case each.
func TestAuthorizerRules(t *testing.T) {
	for _, c := range []struct {
		name      string
		acls      []acl
		allowIfNo bool
		principal string
		host      string
		op        kmsg.ACLOperation
		typ       kmsg.ACLResourceType
		resource  string
		want      bool
	}{
		{name: "a super user may do anything", principal: "User:admin", op: write, typ: topicType, resource: "t", want: true},
		{name: "no ACL: denied", principal: "User:alice", op: read, typ: topicType, resource: "t"},
		{name: "no ACL, allow.everyone.if.no.acl.found: allowed", allowIfNo: true, principal: "User:alice", op: read, typ: topicType, resource: "t", want: true},
		{name: "ACLs of the resource for others only: denied, whatever allow.everyone.if.no.acl.found",
			acls: []acl{topicACL("t", literal, "User:bob", "*", read, allow)}, allowIfNo: true, principal: "User:alice", op: read, typ: topicType, resource: "t"},
		{name: "an ACL of another resource does not count as one of this one",
			acls: []acl{topicACL("u", literal, "User:bob", "*", read, allow)}, allowIfNo: true, principal: "User:alice", op: read, typ: topicType, resource: "t", want: true},
		{name: "an ALLOW of the operation",
			acls: []acl{topicACL("t", literal, "User:alice", "*", read, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "t", want: true},
		{name: "an ALLOW of another operation: denied",
			acls: []acl{topicACL("t", literal, "User:alice", "*", write, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "t"},
		{name: "DENY beats ALLOW",
			acls:      []acl{topicACL("t", literal, "User:alice", "*", read, allow), topicACL("t", prefixed, "User:*", "*", read, deny)},
			principal: "User:alice", op: read, typ: topicType, resource: "t"},
		{name: "READ implies DESCRIBE",
			acls: []acl{topicACL("t", literal, "User:alice", "*", read, allow)}, principal: "User:alice", op: describe, typ: topicType, resource: "t", want: true},
		{name: "a DENY of READ does not deny DESCRIBE",
			acls:      []acl{topicACL("t", literal, "User:alice", "*", describe, allow), topicACL("t", literal, "User:alice", "*", read, deny)},
			principal: "User:alice", op: describe, typ: topicType, resource: "t", want: true},
		{name: "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
			acls: []acl{topicACL("t", literal, "User:alice", "*", kmsg.ACLOperationAlterConfigs, allow)}, principal: "User:alice",
			op: kmsg.ACLOperationDescribeConfigs, typ: topicType, resource: "t", want: true},
		{name: "DESCRIBE implies nothing more",
			acls: []acl{topicACL("t", literal, "User:alice", "*", describe, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "t"},
		{name: "ALL allows every operation",
			acls: []acl{topicACL("t", literal, "User:alice", "*", kmsg.ACLOperationAll, allow)}, principal: "User:alice", op: kmsg.ACLOperationDelete, typ: topicType, resource: "t", want: true},
		{name: "a DENY of ALL denies every operation",
			acls:      []acl{topicACL("t", literal, "User:alice", "*", write, allow), topicACL("*", literal, "User:alice", "*", kmsg.ACLOperationAll, deny)},
			principal: "User:alice", op: write, typ: topicType, resource: "t"},
		{name: "User:* is anyone",
			acls: []acl{topicACL("t", literal, "User:*", "*", read, allow)}, principal: "User:carol", op: read, typ: topicType, resource: "t", want: true},
		{name: "an ACL of one host does not allow another",
			acls: []acl{topicACL("t", literal, "User:alice", "10.0.0.1", read, allow)}, principal: "User:alice", host: "10.0.0.2", op: read, typ: topicType, resource: "t"},
		{name: "an ACL of the host allows it",
			acls: []acl{topicACL("t", literal, "User:alice", "10.0.0.1", read, allow)}, principal: "User:alice", host: "10.0.0.1", op: read, typ: topicType, resource: "t", want: true},
		{name: "a prefix names the resources it begins",
			acls: []acl{topicACL("orders-", prefixed, "User:alice", "*", read, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "orders-eu", want: true},
		{name: "a prefix longer than the name does not name it",
			acls: []acl{topicACL("orders-", prefixed, "User:alice", "*", read, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "orders"},
		{name: "a literal name is not a prefix",
			acls: []acl{topicACL("orders", literal, "User:alice", "*", read, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "orders-eu"},
		{name: "the literal * names every resource of its type",
			acls: []acl{topicACL("*", literal, "User:alice", "*", read, allow)}, principal: "User:alice", op: read, typ: topicType, resource: "anything", want: true},
		{name: "a topic's ACL is not a group's",
			acls: []acl{topicACL("*", literal, "User:alice", "*", read, allow)}, principal: "User:alice", op: read, typ: groupType, resource: "g"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAuthorizer(t, c.allowIfNo, c.acls...)
			host := c.host
			if host == "" {
				host = "127.0.0.1"
			}
			require.Equal(t, c.want, a.authorized(c.principal, host, c.op, c.typ, c.resource))
		})
	}
}

// An idempotent producer may write if it may write some topic (Kafka's
// authorizeByResourceType): an ALLOW no DENY covers.
func TestAuthorizedOnAnyResourceOfAType(t *testing.T) {
	allowFoo := topicACL("foo", literal, "User:alice", "*", write, allow)
	for _, c := range []struct {
		name string
		acls []acl
		want bool
	}{
		{"an ALLOW of one topic", []acl{allowFoo}, true},
		{"none", nil, false},
		{"an ALLOW of another operation", []acl{topicACL("foo", literal, "User:alice", "*", read, allow)}, false},
		{"a DENY of every topic", []acl{allowFoo, topicACL("*", literal, "User:alice", "*", write, deny)}, false},
		{"a DENY of a prefix of it", []acl{allowFoo, topicACL("f", prefixed, "User:*", "*", write, deny)}, false},
		{"a DENY of the same name", []acl{allowFoo, topicACL("foo", literal, "User:alice", "*", write, deny)}, false},
		{"a DENY of another name", []acl{allowFoo, topicACL("bar", literal, "User:alice", "*", write, deny)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, newAuthorizer(t, false, c.acls...).authorizedOnAny("User:alice", "127.0.0.1", write, topicType))
		})
	}
}

// The ACLs survive a reopen of their file.
func TestACLsAreKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "security", "acls.json")
	f, err := openACLFile(path)
	require.NoError(t, err)
	want := topicACL("t", literal, "User:alice", "*", read, allow)
	require.NoError(t, f.alter(context.Background(), func(acls []acl) []acl { return append(acls, want) }))
	g, err := openACLFile(path)
	require.NoError(t, err)
	require.Equal(t, []acl{want}, g.snapshot())
	require.True(t, (&authorizer{store: g}).authorized("User:alice", "h", read, topicType, "t"))
}
