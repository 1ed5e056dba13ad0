package broker_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/log"
)

// benchTargets are the brokers a benchmark compares: Strand's, durable,
// with two fsync policies, and franz-go's in-memory kfake.
var benchTargets = []struct {
	name  string
	start func(b *testing.B) string
}{
	{"strand-fsync-never", func(b *testing.B) string { return benchStrand(b, log.FsyncNever()) }},
	{"strand-fsync-always", func(b *testing.B) string { return benchStrand(b, log.FsyncAlways()) }},
	{"kfake", func(b *testing.B) string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, benchTopic))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return c.ListenAddrs()[0]
	}},
}

const benchTopic = "bench"

func benchStrand(b *testing.B, fsync log.FsyncPolicy) string {
	br, err := broker.Open(broker.Config{DataDir: b.TempDir(), Fsync: fsync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	n := br.Node()
	if err := n.CreateTopic(context.Background(), benchTopic, cluster.TopicSpec{Partitions: 3, ReplicationFactor: 1}); err != nil {
		b.Fatal(err)
	}
	for id := range int32(3) { // led before the clock starts
		for _, err := n.Log(benchTopic, id); err != nil; _, err = n.Log(benchTopic, id) {
			time.Sleep(time.Millisecond)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go br.Serve(l)
	b.Cleanup(func() { br.Close() })
	return l.Addr().String()
}

// benchValue is a 1 KiB value, half random and half repeated, so that lz4
// has something to do.
func benchValue(rng *rand.Rand) []byte {
	v := make([]byte, 1024)
	for i := range 512 {
		v[i] = byte(rng.Uint32())
	}
	return v
}

func benchProduce(b *testing.B, addr string, n int) {
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.DefaultProduceTopic(benchTopic))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	errs := make(chan error, 1)
	for range n {
		c.Produce(context.Background(), &kgo.Record{Value: benchValue(rng)}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := c.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// BenchmarkProduce: franz-go produces 1 KiB records, acks=all, lz4.
func BenchmarkProduce(b *testing.B) {
	for _, target := range benchTargets {
		b.Run(target.name, func(b *testing.B) {
			addr := target.start(b)
			b.SetBytes(1024)
			b.ResetTimer()
			benchProduce(b, addr, b.N)
		})
	}
}

// BenchmarkConsume: franz-go consumes the 1 KiB records produced before.
func BenchmarkConsume(b *testing.B) {
	for _, target := range benchTargets {
		b.Run(target.name, func(b *testing.B) {
			addr := target.start(b)
			benchProduce(b, addr, b.N)
			c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(benchTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(1024)
			b.ResetTimer()
			for got := 0; got < b.N; {
				fs := c.PollFetches(context.Background())
				if err := fs.Err(); err != nil {
					b.Fatal(err)
				}
				got += fs.NumRecords()
			}
		})
	}
}
