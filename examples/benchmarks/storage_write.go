package main

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	tidwall "github.com/tidwall/wal"
	"golang.org/x/sys/unix"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// batchWriter appends one batch of the same records again and again: a
// contender in a write comparison.
type batchWriter interface {
	writeBatch() error
	Close() error
}

// opener opens a contender in an empty directory, ready to write batches
// of payloads.
type opener func(dir string, payloads [][]byte) (batchWriter, error)

// writeRun times batches writes of payloads to a fresh contender; opening
// and closing it (which syncs, for most) are not timed.
func writeRun(open opener, payloads [][]byte, batches int) func() (sample, error) {
	return func() (s sample, err error) {
		dir, err := tempDir()
		if err != nil {
			return s, err
		}
		defer removeAfter(dir, &err)
		w, err := open(dir, payloads)
		if err != nil {
			return s, err
		}
		start := time.Now()
		for range batches {
			if err = w.writeBatch(); err != nil {
				break
			}
		}
		s = sample{records: int64(batches * len(payloads)), elapsed: time.Since(start)}
		return s, errors.Join(err, w.Close())
	}
}

// valueRecords returns records with the payloads as values: no key, and no
// timestamp, so that the log stamps the append time as a producer that
// leaves it to the broker would have it.
func valueRecords(payloads [][]byte) []segment.Record {
	recs := make([]segment.Record, len(payloads))
	for i, p := range payloads {
		recs[i].Value = p
	}
	return recs
}

type strandWriter struct {
	l    *log.Log
	recs []segment.Record
}

func openStrand(fsync log.FsyncPolicy) opener {
	return func(dir string, payloads [][]byte) (batchWriter, error) {
		l, err := log.Open(filepath.Join(dir, "bench-0"), log.Options{Fsync: fsync})
		if err != nil {
			return nil, err
		}
		return &strandWriter{l: l, recs: valueRecords(payloads)}, nil
	}
}

func (w *strandWriter) writeBatch() error {
	_, err := w.l.Append(w.recs)
	return err
}

func (w *strandWriter) Close() error { return w.l.Close() }

// strandBatchWriter hands the log batches built as a Kafka producer builds
// them, into one reused buffer, with AppendBatch: the path of a broker
// appending what producers sent, without the allocation of the batch that
// Append makes.
type strandBatchWriter struct {
	l     *log.Log
	recs  []segment.Record
	batch []byte
}

func openStrandBatches(fsync log.FsyncPolicy) opener {
	return func(dir string, payloads [][]byte) (batchWriter, error) {
		l, err := log.Open(filepath.Join(dir, "bench-0"), log.Options{Fsync: fsync})
		if err != nil {
			return nil, err
		}
		return &strandBatchWriter{l: l, recs: valueRecords(payloads)}, nil
	}
}

func (w *strandBatchWriter) writeBatch() error {
	now := time.Now().UnixMilli()
	for i := range w.recs {
		w.recs[i].Timestamp = now
	}
	b, err := segment.AppendBatch(w.batch[:0], w.recs, segment.BuildOptions{})
	if err != nil {
		return err
	}
	w.batch = b
	_, err = w.l.AppendBatch(b)
	return err
}

func (w *strandBatchWriter) Close() error { return w.l.Close() }

// rawWriter is the file system's bound: it appends the batch Strand would
// write, already encoded, with write(2), and with fdatasync(2) after each
// if sync.
type rawWriter struct {
	f     *os.File
	batch []byte
	sync  bool
}

func openRaw(sync bool) opener {
	return func(dir string, payloads [][]byte) (batchWriter, error) {
		batch, err := segment.AppendBatch(nil, valueRecords(payloads), segment.BuildOptions{})
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(dir, "raw.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		return &rawWriter{f: f, batch: batch, sync: sync}, nil
	}
}

func (w *rawWriter) writeBatch() error {
	if _, err := w.f.Write(w.batch); err != nil {
		return err
	}
	if w.sync {
		return unix.Fdatasync(int(w.f.Fd()))
	}
	return nil
}

func (w *rawWriter) Close() error { return w.f.Close() }

// tidwallWriter writes a tidwall/wal Batch of the payloads with WriteBatch:
// one write, and one fsync unless NoSync. Its other options are the
// defaults, among them 20 MB segments that it syncs as it leaves them.
type tidwallWriter struct {
	l        *tidwall.Log
	payloads [][]byte
	batch    tidwall.Batch
	next     uint64
}

func openTidwall(noSync bool) opener {
	return func(dir string, payloads [][]byte) (batchWriter, error) {
		opts := *tidwall.DefaultOptions
		opts.NoSync = noSync
		l, err := tidwall.Open(filepath.Join(dir, "tidwall"), &opts)
		if err != nil {
			return nil, err
		}
		return &tidwallWriter{l: l, payloads: payloads, next: 1}, nil
	}
}

func (w *tidwallWriter) writeBatch() error {
	for _, p := range w.payloads {
		w.batch.Write(w.next, p)
		w.next++
	}
	return w.l.WriteBatch(&w.batch)
}

func (w *tidwallWriter) Close() error { return w.l.Close() }

// raftWALWriter stores the payloads as raft log entries with StoreLogs,
// which writes them and a commit frame and syncs once.
type raftWALWriter struct {
	w    *raftwal.WAL
	logs []*raft.Log
	next uint64
}

func openRaftWAL(dir string, payloads [][]byte) (batchWriter, error) {
	w, err := raftwal.Open(dir, raftwal.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		return nil, err
	}
	logs := make([]*raft.Log, len(payloads))
	for i, p := range payloads {
		logs[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: p}
	}
	return &raftWALWriter{w: w, logs: logs, next: 1}, nil
}

func (w *raftWALWriter) writeBatch() error {
	for _, l := range w.logs {
		l.Index = w.next
		w.next++
	}
	return w.w.StoreLogs(w.logs)
}

func (w *raftWALWriter) Close() error { return w.w.Close() }
