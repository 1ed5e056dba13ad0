package kafkarecords

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/strandlog/strand/segment"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// mutate changes a valid batch at random: bytes flipped anywhere after the
// magic, a header field set to a boundary value, bytes set to varint
// boundaries, or the records cut or lengthened; then it makes the magic, the
// length and the CRC right again, so that the readers meet the body.
func mutate(r *rand.Rand, raw []byte) ([]byte, string) {
	b := slices.Clone(raw)
	var what string
	switch r.IntN(6) {
	case 5:
		// Inside the compression, where the records' own fields are:
		// flips in the compressed bytes mostly break the stream.
		if c := segment.Batch(b).Codec(); c == segment.CodecGzip || c == segment.CodecLZ4 {
			if plain, err := decompress(c, b[segment.HeaderSize:]); err == nil && len(plain) > 0 {
				what = "records changed under " + c.String()
				for range 1 + r.IntN(3) {
					i := r.IntN(len(plain))
					if r.IntN(2) == 0 {
						plain[i] ^= byte(1 + r.IntN(255))
					} else {
						plain[i] = []byte{0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x02}[r.IntN(7)]
					}
				}
				b = append(b[:segment.HeaderSize], recompress(c, plain)...)
				break
			}
		}
		fallthrough
	case 0:
		what = "bytes flipped"
		for range 1 + r.IntN(4) {
			i := 21 + r.IntN(len(b)-21)
			b[i] ^= byte(1 + r.IntN(255))
		}
	case 1:
		what = "bytes set to varint boundaries"
		for range 1 + r.IntN(3) {
			i := 21 + r.IntN(len(b)-21)
			b[i] = []byte{0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x02}[r.IntN(7)]
		}
	case 2:
		fields := []struct {
			name      string
			off, size int
		}{{"attributes", 21, 2}, {"last offset delta", 23, 4}, {"base timestamp", 27, 8}, {"max timestamp", 35, 8},
			{"producer id", 43, 8}, {"producer epoch", 51, 2}, {"base sequence", 53, 4}, {"record count", 57, 4}}
		f := fields[r.IntN(len(fields))]
		what = f.name + " changed"
		var v uint64
		switch r.IntN(4) {
		case 0:
			v = uint64(r.Int64N(8)) - 4
		case 1:
			v = r.Uint64()
		case 2:
			v = 1 << (8*f.size - 1)
		default:
			// A small step from what it was.
			v = uint64(int64(readBE(b[f.off:f.off+f.size])) + r.Int64N(5) - 2)
		}
		if f.name == "attributes" {
			v = uint64(r.IntN(1 << 8))
		}
		for k := range f.size {
			b[f.off+f.size-1-k] = byte(v >> (8 * k))
		}
	case 3:
		what = "records cut short"
		if len(b) > segment.HeaderSize {
			b = b[:segment.HeaderSize+r.IntN(len(b)-segment.HeaderSize)]
		}
	default:
		what = "bytes appended"
		extra := make([]byte, 1+r.IntN(8))
		fill(r, extra)
		b = append(b, extra...)
	}
	b[16] = segment.Magic
	return refit(b), what
}

