package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/record"
	"golang.org/x/sys/unix"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// appender appends one record at a time and returns once it is durable;
// it is safe for concurrent use. fsyncs counts the syncs it made.
type appender interface {
	append(value []byte) error
	fsyncs() int64
	Close() error
}

// appenderOpener opens an appender in an empty directory.
type appenderOpener func(dir string) (appender, error)

// appendersRun has n goroutines append one record of value each time to a
// fresh appender for d, each waiting for its record to be durable.
func appendersRun(open appenderOpener, n int, d time.Duration, value []byte) func() (sample, error) {
	return func() (s sample, err error) {
		dir, err := tempDir()
		if err != nil {
			return s, err
		}
		defer removeAfter(dir, &err)
		a, err := open(dir)
		if err != nil {
			return s, err
		}
		var (
			wg        sync.WaitGroup
			errs      = make([]error, n)
			latencies = make([][]time.Duration, n)
		)
		start := time.Now()
		for i := range n {
			wg.Go(func() {
				for t := start; t.Sub(start) < d; {
					if errs[i] = a.append(value); errs[i] != nil {
						return
					}
					now := time.Now()
					latencies[i] = append(latencies[i], now.Sub(t))
					t = now
				}
			})
		}
		wg.Wait()
		s = sample{elapsed: time.Since(start), fsyncs: a.fsyncs()}
		s.records, s.p50, s.p99 = percentiles(latencies)
		if err := errors.Join(errs...); err != nil {
			return s, errors.Join(fmt.Errorf("%d appenders: %w", n, err), a.Close())
		}
		return s, a.Close()
	}
}

// percentiles returns how many latencies there are, and their median and
// 99th percentile.
func percentiles(latencies [][]time.Duration) (n int64, p50, p99 time.Duration) {
	all := slices.Concat(latencies...)
	if len(all) == 0 {
		return 0, 0, 0
	}
	slices.Sort(all)
	return int64(len(all)), all[len(all)/2], all[len(all)*99/100]
}

// strandAppender is a FsyncAlways log: concurrent appends share syncs by
// its group commit.
type strandAppender struct{ l *log.Log }

func openStrandAppender(dir string) (appender, error) {
	l, err := log.Open(filepath.Join(dir, "bench-0"), log.Options{Fsync: log.FsyncAlways()})
	if err != nil {
		return nil, err
	}
	return strandAppender{l}, nil
}

func (a strandAppender) append(value []byte) error {
	_, err := a.l.Append([]segment.Record{{Value: value}})
	return err
}

func (a strandAppender) fsyncs() int64 { return a.l.Stats().Fsyncs }
func (a strandAppender) Close() error  { return a.l.Close() }

// pebbleAppender is cockroachdb/pebble's WAL writer used as pebble's
// commit pipeline uses it: writers take turns to add their record
// (SyncRecord under a mutex), then wait outside it while the writer's
// flush loop syncs every record added since its last sync with one
// fdatasync.
type pebbleAppender struct {
	mu    sync.Mutex
	w     *record.LogWriter
	f     *fdatasyncFile
	queue chan struct{} // the sync queue's semaphore, as pebble's DB sizes it
}

// fdatasyncFile makes the writer's Sync an fdatasync, as pebble's own file
// system does on Linux and as every contender here syncs.
type fdatasyncFile struct {
	*os.File
	syncs atomic.Int64
}

func (f *fdatasyncFile) Sync() error {
	f.syncs.Add(1)
	return unix.Fdatasync(int(f.Fd()))
}

func openPebbleAppender(dir string) (appender, error) {
	f, err := os.Create(filepath.Join(dir, "000001.log"))
	if err != nil {
		return nil, err
	}
	a := &pebbleAppender{f: &fdatasyncFile{File: f}, queue: make(chan struct{}, record.SyncConcurrency)}
	a.w = record.NewLogWriter(a.f, 1, record.LogWriterConfig{
		QueueSemChan:        a.queue,
		WriteWALSyncOffsets: func() bool { return false },
	})
	return a, nil
}

func (a *pebbleAppender) append(value []byte) error {
	var wg sync.WaitGroup
	var syncErr error
	wg.Add(1)
	a.queue <- struct{}{} // the flush loop takes it back after the sync
	a.mu.Lock()
	_, err := a.w.SyncRecord(value, &wg, &syncErr)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	wg.Wait()
	return syncErr
}

func (a *pebbleAppender) fsyncs() int64 { return a.f.syncs.Load() }
func (a *pebbleAppender) Close() error  { return a.w.Close() }

// groupCommitAppender is the plain group commit bound: appenders hand
// their records to one loop that writes everything pending with one
// write(2) and makes it durable with one fdatasync(2), then wakes them.
type groupCommitAppender struct {
	f      *os.File
	reqs   chan groupCommitReq
	done   chan struct{}
	syncs  atomic.Int64
	closed sync.Once
}

type groupCommitReq struct {
	value []byte
	res   chan error
}

func openGroupCommitAppender(dir string) (appender, error) {
	f, err := os.OpenFile(filepath.Join(dir, "raw.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	a := &groupCommitAppender{f: f, reqs: make(chan groupCommitReq, 1024), done: make(chan struct{})}
	go a.loop()
	return a, nil
}

func (a *groupCommitAppender) loop() {
	defer close(a.done)
	var buf bytes.Buffer
	var group []groupCommitReq
	for req := range a.reqs {
		group = append(group[:0], req)
		for more := true; more; {
			select {
			case r, ok := <-a.reqs:
				if ok {
					group = append(group, r)
				}
				more = ok
			default:
				more = false
			}
		}
		buf.Reset()
		for _, r := range group {
			buf.Write(r.value)
		}
		_, err := a.f.Write(buf.Bytes())
		if err == nil {
			a.syncs.Add(1)
			err = unix.Fdatasync(int(a.f.Fd()))
		}
		for _, r := range group {
			r.res <- err
		}
	}
}

func (a *groupCommitAppender) append(value []byte) error {
	res := make(chan error, 1)
	a.reqs <- groupCommitReq{value: slices.Clip(value), res: res}
	return <-res
}

func (a *groupCommitAppender) fsyncs() int64 { return a.syncs.Load() }

func (a *groupCommitAppender) Close() error {
	a.closed.Do(func() { close(a.reqs) })
	<-a.done
	return a.f.Close()
}

// pebbleWriter writes each batch of payloads as one pebble WAL record (a
// write batch, as pebble commits one) and waits for its sync.
type pebbleWriter struct {
	a     *pebbleAppender
	batch []byte
}

func openPebble(dir string, payloads [][]byte) (batchWriter, error) {
	a, err := openPebbleAppender(dir)
	if err != nil {
		return nil, err
	}
	return &pebbleWriter{a: a.(*pebbleAppender), batch: bytes.Join(payloads, nil)}, nil
}

func (w *pebbleWriter) writeBatch() error { return w.a.append(w.batch) }
func (w *pebbleWriter) Close() error      { return w.a.Close() }
