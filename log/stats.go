package log

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/metrics"
)

// Stats are a log's counters since it was opened and its current shape.
type Stats struct {
	Appends int64 // batches appended
	Records int64 // records appended
	Bytes   int64 // bytes of batches appended

	Fsyncs    int64         // syncs of segment data
	FsyncTime time.Duration // time spent in them
	MaxFsync  time.Duration // the longest one
	// FsyncLatency counts the syncs by how long each took, in
	// metrics.LatencyBuckets: the distribution an operator alerts on
	// (Kafka's LogFlushRateAndTimeMs).
	FsyncLatency metrics.HistogramSnapshot

	// CheckpointError is the error of the last attempt to write the
	// checkpoint files or a producer-state snapshot, nil if both last
	// attempts succeeded. Appends do not fail for it (both only shorten
	// recovery); the log tries again at the next CheckpointInterval or
	// roll, and Close reports it if its own attempt fails.
	CheckpointError error

	Segments  int // segments in the log
	OpenFiles int // files open: a segment's log, and its indexes once used; the lock file

	LogStartOffset, HighWatermark, LogEndOffset int64
	// LastStableOffset bounds what read_committed consumers read: the
	// first offset of the earliest open transaction, else the high
	// watermark.
	LastStableOffset int64
}

type counters struct {
	appends, records, bytes atomic.Int64
	fsyncs, fsyncNanos      atomic.Int64
	maxFsyncNanos           atomic.Int64
	fsyncLatency            metrics.Histogram
	openSegments            atomic.Int64
	checkpointErr           atomic.Pointer[error] // of the last checkpoint write
	snapshotErr             atomic.Pointer[error] // of the last snapshot write
}

func (c *counters) checkpointError() error {
	var errs []error
	for _, p := range []*atomic.Pointer[error]{&c.checkpointErr, &c.snapshotErr} {
		if err := p.Load(); err != nil {
			errs = append(errs, *err)
		}
	}
	return errors.Join(errs...)
}

func (c *counters) fsync(d time.Duration) {
	c.fsyncs.Add(1)
	c.fsyncNanos.Add(int64(d))
	c.fsyncLatency.Observe(d)
	for {
		m := c.maxFsyncNanos.Load()
		if int64(d) <= m || c.maxFsyncNanos.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.mu.RLock()
	segments, files := len(l.segs), 0
	for _, s := range l.segs {
		files += s.OpenFiles()
	}
	if !l.closed {
		files++ // the lock file
	}
	l.mu.RUnlock()
	// Segments the log let go of but readers still hold keep all three.
	files += 3 * (int(l.stats.openSegments.Load()) - segments)
	return Stats{
		Appends:          l.stats.appends.Load(),
		Records:          l.stats.records.Load(),
		Bytes:            l.stats.bytes.Load(),
		Fsyncs:           l.stats.fsyncs.Load(),
		FsyncTime:        time.Duration(l.stats.fsyncNanos.Load()),
		MaxFsync:         time.Duration(l.stats.maxFsyncNanos.Load()),
		FsyncLatency:     l.stats.fsyncLatency.Snapshot(),
		CheckpointError:  l.stats.checkpointError(),
		Segments:         segments,
		OpenFiles:        files,
		LogStartOffset:   l.logStart.Load(),
		HighWatermark:    l.hw.Load(),
		LogEndOffset:     l.leo.Load(),
		LastStableOffset: l.LastStableOffset(),
	}
}
