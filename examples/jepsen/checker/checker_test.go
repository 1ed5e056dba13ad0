package checker

import (
	"fmt"
	"testing"
	"time"
)

// t0 is the start of every hand-made history; at(n) is n seconds later.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

// clean is a history that breaks no rule: two producers on partition 0,
// one on partition 1, a send with an unknown outcome that is in the log
// and one that is not, and a group committing forwards. Each case below
// changes one thing in it.
func clean() History {
	return History{
		Sends: []Send{
			{Value: "p1-1", Producer: 1, Seq: 1, Partition: 0, Acked: true, Offset: 0},
			{Value: "p2-1", Producer: 2, Seq: 1, Partition: 0, Acked: true, Offset: 1},
			{Value: "p1-2", Producer: 1, Seq: 2, Partition: 0, Acked: true, Offset: 2},
			{Value: "p1-3", Producer: 1, Seq: 3, Partition: 1, Acked: true, Offset: 0},
			{Value: "p1-4", Producer: 1, Seq: 4, Partition: 1}, // failed, yet in the log
			{Value: "p2-2", Producer: 2, Seq: 2, Partition: 0}, // failed, not in the log
			{Value: "p1-5", Producer: 1, Seq: 5, Partition: 1, Acked: true, Offset: 2},
		},
		Reads: []Read{
			{0, 0, "p1-1"}, {0, 1, "p2-1"}, {0, 2, "p1-2"},
			{1, 0, "p1-3"}, {1, 1, "p1-4"}, {1, 2, "p1-5"},
		},
		LogStart: map[int32]int64{0: 0, 1: 0},
		LogEnd:   map[int32]int64{0: 3, 1: 3},
		Commits: []CommitObservation{
			{Partition: 0, Offset: 2, Start: at(1), End: at(1.1), Source: "commit"},
			{Partition: 0, Offset: 3, Start: at(2), End: at(2.1), Source: "commit"},
			{Partition: 0, Offset: 3, Start: at(3), End: at(3.1), Source: "fetch"},
			{Partition: 1, Offset: 3, Start: at(2), End: at(2.1), Source: "commit"},
		},
	}
}

