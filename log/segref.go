package log

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
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

	// The segment's .txnindex (see producerstate.go).
	fs        vfs.FS
	dir       string
	txnMu     sync.Mutex
	txn       *idempotence.TxnIndex // nil until first needed
	txnSuffix string                // after the file's name, as Rename left it
	noAborted atomic.Bool           // the index is open and has no entries
}

func (l *Log) newRef(s *segment.Segment) *segRef {
	r := &segRef{Segment: s, created: l.opts.Now(), stats: &l.stats, fs: l.fs, dir: l.dir}
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
	remove := r.remove.Load()
	err := r.closeTxnIndex(remove)
	if remove {
		return errors.Join(r.Remove(), err)
	}
	return errors.Join(r.Close(), err)
}

// rename renames the segment's files, its .txnindex included.
func (r *segRef) rename(suffix string) error {
	return errors.Join(r.Rename(suffix), r.renameTxnIndex(suffix))
}

// discard drops the log's hold on a segment it no longer has. With rename,
// the files get the .deleted suffix first, as Kafka's asynchronous delete
// does, so that a restart before the last reader lets go removes them.
func (r *segRef) discard(rename bool) error {
	var err error
	if rename {
		err = r.rename(deletedSuffix)
	}
	r.remove.Store(true)
	if rerr := r.release(); err == nil {
		err = rerr
	}
	return err
}
