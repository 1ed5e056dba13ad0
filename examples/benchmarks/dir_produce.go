package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// batchShape is what the producers' appends looked like on average.
type batchShape struct {
	records float64       // records per append
	bytes   float64       // bytes of batch per append
	fsync   time.Duration // time in one fsync
}

// compareProducers has producers goroutines produce 100-byte records with
// unique keys into a FsyncAlways topic of producePartitions partitions,
// and sets them beside the file system's bound for the same work: one
// writer per partition, each appending batches of the size the producer's
// appends averaged with write(2) and an fdatasync(2) after each, all in
// parallel. The Producer keeps at most one append in flight per
// partition, so this is the most its appends could do on this disk.
func compareProducers(shape dirShape, value []byte) (comparison, error) {
	// Each raw run copies the shape of the producer run just before it, as
	// medians alternates them; shapes keeps every run's for the report.
	var last batchShape
	shapes := make(map[sample]batchShape)
	strand := func() (sample, error) {
		s, b, err := produceRun(shape.produceFor, value)
		last, shapes[s] = b, b
		return s, err
	}
	raw := func() (sample, error) { return rawSyncRun(shape.produceFor, last) }
	ss, err := medians(shape.reps, strand, raw)
	if err != nil {
		return comparison{}, err
	}
	b := shapes[ss[0]]
	test := fmt.Sprintf("produce %d B, fsync", smallRecordSize)
	printRate(test, fmt.Sprintf("strand %d producers", producers), ss[0], smallRecordSize,
		fmt.Sprintf("%d partitions; %.1f records, %.0f bytes per append; an fsync (%s) every %s per partition",
			producePartitions, b.records, b.bytes, b.fsync.Round(time.Microsecond), syncEvery(ss[0]).Round(time.Microsecond)))
	printRate(test, "raw write+fdatasync", ss[1], smallRecordSize,
		fmt.Sprintf("%d writers, each its own file, batches as the producer run before; an fdatasync every %s per file",
			producePartitions, syncEvery(ss[1]).Round(time.Microsecond)))
	return comparison{name: "dir-produce-64-vs-raw-fdatasync", value: ss[0].perSec() / ss[1].perSec()}, nil
}

// syncEvery is the time between the syncs of one partition, or file, in s.
func syncEvery(s sample) time.Duration {
	return s.elapsed * producePartitions / time.Duration(s.fsyncs)
}

// produceRun produces for d into a fresh Dir and returns the rate and the
// average append of the topic's partitions.
func produceRun(d time.Duration, value []byte) (s sample, b batchShape, err error) {
	dir, err := tempDir()
	if err != nil {
		return s, b, err
	}
	defer removeAfter(dir, &err)
	ld, err := log.OpenDir(dir, log.DirOptions{MaintenanceInterval: -1})
	if err != nil {
		return s, b, err
	}
	defer func() { err = errors.Join(err, ld.Close()) }()
	const topic = "produce"
	if err := ld.CreateTopic(topic, log.TopicConfig{Partitions: producePartitions, Fsync: log.FsyncAlways()}); err != nil {
		return s, b, err
	}
	pr, err := ld.NewProducer(log.ProducerOptions{})
	if err != nil {
		return s, b, err
	}
	var (
		wg      sync.WaitGroup
		records atomic.Int64
		errs    = make([]error, producers)
		ctx     = context.Background()
	)
	start := time.Now()
	for g := range producers {
		wg.Go(func() {
			for i := uint64(0); time.Since(start) < d; i++ {
				// A fresh key each time: the producer holds the record
				// until its batch is appended.
				key := binary.BigEndian.AppendUint64(nil, uint64(g)<<40|i)
				if _, errs[g] = pr.Produce(ctx, topic, log.AnyPartition, segment.Record{Key: key, Value: value}); errs[g] != nil {
					return
				}
				records.Add(1)
			}
		})
	}
	wg.Wait()
	s = sample{records: records.Load(), elapsed: time.Since(start)}
	if err := errors.Join(append(errs, pr.Close())...); err != nil {
		return s, b, fmt.Errorf("%d producers: %w", producers, err)
	}
	var st log.Stats
	for i := range int32(producePartitions) {
		p, err := ld.Partition(topic, i)
		if err != nil {
			return s, b, err
		}
		ps, err := p.Stats()
		if err != nil {
			return s, b, err
		}
		st.Appends += ps.Appends
		st.Records += ps.Records
		st.Bytes += ps.Bytes
		st.Fsyncs += ps.Fsyncs
		st.FsyncTime += ps.FsyncTime
	}
	if st.Records != s.records {
		return s, b, fmt.Errorf("the partitions hold %d records, the producers produced %d", st.Records, s.records)
	}
	s.fsyncs = st.Fsyncs
	b = batchShape{
		records: float64(st.Records) / float64(st.Appends),
		bytes:   float64(st.Bytes) / float64(st.Appends),
		fsync:   st.FsyncTime / time.Duration(st.Fsyncs),
	}
	return s, b, nil
}

