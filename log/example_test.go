package log_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// A Log is one partition: append records, read them back by offset.
func ExampleLog() {
	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)

	l, err := log.Open(dir, log.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	res, err := l.Append([]segment.Record{
		{Key: []byte("k1"), Value: []byte("hello")},
		{Key: []byte("k2"), Value: []byte("world")},
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

// A Dir is a durable queue: topics, partitions, a producer, a consumer
// that tails a partition.
func ExampleDir() {
	path, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(path)

	d, err := log.OpenDir(path, log.DirOptions{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := d.CreateTopic("orders", log.TopicConfig{Partitions: 3}); err != nil {
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
		at, err = pr.Produce(ctx, "orders", log.AnyPartition, segment.Record{Key: []byte("customer-42"), Value: fmt.Appendf(nil, "order %d", i)})
		if err != nil {
			panic(err)
		}
	}
	p, err := d.Partition("orders", at.Partition)
	if err != nil {
		panic(err)
	}
	if err := p.Wait(ctx, at.Offset, log.ReadCommitted); err != nil {
		panic(err)
	}
	for r, err := range p.Records(0, log.ReadCommitted) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("offset %d: %s\n", r.Offset, r.Value)
	}
	// Output:
	// offset 0: order 0
	// offset 1: order 1
	// offset 2: order 2
}
