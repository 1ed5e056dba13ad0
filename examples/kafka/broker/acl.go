package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file is the broker's authorizer, by the rules of Kafka's
// StandardAuthorizer: an ACL allows or denies a principal (User:alice, or
// User:* for anyone) from a host (or * for any) an operation on resources
// of a type, named literally (or * for all of them) or by a prefix. A
// request is authorized for a super user; else a DENY that matches it
// wins over any ALLOW; an ALLOW of the operation, of ALL, or of one that
// implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
// implies DESCRIBE_CONFIGS; only in ALLOWs) authorizes it; and a resource
// no ACL names at all is authorized only if
// Config.AllowEveryoneIfNoACLFound (allow.everyone.if.no.acl.found).

// clusterName is the name of the one CLUSTER resource (Kafka's
// CLUSTER_NAME).
const clusterName = "kafka-cluster"

// acl is one ACL binding.
type acl struct {
	ResourceType kmsg.ACLResourceType        `json:"resource_type"`
	Name         string                      `json:"name"`
	Pattern      kmsg.ACLResourcePatternType `json:"pattern"`
	Principal    string                      `json:"principal"`
	Host         string                      `json:"host"`
	Operation    kmsg.ACLOperation           `json:"operation"`
	Permission   kmsg.ACLPermissionType      `json:"permission"`
}

// matchesResource reports whether the ACL names the resource.
func (a acl) matchesResource(typ kmsg.ACLResourceType, name string) bool {
	if a.ResourceType != typ {
		return false
	}
	switch a.Pattern {
	case kmsg.ACLResourcePatternTypeLiteral:
		return a.Name == name || a.Name == "*"
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(name, a.Name)
	}
	return false
}

// impliesDescribe and impliesDescribeConfigs are the operations whose
// ALLOW allows DESCRIBE and DESCRIBE_CONFIGS too.
var (
	impliesDescribe = []kmsg.ACLOperation{kmsg.ACLOperationDescribe, kmsg.ACLOperationRead, kmsg.ACLOperationWrite,
		kmsg.ACLOperationDelete, kmsg.ACLOperationAlter}
	impliesDescribeConfigs = []kmsg.ACLOperation{kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs}
)

// result is what the ACL says of a principal's operation from a host on a
// resource it names: allowed, denied, or nothing (ok false).
func (a acl) result(principal, host string, op kmsg.ACLOperation) (allowed, ok bool) {
	if a.Principal != principal && a.Principal != "User:*" || a.Host != "*" && a.Host != host {
		return false, false
	}
	allow := a.Permission == kmsg.ACLPermissionTypeAllow
	if a.Operation != kmsg.ACLOperationAll {
		switch {
		case !allow || op != kmsg.ACLOperationDescribe && op != kmsg.ACLOperationDescribeConfigs:
			if a.Operation != op {
				return false, false
			}
		case op == kmsg.ACLOperationDescribe && !slices.Contains(impliesDescribe, a.Operation),
			op == kmsg.ACLOperationDescribeConfigs && !slices.Contains(impliesDescribeConfigs, a.Operation):
			return false, false
		}
	}
	return allow, true
}

// authorizer decides requests by the ACLs of its store.
type authorizer struct {
	store      aclStore
	superUsers []string
	allowIfNo  bool
}

// aclFile holds the ACLs of the broker alone in a file. Reads take the
// current list, which a change replaces once the file is durable.
type aclFile struct {
	path string

	mu   sync.Mutex
	acls []acl
}

// aclsFile is where the broker alone keeps its ACLs, in its data
// directory.
const aclsFile = "security/acls.json"

// errACLs is an ACL file that cannot be read or written.
var errACLs = errors.New("broker: ACLs")

// openACLFile reads the ACL file at path; none yet is no ACL.
func openACLFile(path string) (*aclFile, error) {
	f := &aclFile{path: path}
	if err := readJSON(path, &f.acls); err != nil {
		return nil, fmt.Errorf("%w: %w", errACLs, err)
	}
	return f, nil
}

// readJSON reads the JSON file at path into v; a file not there leaves v
// as it is.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// authorized decides whether principal, from host, may do op on the
// resource.
func (a *authorizer) authorized(principal, host string, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	if slices.Contains(a.superUsers, principal) {
		return true
	}
	acls := a.store.snapshot()
	named, allowed := false, false
	for _, b := range acls {
		if !b.matchesResource(typ, name) {
			continue
		}
		named = true
		allow, ok := b.result(principal, host, op)
		switch {
		case ok && !allow:
			return false
		case ok:
			allowed = true
		}
	}
	return allowed || !named && a.allowIfNo
}

// authorizedOnAny decides whether principal, from host, may do op on some
// resource of typ, as Kafka's authorizeByResourceType does (an idempotent
// producer may write if it may write some topic): some ALLOW of it that
// no DENY of it covers (a DENY of all of typ's resources, of the same
// literal name, or of a prefix of the ALLOW's name).
func (a *authorizer) authorizedOnAny(principal, host string, op kmsg.ACLOperation, typ kmsg.ACLResourceType) bool {
	if slices.Contains(a.superUsers, principal) {
		return true
	}
	acls := a.store.snapshot()
	covers := func(deny, allow acl) bool {
		switch {
		case deny.Pattern == kmsg.ACLResourcePatternTypeLiteral && deny.Name == "*":
			return true
		case deny.Pattern == kmsg.ACLResourcePatternTypePrefixed:
			return strings.HasPrefix(allow.Name, deny.Name)
		}
		return allow.Pattern == kmsg.ACLResourcePatternTypeLiteral && deny.Name == allow.Name
	}
	for _, allow := range acls {
		if r, ok := allow.result(principal, host, op); allow.ResourceType != typ || !ok || !r {
			continue
		}
		denied := slices.ContainsFunc(acls, func(deny acl) bool {
			r, ok := deny.result(principal, host, op)
			return deny.ResourceType == typ && ok && !r && covers(deny, allow)
		})
		if !denied {
			return true
		}
	}
	return false
}

func (f *aclFile) snapshot() []acl {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acls
}

// alter writes what change makes of a copy of the ACLs, and makes it
// current once the file holds it. Changes are one at a time.
func (f *aclFile) alter(_ context.Context, change func([]acl) []acl) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := change(slices.Clone(f.acls))
	if err := writeFileAtomically(f.path, next); err != nil {
		return fmt.Errorf("%w: %w", errACLs, err)
	}
	f.acls = next
	return nil
}
