// The test signals node processes (SIGKILL, SIGTERM): Unix only.

//go:build unix

package main

import (
	"os"
	"testing"
	"time"

	"github.com/strandlog/strand/replica"
	"github.com/stretchr/testify/require"
)

// The test binary is also the node: started with this variable set, it
// runs main, so the test spawns real node processes without building the
// command.
const childEnv = "STRAND_REPLICATE_NODE=1"

func TestMain(m *testing.M) {
	if os.Getenv("STRAND_REPLICATE_NODE") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Three node processes replicate over HTTP with acks=all and
// MinInsyncReplicas 2. A SIGKILLed follower leaves the ISR and produces go
// on; restarted with records in its log that no other replica has, it
// truncates them, catches up and rejoins the ISR; and every acknowledged
// record is in the log of every ISR member once the nodes stop.
func TestKillAndRestartFollower(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	batches, latencies := 600, 200
	if testing.Short() {
		batches, latencies = 60, 20
	}
	c := &cluster{exe: self, env: []string{childEnv}, nodes: 3, dir: t.TempDir(), tick: 10 * time.Millisecond, lag: 50}
	require.NoError(t, c.start())
	defer c.kill()

	rep, err := scenario(c, batches, latencies, t.Logf)
	require.NoError(t, err)
	require.Equal(t, []replica.NodeID{1, 2}, rep.isrAfterKill, "the ISR shrank without the killed follower")
	require.Positive(t, rep.ackedWhileDown, "acks=all produces went on while the follower was down")
	require.Equal(t, []replica.NodeID{1, 2, 3}, rep.isrAfterRestart, "the restarted follower rejoined")
	require.Len(t, rep.acked, 2*batches+latencies, "every acks=all produce was acknowledged")
	require.Len(t, rep.diverged, 2)
	require.True(t, rep.truncated, "the restarted follower truncated the records no other replica had")
	for _, acks := range []string{"1", "all"} {
		require.Positive(t, rep.latency[acks][0], "acks=%s p50", acks)
	}
}
