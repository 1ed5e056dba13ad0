//go:build unix

package main

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A connection a peer opened and never sent a request on (Go's HTTP client
// keeps a dial that lost the race to an idle connection) does not hold the
// node's shutdown: http.Server waits five seconds for such a connection,
// past the node's two-second budget, and node 1 exited with "context
// deadline exceeded" in TestKillAndRestartFollower under load.
func TestShutdownDoesNotWaitForAConnectionThatSendsNothing(t *testing.T) {
	srv := newServer(http.NewServeMux())
	opened := make(chan struct{})
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			close(opened)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	<-opened

	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	n, err := conn.Read(make([]byte, 1))
	require.Zero(t, n)
	require.Error(t, err, "the server closed the connection")
}
