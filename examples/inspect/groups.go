package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/segment"
)

// offsetsTopic is the topic whose records inspect decodes as the groups'.
const offsetsTopic = group.OffsetsTopic

// groups is what the offsets topic says, as compaction would leave it: the
// latest record of each key, tombstones removing, and the log end offset of
// every partition inspect read, to count lag against.
type groups struct {
	meta    map[string]group.GroupMetadataValue
	offsets map[group.OffsetCommitKey]group.OffsetCommitValue
	ends    map[string]int64 // partition directory name -> log end offset
}

// groupRecord takes one record of the offsets topic; a record that does not
// decode is a problem of its file.
func (in *inspector) groupRecord(file string, r segment.Record) {
	if in.groups.meta == nil {
		in.groups.meta = map[string]group.GroupMetadataValue{}
		in.groups.offsets = map[group.OffsetCommitKey]group.OffsetCommitValue{}
	}
	d, err := group.Decode(group.Record{Key: r.Key, Value: r.Value})
	switch {
	case errors.Is(err, group.ErrUnknownRecordType):
		return
	case err != nil:
		in.problem(file, "offset %d: %v", r.Offset, err)
	case d.ConsumerKey != nil:
		// A KIP-848 group's records (types 3-8): its committed offsets
		// are OffsetCommit records, listed like any group's.
	case d.GroupKey != nil && d.GroupValue == nil:
		delete(in.groups.meta, d.GroupKey.Group)
	case d.GroupKey != nil:
		in.groups.meta[d.GroupKey.Group] = *d.GroupValue
	case d.OffsetValue == nil:
		delete(in.groups.offsets, *d.OffsetKey)
	default:
		in.groups.offsets[*d.OffsetKey] = *d.OffsetValue
	}
}

// isOffsetsPartition reports whether a partition directory is one of the
// offsets topic's.
func isOffsetsPartition(dir string) bool {
	name := filepath.Base(filepath.Clean(dir))
	return isPartitionName(name) && name[:strings.LastIndexByte(name, '-')] == offsetsTopic
}

// printGroups prints every group of the offsets topic, its committed
// offsets and their lag: the partition's log end offset (the high
// watermark of a Dir that is not replicated) minus the committed offset.
// Transactional commits are shown as written, whether their transaction
// committed or not.
func (in *inspector) printGroups() {
	ids := map[string]bool{}
	for id := range in.groups.meta {
		ids[id] = true
	}
	for k := range in.groups.offsets {
		ids[k.Group] = true
	}
	if len(ids) == 0 {
		return
	}
	in.printf("groups (%s)\n", offsetsTopic)
	keys := slices.SortedFunc(maps.Keys(in.groups.offsets), func(a, b group.OffsetCommitKey) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if m, ok := in.groups.meta[id]; ok {
			in.printf("  group %q: protocol type %q, generation %d, protocol %q, leader %q, %d member(s)\n",
				id, m.ProtocolType, m.Generation, m.Protocol, m.Leader, len(m.Members))
			for _, mm := range m.Members {
				in.printf("    member %s (client %s, instance %q)\n", mm.MemberID, mm.ClientID, mm.GroupInstanceID)
			}
		} else {
			in.printf("  group %q: offsets only\n", id)
		}
		for _, k := range keys {
			if k.Group != id {
				continue
			}
			v := in.groups.offsets[k]
			lag := "unknown (partition not read)"
			if end, ok := in.groups.ends[fmt.Sprintf("%s-%d", k.Topic, k.Partition)]; ok {
				lag = fmt.Sprint(max(end-v.Offset, 0))
			}
			in.printf("    %s-%d committed %d (leader epoch %d, metadata %q, at %s) lag %s\n",
				k.Topic, k.Partition, v.Offset, v.LeaderEpoch, v.Metadata, formatTime(v.CommitTimestamp), lag)
		}
	}
}
