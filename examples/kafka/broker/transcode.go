package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/segment"
)

// Strand's log decodes the codecs none, gzip and lz4, and a leader must read
// a compressed batch's records to check them (Kafka's LogValidator), so a
// snappy or zstd batch cannot be appended as it came. The broker recompresses
// it to lz4 instead, as a Kafka broker recompresses a producer's batch to its
// topic's compression.type: the records (keys, values, headers, timestamps)
// and the producer's id, epoch and sequence numbers stay as they were, so
// that idempotence and consumers see the same batch; only the codec and the
// CRC change. franz-go compresses with snappy unless told otherwise.

// errTranscode marks a snappy or zstd batch that cannot be read.
var errTranscode = errors.New("broker: snappy or zstd batch")

// transcode returns b recompressed with lz4 if it is a snappy or zstd batch,
// else b itself. The caller has checked b's CRC.
func transcode(b segment.Batch) (segment.Batch, error) {
	var raw []byte
	var err error
	payload := b[segment.HeaderSize:]
	switch b.Codec() {
	case segment.CodecSnappy:
		raw, err = unsnappy(payload)
	case segment.CodecZstd:
		raw, err = unzstd(payload)
	default:
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", kafkaerr.ErrCorruptMessage, errTranscode, err)
	}
	// The same header, uncompressed: attributes' low 3 bits are the codec.
	plain := append(bytes.Clone(b[:segment.HeaderSize]), raw...)
	binary.BigEndian.PutUint16(plain[21:], binary.BigEndian.Uint16(plain[21:])&^7)
	binary.BigEndian.PutUint32(plain[8:], uint32(len(plain)-12))
	var recs []segment.Record
	for r, err := range segment.Batch(plain).Records() {
		if err != nil {
			return nil, fmt.Errorf("%w: %w: %w", kafkaerr.ErrCorruptMessage, errTranscode, err)
		}
		recs = append(recs, r)
	}
	opts := segment.BuildOptions{Codec: segment.CodecLZ4, Transactional: b.Transactional(), Control: b.Control()}
	if b.ProducerID() >= 0 {
		opts.Producer = &segment.ProducerFields{ID: b.ProducerID(), Epoch: b.ProducerEpoch(), BaseSequence: b.BaseSequence()}
	}
	out, err := segment.AppendBatch(nil, recs, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errTranscode, err)
	}
	return out, nil
}

// xerialMagic opens snappy data in the framing of Java's snappy-java
// (xerial), which Kafka's Java client writes: after the 8 magic bytes, two
// int32 versions, then blocks, each an int32 length and a snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func unsnappy(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, xerialMagic) {
		return unsnappyBlock(nil, b)
	}
	if len(b) < 16 {
		return nil, fmt.Errorf("xerial snappy header of %d bytes", len(b))
	}
	var out []byte
	for rest := b[16:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("xerial snappy block length cut short")
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, fmt.Errorf("xerial snappy block of %d bytes, %d left", n, len(rest)-4)
		}
		var err error
		if out, err = unsnappyBlock(out, rest[4:4+n]); err != nil {
			return nil, err
		}
		rest = rest[4+n:]
	}
	return out, nil
}

// unsnappyBlock appends a snappy block's data to dst, within
// segment.MaxDecompressedSize.
func unsnappyBlock(dst, block []byte) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if len(dst)+n > segment.MaxDecompressedSize {
		return nil, fmt.Errorf("%w: decompresses past %d bytes", segment.ErrBatchTooLarge, segment.MaxDecompressedSize)
	}
	data, err := s2.Decode(nil, block)
	if err != nil {
		return nil, err
	}
	return append(dst, data...), nil
}

func unzstd(b []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(segment.MaxDecompressedSize))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(b, nil)
}
