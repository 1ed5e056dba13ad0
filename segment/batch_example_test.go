package segment_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/strandlog/strand/segment"
)

// A producer builds a batch, a log stamps its offset and epoch, and a
// consumer checks it and reads the records back.
func Example_buildAndRead() {
	recs := []segment.Record{
		{Timestamp: 1700000000000, Key: []byte("user-1"), Value: []byte("signed up")},
		{Timestamp: 1700000000250, Key: []byte("user-1"), Value: nil}, // a tombstone
	}
	raw, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Codec: segment.CodecLZ4})
	if err != nil {
		log.Fatal(err)
	}

	// Neither field is covered by the CRC, so stamping them is cheap.
	b := segment.Batch(raw)
	b.SetBaseOffset(42)
	b.SetPartitionLeaderEpoch(3)

	if err := b.Validate(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(b.Codec(), b.BaseOffset(), b.LastOffset(), b.NumRecords(), b.MaxTimestamp())
	for r, err := range b.Records() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %d %s %q null=%v\n", r.Offset, r.Timestamp, r.Key, r.Value, r.Value == nil)
	}
	// Output:
	// lz4 42 43 2 1700000000250
	// 42 1700000000000 user-1 "signed up" null=false
	// 43 1700000000250 user-1 "" null=true
}

// ParseBatch steps through consecutive batches, as in a segment file. A
// batch cut short by a crash reads as ErrShortBatch, not as corruption.
func ExampleParseBatch() {
	var file []byte
	for i := range 3 {
		var err error
		file, err = segment.AppendBatch(file, []segment.Record{{Value: []byte("hello")}},
			segment.BuildOptions{BaseOffset: int64(i)})
		if err != nil {
			log.Fatal(err)
		}
	}
	file = file[:len(file)-10] // a torn write

	for rest := file; len(rest) > 0; {
		b, next, err := segment.ParseBatch(rest)
		if errors.Is(err, segment.ErrShortBatch) {
			fmt.Println("torn tail at byte", len(file)-len(rest))
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("batch", b.BaseOffset(), "size", b.Size(), "valid", b.Validate() == nil)
		rest = next
	}
	// Output:
	// batch 0 size 73 valid true
	// batch 1 size 73 valid true
	// torn tail at byte 146
}
