package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xdg-go/scram"
)

// This file keeps the broker's SCRAM credentials (RFC 5802, Kafka's
// KIP-84): for each user and mechanism, a salt, an iteration count and
// the two keys derived from the salted password, StoredKey and
// ServerKey, which let the broker check a client's proof and prove
// itself back, but not log in as the user. No password is kept. Kafka's
// admin API manages them (AlterUserScramCredentials, whose client sends
// the salted password, and DescribeUserScramCredentials, which shows
// mechanisms and iteration counts only), and the broker alone keeps them
// in a file of its data directory, written whole and atomically.

// scramMechanism is one of Kafka's SCRAM mechanisms: its type in the
// admin API (Kafka's ScramMechanism), its SASL name and its hash.
type scramMechanism struct {
	kind int8
	name string
	hash scram.HashGeneratorFcn
}

var scramMechanisms = []scramMechanism{
	{kind: 1, name: "SCRAM-SHA-256", hash: func() hash.Hash { return sha256.New() }},
	{kind: 2, name: "SCRAM-SHA-512", hash: func() hash.Hash { return sha512.New() }},
}

func scramMechanismOf(match func(m scramMechanism) bool) (scramMechanism, bool) {
	i := slices.IndexFunc(scramMechanisms, match)
	if i < 0 {
		return scramMechanism{}, false
	}
	return scramMechanisms[i], true
}

// Kafka's bounds on a credential's iteration count (ScramMechanism's
// minIterations, ScramControlManager's MAX_ITERATIONS).
const (
	minScramIterations = 4096
	maxScramIterations = 16384
)

// scramCredential is what the broker keeps of a user's password for one
// mechanism.
type scramCredential struct {
	Salt       []byte `json:"salt"`
	Iterations int32  `json:"iterations"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// newScramCredential derives the keys of a salted password
// (Hi(password, salt, iterations)): ClientKey is HMAC(SaltedPassword,
// "Client Key"), StoredKey its hash, ServerKey HMAC(SaltedPassword,
// "Server Key"), as Kafka's ScramFormatter does for an upsertion.
func newScramCredential(m scramMechanism, salt, saltedPassword []byte, iterations int32) scramCredential {
	stored := m.hash()
	stored.Write(hmacOf(m, saltedPassword, []byte("Client Key")))
	return scramCredential{Salt: salt, Iterations: iterations, StoredKey: stored.Sum(nil), ServerKey: hmacOf(m, saltedPassword, []byte("Server Key"))}
}

// passwordCredential is the credential of a password, with a new random
// salt and Kafka's minimum iteration count, as `kafka-storage format
// --add-scram` makes one from a password it is given.
func passwordCredential(m scramMechanism, user, password string) (scramCredential, error) {
	salt := make([]byte, 32)
	rand.Read(salt)
	c, err := m.hash.NewClient(user, password, "")
	if err != nil {
		return scramCredential{}, fmt.Errorf("broker: the password of user %q: %w", user, err)
	}
	sc, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: minScramIterations})
	if err != nil {
		return scramCredential{}, fmt.Errorf("broker: the password of user %q: %w", user, err)
	}
	return scramCredential{Salt: salt, Iterations: minScramIterations, StoredKey: sc.StoredKey, ServerKey: sc.ServerKey}, nil
}

// credentials are the SCRAM credentials of the broker's users: user, then
// mechanism name. Reads take the current map, which a change replaces
// once its file is durable.
type credentials struct {
	path string

	mu    sync.Mutex
	users map[string]map[string]scramCredential
}

// credentialsFile is where the broker alone keeps its credentials, in its
// data directory.
const credentialsFile = "security/scram.json"

// errCredentials is a credentials file that cannot be read or written.
var errCredentials = errors.New("broker: SCRAM credentials")

// openCredentials reads the credentials file at path; none yet is no
// user.
func openCredentials(path string) (*credentials, error) {
	c := &credentials{path: path, users: map[string]map[string]scramCredential{}}
	if err := readJSON(path, &c.users); err != nil {
		return nil, fmt.Errorf("%w: %w", errCredentials, err)
	}
	return c, nil
}

// lookup returns a user's credential for a mechanism.
func (c *credentials) lookup(user, mechanism string) (scramCredential, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cred, ok := c.users[user][mechanism]
	return cred, ok
}

// snapshot returns the users and their mechanisms' credentials.
func (c *credentials) snapshot() map[string]map[string]scramCredential {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.users
}

