package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are a test's certificate authority and the certificates it
// signed, one for the broker (127.0.0.1, ::1 and localhost), one for a
// client (subject CN=client,O=strand) and one for a cluster's nodes,
// which serve and dial each other (both uses, the broker's addresses),
// with their PEM files, for clients that read them (kcat, franz-go's
// KGO_TEST_TLS, kafkajs) and node processes.
type Certs struct {
	// CAFile, ServerCertFile, ServerKeyFile, ClientCertFile,
	// ClientKeyFile, NodeCertFile and NodeKeyFile are the PEM files.
	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string
	NodeCertFile, NodeKeyFile                                            string

	pool           *x509.CertPool
	server, client tls.Certificate
}

// NewCerts makes a certificate authority and its two certificates in a
// temporary directory of t.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "strand test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{CAFile: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	writePEM(t, c.CAFile, "CERTIFICATE", caDER)
	sign := func(serial int64, subject pkix.Name, usage []x509.ExtKeyUsage, name string, hosts bool) (tls.Certificate, string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
		}
		if hosts {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certFile, keyFile
	}
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	c.server, c.ServerCertFile, c.ServerKeyFile = sign(2, pkix.Name{CommonName: "localhost"}, []x509.ExtKeyUsage{server}, "server", true)
	c.client, c.ClientCertFile, c.ClientKeyFile = sign(3, pkix.Name{CommonName: "client", Organization: []string{"strand"}}, []x509.ExtKeyUsage{client}, "client", false)
	_, c.NodeCertFile, c.NodeKeyFile = sign(4, pkix.Name{CommonName: "node", Organization: []string{"strand"}}, []x509.ExtKeyUsage{server, client}, "node", true)
	return c
}

// Server is the broker's TLS configuration; with clientAuth, it requires
// and verifies a client certificate signed by the authority.
func (c *Certs) Server(clientAuth bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.server}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, c.pool
	}
	return cfg
}

// Client is a client's TLS configuration, trusting the authority; with
// cert, it presents the client certificate.
func (c *Certs) Client(cert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: c.pool, MinVersion: tls.VersionTLS12}
	if cert {
		cfg.Certificates = []tls.Certificate{c.client}
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
