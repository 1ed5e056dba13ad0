package loopback

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every node and every Kafka listener of an example cluster gets a port of
// its own, out of the range the kernel hands to outgoing connections: a
// shared port left a node unable to start (CI, "bind: address already in
// use").
func TestAddrsAreDistinctAndNotEphemeral(t *testing.T) {
	lo, hi := PortsBelowEphemeral()
	for range 20 {
		addrs, err := Addrs(12)
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, a := range addrs {
			require.False(t, seen[a], "%s handed out twice in %v", a, addrs)
			seen[a] = true
			_, p, err := net.SplitHostPort(a)
			require.NoError(t, err)
			port, err := strconv.Atoi(p)
			require.NoError(t, err)
			if hi > lo {
				require.True(t, port >= lo && port < hi, "port %d outside [%d, %d)", port, lo, hi)
			}
		}
	}
}

// Listen waits while the port is held, and gets it once it is let go.
func TestListenWaitsOutAPortInUse(t *testing.T) {
	addrs, err := Addrs(1)
	require.NoError(t, err)
	held, err := net.Listen("tcp", addrs[0])
	require.NoError(t, err)
	time.AfterFunc(200*time.Millisecond, func() { held.Close() })
	ln, err := Listen(addrs[0])
	require.NoError(t, err)
	require.Equal(t, addrs[0], ln.Addr().String())
	require.NoError(t, ln.Close())
}
