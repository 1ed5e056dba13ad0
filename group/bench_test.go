package group

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkOffsetCommit measures the state machine alone committing 100
// partitions per request, as a consumer's periodic commit does.
func BenchmarkOffsetCommit(b *testing.B) {
	h := newHarness(b, noDelay)
	ids := h.stable("g", 1)
	req := OffsetCommitRequest{Version: 9, GroupID: "g", GenerationID: 1, MemberID: ids[0], Topics: []OffsetCommitTopic{{Name: "t"}}}
	for p := range int32(100) {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, OffsetCommitPartition{Partition: p, LeaderEpoch: -1})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range req.Topics[0].Partitions {
			req.Topics[0].Partitions[j].Offset = int64(i)
		}
		h.c.OffsetCommit(RequestID(i), req)
		h.c.Ready()
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "offsets/s")
}

// BenchmarkRebalance measures a classic rebalance of n members: every member
// rejoins, the leader syncs with an assignment for all, the followers sync.
func BenchmarkRebalance(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint(n, " members"), func(b *testing.B) {
			h := newHarness(b, Config{InitialRebalanceDelay: -1, MaxSessionTimeout: time.Hour})
			ids := h.stable("g", n)
			b.ReportAllocs()
			for b.Loop() {
				for _, id := range ids {
					h.join(joinReq("g", id))
				}
				h.syncAll("g", ids)
			}
		})
	}
}
