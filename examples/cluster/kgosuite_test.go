package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
)

// kgoShortSet is the part of franz-go's suite CI runs against the
// cluster: transactions over partitions of three leaders through a
// consume-transform-produce loop, a group, a produce too large, and SCRAM
// logins that work and one that does not.
const kgoShortSet = "^(TestTxnEtl|TestGroupSimple|TestClient_ProduceLargeMessages|TestSCRAMAuth|TestSCRAMAuthBadCredentials)$"

// franz-go's own tests against the three-node cluster, every topic
// replicated three times (KGO_TEST_RF 3), its SCRAM tests against every
// node's SASL listener, whose user every node's -kafka-users gives and
// the cluster's controller keeps; -kgo-suite runs all of them.
func TestKgoSuiteOnTheCluster(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(users, []byte("# the SCRAM user of franz-go's tests\nkgo:kgo-secret\n"), 0o600))
	s, _ := startKafkaCluster(t, func(s *supervisor) {
		var nf nodeFlags
		nf.register(flag.NewFlagSet("defaults", flag.PanicOnError))
		nf.kafkaUsers = users
		s.args, s.withSASL = nf.args(), true
	})
	var seeds, scramSeeds []string
	for _, id := range s.ids() {
		seeds, scramSeeds = append(seeds, s.kafka[id]), append(scramSeeds, s.sasl[id])
	}
	kafkatest.CheckKgoSuite(t, kafkatest.KgoSuiteOptions{Seeds: seeds, Run: kgoShortSet, ReplicationFactor: 3, Records: 2000,
		Timeout: 10 * time.Minute, SCRAMSeeds: scramSeeds, SCRAMUser: "kgo:kgo-secret"})
}
