package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// The broker suite serves franz-go's kgo client from the Strand broker of
// examples/kafka (durable, under FsyncNever and FsyncAlways) and from
// franz-go's own in-memory kfake, in one process: a producer sends 1 KiB
// records with acks=all and lz4 compression, then a consumer reads them
// all back from the start. Each run starts a fresh broker on a loopback
// port; the contenders alternate run by run.
func init() { suites["broker"] = brokerSuite }

// brokerShape sizes the broker suite.
type brokerShape struct {
	reps    int // runs of each measurement; the median counts
	records int // records produced, then consumed, per run
}

func brokerShapes(quick bool) brokerShape {
	if quick {
		return brokerShape{reps: 1, records: 2_000}
	}
	return brokerShape{reps: 5, records: 100_000}
}

const (
	brokerTopic      = "bench"
	brokerPartitions = 3
	// brokerValues distinct values take turns, more than fit in lz4's
	// 64 KiB window, so that a batch compresses as real records would and
	// not as one record repeated.
	brokerValues = 256
)

// benchBroker is a running broker: its address, how to stop it, and for
// Strand's the fsyncs of the topic's partitions so far.
type benchBroker struct {
	addr   string
	close  func() error
	fsyncs func() (int64, error)
}

type brokerStarter func() (benchBroker, error)

