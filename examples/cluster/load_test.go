// The tests start real node processes and signal them: Unix only.

//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// spinEnv makes the test binary a busy loop (spin): the CPU load of
// TestFollowersKeepUpUnderLoad.
const spinEnv = "STRAND_CLUSTER_SPIN=1"

// spin keeps one core busy until the process that started it is gone.
func spin() {
	runtime.GOMAXPROCS(1)
	parent := os.Getppid()
	for i := uint64(0); ; i++ {
		if i%(1<<26) == 0 && os.Getppid() != parent {
			os.Exit(0)
		}
	}
}

// startLoad starts n busy-loop processes, which end with the test.
func startLoad(t *testing.T, n int) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	for range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), spinEnv)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
}

// replicaEnds reads each node's log ends of a topic's replicas, giving up
// on a node that does not answer within a moment (it is paused).
func replicaEnds(cl *client, topic string) map[replica.NodeID]map[int32]int64 {
	out := map[replica.NodeID]map[int32]int64{}
	for id := range cl.peers {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var pl []partitionLogs
		err := cl.getJSON(ctx, id, "/local", &pl)
		cancel()
		if err != nil {
			continue
		}
		out[id] = map[int32]int64{}
		for _, p := range pl {
			if p.Topic == topic && p.Log.Error == "" {
				out[id][p.Partition] = p.Log.LogEnd
			}
		}
	}
	return out
}

// Followers keep fetching on a loaded machine with a slow receiver: busy
// loops keep more processes runnable than there are cores, producers
// write acks=all to every partition, and one node is paused for 600 ms of
// every 1.5 s, so that what is sent to it waits and its answers come late.
// Every follower stays in the ISR (replica.lag.time.max.ms is far above
// such stalls; an unanswered fetch is never dropped by the transport, only
// replaced by a newer one), no follower's log end stops following its
// leader's for long, and when the load ends every replica holds the same
// log. Before, with a 500 ms lag time and request timeout and a queue
// that dropped, followers left the ISR (issue 21, part 7: franz-go's
// tests at load 8 to 16 on two cores).
func TestFollowersKeepUpUnderLoad(t *testing.T) {
	s, cl := startCluster(t)
	const topic, partitions = "loaded", 6
	const duration, spinners = 20 * time.Second, 8
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: partitions, ReplicationFactor: 3})
	waitISR(t, s, cl, topic, 3)
	startLoad(t, spinners)
	var producers []*producer
	for p := range int32(partitions) {
		producers = append(producers, startProducer(s, cl, topic, p))
	}
	defer func() {
		for _, p := range producers {
			p.halt()
		}
	}()

	const slow = replica.NodeID(3)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(900 * time.Millisecond):
			}
			s.pause(slow)
			time.Sleep(600 * time.Millisecond)
			s.resume(slow)
		}
	})
	t.Cleanup(func() { s.resume(slow) })

	// A follower's progress: when its log end last moved, or last was
	// its leader's.
	type replicaKey struct {
		node      replica.NodeID
		partition int32
	}
	progress := map[replicaKey]time.Time{}
	last := map[replicaKey]int64{}
	var longest time.Duration
	var longestAt replicaKey
	samples, shrunk, minISR := 0, 0, 3
	started := time.Now()
	for time.Since(started) < duration {
		time.Sleep(250 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		md, err := cl.of(map[replica.NodeID]string{1: cl.peers[1]}).metadata(ctx, 1)
		cancel()
		if err != nil {
			continue
		}
		ends := replicaEnds(cl, topic)
		samples++
		now := time.Now()
		for _, pv := range md.Partitions {
			if pv.Topic != topic {
				continue
			}
			minISR = min(minISR, len(pv.ISR))
			if len(pv.ISR) < 3 {
				shrunk++
			}
			leaderEnd, ok := ends[pv.Leader][pv.Partition]
			if !ok {
				continue
			}
			for _, id := range pv.Replicas {
				k := replicaKey{id, pv.Partition}
				end, ok := ends[id][pv.Partition]
				if id == pv.Leader || !ok {
					continue
				}
				if end > last[k] || end >= leaderEnd || progress[k].IsZero() {
					progress[k], last[k] = now, end
				}
				if d := now.Sub(progress[k]); d > longest {
					longest, longestAt = d, k
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, s.resume(slow))
	acked := 0
	for _, p := range producers {
		p.halt()
		acked += len(p.snapshot())
	}
	waitFor(t, 30*time.Second, "every replica to hold the same log", func() (bool, string) {
		ends := replicaEnds(cl, topic)
		for p := range int32(partitions) {
			if len(ends) != 3 || ends[1][p] != ends[2][p] || ends[2][p] != ends[3][p] {
				return false, fmt.Sprintf("%v", ends)
			}
		}
		return true, ""
	})
	t.Logf("%v with %d busy loops on %d cores, node %d paused 600 ms of every 1.5 s: %d produces acknowledged; %d samples, %d partition samples with a shrunk ISR (smallest %d); longest a follower's log end stood behind its leader's: %v (node %d, partition %d)",
		duration, spinners, runtime.NumCPU(), slow, acked, samples, shrunk, minISR, longest.Round(time.Millisecond), longestAt.node, longestAt.partition)
	require.Zero(t, shrunk, "every follower stayed in the ISR")
	require.Less(t, longest, 5*time.Second, "every follower kept fetching")
	require.Positive(t, acked)
}
