package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// reply is what every controller endpoint answers, as JSON: a Kafka error
// code (0 for none) and what the call returns.
type reply struct {
	Code  replica.Code `json:"code"`
	Error string       `json:"error,omitempty"`
	// Leader is the raft leader as the answering node knows it: where to
	// ask again after NOT_CONTROLLER.
	Leader      replica.NodeID       `json:"leader"`
	BrokerEpoch int64                `json:"broker_epoch,omitempty"`
	CanStop     bool                 `json:"can_stop,omitempty"`
	Assignment  *assign.Reassignment `json:"assignment,omitempty"`
	Verify      []verifyLine         `json:"verify,omitempty"`
	Produced    *produced            `json:"produced,omitempty"`
	Consumed    *consumed            `json:"consumed,omitempty"`
	// Configs are a topic's configs after a change of them.
	Configs map[string]string `json:"configs,omitempty"`
}

func (r *reply) setErr(err error) {
	if err != nil {
		r.Code, r.Error = replica.CodeOf(err), err.Error()
	}
}

// err returns the reply's error, a *cluster.RemoteError that errors.Is
// matches against every package's sentinel of its code.
func (r *reply) err() error {
	if r.Code == kafkaerr.None && r.Error == "" {
		return nil
	}
	return &cluster.RemoteError{Code: r.Code, Message: r.Error}
}

// verifyLine is one partition of a reassignment verify.
type verifyLine struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Status    string `json:"status"`
}

// produced is what a produce answers.
type produced struct {
	BaseOffset int64 `json:"base_offset"`
	LastOffset int64 `json:"last_offset"`
}

// consumed is what a consume answers: records from the requested offset
// up to the high watermark.
type consumed struct {
	Records       []consumedRecord `json:"records"`
	HighWatermark int64            `json:"high_watermark"`
	LogEnd        int64            `json:"log_end"`
}

type consumedRecord struct {
	Offset int64  `json:"offset"`
	Key    []byte `json:"key,omitempty"`
	Value  []byte `json:"value"`
}

// client calls the nodes over HTTP: the CLI's and the tests'.
type client struct {
	http  *http.Client
	peers map[replica.NodeID]string
	tls   *peerTLS
}

func newClient(peers map[replica.NodeID]string, tls *peerTLS) *client {
	return &client{http: tls.httpClient(10 * time.Second), peers: peers, tls: tls}
}

// of is a client of these of the nodes only, sharing c's connections.
func (c *client) of(peers map[replica.NodeID]string) *client {
	return &client{http: c.http, peers: peers, tls: c.tls}
}

func (c *client) url(node replica.NodeID, path string) string {
	return c.tls.url(c.peers[node], path)
}

// do sends a request to a node and decodes its JSON reply into out; a
// reply's error code becomes a *cluster.RemoteError.
func (c *client) do(ctx context.Context, method string, node replica.NodeID, path string, body []byte, out *reply) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url(node, path), bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r reply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&r); err != nil {
		return fmt.Errorf("node %d %s: %s: %w", node, path, resp.Status, err)
	}
	if out != nil {
		*out = r
	}
	return r.err()
}

// metadata returns the committed metadata as node sees it or, for
// NoNode, the most recent that a node answers: a node that has just
// restarted may not have replayed the raft log yet.
func (c *client) metadata(ctx context.Context, node replica.NodeID) (*metadata, error) {
	ids := []replica.NodeID{node}
	if node == replica.NoNode {
		ids = slices.Sorted(maps.Keys(c.peers))
	}
	var best *metadata
	var errs []error
	for _, id := range ids {
		md := new(metadata)
		if err := c.getJSON(ctx, id, "/metadata", md); err != nil {
			errs = append(errs, err)
			continue
		}
		if best == nil || md.RaftTerm > best.RaftTerm || md.RaftTerm == best.RaftTerm && md.RaftApplied > best.RaftApplied {
			best = md
		}
	}
	if best == nil {
		return nil, errors.Join(errs...)
	}
	return best, nil
}

