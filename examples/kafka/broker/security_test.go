package broker_test

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"hash"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

const (
	alice         = "alice"
	alicePassword = "alice-secret-7f3a"
)

// lockedBuffer collects a broker's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withUsers gives the broker alice, and a log the test reads.
func withUsers(logs *lockedBuffer) func(*broker.Config) {
	return func(c *broker.Config) {
		c.Users = map[string]string{alice: alicePassword}
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// listen serves another listener of the broker, with sec, and returns its
// address; Close stops it.
func (tb *testBroker) listen(sec broker.Listener) string {
	tb.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb.t, err)
	go tb.b.ServeListener(l, sec) //nolint:errcheck // ErrClosed at Close
	return l.Addr().String()
}

// saslClient is a franz-go client of addr authenticating with m.
func saslClient(t *testing.T, addr string, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.SASL(m), kgo.RetryTimeout(3 * time.Second), kgo.AllowAutoTopicCreation()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// roundTrip produces a record to topic and reads it back.
func roundTrip(t *testing.T, cl *kgo.Client, topic, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr())
	cl.AddConsumeTopics(topic)
	fs := cl.PollRecords(ctx, 1)
	require.NoError(t, fs.Err0())
	require.Equal(t, value, string(fs.Records()[0].Value))
}

// Clients authenticate with SASL/SCRAM (RFC 5802, KIP-84) and SASL/PLAIN
// against the credentials the broker keeps, and are served; a wrong
// password or an unknown user is SASL_AUTHENTICATION_FAILED, counted, and
// logged without the password.
func TestSASLClientsAuthenticate(t *testing.T) {
	var logs lockedBuffer
	tb := startBroker(t, t.TempDir(), withUsers(&logs))
	addr := tb.listen(broker.Listener{SASL: []string{broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512, broker.MechanismPlain}})

	for name, m := range map[string]sasl.Mechanism{
		"SCRAM-SHA-256": scram.Auth{User: alice, Pass: alicePassword}.AsSha256Mechanism(),
		"SCRAM-SHA-512": scram.Auth{User: alice, Pass: alicePassword}.AsSha512Mechanism(),
		"PLAIN":         plain.Auth{User: alice, Pass: alicePassword}.AsMechanism(),
	} {
		t.Run(name, func(t *testing.T) {
			roundTrip(t, saslClient(t, addr, m), "sasl-"+name, "by "+name)
		})
	}

	for name, m := range map[string]sasl.Mechanism{
		"wrong password, SCRAM":  scram.Auth{User: alice, Pass: "guess-one"}.AsSha256Mechanism(),
		"unknown user, SCRAM":    scram.Auth{User: "mallory", Pass: "guess-two"}.AsSha512Mechanism(),
		"wrong password, PLAIN":  plain.Auth{User: alice, Pass: "guess-three"}.AsMechanism(),
		"someone else's authzid": plain.Auth{Zid: "root", User: alice, Pass: alicePassword}.AsMechanism(),
	} {
		t.Run(name, func(t *testing.T) {
			before := tb.b.FailedAuthentications()
			cl := saslClient(t, addr, m)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.ErrorIs(t, cl.Ping(ctx), kerr.SaslAuthenticationFailed)
			require.Greater(t, tb.b.FailedAuthentications(), before)
		})
	}
	require.Contains(t, logs.String(), "authentication failed")
	for _, secret := range []string{alicePassword, "guess-one", "guess-two", "guess-three"} {
		require.NotContains(t, logs.String(), secret, "a password in the broker's log")
	}

	t.Run("a plaintext listener needs none", func(t *testing.T) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(tb.addr), kgo.AllowAutoTopicCreation())
		require.NoError(t, err)
		defer cl.Close()
		roundTrip(t, cl, "plain-listener", "anonymous")
	})
}