func readBE(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

var digits = regexp.MustCompile(`-?[0-9][0-9a-fx]*`)

// kind reduces an error to its kind: the message with the numbers taken out.
func kind(err error) string {
	var ke *KafkaError
	if errors.As(err, &ke) {
		return ke.Class + ": " + digits.ReplaceAllString(ke.Message, "N")
	}
	return digits.ReplaceAllString(err.Error(), "N")
}

// TestKafkaReadsWhatStrandAccepts has both read random mutations of valid
// batches (with a right length and CRC): whatever Strand accepts, Kafka must
// accept and read the same. What Kafka accepts and Strand refuses is listed
// by kind of Strand's error, not failed: Kafka's reader checks less than
// Strand's, and the README says for each kind whether a Kafka broker would
// store such a batch.
func TestKafkaReadsWhatStrandAccepts(t *testing.T) {
	h := harness(t)
	r := rand.New(rand.NewPCG(*seed, 4))
	var strandOnly, kafkaOnly, notes kinds
	both, neither, large := 0, 0, 0
	for i := range *cases {
		var raw []byte
		var shape string
		if r.IntN(2) == 0 {
			raw, shape, _ = strandBatch(r)
			shape = "Strand's " + shape
		} else {
			spec, s := kafkaSpec(r)
			var err error
			if raw, err = h.Build(spec); err != nil {
				t.Fatalf("case %d (%s): Kafka cannot build: %v", i, s, err)
			}
			shape = "Kafka's " + s
		}
		if len(raw) > 1<<20 {
			large++
			continue // mutations of large batches add time, not kinds
		}
		mutated, what := mutate(r, raw)
		sv, serr := StrandView(mutated)
		kv, kerr := h.Read(mutated)
		switch {
		case serr == nil && kerr == nil:
			both++
			d, n := diff(kv, sv)
			for _, note := range n {
				notes.add(note, fmt.Sprintf("case %d (%s, %s)", i, shape, what))
			}
			if len(d) > 0 {
				t.Errorf("case %d (%s, %s): both accept, and read differently: %v\n%s", i, shape, what, d, dump(mutated))
			}
		case serr == nil:
			kafkaOnly.add(kind(kerr)+" ["+what+"]", fmt.Sprintf("case %d (%s, %s): %v\n%s", i, shape, what, kerr, dump(mutated)))
			t.Errorf("case %d (%s, %s): Strand accepts, Kafka refuses: %v\n%s", i, shape, what, kerr, dump(mutated))
		case kerr == nil:
			strandOnly.add(kind(serr)+" ["+what+"]", fmt.Sprintf("case %d (%s, %s): %v\n%s", i, shape, what, serr, dump(mutated)))
		default:
			neither++
		}
	}
	fmt.Printf("mutated batches: %d (%d over 1 MiB left out); both accept %d (all read alike), both refuse %d, Kafka accepts and Strand refuses %d, Strand accepts and Kafka refuses %d\n",
		*cases-large, large, both, neither, total(strandOnly), total(kafkaOnly))
	strandOnly.print(t, "  Kafka accepts, Strand refuses, by Strand's error [and mutation]")
	kafkaOnly.print(t, "  Strand accepts, Kafka refuses, by Kafka's exception [and mutation]")
	notes.print(t, "  not compared")
}

func total(k kinds) int {
	n := 0
	for _, c := range k.count {
		n += c
	}
	return n
}

// refit makes the length field and the CRC of the batch b right again.
func refit(b []byte) []byte {
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// withTrailer returns raw with extra appended after its records, the length
// and CRC made right.
func withTrailer(raw, extra []byte) []byte { return refit(append(slices.Clone(raw), extra...)) }

// TestBytesAfterCompressedRecords pins the one kind of batch the mutations
// find that Kafka reads and Strand refuses which a Kafka broker would also
// store: bytes after the end of a gzip or lz4 stream. Kafka's
// Lz4BlockInputStream stops at the end mark and never looks further; Java's
// GZIPInputStream ignores what follows a member unless it starts another
// one; and LogValidator keeps a producer's compressed batch as it came when
// the topic's codec is the batch's (in-place assignment), so the bytes are
// stored and served. Strand's decompression reads the whole section and
// refuses the batch (README.md, "What Kafka accepts and Strand refuses").
func TestBytesAfterCompressedRecords(t *testing.T) {
	h := harness(t)
	recs := []segment.Record{{Timestamp: 1700000000000, Key: []byte("k"), Value: []byte("v")}, {Timestamp: 1700000000001, Value: []byte{}}}
	for _, c := range []segment.Codec{segment.CodecGzip, segment.CodecLZ4} {
		raw, err := segment.AppendBatch(nil, recs, segment.BuildOptions{Codec: c})
		if err != nil {
			t.Fatal(err)
		}
		want, err := StrandView(raw)
		if err != nil {
			t.Fatal(err)
		}
		trailed := withTrailer(raw, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
		got, err := h.Read(trailed)
		if err != nil {
			t.Fatalf("%v: Kafka refuses bytes after the compressed records: %v", c, err)
		}
		got.Size, got.CRC = want.Size, want.CRC
		if d, _ := diff(got, want); len(d) > 0 {
			t.Fatalf("%v: with bytes after the compressed records, Kafka reads %v", c, d)
		}
		if _, err := StrandView(trailed); !errors.Is(err, segment.ErrCorrupt) {
			t.Errorf("%v: Strand's reading of bytes after the compressed records changed (%v): update README.md", c, err)
		}
	}
}

// TestOverlongVarints: Kafka reads a record's 32-bit varints (record
// length, offset delta, key, value and header lengths, header count) from at
// most 5 bytes and throws on a longer one, even if its value fits
// (ByteUtils.readUnsignedVarint), and its timestamp delta from at most 10.
// Strand must refuse what Kafka refuses: a batch Strand stored could not be
// read by Kafka's consumers otherwise.
func TestOverlongVarints(t *testing.T) {
	h := harness(t)
	padded := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00} // 0, in 6 bytes
	v := func(x int64) []byte { return binary.AppendVarint(nil, x) }
	for name, body := range map[string][][]byte{
		"offset delta": {{0}, v(0), padded, v(-1), v(-1), v(0)},
		"key length":   {{0}, v(0), v(0), padded, v(-1), v(0)},
		"value length": {{0}, v(0), v(0), v(-1), padded, v(0)},
		"header count": {{0}, v(0), v(0), v(-1), v(-1), padded},
	} {
		raw, err := segment.AppendBatch(nil, []segment.Record{{Timestamp: 5}}, segment.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec := bytes.Join(body, nil)
		raw = withTrailer(raw[:segment.HeaderSize], append(v(int64(len(rec))), rec...))
		if _, err := h.Read(raw); err == nil {
			t.Fatalf("%s in 6 bytes: Kafka reads it", name)
		}
		if _, err := StrandView(raw); !errors.Is(err, segment.ErrCorrupt) {
			t.Errorf("%s in 6 bytes: Kafka refuses it, Strand reads it (%v)", name, err)
		}
	}
}

// decompress and recompress stand for the producer's and consumer's codecs
// (Go's compress/gzip, pierrec/lz4 as franz-go uses them), not Strand's, so
// that a mutation under the compression is made without Strand's reader.
func decompress(c segment.Codec, b []byte) ([]byte, error) {
	var zr io.Reader
	if c == segment.CodecGzip {
		gr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		zr = gr
	} else {
		zr = lz4.NewReader(bytes.NewReader(b))
	}
	return io.ReadAll(zr)
}

func recompress(c segment.Codec, plain []byte) []byte {
	var out bytes.Buffer
	var zw io.WriteCloser = gzip.NewWriter(&out)
	if c == segment.CodecLZ4 {
		zw = lz4.NewWriter(&out)
	}
	if _, err := zw.Write(plain); err != nil {
		panic(err)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return out.Bytes()
}
