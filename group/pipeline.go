package group

import (
	"fmt"
	"slices"

	"github.com/strandlog/strand/internal/coordinator"
	"github.com/strandlog/strand/segment"
)

// This file is the Service's pipelined write. A Ready of plain records is
// appended with log.Partition.AppendQueued, and as soon as that append
// holds its place in the log's order another goroutine may write the next
// Ready, without waiting for the first to be durable. Concurrent commits to one offsets partition so share one
// append and its fsync (a Ready), and two appends overlap, one written
// while the other syncs, as the log pipelines its own appenders. A Ready
// is answered once its records and every record before them are appended,
// so answers still come in log order and only for what is durable under
// FsyncAlways. A topic synced apart, and transactional records, which go
// in their producer's batches, are written one Ready at a time, after the
// writes in flight.

// maxInflight bounds the appends in flight on one partition; the log
// groups what comes meanwhile into its next write.
const maxInflight = 16

// canLead reports whether a goroutine may write the partition's Readys
// now: none is writing, there is something to write, and what comes next
// need not wait for the writes in flight.
func (s *Service) canLead(sp *servicePartition) bool {
	if sp.writing || sp.State() != coordinator.Active || !sp.c.HasReady() {
		return false
	}
	return len(sp.inflight) == 0 || sp.failed == nil && len(sp.inflight) < maxInflight && s.pipelines(sp, sp.c.ready)
}

// pipelines reports whether a Ready is written without waiting for the
// writes before it. A replicated offsets log is written through its
// cluster (ServiceOptions.Append), one write at a time.
func (s *Service) pipelines(sp *servicePartition, rd Ready) bool {
	return s.repl == nil && !sp.sync && !slices.ContainsFunc(rd.Records, func(r Record) bool { return r.Producer != nil })
}

// pipeline appends a Ready; it is called with mu held, and releases it
// while it appends. The partition is marked writing until the append holds
// its place in the log's order, so that the next Ready follows this one;
// then the next writer may start while this append syncs.
func (s *Service) pipeline(sp *servicePartition, w *pendingWrite) {
	sp.inflight = append(sp.inflight, w)
	if len(w.rd.Records) == 0 {
		w.done = true
		s.settleInflight(sp)
		return
	}
	sp.writing = true
	sp.Unlock()
	err := s.appendQueued(sp, w, func() {
		// Called with the log's queue locked. No goroutine holding mu
		// waits for that lock: the Service's other appends (flush's,
		// under mu, and those of transactional records and markers)
		// wait until nothing is in flight, and w is.
		sp.Lock()
		w.queued, sp.writing = true, false
		sp.idle.Signal() // a waiter may write next; no answer came
		sp.Unlock()
	})
	sp.Lock()
	if !w.queued {
		sp.writing = false // it failed before it had its place
	}
	w.err, w.done = err, true
	s.settleInflight(sp)
	sp.idle.Broadcast()
}

// appendQueued appends a Ready's plain records in one batch at the offsets
// the coordinator gave them.
func (s *Service) appendQueued(sp *servicePartition, w *pendingWrite, queued func()) error {
	out := make([]segment.Record, len(w.rd.Records))
	for i, r := range w.rd.Records {
		out[i] = segment.Record{Timestamp: w.ts, Key: r.Key, Value: r.Value}
	}
	res, err := sp.p.AppendQueued(out, queued)
	if err == nil && res.BaseOffset != w.base {
		err = fmt.Errorf("records appended at offset %d, the coordinator expected %d", res.BaseOffset, w.base)
	}
	return err
}

// settleInflight answers the writes in flight that are done, in order. A
// failed write fails every write after it, since what the coordinator did
// after it is not what the log holds; once none is in flight the
// coordinator is rolled back, as settle does after a write of its own
// fails.
func (s *Service) settleInflight(sp *servicePartition) {
	for len(sp.inflight) > 0 && sp.inflight[0].done {
		w := sp.inflight[0]
		sp.inflight[0] = nil
		sp.inflight = sp.inflight[1:]
		if w.err != nil && sp.failed == nil {
			sp.failed = s.appendFailed(sp, w.err)
		}
		deliver(sp.waiting, w.rd.Responses, sp.failed)
	}
	if len(sp.inflight) > 0 || sp.failed == nil {
		return
	}
	err := sp.failed
	sp.failed = nil
	s.rollback(sp, err)
}
