package segment_test

import (
	"fmt"
	"math"
	"os"

	"github.com/strandlog/strand/segment"
)

// A segment holds whole batches in Kafka's .log format with its .index
// and .timeindex; reads find a batch by offset or by time.
func ExampleSegment() {
	dir, _ := os.MkdirTemp("", "strand-segment-")
	defer os.RemoveAll(dir)

	seg, err := segment.Create(dir, 0, segment.Options{})
	if err != nil {
		panic(err)
	}
	defer seg.Close()
	for i := range 3 {
		recs := []segment.Record{
			{Timestamp: 1000 + int64(10*i), Key: []byte("k"), Value: fmt.Appendf(nil, "first of batch %d", i)},
			{Timestamp: 1005 + int64(10*i), Key: []byte("k"), Value: fmt.Appendf(nil, "second of batch %d", i)},
		}
		b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{BaseOffset: seg.NextOffset()})
		if err != nil {
			panic(err)
		}
		if err := seg.Append(b); err != nil {
			panic(err)
		}
	}

	off, _, _ := seg.FindTimestamp(1012)
	fmt.Println("first record at or after 1012 ms: offset", off)

	sl, err := seg.Read(off, math.MaxInt64, 1) // the batch holding off, at least
	if err != nil {
		panic(err)
	}
	data, _ := sl.Bytes()
	b, _, _ := segment.ParseBatch(data)
	for r := range b.Records() {
		fmt.Printf("offset %d: %s\n", r.Offset, r.Value)
	}
	// Output:
	// first record at or after 1012 ms: offset 3
	// offset 2: first of batch 1
	// offset 3: second of batch 1
}
