package idempotence_test

import (
	"errors"
	"fmt"

	"github.com/strandlog/strand/idempotence"
)

// A producer's retry of a batch the partition already appended is answered
// with the original offsets, and a batch that skips sequences is refused
// with Kafka's error.
func Example() {
	state, err := idempotence.NewState(0, idempotence.Options{})
	if err != nil {
		panic(err)
	}
	// appendAt validates a batch of producer 7 with sequences first..last
	// at offset base, and commits it as a log would after writing it.
	appendAt := func(base int64, first, last int32) {
		b := idempotence.BatchInfo{ProducerID: 7, ProducerEpoch: 0, BaseSequence: first,
			BaseOffset: base, LastOffset: base + int64(last-first), MaxTimestamp: 1000}
		a, err := state.Validate(idempotence.OriginClient, b)
		var kerr *idempotence.Error
		switch {
		case errors.As(err, &kerr):
			fmt.Printf("sequences %d-%d: error %d %s\n", first, last, kerr.Code, kerr.Name)
		case a.Duplicate != nil:
			fmt.Printf("sequences %d-%d: duplicate of offsets %d-%d\n", first, last, a.Duplicate.FirstOffset(), a.Duplicate.LastOffset)
		default:
			if _, err := state.Commit(a); err != nil {
				panic(err)
			}
			fmt.Printf("sequences %d-%d: appended at %d\n", first, last, base)
		}
	}
	appendAt(0, 0, 4)
	appendAt(5, 5, 9)
	appendAt(10, 0, 4) // a retry
	appendAt(10, 12, 14)
	// Output:
	// sequences 0-4: appended at 0
	// sequences 5-9: appended at 5
	// sequences 0-4: duplicate of offsets 0-4
	// sequences 12-14: error 45 OUT_OF_ORDER_SEQUENCE_NUMBER
}