// A credential set through Kafka's admin API (AlterUserScramCredentials,
// whose client sends the salted password) lets its user in, survives a
// restart, and is kept without its password; the API's refusals are
// Kafka's (ScramControlManager).
func TestScramCredentialsThroughTheAdminAPI(t *testing.T) {
	var logs lockedBuffer
	dir := t.TempDir()
	tb := startBroker(t, dir, withUsers(&logs))
	sec := broker.Listener{SASL: []string{broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512}}
	addr := tb.listen(sec)
	admin := saslClient(t, addr, scram.Auth{User: alice, Pass: alicePassword}.AsSha512Mechanism())
	ctx := context.Background()

	salt := []byte("bob's salt, 16+ bytes")
	upsert := func(name string, mechanism int8, iterations int32, password string) kmsg.AlterUserSCRAMCredentialsRequestUpsertion {
		h := map[int8]func() hash.Hash{1: sha256.New, 2: sha512.New}[mechanism]
		if h == nil {
			h = sha256.New
		}
		salted, err := pbkdf2.Key(h, password, salt, int(max(iterations, 1)), h().Size())
		require.NoError(t, err)
		return kmsg.AlterUserSCRAMCredentialsRequestUpsertion{Name: name, Mechanism: mechanism, Iterations: iterations, Salt: salt, SaltedPassword: salted}
	}
	alter := func(deletions []kmsg.AlterUserSCRAMCredentialsRequestDeletion, upsertions ...kmsg.AlterUserSCRAMCredentialsRequestUpsertion) map[string]int16 {
		req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		req.Deletions, req.Upsertions = deletions, upsertions
		resp, err := req.RequestWith(ctx, admin)
		require.NoError(t, err)
		codes := map[string]int16{}
		for _, r := range resp.Results {
			codes[r.User] = r.ErrorCode
		}
		return codes
	}

	require.Equal(t, map[string]int16{"bob": 0}, alter(nil, upsert("bob", 1, 8192, "bob-secret")))
	roundTrip(t, saslClient(t, addr, scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism()), "bobs", "hello from bob")

	require.Equal(t, map[string]int16{
		"":      kerr.UnacceptableCredential.Code,
		"few":   kerr.UnacceptableCredential.Code,
		"many":  kerr.UnacceptableCredential.Code,
		"odd":   kerr.UnsupportedSaslMechanism.Code,
		"twice": kerr.DuplicateResource.Code,
		"bob":   kerr.DuplicateResource.Code,
		"ghost": kerr.ResourceNotFound.Code,
	}, alter([]kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "ghost", Mechanism: 1}, {Name: "bob", Mechanism: 1}},
		upsert("", 1, 4096, "x"), upsert("few", 1, 4095, "x"), upsert("many", 2, 16385, "x"), upsert("odd", 3, 4096, "x"),
		upsert("twice", 1, 4096, "x"), upsert("twice", 2, 4096, "x"), upsert("bob", 2, 4096, "x")))

	describe := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	desc, err := describe.RequestWith(ctx, admin)
	require.NoError(t, err)
	var users []string
	for _, r := range desc.Results {
		users = append(users, r.User)
		require.Zero(t, r.ErrorCode)
		if r.User == "bob" {
			require.Equal(t, []kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{{Mechanism: 1, Iterations: 8192}}, r.CredentialInfos)
		}
	}
	require.Equal(t, []string{alice, "bob"}, users, "only those with credentials")
	describe.Users = []kmsg.DescribeUserSCRAMCredentialsRequestUser{{Name: "bob"}, {Name: "nobody"}, {Name: alice}, {Name: alice}}
	desc, err = describe.RequestWith(ctx, admin)
	require.NoError(t, err)
	got := map[string]int16{}
	for _, r := range desc.Results {
		got[r.User] = r.ErrorCode
	}
	require.Equal(t, map[string]int16{"bob": 0, "nobody": kerr.ResourceNotFound.Code, alice: kerr.DuplicateResource.Code}, got)

	file := filepath.Join(dir, "security", "scram.json")
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NotContains(t, string(data), "bob-secret")
	require.NotContains(t, string(data), alicePassword)

	tb.stop()
	tb = startBroker(t, dir, withUsers(&logs))
	addr = tb.listen(sec)
	roundTrip(t, saslClient(t, addr, scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism()), "bobs-again", "still bob")

	admin = saslClient(t, addr, scram.Auth{User: alice, Pass: alicePassword}.AsSha256Mechanism())
	require.Equal(t, map[string]int16{"bob": 0}, alter([]kmsg.AlterUserSCRAMCredentialsRequestDeletion{{Name: "bob", Mechanism: 1}}))
	cl := saslClient(t, addr, scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism())
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.ErrorIs(t, cl.Ping(pctx), kerr.SaslAuthenticationFailed, "a deleted credential lets no one in")
}

