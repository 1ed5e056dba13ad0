package segment

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallIndex keeps index files small so that tests fill and map them fast.
var smallIndex = Options{IndexIntervalBytes: 4096, MaxIndexBytes: 8 << 10}

// testBatches builds n batches of recs records each with valueSize-byte
// values, offsets from base on and timestamps rising by 10 ms a record
// from ts0.
func testBatches(t testing.TB, n, recs, valueSize int, base, ts0 int64) []Batch {
	t.Helper()
	var out []Batch
	off, ts := base, ts0
	for i := 0; i < n; i++ {
		rs := make([]Record, recs)
		for j := range rs {
			rs[j] = Record{Timestamp: ts, Key: fmt.Appendf(nil, "k%d", off+int64(j)), Value: bytes.Repeat([]byte{byte(i)}, valueSize)}
			ts += 10
		}
		b, err := AppendBatch(nil, rs, BuildOptions{BaseOffset: off})
		require.NoError(t, err)
		out = append(out, Batch(b))
		off += int64(recs)
	}
	return out
}

// on returns opts for the file system fs.
func on(fs vfs.FS, opts Options) Options {
	opts.FS = fs
	return opts
}

func newMemDir(t testing.TB) (*vfs.MemFS, string) {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/p-0", 0o755))
	return fs, "/p-0"
}

func appendAll(t testing.TB, s *Segment, bs []Batch) {
	t.Helper()
	for _, b := range bs {
		require.NoError(t, s.Append(b))
	}
}

// requireHolds checks that s holds exactly want, byte for byte, and that
// every offset of every batch is found at that batch's position.
func requireHolds(t *testing.T, s *Segment, want []Batch) {
	t.Helper()
	var all []byte
	pos := int64(0)
	for _, b := range want {
		for _, off := range []int64{b.BaseOffset(), b.LastOffset()} {
			got, h, err := s.FindOffset(off)
			require.NoError(t, err, "offset %d", off)
			require.Equal(t, pos, got, "position of offset %d", off)
			require.Equal(t, b.BaseOffset(), h.BaseOffset())
		}
		pos += int64(len(b))
		all = append(all, b...)
	}
	require.Equal(t, int64(len(all)), s.Size())
	next := s.BaseOffset()
	if len(want) > 0 {
		next = want[len(want)-1].LastOffset() + 1
	}
	require.Equal(t, next, s.NextOffset())
	_, _, err := s.FindOffset(next)
	require.ErrorIs(t, err, ErrOffsetNotFound)
	if len(want) == 0 {
		return
	}
	sl, err := s.Read(s.BaseOffset(), math.MaxInt64, math.MaxInt32)
	require.NoError(t, err)
	got, err := sl.Bytes()
	require.NoError(t, err)
	require.True(t, bytes.Equal(all, got), "log bytes differ")
}

func TestAppendIndexesAfterEveryIntervalBytes(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 100, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 40, 3, 400, 100, 1000) // ~1.3 KiB batches
	appendAll(t, s, bs)
	requireHolds(t, s, bs)

	// Kafka's rule: an entry once more than 4096 bytes went by since the
	// last one, mapping the batch's last offset to its start.
	var wantEntries int
	since := 0
	pos := 0
	for _, b := range bs {
		if since > smallIndex.IndexIntervalBytes {
			wantEntries++
			e := s.offsets.Lookup(b.LastOffset())
			require.Equal(t, b.LastOffset(), e.Offset)
			require.EqualValues(t, pos, e.Position)
			since = 0
		}
		since += len(b)
		pos += len(b)
	}
	require.Equal(t, wantEntries, s.offsets.Entries())
	require.Greater(t, wantEntries, 5)
}

