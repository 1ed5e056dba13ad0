package main

import (
	"errors"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/internal/loopback"
)

// The internal topics' partition counts (offsets.topic.num.partitions and
// transaction.state.log.num.partitions, 50 each in Kafka): every node of
// the cluster names the same.
const (
	offsetsPartitions  = 6
	txnStatePartitions = 3
)

// serveKafka opens the node's Kafka broker, which serves the node as
// broker.NodeCluster translates it, on its address until the returned
// stop is called.
func (nd *node) serveKafka() (stop func(), err error) {
	c, err := broker.NodeCluster(nd.n, broker.NodeOptions{Kafka: nd.cfg.kafka, MinInsyncReplicas: nd.cfg.minISR})
	if err != nil {
		return nil, err
	}
	addr := nd.cfg.kafka[nd.cfg.id]
	b, err := broker.Open(broker.Config{NodeID: int32(nd.cfg.id), Advertise: addr, ClusterID: "strand-cluster", Logger: nd.log, Cluster: c})
	if err != nil {
		return nil, err
	}
	ln, err := loopback.Listen(addr)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Serve(ln); !errors.Is(err, broker.ErrClosed) {
			nd.log.Error("kafka broker", "err", err)
		}
	}()
	nd.log.Info("serving Kafka", "addr", addr)
	return func() {
		if err := b.Close(); err != nil {
			nd.log.Warn("closing the kafka broker", "err", err)
		}
		<-done
	}, nil
}

// txnPartitionFor is the transaction state partition of a transactional
// id, as every node maps it.
func txnPartitionFor(txnID string) int32 { return group.PartitionFor(txnID, txnStatePartitions) }
