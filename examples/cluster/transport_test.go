// The tests use cluster_test.go's helpers: Unix only.

//go:build unix

package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/replica"
)

// receiver is a node's HTTP endpoint that records the messages posted to
// it; while hold is open, every post waits, as posts to a node whose
// driver is busy do.
type receiver struct {
	srv  *httptest.Server
	hold chan struct{}

	mu    sync.Mutex
	got   []replica.Message
	posts int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{hold: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.posts++
		r.mu.Unlock()
		select {
		case <-r.hold:
		case <-req.Context().Done():
			http.Error(w, "gave up", http.StatusServiceUnavailable)
			return
		}
		m, err := readMessage(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msgs := []replica.Message{m}
		if b, ok := m.(*replica.Batch); ok {
			msgs = b.Messages
		}
		r.mu.Lock()
		r.got = append(r.got, msgs...)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) addr() string { return strings.TrimPrefix(r.srv.URL, "http://") }

func (r *receiver) release() { close(r.hold) }

func (r *receiver) messages() []replica.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]replica.Message(nil), r.got...)
}

func (r *receiver) postCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A follower node's fetches and a leader's produce results, sent while
// the receiving node takes nothing, far more than the old 1024-message
// queue held: Send never waits, what waits for the node is bounded by its
// partitions (the newest fetch of each, which is the only one the leader
// answers in time: Kafka's fetcher has one fetch in flight per
// partition), and once the node takes messages again it gets the newest
// fetch of every partition and every produce result. The old poster
// dropped whatever came past a full queue: the newest fetches among them,
// which the follower sends again only after its RequestTimeout.
func TestTransportCoalescesInsteadOfDropping(t *testing.T) {
	to := newReceiver(t)
	tr := newReplicaTransport(1, map[replica.NodeID]string{1: "127.0.0.1:1", 2: to.addr()},
		func() replica.NodeID { return replica.NoNode }, quietLogger())
	defer tr.close()

	const partitions, rounds = 50, 600
	start := time.Now()
	results := 0
	for round := range rounds {
		b := &replica.Batch{Header: replica.Header{From: 1, To: 2}}
		for p := range int32(partitions) {
			h := replica.Header{From: 1, To: 2, Topic: "t", Partition: p}
			b.Messages = append(b.Messages, &replica.Fetch{Header: h, ID: uint64(round + 1), FetchOffset: int64(round)})
		}
		tr.Send(b)
		results++
		tr.Send(&replica.ProduceResult{Header: replica.Header{From: 1, To: 2, Topic: "t"}, ID: uint64(results)})
	}
	require.Less(t, time.Since(start), time.Second, "Send does not wait for the receiver")
	out := tr.outboxes[2]
	out.mu.Lock()
	waiting := len(out.order)
	out.mu.Unlock()
	// One post may have taken the first messages before the receiver
	// held it.
	require.LessOrEqual(t, waiting, partitions+results, "one fetch per partition waits, and each produce result")

	to.release()
	waitFor(t, 10*time.Second, "the newest fetch of every partition and every produce result", func() (bool, string) {
		newest := map[int32]uint64{}
		got := map[uint64]bool{}
		for _, m := range to.messages() {
			switch m := m.(type) {
			case *replica.Fetch:
				newest[m.Partition] = max(newest[m.Partition], m.ID)
			case *replica.ProduceResult:
				got[m.ID] = true
			}
		}
		for p := range int32(partitions) {
			if newest[p] != rounds {
				return false, fmt.Sprintf("partition %d: newest fetch %d of %d", p, newest[p], rounds)
			}
		}
		return len(got) == results, "produce results missing"
	})
	require.Less(t, len(to.messages()), rounds*partitions/10, "fetches a newer one replaced were not posted")
}

// A post that fails is posted again, after a backoff, until the node takes
// it: a node that restarts gets what was sent to it meanwhile, not an
// empty queue the sender dropped into.
func TestTransportRetriesUntilDelivered(t *testing.T) {
	to := newReceiver(t)
	var mu sync.Mutex
	failures := 3
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		fail := failures > 0
		failures--
		mu.Unlock()
		if fail {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		to.srv.Config.Handler.ServeHTTP(w, req)
	}))
	defer flaky.Close()
	to.release()
	tr := newReplicaTransport(1, map[replica.NodeID]string{1: "127.0.0.1:1", 2: strings.TrimPrefix(flaky.URL, "http://")},
		func() replica.NodeID { return replica.NoNode }, quietLogger())
	defer tr.close()
	tr.Send(&replica.Fetch{Header: replica.Header{From: 1, To: 2, Topic: "t"}, ID: 7})
	waitFor(t, 5*time.Second, "the fetch delivered after three failed posts", func() (bool, string) {
		return len(to.messages()) == 1, "not delivered"
	})
}

// A message for the controller goes to the raft leader of the moment; a
// post in flight to a leader that stopped answering (paused, or cut off)
// is given up as soon as raft names another, and the message goes there,
// long before the post's timeout.
func TestTransportFollowsTheControllerWhenItMoves(t *testing.T) {
	paused, next := newReceiver(t), newReceiver(t)
	next.release()
	defer paused.release()
	var mu sync.Mutex
	lead := replica.NodeID(2)
	tr := newReplicaTransport(1, map[replica.NodeID]string{1: "127.0.0.1:1", 2: paused.addr(), 3: next.addr()},
		func() replica.NodeID { mu.Lock(); defer mu.Unlock(); return lead }, quietLogger())
	defer tr.close()
	tr.Send(&replica.AlterPartition{Header: replica.Header{From: 1, To: replica.NoNode, Topic: "t"}, LeaderEpoch: 4})
	waitFor(t, 5*time.Second, "the post to the old controller", func() (bool, string) {
		return paused.postCount() > 0, "not posted"
	})
	moved := time.Now()
	mu.Lock()
	lead = 3
	mu.Unlock()
	waitFor(t, 5*time.Second, "the AlterPartition at the new controller", func() (bool, string) {
		return len(next.messages()) == 1, "not delivered"
	})
	require.Less(t, time.Since(moved), postTimeout/4, "the post to the old controller was given up when raft moved")
	ap, ok := next.messages()[0].(*replica.AlterPartition)
	require.True(t, ok)
	require.Equal(t, int32(4), ap.LeaderEpoch)
}