func TestAppendRejectsOffsetsOutOfOrder(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 10, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 2, 5, 10, 10, 0)
	require.NoError(t, s.Append(bs[0]))
	require.ErrorIs(t, s.Append(bs[0]), ErrOffsetOrder, "same offsets twice")
	below := testBatches(t, 1, 1, 10, 5, 0)[0]
	require.ErrorIs(t, s.Append(below), ErrOffsetOrder, "below the base offset")
	far := testBatches(t, 1, 1, 10, 10+math.MaxInt32+1, 0)[0]
	require.ErrorIs(t, s.Append(far), ErrSegmentFull, "relative offset overflow")
	require.NoError(t, s.Append(bs[1]))
	requireHolds(t, s, bs)
}

func TestReadReturnsWholeBatches(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 10, 4, 100, 0, 0)
	appendAll(t, s, bs)
	size := len(bs[0])

	for _, tc := range []struct {
		name              string
		offset, maxOffset int64
		maxBytes          int
		wantFirst, wantN  int // batches
	}{
		{"from the start, all", 0, math.MaxInt64, 1 << 20, 0, 10},
		{"offset inside a batch starts at that batch", 6, math.MaxInt64, 1 << 20, 1, 9},
		{"byte limit keeps whole batches", 0, math.MaxInt64, 3*size + size/2, 0, 3},
		{"at least one batch even over the limit", 8, math.MaxInt64, 1, 2, 1},
		{"upper bound excludes a batch it cuts", 0, 10, 1 << 20, 0, 2},
		{"upper bound at a batch boundary", 0, 12, 1 << 20, 0, 3},
		{"first batch beyond the upper bound", 12, 12, 1 << 20, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl, err := s.Read(tc.offset, tc.maxOffset, tc.maxBytes)
			require.NoError(t, err)
			require.EqualValues(t, len(concat(bs[:tc.wantFirst])), sl.Position())
			got, err := sl.Bytes()
			require.NoError(t, err)
			require.Equal(t, concat(bs[tc.wantFirst:tc.wantFirst+tc.wantN]), got)
			if tc.wantN > 0 {
				require.EqualValues(t, 4*(tc.wantFirst+tc.wantN), sl.NextOffset())
			} else {
				require.Zero(t, sl.NextOffset())
			}
		})
	}
	_, err = s.Read(40, math.MaxInt64, 100)
	require.ErrorIs(t, err, ErrOffsetNotFound)
}

// TestReadSkipsByTheIndexAsAWalkWould: Read skips to an index entry
// instead of reading every batch header; whatever the batch sizes, the
// index interval, the offset, the upper bound and the byte limit, it
// returns exactly the batches a walk over every header returns.
func TestReadSkipsByTheIndexAsAWalkWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, interval := range []int{1, 300, 4096, 1 << 20} {
		fs, dir := newMemDir(t)
		s, err := Create(dir, 0, on(fs, Options{IndexIntervalBytes: interval, MaxIndexBytes: 64 << 10}))
		require.NoError(t, err)
		var bs []Batch
		var starts []int64 // position of each batch, then the end
		off, pos := int64(0), int64(0)
		for range 200 {
			b := testBatches(t, 1, 1+rng.IntN(8), rng.IntN(3000), off, 0)[0]
			require.NoError(t, s.Append(b))
			bs, starts = append(bs, b), append(starts, pos)
			off, pos = b.LastOffset()+1, pos+int64(len(b))
		}
		starts = append(starts, pos)
		for range 2000 {
			offset := rng.Int64N(off)
			maxOffset := offset + rng.Int64N(off-offset+20)
			maxBytes := rng.IntN(40000)
			first, _ := slices.BinarySearchFunc(bs, offset, func(b Batch, o int64) int { return cmp.Compare(b.LastOffset(), o) })
			last := first // one past the last batch returned
			for last < len(bs) && bs[last].LastOffset() < maxOffset && (last == first || starts[last+1]-starts[first] <= int64(maxBytes)) {
				last++
			}
			sl, err := s.Read(offset, maxOffset, maxBytes)
			require.NoError(t, err)
			require.Equal(t, starts[first], sl.Position(), "interval %d: Read(%d, %d, %d)", interval, offset, maxOffset, maxBytes)
			require.Equal(t, starts[last]-starts[first], sl.Len(), "interval %d: Read(%d, %d, %d)", interval, offset, maxOffset, maxBytes)
			if last > first {
				require.Equal(t, bs[last-1].LastOffset()+1, sl.NextOffset(), "interval %d: Read(%d, %d, %d)", interval, offset, maxOffset, maxBytes)
			}
		}
		require.NoError(t, s.Close())
	}
}

