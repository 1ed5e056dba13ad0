package broker_test

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha512"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/vfs"
)

// secureCluster starts three brokers of one cluster in this process
// (cluster.Nodes over the in-memory network and metadata log, each a
// Broker through NodeCluster), every one given the admin's password and
// Authorize, each with a plaintext listener and a SASL/SCRAM one named
// SASL_PLAINTEXT, and returns their addresses by node.
func secureCluster(t *testing.T, logs *lockedBuffer) (plain, sasl map[replica.NodeID]string) {
	t.Helper()
	network := cluster.NewMemoryNetwork()
	t.Cleanup(network.Close)
	md := cluster.NewMemoryMetadata(1, 2, 3)
	listen := func() (map[replica.NodeID]net.Listener, map[replica.NodeID]string) {
		ls, addrs := map[replica.NodeID]net.Listener{}, map[replica.NodeID]string{}
		for id := range replica.NodeID(3) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ls[id+1], addrs[id+1] = l, l.Addr().String()
		}
		return ls, addrs
	}
	plainListeners, plain := listen()
	saslListeners, sasl := listen()
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var nodes []*cluster.Node
	for id, l := range saslListeners {
		mdl, err := md.Open(id)
		require.NoError(t, err)
		n, err := cluster.New(cluster.Options{ID: id, Dir: "/data", FS: vfs.NewMem(), Transport: network.Transport(id),
			Metadata: mdl, Logger: logger, MinInsyncReplicas: 2})
		require.NoError(t, err)
		network.Attach(id, n)
		nodes = append(nodes, n)
		nc, err := broker.NodeCluster(n, broker.NodeOptions{Kafka: plain, MinInsyncReplicas: 2,
			Listeners: map[string]map[replica.NodeID]string{"SASL_PLAINTEXT": sasl}})
		require.NoError(t, err)
		b, err := broker.Open(broker.Config{Cluster: nc, NodeID: int32(id), Logger: logger, Users: map[string]string{"admin": "admin-pw"},
			Authorize: true, SuperUsers: []string{"User:admin"}})
		require.NoError(t, err)
		go b.Serve(plainListeners[id])                                                                                                           //nolint:errcheck // ErrClosed at Close
		go b.ServeListener(l, broker.Listener{Name: "SASL_PLAINTEXT", SASL: []string{broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512}}) //nolint:errcheck // ErrClosed at Close
		t.Cleanup(func() {
			require.NoError(t, b.Close())
			require.NoError(t, n.Close())
			require.NoError(t, mdl.Close())
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range nodes {
		require.NoError(t, n.WaitRegistered(ctx))
	}
	return plain, sasl
}

// A cluster's brokers serve plaintext and SASL clients each on a listener
// of their own, as Kafka's listener names do: a client of the SASL
// listener is told every broker's SASL address, one of the plaintext
// listener every broker's plaintext address.
func TestClusterBrokersAdvertiseEachListenersAddresses(t *testing.T) {
	var logs lockedBuffer
	plain, sasl := secureCluster(t, &logs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokersTold := func(cl *kgo.Client) map[replica.NodeID]string {
		var told map[replica.NodeID]string
		require.Eventually(t, func() bool {
			md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			if err != nil {
				return false
			}
			told = map[replica.NodeID]string{}
			for _, b := range md.Brokers {
				told[replica.NodeID(b.NodeID)] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
			}
			return len(told) == 3
		}, time.Minute, 100*time.Millisecond)
		return told
	}
	require.Equal(t, sasl, brokersTold(saslClient(t, sasl[2], scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism())))
	plainClient, err := kgo.NewClient(kgo.SeedBrokers(plain[3]))
	require.NoError(t, err)
	defer plainClient.Close()
	require.Equal(t, plain, brokersTold(plainClient))
}

// The brokers of a cluster keep SCRAM credentials and ACLs in the
// controller's records, as KRaft brokers do (ScramControlManager,
// AclControlManager): a user one broker's AlterUserScramCredentials
// creates logs in on another, an ACL one broker's CreateAcls adds lets
// that user in on a third, and another's DeleteAcls takes it away from
// all of them. Every broker starting with the same Config.Users leaves
// the admin one credential per mechanism.
func TestClusterBrokersShareCredentialsAndACLs(t *testing.T) {
	var logs lockedBuffer
	_, addrs := secureCluster(t, &logs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(node replica.NodeID, user, password string) *kgo.Client {
		return saslClient(t, addrs[node], scram.Auth{User: user, Pass: password}.AsSha512Mechanism(),
			kgo.RecordRetries(3), kgo.UnknownTopicRetries(3))
	}

	// The admin's credentials come from every broker's Config.Users,
	// once the controller is there.
	admin1 := as(1, "admin", "admin-pw")
	require.Eventually(t, func() bool {
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, admin1)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "the admin logs in on broker 1")
	described := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	creds, err := described.RequestWith(ctx, as(3, "admin", "admin-pw"))
	require.NoError(t, err)
	require.Len(t, creds.Results, 1)
	require.Len(t, creds.Results[0].CredentialInfos, 2, "one credential per mechanism, however many brokers set them")

	// bob, created through broker 1, logs in on broker 2.
	alter := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	salt := []byte("bob's salt, 16+ bytes")
	salted, err := pbkdf2.Key(sha512.New, "bob-pw", salt, 4096, sha512.Size)
	require.NoError(t, err)
	alter.Upsertions = []kmsg.AlterUserSCRAMCredentialsRequestUpsertion{{Name: "bob", Mechanism: 2, Iterations: 4096,
		Salt: salt, SaltedPassword: salted}}
	altered, err := alter.RequestWith(ctx, admin1)
	require.NoError(t, err)
	require.Zero(t, altered.Results[0].ErrorCode)
	bob2 := as(2, "bob", "bob-pw")
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, bob2)
	require.NoError(t, err, "bob's credential holds on broker 2")

	// No ACL names bob's topic: broker 2 refuses him.
	create := kmsg.NewPtrCreateTopicsRequest()
	create.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "bobs", NumPartitions: 1, ReplicationFactor: 3}}
	created, err := create.RequestWith(ctx, admin1)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(created.Topics[0].ErrorCode))
	produce := func(cl *kgo.Client, value string) error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "bobs", Value: []byte(value)}).FirstErr()
	}
	require.ErrorIs(t, produce(bob2, "denied"), kerr.TopicAuthorizationFailed)

	// An ACL created through broker 3 lets him in on broker 2.
	grant := kmsg.NewPtrCreateACLsRequest()
	grant.Creations = []kmsg.CreateACLsRequestCreation{{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "bobs",
		ResourcePatternType: kmsg.ACLResourcePatternTypeLiteral, Principal: "User:bob", Host: "*",
		Operation: kmsg.ACLOperationAll, PermissionType: kmsg.ACLPermissionTypeAllow}}
	granted, err := grant.RequestWith(ctx, as(3, "admin", "admin-pw"))
	require.NoError(t, err)
	require.Zero(t, granted.Results[0].ErrorCode)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := produce(bob2, "allowed")
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the ACL of broker 3 never held on broker 2: %v", err)
	}
	list := kmsg.NewPtrDescribeACLsRequest()
	list.ResourceType, list.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	list.Operation, list.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	listed, err := list.RequestWith(ctx, admin1)
	require.NoError(t, err)
	require.Len(t, listed.Resources, 1, "broker 1 lists the ACL broker 3 created")

	// Deleted through broker 1, it holds nowhere.
	revoke := kmsg.NewPtrDeleteACLsRequest()
	revoke.Filters = []kmsg.DeleteACLsRequestFilter{{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: kmsg.StringPtr("bobs"),
		ResourcePatternType: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAny, PermissionType: kmsg.ACLPermissionTypeAny}}
	revoked, err := revoke.RequestWith(ctx, admin1)
	require.NoError(t, err)
	require.Zero(t, revoked.Results[0].ErrorCode)
	require.Len(t, revoked.Results[0].MatchingACLs, 1)
	bob3 := as(3, "bob", "bob-pw")
	require.ErrorIs(t, produce(bob3, "denied again"), kerr.TopicAuthorizationFailed, "broker 3 no longer lets bob write")

	// A wrong password fails on every broker, and is not logged.
	for node := range addrs {
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, as(node, "bob", "guess"))
		require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, "broker %d", node)
	}
	require.NotContains(t, logs.String(), "bob-pw")
	require.NotContains(t, logs.String(), "admin-pw")
}
