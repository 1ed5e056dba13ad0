//go:build unix

package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The supervisor gives every node and every Kafka listener a port of its
// own, out of the range the kernel hands to outgoing connections: a
// shared port left a node unable to start (CI, "bind: address already in
// use").
func TestFreeAddrsAreDistinctAndNotEphemeral(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	for range 20 {
		addrs, err := freeAddrs(12)
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
