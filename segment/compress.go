package segment

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/pierrec/lz4/v4"

	"github.com/strandlog/strand/kafkaerr"
)

// Codec is the compression codec of a batch's records, stored in attribute
// bits 0-2.
type Codec int8

// The codecs Kafka defines (apache/kafka:clients/.../record/CompressionType.java).
// This package compresses and decompresses CodecGzip and CodecLZ4; batches
// with CodecSnappy or CodecZstd can be parsed, validated, stored and served
// as they are, but not decoded or built.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// String returns Kafka's name for the codec: "none", "gzip", "snappy",
// "lz4", "zstd", or "Codec(n)" for an unknown value.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return "Codec(" + strconv.Itoa(int(c)) + ")"
}

// MaxDecompressedSize bounds the decompressed records of one batch. Gzip
// expands up to a thousandfold, so a hostile batch of a few megabytes could
// otherwise demand gigabytes; Records stops with ErrBatchTooLarge past it.
const MaxDecompressedSize = 64 << 20

// ErrUnsupportedCodec is matched by errors.Is for every *CodecError.
var ErrUnsupportedCodec = kafkaerr.New(kafkaerr.ErrUnsupportedCompressionType, "segment: unsupported codec")

// CodecError reports an attempt to compress or decompress records with a
// codec this package does not implement (snappy, zstd, or an unknown value).
type CodecError struct {
	Codec Codec
}

// Error says which codec; this package wraps it with the batch or the
// operation that needed the codec.
func (e *CodecError) Error() string { return "unsupported codec " + e.Codec.String() }

// Unwrap makes errors.Is(err, ErrUnsupportedCodec) true for a *CodecError,
// and gives it that error's Kafka code.
func (e *CodecError) Unwrap() error { return ErrUnsupportedCodec }

// appendWriter is an io.Writer that appends to a slice, so compressed bytes
// land directly in the caller's buffer.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// resetWriter is what gzip.Writer and lz4.Writer have in common.
type resetWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// encoder is a pooled compressor bound to its own output, so that reusing
// it allocates nothing.
type encoder struct {
	zw  resetWriter
	out appendWriter
	err error // from configuring zw, reported by every use
}

var (
	gzipEncoders = sync.Pool{New: func() any {
		e := new(encoder)
		e.zw = gzip.NewWriter(&e.out)
		return e
	}}
	lz4Encoders = sync.Pool{New: func() any {
		e := new(encoder)
		zw := lz4.NewWriter(&e.out)
		// The frame the Java client writes: 64 KiB independent blocks, no
		// block or content checksum (the batch CRC covers the bytes).
		// apache/kafka:clients/.../common/compress/Lz4BlockOutputStream.java.
		e.err = zw.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false),
			lz4.BlockChecksumOption(false), lz4.ConcurrencyOption(1))
		e.zw = zw
		return e
	}}
)

func encoders(c Codec) *sync.Pool {
	switch c {
	case CodecGzip:
		return &gzipEncoders
	case CodecLZ4:
		return &lz4Encoders
	}
	return nil
}

// compress appends src compressed with c to dst.
func compress(dst, src []byte, c Codec) ([]byte, error) {
	pool := encoders(c)
	if pool == nil {
		return dst, &CodecError{Codec: c}
	}
	e := pool.Get().(*encoder)
	if e.err != nil {
		return dst, fmt.Errorf("segment: configuring %v writer: %w", c, e.err)
	}
	e.out.b = dst
	e.zw.Reset(&e.out)
	_, err := e.zw.Write(src)
	if cerr := e.zw.Close(); err == nil {
		err = cerr
	}
	dst, e.out.b = e.out.b, nil
	pool.Put(e)
	return dst, err
}

// decoder is a pooled decompressor with its own source reader.
type decoder struct {
	src bytes.Reader
	zr  io.Reader
}

var (
	gzipDecoders = sync.Pool{New: func() any { return &decoder{zr: new(gzip.Reader)} }}
	lz4Decoders  = sync.Pool{New: func() any { return &decoder{zr: lz4.NewReader(nil)} }}
)

// decompress returns src, the records of the batch at baseOffset,
// decompressed with c into a new slice, which the caller owns. It fails with
// ErrBatchTooLarge past limit bytes and with ErrCorrupt if src is not a valid
// stream.
func decompress(src []byte, c Codec, limit int, baseOffset int64) ([]byte, error) {
	var pool *sync.Pool
	switch c {
	case CodecGzip:
		pool = &gzipDecoders
	case CodecLZ4:
		pool = &lz4Decoders
	default:
		return nil, fmt.Errorf("segment: batch at base offset %d: %w", baseOffset, &CodecError{Codec: c})
	}
	d := pool.Get().(*decoder)
	defer pool.Put(d)
	d.src.Reset(src)
	switch zr := d.zr.(type) {
	case *gzip.Reader:
		if err := zr.Reset(&d.src); err != nil {
			return nil, fmt.Errorf("%w at base offset %d: %v stream: %w", ErrCorrupt, baseOffset, c, err)
		}
	case *lz4.Reader:
		zr.Reset(&d.src)
	}
	// Compressed records usually shrink by a few times; start there and
	// grow, never past limit+1 (one byte more proves the limit is passed).
	out := make([]byte, 0, min(limit+1, 4*len(src)+512))
	for {
		if len(out) > limit {
			return nil, fmt.Errorf("%w at base offset %d: %v records decompress to more than %d bytes",
				ErrBatchTooLarge, baseOffset, c, limit)
		}
		if len(out) == cap(out) {
			out = slices.Grow(out, min(len(out), limit+1-len(out)))
		}
		n, err := d.zr.Read(out[len(out):min(cap(out), limit+1)])
		out = out[:len(out)+n]
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w at base offset %d: %v stream at decompressed byte %d: %w",
				ErrCorrupt, baseOffset, c, len(out), err)
		}
	}
}