func TestFindTimestamp(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, Options{IndexIntervalBytes: 100, MaxIndexBytes: 4096}))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 30, 5, 50, 0, 1000) // record i has timestamp 1000+10i
	appendAll(t, s, bs)
	require.Greater(t, s.times.Entries(), 3, "the test must cross time index entries")

	for ts := int64(900); ts <= 2600; ts += 7 {
		want, wantOK := int64(0), false
		if ts <= 1000+10*149 {
			want, wantOK = max(0, (ts-1000+9)/10), true
		}
		got, ok, err := s.FindTimestamp(ts)
		require.NoError(t, err)
		require.Equal(t, wantOK, ok, "ts %d", ts)
		if ok {
			require.Equal(t, want, got, "ts %d", ts)
		}
	}
	require.EqualValues(t, 1000+10*149, s.MaxTimestamp())
	require.EqualValues(t, 1000+10*4, s.FirstBatchTimestamp())
}

func TestReopenAfterSeal(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 7, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 25, 3, 500, 7, 50)
	appendAll(t, s, bs)
	maxTS, first := s.MaxTimestamp(), s.FirstBatchTimestamp()
	require.NoError(t, s.Seal())
	require.NoError(t, s.Sync())
	require.NoError(t, s.Close())

	s, err = Open(dir, 7, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	requireHolds(t, s, bs)
	require.Equal(t, maxTS, s.MaxTimestamp())
	require.Equal(t, first, s.FirstBatchTimestamp())

	// An opened segment becomes the active one again.
	require.NoError(t, s.Unseal())
	more := testBatches(t, 3, 3, 500, bs[len(bs)-1].LastOffset()+1, 10000)
	appendAll(t, s, more)
	requireHolds(t, s, append(bs, more...))
}

func TestOpenRebuildsACorruptIndex(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 20, 3, 500, 0, 50)
	appendAll(t, s, bs)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())

	// Entries out of order: the sanity check refuses the file.
	overwrite(t, fs, FileName(dir, 0, IndexSuffix), 8, []byte{0, 0, 0, 0, 0, 0, 0xff, 0xff})

	s, err = Open(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	requireHolds(t, s, bs)
}

func TestOpenReportsCorruptionItTrusts(t *testing.T) {
	// Break the magic byte of the last batch: a trusted segment must say so
	// rather than drop it.
	fs, dir, _, pos := threeBatchesBrokenAt(t, 2)

	_, err := Open(dir, 0, on(fs, smallIndex))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, fmt.Sprintf("position %d", pos))
	require.ErrorContains(t, err, "00000000000000000000.log")
}

// overwrite writes b at off in the named file, as damage would.
func overwrite(t testing.TB, fs vfs.FS, name string, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenReadWrite(name)
	require.NoError(t, err)
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// threeBatchesBrokenAt writes three batches in a new segment and breaks the
// magic byte of batch i.
func threeBatchesBrokenAt(t *testing.T, i int) (*vfs.MemFS, string, []Batch, int64) {
	t.Helper()
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 3, 3, 100, 0, 50)
	appendAll(t, s, bs)
	require.NoError(t, s.Close())
	pos := int64(len(concat(bs[:i])))
	overwrite(t, fs, FileName(dir, 0, LogSuffix), pos+16, []byte{9})
	return fs, dir, bs, pos
}

// writeLog writes raw bytes as the log of segment 0 in a new directory.
func writeLog(t testing.TB, data []byte) (*vfs.MemFS, string) {
	fs, dir := newMemDir(t)
	f, err := fs.Create(FileName(dir, 0, LogSuffix))
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return fs, dir
}

