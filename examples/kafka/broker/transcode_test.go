package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// TestSnappyAndZstdBatchesAreRecompressed: franz-go's default snappy and
// zstd batches are stored recompressed with lz4, as a Kafka broker
// recompresses to its topic's compression.type: consumers get the same
// keys, values, headers and timestamps, and the stored batches keep the
// producer's id and sequence numbers.
func TestSnappyAndZstdBatchesAreRecompressed(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	for _, tc := range []struct {
		topic string
		codec []kgo.Opt // none: franz-go's default, snappy
	}{
		{"snappy", nil},
		{"zstd", []kgo.Opt{kgo.ProducerBatchCompression(kgo.ZstdCompression())}},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			c := tb.client(append([]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}, tc.codec...)...)
			createTopic(t, c, tc.topic, 1)
			at := time.UnixMilli(1_700_000_000_000)
			var recs []*kgo.Record
			for i := range 50 {
				recs = append(recs, &kgo.Record{Topic: tc.topic, Key: []byte(key(i)), Value: []byte(value(i)),
					Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(key(i))}}, Timestamp: at.Add(time.Duration(i) * time.Millisecond)})
			}
			require.NoError(t, c.ProduceSync(context.Background(), recs...).FirstErr())

			consumer := tb.client(kgo.ConsumeTopics(tc.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := consume(t, consumer, 50)
			for i, r := range got {
				require.Equal(t, int64(i), r.Offset)
				require.Equal(t, key(i), string(r.Key))
				require.Equal(t, value(i), string(r.Value))
				require.Equal(t, []kgo.RecordHeader{{Key: "n", Value: []byte(key(i))}}, r.Headers)
				require.Equal(t, at.Add(time.Duration(i)*time.Millisecond).UnixMilli(), r.Timestamp.UnixMilli())
			}

			p, err := tb.b.Node().Log(tc.topic, 0)
			require.NoError(t, err)
			bs, err := p.Read(0, 1<<20, log.ReadUncommitted)
			require.NoError(t, err)
			defer bs.Close()
			next := int32(0)
			for b, err := range bs.All() {
				require.NoError(t, err)
				require.Equal(t, segment.CodecLZ4, b.Codec())
				require.GreaterOrEqual(t, b.ProducerID(), int64(0))
				require.Equal(t, next, b.BaseSequence(), "sequence numbers as the producer gave them")
				next += b.NumRecords()
			}
			require.EqualValues(t, 50, next)
		})
	}
}
