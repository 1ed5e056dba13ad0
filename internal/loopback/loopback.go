// Package loopback gives the example clusters' node processes their
// loopback addresses: distinct, and out of the range the kernel hands to
// outgoing connections, so that a node restarted on its address finds it
// free.
package loopback

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Addrs picks n distinct free loopback addresses. Each port is held until
// all are picked, so that two nodes never get the same one (the kernel may
// hand a just-closed port 0 out again), and they are taken below the
// kernel's ephemeral range where it can tell, so that the nodes' own
// outgoing connections cannot occupy a node's port while it is down.
func Addrs(n int) ([]string, error) {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	lo, hi := PortsBelowEphemeral()
	addrs := make([]string, 0, n)
	for tries := 0; len(addrs) < n; tries++ {
		port := 0 // any, once the low range has failed often
		if hi > lo && tries < 100*n {
			port = lo + rand.IntN(hi-lo)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				return nil, err
			}
			continue
		}
		held = append(held, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// PortsBelowEphemeral returns a range of ports under the start of the
// kernel's ephemeral range (Linux's ip_local_port_range), or an empty one
// where it cannot be read.
func PortsBelowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start <= 12000 {
		return 0, 0
	}
	return 10000, start
}

// Listen listens on addr, waiting up to five seconds while another socket
// holds the port: a node restarted at once may find a connection of its
// previous run's still bound to it.
func Listen(addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
