package idempotence

import (
	"encoding/binary"
	"fmt"

	"github.com/strandlog/strand/segment"
)

// MarkerType is the control record type of an end-transaction marker
// (ControlRecordType).
type MarkerType int16

// The end-transaction marker types, with Kafka's type ids.
const (
	MarkerAbort  MarkerType = 0
	MarkerCommit MarkerType = 1
)

func (t MarkerType) String() string {
	switch t {
	case MarkerAbort:
		return "ABORT"
	case MarkerCommit:
		return "COMMIT"
	}
	return fmt.Sprintf("MarkerType(%d)", int16(t))
}

// Marker is an end-transaction marker, the one record of a COMMIT or ABORT
// control batch (EndTransactionMarker).
type Marker struct {
	Type MarkerType
	// CoordinatorEpoch is the epoch of the transaction coordinator that
	// wrote the marker; a partition refuses markers from an older one.
	CoordinatorEpoch int32
}

// Sizes of the marker's key {int16 version, int16 type} and value
// {int16 version, int32 coordinator epoch}, both version 0.
const (
	markerKeySize   = 4
	markerValueSize = 6
)

// Key returns the marker record's key: version 0 and the type.
func (m Marker) Key() []byte {
	k := make([]byte, markerKeySize)
	binary.BigEndian.PutUint16(k[2:], uint16(m.Type))
	return k
}

// Value returns the marker record's value: version 0 and the coordinator
// epoch.
func (m Marker) Value() []byte {
	v := make([]byte, markerValueSize)
	binary.BigEndian.PutUint32(v[2:], uint32(m.CoordinatorEpoch))
	return v
}

// ParseMarker decodes a control record's key and value. Like Kafka, it
// reads a newer version as version 0 and refuses a negative one; it also
// refuses control types other than COMMIT and ABORT. Errors wrap
// ErrInvalidRecord.
func ParseMarker(key, value []byte) (Marker, error) {
	if len(key) < markerKeySize {
		return Marker{}, fmt.Errorf("%w: control record key has %d bytes, want %d", ErrInvalidRecord, len(key), markerKeySize)
	}
	if v := int16(binary.BigEndian.Uint16(key)); v < 0 {
		return Marker{}, fmt.Errorf("%w: control record key version %d", ErrInvalidRecord, v)
	}
	t := MarkerType(binary.BigEndian.Uint16(key[2:]))
	if t != MarkerAbort && t != MarkerCommit {
		return Marker{}, fmt.Errorf("%w: control record type %d is not an end-transaction marker", ErrInvalidRecord, int16(t))
	}
	if len(value) < markerValueSize {
		return Marker{}, fmt.Errorf("%w: end-transaction marker value has %d bytes, want %d", ErrInvalidRecord, len(value), markerValueSize)
	}
	if v := int16(binary.BigEndian.Uint16(value)); v < 0 {
		return Marker{}, fmt.Errorf("%w: end-transaction marker version %d", ErrInvalidRecord, v)
	}
	return Marker{Type: t, CoordinatorEpoch: int32(binary.BigEndian.Uint32(value[2:]))}, nil
}

// AppendMarkerBatch appends to dst the control batch a partition leader
// writes for marker on behalf of producer (id, epoch), as Kafka's
// MemoryRecords.withEndTransactionMarker builds it: transactional and
// control attributes, base sequence -1, one record stamped timestampMs.
// The log stamps the base offset as for any batch.
func AppendMarkerBatch(dst []byte, producerID int64, epoch int16, marker Marker, timestampMs int64) ([]byte, error) {
	return segment.AppendBatch(dst, []segment.Record{{Timestamp: timestampMs, Key: marker.Key(), Value: marker.Value()}},
		segment.BuildOptions{
			Producer:      &segment.ProducerFields{ID: producerID, Epoch: epoch, BaseSequence: NoSequence},
			Transactional: true,
			Control:       true,
		})
}

// InfoOf returns the producer-state fields of batch b, at the offsets its
// header holds. For a control batch it decodes the marker from its first
// record; an error there wraps ErrInvalidRecord.
func InfoOf(b segment.Batch) (BatchInfo, error) {
	info := BatchInfo{
		ProducerID:    b.ProducerID(),
		ProducerEpoch: b.ProducerEpoch(),
		BaseSequence:  b.BaseSequence(),
		BaseOffset:    b.BaseOffset(),
		LastOffset:    b.LastOffset(),
		MaxTimestamp:  b.MaxTimestamp(),
		Transactional: b.Transactional(),
		Control:       b.Control(),
	}
	if !info.Control {
		return info, nil
	}
	for r, err := range b.Records() {
		if err != nil {
			return info, fmt.Errorf("%w: control batch at offset %d: %w", ErrInvalidRecord, info.BaseOffset, err)
		}
		m, err := ParseMarker(r.Key, r.Value)
		if err != nil {
			return info, fmt.Errorf("control batch at offset %d: %w", info.BaseOffset, err)
		}
		info.Marker = &m
		break
	}
	return info, nil
}
