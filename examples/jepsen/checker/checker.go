// Package checker judges the history of a Jepsen-style run against a
// Kafka-style log: what producers sent and were told, what was read back
// from every partition after the faults healed, and what a consumer
// group's committed offsets were seen to be. It is pure: a History in, a
// Result out, so that each anomaly it looks for can be shown on a
// hand-made history (checker_test.go).
//
// The rules are Kafka's promises to a producer with acks=all and
// enable.idempotence (KIP-98) and to a consumer group:
//
//   - an acknowledged record is in the log at the offset its
//     acknowledgement named (lost otherwise);
//   - no record is in the log twice (the idempotent producer's
//     deduplication);
//   - a producer's records to one partition are in the log, and were
//     acknowledged, in the order it sent them (max.in.flight <= 5 with
//     idempotence keeps the order);
//   - the log holds nothing that was never sent;
//   - a non-compacted, non-transactional partition's offsets run without a
//     hole from its log start to its end;
//   - a group's committed offset of a partition never goes back once a
//     commit of a higher one was acknowledged, and never passes the
//     partition's log end.
//
// A send whose produce failed has an unknown outcome: it may or may not be
// in the log, and is never counted lost.
package checker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Send is one record a producer sent.
type Send struct {
	Value     string
	Producer  int
	Seq       int64 // the producer's counter: increasing in the order it sent
	Partition int32
	// Acked says the produce was acknowledged, at Offset; otherwise it
	// failed and its outcome is unknown.
	Acked  bool
	Offset int64
}

// Read is one record read back from a partition.
type Read struct {
	Partition int32
	Offset    int64
	Value     string
}

// CommitObservation is one sight of a group's committed offset of a
// partition: an acknowledged OffsetCommit, or an OffsetFetch's answer.
// Start is when the request was sent, End when its answer came: an
// observation can only contradict one that ended before it started.
type CommitObservation struct {
	Partition  int32
	Offset     int64
	Start, End time.Time
	Source     string // "commit" or "fetch", for the report
}

// History is everything a run saw.
type History struct {
	Sends []Send
	Reads []Read
	// LogStart and LogEnd are each partition's offsets when it was read
	// back (LogEnd: its high watermark, the next offset).
	LogStart, LogEnd map[int32]int64
	Commits          []CommitObservation
	// Unreadable names the partitions that could not be read back (no
	// leader, a read that never reached the end), with why: what was
	// acknowledged there is unverified, neither found nor lost.
	Unreadable map[int32]string
}

// Kind is a kind of anomaly.
type Kind string

// The anomalies the checker finds.
const (
	Lost            Kind = "lost"             // an acknowledged record not at its offset
	Duplicated      Kind = "duplicated"       // a record in the log more than once
	Reordered       Kind = "reordered"        // a producer's records out of its order on a partition
	Phantom         Kind = "phantom"          // a record read that was never sent
	Gap             Kind = "gap"              // offsets missing inside a partition
	CommitBackwards Kind = "commit-backwards" // a committed offset lower than one acknowledged before
	CommitPastEnd   Kind = "commit-past-end"  // a committed offset beyond the log end
	Unreadable      Kind = "unreadable"       // a partition that could not be read back
)

// Kinds lists every Kind, in the order reports print them.
var Kinds = []Kind{Lost, Duplicated, Reordered, Phantom, Gap, CommitBackwards, CommitPastEnd, Unreadable}

// Anomaly is one thing the history shows that the rules forbid.
type Anomaly struct {
	Kind      Kind
	Partition int32
	Offset    int64
	Value     string
	Detail    string
}

func (a Anomaly) String() string {
	return fmt.Sprintf("%s: partition %d offset %d %q: %s", a.Kind, a.Partition, a.Offset, a.Value, a.Detail)
}

// Result is what Check found.
type Result struct {
	Sent, Acknowledged int
	// Unknown is how many sends failed; UnknownFound how many of those
	// are in the log all the same.
	Unknown, UnknownFound int
	// Unverified is how many acknowledged sends are in unreadable
	// partitions.
	Unverified int
	Anomalies  []Anomaly
}

// Count returns how many anomalies of kind k the result holds.
func (r Result) Count(k Kind) int {
	n := 0
	for _, a := range r.Anomalies {
		if a.Kind == k {
			n++
		}
	}
	return n
}

// OK reports whether the history broke no rule.
func (r Result) OK() bool { return len(r.Anomalies) == 0 }

