package replica

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// With unclean election enabled, acknowledged records may be lost, but
// only after an unclean election the controller reported: hide the
// reports, and the simulator finds a loss nothing allowed.
func TestSimulatorLossesNeedAReportedUncleanElection(t *testing.T) {
	hide := func(r *realControl) { r.hideUnclean = true }
	const maxSeeds = 200
	lost := 0
	for seed := range uint64(maxSeeds) {
		st := runSim(t, seed, simEvents, bugs{}, simRealUnclean)
		lost += st.uncleanLost
		if st.uncleanLost == 0 {
			continue
		}
		msg, failed := simFails(seed, bugs{}, simRealUnclean, hide)
		require.True(t, failed, "seed %d lost %d records after unclean elections; unreported, the loss must fail the run", seed, st.uncleanLost)
		first, _, _ := strings.Cut(msg, "\n")
		t.Logf("seed %d: %d records lost after reported unclean elections; unreported: %s", seed, st.uncleanLost, first)
		return
	}
	t.Fatalf("no seed of %d lost a record to an unclean election: the check is not exercised", maxSeeds)
}