// alter applies change to a copy of the credentials, writes the copy, and
// makes it current once it is durable. Changes are one at a time.
func (c *credentials) alter(_ context.Context, change func(users map[string]map[string]scramCredential)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string]map[string]scramCredential, len(c.users))
	for user, ms := range c.users {
		next[user] = make(map[string]scramCredential, len(ms))
		for m, cred := range ms {
			next[user][m] = cred
		}
	}
	change(next)
	for user, ms := range next {
		if len(ms) == 0 {
			delete(next, user)
		}
	}
	if err := writeFileAtomically(c.path, next); err != nil {
		return fmt.Errorf("%w: %w", errCredentials, err)
	}
	c.users = next
	return nil
}

// writeFileAtomically writes v as JSON to path (readable by its owner
// only) through a synced temporary file renamed over it, then syncs the
// directory, so that a crash leaves the old file or the new one.
func writeFileAtomically(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// openUsers opens the broker alone's credentials and sets those of
// Config.Users.
func openUsers(cfg Config) (*credentials, error) {
	creds, err := openCredentials(filepath.Join(cfg.DataDir, credentialsFile))
	if err != nil || len(cfg.Users) == 0 {
		return creds, err
	}
	set, err := passwordCredentials(cfg.Users)
	if err != nil {
		return nil, err
	}
	return creds, creds.alter(context.Background(), func(users map[string]map[string]scramCredential) { maps.Copy(users, set) })
}

// ReadUsers reads a file of NAME:PASSWORD lines, the users of
// Config.Users; blank lines and lines that begin with # are skipped.
func ReadUsers(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: users: %w", errCredentials, err)
	}
	users := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, password, ok := strings.Cut(line, ":")
		if !ok || name == "" || password == "" {
			return nil, fmt.Errorf("%w: users: %s line %d: want NAME:PASSWORD", errCredentials, path, i+1)
		}
		users[name] = password
	}
	return users, nil
}

// passwordCredentials are the credentials of Config.Users for every
// mechanism.
func passwordCredentials(passwords map[string]string) (map[string]map[string]scramCredential, error) {
	set := map[string]map[string]scramCredential{}
	for user, password := range passwords {
		if user == "" || password == "" {
			return nil, fmt.Errorf("%w: Config.Users: a user needs a name and a password", errCredentials)
		}
		set[user] = map[string]scramCredential{}
		for _, m := range scramMechanisms {
			var err error
			if set[user][m.name], err = passwordCredential(m, user, password); err != nil {
				return nil, err
			}
		}
	}
	return set, nil
}

// addMissingUsers gives the users of set that have no credential of a
// mechanism set's, in a cluster whose controller may not be there yet:
// it tries again every second until it succeeds or the broker closes.
// Credentials already there stay, so that every broker of the cluster
// starting with the same Config.Users leaves one credential, and one an
// admin changed since is not undone (Kafka sets them once, as
// kafka-storage format --add-scram does).
func (b *Broker) addMissingUsers(set map[string]map[string]scramCredential) {
	for {
		err := b.creds.alter(b.ctx, func(users map[string]map[string]scramCredential) {
			for user, ms := range set {
				for m, c := range ms {
					if _, ok := users[user][m]; !ok {
						if users[user] == nil {
							users[user] = map[string]scramCredential{}
						}
						users[user][m] = c
					}
				}
			}
		})
		if err == nil {
			return
		}
		b.logger.Warn("broker: the credentials of Config.Users not set yet", "err", err)
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// scramExchange is the server's side of one SCRAM authentication (RFC
// 5802), as Kafka's ScramSaslServer runs it: xdg-go/scram reads the
// client-first message and makes the server-first one; the client-final
// message is checked here by Kafka's rule, which takes a nonce that ends
// with the server's (librdkafka sends its own nonce before the server's
// whole one), where xdg-go/scram takes only the server's.
type scramExchange struct {
	m     scramMechanism
	conv  *scram.ServerConversation
	creds credentialStore
	user  string
	cred  scramCredential
	// gs2Header, clientFirstBare and serverFirst are the parts of the
	// exchange its AuthMessage is made of.
	gs2Header, clientFirstBare, serverFirst string
	done                                    bool
}

// newScramExchange begins an exchange; nonce makes the server's part of
// the nonce (xdg-go/scram's, 24 random bytes in base64, if nil).
func newScramExchange(m scramMechanism, creds credentialStore, nonce func() string) *scramExchange {
	e := &scramExchange{m: m, creds: creds}
	server, _ := m.hash.NewServer(func(user string) (scram.StoredCredentials, error) {
		c, ok := creds.lookup(user, m.name)
		if !ok {
			return scram.StoredCredentials{}, fmt.Errorf("user %q has no %s credential", user, m.name)
		}
		e.user, e.cred = user, c
		return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(c.Salt), Iters: int(c.Iterations)}, StoredKey: c.StoredKey, ServerKey: c.ServerKey}, nil
	})
	if nonce != nil {
		server = server.WithNonceGenerator(nonce)
	}
	e.conv = server.NewConversation()
	return e
}