// Summary is one line of figures.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d, acknowledged %d (%d unverified), unknown %d (%d of them in the log)", r.Sent, r.Acknowledged, r.Unverified, r.Unknown, r.UnknownFound)
	for _, k := range Kinds {
		fmt.Fprintf(&b, ", %s %d", k, r.Count(k))
	}
	return b.String()
}

// Check applies every rule to h.
func Check(h History) Result {
	var r Result
	sent := make(map[string]*Send, len(h.Sends))
	for i := range h.Sends {
		s := &h.Sends[i]
		sent[s.Value] = s
		r.Sent++
		if s.Acked {
			r.Acknowledged++
		} else {
			r.Unknown++
		}
	}

	type at struct {
		partition int32
		offset    int64
	}
	log := make(map[at]string, len(h.Reads))
	where := map[string][]Read{}
	for _, rd := range h.Reads {
		log[at{rd.Partition, rd.Offset}] = rd.Value
		where[rd.Value] = append(where[rd.Value], rd)
	}

	for _, p := range slices.Sorted(maps.Keys(h.Unreadable)) {
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: Unreadable, Partition: p, Offset: -1, Detail: h.Unreadable[p]})
	}
	for _, s := range h.Sends {
		found := where[s.Value]
		if _, ok := h.Unreadable[s.Partition]; ok && s.Acked && len(found) == 0 {
			r.Unverified++
			continue
		}
		if !s.Acked {
			if len(found) > 0 {
				r.UnknownFound++
			}
			continue
		}
		if v, ok := log[at{s.Partition, s.Offset}]; ok && v == s.Value {
			continue
		}
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: Lost, Partition: s.Partition, Offset: s.Offset, Value: s.Value,
			Detail: lostDetail(s, log[at{s.Partition, s.Offset}], found, h.LogEnd)})
	}

	for _, rd := range h.Reads {
		if _, ok := sent[rd.Value]; !ok {
			r.Anomalies = append(r.Anomalies, Anomaly{Kind: Phantom, Partition: rd.Partition, Offset: rd.Offset, Value: rd.Value,
				Detail: "no producer sent this value"})
		}
	}
	for _, v := range slices.Sorted(maps.Keys(where)) {
		if copies := where[v]; len(copies) > 1 {
			for _, c := range copies[1:] {
				r.Anomalies = append(r.Anomalies, Anomaly{Kind: Duplicated, Partition: c.Partition, Offset: c.Offset, Value: v,
					Detail: fmt.Sprintf("also at partition %d offset %d", copies[0].Partition, copies[0].Offset)})
			}
		}
	}

	r.Anomalies = append(r.Anomalies, reorders(h.Sends, sent, h.Reads)...)
	r.Anomalies = append(r.Anomalies, gaps(h)...)
	r.Anomalies = append(r.Anomalies, commitAnomalies(h)...)
	return r
}

func lostDetail(s Send, holder string, found []Read, logEnd map[int32]int64) string {
	var parts []string
	switch {
	case holder != "":
		parts = append(parts, fmt.Sprintf("the offset holds %q", holder))
	case logEnd != nil && s.Offset >= logEnd[s.Partition]:
		parts = append(parts, fmt.Sprintf("beyond the log end %d", logEnd[s.Partition]))
	default:
		parts = append(parts, "the offset was not read")
	}
	for _, f := range found {
		parts = append(parts, fmt.Sprintf("the value is at partition %d offset %d", f.Partition, f.Offset))
	}
	if len(found) == 0 {
		parts = append(parts, "the value is nowhere in the log")
	}
	return "acknowledged, but " + strings.Join(parts, "; ")
}