// rawSyncRun has producePartitions goroutines each append batches of
// b.bytes to its own file with an fdatasync after each, for d; each batch
// counts as b.records records.
func rawSyncRun(d time.Duration, b batchShape) (s sample, err error) {
	dir, err := tempDir()
	if err != nil {
		return s, err
	}
	defer removeAfter(dir, &err)
	batch := make([]byte, int(math.Round(b.bytes)))
	for i := range batch {
		batch[i] = byte(i)
	}
	var (
		wg      sync.WaitGroup
		batches atomic.Int64
		errs    = make([]error, producePartitions)
	)
	files := make([]*os.File, producePartitions)
	for i := range files {
		if files[i], err = os.OpenFile(filepath.Join(dir, fmt.Sprintf("raw-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return s, errors.Join(err, closeFiles(files))
		}
	}
	start := time.Now()
	for i, f := range files {
		wg.Go(func() {
			for time.Since(start) < d {
				if _, errs[i] = f.Write(batch); errs[i] != nil {
					return
				}
				if errs[i] = unix.Fdatasync(int(f.Fd())); errs[i] != nil {
					return
				}
				batches.Add(1)
			}
		})
	}
	wg.Wait()
	n := batches.Load()
	s = sample{records: int64(math.Round(float64(n) * b.records)), elapsed: time.Since(start), fsyncs: n}
	return s, errors.Join(append(errs, closeFiles(files))...)
}

// closeFiles closes the files that are not nil.
func closeFiles(files []*os.File) error {
	var errs []error
	for _, f := range files {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// compareAsyncProducer sets one goroutine producing with ProduceAsync
// beside producers goroutines producing with Produce, both into a
// FsyncAlways topic of producePartitions partitions, in the same run: the
// asynchronous producer keeps many records in flight from one goroutine,
// where the synchronous ones have one each.
func compareAsyncProducer(shape dirShape, value []byte) (comparison, error) {
	async := func() (sample, error) { return asyncProduceRun(shape.produceFor, value) }
	sync := func() (sample, error) {
		s, _, err := produceRun(shape.produceFor, value)
		return s, err
	}
	ss, err := medians(shape.reps, async, sync)
	if err != nil {
		return comparison{}, err
	}
	test := fmt.Sprintf("produce %d B, fsync", smallRecordSize)
	printRate(test, "strand 1 async", ss[0], smallRecordSize,
		fmt.Sprintf("one goroutine, ProduceAsync; %d partitions; an fsync every %s per partition",
			producePartitions, syncEvery(ss[0]).Round(time.Microsecond)))
	printRate(test, fmt.Sprintf("strand %d sync", producers), ss[1], smallRecordSize,
		fmt.Sprintf("%d goroutines, Produce; an fsync every %s per partition", producers, syncEvery(ss[1]).Round(time.Microsecond)))
	return comparison{name: fmt.Sprintf("dir-produce-async-1-vs-sync-%d", producers), value: ss[0].perSec() / ss[1].perSec(), bound: 1}, nil
}

// asyncProduceRun has one goroutine produce with ProduceAsync for d into a
// fresh Dir, and counts the records whose callbacks report success, up to
// the Flush that ends the run.
func asyncProduceRun(d time.Duration, value []byte) (s sample, err error) {
	dir, err := tempDir()
	if err != nil {
		return s, err
	}
	defer removeAfter(dir, &err)
	ld, err := log.OpenDir(dir, log.DirOptions{MaintenanceInterval: -1})
	if err != nil {
		return s, err
	}
	defer func() { err = errors.Join(err, ld.Close()) }()
	const topic = "produce"
	if err := ld.CreateTopic(topic, log.TopicConfig{Partitions: producePartitions, Fsync: log.FsyncAlways()}); err != nil {
		return s, err
	}
	pr, err := ld.NewProducer(log.ProducerOptions{})
	if err != nil {
		return s, err
	}
	var (
		acked    atomic.Int64
		firstErr atomic.Pointer[error]
		ctx      = context.Background()
	)
	done := func(_ log.Produced, err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, &err)
			return
		}
		acked.Add(1)
	}
	start := time.Now()
	for i := uint64(0); time.Since(start) < d && firstErr.Load() == nil; i++ {
		key := binary.BigEndian.AppendUint64(nil, i)
		if err := pr.ProduceAsync(ctx, topic, log.AnyPartition, segment.Record{Key: key, Value: value}, done); err != nil {
			return s, err
		}
	}
	if err := pr.Flush(ctx); err != nil {
		return s, err
	}
	s = sample{records: acked.Load(), elapsed: time.Since(start)}
	if p := firstErr.Load(); p != nil {
		return s, *p
	}
	if err := pr.Close(); err != nil {
		return s, err
	}
	for i := range int32(producePartitions) {
		p, err := ld.Partition(topic, i)
		if err != nil {
			return s, err
		}
		st, err := p.Stats()
		if err != nil {
			return s, err
		}
		s.fsyncs += st.Fsyncs
	}
	return s, nil
}