func concat(bs []Batch) []byte {
	out := []byte{}
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func TestRecoverTornTailAtEveryByte(t *testing.T) {
	bs := testBatches(t, 12, 4, 300, 0, 0)
	full := concat(bs)
	keep := bs[:len(bs)-1]
	good := len(concat(keep))
	for cut := good; cut < len(full); cut++ {
		fs, dir := writeLog(t, full[:cut])
		s, truncated, err := Recover(dir, 0, on(fs, smallIndex), 0)
		require.NoError(t, err, "cut at %d", cut)
		require.EqualValues(t, cut-good, truncated, "cut at %d", cut)
		requireHolds(t, s, keep)
		require.NoError(t, s.Close())
	}
	fs, dir := writeLog(t, full)
	s, truncated, err := Recover(dir, 0, on(fs, smallIndex), 0)
	require.NoError(t, err)
	require.Zero(t, truncated)
	requireHolds(t, s, bs)
	require.NoError(t, s.Close())
}

func TestRecoverTruncatesACorruptLastBatch(t *testing.T) {
	bs := testBatches(t, 6, 4, 100, 0, 0)
	full := concat(bs)
	good := len(concat(bs[:len(bs)-1]))
	// Every bit from the length field on is covered by the framing checks
	// or the CRC. The base offset and the partition leader epoch (bytes 0
	// to 7 and 12 to 15) are outside the CRC in Kafka's format, so that a
	// leader can stamp them; a flip there is caught only when it breaks the
	// offset order.
	for i := good + 8; i < len(full); i++ {
		if i >= good+12 && i < good+16 {
			continue
		}
		for bit := 0; bit < 8; bit++ {
			data := bytes.Clone(full)
			data[i] ^= 1 << bit
			fs, dir := writeLog(t, data)
			s, truncated, err := Recover(dir, 0, on(fs, smallIndex), 0)
			require.NoError(t, err)
			require.EqualValues(t, len(full)-good, truncated, "bit %d of byte %d", bit, i-good)
			requireHolds(t, s, bs[:len(bs)-1])
			require.NoError(t, s.Close())
		}
	}
}

func TestRecoverRefusesToCutDurableOffsets(t *testing.T) {
	bs := testBatches(t, 5, 4, 100, 0, 0)
	data := concat(bs)
	pos := len(concat(bs[:2]))
	data[pos+40] ^= 1 // inside batch 2, offsets 8 to 11
	for _, durable := range []int64{9, 12, 20} {
		fs, dir := writeLog(t, data)
		_, _, err := Recover(dir, 0, on(fs, smallIndex), durable)
		require.ErrorIs(t, err, ErrCorrupt, "durable %d", durable)
		require.ErrorContains(t, err, fmt.Sprintf("position %d", pos))
		fi, err := fs.Stat(FileName(dir, 0, LogSuffix))
		require.NoError(t, err)
		require.EqualValues(t, len(data), fi.Size(), "nothing is cut")
	}
	fs, dir := writeLog(t, data)
	s, _, err := Recover(dir, 0, on(fs, smallIndex), 8)
	require.NoError(t, err, "a bad batch at the durable offset is a torn write")
	requireHolds(t, s, bs[:2])
	require.NoError(t, s.Close())
}

func TestRecoverStopsAtOffsetsGoingBackwards(t *testing.T) {
	bs := testBatches(t, 3, 2, 10, 0, 0)
	bs = append(bs, testBatches(t, 1, 2, 10, 2, 0)...) // repeats offsets 2 and 3
	fs, dir := writeLog(t, concat(bs))
	s, truncated, err := Recover(dir, 0, on(fs, smallIndex), 0)
	require.NoError(t, err)
	require.EqualValues(t, len(bs[3]), truncated)
	requireHolds(t, s, bs[:3])
	require.NoError(t, s.Close())
}

func TestTruncateTo(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, Options{IndexIntervalBytes: 200, MaxIndexBytes: 4096}))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 20, 5, 60, 0, 0)
	appendAll(t, s, bs)
	require.NoError(t, s.Seal())

	// Truncating inside batch 12 (offsets 60-64) removes it whole.
	removed, err := s.TruncateTo(62)
	require.NoError(t, err)
	require.EqualValues(t, len(concat(bs[12:])), removed)
	requireHolds(t, s, bs[:12])
	require.Equal(t, bs[11].MaxTimestamp(), s.MaxTimestamp())
	for _, e := range []int64{s.offsets.LastEntry().Offset, s.times.LastEntry().Offset} {
		require.Less(t, e, int64(60), "no index entry may point past the end")
	}

	removed, err = s.TruncateTo(1000)
	require.NoError(t, err)
	require.Zero(t, removed, "truncating past the end removes nothing")

	// The truncated segment is active again and takes the same offsets.
	appendAll(t, s, bs[12:])
	requireHolds(t, s, bs)

	_, err = s.TruncateTo(0)
	require.NoError(t, err)
	requireHolds(t, s, nil)
	require.EqualValues(t, -1, s.MaxTimestamp())
}

