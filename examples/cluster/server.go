package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// routes are the node's HTTP endpoints: the cluster's own (/replica,
// /call, /raft), and the API of the CLI and the tests.
func (nd *node) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /replica", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, replica.MaxMessageBytes))
		if err == nil {
			err = nd.n.Receive(r.Context(), b)
		}
		switch {
		case errors.Is(err, cluster.ErrBadRequest):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			// The node's loop did not take the messages: the sender posts
			// them again.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /call", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, replica.MaxMessageBytes))
		if err == nil {
			b, err = nd.n.Serve(r.Context(), b)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	})
	mux.HandleFunc("POST /raft", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, replica.MaxMessageBytes))
		if err == nil {
			err = nd.raft.Step(b)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	// POST /raft/transfer?to=N moves raft leadership, and so the active
	// controller, to node N (etcd's move-leader), if this node leads.
	mux.HandleFunc("POST /raft/transfer", func(w http.ResponseWriter, r *http.Request) {
		rep := &reply{}
		to, err := queryInt(r, "to")
		if err == nil {
			err = nd.raft.TransferLeadershipTo(replica.NodeID(to))
		}
		rep.setErr(err)
		rep.Leader = nd.n.Metadata().Controller
		writeJSON(w, rep)
	})
	nd.controllerRoutes(mux)
	mux.HandleFunc("POST /produce", nd.produce)
	mux.HandleFunc("GET /consume", nd.consume)
	mux.HandleFunc("GET /local", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nd.localLogs()) })
	mux.HandleFunc("GET /local/topics", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nd.localTopics()) })
	mux.HandleFunc("GET /metadata", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nd.metadata()) })
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, nd.status(r.Context())) })
	mux.HandleFunc("GET /{$}", nd.statusHTML)
	return mux
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

// configRequest is the body of POST /controller/configs.
type configRequest struct {
	Topic string                `json:"topic"`
	Ops   []controller.ConfigOp `json:"ops"`
	// Replace deletes the configs Ops does not name (AlterConfigs).
	Replace      bool `json:"replace,omitempty"`
	ValidateOnly bool `json:"validate_only,omitempty"`
}

// controllerRoutes are the calls the active controller decides; any node
// takes them and has its cluster.Node ask the controller.
func (nd *node) controllerRoutes(mux *http.ServeMux) {
	op := func(pattern string, fn func(ctx context.Context, r *http.Request, body []byte, rep *reply) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			rep := &reply{}
			body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
			if err == nil {
				err = fn(ctx, r, body, rep)
			}
			rep.setErr(err)
			rep.Leader = nd.n.Metadata().Controller
			writeJSON(w, rep)
		})
	}
	op("POST /controller/topics", func(ctx context.Context, _ *http.Request, body []byte, _ *reply) error {
		var req topicRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("%w: topic request: %w", replica.ErrInvalidRequest, err)
		}
		return nd.n.CreateTopic(ctx, req.Topic, cluster.TopicSpec{Assignment: req.Assignment,
			Partitions: int32(req.Partitions), ReplicationFactor: int32(req.ReplicationFactor), Unclean: req.Unclean, Configs: req.Configs})
	})
	op("POST /controller/delete-topic", func(ctx context.Context, r *http.Request, _ []byte, _ *reply) error {
		return nd.n.DeleteTopic(ctx, r.URL.Query().Get("topic"))
	})
	op("POST /controller/configs", func(ctx context.Context, _ *http.Request, body []byte, rep *reply) error {
		var req configRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("%w: config request: %w", replica.ErrInvalidRequest, err)
		}
		var err error
		rep.Configs, err = nd.n.AlterTopicConfigs(ctx, req.Topic, req.Ops, req.Replace, req.ValidateOnly)
		return err
	})
	reassignment := func(pattern string, fn func(ctx context.Context, ra assign.Reassignment, rep *reply) error) {
		op(pattern, func(ctx context.Context, _ *http.Request, body []byte, rep *reply) error {
			var ra assign.Reassignment
			if err := json.NewDecoder(bytes.NewReader(body)).Decode(&ra); err != nil {
				return fmt.Errorf("%w: reassignment JSON: %w", replica.ErrInvalidRequest, err)
			}
			return fn(ctx, ra, rep)
		})
	}
	reassignment("POST /controller/reassign", func(ctx context.Context, ra assign.Reassignment, _ *reply) error {
		return nd.n.Reassign(ctx, ra)
	})
	reassignment("POST /controller/verify", func(ctx context.Context, ra assign.Reassignment, rep *reply) error {
		lines, err := nd.n.VerifyReassignment(ctx, ra)
		for _, l := range lines {
			rep.Verify = append(rep.Verify, verifyLine{l.Topic, l.Partition, l.Status.String()})
		}
		return err
	})
	reassignment("POST /controller/cancel", func(ctx context.Context, ra assign.Reassignment, _ *reply) error {
		var tps []controller.TopicPartition
		for _, p := range ra.Partitions {
			tps = append(tps, controller.TopicPartition{Topic: p.Topic, Partition: p.Partition})
		}
		return nd.n.CancelReassignment(ctx, tps...)
	})
	op("POST /controller/assignment", func(ctx context.Context, r *http.Request, _ []byte, rep *reply) error {
		a, err := nd.n.Assignment(ctx, r.URL.Query()["topic"]...)
		rep.Assignment = &a
		return err
	})
	op("POST /controller/elect", func(ctx context.Context, r *http.Request, _ []byte, _ *reply) error {
		p, err := queryInt(r, "partition")
		if err != nil {
			return err
		}
		return nd.n.ElectLeader(ctx, r.URL.Query().Get("topic"), int32(p), false)
	})
}

func queryInt(r *http.Request, name string) (int64, error) {
	v, err := strconv.ParseInt(r.URL.Query().Get(name), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: query parameter %s: %w", replica.ErrInvalidRequest, name, err)
	}
	return v, nil
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
	return 0, fmt.Errorf("%w: acks %q: want all, 1 or 0", replica.ErrInvalidRequiredAcks, s)
}

func topicPartition(r *http.Request) (controller.TopicPartition, error) {
	p, err := queryInt(r, "partition")
	return controller.TopicPartition{Topic: r.URL.Query().Get("topic"), Partition: int32(p)}, err
}

// produce appends the body, one record batch, to a partition this node
// leads: POST /produce?topic=T&partition=P&acks=all|1|0.
func (nd *node) produce(w http.ResponseWriter, r *http.Request) {
	rep := &reply{Leader: nd.n.Metadata().Controller}
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
	res, err := nd.n.Produce(r.Context(), tp.Topic, tp.Partition, acks, batch)
	if err != nil {
		rep.setErr(err)
		return
	}
	rep.Produced = &produced{BaseOffset: res.BaseOffset, LastOffset: res.LastOffset}
}

// consume reads a replica's log from offset up to its high watermark, at
// most a thousand records: GET /consume?topic=T&partition=P&offset=O.
func (nd *node) consume(w http.ResponseWriter, r *http.Request) {
	rep := &reply{Leader: nd.n.Metadata().Controller}
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
	plog, err := nd.n.Log(tp.Topic, tp.Partition)
	if err != nil {
		rep.setErr(err)
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
