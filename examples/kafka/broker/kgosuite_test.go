package broker_test

import (
	"testing"
	"time"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

// kgoShortSet is the part of franz-go's suite that CI runs against the
// broker: a produce too large for its topic, transactions through a
// consume-transform-produce loop, a group, partitions added under a
// consumer.
const kgoShortSet = "^(TestClient_ProduceLargeMessages|TestTxnEtl|TestGroupSimple|TestAddRemovePartitions|TestIssue434)$"

// franz-go's own tests, run against any broker named by KGO_SEEDS, are
// the judge of the broker's compatibility; -kgo-suite runs all of them.
func TestKgoSuiteOnOneBroker(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	kafkatest.CheckKgoSuite(t, kafkatest.KgoSuiteOptions{Seeds: []string{tb.addr}, Run: kgoShortSet, Records: 2000, Timeout: 10 * time.Minute})
}
