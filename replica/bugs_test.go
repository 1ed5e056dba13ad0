//go:build strandbugs

package replica

import (
	"strings"
	"testing"
)

// The tests of this file switch historical bugs back on and show that the
// simulator catches each: they need a build that has the switches
// (go test -tags strandbugs ./replica).

// Each historical bug, switched back on, is caught by the simulator's
// checks within a bounded number of seeds: the checks have teeth.
func TestSimulatorCatchesHistoricalBugs(t *testing.T) {
	const maxSeeds = 300
	for _, tc := range []struct {
		name string
		bug  bugs
	}{
		{"truncation to the high watermark (before KIP-101)", bugs{truncateToHighWatermark: true}},
		{"the epoch-less answer (KIP-101 before KIP-279)", bugs{pre279: true}},
		{"applying the high watermark before truncating (KAFKA-14704)", bugs{hwBeforeTruncation: true}},
		{"ISR expansion without the epoch-start guard (KIP-320 rule 4)", bugs{noEpochStartGuard: true}},
		{"leader epoch reuse after a restart (KAFKA-10527)", bugs{reuseEpoch: true}},
		{"retries answered from any node's producer state (issue 21)", bugs{retriesFromLog: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(maxSeeds) {
				if msg, failed := simFails(seed, tc.bug, simModel); failed {
					first, _, _ := strings.Cut(msg, "\n")
					t.Logf("caught at seed %d: %s", seed, first)
					return
				}
			}
			t.Fatalf("not caught in %d seeds", maxSeeds)
		})
	}
}

// KIP-903's broker epochs in the fetches and ISR proposals, checked by
// the real controller, keep the real controller's seeds safe: switched
// off (the leaders name no broker epoch, as before Kafka 3.5), the
// controller lets a follower's new incarnation into the ISR on the
// strength of what its previous life had fetched, and an ISR member lacks
// committed records (KAFKA-14139).
func TestSimulatorFindsTheLossKIP903Prevents(t *testing.T) {
	start := uint64(1)
	if testing.Short() {
		start = 1103 // the first seed that finds it today
	}
	for seed := start; seed < 2000; seed += 2 {
		if msg, failed := simFails(seed, bugs{preKIP903: true}, controlFor(seed)); failed {
			first, _, _ := strings.Cut(msg, "\n")
			t.Logf("caught at seed %d: %s", seed, first)
			return
		}
	}
	t.Fatal("no seed failed without KIP-903's broker epochs")
}

// A broker takes the controller's messages only for its own broker epoch
// (KIP-380) and only once registered, as a Kafka broker applies the
// metadata log only once caught up to its own registration: else a
// restarted node may take a message for its previous life, or metadata
// that still names it leader in the epoch it led when it crashed, and
// under FsyncNever it lost what it wrote in that epoch and would write
// other records in it. Switched off in the partitions, the simulator
// finds it.
func TestSimulatorBrokersTakeControllerMessagesOfTheirEpochOnly(t *testing.T) {
	start := uint64(1)
	if testing.Short() {
		start = 71 // the first seed that finds it today
	}
	for seed := start; seed < 600; seed += 2 {
		if msg, failed := simFails(seed, bugs{preKIP380: true}, controlFor(seed)); failed {
			first, _, _ := strings.Cut(msg, "\n")
			t.Logf("caught at seed %d: %s", seed, first)
			return
		}
	}
	t.Fatal("no seed failed with brokers taking controller messages of any epoch")
}

// The historical bugs of the replication protocol are caught with the
// real controller deciding leaders and ISRs too.
func TestSimulatorWithTheRealControllerCatchesHistoricalBugs(t *testing.T) {
	const maxSeeds = 600
	for _, tc := range []struct {
		name string
		bug  bugs
	}{
		{"truncation to the high watermark (before KIP-101)", bugs{truncateToHighWatermark: true}},
		{"the epoch-less answer (KIP-101 before KIP-279)", bugs{pre279: true}},
		{"applying the high watermark before truncating (KAFKA-14704)", bugs{hwBeforeTruncation: true}},
		{"ISR expansion without the epoch-start guard (KIP-320 rule 4)", bugs{noEpochStartGuard: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed < maxSeeds; seed += 2 {
				if msg, failed := simFails(seed, tc.bug, controlFor(seed)); failed {
					first, _, _ := strings.Cut(msg, "\n")
					t.Logf("caught at seed %d: %s", seed, first)
					return
				}
			}
			t.Fatalf("not caught in %d seeds with the real controller", maxSeeds/2)
		})
	}
}
