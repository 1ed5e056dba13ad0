package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

func newPoster(peers map[replica.NodeID]string, tls *peerTLS) *poster {
	p := &poster{client: tls.httpClient(2 * time.Second), queues: map[replica.NodeID]chan post{}}
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

// httpTransport is the cluster.Transport of a node: a message goes by
// POST /replica, a request by POST /call, to the node's address.
type httpTransport struct {
	peers  map[replica.NodeID]string
	tls    *peerTLS
	client *http.Client
}

// postTimeout bounds one post of messages. A receiver answers once its
// loop has taken them, which a loaded machine may delay by seconds; a
// post given up is posted again, so a short timeout would only add load.
const postTimeout = 10 * time.Second

func newHTTPTransport(peers map[replica.NodeID]string, tls *peerTLS) *httpTransport {
	return &httpTransport{peers: peers, tls: tls, client: tls.httpClient(0)}
}

func (t *httpTransport) Send(ctx context.Context, to replica.NodeID, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	_, err := t.post(ctx, to, "/replica", msg)
	return err
}

func (t *httpTransport) Call(ctx context.Context, to replica.NodeID, req []byte) ([]byte, error) {
	return t.post(ctx, to, "/call", req)
}

func (t *httpTransport) post(ctx context.Context, to replica.NodeID, path string, body []byte) ([]byte, error) {
	addr, ok := t.peers[to]
	if !ok {
		return nil, fmt.Errorf("no node %d", to)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.tls.url(addr, path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, replica.MaxMessageBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("node %d %s: %s: %s", to, path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}
