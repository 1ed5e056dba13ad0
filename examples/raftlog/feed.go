package raftlog

import (
	"sync"

	"github.com/strandlog/strand/cluster"
)

// feed is an unbounded queue of updates that one goroutine pumps into a
// channel. The raft loop pushes without ever waiting, so a Node that
// calls Propose from the goroutine that reads Updates never deadlocks
// with the loop however far behind its reading is.
type feed struct {
	out  chan cluster.MetadataUpdate
	wake chan struct{} // a push or the end since pump last looked

	mu    sync.Mutex
	queue []cluster.MetadataUpdate
	ended bool // no more pushes: close out once queue is drained
}

func newFeed() *feed {
	return &feed{out: make(chan cluster.MetadataUpdate), wake: make(chan struct{}, 1)}
}

func (f *feed) push(u cluster.MetadataUpdate) {
	f.mu.Lock()
	f.queue = append(f.queue, u)
	f.mu.Unlock()
	f.signal()
}

// end says there will be no more pushes: out is closed once what was
// pushed is delivered.
func (f *feed) end() {
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.signal()
}

func (f *feed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// pump delivers the queue to out, in order, until the feed ended and is
// drained or quit is closed; then it closes out.
func (f *feed) pump(quit <-chan struct{}) {
	defer close(f.out)
	for {
		f.mu.Lock()
		if len(f.queue) == 0 {
			ended := f.ended
			f.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-f.wake:
			case <-quit:
				return
			}
			continue
		}
		u := f.queue[0]
		f.mu.Unlock()
		select {
		case f.out <- u:
		case <-quit:
			return
		}
		f.mu.Lock()
		f.queue[0] = cluster.MetadataUpdate{}
		f.queue = f.queue[1:]
		f.mu.Unlock()
	}
}
