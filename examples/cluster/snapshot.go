package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// Snapshots keep the raft log short. Every snapshotEntries applied
// entries a node writes the committed controller state as its image
// (State.Records: records that replay to it, as a KRaft snapshot holds the
// metadata image) into a raft snapshot and drops the log up to there; a
// node too far behind for its leader's log, a restarted one say, is sent
// the snapshot instead of the entries, and loads it as its state and its
// history.
const (
	defaultSnapshotEntries = 1000
	// snapshotSendTimeout bounds the posting of one snapshot: the state of
	// a demo's controller is small.
	snapshotSendTimeout = 10 * time.Second
)

// snapshots is what the control loop keeps for snapshots: how often to take
// one, and the goroutines that send them, which run must outlive.
type snapshots struct {
	every   uint64 // applied entries between snapshots (0: never)
	taken   uint64 // the index of the latest snapshot
	ctx     context.Context
	sending sync.WaitGroup
}

// startSnapshots lets snapshots be sent until ctx ends; the function it
// returns waits for the sends in flight. run calls both.
func (c *control) startSnapshots(ctx context.Context) func() {
	c.snap.ctx = ctx
	return c.snap.sending.Wait
}

// encodeSnapshot is a snapshot's data: the image's records, encoded as
// a proposal (nonce and sequence 0: nobody waits for it).
func encodeSnapshot(s *controller.State) ([]byte, error) {
	return encodeProposal(0, 0, s.Records())
}

// restore makes the state a snapshot holds the node's committed state and
// history, and marks all of it to be published. An empty snapshot (the
// bootstrap one) changes nothing. A snapshot sent by the leader is
// complete: the node applied no entry after it, so a topic its log.Dir
// holds that the snapshot does not was deleted by a record it never saw
// (and one under a name the snapshot gives another id, deleted and
// created again); the node deletes those when the state is published.
func (c *control) restore(snap *pb.Snapshot, fromLeader bool) error {
	md := snap.GetMetadata()
	if raft.IsEmptySnap(snap) {
		return nil
	}
	_, _, records, err := decodeProposal(snap.GetData())
	if err != nil {
		return fmt.Errorf("snapshot at raft index %d: %w", md.GetIndex(), err)
	}
	s, err := controller.Replay(records)
	if err != nil {
		return fmt.Errorf("snapshot at raft index %d: %w", md.GetIndex(), err)
	}
	c.state, c.history = s, records
	c.applied.index, c.applied.term = md.GetIndex(), md.GetTerm()
	c.snap.taken = md.GetIndex()
	for tp := range s.Partitions {
		c.dirty[tp] = true
	}
	for name := range s.Topics {
		c.topics[name] = true
	}
	c.complete = c.complete || fromLeader
	return nil
}

// maybeSnapshot takes a snapshot once snapshotEntries entries were applied
// since the last one. The history a new controller replays becomes the
// image too, so that it stays as short as the log.
func (c *control) maybeSnapshot() error {
	if c.snap.every == 0 || c.applied.index < c.snap.taken+c.snap.every {
		return nil
	}
	data, err := encodeSnapshot(c.state)
	if err != nil {
		return err
	}
	if err := c.store.compact(c.applied.index, data, c.snap.every/4); err != nil {
		return fmt.Errorf("snapshot at raft index %d: %w", c.applied.index, err)
	}
	c.snap.taken = c.applied.index
	c.history = c.state.Records()
	c.log.Info("raft snapshot", "index", c.applied.index, "records", len(c.history))
	return nil
}

// sendSnapshot posts a MsgSnap on a goroutine of its own (the poster's
// queue drops what it cannot deliver, and a snapshot's outcome must be
// known) and reports the outcome to raft, which holds the follower back
// until then, as its contract for MsgSnap asks.
func (c *control) sendSnapshot(m *pb.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	to := m.GetTo()
	url := "http://" + c.peers[replica.NodeID(to)] + "/raft"
	c.snap.sending.Go(func() {
		status := raft.SnapshotFinish
		if err := postSnapshot(c.snap.ctx, url, b); err != nil {
			c.log.Warn("sending a raft snapshot", "to", to, "err", err)
			status = raft.SnapshotFailure
		}
		c.do(c.snap.ctx, func() { c.rn.ReportSnapshot(to, status) })
	})
	return nil
}

func postSnapshot(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, snapshotSendTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
