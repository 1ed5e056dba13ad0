// Command queue uses Strand as an in-process durable queue: it opens a data
// directory, creates a topic with several partitions, and produces records
// from several goroutines while a consumer group of several members shares
// the partitions, each member committing its offsets to the directory's
// __consumer_offsets topic. It prints the group's lag as it drains. Run it
// twice: the second run finds the first run's records, and its group
// continues from the committed offsets, so it processes only the new ones.
//
//	go run ./examples/queue
//	go run ./examples/queue -records 200000 -size 100 -partitions 8 -fsync never
//	go run ./examples/queue -consumers 8 -cooperative
//	go run ./examples/queue -async   # one goroutine, many records in flight
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/consumer"
	"github.com/strandlog/strand/group"
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
	flag.StringVar(&cfg.group, "group", "queue", "consumer group")
	flag.IntVar(&cfg.consumers, "consumers", 3, "members of the consumer group")
	flag.BoolVar(&cfg.cooperative, "cooperative", false, "rebalance cooperatively (cooperative-sticky) instead of eagerly (range)")
	fsync := flag.String("fsync", "always", "fsync policy: always, never, interval:DURATION or every:MESSAGES:BYTES")
	flag.Parse()
	var err error
	if cfg.fsync, err = log.ParseFsyncPolicy(*fsync); err == nil {
		err = run(cfg, new(summary))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue:", err)
		os.Exit(1)
	}
}

type config struct {
	dir, topic, group                               string
	records, size, partitions, producers, consumers int
	async, cooperative                              bool
	fsync                                           log.FsyncPolicy
}

// summary is what the group of one run processed: records of this run, of
// earlier runs, and deliveries beyond the first.
type summary struct{ thisRun, earlier, twice int }

func run(cfg config, sum *summary) error {
	d, err := log.OpenDir(cfg.dir, log.DirOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	err = d.CreateTopic(cfg.topic, log.TopicConfig{Partitions: int32(cfg.partitions), Fsync: cfg.fsync})
	if err != nil && !errors.Is(err, log.ErrTopicExists) {
		return err
	}
	tc, err := d.TopicConfig(cfg.topic)
	if err != nil {
		return err
	}
	fmt.Printf("topic %q in %s: %d partitions, fsync %s\n", cfg.topic, cfg.dir, tc.Partitions, tc.Fsync)
	if tc.Fsync != cfg.fsync {
		fmt.Printf("(the topic keeps the fsync policy it was created with; -fsync applies to a new topic)\n")
	}

	// What earlier runs left.
	parts := make([]*log.Partition, tc.Partitions)
	var kept int64
	for i := range parts {
		if parts[i], err = d.Partition(cfg.topic, int32(i)); err != nil {
			return err
		}
		start, _, end, err := parts[i].Offsets()
		if err != nil {
			return err
		}
		kept += end - start
	}
	if kept > 0 {
		fmt.Printf("earlier runs left %d records; the first is still readable: %s\n", kept, firstRecord(parts))
	}

	// The group coordinator keeps the group's offsets in the same directory.
	// No initial rebalance delay: the members join as they start.
	s, err := group.OpenService(d, group.ServiceOptions{Partitions: 1, Config: group.Config{InitialRebalanceDelay: -1}})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before, err := s.Lag(ctx, cfg.group, log.ReadCommitted)
	if err != nil {
		return err
	}
	fmt.Printf("group %q starts at %s\n", cfg.group, describe(before))

	g := &consumerGroup{seen: map[string]int{}}
	errs := make(chan error, cfg.consumers+cfg.producers)
	for i := range cfg.consumers {
		g.members.Go(func() {
			if err := g.consume(ctx, s, d, cfg, i); err != nil {
				errs <- err
			}
		})
	}

	pr, err := d.NewProducer(log.ProducerOptions{})
	if err != nil {
		return err
	}
	runID := time.Now().Format("150405.000")
	value := make([]byte, cfg.size)
	begin := time.Now()
	produced := make(chan time.Duration, 1)
	go func() {
		if cfg.async {
			cfg.producers = 1
			produceAsync(ctx, pr, cfg, runID, value, errs)
		} else {
			produceSync(ctx, pr, cfg, runID, value, errs)
		}
		produced <- time.Since(begin)
	}()

	// The lag, as the group drains it: committed offsets against the last
	// stable offsets, so it counts what is produced and not yet committed.
	var producedIn time.Duration
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastPrint time.Time
	for {
		select {
		case err := <-errs:
			return err
		case producedIn = <-produced:
			produced = nil
			if err := pr.Close(); err != nil {
				return err
			}
		case <-tick.C:
		}
		lag, err := s.Lag(ctx, cfg.group, log.ReadCommitted)
		if err != nil {
			return err
		}
		total := totalLag(lag)
		if time.Since(lastPrint) >= 250*time.Millisecond || total == 0 && produced == nil {
			fmt.Printf("  %6v  processed %7d  lag %7d\n", time.Since(begin).Round(time.Millisecond), g.processed.Load(), total)
			lastPrint = time.Now()
		}
		if total == 0 && produced == nil {
			break
		}
	}
	drained := time.Since(begin)
	cancel()
	g.members.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}

	mb := float64(cfg.records*cfg.size) / (1 << 20)
	fmt.Printf("produced %d records of %d bytes from %d goroutines in %v: %.0f records/s, %.1f MiB/s\n",
		cfg.records, cfg.size, cfg.producers, producedIn.Round(time.Millisecond), float64(cfg.records)/producedIn.Seconds(), mb/producedIn.Seconds())
	g.mu.Lock()
	for key, n := range g.seen {
		if strings.HasPrefix(key, runID+"-") {
			sum.thisRun++
		} else {
			sum.earlier++
		}
		sum.twice += n - 1
	}
	g.mu.Unlock()
	fmt.Printf("the group of %d processed %d records, all committed %v after the start: %d of this run, %d left over by an earlier run, %d delivered twice (at least once)\n",
		cfg.consumers, g.processed.Load(), drained.Round(time.Millisecond), sum.thisRun, sum.earlier, sum.twice)
	if sum.thisRun != cfg.records {
		return fmt.Errorf("the group processed %d of this run's %d records", sum.thisRun, cfg.records)
	}
	after, err := s.Lag(context.Background(), cfg.group, log.ReadCommitted)
	if err != nil {
		return err
	}
	fmt.Printf("group %q ends at %s\n", cfg.group, describe(after))
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
	fmt.Printf("run again: the group continues from its committed offsets; remove %s to start over\n", cfg.dir)
	return nil
}

