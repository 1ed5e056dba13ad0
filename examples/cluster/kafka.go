package main

import (
	"errors"
	"sync"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/internal/loopback"
	"github.com/strandlog/strand/replica"
)

// The internal topics' partition counts (offsets.topic.num.partitions and
// transaction.state.log.num.partitions, 50 each in Kafka): every node of
// the cluster names the same.
const (
	offsetsPartitions  = 6
	txnStatePartitions = 3
)

// saslListener is the name of the nodes' SASL listener, as Kafka's
// listener names go.
const saslListener = "SASL_PLAINTEXT"

// serveKafka opens the node's Kafka broker, which serves the node as
// broker.NodeCluster translates it, on its address (and its SASL
// listener's, if it has one) until the returned stop is called.
func (nd *node) serveKafka() (stop func(), err error) {
	opts := broker.NodeOptions{Kafka: nd.cfg.kafka, MinInsyncReplicas: nd.cfg.minISR}
	if nd.cfg.kafkaSASL != nil {
		opts.Listeners = map[string]map[replica.NodeID]string{saslListener: nd.cfg.kafkaSASL}
	}
	c, err := broker.NodeCluster(nd.n, opts)
	if err != nil {
		return nil, err
	}
	addr := nd.cfg.kafka[nd.cfg.id]
	b, err := broker.Open(broker.Config{NodeID: int32(nd.cfg.id), Advertise: addr, ClusterID: "strand-cluster", Logger: nd.log, Cluster: c,
		Users: nd.cfg.kafkaUsers, Authorize: nd.cfg.kafkaAuthorize, SuperUsers: nd.cfg.kafkaSuperUsers})
	if err != nil {
		return nil, err
	}
	listeners := map[string]broker.Listener{addr: {}} // by address
	if a, ok := nd.cfg.kafkaSASL[nd.cfg.id]; ok {
		listeners[a] = broker.Listener{Name: saslListener, SASL: []string{broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512}}
	}
	var served sync.WaitGroup
	for a, sec := range listeners {
		ln, err := loopback.Listen(a)
		if err != nil {
			err = errors.Join(err, b.Close())
			served.Wait()
			return nil, err
		}
		served.Go(func() {
			if err := b.ServeListener(ln, sec); !errors.Is(err, broker.ErrClosed) {
				nd.log.Error("kafka broker", "addr", a, "err", err)
			}
		})
		nd.log.Info("serving Kafka", "addr", a, "sasl", len(sec.SASL) > 0)
	}
	return func() {
		if err := b.Close(); err != nil {
			nd.log.Warn("closing the kafka broker", "err", err)
		}
		served.Wait()
	}, nil
}

// txnPartitionFor is the transaction state partition of a transactional
// id, as every node maps it.
func txnPartitionFor(txnID string) int32 { return group.PartitionFor(txnID, txnStatePartitions) }