// TestCrashAtEveryOperation runs a segment's life on the in-memory file
// system and cuts the power before each of its file-system operations in
// turn. Whatever survives must recover to a prefix of the batches
// appended, holding at least every batch that was synced.
func TestCrashAtEveryOperation(t *testing.T) {
	bs := testBatches(t, 16, 3, 700, 0, 0)
	run := func(fs *vfs.MemFS) (synced int) {
		s, err := Create("/p-0", 0, on(fs, smallIndex))
		if err != nil {
			return 0
		}
		defer s.Close()
		d, err := fs.OpenDir("/p-0")
		if err != nil || d.Sync() != nil {
			return 0
		}
		for i, b := range bs {
			if s.Append(b) != nil {
				return synced
			}
			if i%3 == 2 || i == len(bs)-1 {
				if s.SyncLog() != nil {
					return synced
				}
				synced = i + 1
			}
		}
		if s.Seal() != nil || s.Sync() != nil {
			return synced
		}
		return synced
	}

	// Count the operations of a full run.
	total := 0
	fs, _ := newMemDir(t)
	fs.SetHook(func(vfs.Op) error { total++; return nil })
	require.Equal(t, len(bs), run(fs))
	require.Greater(t, total, len(bs))

	errCrashed := errors.New("crashed")
	for stop := 0; stop <= total; stop++ {
		for seed := uint64(0); seed < 3; seed++ {
			fs, _ := newMemDir(t)
			root, err := fs.OpenDir("/")
			require.NoError(t, err)
			require.NoError(t, root.Sync())
			var after *vfs.MemFS
			n := 0
			fs.SetHook(func(vfs.Op) error {
				if n == stop {
					after = fs.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(seed, uint64(stop)))})
				}
				n++
				if n > stop {
					return errCrashed
				}
				return nil
			})
			synced := run(fs)
			if after == nil {
				after = fs.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(seed, uint64(stop)))})
			}
			if _, err := after.Stat(FileName("/p-0", 0, LogSuffix)); err != nil {
				require.Zero(t, synced, "stop %d: the log vanished after a sync", stop)
				continue
			}
			s, _, err := Recover("/p-0", 0, on(after, smallIndex), 0)
			require.NoError(t, err, "stop %d", stop)
			got := s.NextOffset()
			require.GreaterOrEqual(t, got, int64(synced*3), "stop %d seed %d: synced batches lost", stop, seed)
			kept := int(got / 3)
			requireHolds(t, s, bs[:kept])
			require.NoError(t, s.Close())
		}
	}
}

