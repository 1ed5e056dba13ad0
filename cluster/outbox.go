package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strandlog/strand/replica"
)

// The node's messages to each destination wait in an outbox, which holds
// at most one message per partition and kind (per produce for produces
// and their results), the newest, which supersedes the older one: a
// follower has one fetch outstanding, and answers only it; a leader one
// ISR proposal pending; an older answer is stale. One goroutine per
// destination sends everything its outbox holds as one replica.Envelope,
// again and again until the destination takes it, as Kafka's fetcher
// sends one request per leader for all its partitions. So nothing is
// dropped for want of room, the loops never wait for the network, and a
// slow receiver gets fewer, larger sends rather than a queue that
// overflows and drops fetches, which the follower would wait
// RequestTimeout to send again. The controller's messages (To NoNode) have
// an outbox of their own, sent to the metadata log's leader of the moment.

const (
	// The backoff between the attempts to send to a node that failed.
	minBackoff, maxBackoff = 50 * time.Millisecond, time.Second
	// failingToWarn is how long sends to a destination must keep failing
	// before it is logged at WARN: a restart, or an election of the
	// metadata log's leader, takes about that long.
	failingToWarn = 5 * time.Second
	// maxPerSend bounds the messages of one send, below what
	// replica.Decode takes in a Batch.
	maxPerSend = 4096
	// leaderPoll is how often a send to the controller checks that the
	// metadata log still names its node.
	leaderPoll = 20 * time.Millisecond
)

// outboxes are a node's outboxes, by destination.
type outboxes struct {
	n      *Node
	mu     sync.Mutex
	boxes  map[replica.NodeID]*outbox
	ctx    context.Context // ends at close, with every send
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newOutboxes(n *Node) *outboxes {
	o := &outboxes{n: n, boxes: map[replica.NodeID]*outbox{}}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	return o
}

// put queues m for its destination, starting that destination's sender
// on its first message.
func (o *outboxes) put(m replica.Message) {
	to := m.Head().To
	o.mu.Lock()
	box := o.boxes[to]
	if box == nil {
		if o.ctx.Err() != nil {
			o.mu.Unlock()
			return
		}
		box = newOutbox()
		o.boxes[to] = box
		o.wg.Go(func() { o.deliver(to, box) })
	}
	o.mu.Unlock()
	box.put(m)
}

// close stops the sends, those in flight included, and waits for them.
func (o *outboxes) close() {
	o.mu.Lock()
	o.cancel()
	o.mu.Unlock()
	o.wg.Wait()
}

// deliver sends what box holds to destination to until close.
func (o *outboxes) deliver(to replica.NodeID, box *outbox) {
	log := o.n.log
	backoff := minBackoff
	var failingSince, warned time.Time
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-box.wake:
		}
		for msgs := box.take(); len(msgs) > 0; msgs = box.take() {
			err := o.send(to, msgs)
			if err == nil {
				if !warned.IsZero() {
					log.Info("delivering again", "to", destName(to), "failed for", time.Since(failingSince).Round(time.Millisecond))
				}
				failingSince, warned, backoff = time.Time{}, time.Time{}, minBackoff
				continue
			}
			if o.ctx.Err() != nil {
				return
			}
			if errors.Is(err, errUndeliverable) {
				log.Error("messages dropped", "to", destName(to), "messages", len(msgs), "err", err)
				continue
			}
			box.putBack(msgs)
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(failingSince) >= failingToWarn && time.Since(warned) >= failingToWarn {
				warned = time.Now()
				log.Warn("sending failed, retrying", "to", destName(to), "failing for", time.Since(failingSince).Round(time.Millisecond), "err", err)
			} else {
				log.Debug("send failed", "to", destName(to), "err", err)
			}
			select {
			case <-o.ctx.Done():
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

// errUndeliverable is a send no retry can deliver: the messages do not
// encode.
var errUndeliverable = errors.New("cluster: undeliverable messages")

// send sends msgs to a destination as Batches of at most maxPerSend
// messages, halving a Batch too large to encode. The controller's
// messages go to the metadata log's leader of the moment, and a send to
// it is cancelled as soon as another leads: a paused or cut-off
// controller does not hold them up.
func (o *outboxes) send(to replica.NodeID, msgs []replica.Message) error {
	n := o.n
	ctx, dest := o.ctx, to
	if to == replica.NoNode {
		if dest = n.ctl.leader(); dest == replica.NoNode {
			return errNotController
		}
		var cancel context.CancelFunc
		ctx, cancel = whileLeader(ctx, dest, n.ctl.leader)
		defer cancel()
	}
	for len(msgs) > 0 {
		k := min(len(msgs), maxPerSend)
		batch := func() ([]byte, error) {
			return (&replica.Envelope{Header: replica.Header{From: n.cfg.ID, To: dest}, Messages: addressed(msgs[:k], dest)}).MarshalBinary()
		}
		b, err := batch()
		for errors.Is(err, replica.ErrMessageTooLarge) && k > 1 {
			k /= 2
			b, err = batch()
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errUndeliverable, err)
		}
		if dest == n.cfg.ID {
			m, err := replica.Decode(b)
			if err == nil {
				err = n.receive(ctx, m)
			}
			if err != nil {
				return err
			}
		} else if err := n.cfg.Transport.Send(ctx, dest, b); err != nil {
			return err
		}
		msgs = msgs[k:]
	}
	return nil
}

// addressed returns msgs addressed to dest: a message for the controller
// (To NoNode) as a copy, since its sender keeps it to send again, maybe to
// another controller.
func addressed(msgs []replica.Message, dest replica.NodeID) []replica.Message {
	out := make([]replica.Message, len(msgs))
	for i, m := range msgs {
		if ap, ok := m.(*replica.AlterPartition); ok && ap.To != dest {
			c := *ap
			c.To = dest
			m = &c
		}
		out[i] = m
	}
	return out
}

// whileLeader returns a context that ends with ctx, or as soon as lead no
// longer names leader: a send to a controller that the metadata log
// replaced gives up then, to be made again at the new one, rather than
// waiting out its timeout on a node that may be paused or cut off.
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
					cancel(fmt.Errorf("%w: the metadata log's lead moved from node %d to %d", replica.ErrNotController, leader, l))
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// msgKey names the message a newer one replaces in an outbox.
type msgKey struct {
	kind      msgKind
	topic     string
	partition int32
	// id tells apart the produces, and their results, which no later
	// one replaces; and any message of a kind not named below.
	id uint64
}

type msgKind uint8

const (
	msgOther msgKind = iota
	msgFetch
	msgFetchResponse
	msgAlterPartition
	msgAlterPartitionResponse
	msgProduce
	msgProduceResult
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
		k.kind = msgFetch
	case *replica.FetchResponse:
		k.kind = msgFetchResponse
	case *replica.AlterPartition:
		k.kind = msgAlterPartition
	case *replica.AlterPartitionResponse:
		k.kind = msgAlterPartitionResponse
	case *replica.Produce:
		k.kind, k.id = msgProduce, m.ID
	case *replica.ProduceResult:
		k.kind, k.id = msgProduceResult, m.ID
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

// putBack queues again, ahead of what came since, the messages of a send
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