// TLS listeners serve franz-go over TLS, with and without client
// certificates; a client that speaks the wrong protocol to a port is
// refused at once and the broker serves the others.
func TestTLSListeners(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	var logs lockedBuffer
	tb := startBroker(t, t.TempDir(), withUsers(&logs))
	tlsAddr := tb.listen(broker.Listener{TLS: certs.Server(false)})
	mtlsAddr := tb.listen(broker.Listener{TLS: certs.Server(true)})
	saslSSL := tb.listen(broker.Listener{TLS: certs.Server(false), SASL: []string{broker.MechanismPlain}})

	client := func(addr string, tc *tls.Config, opts ...kgo.Opt) *kgo.Client {
		opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(2 * time.Second), kgo.AllowAutoTopicCreation()}, opts...)
		if tc != nil {
			opts = append(opts, kgo.DialTLSConfig(tc))
		}
		cl, err := kgo.NewClient(opts...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	roundTrip(t, client(tlsAddr, certs.Client(false)), "over-tls", "encrypted")
	roundTrip(t, client(mtlsAddr, certs.Client(true)), "over-mtls", "encrypted, known client")
	roundTrip(t, client(saslSSL, certs.Client(false), kgo.SASL(plain.Auth{User: alice, Pass: alicePassword}.AsMechanism())), "over-sasl-ssl", "alice, encrypted")

	ping := func(cl *kgo.Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	require.Error(t, ping(client(mtlsAddr, certs.Client(false))), "no client certificate")
	require.Error(t, ping(client(tlsAddr, nil)), "plaintext to a TLS port")
	require.Error(t, ping(client(tb.addr, certs.Client(false))), "TLS to the plaintext port")
	require.Contains(t, logs.String(), "TLS handshake failed")

	c := dial(t, tlsAddr)
	_, err := c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 18, 3, 1))
	require.NoError(t, err)
	c.closedByBroker()
	dial(t, tb.addr).servesApiVersions()
	roundTrip(t, client(tlsAddr, certs.Client(false)), "over-tls-after", "still served")
}

// A SASL session given a lifetime (connections.max.reauth.ms, KIP-368)
// is renewed by a client that re-authenticates, as franz-go does; a
// connection that does not is closed at its next request.
func TestSASLSessionsReauthenticate(t *testing.T) {
	var logs lockedBuffer
	tb := startBroker(t, t.TempDir(), withUsers(&logs), func(c *broker.Config) { c.MaxReauth = time.Second })
	addr := tb.listen(broker.Listener{SASL: []string{broker.MechanismSCRAMSHA256, broker.MechanismPlain}})
	cl := saslClient(t, addr, scram.Auth{User: alice, Pass: alicePassword}.AsSha256Mechanism())
	roundTrip(t, cl, "reauth", "first")
	time.Sleep(2500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "reauth", Value: []byte("after the lifetime")}).FirstErr())
	require.Contains(t, logs.String(), "authenticated")

	c := dial(t, addr)
	c.saslPlainLogin(alice, alicePassword, 1)
	time.Sleep(1100 * time.Millisecond)
	_, err := c.Write(frame(kmsg.NewPtrMetadataRequest(), 3, 12, 9))
	require.NoError(t, err)
	c.closedByBroker()
}

// handshake sends SaslHandshake v1 and returns its answer.
func (c *rawConn) handshake(mechanism string) *kmsg.SASLHandshakeResponse {
	c.t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Mechanism = mechanism
	_, err := c.Write(frame(req, 17, 1, 41))
	require.NoError(c.t, err)
	_, body := c.response(false)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(1)
	require.NoError(c.t, resp.ReadFrom(body))
	return resp
}

// authenticate sends SaslAuthenticate of version with auth and returns
// its answer.
func (c *rawConn) authenticate(version int16, auth []byte) *kmsg.SASLAuthenticateResponse {
	c.t.Helper()
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SASLAuthBytes = auth
	_, err := c.Write(frame(req, 36, version, 42))
	require.NoError(c.t, err)
	_, body := c.response(version >= 2)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(version)
	require.NoError(c.t, resp.ReadFrom(body))
	return resp
}

// saslPlainLogin authenticates with SASL/PLAIN.
func (c *rawConn) saslPlainLogin(user, password string, version int16) {
	c.t.Helper()
	require.Zero(c.t, c.handshake(broker.MechanismPlain).ErrorCode)
	resp := c.authenticate(version, []byte("\x00"+user+"\x00"+password))
	require.Zero(c.t, resp.ErrorCode, "%v", resp.ErrorMessage)
}