func TestSliceWriteTo(t *testing.T) {
	dir := t.TempDir()
	s, err := Create(dir, 0, on(vfs.Default, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 10, 10, 200, 0, 0)
	appendAll(t, s, bs)
	sl, err := s.Read(20, math.MaxInt64, 1<<20)
	require.NoError(t, err)
	want := concat(bs[2:])

	var buf bytes.Buffer // no descriptor: copied
	n, err := sl.WriteTo(&buf)
	require.NoError(t, err)
	require.EqualValues(t, len(want), n)
	require.Equal(t, want, buf.Bytes())

	out, err := os.Create(filepath.Join(dir, "out")) // a descriptor: sendfile
	require.NoError(t, err)
	defer out.Close()
	n, err = sl.WriteTo(out)
	require.NoError(t, err)
	require.EqualValues(t, len(want), n)
	got, err := os.ReadFile(out.Name())
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func FuzzRecover(f *testing.F) {
	bs := testBatches(f, 4, 3, 20, 0, 0)
	f.Add(concat(bs))
	f.Add(concat(bs)[:100])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 200))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, dir := writeLog(t, data)
		s, truncated, err := Recover(dir, 0, on(fs, Options{IndexIntervalBytes: 64, MaxIndexBytes: 1024}), 0)
		if err != nil {
			return
		}
		defer s.Close()
		require.Equal(t, int64(len(data))-truncated, s.Size())
		// What survived is whole, valid batches in offset order, and a
		// reopen after a clean seal agrees.
		var kept []Batch
		rest := data[:s.Size()]
		for len(rest) > 0 {
			b, r, err := ParseBatch(rest)
			require.NoError(t, err)
			require.NoError(t, b.Validate())
			kept, rest = append(kept, b), r
		}
		requireHolds(t, s, kept)
		require.NoError(t, s.Seal())
		require.NoError(t, s.Close())
		s, err = Open(dir, 0, on(fs, Options{IndexIntervalBytes: 64, MaxIndexBytes: 1024}))
		require.NoError(t, err)
		requireHolds(t, s, kept)
	})
}

func TestLazyOpenLoadsOnFirstUse(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 20, 3, 500, 0, 50)
	appendAll(t, s, bs)
	maxTS := s.MaxTimestamp()
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())

	lazy := on(fs, smallIndex)
	lazy.Lazy = true
	s, err = Open(dir, 0, lazy)
	require.NoError(t, err)
	require.Equal(t, 1, s.OpenFiles(), "only the log is open")
	// Readers racing to load it all see the loaded state.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, h, err := s.FindOffset(30)
			assert.NoError(t, err)
			assert.Equal(t, bs[10].BaseOffset(), h.BaseOffset())
			assert.Equal(t, maxTS, s.MaxTimestamp())
		}()
	}
	wg.Wait()
	require.Equal(t, 3, s.OpenFiles())
	requireHolds(t, s, bs)
	require.NoError(t, s.Close())

	// Renamed and removed before any use, the indexes go with the log.
	s, err = Open(dir, 0, lazy)
	require.NoError(t, err)
	require.NoError(t, s.Rename(".deleted"))
	names, err := fs.List(dir)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"00000000000000000000.log.deleted", "00000000000000000000.index.deleted", "00000000000000000000.timeindex.deleted"}, names)
	require.NoError(t, s.Remove())
	names, err = fs.List(dir)
	require.NoError(t, err)
	require.Empty(t, names)
}

func TestLazyOpenReportsCorruptionAtFirstUse(t *testing.T) {
	fs, dir, _, _ := threeBatchesBrokenAt(t, 1)

	lazy := on(fs, smallIndex)
	lazy.Lazy = true
	s, err := Open(dir, 0, lazy)
	require.NoError(t, err, "a lazy open reads nothing")
	defer s.Close()
	_, _, err = s.FindOffset(0)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = s.Read(0, math.MaxInt64, 1<<20)
	require.ErrorIs(t, err, ErrCorrupt, "the failure sticks")
	require.ErrorIs(t, s.Append(testBatches(t, 1, 1, 10, 100, 0)[0]), ErrCorrupt)
}

