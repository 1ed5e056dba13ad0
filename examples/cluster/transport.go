package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/strandlog/strand/replica"
)

// poster posts raft's messages to the nodes of the cluster, one queue and
// one goroutine per node, so that the control loop never waits for the
// network. A message that cannot be delivered (the node is down, or its
// queue is full) is dropped: raft sends again what matters.
type poster struct {
	client *http.Client
	queues map[replica.NodeID]chan post
	wg     sync.WaitGroup
}

type post struct {
	url  string
	body []byte
}

func newPoster(peers map[replica.NodeID]string) *poster {
	p := &poster{client: &http.Client{Timeout: 2 * time.Second}, queues: map[replica.NodeID]chan post{}}
	for id := range peers {
		q := make(chan post, 1024)
		p.queues[id] = q
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for m := range q {
				resp, err := p.client.Post(m.url, "application/octet-stream", bytes.NewReader(m.body))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	return p
}

// send queues body for node to, to be posted to url.
func (p *poster) send(to replica.NodeID, url string, body []byte) {
	q, ok := p.queues[to]
	if !ok {
		return
	}
	select {
	case q <- post{url, body}:
	default:
	}
}

func (p *poster) close() {
	for _, q := range p.queues {
		close(q)
	}
	p.wg.Wait()
}

// Delivery of the replication protocol's messages.
const (
	// postTimeout bounds one post. A receiver answers once its driver's
	// loop has taken the messages, which a loaded machine may delay by
	// seconds; a post given up is posted again, so a short timeout would
	// only add load.
	postTimeout = 10 * time.Second
	// The backoff between the attempts to post to a node that failed.
	minBackoff, maxBackoff = 50 * time.Millisecond, time.Second
	// failingToWarn is how long posts to a destination must keep failing
	// before it is logged at WARN: a restart, or an election of the raft
	// leader, takes about that long.
	failingToWarn = 5 * time.Second
	// maxPerPost bounds the messages of one post, below what
	// replica.Decode takes in a Batch.
	maxPerPost = 4096
)

// replicaTransport is the replica.Transport of a node's Driver and of its
// controller's answers: messages for a node go to its /replica, messages
// for the controller (To is NoNode) to /controller/alter on the node that
// leads the raft group when they are posted.
//
// Nothing is dropped for want of room, and the sender never waits: each
// destination has an outbox holding at most one message per partition and
// kind (per produce for produces and their results), the newest, which
// supersedes the older one: a follower has one fetch outstanding, and
// answers only it; a leader one ISR proposal pending; an older answer is
// stale. So an outbox is bounded by the partitions, not by how slow the
// receiver is, and one goroutine per destination posts everything its
// outbox holds as one Batch, again and again until the destination takes
// it, the way Kafka's fetcher sends one request per leader for all its
// partitions. A slow receiver gets fewer, larger posts rather than a queue
// that overflows and drops fetches, which the follower would wait
// RequestTimeout to send again.
type replicaTransport struct {
	self  replica.NodeID
	peers map[replica.NodeID]string
	// lead is the raft leader as this node knows it (NoNode or 0 if none).
	lead   func() replica.NodeID
	log    *slog.Logger
	client *http.Client

	outboxes map[replica.NodeID]*outbox // by destination; NoNode: the controller
	ctx      context.Context            // ends at close, with every post
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

func newReplicaTransport(self replica.NodeID, peers map[replica.NodeID]string, lead func() replica.NodeID, logger *slog.Logger) *replicaTransport {
	t := &replicaTransport{self: self, peers: peers, lead: lead, log: logger,
		client: &http.Client{Timeout: postTimeout}, outboxes: map[replica.NodeID]*outbox{}}
	t.ctx, t.stop = context.WithCancel(context.Background())
	// The node itself is a destination too: the controller answers the
	// partitions its own node leads.
	for id := range peers {
		t.outboxes[id] = newOutbox()
	}
	t.outboxes[replica.NoNode] = newOutbox()
	for to, o := range t.outboxes {
		t.wg.Go(func() { t.deliver(to, o) })
	}
	return t
}

// Send queues m; a Batch is queued message by message, so that what it
// carries coalesces with what is already waiting.
func (t *replicaTransport) Send(m replica.Message) {
	msgs := []replica.Message{m}
	if b, ok := m.(*replica.Batch); ok {
		msgs = b.Messages
	}
	for _, m := range msgs {
		if o := t.outboxes[m.Head().To]; o != nil {
			o.put(m)
		}
	}
}

// close stops the posts, those in flight included, and waits for them.
func (t *replicaTransport) close() {
	t.stop()
	t.wg.Wait()
}

// deliver posts what o holds to destination to until close.
func (t *replicaTransport) deliver(to replica.NodeID, o *outbox) {
	backoff := minBackoff
	var failingSince, warned time.Time
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-o.wake:
		}
		for msgs := o.take(); len(msgs) > 0; msgs = o.take() {
			err := t.post(to, msgs)
			if err == nil {
				if !warned.IsZero() {
					t.log.Info("replica transport: delivering again", "to", destName(to), "failed for", time.Since(failingSince).Round(time.Millisecond))
				}
				failingSince, warned, backoff = time.Time{}, time.Time{}, minBackoff
				continue
			}
			if t.ctx.Err() != nil {
				return
			}
			if errors.Is(err, errUndeliverable) {
				t.log.Error("replica transport: messages dropped", "to", destName(to), "messages", len(msgs), "err", err)
				continue
			}
			o.putBack(msgs)
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(failingSince) >= failingToWarn && time.Since(warned) >= failingToWarn {
				warned = time.Now()
				t.log.Warn("replica transport: posting failed, retrying", "to", destName(to), "failing for", time.Since(failingSince).Round(time.Millisecond), "err", err)
			} else {
				t.log.Debug("replica transport: post failed", "to", destName(to), "err", err)
			}
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

func destName(to replica.NodeID) string {
	if to == replica.NoNode {
		return "controller"
	}
	return fmt.Sprintf("node %d", to)
}

// errUndeliverable is a post that no retry can deliver: the receiver
// refused the request as malformed, or it does not encode.
var errUndeliverable = errors.New("cluster: undeliverable messages")

// post sends msgs to a destination as Batches of at most maxPerPost
// messages, halving a Batch too large to encode. The controller's
// messages go to the raft leader of the moment, and a post to it is
// cancelled as soon as raft names another: a paused or cut-off controller
// does not hold them up for postTimeout.
func (t *replicaTransport) post(to replica.NodeID, msgs []replica.Message) error {
	for len(msgs) > 0 {
		n := min(len(msgs), maxPerPost)
		b, err := (&replica.Batch{Header: replica.Header{From: t.self, To: to}, Messages: msgs[:n]}).MarshalBinary()
		for errors.Is(err, replica.ErrMessageTooLarge) && n > 1 {
			n /= 2
			b, err = (&replica.Batch{Header: replica.Header{From: t.self, To: to}, Messages: msgs[:n]}).MarshalBinary()
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errUndeliverable, err)
		}
		if to == replica.NoNode {
			err = t.postToController(b)
		} else {
			err = t.postBody(t.ctx, to, "/replica", b)
		}
		if err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

func (t *replicaTransport) postToController(body []byte) error {
	lead := t.lead()
	if lead == replica.NoNode || lead == 0 {
		return errNotController
	}
	ctx, cancel := whileLeader(t.ctx, lead, t.lead)
	defer cancel()
	return t.postBody(ctx, lead, "/controller/alter", body)
}

func (t *replicaTransport) postBody(ctx context.Context, to replica.NodeID, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+t.peers[to]+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", errUndeliverable, err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w: node %d %s: %s: %s", errUndeliverable, to, path, resp.Status, bytes.TrimSpace(msg))
	}
	return fmt.Errorf("node %d %s: %s: %s", to, path, resp.Status, bytes.TrimSpace(msg))
}

// leaderPoll is how often a call to the controller checks that raft still
// names its node.
const leaderPoll = 20 * time.Millisecond

// whileLeader returns a context that ends with ctx, or as soon as lead no
// longer names leader: a call to a controller that raft replaced gives up
// then, to be made again at the new one, rather than waiting out its
// timeout on a node that may be paused or cut off.
func whileLeader(ctx context.Context, leader replica.NodeID, lead func() replica.NodeID) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if l := lead(); l != leader {
					cancel(fmt.Errorf("%w: raft moved from node %d to %d", errControllerMoved, leader, l))
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// errControllerMoved ends a call to a node raft no longer names leader.
var errControllerMoved = fmt.Errorf("%w: the controller moved", replica.ErrNotController)

// msgKey names the message a newer one replaces in an outbox.
type msgKey struct {
	kind      kind
	topic     string
	partition int32
	// id tells apart the produces, and their results, which no later
	// one replaces; and any message of a kind not named below.
	id uint64
}

type kind uint8

const (
	kindOther kind = iota
	kindFetch
	kindFetchResponse
	kindAlterPartition
	kindAlterPartitionResponse
	kindProduce
	kindProduceResult
)

// outbox holds the messages waiting for one destination, at most one per
// key, in the order their keys were first queued.
type outbox struct {
	mu    sync.Mutex
	order []msgKey
	msgs  map[msgKey]replica.Message
	seq   uint64 // numbers the messages that nothing replaces
	wake  chan struct{}
}

func newOutbox() *outbox {
	return &outbox{msgs: map[msgKey]replica.Message{}, wake: make(chan struct{}, 1)}
}

func (o *outbox) key(m replica.Message) msgKey {
	h := m.Head()
	k := msgKey{topic: h.Topic, partition: h.Partition}
	switch m := m.(type) {
	case *replica.Fetch:
		k.kind = kindFetch
	case *replica.FetchResponse:
		k.kind = kindFetchResponse
	case *replica.AlterPartition:
		k.kind = kindAlterPartition
	case *replica.AlterPartitionResponse:
		k.kind = kindAlterPartitionResponse
	case *replica.Produce:
		k.kind, k.id = kindProduce, m.ID
	case *replica.ProduceResult:
		k.kind, k.id = kindProduceResult, m.ID
	default:
		o.seq++
		k.id = o.seq
	}
	return k
}

// put queues m in place of the message of its key, if one waits.
func (o *outbox) put(m replica.Message) {
	o.mu.Lock()
	k := o.key(m)
	if _, ok := o.msgs[k]; !ok {
		o.order = append(o.order, k)
	}
	o.msgs[k] = m
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take empties the outbox.
func (o *outbox) take() []replica.Message {
	o.mu.Lock()
	defer o.mu.Unlock()
	msgs := make([]replica.Message, len(o.order))
	for i, k := range o.order {
		msgs[i] = o.msgs[k]
	}
	o.order, o.msgs = nil, map[msgKey]replica.Message{}
	return msgs
}

// putBack queues again, ahead of what came since, the messages of a post
// that failed, but for those a newer one replaced meanwhile.
func (o *outbox) putBack(msgs []replica.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var order []msgKey
	for _, m := range msgs {
		k := o.key(m)
		if _, newer := o.msgs[k]; !newer {
			o.msgs[k] = m
			order = append(order, k)
		}
	}
	o.order = append(order, o.order...)
}
