package segment

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// producerBatch is what an idempotent producer sends, as a leader of epoch
// 7 stamped it: five records at offsets 100 to 104, one a tombstone.
func producerBatch(t *testing.T, codec Codec, logAppendTime bool) Batch {
	t.Helper()
	recs := []Record{
		{Timestamp: 5000, Key: []byte("a"), Value: []byte("a1")},
		{Timestamp: 5010, Key: []byte("b"), Value: []byte("b1"), Headers: []Header{{Key: "h", Value: []byte("v")}}},
		{Timestamp: 5020, Key: []byte("a"), Value: nil},
		{Timestamp: 5030, Key: []byte("c"), Value: []byte("c1")},
		{Timestamp: 5040, Key: []byte("b"), Value: []byte("b2")},
	}
	raw, err := AppendBatch(nil, recs, BuildOptions{
		BaseOffset: 100, Codec: codec, Transactional: true,
		Producer: &ProducerFields{ID: 42, Epoch: 3, BaseSequence: 17},
	})
	require.NoError(t, err)
	b := Batch(raw)
	b.SetPartitionLeaderEpoch(7)
	if logAppendTime {
		b.SetLogAppendTime(9000)
	}
	require.NoError(t, b.Validate())
	return b
}

func records(t *testing.T, b Batch) []Record {
	t.Helper()
	var out []Record
	for r, err := range b.Records() {
		require.NoError(t, err)
		out = append(out, r)
	}
	return out
}

// requireSameHeader checks the header fields compaction must never change.
func requireSameHeader(t *testing.T, want, got Batch) {
	t.Helper()
	require.Equal(t, want.BaseOffset(), got.BaseOffset(), "base offset")
	require.Equal(t, want.LastOffset(), got.LastOffset(), "last offset")
	require.Equal(t, want.PartitionLeaderEpoch(), got.PartitionLeaderEpoch(), "leader epoch")
	require.Equal(t, want.ProducerID(), got.ProducerID(), "producer id")
	require.Equal(t, want.ProducerEpoch(), got.ProducerEpoch(), "producer epoch")
	require.Equal(t, want.BaseSequence(), got.BaseSequence(), "base sequence")
	require.Equal(t, want.Transactional(), got.Transactional(), "transactional")
	require.Equal(t, want.Control(), got.Control(), "control")
	require.Equal(t, want.LogAppendTime(), got.LogAppendTime(), "timestamp type")
}

func TestAppendRetainedKeepsOffsetsAndProducer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		codec         Codec
		logAppendTime bool
		horizon       int64
	}{
		{"uncompressed", CodecNone, false, -1},
		{"gzip recompressed with gzip", CodecGzip, false, -1},
		{"lz4 with a delete horizon", CodecLZ4, false, 86_405_000},
		{"log append time", CodecNone, true, -1},
		{"log append time with a delete horizon", CodecGzip, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := producerBatch(t, tc.codec, tc.logAppendTime)
			all := records(t, orig)
			keep := []Record{all[2], all[3]} // a's tombstone and c: not the first nor the last
			out, err := AppendRetained([]byte("prefix"), orig, keep, tc.horizon)
			require.NoError(t, err)
			require.Equal(t, "prefix", string(out[:6]))
			got, rest, err := ParseBatch(out[6:])
			require.NoError(t, err)
			require.Empty(t, rest)
			require.NoError(t, got.Validate())

			requireSameHeader(t, orig, got)
			require.Equal(t, tc.codec, got.Codec())
			require.EqualValues(t, 2, got.NumRecords())
			horizon, ok := got.DeleteHorizon()
			require.Equal(t, tc.horizon >= 0, ok)
			if ok {
				require.Equal(t, tc.horizon, horizon)
			}
			want := keep
			if tc.logAppendTime {
				require.EqualValues(t, 9000, got.MaxTimestamp())
			} else {
				require.EqualValues(t, 5030, got.MaxTimestamp(), "max of the records kept")
			}
			require.Equal(t, want, records(t, got), "records, offsets and timestamps as they were")
		})
	}
}

// TestAppendRetainedEmpty checks the header-only batch against Kafka's
// DefaultRecordBatch.writeEmptyHeader: no records, codec none, base
// timestamp -1, the original max timestamp, offsets and producer fields,
// and a CRC over the 40 header bytes after it.
func TestAppendRetainedEmpty(t *testing.T) {
	orig := producerBatch(t, CodecGzip, false)
	out, err := AppendRetained(nil, orig, nil, 12345)
	require.NoError(t, err)
	got := Batch(out)
	require.Len(t, out, HeaderSize)
	require.Equal(t, HeaderSize, got.Size())
	require.NoError(t, got.Validate())
	requireSameHeader(t, orig, got)
	require.Equal(t, CodecNone, got.Codec())
	require.EqualValues(t, 0, got.NumRecords())
	require.EqualValues(t, -1, got.BaseTimestamp())
	require.EqualValues(t, 5040, got.MaxTimestamp())
	_, ok := got.DeleteHorizon()
	require.False(t, ok, "an empty batch has nothing to delete")
	require.Empty(t, records(t, got))
}

