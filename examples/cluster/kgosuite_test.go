package main

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

var (
	kgoSuite   = flag.Bool("kgo-suite", false, "TestKgoSuiteOnTheCluster: run all of franz-go's kgo tests against three node processes, with -kgo-records records each, instead of the short set")
	kgoRun     = flag.String("kgo-run", "", "TestKgoSuite: run the tests of franz-go's suite this -run pattern names instead of the short set")
	kgoRecords = flag.Int("kgo-records", 20000, "TestKgoSuiteOnTheCluster with -kgo-suite: KGO_TEST_RECORDS")
)

// kgoShortSet is the part of franz-go's suite CI runs against the
// cluster: transactions over partitions of three leaders through a
// consume-transform-produce loop, a group, a produce too large.
const kgoShortSet = "^(TestTxnEtl|TestGroupSimple|TestClient_ProduceLargeMessages)$"

// kgoMayNotRun are the tests that skip against a cluster without share
// groups, SCRAM and TLS, which other issues bring.
var kgoMayNotRun = []string{"TestShareGroup", "TestShareGroupETL", "TestShareGroupAckOnClose", "TestShareGroupOffsetsAdmin", "TestConsumeRegexShareSkipsInternal",
	"TestSCRAMAuth", "TestSCRAMAuthBadCredentials", "TestOAuthAuth"}

// franz-go's own tests against the three-node cluster, every topic
// replicated three times (KGO_TEST_RF 3), judge it as they judge Kafka:
// every test passes, and only those of features the cluster lacks skip.
func TestKgoSuiteOnTheCluster(t *testing.T) {
	if testing.Short() && *kgoSuite {
		t.Fatal("-kgo-suite runs the whole suite, which -short does not")
	}
	s, _ := startKafkaCluster(t)
	var seeds []string
	for _, id := range s.ids() {
		seeds = append(seeds, s.kafka[id])
	}
	opts := kafkatest.KgoSuiteOptions{Seeds: seeds, Run: kgoShortSet, ReplicationFactor: 3, Records: 2000, Timeout: 10 * time.Minute}
	if *kgoRun != "" {
		opts.Run = *kgoRun
	}
	if *kgoSuite {
		opts.Run, opts.Records, opts.Timeout = *kgoRun, *kgoRecords, 60*time.Minute
	}
	start := time.Now()
	suite := kafkatest.RunKgoSuite(t, opts)
	t.Logf("franz-go's kgo tests (%q, %d records, RF 3) in %v: %v", opts.Run, opts.Records, time.Since(start).Round(time.Second), suite)
	for _, name := range suite.Failed {
		t.Errorf("%s failed:\n%s", name, suite.FailedOutput[name])
	}
	for _, name := range suite.Skipped {
		require.Contains(t, kgoMayNotRun, name, "a test that skipped")
	}
	require.NotEmpty(t, suite.Passed)
}
