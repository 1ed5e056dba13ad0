package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// peerTLS is the mutual TLS of the nodes' own HTTP (replication, the
// controller's raft, requests between nodes, and the CLI's calls): every
// node serves and dials with a certificate the cluster's authority signed
// (for server and client use both), and takes only peers whose
// certificate that authority signed. A nil peerTLS is plain HTTP.
type peerTLS struct {
	server, client *tls.Config
}

// tlsFiles are the PEM files of -tls-ca, -tls-cert and -tls-key.
type tlsFiles struct{ ca, cert, key string }

func (f *tlsFiles) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "tls-ca", "", "PEM file of the authority that signs the nodes' certificates: the nodes talk mutual TLS (with -tls-cert and -tls-key)")
	fs.StringVar(&f.cert, "tls-cert", "", "PEM file of this process's certificate, for server and client use, signed by -tls-ca")
	fs.StringVar(&f.key, "tls-key", "", "PEM file of -tls-cert's private key")
}

// args are the flags that pass the files on to a node process.
func (f tlsFiles) args() []string {
	if f.ca == "" {
		return nil
	}
	return []string{"-tls-ca", f.ca, "-tls-cert", f.cert, "-tls-key", f.key}
}

// load reads the files, or returns nil when none is given.
func (f tlsFiles) load() (*peerTLS, error) {
	if f == (tlsFiles{}) {
		return nil, nil
	}
	if f.ca == "" || f.cert == "" || f.key == "" {
		return nil, errors.New("-tls-ca, -tls-cert and -tls-key go together")
	}
	pem, err := os.ReadFile(f.ca)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-tls-ca: no certificate in %s", f.ca)
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert, -tls-key: %w", err)
	}
	return &peerTLS{
		server: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13},
		client: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13},
	}, nil
}

// url is the URL of path on a node's address.
func (p *peerTLS) url(addr, path string) string {
	if p == nil {
		return "http://" + addr + path
	}
	return "https://" + addr + path
}

// httpClient dials the nodes, over mutual TLS if p is set.
func (p *peerTLS) httpClient(timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if p != nil {
		c.Transport = &http.Transport{TLSClientConfig: p.client.Clone(), ForceAttemptHTTP2: true}
	}
	return c
}

// listen serves a node's listener, over mutual TLS if p is set.
func (p *peerTLS) listen(ln net.Listener) net.Listener {
	if p == nil {
		return ln
	}
	return tls.NewListener(ln, p.server)
}
