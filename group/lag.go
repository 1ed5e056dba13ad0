package group

import (
	"maps"
	"slices"
)

// PartitionLag is how far a group is behind on one partition.
type PartitionLag struct {
	Topic     string
	Partition int32
	Committed int64 // -1 when the group committed nothing for it
	End       int64 // the offset a consumer reads up to
	Lag       int64
	Err       error // the partition's offsets are not known
}

// Offsets returns a partition's log start offset and the offset a consumer
// reads up to: the high watermark, or for read_committed consumers the last
// stable offset (ListOffsets by isolation level, as kadm's
// CalculateGroupLagWithStartOffsets asks). ok is false for a partition that does not
// exist.
type Offsets func(topic string, partition int32) (start, end int64, ok bool)

// Lag returns a group's lag on every partition it committed an offset for
// and on every partition of the topics its members subscribe to, in (topic,
// partition) order, as kadm's CalculateGroupLagWithStartOffsets computes
// it: end minus the committed offset; with no commit, end minus the log
// start; never below zero. A consumer should commit its position (the next
// offset to read), or control records leave a lag of one behind every
// transaction (KAFKA-6607).
func (c *Coordinator) Lag(groupID string, offsets Offsets) []PartitionLag {
	keys := map[OffsetCommitKey]bool{}
	for _, k := range c.offsets.keys(groupID) {
		keys[k] = true
	}
	for _, topic := range c.subscribedTopicsOf(groupID) {
		for p := range c.partitions(topic) {
			keys[OffsetCommitKey{Group: groupID, Topic: topic, Partition: p}] = true
		}
	}
	sorted := slices.SortedFunc(maps.Keys(keys), compareKeys)
	out := make([]PartitionLag, 0, len(sorted))
	for _, k := range sorted {
		l := PartitionLag{Topic: k.Topic, Partition: k.Partition, Committed: -1}
		if v, ok := c.offsets.get(k); ok {
			l.Committed = v.Offset
		}
		start, end, ok := offsets(k.Topic, k.Partition)
		switch {
		case !ok:
			l.Err = errorf(ErrUnknownTopicOrPartition, "group %q: no partition %s-%d", groupID, k.Topic, k.Partition)
		case l.Committed >= 0:
			l.End, l.Lag = end, max(end-l.Committed, 0)
		default:
			l.End, l.Lag = end, max(end-start, 0)
		}
		out = append(out, l)
	}
	return out
}

// subscribedTopicsOf returns the topics a group's members subscribe to, when
// known.
func (c *Coordinator) subscribedTopicsOf(groupID string) []string {
	if g := c.consumerGroups[groupID]; g != nil {
		return slices.Sorted(maps.Keys(g.topics))
	}
	if g := c.groups[groupID]; g != nil && g.subscribedKnown {
		return slices.Sorted(maps.Keys(g.subscribed))
	}
	return nil
}
