package group

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Kafka's consumer protocol: what a consumer puts in JoinGroup's protocol
// metadata and what the leader puts in SyncGroup's assignments, opaque to
// the coordinator (ConsumerProtocolSubscription.json,
// ConsumerProtocolAssignment.json, ConsumerProtocol.java). Both are an int16
// version followed by a non-flexible struct; versions above 3 are read as 3,
// as Kafka's consumer reads them, since later versions may only append.

// ConsumerProtocolVersion is the highest version of the consumer protocol.
const ConsumerProtocolVersion = 3

// Subscription is a consumer's protocol metadata
// (ConsumerProtocolSubscription): the topics it subscribes to and, for
// cooperative and sticky assignors, what it owns and since which generation.
type Subscription struct {
	Topics       []string
	UserData     []byte             // nil for null
	Owned        map[string][]int32 // version 1+
	GenerationID int32              // version 2+; -1 when unknown
	RackID       string             // version 3+; "" for null
}

// Assignment is what the leader assigns one consumer
// (ConsumerProtocolAssignment).
type Assignment struct {
	Partitions map[string][]int32
	UserData   []byte // nil for null
}

// Encode returns the subscription as Kafka's consumer writes it at version
// (0-3): topics sorted, owned partitions sorted by topic and partition.
func (s Subscription) Encode(version int16) []byte {
	version = min(max(version, 0), ConsumerProtocolVersion)
	w := writer{}
	w.int16(version)
	topics := slices.Sorted(slices.Values(s.Topics))
	w.arrayLen(len(topics))
	for _, t := range topics {
		w.string(t)
	}
	w.nullableBytes(s.UserData)
	if version >= 1 {
		writePartitions(&w, s.Owned, true)
	}
	if version >= 2 {
		w.int32(s.GenerationID)
	}
	if version >= 3 {
		w.nullableString(s.RackID)
	}
	return w.b
}

// Encode returns the assignment at version (0-3), topics in order.
func (a Assignment) Encode(version int16) []byte {
	version = min(max(version, 0), ConsumerProtocolVersion)
	w := writer{}
	w.int16(version)
	writePartitions(&w, a.Partitions, false)
	w.nullableBytes(a.UserData)
	return w.b
}

func writePartitions(w *writer, p map[string][]int32, sortPartitions bool) {
	topics := slices.SortedFunc(maps.Keys(p), cmp.Compare)
	w.arrayLen(len(topics))
	for _, t := range topics {
		w.string(t)
		ps := p[t]
		if sortPartitions {
			ps = slices.Sorted(slices.Values(ps))
		}
		w.arrayLen(len(ps))
		for _, x := range ps {
			w.int32(x)
		}
	}
}

// ErrBadConsumerProtocol reports consumer protocol bytes that do not decode.
var ErrBadConsumerProtocol = errors.New("group: malformed consumer protocol")

// DecodeSubscription reads a consumer's protocol metadata and the version it
// was written with. Bytes after the fields of its version are ignored.
func DecodeSubscription(b []byte) (Subscription, int16, error) {
	r := reader{b: b}
	version := r.int16()
	s, err := decodeSubscription(&r, version)
	return s, version, err
}

func decodeSubscription(r *reader, version int16) (Subscription, error) {
	if r.err == nil && version < 0 {
		return Subscription{}, fmt.Errorf("%w: subscription version %d", ErrBadConsumerProtocol, version)
	}
	s := Subscription{GenerationID: -1}
	for n := r.arrayLen(); n > 0; n-- {
		s.Topics = append(s.Topics, r.string())
	}
	s.UserData = r.nullableBytes()
	if version >= 1 {
		s.Owned = readPartitions(r)
	}
	if version >= 2 {
		s.GenerationID = r.int32()
	}
	if version >= 3 {
		s.RackID = r.string()
	}
	if r.err != nil {
		return Subscription{}, fmt.Errorf("%w: subscription: %w", ErrBadConsumerProtocol, r.err)
	}
	return s, nil
}

// DecodeAssignment reads an assignment and the version it was written with.
func DecodeAssignment(b []byte) (Assignment, int16, error) {
	r := reader{b: b}
	version := r.int16()
	if r.err == nil && version < 0 {
		return Assignment{}, version, fmt.Errorf("%w: assignment version %d", ErrBadConsumerProtocol, version)
	}
	a := Assignment{Partitions: readPartitions(&r), UserData: r.nullableBytes()}
	if r.err != nil {
		return Assignment{}, version, fmt.Errorf("%w: assignment: %w", ErrBadConsumerProtocol, r.err)
	}
	return a, version, nil
}

func readPartitions(r *reader) map[string][]int32 {
	var out map[string][]int32
	for n := r.arrayLen(); n > 0 && r.err == nil; n-- {
		t := r.string()
		var ps []int32
		for m := r.arrayLen(); m > 0; m-- {
			ps = append(ps, r.int32())
		}
		if out == nil {
			out = map[string][]int32{}
		}
		out[t] = append(out[t], ps...)
	}
	return out
}
