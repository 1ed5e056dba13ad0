package main

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/strandlog/strand/replica"
)

// poster posts bodies to the nodes of the cluster, one queue and one
// goroutine per node, so that a sender never waits for the network. A body
// that cannot be delivered (the node is down, or its queue is full) is
// dropped: raft and the replication protocol both send again what matters.
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

// replicaTransport is the replica.Transport of a node's Driver: messages
// for a node go to its /replica, messages for the controller (To is
// NoNode) to /controller/alter on the node that leads the raft group.
type replicaTransport struct {
	peers map[replica.NodeID]string
	out   *poster
	lead  func() replica.NodeID
}

func (t *replicaTransport) Send(m replica.Message) {
	to, path := m.Head().To, "/replica"
	if to == replica.NoNode {
		to, path = t.lead(), "/controller/alter"
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return
	}
	t.out.send(to, "http://"+t.peers[to]+path, b)
}
