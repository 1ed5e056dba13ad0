package broker

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/xdg-go/scram"

	"github.com/strandlog/strand/kafkaerr"
)

// This file is who a connection is: the security of its listener (Kafka's
// security protocols PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL), and
// its SASL authentication (SaslHandshake v1 then SaslAuthenticate, KIP-43
// and KIP-152), as Kafka's SaslServerAuthenticator runs it: until a
// client of a SASL listener has authenticated, only ApiVersions,
// SaslHandshake and SaslAuthenticate are served, and anything else
// closes the connection; a failed authentication is answered
// SASL_AUTHENTICATION_FAILED after a delay
// (connection.failed.authentication.delay.ms) and closes it. A session
// may be given a lifetime (connections.max.reauth.ms, KIP-368): the
// client re-authenticates before it ends, as the same principal, or its
// next request closes the connection.

// The SASL mechanisms a listener may enable (sasl.enabled.mechanisms).
// PLAIN checks a password against the user's SCRAM-SHA-256 or
// SCRAM-SHA-512 credential, so that no password is kept for it either:
// it sends the password in the clear, so use it over TLS only.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// Listener is the security of one listener: PLAINTEXT with neither field
// set, SSL with TLS, SASL_PLAINTEXT with SASL, SASL_SSL with both.
type Listener struct {
	// TLS, if set, serves TLS with this configuration. Its ClientAuth
	// asks for client certificates (ssl.client.auth); without SASL, a
	// client certificate's subject is the connection's principal
	// (User:CN=...,O=...), as Kafka's default SSL principal builder makes
	// it.
	TLS *tls.Config
	// SASL is the mechanisms a client must authenticate with before it
	// may send any request but ApiVersions: MechanismPlain,
	// MechanismSCRAMSHA256, MechanismSCRAMSHA512. Empty: no SASL. The
	// users are the broker's SCRAM credentials (Config.Users and
	// AlterUserScramCredentials).
	SASL []string
	// Advertise is the host:port this listener's clients are told to
	// connect to for this broker (its entry of Kafka's
	// advertised.listeners); default the listener's address. In a
	// cluster the other brokers are told as the cluster names them, so
	// that a cluster's clients are served best on one listener per node.
	Advertise string
	// Name is the listener's name (Kafka's listener names, as in
	// listeners=SASL_PLAINTEXT://...): in a ListenerCluster that names
	// every broker's address on it, this listener's clients are told
	// those, so that a cluster's brokers can serve plaintext and SASL
	// clients each on a listener of their own.
	Name string
}

// Defaults of Config's security settings, Kafka's.
const (
	DefaultFailedAuthenticationDelay = 100 * time.Millisecond // connection.failed.authentication.delay.ms
	// DefaultMaxSASLReceiveBytes bounds a request before its connection
	// has authenticated (sasl.server.max.receive.size).
	DefaultMaxSASLReceiveBytes = 512 << 10
)

// anonymous is the principal of a connection that has not authenticated
// (Kafka's KafkaPrincipal.ANONYMOUS).
const anonymous = "User:ANONYMOUS"

// ErrListener is a Listener the broker cannot serve.
var ErrListener = errors.New("broker: listener")

func (b *Broker) checkListener(sec Listener) error {
	for _, m := range sec.SASL {
		if m != MechanismPlain && m != MechanismSCRAMSHA256 && m != MechanismSCRAMSHA512 {
			return fmt.Errorf("%w: SASL mechanism %q: the broker serves %s, %s and %s", ErrListener, m, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
		}
	}
	if len(sec.SASL) > 0 && b.creds == nil {
		return fmt.Errorf("%w: SASL needs the broker's SCRAM credentials, which a broker of a Config.Cluster does not keep yet", ErrListener)
	}
	return nil
}

// session is what a connection has established: its listener's
// security, its principal and its SASL authentication.
type session struct {
	listener Listener
	// advertise is this broker's address on the listener, if it is not
	// the broker's own (Broker.address).
	advertise BrokerAddr
	remote    string // the client's address
	principal string
	// mechanism is the one SaslHandshake chose, until the authentication
	// it began ends; rawTokens says the handshake was version 0, whose
	// client sends its tokens as bare size-prefixed frames, not in
	// SaslAuthenticate requests.
	mechanism string
	rawTokens bool
	scram     *scramExchange // a SCRAM exchange under way
	// authenticated is set once SASL succeeded (or the listener has
	// none); authMechanism is what it succeeded with.
	authenticated bool
	authMechanism string
	// reauth is set when the client may re-authenticate
	// (SaslAuthenticate v1+); expires ends the session if set.
	reauth  bool
	expires time.Time
	// closing closes the connection once the response is sent.
	closing bool
}

// newSession is the session of a connection on its listener, once its
// TLS handshake, if any, is done.
func newSession(c net.Conn, sec Listener, advertise BrokerAddr) *session {
	s := &session{listener: sec, advertise: advertise, remote: c.RemoteAddr().String(), principal: anonymous, authenticated: len(sec.SASL) == 0}
	if tc, ok := c.(*tls.Conn); ok && len(sec.SASL) == 0 {
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
			s.principal = "User:" + certs[0].Subject.String()
		}
	}
	return s
}