// What no client sends at the door of a SASL listener is refused, the
// connection closed, and the broker goes on serving the others (Kafka's
// SaslServerAuthenticator).
func TestSASLBadInputAtTheDoor(t *testing.T) {
	var logs lockedBuffer
	tb := startBroker(t, t.TempDir(), withUsers(&logs))
	addr := tb.listen(broker.Listener{SASL: []string{broker.MechanismSCRAMSHA256, broker.MechanismPlain}})

	t.Run("a request before authenticating closes the connection", func(t *testing.T) {
		c := dial(t, addr)
		c.servesApiVersions()
		_, err := c.Write(frame(kmsg.NewPtrMetadataRequest(), 3, 12, 1))
		require.NoError(t, err)
		c.closedByBroker()
	})
	t.Run("SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE", func(t *testing.T) {
		c := dial(t, addr)
		require.Equal(t, kerr.IllegalSaslState.Code, c.authenticate(2, []byte("n,,n=alice,r=abc")).ErrorCode)
		c.closedByBroker()
	})
	t.Run("a mechanism not enabled: UNSUPPORTED_SASL_MECHANISM, and those that are", func(t *testing.T) {
		c := dial(t, addr)
		resp := c.handshake("GSSAPI")
		require.Equal(t, kerr.UnsupportedSaslMechanism.Code, resp.ErrorCode)
		require.Equal(t, []string{broker.MechanismSCRAMSHA256, broker.MechanismPlain}, resp.SupportedMechanisms)
		c.closedByBroker()
	})
	t.Run("a second handshake during one: ILLEGAL_SASL_STATE", func(t *testing.T) {
		c := dial(t, addr)
		require.Zero(t, c.handshake(broker.MechanismSCRAMSHA256).ErrorCode)
		require.Equal(t, kerr.IllegalSaslState.Code, c.handshake(broker.MechanismPlain).ErrorCode)
		c.closedByBroker()
	})
	for name, auth := range map[string][]byte{
		"garbage SCRAM":               []byte("\xff\xfe not scram"),
		"SCRAM cut short":             []byte("n,,n=ali"),
		"empty":                       nil,
		"PLAIN of two parts":          []byte("alice\x00" + alicePassword),
		"PLAIN without a password":    []byte("\x00alice\x00"),
		"PLAIN of someone unknown":    []byte("\x00mallory\x00x"),
		"PLAIN with NULs in password": []byte("\x00alice\x00a\x00b"),
	} {
		t.Run(name+": SASL_AUTHENTICATION_FAILED", func(t *testing.T) {
			mechanism := broker.MechanismSCRAMSHA256
			if bytes.HasPrefix([]byte(name), []byte("PLAIN")) {
				mechanism = broker.MechanismPlain
			}
			c := dial(t, addr)
			require.Zero(t, c.handshake(mechanism).ErrorCode)
			start := time.Now()
			resp := c.authenticate(1, auth)
			require.Equal(t, kerr.SaslAuthenticationFailed.Code, resp.ErrorCode)
			require.GreaterOrEqual(t, time.Since(start), broker.DefaultFailedAuthenticationDelay, "failures are slowed")
			c.closedByBroker()
		})
	}
	t.Run("a request too large before authenticating closes the connection", func(t *testing.T) {
		c := dial(t, addr)
		require.Zero(t, c.handshake(broker.MechanismPlain).ErrorCode)
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SASLAuthBytes = make([]byte, broker.DefaultMaxSASLReceiveBytes)
		if _, err := c.Write(frame(req, 36, 1, 3)); err == nil {
			c.closedByBroker()
		} // else the broker closed it before the request was all written
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "MaxSASLReceiveBytes") }, 5*time.Second, 10*time.Millisecond)
	})
	t.Run("repeated failures: each refused, the broker serving others", func(t *testing.T) {
		before := tb.b.FailedAuthentications()
		for range 5 {
			c := dial(t, addr)
			require.Zero(t, c.handshake(broker.MechanismPlain).ErrorCode)
			require.Equal(t, kerr.SaslAuthenticationFailed.Code, c.authenticate(1, []byte("\x00alice\x00wrong")).ErrorCode)
			c.closedByBroker()
		}
		require.Equal(t, before+5, tb.b.FailedAuthentications())
		c := dial(t, addr)
		c.saslPlainLogin(alice, alicePassword, 2)
		c.servesApiVersions()
	})
	t.Run("authenticated: SaslAuthenticate again is ILLEGAL_SASL_STATE", func(t *testing.T) {
		c := dial(t, addr)
		c.saslPlainLogin(alice, alicePassword, 0)
		require.Equal(t, kerr.IllegalSaslState.Code, c.authenticate(0, []byte("\x00alice\x00"+alicePassword)).ErrorCode)
		c.closedByBroker()
	})
	require.NotContains(t, logs.String(), alicePassword)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	require.ErrorIs(t, tb.b.ServeListener(l, broker.Listener{SASL: []string{"GSSAPI"}}), broker.ErrListener)
}

