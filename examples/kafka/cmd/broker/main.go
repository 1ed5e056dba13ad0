// Command broker serves a Strand data directory to Kafka clients: one Kafka
// broker over Kafka's wire protocol, a cluster of one (a cluster.Node that
// is its own controller and leads every partition).
//
//	go run ./cmd/broker -listen 127.0.0.1:9092 -dir /tmp/strand-data
//
// then point any Kafka client at 127.0.0.1:9092, for example
//
//	kcat -b 127.0.0.1:9092 -L
//
// The same broker serves a three-node replicated cluster, one per node, in
// examples/cluster: cd examples/cluster && go run . up -kafka
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/log"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9092", "address to listen on")
	dir := flag.String("dir", "", "data directory (required)")
	advertise := flag.String("advertise", "", "host:port clients are told to connect to (default: the listen address)")
	partitions := flag.Int("partitions", 1, "partitions of a topic created without a count (num.partitions)")
	fsync := flag.String("fsync", "always", "fsync policy of new topics: always, never, interval:DURATION or every:MESSAGES:BYTES")
	autoCreate := flag.Bool("auto-create-topics", true, "create topics on first use (auto.create.topics.enable)")
	verbose := flag.Bool("v", false, "log every connection error")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "broker: -dir is required")
		flag.Usage()
		os.Exit(2)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(logger, *listen, *dir, *advertise, int32(*partitions), *fsync, *autoCreate); err != nil {
		logger.Error("broker stopped", "err", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger, listen, dir, advertise string, partitions int32, fsync string, autoCreate bool) error {
	policy, err := log.ParseFsyncPolicy(fsync)
	if err != nil {
		return err
	}
	b, err := broker.Open(broker.Config{
		DataDir:          dir,
		Partitions:       partitions,
		Fsync:            policy,
		Advertise:        advertise,
		AutoCreateTopics: autoCreate,
		Logger:           logger,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return errors.Join(err, b.Close())
	}
	logger.Info("broker listening", "addr", l.Addr().String(), "dir", dir)
	served := make(chan error, 1)
	go func() { served <- b.Serve(l) }()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	select {
	case sig := <-stop:
		logger.Info("broker stopping", "signal", sig.String())
	case err := <-served:
		logger.Error("broker: serve", "err", err)
	}
	return b.Close()
}
