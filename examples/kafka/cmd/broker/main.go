// Command broker serves a Strand data directory to Kafka clients: one Kafka
// broker over Kafka's wire protocol, a cluster of one (a cluster.Node that
// is its own controller and leads every partition).
//
//	go run ./cmd/broker -listen 127.0.0.1:9092 -dir /tmp/strand-data
//
// then point any Kafka client at 127.0.0.1:9092, for example
//
//	kcat -b 127.0.0.1:9092 -L
//
// With TLS and SASL (users and their passwords in a file of NAME:PASSWORD
// lines, of which the broker keeps only SCRAM hashes in its data
// directory; Kafka's admin API manages them from then on):
//
//	go run ./cmd/broker -dir /tmp/strand-data -listen '' \
//	    -sasl-ssl-listen 127.0.0.1:9093 -tls-cert server.pem -tls-key server-key.pem \
//	    -users users.txt
//	kcat -b 127.0.0.1:9093 -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-256 \
//	    -X sasl.username=alice -X sasl.password=... -X ssl.ca.location=ca.pem -L
//
// The same broker serves a three-node replicated cluster, one per node, in
// examples/cluster: cd examples/cluster && go run . up -kafka
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/log"
)

// options are the command's flags.
type options struct {
	listen, dir, advertise string
	partitions             int32
	fsync                  string
	autoCreate             bool

	// Security: a TLS listener, SASL listeners in plaintext and over
	// TLS, and the users whose credentials the broker sets at start.
	tlsListen, tlsCert, tlsKey, tlsClientCA string
	saslListen, saslSSLListen               string
	saslMechanisms                          string
	usersFile                               string
	maxReauth                               time.Duration
	authorize                               bool
	superUsers                              string
}

func main() {
	var o options
	flag.StringVar(&o.listen, "listen", "127.0.0.1:9092", "address of the plaintext listener (PLAINTEXT); empty for none")
	flag.StringVar(&o.dir, "dir", "", "data directory (required)")
	flag.StringVar(&o.advertise, "advertise", "", "host:port clients of the plaintext listener are told to connect to (default: its address)")
	partitions := flag.Int("partitions", 1, "partitions of a topic created without a count (num.partitions)")
	flag.StringVar(&o.fsync, "fsync", "always", "fsync policy of new topics: always, never, interval:DURATION or every:MESSAGES:BYTES")
	flag.BoolVar(&o.autoCreate, "auto-create-topics", true, "create topics on first use (auto.create.topics.enable)")
	flag.StringVar(&o.tlsListen, "tls-listen", "", "address of a TLS listener (SSL); needs -tls-cert and -tls-key")
	flag.StringVar(&o.tlsCert, "tls-cert", "", "PEM file of the broker's TLS certificate (chain)")
	flag.StringVar(&o.tlsKey, "tls-key", "", "PEM file of the TLS certificate's private key")
	flag.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM file of the authorities whose client certificates TLS listeners require (ssl.client.auth=required)")
	flag.StringVar(&o.saslListen, "sasl-listen", "", "address of a SASL listener in plaintext (SASL_PLAINTEXT)")
	flag.StringVar(&o.saslSSLListen, "sasl-ssl-listen", "", "address of a SASL listener over TLS (SASL_SSL); needs -tls-cert and -tls-key")
	flag.StringVar(&o.saslMechanisms, "sasl-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms of the SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (sasl.enabled.mechanisms)")
	flag.StringVar(&o.usersFile, "users", "", "file of NAME:PASSWORD lines: users whose SCRAM credentials the broker sets at start (only their hashes are kept)")
	flag.DurationVar(&o.maxReauth, "max-reauth", 0, "lifetime of a SASL session, after which the client re-authenticates (connections.max.reauth.ms); 0 for none")
	flag.BoolVar(&o.authorize, "authorize", false, "check every request against the ACLs, which CreateAcls and DeleteAcls manage (authorizer.class.name)")
	flag.StringVar(&o.superUsers, "super-users", "", "comma-separated principals the ACLs allow everything, such as User:admin (super.users)")
	verbose := flag.Bool("v", false, "log every connection error")
	flag.Parse()
	o.partitions = int32(*partitions)
	if o.dir == "" {
		fmt.Fprintln(os.Stderr, "broker: -dir is required")
		flag.Usage()
		os.Exit(2)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(logger, o); err != nil {
		logger.Error("broker stopped", "err", err)
		os.Exit(1)
	}
}

// listener is one listener the flags ask for.
type listener struct {
	addr string
	sec  broker.Listener
}

// listeners are the listeners the flags ask for, with their security.
func (o options) listeners() ([]listener, error) {
	var tc *tls.Config
	if o.tlsCert != "" || o.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert, -tls-key: %w", err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if o.tlsClientCA != "" {
			pem, err := os.ReadFile(o.tlsClientCA)
			if err != nil {
				return nil, fmt.Errorf("-tls-client-ca: %w", err)
			}
			tc.ClientCAs = x509.NewCertPool()
			if !tc.ClientCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-tls-client-ca: no certificate in %s", o.tlsClientCA)
			}
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if tc == nil && (o.tlsListen != "" || o.saslSSLListen != "") {
		return nil, errors.New("-tls-listen and -sasl-ssl-listen need -tls-cert and -tls-key")
	}
	mechanisms := strings.Split(o.saslMechanisms, ",")
	var ls []listener
	for _, l := range []listener{
		{o.listen, broker.Listener{}},
		{o.tlsListen, broker.Listener{TLS: tc}},
		{o.saslListen, broker.Listener{SASL: mechanisms}},
		{o.saslSSLListen, broker.Listener{TLS: tc, SASL: mechanisms}},
	} {
		if l.addr != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return nil, errors.New("no listener: give -listen, -tls-listen, -sasl-listen or -sasl-ssl-listen")
	}
	return ls, nil
}

func run(logger *slog.Logger, o options) error {
	policy, err := log.ParseFsyncPolicy(o.fsync)
	if err != nil {
		return err
	}
	listeners, err := o.listeners()
	if err != nil {
		return err
	}
	var users map[string]string
	if o.usersFile != "" {
		if users, err = broker.ReadUsers(o.usersFile); err != nil {
			return fmt.Errorf("-users: %w", err)
		}
	}
	b, err := broker.Open(broker.Config{
		DataDir:          o.dir,
		Partitions:       o.partitions,
		Fsync:            policy,
		Advertise:        o.advertise,
		AutoCreateTopics: o.autoCreate,
		Users:            users,
		MaxReauth:        o.maxReauth,
		Authorize:        o.authorize,
		SuperUsers:       strings.FieldsFunc(o.superUsers, func(r rune) bool { return r == ',' }),
		Logger:           logger,
	})
	if err != nil {
		return err
	}
	served := make(chan error, len(listeners))
	for _, l := range listeners {
		nl, err := net.Listen("tcp", l.addr)
		if err != nil {
			return errors.Join(err, b.Close())
		}
		logger.Info("broker listening", "addr", nl.Addr().String(), "tls", l.sec.TLS != nil, "sasl", l.sec.SASL, "dir", o.dir)
		go func() { served <- b.ServeListener(nl, l.sec) }()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	select {
	case sig := <-stop:
		logger.Info("broker stopping", "signal", sig.String())
	case err := <-served:
		logger.Error("broker: serve", "err", err)
	}
	return b.Close()
}