func (c *client) getJSON(ctx context.Context, node replica.NodeID, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(node, path), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node %d %s: %s", node, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// errNotController answers a call when no node knows the active
// controller.
var errNotController = fmt.Errorf("%w: no node knows the active controller", replica.ErrNotController)

// findController returns the node the metadata names the active
// controller: any node takes the controller's calls and forwards them,
// but the controller's own node answers soonest.
func (c *client) findController(ctx context.Context) (replica.NodeID, error) {
	md, err := c.metadata(ctx, replica.NoNode)
	if err != nil {
		return 0, err
	}
	if md.RaftLeader == replica.NoNode {
		return 0, errNotController
	}
	return md.RaftLeader, nil
}

// call posts to the active controller once.
func (c *client) call(ctx context.Context, path string, body any, out *reply) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	id, err := c.findController(ctx)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, id, path, b, out)
}

// retriable says whether a call may succeed if made again: the controller
// moved or is being elected, or a node did not answer.
func retriable(err error) bool {
	var re *cluster.RemoteError
	return !errors.As(err, &re) || errors.Is(err, replica.ErrNotController) || errors.Is(err, replica.ErrNotLeaderOrFollower)
}

// callRetry calls the active controller until it answers or ctx ends.
func (c *client) callRetry(ctx context.Context, path string, body any, out *reply) error {
	for {
		err := c.call(ctx, path, body, out)
		if err == nil || !retriable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// produce sends one batch of values to node, which should lead the
// partition.
func (c *client) produce(ctx context.Context, node replica.NodeID, topic string, partition int32, acks string, values ...[]byte) (produced, error) {
	recs := make([]segment.Record, len(values))
	for i, v := range values {
		recs[i] = segment.Record{Value: v, Timestamp: time.Now().UnixMilli()}
	}
	batch, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	if err != nil {
		return produced{}, err
	}
	var r reply
	q := url.Values{"topic": {topic}, "partition": {fmt.Sprint(partition)}, "acks": {acks}}
	if err := c.do(ctx, http.MethodPost, node, "/produce?"+q.Encode(), batch, &r); err != nil {
		return produced{}, err
	}
	if r.Produced == nil {
		return produced{}, fmt.Errorf("node %d: a produce reply without offsets", node)
	}
	return *r.Produced, nil
}

// leaderOf returns a partition's leader as the metadata says.
func (c *client) leaderOf(ctx context.Context, topic string, partition int32) (replica.NodeID, error) {
	md, err := c.metadata(ctx, replica.NoNode)
	if err != nil {
		return 0, err
	}
	p := md.partition(topic, partition)
	if p == nil || p.Leader == replica.NoNode {
		return 0, fmt.Errorf("%w: %s-%d has no leader", replica.ErrNotLeaderOrFollower, topic, partition)
	}
	return p.Leader, nil
}

// consume reads a partition on node from offset up to its high watermark.
func (c *client) consume(ctx context.Context, node replica.NodeID, topic string, partition int32, offset int64) (consumed, error) {
	var r reply
	q := url.Values{"topic": {topic}, "partition": {fmt.Sprint(partition)}, "offset": {fmt.Sprint(offset)}}
	if err := c.do(ctx, http.MethodGet, node, "/consume?"+q.Encode(), nil, &r); err != nil {
		return consumed{}, err
	}
	if r.Consumed == nil {
		return consumed{}, fmt.Errorf("node %d: a consume reply without records", node)
	}
	return *r.Consumed, nil
}

// consumeAll reads a partition on node from offset 0 up to the high
// watermark it has when the read starts.
func (c *client) consumeAll(ctx context.Context, node replica.NodeID, topic string, partition int32) ([]consumedRecord, error) {
	var all []consumedRecord
	var next int64
	hw := int64(-1)
	for hw < 0 || next < hw {
		got, err := c.consume(ctx, node, topic, partition, next)
		if err != nil {
			return nil, err
		}
		if hw < 0 {
			hw = got.HighWatermark
		}
		if len(got.Records) == 0 {
			break
		}
		for _, r := range got.Records {
			if r.Offset < hw {
				all = append(all, r)
			}
		}
		next = got.Records[len(got.Records)-1].Offset + 1
	}
	return all, nil
}
