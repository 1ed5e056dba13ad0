package log

import (
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/segment"
)

// segRef is a segment with a count of its holders: the log while the
// segment is part of it, and each reader with a Batches from it. The files
// close when the count reaches zero, and are removed then if the log
// deleted the segment, so that a reader never sees a file vanish.
type segRef struct {
	*segment.Segment
	created time.Time // for roll by age when the batches carry no timestamps
	refs    atomic.Int64
	remove  atomic.Bool
	stats   *counters
}

func (l *Log) newRef(s *segment.Segment) *segRef {
	r := &segRef{Segment: s, created: l.opts.Now(), stats: &l.stats}
	r.refs.Store(1)
	l.stats.openSegments.Add(1)
	return r
}

// acquire adds a holder; it fails if the segment's files are already
// closed.
func (r *segRef) acquire() bool {
	for {
		n := r.refs.Load()
		if n == 0 {
			return false
		}
		if r.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a holder, closing or removing the files with the last one.
func (r *segRef) release() error {
	if r.refs.Add(-1) > 0 {
		return nil
	}
	r.stats.openSegments.Add(-1)
	if r.remove.Load() {
		return r.Remove()
	}
	return r.Close()
}

// discard drops the log's hold on a segment it no longer has. With rename,
// the files get the .deleted suffix first, as Kafka's asynchronous delete
// does, so that a restart before the last reader lets go removes them.
func (r *segRef) discard(rename bool) error {
	var err error
	if rename {
		err = r.Rename(deletedSuffix)
	}
	r.remove.Store(true)
	if rerr := r.release(); err == nil {
		err = rerr
	}
	return err
}
