package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// routes are a node's HTTP endpoints: the replication protocol's and
// raft's messages between nodes, the controller's calls (served by the
// active controller), produce and consume, and the status.
func (n *node) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /replica", func(w http.ResponseWriter, r *http.Request) {
		m, err := readMessage(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msgs := []replica.Message{m}
		if b, ok := m.(*replica.Batch); ok {
			msgs = b.Messages
		}
		for _, m := range msgs {
			if _, ok := m.(*replica.LeaderAndISR); ok {
				// A node takes partition states from the controller's
				// committed records only (applyMetadata), stamped with its
				// broker epoch; one from a peer would get round KIP-380.
				http.Error(w, "partition states come from the controller's committed records, not from peers", http.StatusBadRequest)
				return
			}
		}
		// A stale or refused message is the protocol's business, not the
		// sender's; a message the driver did not take is, and the sender
		// posts it again.
		if err := n.receive(r.Context(), m, msgs); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /raft", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxFrame))
		m := new(pb.Message)
		if err == nil {
			err = proto.Unmarshal(b, m)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.ctl.step(r.Context(), m)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /controller/alter", func(w http.ResponseWriter, r *http.Request) {
		m, err := readMessage(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A node sends its messages to one destination as a Batch.
		msgs := []replica.Message{m}
		if b, ok := m.(*replica.Batch); ok {
			msgs = b.Messages
		}
		for _, m := range msgs {
			if ap, ok := m.(*replica.AlterPartition); ok {
				// The answer goes back as an AlterPartitionResponse once committed.
				n.ctl.do(r.Context(), func() {
					n.ctl.decide(func(c *controller.Controller) error { return c.AlterPartition(ap) }, func(error) {})
				})
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	// POST /raft/transfer?to=N moves raft leadership, and so the active
	// controller, to node N (etcd's move-leader), if this node leads.
	mux.HandleFunc("POST /raft/transfer", func(w http.ResponseWriter, r *http.Request) {
		rep := &reply{}
		to, err := queryInt(r, "to")
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			n.ctl.transferLeadership(ctx, replica.NodeID(to))
			if l := n.ctl.leader(); l != replica.NodeID(to) {
				err = fmt.Errorf("%w: raft leader is %d, not %d", replica.ErrNotController, l, to)
			}
		}
		rep.setErr(err)
		rep.Leader = n.ctl.leader()
		writeJSON(w, rep)
	})
	n.controllerRoutes(mux)
	n.txnRoutes(mux)
	mux.HandleFunc("POST /produce", n.produce)
	mux.HandleFunc("GET /consume", n.consume)
	mux.HandleFunc("GET /local", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.localLogs()) })
	mux.HandleFunc("GET /local/topics", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.localTopics()) })
	mux.HandleFunc("GET /metadata", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.ctl.view.Load()) })
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.status(r.Context())) })
	mux.HandleFunc("GET /{$}", n.statusHTML)
	return mux
}

// receive hands the driver the messages of m, a peer's. A fetch for a
// partition the node has no replica of (it has not applied the topic's
// metadata yet, or deleted it) is answered UNKNOWN_TOPIC_OR_PARTITION, as
// a Kafka broker answers it, rather than left for the follower to send
// again after its RequestTimeout: the follower backs off and fetches
// again.
func (n *node) receive(ctx context.Context, m replica.Message, msgs []replica.Message) error {
	var known []replica.Message
	for _, m := range msgs {
		f, ok := m.(*replica.Fetch)
		if !ok || n.partition(controller.TopicPartition{Topic: f.Topic, Partition: f.Partition}) != nil {
			known = append(known, m)
			continue
		}
		n.out.Send(&replica.FetchResponse{
			Header: replica.Header{From: f.To, To: f.From, Topic: f.Topic, Partition: f.Partition},
			ID:     f.ID, Err: replica.CodeUnknownTopicOrPartition, Leader: replica.NoNode, LeaderEpoch: f.CurrentLeaderEpoch,
			FetchOffset: f.FetchOffset, DivergingEpoch: -1, DivergingEndOffset: -1,
		})
	}
	switch {
	case len(known) == 0:
		return nil
	case len(known) < len(msgs):
		b := m.(*replica.Batch)
		m = &replica.Batch{Header: b.Header, Messages: known}
	}
	// Receive fails only when the driver did not take m: it stopped, or
	// the sender gave up.
	return n.d.Receive(ctx, m)
}

