package idempotence

import "testing"

// BenchmarkValidateCommit is the producer-state cost of one idempotent
// append of one batch, the common case on a log's append path.
func BenchmarkValidateCommit(b *testing.B) {
	s, err := NewState(0, Config{})
	if err != nil {
		b.Fatal(err)
	}
	const records = 100
	var seq int32
	var off int64
	b.ReportAllocs()
	for b.Loop() {
		info := BatchInfo{ProducerID: 1, ProducerEpoch: 0, BaseSequence: seq, BaseOffset: off, LastOffset: off + records - 1, MaxTimestamp: off}
		a, err := s.Validate(OriginClient, info)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Commit(a); err != nil {
			b.Fatal(err)
		}
		seq, off = IncrementSequence(seq, records), off+records
	}
}
