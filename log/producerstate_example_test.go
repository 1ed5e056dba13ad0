package log_test

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// An idempotent producer's retry is answered with the offsets the first try
// got, and a transaction's records are read committed only once its COMMIT
// marker is written; an aborted transaction's never are.
func ExampleLog_AppendMarker() {
	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)
	l, err := log.Open(dir, log.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	now := time.Now().UnixMilli()
	batch := func(producerID int64, seq int32, value string) segment.Batch {
		b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte(value), Timestamp: now}}, segment.BuildOptions{
			Producer: &segment.ProducerFields{ID: producerID, BaseSequence: seq}, Transactional: true})
		if err != nil {
			panic(err)
		}
		return b
	}
	end := func(producerID int64, typ idempotence.MarkerType) {
		m, err := idempotence.AppendMarkerBatch(nil, producerID, 0, idempotence.Marker{Type: typ}, now)
		if err == nil {
			_, err = l.AppendMarker(m)
		}
		if err != nil {
			panic(err)
		}
	}

	res, _ := l.AppendBatch(batch(1, 0, "paid"))
	retry, _ := l.AppendBatch(batch(1, 0, "paid"))
	fmt.Println("first try at", res.BaseOffset, "retry at", retry.BaseOffset, "duplicate", retry.Duplicate)
	_, err = l.AppendBatch(batch(1, 5, "lost"))
	fmt.Println("a gap:", errors.Is(err, idempotence.ErrOutOfOrderSequence))

	l.AppendBatch(batch(2, 0, "cancelled"))
	fmt.Println("last stable offset", l.LastStableOffset(), "high watermark", l.HighWatermark())
	end(1, idempotence.MarkerCommit)
	end(2, idempotence.MarkerAbort)
	for r, err := range l.Records(0, log.ReadCommitted) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s\n", r.Offset, r.Value)
	}
	// Output:
	// first try at 0 retry at 0 duplicate true
	// a gap: true
	// last stable offset 0 high watermark 2
	// 0 paid
}
