package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
	"github.com/strandlog/strand/replica"
)

// The nodes' own HTTP over mutual TLS (-tls-ca, -tls-cert, -tls-key):
// three node processes elect, replicate and answer the CLI's client
// only over it; plain HTTP and a TLS client without a certificate the
// cluster's authority signed get nothing from a node.
func TestNodesTalkOverMutualTLS(t *testing.T) {
	certs := kafkatest.NewCerts(t)
	files := tlsFiles{ca: certs.CAFile, cert: certs.NodeCertFile, key: certs.NodeKeyFile}
	peer, err := files.load()
	require.NoError(t, err)
	s, cl := startCluster(t, func(s *supervisor) {
		s.args, s.tls = append(s.args, files.args()...), peer
	})
	const topic = "over-tls"
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: 1, ReplicationFactor: 3})
	waitISR(t, s, cl, topic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leader replica.NodeID
	waitFor(t, 20*time.Second, "an acks=all produce", func() (bool, string) {
		if leader, err = cl.leaderOf(ctx, topic, 0); err == nil {
			_, err = cl.produce(ctx, leader, topic, 0, "all", []byte("a"), []byte("b"))
		}
		return err == nil, fmt.Sprint(err)
	})
	recs, err := cl.consumeAll(ctx, leader, topic, 0)
	require.NoError(t, err)
	require.Len(t, recs, 2)

	addr := s.peers[s.ids()[0]]
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/status"); err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to a TLS node") // net/http's answer to it
	}
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: peer.client.RootCAs}}}
	_, err = noCert.Get("https://" + addr + "/status")
	require.Error(t, err, "a client without a certificate")
	stranger := kafkatest.NewCerts(t) // another authority
	other, err := tlsFiles{ca: certs.CAFile, cert: stranger.NodeCertFile, key: stranger.NodeKeyFile}.load()
	require.NoError(t, err)
	_, err = other.httpClient(5 * time.Second).Get("https://" + addr + "/status")
	require.Error(t, err, "a certificate another authority signed")

	_, err = tlsFiles{ca: certs.CAFile}.load()
	require.ErrorContains(t, err, "go together")
}
