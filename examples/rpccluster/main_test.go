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

// The demo's three node processes keep every acknowledged record, the
// transaction and the group's committed offset across the SIGKILL of the
// partition's leader; demo fails if any is lost or doubled.
func TestDemoAcrossALeaderKill(t *testing.T) {
	if err := demo(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
