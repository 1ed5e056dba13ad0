package broker

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
)

// describeUserScramCredentials lists users' mechanisms and iteration
// counts, never their keys (Kafka's DescribeUserScramCredentials): every
// user if the request names none, else those it names, a user named
// twice DUPLICATE_RESOURCE and one without credentials
// RESOURCE_NOT_FOUND.
func (b *Broker) describeUserScramCredentials(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	err := b.deny(r, kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, clusterName)
	if err == nil && b.creds == nil {
		err = errNoCredentials
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = code(err), message(err)
		return resp
	}
	users := b.creds.snapshot()
	var names []string
	named := map[string]int{}
	for _, u := range req.Users {
		names = append(names, u.Name)
		named[u.Name]++
	}
	if len(req.Users) == 0 {
		names = slices.Sorted(maps.Keys(users))
	}
	answered := map[string]bool{}
	for _, name := range names {
		if answered[name] {
			continue
		}
		answered[name] = true
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = name
		var err error
		switch {
		case named[name] > 1:
			err = kafkaerr.New(kafkaerr.ErrDuplicateResource, "cannot describe SCRAM credentials for the same user twice in a single request")
		case len(users[name]) == 0:
			err = kafkaerr.New(kafkaerr.ErrResourceNotFound, "attempt to describe a user credential that does not exist")
		}
		res.ErrorCode, res.ErrorMessage = code(err), message(err)
		for _, m := range scramMechanisms {
			if cred, ok := users[name][m.name]; ok && err == nil {
				res.CredentialInfos = append(res.CredentialInfos, kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{Mechanism: m.kind, Iterations: cred.Iterations})
			}
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// errNoCredentials answers the credential requests of a broker that
// keeps none: one of a cluster, until the cluster's metadata holds them.
var errNoCredentials = kafkaerr.New(kafkaerr.ErrUnsupportedSASLMechanism, "this broker keeps no SCRAM credentials")

// alterUserScramCredentials deletes and upserts users' credentials
// (Kafka's AlterUserScramCredentials, by ScramControlManager's rules): a
// user altered twice in one request is DUPLICATE_RESOURCE, an empty name
// or an iteration count outside 4096 to 16384 UNACCEPTABLE_CREDENTIAL,
// an unknown mechanism UNSUPPORTED_SASL_MECHANISM, the deletion of a
// credential that does not exist RESOURCE_NOT_FOUND; the others are
// applied at once, in one durable write.
func (b *Broker) alterUserScramCredentials(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	refused := map[string]error{}
	var order []string // users, as they first come
	note := func(user string) {
		if !slices.Contains(order, user) {
			order = append(order, user)
		}
	}
	deletions := map[string]scramMechanism{}
	upsertions := map[string]kmsg.AlterUserSCRAMCredentialsRequestUpsertion{}
	twice := func(user string) bool {
		_, deleted := deletions[user]
		_, upserted := upsertions[user]
		if deleted || upserted {
			delete(deletions, user)
			delete(upsertions, user)
			refused[user] = kafkaerr.New(kafkaerr.ErrDuplicateResource, "a user credential cannot be altered twice in the same request")
			return true
		}
		return false
	}
	users := map[string]map[string]scramCredential{}
	if b.creds != nil {
		users = b.creds.snapshot()
	}
	for _, d := range req.Deletions {
		note(d.Name)
	}
	for _, u := range req.Upsertions {
		note(u.Name)
	}
	if denied := b.deny(r, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, clusterName); denied != nil {
		for _, user := range order {
			refused[user] = denied
		}
	}
	for _, d := range req.Deletions {
		if refused[d.Name] != nil || twice(d.Name) {
			continue
		}
		m, err := checkScramUser(d.Name, d.Mechanism)
		if err == nil {
			if _, ok := users[d.Name][m.name]; !ok {
				err = kafkaerr.New(kafkaerr.ErrResourceNotFound, "attempt to delete a user credential that does not exist")
			}
		}
		if err != nil {
			refused[d.Name] = err
			continue
		}
		deletions[d.Name] = m
	}
	for _, u := range req.Upsertions {
		if refused[u.Name] != nil || twice(u.Name) {
			continue
		}
		_, err := checkScramUser(u.Name, u.Mechanism)
		switch {
		case err != nil:
		case u.Iterations < minScramIterations:
			err = kafkaerr.New(kafkaerr.ErrUnacceptableCredential, "too few iterations")
		case u.Iterations > maxScramIterations:
			err = kafkaerr.New(kafkaerr.ErrUnacceptableCredential, "too many iterations")
		}
		if err != nil {
			refused[u.Name] = err
			continue
		}
		upsertions[u.Name] = u
	}
	if len(deletions)+len(upsertions) > 0 {
		err := errNoCredentials
		if b.creds != nil {
			err = b.creds.alter(ctx, func(users map[string]map[string]scramCredential) {
				for user, m := range deletions {
					delete(users[user], m.name)
				}
				for user, u := range upsertions {
					m, _ := scramMechanismOf(func(m scramMechanism) bool { return m.kind == u.Mechanism })
					if users[user] == nil {
						users[user] = map[string]scramCredential{}
					}
					users[user][m.name] = newScramCredential(m, u.Salt, u.SaltedPassword, u.Iterations)
				}
			})
		}
		if err != nil && b.creds != nil {
			b.logger.Error("broker: SCRAM credentials not written", "err", err)
			err = storeError(err)
		}
		if err != nil {
			for user := range deletions {
				refused[user] = err
			}
			for user := range upsertions {
				refused[user] = err
			}
		}
	}
	for _, user := range order {
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = user
		res.ErrorCode, res.ErrorMessage = code(refused[user]), message(refused[user])
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// checkScramUser checks a credential's user name and mechanism.
func checkScramUser(name string, kind int8) (scramMechanism, error) {
	if name == "" {
		return scramMechanism{}, kafkaerr.New(kafkaerr.ErrUnacceptableCredential, "username must not be empty")
	}
	m, ok := scramMechanismOf(func(m scramMechanism) bool { return m.kind == kind })
	if !ok {
		return scramMechanism{}, kafkaerr.New(kafkaerr.ErrUnsupportedSASLMechanism, "unknown SCRAM mechanism")
	}
	return m, nil
}