// brokers are the live brokers as the session's clients reach them: this
// broker at its address on the session's listener, which a broker served
// on secure listeners only has in no other list.
func (s *session) brokers(all []BrokerAddr) []BrokerAddr {
	if s == nil || s.advertise.Host == "" {
		return all
	}
	out := slices.DeleteFunc(slices.Clone(all), func(a BrokerAddr) bool { return a.ID == s.advertise.ID })
	out = append(out, s.advertise)
	slices.SortFunc(out, func(a, b BrokerAddr) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// errUnauthenticated is a request other than SASL's on a connection that
// has not authenticated, or whose session expired.
var errUnauthenticated = errors.New("broker: request before SASL authentication")

// admit checks that a request may be served on the session: before
// authentication (and after the session expired), only ApiVersions and
// SASL's own requests are.
func (s *session) admit(key int16, now time.Time) error {
	switch key {
	case 18, 17, 36: // ApiVersions, SaslHandshake, SaslAuthenticate
		return nil
	}
	if !s.authenticated {
		return fmt.Errorf("%w: %s", errUnauthenticated, kmsg.NameForKey(key))
	}
	if !s.expires.IsZero() && !now.Before(s.expires) {
		return fmt.Errorf("%w: %s after the session of %s expired at %v (connections.max.reauth.ms)", errUnauthenticated, kmsg.NameForKey(key), s.principal, s.expires.Format(time.RFC3339Nano))
	}
	return nil
}

// maxFrame is the largest request the session takes now.
func (s *session) maxFrame(cfg Config) int32 {
	if s.authenticated {
		return cfg.MaxRequestBytes
	}
	return min(cfg.MaxRequestBytes, cfg.MaxSASLReceiveBytes)
}

// saslHandshake chooses the mechanism of an authentication (SaslHandshake
// v1): one the listener enables, else UNSUPPORTED_SASL_MECHANISM with
// those it does, and the connection closes. A re-authentication keeps the
// mechanism it authenticated with.
func (b *Broker) saslHandshake(_ context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	s := r.session
	resp.SupportedMechanisms = s.listener.SASL
	switch {
	case len(s.listener.SASL) == 0:
		resp.ErrorCode = int16(kafkaerr.ErrIllegalSASLState)
		s.closing = true
	case s.mechanism != "":
		resp.ErrorCode = int16(kafkaerr.ErrIllegalSASLState) // a handshake under way
		s.closing = true
	case !slices.Contains(s.listener.SASL, req.Mechanism):
		resp.ErrorCode = int16(kafkaerr.ErrUnsupportedSASLMechanism)
		b.authFailed(s, req.Mechanism, "", fmt.Errorf("mechanism %q is not enabled", req.Mechanism))
	case s.authenticated && !s.reauth:
		resp.ErrorCode = int16(kafkaerr.ErrIllegalSASLState)
		s.closing = true
	case s.authenticated && req.Mechanism != s.authMechanism:
		resp.ErrorCode = int16(kafkaerr.ErrUnsupportedSASLMechanism)
		b.authFailed(s, req.Mechanism, "", fmt.Errorf("re-authentication with %s, authenticated with %s", req.Mechanism, s.authMechanism))
	case req.Version == 0 && s.authenticated:
		resp.ErrorCode = int16(kafkaerr.ErrIllegalSASLState) // re-authentication needs SaslAuthenticate
		s.closing = true
	default:
		s.mechanism, s.rawTokens = req.Mechanism, req.Version == 0
	}
	return resp
}

// saslAuthenticate takes one step of the authentication SaslHandshake
// began.
func (b *Broker) saslAuthenticate(ctx context.Context, r *request) kmsg.Response {
	req := r.body.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	s := r.session
	if s.mechanism == "" {
		resp.ErrorCode = int16(kafkaerr.ErrIllegalSASLState)
		resp.ErrorMessage = message(errors.New("SaslAuthenticate before SaslHandshake"))
		s.closing = true
		return resp
	}
	mechanism := s.mechanism
	challenge, lifetime, err := b.saslToken(ctx, s, req.SASLAuthBytes, req.Version >= 1)
	if err != nil {
		resp.ErrorCode = int16(kafkaerr.ErrSASLAuthenticationFailed)
		resp.ErrorMessage = message(fmt.Errorf("authentication failed during authentication due to invalid credentials with SASL mechanism %s", mechanism))
		return resp
	}
	resp.SASLAuthBytes, resp.SessionLifetimeMillis = challenge, lifetime.Milliseconds()
	return resp
}

// saslToken takes one token of the authentication under way and returns
// the answer; once the authentication succeeds, the session has its
// principal, and a lifetime if reauth says the client can re-authenticate
// (SaslAuthenticate v1+). A failure, slowed, closes the connection.
func (b *Broker) saslToken(ctx context.Context, s *session, token []byte, reauth bool) (challenge []byte, lifetime time.Duration, err error) {
	user, challenge, done, err := b.saslStep(s, token)
	principal := "User:" + user
	if err == nil && done && s.authenticated && principal != s.principal {
		err = fmt.Errorf("re-authentication as %s, authenticated as %s", principal, s.principal)
	}
	if err != nil {
		b.authFailed(s, s.mechanism, user, err)
		b.delayFailure(ctx)
		return nil, 0, err
	}
	if !done {
		return challenge, 0, nil
	}
	s.principal, s.authenticated, s.authMechanism, s.mechanism, s.rawTokens, s.scram = principal, true, s.mechanism, "", false, nil
	s.reauth = reauth
	if b.cfg.MaxReauth > 0 && reauth {
		lifetime, s.expires = b.cfg.MaxReauth, time.Now().Add(b.cfg.MaxReauth)
	}
	b.logger.Debug("broker: authenticated", "remote", s.remote, "principal", principal, "mechanism", s.authMechanism)
	return challenge, lifetime, nil
}

// saslStep takes one client message of the session's mechanism and
// returns the answer, and whether authentication is done; user is who
// the client says it is, as soon as it is known.
func (b *Broker) saslStep(s *session, msg []byte) (user string, challenge []byte, done bool, err error) {
	if s.mechanism == MechanismPlain {
		user, err := b.checkPlain(msg)
		return user, nil, err == nil, err
	}
	if s.scram == nil {
		m, _ := scramMechanismOf(func(m scramMechanism) bool { return m.name == s.mechanism })
		s.scram = newScramExchange(m, b.creds, nil)
	}
	challenge, done, err = s.scram.step(msg)
	return s.scram.user, challenge, done, err
}

// checkPlain checks a SASL/PLAIN message (RFC 4616: authzid NUL authcid
// NUL passwd) against the user's SCRAM credential, by Kafka's
// PlainSaslServer's rules: three parts, a user and a password, and an
// authorization id, if any, that is the user.
func (b *Broker) checkPlain(msg []byte) (user string, err error) {
	parts := strings.Split(string(msg), "\x00")
	if len(parts) != 3 {
		return "", fmt.Errorf("invalid SASL/PLAIN message: %d parts, expected 3", len(parts))
	}
	authz, user, password := parts[0], parts[1], parts[2]
	switch {
	case user == "":
		return "", errors.New("username not specified")
	case password == "":
		return user, errors.New("password not specified")
	case authz != "" && authz != user:
		return user, errors.New("client requested an authorization id that is different from username")
	}
	for _, m := range scramMechanisms {
		stored, ok := b.creds.lookup(user, m.name)
		if !ok {
			continue
		}
		c, err := m.hash.NewClient(user, password, "")
		if err != nil {
			return user, err
		}
		got, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(stored.Salt), Iters: int(stored.Iterations)})
		if err != nil {
			return user, err
		}
		if !hmac.Equal(got.StoredKey, stored.StoredKey) {
			return user, errors.New("invalid password")
		}
		return user, nil
	}
	return user, fmt.Errorf("user %q has no credential", user)
}

