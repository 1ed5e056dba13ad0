package broker

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rfc7677 is the SCRAM-SHA-256 exchange of RFC 7677 section 3: user
// "user", password "pencil".
var rfc7677 = struct {
	salt, clientFirst, serverNonce, serverFirst, clientFinal, serverFinal string
}{
	salt:        "W22ZaJ0SNY7soEsUEjb6gQ==",
	clientFirst: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
	serverNonce: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
	serverFirst: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
	clientFinal: "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
	serverFinal: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}

// rfc7677Credentials holds the credential of RFC 7677's user, derived as
// AlterUserScramCredentials derives one from a salted password.
func rfc7677Credentials(t testing.TB) *credentials {
	salt, err := base64.StdEncoding.DecodeString(rfc7677.salt)
	require.NoError(t, err)
	salted, err := pbkdf2.Key(sha256.New, "pencil", salt, 4096, sha256.Size)
	require.NoError(t, err)
	creds, err := openCredentials(filepath.Join(t.TempDir(), "scram.json"))
	require.NoError(t, err)
	m, _ := scramMechanismOf(func(m scramMechanism) bool { return m.name == MechanismSCRAMSHA256 })
	require.NoError(t, creds.alter(context.Background(), func(users map[string]map[string]scramCredential) {
		users["user"] = map[string]scramCredential{m.name: newScramCredential(m, salt, salted, 4096)}
	}))
	return creds
}

func exchange(t *testing.T, creds *credentials) *scramExchange {
	m, _ := scramMechanismOf(func(m scramMechanism) bool { return m.name == MechanismSCRAMSHA256 })
	return newScramExchange(m, creds, func() string { return rfc7677.serverNonce })
}

// The server's side of RFC 7677's exchange answers as the RFC does.
func TestScramExchangeOfRFC7677(t *testing.T) {
	e := exchange(t, rfc7677Credentials(t))
	first, done, err := e.step([]byte(rfc7677.clientFirst))
	require.NoError(t, err)
	require.False(t, done)
	require.Equal(t, rfc7677.serverFirst, string(first))
	final, done, err := e.step([]byte(rfc7677.clientFinal))
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, rfc7677.serverFinal, string(final))
	require.Equal(t, "user", e.user)

	_, _, err = e.step([]byte(rfc7677.clientFinal))
	require.ErrorIs(t, err, errSCRAM, "an exchange ends once")
}

// Kafka's ScramSaslServer takes a client-final nonce that ends with the
// server's nonce, which librdkafka sends after its own nonce; the proof
// still has to match the message as sent.
func TestScramTakesANonceThatEndsWithTheServers(t *testing.T) {
	e := exchange(t, rfc7677Credentials(t))
	_, _, err := e.step([]byte(rfc7677.clientFirst))
	require.NoError(t, err)
	// librdkafka's client-final message: its nonce, then the server's
	// whole nonce, with a proof of that message.
	withoutProof := "c=biws,r=rOprNGfwEbeRWgbNEkqO" + strings.TrimPrefix(strings.Split(rfc7677.serverFirst, ",")[0], "r=")
	salt, _ := base64.StdEncoding.DecodeString(rfc7677.salt)
	salted, err := pbkdf2.Key(sha256.New, "pencil", salt, 4096, sha256.Size)
	require.NoError(t, err)
	m := e.m
	clientKey := hmacOf(m, salted, []byte("Client Key"))
	stored := sha256.Sum256(clientKey)
	signature := hmacOf(m, stored[:], []byte(rfc7677.clientFirst[3:]+","+rfc7677.serverFirst+","+withoutProof))
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ signature[i]
	}
	final, done, err := e.step([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)))
	require.NoError(t, err)
	require.True(t, done)
	require.Contains(t, string(final), "v=")

	// The RFC's proof is of the RFC's message: under another nonce it is
	// refused.
	e = exchange(t, rfc7677Credentials(t))
	_, _, err = e.step([]byte(rfc7677.clientFirst))
	require.NoError(t, err)
	_, _, err = e.step([]byte(withoutProof + ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	require.ErrorContains(t, err, "invalid proof")
}

func TestScramRefusesWhatBreaksTheExchange(t *testing.T) {
	creds := rfc7677Credentials(t)
	for name, final := range map[string]string{
		"another nonce":           "c=biws,r=rOprNGfwEbeRWgbNEkqOsomethingelse,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
		"another channel binding": "c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
		"a wrong proof":           "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAAZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
		"a short proof":           "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
		"no proof":                "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
		"a broken attribute":      "c=biws,rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
	} {
		t.Run(name, func(t *testing.T) {
			e := exchange(t, creds)
			_, _, err := e.step([]byte(rfc7677.clientFirst))
			require.NoError(t, err)
			_, done, err := e.step([]byte(final))
			require.ErrorIs(t, err, errSCRAM)
			require.False(t, done)
		})
	}
	for name, first := range map[string]string{
		"an unknown user":             "n,,n=mallory,r=rOprNGfwEbeRWgbNEkqO",
		"someone else's authzid":      "n,a=root,n=user,r=rOprNGfwEbeRWgbNEkqO",
		"not SCRAM":                   "hello",
		"channel binding it lacks":    "p=tls-unique,,n=user,r=rOprNGfwEbeRWgbNEkqO",
		"a user name it cannot parse": "n,,n=us=er,r=rOprNGfwEbeRWgbNEkqO",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := exchange(t, creds).step([]byte(first))
			require.ErrorIs(t, err, errSCRAM)
		})
	}
}

// Whatever a client sends in its two SCRAM messages, the exchange answers
// without panicking, and only the right proof authenticates.
func FuzzScramExchange(f *testing.F) {
	f.Add([]byte(rfc7677.clientFirst), []byte(rfc7677.clientFinal))
	f.Add([]byte("n,,n=user,r=x"), []byte("c=biws,r=x,p="))
	f.Add([]byte("y,a=user,n=user,r=abc"), []byte("p=,,"))
	f.Add([]byte(""), []byte(""))
	creds := rfc7677Credentials(f)
	f.Fuzz(func(t *testing.T, first, final []byte) {
		e := exchange(t, creds)
		if _, done, err := e.step(first); err != nil || done {
			require.False(t, done)
			return
		}
		_, done, err := e.step(final)
		if done {
			require.NoError(t, err)
			require.Equal(t, rfc7677.clientFirst, string(first))
		}
	})
}

// Whatever a client sends as SASL/PLAIN, it is refused unless it is the
// user's password, without panicking.
func FuzzPlain(f *testing.F) {
	f.Add([]byte("\x00user\x00pencil"))
	f.Add([]byte("\x00\x00"))
	f.Add([]byte("user\x00user\x00pencil\x00"))
	b := &Broker{creds: rfc7677Credentials(f)}
	f.Fuzz(func(t *testing.T, msg []byte) {
		user, err := b.checkPlain(msg)
		if err == nil {
			require.Equal(t, "user", user)
			require.Contains(t, []string{"\x00user\x00pencil", "user\x00user\x00pencil"}, string(msg))
		}
	})
}
