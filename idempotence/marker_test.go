package idempotence

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
)

// TestMarkerSerde: EndTransactionMarkerTest.testSerde and
// testDeserializeNewerVersion, with the bytes spelled out.
func TestMarkerSerde(t *testing.T) {
	m := Marker{Type: MarkerCommit, CoordinatorEpoch: 79}
	require.Equal(t, []byte{0, 0, 0, 1}, m.Key())
	require.Equal(t, []byte{0, 0, 0, 0, 0, 79}, m.Value())
	back, err := ParseMarker(m.Key(), m.Value())
	require.NoError(t, err)
	require.Equal(t, m, back)

	// A newer version is read as version 0, extra bytes ignored.
	back, err = ParseMarker([]byte{0, 3, 0, 0}, []byte{0, 5, 0, 0, 0, 79, 0, 0})
	require.NoError(t, err)
	require.Equal(t, Marker{Type: MarkerAbort, CoordinatorEpoch: 79}, back)
}

// TestParseMarkerRejects: EndTransactionMarkerTest.testNotEnoughBytes,
// testIllegalNegativeVersion, testCannotDeserializeUnknownControlType, and
// ControlRecordType.parseTypeId's checks of the key.
func TestParseMarkerRejects(t *testing.T) {
	commitKey := Marker{Type: MarkerCommit}.Key()
	value := Marker{}.Value()
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"value too short", commitKey, nil},
		{"negative value version", commitKey, []byte{0xff, 0xff, 0, 0, 0, 1}},
		{"key too short", []byte{0, 0, 0}, value},
		{"negative key version", []byte{0xff, 0xff, 0, 1}, value},
		{"leader change is not an end-transaction marker", []byte{0, 0, 0, 2}, value},
		{"unknown type", []byte{0, 0, 0xff, 0xff}, value},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMarker(tc.key, tc.value)
			require.ErrorIs(t, err, ErrInvalidRecord)
		})
	}
}

// TestMarkerBatch checks the control batch against what Kafka's
// MemoryRecords.withEndTransactionMarker writes, and that InfoOf reads it
// back for Validate.
func TestMarkerBatch(t *testing.T) {
	b, err := AppendMarkerBatch(nil, 42, 3, Marker{Type: MarkerAbort, CoordinatorEpoch: 7}, 5000)
	require.NoError(t, err)
	batch, rest, err := segment.ParseBatch(b)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.NoError(t, batch.Validate())
	require.True(t, batch.Control())
	require.True(t, batch.Transactional())
	require.Equal(t, int64(42), batch.ProducerID())
	require.Equal(t, int16(3), batch.ProducerEpoch())
	require.Equal(t, NoSequence, batch.BaseSequence())
	require.Equal(t, int32(1), batch.NumRecords())
	require.Equal(t, int64(5000), batch.MaxTimestamp())

	batch.SetBaseOffset(77)
	info, err := InfoOf(batch)
	require.NoError(t, err)
	require.Equal(t, BatchInfo{
		ProducerID: 42, ProducerEpoch: 3, BaseSequence: NoSequence, BaseOffset: 77, LastOffset: 77,
		MaxTimestamp: 5000, Transactional: true, Control: true,
		Marker: &Marker{Type: MarkerAbort, CoordinatorEpoch: 7},
	}, info)
}

// TestInfoOfDataBatch reads a producer's batch header, sequences included.
func TestInfoOfDataBatch(t *testing.T) {
	recs := []segment.Record{{Timestamp: 10, Value: []byte("a")}, {Timestamp: 30, Value: []byte("b")}, {Timestamp: 20, Value: []byte("c")}}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{
		BaseOffset: 100, Producer: &segment.ProducerFields{ID: 9, Epoch: 1, BaseSequence: maxSeq - 1}, Transactional: true,
	})
	require.NoError(t, err)
	info, err := InfoOf(segment.Batch(b))
	require.NoError(t, err)
	require.Equal(t, BatchInfo{
		ProducerID: 9, ProducerEpoch: 1, BaseSequence: maxSeq - 1, BaseOffset: 100, LastOffset: 102,
		MaxTimestamp: 30, Transactional: true,
	}, info)
	require.Equal(t, int32(0), info.LastSequence())
}

// TestInfoOfBadControlBatch: a control batch whose record is not a marker
// is an INVALID_RECORD.
func TestInfoOfBadControlBatch(t *testing.T) {
	b, err := segment.AppendBatch(nil, []segment.Record{{Key: []byte{0, 0, 0, 2}, Value: []byte{0, 0}}}, segment.BuildOptions{
		Producer: &segment.ProducerFields{ID: 9, Epoch: 1, BaseSequence: -1}, Transactional: true, Control: true,
	})
	require.NoError(t, err)
	_, err = InfoOf(segment.Batch(b))
	require.ErrorIs(t, err, ErrInvalidRecord)
}
