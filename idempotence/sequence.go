package idempotence

import "math"

// Sentinels of the batch header for a batch without a producer, as Kafka's
// RecordBatch defines them.
const (
	NoProducerID    int64 = -1
	NoProducerEpoch int16 = -1
	NoSequence      int32 = -1
)

// IncrementSequence returns the sequence n places after seq. Sequences
// count from 0 to MaxInt32 and then start again at 0
// (DefaultRecordBatch.incrementSequence).
func IncrementSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

// DecrementSequence returns the sequence n places before seq, wrapping below
// 0 to MaxInt32 (DefaultRecordBatch.decrementSequence).
func DecrementSequence(seq, n int32) int32 {
	if seq < n {
		return math.MaxInt32 - (n - seq) + 1
	}
	return seq - n
}

// inSequence reports whether next directly follows last
// (ProducerAppendInfo.inSequence): last+1, or 0 after MaxInt32.
func inSequence(last, next int32) bool {
	return int64(next) == int64(last)+1 || (next == 0 && last == math.MaxInt32)
}