// kcat (librdkafka) produces and consumes over SASL_SSL with SCRAM, and
// over SSL with a client certificate.
func TestKcatOverSASLSSLAndMutualTLS(t *testing.T) {
	kcatPath(t)
	certs := kafkatest.NewCerts(t)
	var logs lockedBuffer
	tb := startBroker(t, t.TempDir(), withUsers(&logs))
	saslSSL := tb.listen(broker.Listener{TLS: certs.Server(false), SASL: []string{broker.MechanismSCRAMSHA512}})
	mtls := tb.listen(broker.Listener{TLS: certs.Server(true)})

	for name, c := range map[string]struct {
		addr string
		args []string
	}{
		"SASL_SSL with SCRAM-SHA-512": {saslSSL, []string{"-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username=" + alice, "-X", "sasl.password=" + alicePassword, "-X", "ssl.ca.location=" + certs.CAFile}},
		"SSL with a client certificate": {mtls, []string{"-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + certs.CAFile,
			"-X", "ssl.certificate.location=" + certs.ClientCertFile, "-X", "ssl.key.location=" + certs.ClientKeyFile}},
	} {
		t.Run(name, func(t *testing.T) {
			topic := "kcat-" + strings.ReplaceAll(strings.Fields(name)[0], "_", "-")
			createTopic(t, tb.client(), topic, 2)
			kcat(t, c.addr, keyedLines(0, 20), append(c.args, "-P", "-t", topic, "-K", ":", "-X", "enable.idempotence=true")...)
			recs := kcatConsume(t, c.addr, append(c.args, "-C", "-t", topic, "-o", "beginning", "-e")...)
			checkKcatRecords(t, recs, 0, 20)
		})
	}

	t.Run("a wrong password gets nothing", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcatPath(t), "-b", saslSSL, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username="+alice, "-X", "sasl.password=wrong", "-X", "ssl.ca.location="+certs.CAFile, "-L", "-m", "5")
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Contains(t, string(out), "SASL authentication error")
	})
}

// kafkajs, a client with its own SASL and TLS, produces and consumes in a
// group over SASL_SSL with SCRAM-SHA-256.
func TestKafkajsOverSASLSSL(t *testing.T) {
	node := kafkajsNode(t)
	certs := kafkatest.NewCerts(t)
	var logs lockedBuffer
	tb := startBroker(t, t.TempDir(), withUsers(&logs))
	addr := tb.listen(broker.Listener{TLS: certs.Server(false), SASL: []string{broker.MechanismSCRAMSHA256}})
	env := []string{"KAFKAJS_SASL=scram-sha-256:" + alice + ":" + alicePassword, "KAFKAJS_SSL_CA=" + certs.CAFile}
	const topic, group, n = "kafkajs-sasl", "kafkajs-sasl-group", 20
	zero := map[int32]int64{0: 0, 1: 0}
	sent := parseKafkajs(t, kafkajsWith(t, node, env, "produce", addr, topic, "2", "0", strconv.Itoa(n)), zero).sent
	require.Len(t, sent, n)
	run := parseKafkajs(t, kafkajsWith(t, node, env, "consume", addr, topic, group), zero)
	require.Equal(t, sent, run.read)
	require.Equal(t, endsAfter(zero, sent), run.committed)

	out := kafkajsFails(t, node, []string{"KAFKAJS_SASL=scram-sha-256:" + alice + ":wrong", "KAFKAJS_SSL_CA=" + certs.CAFile}, "produce", addr, "kafkajs-denied", "1", "0", "1")
	require.Contains(t, out, "SASL")
}

