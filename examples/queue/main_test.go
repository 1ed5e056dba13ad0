package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/log"
)

// The second run's group continues from the first run's commits: it
// processes this run's records, none of the first run's again.
func TestSecondRunContinuesFromCommittedOffsets(t *testing.T) {
	cfg := config{dir: t.TempDir(), topic: "events", group: "queue", records: 300, size: 10, partitions: 4,
		producers: 4, consumers: 3, fsync: log.FsyncNever()}
	for i := range 2 {
		var sum summary
		require.NoError(t, run(cfg, &sum))
		require.Equal(t, cfg.records, sum.thisRun, "run %d", i)
		require.Zero(t, sum.earlier, "run %d: records of the first run processed again", i)
		require.Zero(t, sum.twice, "run %d: nothing failed, so nothing is delivered twice", i)
	}
}
