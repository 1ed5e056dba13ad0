// Package segment implements Kafka's RecordBatch v2 format and one segment
// of a partition log: a .log file of batches with its offset and time
// indexes.
//
// # Batches
//
// The bytes are Kafka's, so a batch built here can be handed to a Kafka
// client as is and a client's batch can be stored as is. A batch is a
// 61-byte big-endian header (base offset, length, partition leader epoch,
// magic 2, CRC-32C, attributes, last offset delta, base and max timestamp,
// producer id, epoch and base sequence, record count) followed by records
// encoded with zig-zag varints, compressed as a whole when the codec is not
// none. The CRC covers the bytes from the attributes to the end, which
// leaves the base offset and the partition leader epoch outside it: a log
// assigns offsets and stamps its epoch without recomputing the CRC.
//
// AppendBatch builds a batch into a caller's buffer. ParseBatch reads one
// from the front of a byte slice without copying and returns it as a Batch,
// a view whose accessors read the header fields; Validate checks it and
// Records iterates over its records. Gzip and LZ4 (frame format, as the
// Java client writes it) are compressed and decompressed; snappy and zstd
// batches are parsed, validated and passed through untouched, and decoding
// them fails with ErrUnsupportedCodec.
//
// Bad input never panics. Errors wrap ErrShortBatch when more bytes could
// complete a batch (a torn write at the end of a file), ErrCorrupt when
// they cannot, and ErrBatchTooLarge past a size limit; their messages name
// the batch's base offset and the record and byte where decoding stopped.
package segment
