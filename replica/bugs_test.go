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
			requireCaught(t, tc.bug, 0, maxSeeds, 1, func(uint64) simControl { return simModel })
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
	requireCaught(t, bugs{preKIP903: true}, start, 2000, 2, controlFor)
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
	requireCaught(t, bugs{preKIP380: true}, start, 600, 2, controlFor)
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
			requireCaught(t, tc.bug, 1, maxSeeds, 2, controlFor) // the odd seeds have the real controller
		})
	}
}

// requireCaught runs the seeds from first below end, every step-th, with
// bug switched on and each seed's control, and fails unless a seed fails.
func requireCaught(t *testing.T, bug bugs, first, end, step uint64, control func(seed uint64) simControl) {
	t.Helper()
	for seed := first; seed < end; seed += step {
		if msg, failed := simFails(seed, bug, control(seed)); failed {
			line, _, _ := strings.Cut(msg, "\n")
			t.Logf("caught at seed %d: %s", seed, line)
			return
		}
	}
	t.Fatalf("%+v not caught in the seeds from %d below %d, every %d", bug, first, end, step)
}
