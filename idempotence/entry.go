package idempotence

// NumBatchesToRetain is how many of a producer's most recent batches a
// partition remembers for duplicate detection
// (ProducerStateEntry.NUM_BATCHES_TO_RETAIN). It matches the five requests a
// Kafka producer may have in flight per connection with idempotence on.
const NumBatchesToRetain = 5

// BatchMetadata describes one batch a producer appended (Kafka's
// BatchMetadata): enough to recognise a retry of it and to answer the retry
// with the offsets the original got.
type BatchMetadata struct {
	LastSeq     int32
	LastOffset  int64
	OffsetDelta int32 // LastOffset minus the batch's first offset
	Timestamp   int64 // the batch's max timestamp, in milliseconds
}

// FirstSeq returns the batch's first sequence number, wrapping as the
// sequence did.
func (b BatchMetadata) FirstSeq() int32 { return DecrementSequence(b.LastSeq, b.OffsetDelta) }

// FirstOffset returns the offset of the batch's first record.
func (b BatchMetadata) FirstOffset() int64 { return b.LastOffset - int64(b.OffsetDelta) }

// Entry is what a partition knows about one producer (Kafka's
// ProducerStateEntry).
type Entry struct {
	ProducerID int64
	// Epoch is the producer's current epoch, NoProducerEpoch for an entry
	// that has seen nothing yet.
	Epoch int16
	// CoordinatorEpoch is the epoch of the last transaction coordinator
	// that wrote a marker for this producer, or -1.
	CoordinatorEpoch int32
	// LastTimestamp is the max timestamp of the producer's last batch or
	// marker, in milliseconds; expiry counts from it.
	LastTimestamp int64
	// TxnFirstOffset is the first offset of the producer's open
	// transaction on this partition, or -1 if none is open.
	TxnFirstOffset int64
	// Batches are the producer's most recent batches of its current
	// epoch, oldest first, at most NumBatchesToRetain.
	Batches []BatchMetadata
}

func newEntry(producerID int64) Entry {
	return Entry{ProducerID: producerID, Epoch: NoProducerEpoch, CoordinatorEpoch: -1, LastTimestamp: -1, TxnFirstOffset: -1}
}

// LastSeq returns the last sequence of the newest retained batch, or
// NoSequence if none is retained.
func (e Entry) LastSeq() int32 {
	if len(e.Batches) == 0 {
		return NoSequence
	}
	return e.Batches[len(e.Batches)-1].LastSeq
}

// clone returns a copy that shares nothing with e.
func (e *Entry) clone() Entry {
	c := *e
	c.Batches = append([]BatchMetadata(nil), e.Batches...)
	return c
}

// duplicateOf returns the retained batch with exactly the sequence range
// [firstSeq, lastSeq] at epoch (findDuplicateBatch). A partial overlap is
// not a duplicate: the sequence check rejects it.
func (e *Entry) duplicateOf(epoch int16, firstSeq, lastSeq int32) (BatchMetadata, bool) {
	if epoch != e.Epoch {
		return BatchMetadata{}, false
	}
	for _, b := range e.Batches {
		if b.FirstSeq() == firstSeq && b.LastSeq == lastSeq {
			return b, true
		}
	}
	return BatchMetadata{}, false
}
