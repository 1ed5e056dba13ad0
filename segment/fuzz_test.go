package segment

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"slices"
	"testing"
)

// seedBatches returns valid batches of every writable codec and shape, the
// foreign vectors, and a few broken ones, as seeds for the fuzz targets.
func seedBatches(tb testing.TB) [][]byte {
	seeds := [][]byte{goldenBatch, saramaUncompressed, saramaGzip, saramaLZ4, saramaSnappy}
	recs := append(slices.Clone(goldenRecords), Record{Timestamp: -5, Key: []byte{}, Headers: []Header{{Key: "a", Value: []byte{}}}})
	for _, c := range writableCodecs {
		seeds = append(seeds, mustBuild(tb, recs, BuildOptions{Codec: c, BaseOffset: 1 << 40}))
	}
	ctl := mustBuild(tb, []Record{{Key: []byte{0, 0, 0, 1}, Value: []byte{0, 0, 0, 0, 0, 0}}},
		BuildOptions{Control: true, Transactional: true, Producer: &ProducerFields{ID: 1}})
	lat := mustBuild(tb, recs, BuildOptions{})
	lat.SetLogAppendTime(99)
	two := append(clone(goldenBatch), goldenBatch...)
	return append(seeds, ctl, lat, two, goldenBatch[:HeaderSize], goldenBatch[:40])
}

// FuzzParseBatch feeds arbitrary bytes through everything a reader of a
// segment file does: parse, validate, iterate. Nothing may panic, every
// error must be one of the package's, and a batch that validates and
// decodes must rebuild into a batch with the same records.
func FuzzParseBatch(f *testing.F) {
	for _, s := range seedBatches(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, rest, err := ParseBatch(data)
		if err != nil {
			requireKind(t, err, ErrShortBatch, ErrCorrupt)
			if !bytes.Equal(rest, data) {
				t.Fatal("rest must be the input on error")
			}
			return
		}
		if len(b) != b.Size() || len(b)+len(rest) != len(data) {
			t.Fatalf("batch of %d bytes claims %d, rest %d of %d", len(b), b.Size(), len(rest), len(data))
		}
		if h, err := ParseBatchHeader(data); err != nil || !bytes.Equal(h, b[:HeaderSize]) {
			t.Fatalf("ParseBatch accepted a header that ParseBatchHeader rejects: %v", err)
		}
		verr := b.Validate()
		if verr != nil {
			requireKind(t, verr, ErrCorrupt)
		}
		recs, err := readAll(b)
		if err != nil {
			requireKind(t, err, ErrCorrupt, ErrBatchTooLarge, ErrUnsupportedCodec)
			return
		}
		if verr != nil || len(recs) == 0 {
			return
		}
		checkRebuild(t, b, recs)
	})
}

// checkRebuild builds recs again with b's header options and checks that
// the new batch reads back the same records.
func checkRebuild(t *testing.T, b Batch, recs []Record) {
	opts := BuildOptions{
		BaseOffset:    b.BaseOffset(),
		Codec:         b.Codec(),
		Transactional: b.Transactional(),
		Control:       b.Control(),
		KeepOffsets:   true,
	}
	if b.ProducerID() != -1 || b.ProducerEpoch() != -1 || b.BaseSequence() != -1 {
		opts.Producer = &ProducerFields{ID: b.ProducerID(), Epoch: b.ProducerEpoch(), BaseSequence: b.BaseSequence()}
	}
	if opts.Transactional && opts.Producer == nil {
		return // a foreign batch Kafka would reject; AppendBatch does too
	}
	raw, err := AppendBatch(nil, recs, opts)
	if err != nil {
		t.Fatalf("rebuilding %d decoded records: %v", len(recs), err)
	}
	nb := Batch(raw)
	if err := nb.Validate(); err != nil {
		t.Fatalf("rebuilt batch does not validate: %v", err)
	}
	again, err := readAll(nb)
	if err != nil {
		t.Fatalf("rebuilt batch does not decode: %v", err)
	}
	if !sameRecords(recs, again) {
		t.Fatalf("records changed in a rebuild:\n%+v\n%+v", recs, again)
	}
}

// FuzzRecords fuzzes the records section under a sound header, where the
// record decoder and the decompressors do all the defending.
func FuzzRecords(f *testing.F) {
	for _, s := range seedBatches(f) {
		if b, _, err := ParseBatch(s); err == nil && len(b) > HeaderSize {
			f.Add([]byte(b[HeaderSize:]), b.NumRecords(), b.LastOffsetDelta(), uint8(b.attributes()))
		}
	}
	f.Fuzz(func(t *testing.T, records []byte, count, lastOffsetDelta int32, attrs uint8) {
		b := rawBatch(records, count, lastOffsetDelta, CodecNone)
		b[offAttributes+1] = attrs
		fixCRC(b)
		recs, err := readAll(b)
		// The one-pass decoder takes well-formed records; it must take
		// them as the field-by-field one does, and leave it the rest.
		careful, cerr := readCarefully(b)
		if !sameRecords(recs, careful) || fmt.Sprint(err) != fmt.Sprint(cerr) {
			t.Fatalf("Records read %d records, error %v; field by field %d, error %v", len(recs), err, len(careful), cerr)
		}
		if err != nil {
			requireKind(t, err, ErrCorrupt, ErrBatchTooLarge, ErrUnsupportedCodec)
			return
		}
		if len(recs) != int(count) {
			t.Fatalf("read %d records, header says %d", len(recs), count)
		}
		prev := b.BaseOffset() - 1
		for _, r := range recs {
			if r.Offset <= prev || r.Offset > b.LastOffset() {
				t.Fatalf("offset %d after %d, last offset %d", r.Offset, prev, b.LastOffset())
			}
			prev = r.Offset
		}
	})
}

func readAll(b Batch) ([]Record, error) { return collectRecords(b.Records()) }

// readCarefully reads b as Records does, with the field-by-field decoder
// alone.
func readCarefully(b Batch) ([]Record, error) { return collectRecords(b.records(false)) }

func collectRecords(all iter.Seq2[Record, error]) ([]Record, error) {
	var recs []Record
	for r, err := range all {
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// requireKind fails unless err matches one of kinds.
func requireKind(t *testing.T, err error, kinds ...error) {
	t.Helper()
	for _, k := range kinds {
		if errors.Is(err, k) {
			return
		}
	}
	t.Fatalf("error of no expected kind %v: %v", kinds, err)
}

// sameRecords compares records including the difference between null and
// empty, which assert.Equal ignores.
func sameRecords(a, b []Record) bool {
	same := func(x, y []byte) bool { return (x == nil) == (y == nil) && bytes.Equal(x, y) }
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Offset != y.Offset || x.Timestamp != y.Timestamp || !same(x.Key, y.Key) ||
			!same(x.Value, y.Value) || len(x.Headers) != len(y.Headers) {
			return false
		}
		for j := range x.Headers {
			if x.Headers[j].Key != y.Headers[j].Key || !same(x.Headers[j].Value, y.Headers[j].Value) {
				return false
			}
		}
	}
	return true
}