// ACLs, as Kafka's StandardAuthorizer applies them, decide what each
// principal may do: a user with no ACL gets the authorization errors and
// no data, and rights granted through CreateAcls (a prefix, an implied
// DESCRIBE, a DENY over an ALLOW) are what the user may do until
// DeleteAcls takes them back; they survive a restart.
func TestACLsDecideWhatEachPrincipalMayDo(t *testing.T) {
	var logs lockedBuffer
	dir := t.TempDir()
	certs := kafkatest.NewCerts(t)
	secure := func(c *broker.Config) {
		withUsers(&logs)(c)
		c.Users = map[string]string{"admin": "admin-pw", alice: alicePassword, "bob": "bob-pw"}
		c.Authorize, c.SuperUsers = true, []string{"User:admin"}
	}
	tb := startBroker(t, dir, secure)
	sec := broker.Listener{SASL: []string{broker.MechanismSCRAMSHA256}}
	addr := tb.listen(sec)
	as := func(user, password string, opts ...kgo.Opt) *kgo.Client {
		return saslClient(t, addr, scram.Auth{User: user, Pass: password}.AsSha256Mechanism(), opts...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := as("admin", "admin-pw")
	createTopic(t, admin, "orders", 1)
	createTopic(t, admin, "orders-secret", 1)
	produce := func(cl *kgo.Client, topic, value string) error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
	}
	require.NoError(t, produce(admin, "orders-secret", "classified"))

	alices := as(alice, alicePassword, kgo.RecordRetries(1), kgo.UnknownTopicRetries(1))
	require.ErrorIs(t, produce(alices, "orders", "denied"), kerr.TopicAuthorizationFailed, "no ACL: no write")
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, alices)
	require.NoError(t, err)
	require.Empty(t, md.Topics, "no ACL: no topic seen")
	create := kmsg.NewPtrCreateTopicsRequest()
	create.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "alices", NumPartitions: 1, ReplicationFactor: 1}}
	created, err := create.RequestWith(ctx, alices)
	require.NoError(t, err)
	require.Equal(t, kerr.TopicAuthorizationFailed.Code, created.Topics[0].ErrorCode)
	initTxn := kmsg.NewPtrInitProducerIDRequest()
	initTxn.TransactionalID = kmsg.StringPtr("alices-txn")
	initTxn.TransactionTimeoutMillis = 10000
	_, err = initTxn.RequestWith(ctx, alices)
	require.ErrorIs(t, err, kerr.TransactionalIDAuthorizationFailed, "no ACL: not even its coordinator is found")
	join := kmsg.NewPtrFindCoordinatorRequest()
	join.CoordinatorKey = "bobs"
	found, err := join.RequestWith(ctx, alices)
	require.NoError(t, err)
	require.Equal(t, kerr.GroupAuthorizationFailed.Code, found.ErrorCode)

	grant := func(cl *kgo.Client, creations ...kmsg.CreateACLsRequestCreation) []int16 {
		req := kmsg.NewPtrCreateACLsRequest()
		req.Creations = creations
		resp, err := req.RequestWith(ctx, cl)
		require.NoError(t, err)
		var codes []int16
		for _, r := range resp.Results {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}
	rule := func(typ kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType, principal string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) kmsg.CreateACLsRequestCreation {
		return kmsg.CreateACLsRequestCreation{ResourceType: typ, ResourceName: name, ResourcePatternType: pattern, Principal: principal,
			Host: "*", Operation: op, PermissionType: perm}
	}
	topic, grp, lit, pre := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	allow, deny := kmsg.ACLPermissionTypeAllow, kmsg.ACLPermissionTypeDeny
	require.Equal(t, []int16{kerr.ClusterAuthorizationFailed.Code}, grant(alices, rule(topic, "orders", lit, "User:alice", kmsg.ACLOperationAll, allow)),
		"a user grants herself nothing")
	require.Equal(t, []int16{0, 0, 0, 0, kerr.InvalidRequest.Code}, grant(admin,
		rule(topic, "orders", pre, "User:alice", kmsg.ACLOperationWrite, allow),
		rule(topic, "orders", pre, "User:bob", kmsg.ACLOperationRead, allow),
		rule(topic, "orders-secret", lit, "User:bob", kmsg.ACLOperationRead, deny),
		rule(grp, "bobs", lit, "User:bob", kmsg.ACLOperationRead, allow),
		rule(kmsg.ACLResourceTypeCluster, "not-the-cluster", lit, "User:bob", kmsg.ACLOperationAlter, allow)))

	require.NoError(t, produce(alices, "orders", "from alice"), "WRITE on the prefix")
	alices.AddConsumeTopics("orders")
	fetches := alices.PollFetches(ctx)
	require.ErrorIs(t, fetches.Err0(), kerr.TopicAuthorizationFailed, "WRITE does not imply READ")

	bobs := as("bob", "bob-pw", kgo.ConsumerGroup("bobs"), kgo.ConsumeTopics("orders", "orders-secret"), kgo.RecordRetries(1))
	var got []string
	for len(got) == 0 {
		fs := bobs.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r.Topic+":"+string(r.Value)) })
		fs.EachError(func(topic string, _ int32, err error) {
			require.Equal(t, "orders-secret", topic, "only the DENY refuses")
			require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
		})
	}
	require.Equal(t, []string{"orders:from alice"}, got)
	bobWrites := as("bob", "bob-pw", kgo.DisableIdempotentWrite(), kgo.RecordRetries(1))
	require.ErrorIs(t, produce(bobWrites, "orders", "bob may not"), kerr.TopicAuthorizationFailed, "READ does not imply WRITE")
	pid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, bobWrites)
	require.NoError(t, err)
	require.Equal(t, kerr.ClusterAuthorizationFailed.Code, pid.ErrorCode, "an idempotent producer that may write no topic (KIP-679)")

	describe := kmsg.NewPtrDescribeACLsRequest()
	describe.ResourceType, describe.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeMatch
	describe.ResourceName = kmsg.StringPtr("orders-eu")
	describe.Operation, describe.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	described, err := describe.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.Len(t, described.Resources, 1, "the prefix orders applies to orders-eu")
	require.Len(t, described.Resources[0].ACLs, 2)

	tb.stop()
	tb = startBroker(t, dir, secure)
	addr = tb.listen(sec)
	alices = as(alice, alicePassword, kgo.RecordRetries(1), kgo.UnknownTopicRetries(1))
	require.NoError(t, produce(alices, "orders", "after a restart"), "the ACLs are kept")
	admin = as("admin", "admin-pw")
	del := kmsg.NewPtrDeleteACLsRequest()
	del.Filters = []kmsg.DeleteACLsRequestFilter{{ResourceType: kmsg.ACLResourceTypeAny, ResourcePatternType: kmsg.ACLResourcePatternTypeAny,
		Principal: kmsg.StringPtr("User:alice"), Operation: kmsg.ACLOperationAny, PermissionType: kmsg.ACLPermissionTypeAny}}
	deleted, err := del.RequestWith(ctx, admin)
	require.NoError(t, err)
	require.Len(t, deleted.Results[0].MatchingACLs, 1)
	alices = as(alice, alicePassword, kgo.RecordRetries(1), kgo.UnknownTopicRetries(1))
	require.ErrorIs(t, produce(alices, "orders", "no more"), kerr.TopicAuthorizationFailed)

	t.Run("a client certificate's subject is its principal", func(t *testing.T) {
		mtls := tb.listen(broker.Listener{TLS: certs.Server(true)})
		require.Equal(t, []int16{0}, grant(admin, rule(topic, "orders", lit, "User:CN=client,O=strand", kmsg.ACLOperationWrite, allow)))
		cl, err := kgo.NewClient(kgo.SeedBrokers(mtls), kgo.DialTLSConfig(certs.Client(true)), kgo.RecordRetries(1))
		require.NoError(t, err)
		defer cl.Close()
		require.NoError(t, produce(cl, "orders", "by certificate"))
		require.ErrorIs(t, produce(cl, "orders-secret", "not this one"), kerr.TopicAuthorizationFailed)
	})
	t.Run("without an authorizer, ACL requests are SECURITY_DISABLED", func(t *testing.T) {
		open := startBroker(t, t.TempDir())
		resp, err := kmsg.NewPtrDescribeACLsRequest().RequestWith(ctx, open.client())
		require.NoError(t, err)
		require.Equal(t, kerr.SecurityDisabled.Code, resp.ErrorCode)
	})
	require.Contains(t, logs.String(), "broker: denied")
}