// startStrandBroker starts the Strand broker on a new data directory with
// the topic created.
func startStrandBroker(fsync log.FsyncPolicy) brokerStarter {
	return func() (benchBroker, error) {
		dir, err := tempDir()
		if err != nil {
			return benchBroker{}, err
		}
		b, err := broker.Open(broker.Config{DataDir: dir, Fsync: fsync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			err = createBrokerTopic(b.Node())
		}
		var l net.Listener
		if err == nil {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			if b != nil {
				err = errors.Join(err, b.Close())
			}
			removeAfter(dir, &err)
			return benchBroker{}, err
		}
		served := make(chan error, 1)
		go func() { served <- b.Serve(l) }()
		return benchBroker{addr: l.Addr().String(), fsyncs: func() (int64, error) { return topicFsyncs(b.Node()) }, close: func() (err error) {
			err = b.Close()
			if serr := <-served; !errors.Is(serr, broker.ErrClosed) {
				err = errors.Join(err, serr)
			}
			removeAfter(dir, &err)
			return err
		}}, nil
	}
}

// createBrokerTopic creates the benchmark's topic on the broker's node and
// waits until the node leads every partition, before the clock starts.
func createBrokerTopic(n *cluster.Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.CreateTopic(ctx, brokerTopic, cluster.TopicSpec{Partitions: brokerPartitions, ReplicationFactor: 1}); err != nil {
		return err
	}
	for i := range int32(brokerPartitions) {
		for {
			st, err := n.Status(ctx, brokerTopic, i)
			if err == nil && st.Role == replica.RoleLeader {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s-%d not led: %v (%w)", brokerTopic, i, err, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

func topicFsyncs(n *cluster.Node) (count int64, err error) {
	for i := range int32(brokerPartitions) {
		p, err := n.Log(brokerTopic, i)
		if err != nil {
			return 0, err
		}
		st, err := p.Stats()
		if err != nil {
			return 0, err
		}
		count += st.Fsyncs
	}
	return count, nil
}

func startKfake() (benchBroker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(brokerPartitions, brokerTopic))
	if err != nil {
		return benchBroker{}, err
	}
	return benchBroker{addr: c.ListenAddrs()[0], close: func() error { c.Close(); return nil }}, nil
}

// brokerValueSet is brokerValues values of recordSize bytes, each half
// random and half zeros, so that lz4 has something to do.
func brokerValueSet() [][]byte {
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 't', 'r', 'a', 'n', 'd', 'k', 'a', 'f', 'k', 'a'}))
	values := make([][]byte, brokerValues)
	for i := range values {
		values[i] = make([]byte, recordSize)
		for j := range recordSize / 2 {
			values[i][j] = byte(rng.Uint32())
		}
	}
	return values
}

// produceAll sends n records to addr with acks=all and lz4 and waits for
// every acknowledgement.
func produceAll(addr string, values [][]byte, n int) error {
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(brokerTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	errs := make(chan error, 1)
	for i := range n {
		c.Produce(ctx, &kgo.Record{Value: values[i%len(values)]}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := c.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errs:
		return fmt.Errorf("produce to %s: %w", addr, err)
	default:
		return nil
	}
}

// consumeAll reads n records from the start of the topic at addr and
// checks that each is one of the values produced.
func consumeAll(addr string, n int) error {
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(brokerTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for got := 0; got < n; {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return fmt.Errorf("consume from %s after %d of %d records: %w", addr, got, n, err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Value) != recordSize && bad == nil {
				bad = fmt.Errorf("consume from %s: record %d/%d has %d bytes, want %d", addr, r.Partition, r.Offset, len(r.Value), recordSize)
			}
		})
		if bad != nil {
			return bad
		}
		got += fs.NumRecords()
	}
	return nil
}

// brokerRun starts a broker, produces n records to it and, if consume,
// reads them back; it times the produce, or the consume if consume.
func brokerRun(start brokerStarter, values [][]byte, n int, consume bool) func() (sample, error) {
	return func() (s sample, err error) {
		b, err := start()
		if err != nil {
			return s, err
		}
		defer func() { err = errors.Join(err, b.close()) }()
		begin := time.Now()
		if err = produceAll(b.addr, values, n); err != nil || !consume {
			s = sample{records: int64(n), elapsed: time.Since(begin)}
			if err == nil && b.fsyncs != nil {
				s.fsyncs, err = b.fsyncs()
			}
			return s, err
		}
		begin = time.Now()
		err = consumeAll(b.addr, n)
		return sample{records: int64(n), elapsed: time.Since(begin)}, err
	}
}

func brokerSuite(quick bool) error {
	shape := brokerShapes(quick)
	values := brokerValueSet()
	fmt.Printf("kgo, %d records of %d bytes, acks=all, lz4, %d partitions, %d runs each, medians; temporary directories in %s\n",
		shape.records, recordSize, brokerPartitions, shape.reps, *logParent)
	printRateHeader()
	never, always := startStrandBroker(log.FsyncNever()), startStrandBroker(log.FsyncAlways())
	produced, err := medians(shape.reps,
		brokerRun(never, values, shape.records, false),
		brokerRun(always, values, shape.records, false),
		brokerRun(startKfake, values, shape.records, false),
	)
	if err != nil {
		return fmt.Errorf("broker suite: produce: %w", err)
	}
	const produce = "produce, acks=all"
	printRate(produce, "strand FsyncNever", produced[0], recordSize, "durable data directory")
	printRate(produce, "strand FsyncAlways", produced[1], recordSize, fmt.Sprintf("fsync at each append: %d fsyncs", produced[1].fsyncs))
	printRate(produce, "kfake", produced[2], recordSize, "in memory")
	consumed, err := medians(shape.reps,
		brokerRun(never, values, shape.records, true),
		brokerRun(startKfake, values, shape.records, true),
	)
	if err != nil {
		return fmt.Errorf("broker suite: consume: %w", err)
	}
	const consume = "consume from the start"
	printRate(consume, "strand FsyncNever", consumed[0], recordSize, "batches read from segment files")
	printRate(consume, "kfake", consumed[1], recordSize, "in memory")
	printComparisons([]comparison{
		{name: "broker-produce-vs-kfake", value: produced[0].perSec() / produced[2].perSec(), bound: 1},
		{name: "broker-produce-fsync-always-vs-kfake", value: produced[1].perSec() / produced[2].perSec()},
		{name: "broker-consume-vs-kfake", value: consumed[0].perSec() / consumed[1].perSec()},
	})
	return nil
}
