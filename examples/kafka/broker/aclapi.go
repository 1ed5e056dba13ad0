package broker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
)

// allowed reports whether the request's principal may do op on a
// resource; without an authorizer, anyone may. A denial is logged, as
// Kafka's authorizer logs one to its audit log.
func (b *Broker) allowed(r *request, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) bool {
	if b.authz == nil {
		return true
	}
	principal := r.principal()
	if b.authz.authorized(principal, r.clientHost, op, typ, name) {
		return true
	}
	b.logger.Info("broker: denied", "principal", principal, "host", r.clientHost, "operation", op, "resource", typ, "name", name, "request", kmsg.NameForKey(r.key))
	return false
}

// deniedCodes are the errors of a request denied an operation on a
// resource of each type.
var deniedCodes = map[kmsg.ACLResourceType]kafkaerr.Code{
	kmsg.ACLResourceTypeTopic:           kafkaerr.ErrTopicAuthorizationFailed,
	kmsg.ACLResourceTypeGroup:           kafkaerr.ErrGroupAuthorizationFailed,
	kmsg.ACLResourceTypeCluster:         kafkaerr.ErrClusterAuthorizationFailed,
	kmsg.ACLResourceTypeTransactionalId: kafkaerr.ErrTransactionalIDAuthorizationFailed,
}

// deny is nil if the request's principal may do op on the resource, and
// otherwise the error Kafka answers: TOPIC_AUTHORIZATION_FAILED,
// GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED or
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
func (b *Broker) deny(r *request, op kmsg.ACLOperation, typ kmsg.ACLResourceType, name string) error {
	if b.allowed(r, op, typ, name) {
		return nil
	}
	return kafkaerr.New(deniedCodes[typ], fmt.Sprintf("%s may not %v %v %q", r.principal(), op, typ, name))
}

// principal is who sent the request.
func (r *request) principal() string {
	if r.session == nil {
		return anonymous
	}
	return r.session.principal
}

// errSecurityDisabled answers the ACL requests of a broker without an
// authorizer, as Kafka answers them.
var errSecurityDisabled = kafkaerr.New(kafkaerr.ErrSecurityDisabled, "no authorizer is configured on the broker (Config.Authorize)")

// aclRefusal is why the ACL requests of r are refused, if they are: no
// authorizer, or a principal without op on the cluster.
func (b *Broker) aclRefusal(r *request, op kmsg.ACLOperation) error {
	switch {
	case b.authz == nil:
		return errSecurityDisabled
	case !b.allowed(r, op, kmsg.ACLResourceTypeCluster, clusterName):
		return kafkaerr.New(kafkaerr.ErrClusterAuthorizationFailed, fmt.Sprintf("%s may not %v the cluster", r.principal(), op))
	}
	return nil
}