// cutLog truncates the segment's log file to size, as a damaged or
// hand-edited directory would leave it.
func cutLog(t testing.TB, fs vfs.FS, dir string, base, size int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(FileName(dir, base, LogSuffix))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
}

// TestOpenTakesTheLogEndFromTheDataNotTheIndex cuts a sealed segment's log
// at a batch boundary below its last index entries: the next offset is
// where the data ends, so that new batches never get offsets that old
// batches still hold in the file.
func TestOpenTakesTheLogEndFromTheDataNotTheIndex(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 20, 3, 500, 0, 50)
	appendAll(t, s, bs)
	require.Greater(t, s.offsets.Entries(), 2)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())
	kept := bs[:5] // below the first index entry's batch
	cutLog(t, fs, dir, 0, int64(len(concat(kept))))

	lazy := on(fs, smallIndex)
	lazy.Lazy = true
	s, err = Open(dir, 0, lazy)
	require.NoError(t, err)
	next, err := s.ReadNextOffset()
	require.NoError(t, err)
	require.Equal(t, kept[len(kept)-1].LastOffset()+1, next, "ReadNextOffset reads the data")
	require.Equal(t, 1, s.OpenFiles(), "and leaves the segment unloaded")
	require.NoError(t, s.Close())

	s, err = Open(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	requireHolds(t, s, kept)
	require.NoError(t, s.Unseal())
	more := testBatches(t, 2, 3, 500, next, 10000)
	appendAll(t, s, more)
	requireHolds(t, s, append(slices.Clone(kept), more...))
}

// TestOpenReportsATornBatchItTrustsAsCorrupt: a trusted log has no torn
// tail, so a batch the file ends inside is corruption.
func TestOpenReportsATornBatchItTrustsAsCorrupt(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 3, 3, 100, 0, 50)
	appendAll(t, s, bs)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())
	cutLog(t, fs, dir, 0, int64(len(concat(bs)))-10)

	_, err = Open(dir, 0, on(fs, smallIndex))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, fmt.Sprintf("position %d", len(concat(bs[:2]))))
	require.ErrorContains(t, err, FileName(dir, 0, LogSuffix))
}

// TestSliceAllNamesTheFileAndPositionOfABadBatch: a read's CRC error says
// which file and which batch.
func TestSliceAllNamesTheFileAndPositionOfABadBatch(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	bs := testBatches(t, 4, 3, 100, 0, 50)
	appendAll(t, s, bs)
	require.NoError(t, s.Close())
	pos := int64(len(concat(bs[:2])))
	overwrite(t, fs, FileName(dir, 0, LogSuffix), pos+HeaderSize+4, []byte{0xff})

	s, err = Open(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	sl, err := s.Read(bs[1].BaseOffset(), math.MaxInt64, 1<<20)
	require.NoError(t, err)
	var got []int64
	for b, err := range sl.All() {
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, "crc mismatch")
			require.ErrorContains(t, err, FileName(dir, 0, LogSuffix))
			require.ErrorContains(t, err, fmt.Sprintf("position %d", pos))
			break
		}
		got = append(got, b.BaseOffset())
	}
	require.Equal(t, []int64{bs[1].BaseOffset()}, got, "the good batch before it is yielded")
}

// TestSliceAllIntoReusesTheBuffer: AllInto reads into the caller's buffer
// when the slice fits and grows it when not; it yields the batches All
// does, aliasing the buffer.
func TestSliceAllIntoReusesTheBuffer(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, smallIndex))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 6, 3, 100, 0, 0)
	appendAll(t, s, bs)

	buf := make([]byte, 0, len(concat(bs[:2])))
	for _, tc := range []struct {
		name     string
		offset   int64
		maxBytes int
		want     []Batch
		grows    bool
	}{
		{"a slice that fits is read into the buffer", 0, len(concat(bs[:2])), bs[:2], false},
		{"a larger slice grows it", 6, 1 << 20, bs[2:], true},
		{"the grown buffer is reused", 0, len(concat(bs[:3])), bs[:3], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl, err := s.Read(tc.offset, math.MaxInt64, tc.maxBytes)
			require.NoError(t, err)
			before := &buf[:1][0]
			var got []Batch
			for b, err := range sl.AllInto(&buf) {
				require.NoError(t, err)
				if len(got) == 0 {
					require.Same(t, &buf[:1][0], &b[0], "the first batch aliases the buffer's start")
				}
				got = append(got, slices.Clone(b))
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.grows, before != &buf[:1][0], "buffer replaced")
			var all []Batch
			for b, err := range sl.All() {
				require.NoError(t, err)
				all = append(all, b)
			}
			require.Equal(t, all, got, "AllInto yields what All does")
		})
	}
}

