package broker_test

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

var (
	kgoSuite   = flag.Bool("kgo-suite", false, "TestKgoSuiteOnOneBroker: run all of franz-go's kgo tests, with -kgo-records records each, instead of the short set")
	kgoRun     = flag.String("kgo-run", "", "TestKgoSuite: run the tests of franz-go's suite this -run pattern names instead of the short set")
	kgoRecords = flag.Int("kgo-records", 20000, "TestKgoSuiteOnOneBroker with -kgo-suite: KGO_TEST_RECORDS")
)

// kgoShortSet is the part of franz-go's suite that CI runs against the
// broker: a produce too large for its topic, transactions through a
// consume-transform-produce loop, a group, partitions added under a
// consumer.
const kgoShortSet = "^(TestClient_ProduceLargeMessages|TestTxnEtl|TestGroupSimple|TestAddRemovePartitions|TestIssue434)$"

// kgoMayNotRun are the tests of franz-go's suite that skip against a
// broker without share groups, SCRAM and TLS, which other issues bring.
var kgoMayNotRun = []string{"TestShareGroup", "TestShareGroupETL", "TestShareGroupAckOnClose", "TestShareGroupOffsetsAdmin", "TestConsumeRegexShareSkipsInternal",
	"TestSCRAMAuth", "TestSCRAMAuthBadCredentials", "TestOAuthAuth"}

// franz-go's own tests, run against any broker named by KGO_SEEDS, are
// the judge of the broker's compatibility: every test passes, and only
// those of features the broker does not have skip.
func TestKgoSuiteOnOneBroker(t *testing.T) {
	if testing.Short() && *kgoSuite {
		t.Fatal("-kgo-suite runs the whole suite, which -short does not")
	}
	tb := startBroker(t, t.TempDir())
	opts := kafkatest.KgoSuiteOptions{Seeds: []string{tb.addr}, Run: kgoShortSet, Records: 2000, Timeout: 10 * time.Minute}
	if *kgoRun != "" {
		opts.Run = *kgoRun
	}
	if *kgoSuite {
		opts.Run, opts.Records, opts.Timeout = *kgoRun, *kgoRecords, 40*time.Minute
	}
	start := time.Now()
	s := kafkatest.RunKgoSuite(t, opts)
	t.Logf("franz-go's kgo tests (%q, %d records) in %v: %v", opts.Run, opts.Records, time.Since(start).Round(time.Second), s)
	for _, name := range s.Failed {
		t.Errorf("%s failed:\n%s", name, s.FailedOutput[name])
	}
	for _, name := range s.Skipped {
		require.Contains(t, kgoMayNotRun, name, "a test that skipped")
	}
	require.NotEmpty(t, s.Passed)
}
