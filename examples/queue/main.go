// Command queue uses Strand as an in-process durable queue: it opens a data
// directory, creates a topic with several partitions, produces records from
// several goroutines while consumers tail every partition, and prints what
// it measured. Run it twice: the second run finds the first run's records.
//
//	go run ./examples/queue
//	go run ./examples/queue -records 200000 -size 100 -partitions 8 -fsync never
//	go run ./examples/queue -async   # one goroutine, many records in flight
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/log"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.dir, "dir", "strand-data", "data directory")
	flag.StringVar(&cfg.topic, "topic", "events", "topic")
	flag.IntVar(&cfg.records, "records", 100000, "records to produce")
	flag.IntVar(&cfg.size, "size", 100, "value size in bytes")
	flag.IntVar(&cfg.partitions, "partitions", 4, "partitions of a new topic")
	flag.IntVar(&cfg.producers, "producers", 16, "producing goroutines")
	flag.BoolVar(&cfg.async, "async", false, "produce from one goroutine with ProduceAsync instead")
	fsync := flag.String("fsync", "always", "fsync policy: always, never, interval:DURATION or every:MESSAGES:BYTES")
	flag.Parse()
	var err error
	if cfg.fsync, err = log.ParseFsyncPolicy(*fsync); err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue:", err)
		os.Exit(1)
	}
}

type config struct {
	dir, topic                           string
	records, size, partitions, producers int
	async                                bool
	fsync                                log.FsyncPolicy
}

func run(cfg config) error {
	d, err := log.OpenDir(cfg.dir, log.DirOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	err = d.CreateTopic(cfg.topic, log.TopicConfig{Partitions: int32(cfg.partitions), Fsync: cfg.fsync})
	switch {
	case err != nil && !errors.Is(err, log.ErrTopicExists):
		return err
	}
	tc, err := d.TopicConfig(cfg.topic)
	if err != nil {
		return err
	}
	if err == nil {
		fmt.Printf("topic %q in %s: %d partitions, fsync %s\n", cfg.topic, cfg.dir, tc.Partitions, tc.Fsync)
	}
	if tc.Fsync != cfg.fsync {
		fmt.Printf("(the topic keeps the fsync policy it was created with; -fsync applies to a new topic)\n")
	}

	// What earlier runs left, and where this run's records will start.
	parts := make([]*log.Partition, tc.Partitions)
	starts := make([]int64, tc.Partitions)
	var kept int64
	for i := range parts {
		if parts[i], err = d.Partition(cfg.topic, int32(i)); err != nil {
			return err
		}
		start, _, end, err := parts[i].Offsets()
		if err != nil {
			return err
		}
		starts[i] = end
		kept += end - start
	}
	if kept > 0 {
		fmt.Printf("earlier runs left %d records; the first is still readable: %s\n", kept, firstRecord(parts))
	}

	// Consumers tail every partition from where this run starts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var consumed atomic.Int64
	var consumers sync.WaitGroup
	errs := make(chan error, len(parts)+cfg.producers)
	for i, p := range parts {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			if err := tail(ctx, p, starts[i], &consumed); err != nil && !errors.Is(err, context.Canceled) {
				errs <- err
			}
		}()
	}

	pr, err := d.NewProducer(log.ProducerOptions{})
	if err != nil {
		return err
	}
	value := make([]byte, cfg.size)
	begin := time.Now()
	if cfg.async {
		cfg.producers = 1
		produceAsync(ctx, pr, cfg, value, errs)
	} else {
		produceSync(ctx, pr, cfg, value, errs)
	}
	produced := time.Since(begin)
	if err := pr.Close(); err != nil {
		return err
	}
	for consumed.Load() < int64(cfg.records) && len(errs) == 0 {
		time.Sleep(time.Millisecond)
	}
	drained := time.Since(begin)
	cancel()
	consumers.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}

	mb := float64(cfg.records*cfg.size) / (1 << 20)
	fmt.Printf("produced %d records of %d bytes from %d goroutines in %v: %.0f records/s, %.1f MiB/s\n",
		cfg.records, cfg.size, cfg.producers, produced.Round(time.Millisecond), float64(cfg.records)/produced.Seconds(), mb/produced.Seconds())
	fmt.Printf("consumed all %d while they arrived, last one %v after the start\n", consumed.Load(), drained.Round(time.Millisecond))
	var total, appends, fsyncs int64
	for i, p := range parts {
		st, err := p.Stats()
		if err != nil {
			return err
		}
		fmt.Printf("  partition %d: offsets %d to %d, %d segments\n", i, st.LogStartOffset, st.LogEndOffset, st.Segments)
		total += st.LogEndOffset - st.LogStartOffset
		appends += st.Appends
		fsyncs += st.Fsyncs
	}
	fmt.Printf("this run: %d records in %d batch appends and %d fsyncs; the topic now holds %d records\n", cfg.records, appends, fsyncs, total)
	fmt.Printf("run again to see them survive; remove %s to start over\n", cfg.dir)
	return nil
}

// produceSync produces from cfg.producers goroutines, each waiting for
// its record.
func produceSync(ctx context.Context, pr *log.Producer, cfg config, value []byte, errs chan<- error) {
	var producers sync.WaitGroup
	var next atomic.Int64
	for range cfg.producers {
		producers.Go(func() {
			for i := next.Add(1) - 1; i < int64(cfg.records); i = next.Add(1) - 1 {
				rec := log.NewRecord(fmt.Appendf(nil, "key-%d", i), value)
				if _, err := pr.Produce(ctx, cfg.topic, log.AnyPartition, rec); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	producers.Wait()
}

// produceAsync produces from this goroutine, keeping many records in
// flight, and waits for them all with Flush. A failed record is reported
// once: the callbacks of one partition come one at a time.
func produceAsync(ctx context.Context, pr *log.Producer, cfg config, value []byte, errs chan<- error) {
	var failed atomic.Bool
	done := func(_ log.Produced, err error) {
		if err != nil && failed.CompareAndSwap(false, true) {
			errs <- err
		}
	}
	for i := range cfg.records {
		rec := log.NewRecord(fmt.Appendf(nil, "key-%d", i), value)
		if err := pr.ProduceAsync(ctx, cfg.topic, log.AnyPartition, rec, done); err != nil {
			errs <- err
			return
		}
	}
	if err := pr.Flush(ctx); err != nil {
		errs <- err
	}
}

// tail consumes a partition from offset from, waiting for new records.
func tail(ctx context.Context, p *log.Partition, from int64, consumed *atomic.Int64) error {
	for {
		if err := p.Wait(ctx, from, log.ReadCommitted); err != nil {
			return err
		}
		for r, err := range p.Records(from, log.ReadCommitted) {
			if err != nil {
				return err
			}
			if r.Offset != from {
				return fmt.Errorf("partition %d: offset %d after %d", p.ID(), r.Offset, from-1)
			}
			from++
			consumed.Add(1)
		}
	}
}

func firstRecord(parts []*log.Partition) string {
	for _, p := range parts {
		start, _, _, err := p.Offsets()
		if err != nil {
			return err.Error()
		}
		for r, err := range p.Records(start, log.ReadCommitted) {
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("partition %d offset %d key %q at %s", p.ID(), r.Offset, r.Key, time.UnixMilli(r.Timestamp).Format(time.RFC3339))
		}
	}
	return "none"
}