// authFailed counts and logs a failed authentication, without the
// secret, and closes the connection once the answer is sent.
func (b *Broker) authFailed(s *session, mechanism, user string, err error) {
	b.failedAuth.Add(1)
	s.closing = true
	s.mechanism, s.rawTokens, s.scram = "", false, nil
	b.logger.Warn("broker: authentication failed", "remote", s.remote, "mechanism", mechanism, "user", user, "err", err)
}

// rawToken serves a token of a version 0 handshake's authentication, a
// bare frame answered with a bare frame; a failure closes the connection
// without one, as Kafka's does.
func (b *Broker) rawToken(c net.Conn, s *session, token []byte) error {
	challenge, _, err := b.saslToken(b.ctx, s, token, false)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(challenge)))
	c.SetWriteDeadline(time.Now().Add(b.cfg.IdleTimeout))
	_, err = c.Write(append(out, challenge...))
	return err
}

// delayFailure holds a failed authentication's answer for
// Config.FailedAuthenticationDelay, so that guessing passwords is slow.
func (b *Broker) delayFailure(ctx context.Context) {
	t := time.NewTimer(b.cfg.FailedAuthenticationDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// FailedAuthentications is how many authentications failed since Open.
func (b *Broker) FailedAuthentications() int64 { return b.failedAuth.Load() }