// TestAppendBatchesIsAppendOneByOne: batches appended together in one
// write leave the segment (bytes, indexes, timestamps) as appending them
// one by one does; a batch out of order among them stops there.
func TestAppendBatchesIsAppendOneByOne(t *testing.T) {
	bs := testBatches(t, 40, 3, 400, 100, 1000)
	fs, dir := newMemDir(t)
	one, err := Create(dir, 100, on(fs, smallIndex))
	require.NoError(t, err)
	defer one.Close()
	appendAll(t, one, bs)

	fs, dir = newMemDir(t)
	many, err := Create(dir, 100, on(fs, smallIndex))
	require.NoError(t, err)
	defer many.Close()
	appendBatches := func(list []Batch) error {
		_, err := many.AppendBatches(list, concat(list))
		return err
	}
	require.NoError(t, appendBatches(bs[:1]))
	require.NoError(t, appendBatches(bs[1:25]))
	require.NoError(t, appendBatches(nil))

	outOfOrder := []Batch{bs[25], bs[24]}
	n, err := many.AppendBatches(outOfOrder, concat(outOfOrder))
	require.ErrorIs(t, err, ErrOffsetOrder)
	require.Equal(t, 1, n, "the batch before the one out of order is appended")
	require.ErrorIs(t, appendBatches(bs[:1]), ErrOffsetOrder, "offsets already in the segment")
	requireHolds(t, many, bs[:26])

	require.NoError(t, appendBatches(bs[26:]))
	requireHolds(t, many, bs)
	require.Equal(t, one.offsets.Entries(), many.offsets.Entries())
	for _, b := range bs {
		require.Equal(t, one.offsets.Lookup(b.LastOffset()), many.offsets.Lookup(b.LastOffset()))
	}
	require.Equal(t, one.MaxTimestamp(), many.MaxTimestamp())
	require.Equal(t, one.FirstBatchTimestamp(), many.FirstBatchTimestamp())
	for _, ts := range []int64{1000, 1500, 2000} {
		o1, ok1, err1 := one.FindTimestamp(ts)
		o2, ok2, err2 := many.FindTimestamp(ts)
		require.NoError(t, errors.Join(err1, err2))
		require.Equal(t, []any{o1, ok1}, []any{o2, ok2}, "timestamp %d", ts)
	}
}

// TestAppendBatchesKeepsWhatTheIndexesTook: when an index fills partway
// through, the batches before the one it could not take stay appended,
// and the log file ends where they do.
func TestAppendBatchesKeepsWhatTheIndexesTook(t *testing.T) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, Options{IndexIntervalBytes: 1, MaxIndexBytes: 64}))
	require.NoError(t, err)
	defer s.Close()
	bs := testBatches(t, 20, 2, 10, 0, 0)
	_, err = s.AppendBatches(bs, concat(bs))
	require.ErrorIs(t, err, ErrSegmentFull)
	k := 0
	for k < len(bs) && bs[k].LastOffset() < s.NextOffset() {
		k++
	}
	require.Positive(t, k)
	require.Less(t, k, len(bs))
	requireHolds(t, s, bs[:k])
	fi, err := fs.Stat(FileName(dir, 0, LogSuffix))
	require.NoError(t, err)
	require.Equal(t, s.Size(), fi.Size())
}
