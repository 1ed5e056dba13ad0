package segment

import (
	"bytes"
	"compress/gzip"
	"slices"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCodecString(t *testing.T) {
	for c, want := range map[Codec]string{
		CodecNone: "none", CodecGzip: "gzip", CodecSnappy: "snappy", CodecLZ4: "lz4", CodecZstd: "zstd",
		5: "Codec(5)", -1: "Codec(-1)",
	} {
		assert.Equal(t, want, c.String())
	}
}

// A few kilobytes of hostile gzip or lz4 can expand to gigabytes; the limit
// stops decompression one byte past it.
func TestDecompressLimit(t *testing.T) {
	const limit = 1 << 20
	for _, c := range []Codec{CodecGzip, CodecLZ4} {
		t.Run(c.String(), func(t *testing.T) {
			bomb, err := compress(nil, make([]byte, 4*limit), c)
			require.NoError(t, err)
			require.Less(t, len(bomb), limit/50, "zeros compress well")
			_, err = decompress(bomb, c, limit, 9)
			require.ErrorIs(t, err, ErrBatchTooLarge)
			assert.EqualError(t, err, "segment: batch too large at base offset 9: "+c.String()+
				" records decompress to more than 1048576 bytes")

			exact, err := compress(nil, make([]byte, limit), c)
			require.NoError(t, err)
			out, err := decompress(exact, c, limit, 9)
			require.NoError(t, err)
			assert.Len(t, out, limit, "exactly the limit is allowed")
		})
	}
}

func TestRecordsLimitIsMaxDecompressedSize(t *testing.T) {
	// A frame of 64 KiB blocks of zeros, one more than the limit allows,
	// made by repeating one compressed block rather than compressing it all.
	const block = 64 << 10
	frame, err := compress(nil, make([]byte, block), CodecLZ4)
	require.NoError(t, err)
	header, body, end := frame[:7], frame[7:len(frame)-4], frame[len(frame)-4:]
	bomb := append(slices.Clone(header), bytes.Repeat(body, MaxDecompressedSize/block+1)...)
	bomb = append(bomb, end...)

	_, err = first(rawBatch(bomb, 1, 0, CodecLZ4))
	require.ErrorIs(t, err, ErrBatchTooLarge)
	assert.Contains(t, err.Error(), "lz4 records decompress to more than 67108864 bytes")
}

// Other clients' frames must read too: franz-go and sarama use pierrec/lz4
// with its defaults (4 MiB blocks, content checksum), and a gzip stream may
// hold several members.
func TestDecompressOtherWriters(t *testing.T) {
	payload := bytes.Repeat([]byte("payload "), 20000)

	var lz bytes.Buffer
	zw := lz4.NewWriter(&lz)
	_, err := zw.Write(payload)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	out, err := decompress(lz.Bytes(), CodecLZ4, MaxDecompressedSize, 0)
	require.NoError(t, err)
	assert.Equal(t, payload, out)

	var gz bytes.Buffer
	for _, part := range [][]byte{payload[:100], payload[100:]} {
		w := gzip.NewWriter(&gz)
		_, err := w.Write(part)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	out, err = decompress(gz.Bytes(), CodecGzip, MaxDecompressedSize, 0)
	require.NoError(t, err)
	assert.Equal(t, payload, out)
}
