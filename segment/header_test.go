package segment

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/vfs"
)

// headerBatches is a segment's worth of batches of 3 records at offsets
// from 0, with leader epochs 0, 0, 1, 1, 2, 2, ... and an index entry
// every couple of batches.
func headerBatches(t *testing.T, n int) []Batch {
	bs := testBatches(t, n, 3, 40, 0, 0)
	for i, b := range bs {
		b.SetPartitionLeaderEpoch(int32(i / 2))
	}
	return bs
}

var headerIndex = Options{IndexIntervalBytes: 300, MaxIndexBytes: 4096}

// sealedSegment writes bs as a sealed segment 0 and returns its file
// system and directory.
func sealedSegment(t *testing.T, bs []Batch) (*vfs.MemFS, string) {
	fs, dir := newMemDir(t)
	s, err := Create(dir, 0, on(fs, headerIndex))
	require.NoError(t, err)
	appendAll(t, s, bs)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())
	return fs, dir
}

// flipBit flips bit of the byte at off of segment 0's log.
func flipBit(t *testing.T, fs vfs.FS, dir string, off int64, bit int) {
	t.Helper()
	name := FileName(dir, 0, LogSuffix)
	b := make([]byte, 1)
	f, err := fs.Open(name)
	require.NoError(t, err)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	overwrite(t, fs, name, off, []byte{b[0] ^ 1<<bit})
}

// readWhole reads the whole segment with Read, as a fetch from its start
// would, and returns the error.
func readWhole(s *Segment) error {
	for off := s.BaseOffset(); off < s.NextOffset(); {
		sl, err := s.Read(off, math.MaxInt64, 1<<20)
		if err != nil {
			return err
		}
		off = sl.NextOffset()
	}
	return nil
}

// Issue 21 part 9(a): Kafka's CRC-32C covers a batch from its attributes
// on (DefaultRecordBatch.ensureValid; the base offset, length and
// partition leader epoch are outside it so that a leader can stamp them),
// so a bit flipped in a base offset passes Validate. Every such flip in a
// middle batch of a sealed segment is caught: by Recover, and by a read
// that walks over it, as corruption naming the file and position.
func TestFlippedBaseOffsetBitIsCorruption(t *testing.T) {
	bs := headerBatches(t, 40) // the tail Open reads is far from the victim
	const victim = 4
	pos := int64(len(concat(bs[:victim])))
	for bit := range 64 {
		fs, dir := sealedSegment(t, bs)
		flipBit(t, fs, dir, pos+int64(7-bit/8), bit%8)

		s, err := Open(dir, 0, on(fs, headerIndex))
		require.NoError(t, err, "the flip lies before the tail Open reads")
		err = readWhole(s)
		require.ErrorIs(t, err, ErrCorrupt, "Read, bit %d", bit)
		require.ErrorContains(t, err, "00000000000000000000.log: position")
		require.NoError(t, s.Close())

		_, _, err = Recover(dir, 0, on(fs, headerIndex), math.MaxInt64)
		require.ErrorIs(t, err, ErrCorrupt, "Recover, bit %d", bit)
		require.ErrorContains(t, err, "00000000000000000000.log: position")
	}
}

// The partition leader epoch is outside the CRC too: within a segment,
// epochs never go backwards (a leader stamps its own, a follower keeps its
// leader's, KIP-101), and no epoch is negative but -1
// (NO_PARTITION_LEADER_EPOCH).
func TestLeaderEpochGoingBackwardsIsCorruption(t *testing.T) {
	bs := headerBatches(t, 9)
	// Epoch 2, after a batch of epoch 1 and before one of epoch 2: no flip
	// leaves it between them (a flip that did is for the epoch cache to
	// catch, see package log).
	const victim = 4
	pos := int64(len(concat(bs[:victim])))
	for bit := range 32 {
		fs, dir := sealedSegment(t, bs)
		flipBit(t, fs, dir, pos+12+int64(3-bit/8), bit%8)
		epoch := int32(2) ^ 1<<bit
		_, _, err := Recover(dir, 0, on(fs, headerIndex), math.MaxInt64)
		require.ErrorIs(t, err, ErrCorrupt, "epoch %d", epoch)
		require.ErrorContains(t, err, fmt.Sprintf("position %d", pos+int64(len(bs[victim]))*b2i(epoch > 2)))
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Options.CheckBatch sees every batch a read walks, and its refusal is
// corruption at that batch's position.
func TestCheckBatchRefusalIsCorruption(t *testing.T) {
	bs := headerBatches(t, 9)
	fs, dir := sealedSegment(t, bs)
	bad := errors.New("epoch unknown to the cache")
	opts := on(fs, headerIndex)
	var seen []int64
	opts.CheckBatch = func(h Batch) error {
		seen = append(seen, h.BaseOffset())
		if h.BaseOffset() == bs[6].BaseOffset() {
			return bad
		}
		return nil
	}
	s, _, err := Recover(dir, 0, opts, math.MaxInt64)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, bad)
	require.ErrorContains(t, err, fmt.Sprintf("position %d", len(concat(bs[:6]))))
	require.Nil(t, s)
	require.Equal(t, []int64{0, 3, 6, 9, 12, 15, 18}, seen)

	opts.CheckBatch = nil
	s, err = Open(dir, 0, opts)
	require.NoError(t, err)
	defer s.Close()
	s.opts.CheckBatch = func(h Batch) error {
		if h.BaseOffset() == bs[6].BaseOffset() {
			return bad
		}
		return nil
	}
	_, err = s.Read(0, math.MaxInt64, 1<<20)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, bad)
	sl, err := s.Read(0, math.MaxInt64, len(concat(bs[:2])))
	require.NoError(t, err, "a read that stops two batches before sees only the next one's header")
	require.EqualValues(t, 6, sl.NextOffset())
}