// reorders finds a producer's records to a partition out of its order:
// in the offsets it was acknowledged, and in the log (each value's first
// copy; later copies are duplicates).
func reorders(sends []Send, sent map[string]*Send, reads []Read) []Anomaly {
	type stream struct {
		producer  int
		partition int32
	}
	var out []Anomaly
	acked := map[stream][]Send{}
	for _, s := range sends {
		if s.Acked {
			k := stream{s.Producer, s.Partition}
			acked[k] = append(acked[k], s)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(acked), func(a, b stream) int {
		return cmp.Or(cmp.Compare(a.producer, b.producer), cmp.Compare(a.partition, b.partition))
	}) {
		ss := acked[k]
		slices.SortFunc(ss, func(a, b Send) int { return cmp.Compare(a.Seq, b.Seq) })
		for i := 1; i < len(ss); i++ {
			if ss[i].Offset <= ss[i-1].Offset {
				out = append(out, Anomaly{Kind: Reordered, Partition: k.partition, Offset: ss[i].Offset, Value: ss[i].Value,
					Detail: fmt.Sprintf("acknowledged at an offset not after %q's %d, sent before it", ss[i-1].Value, ss[i-1].Offset)})
			}
		}
	}

	byPartition := slices.Clone(reads)
	slices.SortFunc(byPartition, func(a, b Read) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	seen := map[string]bool{}
	last := map[stream]*Send{}
	lastAt := map[stream]int64{}
	for _, rd := range byPartition {
		s, ok := sent[rd.Value]
		if !ok || seen[rd.Value] {
			continue // a phantom or a duplicate, reported as such
		}
		seen[rd.Value] = true
		if s.Partition != rd.Partition {
			continue // lost (from its partition) if acknowledged
		}
		k := stream{s.Producer, s.Partition}
		if prev := last[k]; prev != nil && s.Seq <= prev.Seq {
			out = append(out, Anomaly{Kind: Reordered, Partition: rd.Partition, Offset: rd.Offset, Value: rd.Value,
				Detail: fmt.Sprintf("in the log after %q (offset %d), which its producer sent after it", prev.Value, lastAt[k])})
			continue
		}
		last[k], lastAt[k] = s, rd.Offset
	}
	return out
}

// gaps finds offsets missing between a partition's log start and end.
func gaps(h History) []Anomaly {
	offsets := map[int32][]int64{}
	for _, rd := range h.Reads {
		offsets[rd.Partition] = append(offsets[rd.Partition], rd.Offset)
	}
	partitions := slices.AppendSeq(slices.Collect(maps.Keys(offsets)), maps.Keys(h.LogEnd))
	slices.Sort(partitions)
	var out []Anomaly
	for _, p := range slices.Compact(partitions) {
		if _, ok := h.Unreadable[p]; ok {
			continue
		}
		os := offsets[p]
		slices.Sort(os)
		os = slices.Compact(os)
		next := h.LogStart[p]
		end, haveEnd := h.LogEnd[p]
		for _, o := range os {
			if haveEnd && o >= end {
				break
			}
			if o > next {
				out = append(out, gapAnomaly(p, next, o))
			}
			next = max(next, o+1)
		}
		if haveEnd && next < end {
			out = append(out, gapAnomaly(p, next, end))
		}
	}
	return out
}

func gapAnomaly(p int32, from, to int64) Anomaly {
	return Anomaly{Kind: Gap, Partition: p, Offset: from, Detail: fmt.Sprintf("offsets %d to %d missing from the log", from, to-1)}
}

// commitAnomalies finds a committed offset lower than one an earlier
// observation (one that ended before it started) saw, and one past the
// partition's log end.
func commitAnomalies(h History) []Anomaly {
	byPartition := map[int32][]CommitObservation{}
	for _, c := range h.Commits {
		byPartition[c.Partition] = append(byPartition[c.Partition], c)
	}
	var out []Anomaly
	for _, p := range slices.Sorted(maps.Keys(byPartition)) {
		obs := byPartition[p]
		byStart := slices.Clone(obs)
		slices.SortStableFunc(byStart, func(a, b CommitObservation) int { return a.Start.Compare(b.Start) })
		byEnd := slices.Clone(obs)
		slices.SortStableFunc(byEnd, func(a, b CommitObservation) int { return a.End.Compare(b.End) })
		var high *CommitObservation
		j := 0
		for _, o := range byStart {
			for ; j < len(byEnd) && byEnd[j].End.Before(o.Start); j++ {
				if high == nil || byEnd[j].Offset > high.Offset {
					high = &byEnd[j]
				}
			}
			if high != nil && o.Offset < high.Offset {
				out = append(out, Anomaly{Kind: CommitBackwards, Partition: p, Offset: o.Offset,
					Detail: fmt.Sprintf("%s saw %d after a %s had seen %d", o.Source, o.Offset, high.Source, high.Offset)})
			}
			if end, ok := h.LogEnd[p]; ok && o.Offset > end {
				out = append(out, Anomaly{Kind: CommitPastEnd, Partition: p, Offset: o.Offset,
					Detail: fmt.Sprintf("%s saw %d, past the log end %d", o.Source, o.Offset, end)})
			}
		}
	}
	return out
}