// errSCRAM is a SCRAM message that breaks the exchange's rules.
var errSCRAM = errors.New("SCRAM")

// step takes the client's next message and returns the server's answer,
// and whether the client is authenticated.
func (e *scramExchange) step(msg []byte) (answer []byte, done bool, err error) {
	switch {
	case e.done:
		return nil, false, fmt.Errorf("%w: a message after the exchange ended", errSCRAM)
	case e.serverFirst == "":
		first, err := e.conv.Step(string(msg))
		if err != nil {
			e.done = true
			return nil, false, fmt.Errorf("%w: client-first message: %w", errSCRAM, err)
		}
		if authz := e.conv.AuthzID(); authz != "" && authz != e.user {
			e.done = true
			return nil, false, fmt.Errorf("%w: authorization id %q is not the user %q", errSCRAM, authz, e.user)
		}
		// The client-first message parsed: "gs2-header" then the bare
		// message, the header being its first two comma-separated
		// fields and their commas.
		n := strings.Index(string(msg), ",")
		n += 1 + strings.Index(string(msg[n+1:]), ",")
		e.gs2Header, e.clientFirstBare, e.serverFirst = string(msg[:n+1]), string(msg[n+1:]), first
		return []byte(first), false, nil
	}
	e.done = true
	return e.final(string(msg))
}

// final checks the client-final message: its channel binding is the
// client-first message's header, its nonce ends with the server's, and
// its proof is the user's, and answers with the server's signature.
func (e *scramExchange) final(msg string) ([]byte, bool, error) {
	withoutProof, proof, ok := strings.Cut(msg, ",p=")
	if !ok || strings.Contains(proof, ",") {
		return nil, false, fmt.Errorf("%w: client-final message without a proof at its end", errSCRAM)
	}
	attrs := map[byte]string{}
	for f := range strings.SplitSeq(withoutProof, ",") {
		if len(f) < 2 || f[1] != '=' {
			return nil, false, fmt.Errorf("%w: client-final message attribute %q", errSCRAM, f)
		}
		attrs[f[0]] = f[2:]
	}
	serverNonce, _, _ := strings.Cut(strings.TrimPrefix(e.serverFirst, "r="), ",")
	binding, err := base64.StdEncoding.DecodeString(attrs['c'])
	switch {
	case err != nil || string(binding) != e.gs2Header:
		return nil, false, fmt.Errorf("%w: channel binding %q is not the client-first message's header", errSCRAM, attrs['c'])
	case !strings.HasSuffix(attrs['r'], serverNonce):
		return nil, false, fmt.Errorf("%w: the client's nonce does not end with the server's", errSCRAM)
	}
	clientProof, err := base64.StdEncoding.DecodeString(proof)
	if err != nil || len(clientProof) != len(e.cred.StoredKey) {
		return nil, false, fmt.Errorf("%w: a proof of %d bytes", errSCRAM, len(clientProof))
	}
	authMessage := []byte(e.clientFirstBare + "," + e.serverFirst + "," + withoutProof)
	signature := hmacOf(e.m, e.cred.StoredKey, authMessage)
	clientKey := make([]byte, len(clientProof))
	for i := range clientKey {
		clientKey[i] = clientProof[i] ^ signature[i]
	}
	stored := e.m.hash()
	stored.Write(clientKey)
	if !hmac.Equal(stored.Sum(nil), e.cred.StoredKey) {
		return nil, false, fmt.Errorf("%w: invalid proof", errSCRAM)
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(e.m, e.cred.ServerKey, authMessage))), true, nil
}

func hmacOf(m scramMechanism, key, msg []byte) []byte {
	h := hmac.New(m.hash, key)
	h.Write(msg)
	return h.Sum(nil)
}