// Each case is the clean history with one change, and the anomalies it
// must produce: exactly these kinds, this many times.
func TestCheck(t *testing.T) {
	cases := []struct {
		name   string
		change func(h *History)
		want   map[Kind]int
	}{
		{"clean", func(*History) {}, nil},
		{
			// The lost acknowledgement: the client was told offset
			// 2, and after the heal offset 2 holds another producer's
			// record (Kafka: an acks=all write acknowledged is never lost
			// while min.insync.replicas replicas live, KIP-101/KIP-279).
			"lost ack, its offset holds another record",
			func(h *History) {
				h.Sends = append(h.Sends, Send{Value: "p3-1", Producer: 3, Seq: 1, Partition: 0})
				h.Reads[2].Value = "p3-1"
			},
			map[Kind]int{Lost: 1},
		},
		{
			"lost ack, the log was truncated below it",
			func(h *History) {
				h.Reads = h.Reads[:5]
				h.LogEnd[1] = 2
				h.Commits[3].Offset = 2
			},
			map[Kind]int{Lost: 1},
		},
		{
			"an acknowledged record at another offset than it was told",
			func(h *History) {
				h.Sends[6].Offset = 1
				h.Sends[4].Acked, h.Sends[4].Offset = true, 2
			},
			map[Kind]int{Lost: 2, Reordered: 1},
		},
		{
			// The idempotent producer's deduplication (KIP-98): a retried
			// batch is never appended twice.
			"a record in the log twice",
			func(h *History) {
				h.Reads = append(h.Reads, Read{1, 3, "p1-3"})
				h.LogEnd[1] = 4
			},
			map[Kind]int{Duplicated: 1},
		},
		{
			"a record in two partitions",
			func(h *History) {
				h.Reads = append(h.Reads, Read{1, 3, "p2-1"})
				h.LogEnd[1] = 4
			},
			map[Kind]int{Duplicated: 1},
		},
		{
			// With idempotence and at most 5 requests in flight, Kafka
			// keeps a producer's order on a partition (KIP-98,
			// max.in.flight.requests.per.connection).
			"acknowledged out of the producer's order",
			func(h *History) {
				h.Sends[0].Offset, h.Sends[2].Offset = 2, 0
				h.Reads[0].Value, h.Reads[2].Value = "p1-2", "p1-1"
			},
			map[Kind]int{Reordered: 2},
		},
		{
			"an unacknowledged record in the log before one sent earlier",
			func(h *History) {
				h.Sends[4].Seq, h.Sends[6].Seq = 6, 5 // p1-4 now sent after p1-5
				h.Sends[6].Acked = false
			},
			map[Kind]int{Reordered: 1},
		},
		{
			"a record read that nobody sent",
			func(h *History) {
				h.Reads = append(h.Reads, Read{0, 3, "p9-9"})
				h.LogEnd[0] = 4
			},
			map[Kind]int{Phantom: 1},
		},
		{
			"a hole in a partition's offsets",
			func(h *History) {
				h.Reads = append(h.Reads[:4], h.Reads[5:]...) // offset 1 of partition 1, p1-4: unknown outcome
			},
			map[Kind]int{Gap: 1},
		},
		{
			"the log end above what was read",
			func(h *History) { h.LogEnd[0] = 5 },
			map[Kind]int{Gap: 1},
		},
		{
			// Kafka's group coordinator keeps every acknowledged commit
			// (GroupMetadataManager.storeOffsets answers once the
			// offsets topic's high watermark passes it).
			"a fetch sees a commit older than one acknowledged",
			func(h *History) { h.Commits[2].Offset = 2 },
			map[Kind]int{CommitBackwards: 1},
		},
		{
			"a commit acknowledged lower than an earlier one",
			func(h *History) {
				h.Commits = append(h.Commits, CommitObservation{Partition: 1, Offset: 1, Start: at(4), End: at(4.1), Source: "commit"})
			},
			map[Kind]int{CommitBackwards: 1},
		},
		{
			"a lower fetch answer that overlapped the higher commit is no contradiction",
			func(h *History) {
				h.Commits = append(h.Commits, CommitObservation{Partition: 0, Offset: 2, Start: at(2.05), End: at(2.2), Source: "fetch"})
			},
			nil,
		},
		{
			// What could not be read back is neither found nor lost, and
			// the run fails all the same.
			"a partition that could not be read back",
			func(h *History) {
				h.Reads = h.Reads[:3]
				delete(h.LogEnd, 1)
				h.Unreadable = map[int32]string{1: "no leader"}
			},
			map[Kind]int{Unreadable: 1},
		},
		{
			// A committed offset is the next offset to read: at most the
			// log end (OffsetCommit of offset HW is "everything read").
			"a committed offset past the log end",
			func(h *History) { h.Commits[2].Offset = 4 },
			map[Kind]int{CommitPastEnd: 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := clean()
			c.change(&h)
			r := Check(h)
			for _, k := range Kinds {
				if got := r.Count(k); got != c.want[k] {
					t.Errorf("%s: %d, want %d; anomalies: %v", k, got, c.want[k], r.Anomalies)
				}
			}
			if r.OK() != (len(c.want) == 0) {
				t.Errorf("OK() = %v with anomalies %v", r.OK(), r.Anomalies)
			}
		})
	}
}

// A send whose produce failed is never counted lost, in the log or not;
// the counts say how many failed and how many of those are in the log.
func TestUnknownOutcomesAreNotLost(t *testing.T) {
	r := Check(clean())
	got := fmt.Sprintf("%d %d %d %d %d", r.Sent, r.Acknowledged, r.Unknown, r.UnknownFound, r.Unverified)
	if got != "7 5 2 1 0" {
		t.Fatalf("sent, acknowledged, unknown, unknown found, unverified = %s, want 7 5 2 1 0", got)
	}
	if !r.OK() {
		t.Fatalf("anomalies in the clean history: %v", r.Anomalies)
	}
}

// The acknowledged sends of a partition that could not be read are
// counted unverified, not lost.
func TestUnreadablePartitionsAreUnverified(t *testing.T) {
	h := clean()
	h.Reads = h.Reads[:3]
	h.Unreadable = map[int32]string{1: "no leader"}
	r := Check(h)
	if r.Unverified != 2 || r.Count(Lost) != 0 || r.Count(Unreadable) != 1 || r.OK() {
		t.Fatalf("unverified %d, anomalies %v; want 2 unverified and one unreadable partition", r.Unverified, r.Anomalies)
	}
}

// The lost record's detail says what the offset holds and where the value
// went, which is what tracing a lost acknowledgement starts from.
func TestLostDetailNamesTheHolder(t *testing.T) {
	h := clean()
	h.Sends = append(h.Sends, Send{Value: "p3-1", Producer: 3, Seq: 1, Partition: 0})
	h.Reads[2].Value = "p3-1"
	h.Reads = append(h.Reads, Read{0, 3, "p1-2"})
	h.LogEnd[0] = 4
	r := Check(h)
	if r.Count(Lost) != 1 {
		t.Fatalf("anomalies %v, want one lost", r.Anomalies)
	}
	want := `lost: partition 0 offset 2 "p1-2": acknowledged, but the offset holds "p3-1"; the value is at partition 0 offset 3`
	if got := r.Anomalies[0].String(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