// checkNewACL checks a binding to create, as Kafka's AclControlManager
// and its request validation do.
func checkNewACL(a acl) error {
	invalid := func(format string, args ...any) error {
		return kafkaerr.New(kafkaerr.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	switch {
	case a.ResourceType <= kmsg.ACLResourceTypeAny || a.ResourceType > kmsg.ACLResourceTypeUser:
		return invalid("invalid resource type %v", a.ResourceType)
	case a.Pattern != kmsg.ACLResourcePatternTypeLiteral && a.Pattern != kmsg.ACLResourcePatternTypePrefixed:
		return invalid("invalid pattern type %v", a.Pattern)
	case a.Operation <= kmsg.ACLOperationAny || a.Operation > kmsg.ACLOperationDescribeTokens:
		return invalid("invalid operation %v", a.Operation)
	case a.Permission != kmsg.ACLPermissionTypeAllow && a.Permission != kmsg.ACLPermissionTypeDeny:
		return invalid("invalid permission type %v", a.Permission)
	case a.Name == "":
		return invalid("resource name should not be empty")
	case a.ResourceType == kmsg.ACLResourceTypeCluster && a.Name != clusterName:
		return invalid("the only valid name for the CLUSTER resource is %s", clusterName)
	case a.Host == "":
		return invalid("host should not be empty: * is any host")
	}
	if typ, name, ok := strings.Cut(a.Principal, ":"); !ok || typ == "" || name == "" {
		return invalid("principal %q is not TYPE:NAME, such as User:alice or User:*", a.Principal)
	}
	return nil
}

// aclFilter is a filter of DescribeAcls and DeleteAcls.
type aclFilter struct {
	typ        kmsg.ACLResourceType
	name       *string
	pattern    kmsg.ACLResourcePatternType
	principal  *string
	host       *string
	op         kmsg.ACLOperation
	permission kmsg.ACLPermissionType
}

// check refuses a filter with a field out of Kafka's range.
func (f aclFilter) check() error {
	switch {
	case f.typ == kmsg.ACLResourceTypeUnknown || f.typ > kmsg.ACLResourceTypeUser,
		f.pattern == kmsg.ACLResourcePatternTypeUnknown || f.pattern > kmsg.ACLResourcePatternTypePrefixed,
		f.op == kmsg.ACLOperationUnknown || f.op > kmsg.ACLOperationDescribeTokens,
		f.permission == kmsg.ACLPermissionTypeUnknown || f.permission > kmsg.ACLPermissionTypeAllow:
		return kafkaerr.New(kafkaerr.ErrInvalidRequest, "an ACL filter with an unknown resource type, pattern type, operation or permission type")
	}
	return nil
}

// matches reports whether the filter takes the binding (Kafka's
// AclBindingFilter): ANY and a null field take all; a pattern type of
// MATCH takes the bindings that would apply to the named resource.
func (f aclFilter) matches(a acl) bool {
	switch {
	case f.typ != kmsg.ACLResourceTypeAny && f.typ != a.ResourceType,
		f.principal != nil && *f.principal != a.Principal,
		f.host != nil && *f.host != a.Host,
		f.op != kmsg.ACLOperationAny && f.op != a.Operation,
		f.permission != kmsg.ACLPermissionTypeAny && f.permission != a.Permission:
		return false
	}
	switch f.pattern {
	case kmsg.ACLResourcePatternTypeAny:
		return f.name == nil || *f.name == a.Name
	case kmsg.ACLResourcePatternTypeMatch:
		return f.name == nil || a.matchesResource(a.ResourceType, *f.name)
	}
	return f.pattern == a.Pattern && (f.name == nil || *f.name == a.Name)
}

// createACLs adds bindings (Kafka's CreateAcls), each checked on its
// own, those that are valid in one durable write; a binding that exists
// already is no error.
func (b *Broker) createACLs(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	refused := b.aclRefusal(r, kmsg.ACLOperationAlter)
	errs := make([]error, len(req.Creations))
	var add []acl
	for i, c := range req.Creations {
		a := acl{ResourceType: c.ResourceType, Name: c.ResourceName, Pattern: c.ResourcePatternType, Principal: c.Principal,
			Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
		if errs[i] = cmp.Or(refused, checkNewACL(a)); errs[i] == nil {
			add = append(add, a)
		}
	}
	if len(add) > 0 {
		err := b.authz.store.alter(ctx, func(acls []acl) []acl {
			for _, a := range add {
				if !slices.Contains(acls, a) {
					acls = append(acls, a)
				}
			}
			return acls
		})
		for i := range errs {
			if errs[i] == nil && err != nil {
				errs[i] = storeError(err)
			}
		}
		b.logger.Log(context.Background(), logLevel(err), "broker: ACLs created", "principal", r.principal(), "count", len(add), "err", err)
	}
	for _, err := range errs {
		resp.Results = append(resp.Results, kmsg.CreateACLsResponseResult{ErrorCode: code(err), ErrorMessage: message(err)})
	}
	return resp
}

// describeACLs lists the bindings a filter takes (Kafka's DescribeAcls),
// by resource.
func (b *Broker) describeACLs(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	f := aclFilter{req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType}
	if err := cmp.Or(b.aclRefusal(r, kmsg.ACLOperationDescribe), f.check()); err != nil {
		resp.ErrorCode, resp.ErrorMessage = code(err), message(err)
		return resp
	}
	for _, a := range b.authz.store.snapshot() {
		if !f.matches(a) {
			continue
		}
		i := slices.IndexFunc(resp.Resources, func(res kmsg.DescribeACLsResponseResource) bool {
			return res.ResourceType == a.ResourceType && res.ResourceName == a.Name && res.ResourcePatternType == a.Pattern
		})
		if i < 0 {
			resp.Resources = append(resp.Resources, kmsg.DescribeACLsResponseResource{ResourceType: a.ResourceType, ResourceName: a.Name, ResourcePatternType: a.Pattern})
			i = len(resp.Resources) - 1
		}
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, kmsg.DescribeACLsResponseResourceACL{Principal: a.Principal, Host: a.Host,
			Operation: a.Operation, PermissionType: a.Permission})
	}
	return resp
}

// deleteACLs removes the bindings each filter takes (Kafka's
// DeleteAcls), in one durable write, and lists them by filter.
func (b *Broker) deleteACLs(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	refused := b.aclRefusal(r, kmsg.ACLOperationAlter)
	filters := make([]aclFilter, len(req.Filters))
	errs := make([]error, len(req.Filters))
	matched := make([][]acl, len(req.Filters))
	for i, rf := range req.Filters {
		filters[i] = aclFilter{rf.ResourceType, rf.ResourceName, rf.ResourcePatternType, rf.Principal, rf.Host, rf.Operation, rf.PermissionType}
		errs[i] = cmp.Or(refused, filters[i].check())
	}
	if refused == nil {
		err := b.authz.store.alter(ctx, func(acls []acl) []acl {
			return slices.DeleteFunc(acls, func(a acl) bool {
				deleted := false
				for i, f := range filters {
					if errs[i] == nil && f.matches(a) {
						matched[i], deleted = append(matched[i], a), true
					}
				}
				return deleted
			})
		})
		if err != nil {
			for i := range errs {
				errs[i], matched[i] = cmp.Or(errs[i], storeError(err)), nil
			}
		}
		b.logger.Log(context.Background(), logLevel(err), "broker: ACLs deleted", "principal", r.principal(), "err", err)
	}
	for i, err := range errs {
		res := kmsg.DeleteACLsResponseResult{ErrorCode: code(err), ErrorMessage: message(err)}
		for _, a := range matched[i] {
			res.MatchingACLs = append(res.MatchingACLs, kmsg.DeleteACLsResponseResultMatchingACL{ResourceType: a.ResourceType, ResourceName: a.Name,
				ResourcePatternType: a.Pattern, Principal: a.Principal, Host: a.Host, Operation: a.Operation, PermissionType: a.Permission})
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// logLevel is the level of a line about a change that failed with err, or
// did not.
func logLevel(err error) slog.Level {
	if err != nil {
		return slog.LevelError
	}
	return slog.LevelInfo
}

// storeError is what a client is answered when credentials or ACLs could
// not be written: the cluster's own error where it carries a Kafka code
// (no controller yet, a request timed out: retriable), else
// KAFKA_STORAGE_ERROR, a file of the broker alone that failed.
func storeError(err error) error {
	if kafkaerr.CodeOf(err) != kafkaerr.ErrUnknownServerError {
		return err
	}
	return kafkaerr.New(kafkaerr.ErrKafkaStorageError, err.Error())
}
