// The tests start real node processes and signal them: Unix only.

//go:build unix

package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// ackTimes produces one record at a time, acks=all, to a partition,
// asking only the nodes of cl (never a paused one) where its leader is,
// and keeps when each produce was acknowledged.
type ackTimes struct {
	mu  sync.Mutex
	at  []time.Time
	err error // the last failed produce's
}

func (a *ackTimes) run(ctx context.Context, cl *client, topic string, partition int32) {
	leader := replica.NoNode
	for ctx.Err() == nil {
		if leader == replica.NoNode {
			l, err := cl.leaderOf(ctx, topic, partition)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			leader = l
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cl.produce(pctx, leader, topic, partition, "all", []byte("v"))
		cancel()
		a.mu.Lock()
		if err == nil {
			a.at = append(a.at, time.Now())
		} else {
			a.err = err
		}
		a.mu.Unlock()
		if err != nil {
			leader = replica.NoNode
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// longestGap is the longest time from..to went without an
// acknowledgement.
func (a *ackTimes) longestGap(from, to time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	gap, last := time.Duration(0), from
	for _, at := range a.at {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			break
		}
		gap, last = max(gap, at.Sub(last)), at
	}
	return max(gap, to.Sub(last))
}

// The node that leads the raft group, and so is the active controller, is
// paused (SIGSTOP) for longer than a broker session. Raft elects another
// controller among the two others; their brokers' calls in flight to the
// paused one are given up as soon as raft names the new leader, and made
// there, so that their sessions hold: the partitions the two others lead
// (replicas on them only) see no leader election and no stall, as in
// KRaft, where a broker's heartbeat goes to the new active controller
// once the quorum names it. Before, every call waited out its 5 s
// timeout on the paused node while the new controller fenced the callers,
// and every partition lost its leader for about 5 s.
func TestPausedControllerDisturbsNoOtherPartition(t *testing.T) {
	s, cl := startCluster(t)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	paused := md.RaftLeader
	var live []replica.NodeID
	for _, id := range s.ids() {
		if id != paused {
			live = append(live, id)
		}
	}
	const topic = "paused"
	createTopicT(t, cl, topicRequest{Topic: topic, Assignment: [][]replica.NodeID{{live[0], live[1]}, {live[1], live[0]}}})
	waitISR(t, s, cl, topic, 2)
	// A partition whose follower is the paused node, for the figures: its
	// acks=all produces wait for that follower until the new controller
	// fences it, and then for the replica lag time (see nodeFlags).
	const shared = "paused-follower"
	createTopicT(t, cl, topicRequest{Topic: shared, Assignment: [][]replica.NodeID{{live[0], live[1], paused}}})
	waitISR(t, s, cl, shared, 3)
	livePeers := maps.Clone(cl.peers)
	delete(livePeers, paused)
	lc := cl.of(livePeers)
	epochs := func() map[int32]int32 {
		md, err := lc.metadata(context.Background(), replica.NoNode)
		require.NoError(t, err)
		out := map[int32]int32{}
		for _, p := range md.Partitions {
			if p.Topic == topic {
				out[p.Partition] = p.LeaderEpoch
			}
		}
		return out
	}
	before := epochs()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	acks := []*ackTimes{{}, {}}
	for i, a := range acks {
		wg.Go(func() { a.run(ctx, lc, topic, int32(i)) })
	}
	var withPaused ackTimes
	wg.Go(func() { withPaused.run(ctx, lc, shared, 0) })
	defer func() { stop(); wg.Wait() }()
	time.Sleep(time.Second)

	var nf nodeFlags
	nf.register(flag.NewFlagSet("defaults", flag.PanicOnError))
	session := time.Duration(nf.session) * nf.controlTick
	require.NoError(t, s.pause(paused))
	pausedAt := time.Now()
	t.Cleanup(func() { s.resume(paused) })
	var elected time.Duration
	waitFor(t, 15*time.Second, "a new controller", func() (bool, string) {
		md, err := lc.metadata(context.Background(), replica.NoNode)
		if err != nil {
			return false, err.Error()
		}
		elected = time.Since(pausedAt)
		return md.RaftLeader != paused && md.RaftLeader != replica.NoNode, fmt.Sprintf("raft leader %d", md.RaftLeader)
	})
	// Past the new controller's first session, when the brokers it did
	// not hear from by then are fenced, and past the replica lag time.
	time.Sleep(max(session, nf.replicaLag) + 2*time.Second)
	end := time.Now()
	stop()
	wg.Wait()
	require.NoError(t, s.resume(paused))

	after := epochs()
	var stalls []time.Duration
	elections := 0
	for i, a := range acks {
		p := int32(i)
		stalls = append(stalls, a.longestGap(pausedAt, end))
		elections += int(after[p] - before[p])
		a.mu.Lock()
		t.Logf("partition %d (leader epoch %d -> %d): %d acknowledged, longest stall %v; last error: %v",
			p, before[p], after[p], len(a.at), stalls[i].Round(time.Millisecond), a.err)
		a.mu.Unlock()
	}
	t.Logf("%s-0, with the paused node a follower: %d acknowledged, longest stall %v",
		shared, len(withPaused.at), withPaused.longestGap(pausedAt, end).Round(time.Millisecond))
	t.Logf("controller node %d paused for %v, a new one elected after %v (session %v): %d leader elections of the other nodes' partitions, longest produce stall %v",
		paused, end.Sub(pausedAt).Round(time.Millisecond), elected.Round(time.Millisecond), session, elections, slices.Max(stalls).Round(time.Millisecond))
	require.Zero(t, elections, "the partitions led by live nodes kept their leaders")
	require.Less(t, slices.Max(stalls), 2*time.Second, "produces to the live nodes' partitions went on")
}
