//go:build linux

package jepsen

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ReadReplica reads a partition's replica from its directory in a stopped
// node's log.Dir: each segment's batches, in order, as franz-go decodes
// (and decompresses) them from a fetch, up to the first batch of a segment
// that does not decode. It returns each record's value by offset: what the
// replica holds on disk, for a partition that no leader serves.
func ReadReplica(partDir, topic string, partition int32) (map[int64]string, error) {
	segs, err := filepath.Glob(filepath.Join(partDir, "*.log"))
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("%s: no segment", partDir)
	}
	slices.Sort(segs) // zero-padded base offsets sort as numbers
	out := map[int64]string{}
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			return out, err
		}
		rp := &kmsg.FetchResponseTopicPartition{Partition: partition, HighWatermark: math.MaxInt64, LastStableOffset: math.MaxInt64, RecordBatches: b}
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: topic, Partition: partition}, rp, kgo.DefaultDecompressor(), nil)
		for _, r := range fp.Records {
			out[r.Offset] = string(r.Value)
		}
	}
	return out, nil
}
