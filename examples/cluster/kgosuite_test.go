package main

import (
	"testing"
	"time"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

// kgoShortSet is the part of franz-go's suite CI runs against the
// cluster: transactions over partitions of three leaders through a
// consume-transform-produce loop, a group, a produce too large.
const kgoShortSet = "^(TestTxnEtl|TestGroupSimple|TestClient_ProduceLargeMessages)$"

// franz-go's own tests against the three-node cluster, every topic
// replicated three times (KGO_TEST_RF 3); -kgo-suite runs all of them.
func TestKgoSuiteOnTheCluster(t *testing.T) {
	s, _ := startKafkaCluster(t)
	var seeds []string
	for _, id := range s.ids() {
		seeds = append(seeds, s.kafka[id])
	}
	kafkatest.CheckKgoSuite(t, kafkatest.KgoSuiteOptions{Seeds: seeds, Run: kgoShortSet, ReplicationFactor: 3, Records: 2000, Timeout: 10 * time.Minute})
}
