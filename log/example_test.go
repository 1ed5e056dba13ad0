package log_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// A durable queue: a Dir of topics, a Producer, a consumer that reads a
// Partition from its start and tails it.
func Example() {
	path, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(path)

	d, err := log.OpenDir(path, log.DirOptions{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := d.CreateTopic("orders", log.TopicConfig{Partitions: 3, Retention: log.Retention{Age: 7 * 24 * time.Hour}}); err != nil {
		panic(err)
	}
	pr, err := d.NewProducer(log.ProducerOptions{})
	if err != nil {
		panic(err)
	}
	defer pr.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The same key always lands in the same partition (Kafka's murmur2).
	var at log.Produced
	for i := range 3 {
		at, err = pr.Produce(ctx, "orders", log.AnyPartition, log.NewRecord([]byte("customer-42"), fmt.Appendf(nil, "order %d", i)))
		if err != nil {
			panic(err)
		}
	}
	p, err := d.Partition("orders", at.Partition)
	if err != nil {
		panic(err)
	}
	// Retention may have removed the first offsets: start where the log
	// starts (a consumer that resumes starts at its own saved offset).
	start, _, _, err := p.Offsets()
	if err != nil {
		panic(err)
	}
	next := start
	for r, err := range p.Records(start, log.ReadCommitted) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("offset %d: %s\n", r.Offset, r.Value)
		next = r.Offset + 1
	}
	// A tailing consumer waits for more from next on; nothing comes here.
	short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
	defer stop()
	fmt.Println(p.Wait(short, next, log.ReadCommitted))
	// Output:
	// offset 0: order 0
	// offset 1: order 1
	// offset 2: order 2
	// context deadline exceeded
}

// One goroutine keeps many records in flight with ProduceAsync; each
// partition's callbacks come in offset order, and Flush waits for them
// all.
func ExampleProducer_ProduceAsync() {
	path, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(path)
	d, err := log.OpenDir(path, log.DirOptions{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := d.CreateTopic("events", log.TopicConfig{Partitions: 2}); err != nil {
		panic(err)
	}
	pr, err := d.NewProducer(log.ProducerOptions{})
	if err != nil {
		panic(err)
	}
	defer pr.Close()

	var mu sync.Mutex
	last := map[int32]int64{0: -1, 1: -1}
	ordered, failed := true, 0
	ctx := context.Background()
	for i := range 1000 {
		rec := log.NewRecord(nil, fmt.Appendf(nil, "event %d", i))
		err := pr.ProduceAsync(ctx, "events", int32(i%2), rec, func(at log.Produced, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			ordered = ordered && at.Offset == last[at.Partition]+1
			last[at.Partition] = at.Offset
		})
		if err != nil { // not queued: unknown topic, closed producer, ctx done
			panic(err)
		}
	}
	if err := pr.Flush(ctx); err != nil {
		panic(err)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("failed:", failed, "in offset order:", ordered)
	fmt.Println("last offsets:", last[0], last[1])
	// Output:
	// failed: 0 in offset order: true
	// last offsets: 499 499
}

// A topic's configuration changes while it is in use (Kafka's
// IncrementalAlterConfigs): the open partitions take the new values at
// once. A zero field takes the Dir's default again; Unlimited turns a
// default retention off.
func ExampleDir_AlterTopicConfig() {
	path, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(path)
	d, err := log.OpenDir(path, log.DirOptions{
		Defaults: log.TopicConfig{Retention: log.Retention{Age: 7 * 24 * time.Hour}},
	})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := d.CreateTopic("audit", log.TopicConfig{}); err != nil {
		panic(err)
	}
	cfg, _ := d.TopicConfig("audit")
	fmt.Println("retention:", cfg.Retention.Age, "fsync:", cfg.Fsync)

	cfg, err = d.AlterTopicConfig("audit", func(c *log.TopicConfig) {
		c.Retention.Age = log.Unlimited // keep everything, whatever the Dir's default
		c.Fsync = log.FsyncInterval(100 * time.Millisecond)
		c.SegmentAge = time.Hour // roll hourly, so compaction or retention sees sealed segments sooner
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("unlimited retention:", cfg.Retention.Age == log.Unlimited, "fsync:", cfg.Fsync, "segment age:", cfg.SegmentAge)

	_, err = d.AlterTopicConfig("audit", func(c *log.TopicConfig) { c.SegmentBytes = 10 })
	fmt.Println(err)
	// Output:
	// retention: 168h0m0s fsync: always
	// unlimited retention: true fsync: interval:100ms segment age: 1h0m0s
	// topic audit: log: invalid option: SegmentBytes is 10, allowed 4096 to 2147483647
}

// A Log is one partition on its own, the layer under a Dir (and under
// replication): append records, read them back by offset.
func ExampleLog() {
	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)

	l, err := log.Open(dir, log.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	res, err := l.Append([]segment.Record{
		log.NewRecord([]byte("k1"), []byte("hello")),
		log.NewRecord([]byte("k2"), []byte("world")),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("appended offsets", res.BaseOffset, "to", res.LastOffset)
	for r, err := range l.Records(0, log.ReadCommitted) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s=%s\n", r.Offset, r.Key, r.Value)
	}
	// Output:
	// appended offsets 0 to 1
	// 0 k1=hello
	// 1 k2=world
}