// consumerGroup is what the members of the group share: the keys they
// processed, to count what came twice.
type consumerGroup struct {
	members   sync.WaitGroup
	processed atomic.Int64
	mu        sync.Mutex
	seen      map[string]int
}

// consume runs one member until ctx ends, then closes it, which commits
// and leaves the group.
func (g *consumerGroup) consume(ctx context.Context, s *group.Service, d *log.Dir, cfg config, i int) error {
	opts := consumer.Options{
		Group: cfg.group, ClientID: fmt.Sprintf("queue-%d", i), Topics: []string{cfg.topic},
		HeartbeatInterval: 100 * time.Millisecond, AutoCommitInterval: 100 * time.Millisecond,
	}
	if cfg.cooperative {
		opts.Assignor = assign.CooperativeSticky
	}
	c, err := consumer.New(s, opts)
	if err != nil {
		return err
	}
	for m, err := range c.Records(ctx) {
		if err != nil {
			_ = c.Close(context.Background())
			return err
		}
		g.processed.Add(1)
		g.mu.Lock()
		g.seen[string(m.Key)]++
		g.mu.Unlock()
	}
	return c.Close(context.Background())
}

func totalLag(lag []group.PartitionLag) int64 {
	var total int64
	for _, l := range lag {
		total += l.Lag
	}
	return total
}

// describe says where a group stands: its committed offsets and its lag.
func describe(lag []group.PartitionLag) string {
	if len(lag) == 0 {
		return "nothing committed"
	}
	var b strings.Builder
	for _, l := range lag {
		fmt.Fprintf(&b, "%s-%d:%d ", l.Topic, l.Partition, l.Committed)
	}
	return fmt.Sprintf("committed offsets %s(lag %d)", b.String(), totalLag(lag))
}

// produceSync produces from cfg.producers goroutines, each waiting for
// its record.
func produceSync(ctx context.Context, pr *log.Producer, cfg config, runID string, value []byte, errs chan<- error) {
	var producers sync.WaitGroup
	var next atomic.Int64
	for range cfg.producers {
		producers.Go(func() {
			for i := next.Add(1) - 1; i < int64(cfg.records); i = next.Add(1) - 1 {
				rec := log.NewRecord(fmt.Appendf(nil, "%s-%d", runID, i), value)
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
func produceAsync(ctx context.Context, pr *log.Producer, cfg config, runID string, value []byte, errs chan<- error) {
	var failed atomic.Bool
	done := func(_ log.Produced, err error) {
		if err != nil && failed.CompareAndSwap(false, true) {
			errs <- err
		}
	}
	for i := range cfg.records {
		rec := log.NewRecord(fmt.Appendf(nil, "%s-%d", runID, i), value)
		if err := pr.ProduceAsync(ctx, cfg.topic, log.AnyPartition, rec, done); err != nil {
			errs <- err
			return
		}
	}
	if err := pr.Flush(ctx); err != nil {
		errs <- err
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
