package idempotence_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
)

// A producer's retry of a batch the partition already appended is answered
// with the original offsets, and a batch that skips sequences is refused
// with Kafka's error.
func Example() {
	state, err := idempotence.NewState(0, idempotence.Config{})
	if err != nil {
		panic(err)
	}
	// appendAt validates a batch of producer 7 with sequences first..last
	// at offset base, and commits it as a log would after writing it.
	appendAt := func(base int64, first, last int32) {
		b := idempotence.BatchInfo{ProducerID: 7, ProducerEpoch: 0, BaseSequence: first,
			BaseOffset: base, LastOffset: base + int64(last-first), MaxTimestamp: 1000}
		a, err := state.Validate(idempotence.OriginClient, b)
		var kerr kafkaerr.Code
		switch {
		case errors.As(err, &kerr):
			fmt.Printf("sequences %d-%d: error %d %s\n", first, last, kerr, kerr)
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

// A transaction on one partition: the coordinator's records are persisted
// before they take effect, its markers are written to the partition, and
// the producer's next transaction runs on a bumped epoch.
func ExampleTxnCoordinator() {
	var persisted [][2][]byte // the owner's store: key and value per record
	nextID := int64(1000)
	c, err := idempotence.NewTxnCoordinator(idempotence.TxnCoordinatorConfig{
		AllocateProducerID: func() (int64, error) { nextID++; return nextID, nil },
	})
	if err != nil {
		panic(err)
	}
	partition, err := idempotence.NewState(0, idempotence.Config{})
	if err != nil {
		panic(err)
	}
	tp := idempotence.TopicPartition{Topic: "orders", Partition: 0}
	offset := int64(0)
	now := time.Now() // the coordinator's clock is the caller's
	// appendBatch validates and commits one batch at the partition's end.
	appendBatch := func(origin idempotence.Origin, b idempotence.BatchInfo) {
		b.BaseOffset, b.LastOffset = offset, offset
		a, err := partition.Validate(origin, b)
		if err != nil {
			panic(err)
		}
		if _, err := partition.Commit(a); err != nil {
			panic(err)
		}
		offset++
	}
	// run persists a step's record, completes it and writes its markers.
	var run func(rec *idempotence.TxnRecord)
	run = func(rec *idempotence.TxnRecord) {
		if rec == nil {
			return
		}
		key, value := idempotence.MarshalTxnRecord(*rec)
		persisted = append(persisted, [2][]byte{key, value})
		f, err := c.Complete(*rec)
		if err != nil {
			panic(err)
		}
		fmt.Println("persisted", rec.State)
		run(f.Next)
		for _, m := range f.Markers {
			appendBatch(idempotence.OriginCoordinator, idempotence.BatchInfo{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch,
				BaseSequence: idempotence.NoSequence, Control: true, Transactional: true,
				Marker: &idempotence.Marker{Type: m.Type, CoordinatorEpoch: m.CoordinatorEpoch}})
			next, err := c.MarkerWritten(m.TransactionalID, m.Partition, now)
			if err != nil {
				panic(err)
			}
			run(next)
		}
	}

	s, err := c.InitProducerID("payments", 60_000, nil, now)
	if err != nil {
		panic(err)
	}
	run(s.Record)
	id, epoch := s.ProducerID, s.ProducerEpoch
	s, err = c.AddPartitions("payments", id, epoch, []idempotence.TopicPartition{tp}, now)
	if err != nil {
		panic(err)
	}
	run(s.Record)
	appendBatch(idempotence.OriginClient, idempotence.BatchInfo{ProducerID: id, ProducerEpoch: epoch, BaseSequence: 0, Transactional: true})
	s, err = c.EndTxn("payments", id, epoch, true, now)
	if err != nil {
		panic(err)
	}
	run(s.Record)
	partition.OnHighWatermark(offset) // the data and the marker are replicated
	fmt.Printf("next transaction: producer %d epoch %d; last stable offset %d\n", s.ProducerID, s.ProducerEpoch, partition.LastStableOffset(offset))
	fmt.Println(len(persisted), "records persisted")
	// Output:
	// persisted Empty
	// persisted Ongoing
	// persisted PrepareCommit
	// persisted CompleteCommit
	// next transaction: producer 1001 epoch 1; last stable offset 2
	// 4 records persisted
}