func readMessage(r io.Reader) (replica.Message, error) {
	b, err := io.ReadAll(io.LimitReader(r, replica.MaxMessageBytes))
	if err != nil {
		return nil, err
	}
	return replica.Decode(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// topicRequest is the body of POST /controller/topics.
type topicRequest struct {
	Topic             string `json:"topic"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	// Unclean enables unclean leader election for the topic.
	Unclean bool `json:"unclean"`
	// Assignment, if set, is each partition's replicas, in place of
	// Partitions and ReplicationFactor.
	Assignment [][]replica.NodeID `json:"assignment,omitempty"`
	// Configs are the topic's configs by Kafka name.
	Configs map[string]string `json:"configs,omitempty"`
}

// controllerRoutes are the calls served by the active controller; another
// node answers NOT_CONTROLLER with the leader it knows.
func (n *node) controllerRoutes(mux *http.ServeMux) {
	op := func(pattern string, fn func(r *http.Request, c *controller.Controller, rep *reply) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, n.decide(r, fn))
		})
	}
	op("POST /controller/register", func(r *http.Request, c *controller.Controller, rep *reply) error {
		id, err := queryInt(r, "node")
		if err != nil {
			return err
		}
		incarnation, err := queryInt(r, "incarnation")
		if err != nil {
			return err
		}
		if incarnation <= 0 {
			return fmt.Errorf("%w: incarnation %d, must be positive", replica.ErrInvalidRequest, incarnation)
		}
		q := r.URL.Query()
		reg := controller.Registration{Clean: q.Get("clean") == "true", Synced: parseTopics(q.Get("synced"))}
		if reg.Offline, err = parseTPs(q.Get("offline")); err != nil {
			return err
		}
		rep.BrokerEpoch, err = c.RegisterWith(replica.NodeID(id), uint64(incarnation), reg)
		return err
	})
	brokerOp := func(pattern string, fn func(r *http.Request, c *controller.Controller, id replica.NodeID, epoch int64, rep *reply) error) {
		op(pattern, func(r *http.Request, c *controller.Controller, rep *reply) error {
			id, err := queryInt(r, "node")
			if err != nil {
				return err
			}
			epoch, err := queryInt(r, "epoch")
			if err != nil {
				return err
			}
			return fn(r, c, replica.NodeID(id), epoch, rep)
		})
	}
	brokerOp("POST /controller/heartbeat", func(r *http.Request, c *controller.Controller, id replica.NodeID, epoch int64, rep *reply) error {
		// The broker's offline replicas, when it names them, first, so
		// that the heartbeat's unfencing elects none of them.
		if q := r.URL.Query(); q.Has("offline") {
			offline, err := parseTPs(q.Get("offline"))
			if err != nil {
				return err
			}
			if err := c.ReportOffline(id, epoch, offline); err != nil {
				return err
			}
		}
		var err error
		rep.CanStop, err = c.Heartbeat(id, epoch)
		return err
	})
	brokerOp("POST /controller/shutdown", func(r *http.Request, c *controller.Controller, id replica.NodeID, epoch int64, rep *reply) error {
		return c.Shutdown(id, epoch)
	})
	op("POST /controller/topics", func(r *http.Request, c *controller.Controller, rep *reply) error {
		var req topicRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return fmt.Errorf("%w: topic request: %w", replica.ErrInvalidRequest, err)
		}
		// Kafka draws the topic's id, and where the first partition's
		// leader goes; the controller takes the draws from its caller to
		// stay deterministic.
		spec := controller.TopicSpec{Unclean: req.Unclean, Configs: req.Configs}
		crand.Read(spec.ID[:])
		if req.Assignment != nil {
			return c.CreateTopicWith(req.Topic, req.Assignment, spec)
		}
		start := rand.IntN(max(len(c.State().Brokers), 1))
		return c.PlaceTopicWith(req.Topic, req.Partitions, req.ReplicationFactor, start, spec)
	})
	op("POST /controller/delete-topic", func(r *http.Request, c *controller.Controller, rep *reply) error {
		return c.DeleteTopic(r.URL.Query().Get("topic"))
	})
	op("POST /controller/configs", func(r *http.Request, c *controller.Controller, rep *reply) error {
		var req configRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return fmt.Errorf("%w: config request: %w", replica.ErrInvalidRequest, err)
		}
		var err error
		if req.Replace {
			configs := map[string]string{}
			for _, op := range req.Ops {
				configs[op.Name] = op.Value
			}
			err = c.ReplaceTopicConfigs(req.Topic, configs, req.ValidateOnly)
		} else {
			err = c.AlterTopicConfigs(req.Topic, req.Ops, req.ValidateOnly)
		}
		if t := c.State().Topics[req.Topic]; err == nil && t != nil {
			rep.Configs = maps.Clone(t.Configs)
		}
		return err
	})
	reassignment := func(pattern string, fn func(c *controller.Controller, ra assign.Reassignment, rep *reply) error) {
		op(pattern, func(r *http.Request, c *controller.Controller, rep *reply) error {
			var ra assign.Reassignment
			if err := json.NewDecoder(r.Body).Decode(&ra); err != nil {
				return fmt.Errorf("%w: reassignment JSON: %w", replica.ErrInvalidRequest, err)
			}
			return fn(c, ra, rep)
		})
	}
	reassignment("POST /controller/reassign", func(c *controller.Controller, ra assign.Reassignment, rep *reply) error {
		return c.Execute(ra)
	})
	reassignment("POST /controller/verify", func(c *controller.Controller, ra assign.Reassignment, rep *reply) error {
		lines, err := c.VerifyAll(ra)
		for _, l := range lines {
			rep.Verify = append(rep.Verify, verifyLine{l.Topic, l.Partition, l.Status.String()})
		}
		return err
	})
	reassignment("POST /controller/cancel", func(c *controller.Controller, ra assign.Reassignment, rep *reply) error {
		for _, p := range ra.Partitions {
			if err := c.CancelReassignment(controller.TopicPartition{Topic: p.Topic, Partition: p.Partition}); err != nil {
				return err
			}
		}
		return nil
	})
	op("POST /controller/assignment", func(r *http.Request, c *controller.Controller, rep *reply) error {
		a := c.Assignment(r.URL.Query()["topic"]...)
		rep.Assignment = &a
		return nil
	})
	op("POST /controller/elect", func(r *http.Request, c *controller.Controller, rep *reply) error {
		p, err := queryInt(r, "partition")
		if err != nil {
			return err
		}
		return c.ElectPreferred(controller.TopicPartition{Topic: r.URL.Query().Get("topic"), Partition: int32(p)})
	})
}

func queryInt(r *http.Request, name string) (int64, error) {
	v, err := strconv.ParseInt(r.URL.Query().Get(name), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: query parameter %s: %w", replica.ErrInvalidRequest, name, err)
	}
	return v, nil
}

// decide runs fn on the active controller, if this node has it, and
// answers once what it decided is committed.
func (n *node) decide(r *http.Request, fn func(r *http.Request, c *controller.Controller, rep *reply) error) *reply {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rep := &reply{}
	// fn runs on the control loop, maybe after this handler gave up
	// waiting: it gets a copy of the request with the body read already.
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		rep.setErr(fmt.Errorf("%w: reading the request: %w", replica.ErrInvalidRequest, err))
		return rep
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	done := make(chan struct{})
	err = n.ctl.do(ctx, func() {
		n.ctl.decide(func(c *controller.Controller) error { return fn(req, c, rep) }, func(err error) {
			rep.setErr(err)
			close(done)
		})
	})
	if err == nil {
		select {
		case <-done:
			rep.Leader = n.ctl.leader()
			return rep
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	// rep may still be written by the loop: answer with another.
	out := &reply{Leader: n.ctl.leader()}
	out.setErr(fmt.Errorf("%w: %w", replica.ErrTimeout, err))
	return out
}

func parseAcks(s string) (replica.Acks, error) {
	switch s {
	case "all", "-1":
		return replica.AcksAll, nil
	case "1":
		return replica.AcksLeader, nil
	case "0":
		return replica.AcksNone, nil
	}
	return 0, fmt.Errorf("%w: acks %q: want all, 1 or 0", replica.ErrInvalidAcks, s)
}

func topicPartition(r *http.Request) (controller.TopicPartition, error) {
	p, err := queryInt(r, "partition")
	return controller.TopicPartition{Topic: r.URL.Query().Get("topic"), Partition: int32(p)}, err
}

// produce appends the body, one record batch, to a partition this node
// leads: POST /produce?topic=T&partition=P&acks=all|1|0.
func (n *node) produce(w http.ResponseWriter, r *http.Request) {
	rep := &reply{Leader: n.ctl.leader()}
	defer writeJSON(w, rep)
	tp, err := topicPartition(r)
	if err != nil {
		rep.setErr(err)
		return
	}
	acks, err := parseAcks(r.URL.Query().Get("acks"))
	if err != nil {
		rep.setErr(err)
		return
	}
	batch, err := io.ReadAll(io.LimitReader(r.Body, log.DefaultMaxBatchBytes+1))
	if err != nil {
		rep.setErr(err)
		return
	}
	res, err := n.d.Produce(r.Context(), tp.Topic, tp.Partition, acks, batch)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		rep.setErr(err)
		return
	}
	rep.Produced = &produced{BaseOffset: res.BaseOffset, LastOffset: res.LastOffset}
}

// consume reads a replica's log from offset up to its high watermark, at
// most a thousand records: GET /consume?topic=T&partition=P&offset=O.
func (n *node) consume(w http.ResponseWriter, r *http.Request) {
	rep := &reply{Leader: n.ctl.leader()}
	defer writeJSON(w, rep)
	tp, err := topicPartition(r)
	if err != nil {
		rep.setErr(err)
		return
	}
	from, err := queryInt(r, "offset")
	if err != nil {
		rep.setErr(err)
		return
	}
	plog := n.partition(tp)
	if plog == nil {
		rep.setErr(fmt.Errorf("%w: node %d has no replica of %v", replica.ErrUnknownPartition, n.cfg.id, tp))
		return
	}
	c := &consumed{Records: []consumedRecord{}}
	if _, c.HighWatermark, c.LogEnd, err = plog.Offsets(); err != nil {
		rep.setErr(err)
		return
	}
	for rec, err := range plog.Records(from, log.ReadUncommitted) {
		if err != nil {
			rep.setErr(err)
			return
		}
		c.Records = append(c.Records, consumedRecord{Offset: rec.Offset, Key: clone(rec.Key), Value: clone(rec.Value)})
		if len(c.Records) == 1000 {
			break
		}
	}
	rep.Consumed = c
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
