package main

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("RPCCLUSTER_NODE") == "1" {
		main() // a node process the demo started from this test binary
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The demo's three nodes (two processes, and node 3 in the test's) keep
// every acknowledged record, the transaction and the group's commit across
// the SIGKILL of the partition's leader: demo fails if the group's next
// member reads anything lost, doubled or from before the commit.
func TestDemoAcrossALeaderKill(t *testing.T) {
	if err := demo(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