func TestAppendRetainedErrors(t *testing.T) {
	orig := producerBatch(t, CodecNone, false)
	all := records(t, orig)
	outside := all[0]
	outside.Offset = 105
	snappy := slices.Clone(orig)
	snappy[offAttributes+1] = byte(CodecSnappy)
	for _, tc := range []struct {
		name string
		b    Batch
		recs []Record
		want error
	}{
		{"offset past the batch", orig, []Record{outside}, ErrInvalidRecords},
		{"offsets out of order", orig, []Record{all[3], all[1]}, ErrInvalidRecords},
		{"repeated offset", orig, []Record{all[1], all[1]}, ErrInvalidRecords},
		{"snappy cannot be rebuilt", snappy, all[:1], ErrUnsupportedCodec},
		{"short header", orig[:HeaderSize-1], all[:1], ErrShortBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := AppendRetained(dst, tc.b, tc.recs, -1)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, "keep", string(out))
		})
	}
}

func TestBatchesIteratesFromAnOffset(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 40, 5, 300, 0, 1000)
	appendAll(t, s, bs)

	for _, tc := range []struct {
		name  string
		from  int64
		first int // index in bs
	}{
		{"from the start", 0, 0},
		{"inside a batch", 67, 13},
		{"last offset of a batch", 99, 19},
		{"past the end", 200, 40},
	} {
		for _, whole := range []bool{true, false} {
			var got []Batch
			for b, err := range s.Batches(tc.from, whole) {
				require.NoError(t, err)
				if whole {
					require.NoError(t, b.Validate())
				} else {
					require.Len(t, b, HeaderSize)
				}
				got = append(got, slices.Clone(b))
			}
			require.Len(t, got, 40-tc.first, "%s, whole %v", tc.name, whole)
			for i, b := range got {
				want := bs[tc.first+i]
				require.Equal(t, []byte(want[:HeaderSize]), []byte(b[:HeaderSize]))
				if whole {
					require.Equal(t, want, b)
				}
			}
		}
	}
}

func TestBatchesStopsWhenAsked(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	appendAll(t, s, testBatches(t, 10, 1, 10, 0, 1000))
	n := 0
	for range s.Batches(0, false) {
		n++
		if n == 3 {
			break
		}
	}
	require.Equal(t, 3, n)
}

func TestBatchesReportsCorruption(t *testing.T) {
	bs := testBatches(t, 3, 2, 10, 0, 1000)
	data := concat(bs)
	data[len(bs[0])+offMagic] = 9
	fs, dir := writeLog(t, data)
	s, _, err := Recover(dir, 0, on(fs, smallIndex), 0)
	require.NoError(t, err, "recovery cuts the bad batch")
	require.NoError(t, s.Close())

	// The same bytes behind a trusted index: Batches meets them.
	fs, dir = writeLog(t, data)
	s, err = openLog(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	require.NoError(t, s.openIndexes(true))
	defer s.Close()
	s.nextOffset.Store(math.MaxInt64)
	var errs []error
	for _, err := range s.Batches(0, true) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 2)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrCorrupt)
	require.ErrorContains(t, errs[1], fmt.Sprintf("position %d", len(bs[0])))
}

func TestCreateWithSuffixBesideTheLiveSegment(t *testing.T) {
	fs, dir := newMemDir(t)
	live, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	old := testBatches(t, 2, 2, 10, 0, 1000)
	appendAll(t, live, old)

	opts := on(fs, smallIndex)
	opts.Suffix = ".cleaned"
	cleaned, err := Create(dir, 0, opts)
	require.NoError(t, err)
	bs := testBatches(t, 1, 1, 10, 3, 1000)
	appendAll(t, cleaned, bs)
	require.NoError(t, cleaned.Seal())
	names, err := fs.List(dir)
	require.NoError(t, err)
	require.Equal(t, []string{
		"00000000000000000000.index", "00000000000000000000.index.cleaned",
		"00000000000000000000.log", "00000000000000000000.log.cleaned",
		"00000000000000000000.timeindex", "00000000000000000000.timeindex.cleaned",
	}, names)
	requireHolds(t, live, old)

	require.NoError(t, live.Remove())
	require.NoError(t, cleaned.Rename(""))
	require.NoError(t, cleaned.Close())
	reopened, err := Open(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer reopened.Close()
	requireHolds(t, reopened, bs)
}
