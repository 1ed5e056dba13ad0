package kafkarecords

import (
	"strconv"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/segment"
)

// StrandView reads raw as one batch with Strand's package segment
// (ParseBatch, Validate, then every record) and reports it as Read reports
// Kafka's reading. The error is the first Strand returned; a control
// record's marker Strand cannot parse (idempotence.ParseMarker) is not an
// error of the batch but is reported in Markers as "refused: <error>".
func StrandView(raw []byte) (*View, error) {
	b, rest, err := segment.ParseBatch(raw)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, errExtraBytes(len(rest))
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	v := &View{Fields: Fields{
		BaseOffset:           b.BaseOffset(),
		Size:                 b.Size(),
		PartitionLeaderEpoch: b.PartitionLeaderEpoch(),
		Magic:                int8(raw[16]),
		CRC:                  b.CRC(),
		Codec:                b.Codec(),
		LogAppendTime:        b.LogAppendTime(),
		Transactional:        b.Transactional(),
		Control:              b.Control(),
		DeleteHorizon:        "-",
		LastOffset:           b.LastOffset(),
		BaseTimestamp:        b.BaseTimestamp(),
		MaxTimestamp:         b.MaxTimestamp(),
		ProducerID:           b.ProducerID(),
		ProducerEpoch:        b.ProducerEpoch(),
		BaseSequence:         b.BaseSequence(),
		NumRecords:           b.NumRecords(),
	}}
	if ms, ok := b.DeleteHorizon(); ok {
		v.DeleteHorizon = strconv.FormatInt(ms, 10)
	}
	for r, err := range b.Records() {
		if err != nil {
			return nil, err
		}
		v.Records = append(v.Records, r)
		if v.Control {
			m, err := idempotence.ParseMarker(r.Key, r.Value)
			if err != nil {
				v.Markers = append(v.Markers, "refused: "+err.Error())
				continue
			}
			v.Markers = append(v.Markers, m.Type.String()+" "+strconv.Itoa(int(m.CoordinatorEpoch)))
		}
	}
	return v, nil
}

type errExtraBytes int

func (e errExtraBytes) Error() string {
	return "kafkarecords: " + strconv.Itoa(int(e)) + " bytes after the batch"
}
