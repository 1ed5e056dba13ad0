package log

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

const (
	damageDir     = "/data/t-0"
	damageRecords = 200 // in batches of 5, record(i) at offset i
	damageValue   = 100
)

// damagedLog writes records 0..199 in batches of 5, the leader epoch
// rising every 20 records (epoch e from offset 20e, as a replica that led
// ten times), over four segments, and closes the log cleanly. It returns
// the segments' base offsets and the epoch cache.
func damagedLog(t *testing.T) (*vfs.MemFS, []int64, []EpochEntry) {
	fs := newMemFS(t)
	bases, epochs := writeEpochLog(t, fs)
	return fs, bases, epochs
}

// writeEpochLog writes damagedLog's log on fs.
func writeEpochLog(t *testing.T, fs vfs.FS) ([]int64, []EpochEntry) {
	l, err := Open(damageDir, memOptions(fs))
	require.NoError(t, err)
	for i := 0; i < damageRecords; i += 5 {
		if i%20 == 0 {
			require.NoError(t, l.SetLeaderEpoch(int32(i/20)))
		}
		appendN(t, l, i, 5, 5, damageValue)
	}
	bases, epochs := segmentBases(l), l.Epochs()
	require.GreaterOrEqual(t, len(bases), 3)
	require.Len(t, epochs, 10)
	require.NoError(t, l.Close())
	return bases, epochs
}

// batchPos returns the position of the batch at offset in the segment at
// base, whose batches hold 5 records each.
func batchPos(t *testing.T, fs vfs.FS, base, offset int64) int64 {
	ends := batchEnds(t, fs, damageDir, base)
	i := (offset - base) / 5
	if i == 0 {
		return 0
	}
	return ends[i-1]
}

// xorByte flips bits of the byte at off of file name.
func xorByte(t *testing.T, fs vfs.FS, name string, off int64, bits byte) {
	t.Helper()
	data := readFile(t, fs, name)
	data[off] ^= bits
	writeFile(t, fs, name, data)
}

// cutSynced truncates the log file of the segment at base to size, and
// syncs it.
func cutSynced(t *testing.T, fs vfs.FS, base, size int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(segment.FileName(damageDir, base, segment.LogSuffix))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, errors.Join(f.Sync(), f.Close()))
}

// readEverything reads the log from its start as a fetch would, and
// returns the first error.
func readEverything(l *Log) error {
	for off := l.LogStartOffset(); off < l.LogEndOffset(); {
		bs, err := l.Read(off, 1<<20, ReadLogEnd)
		if err != nil {
			return err
		}
		off = bs.NextOffset()
		bs.Close()
	}
	return nil
}

func repairOptions(fs vfs.FS) Options {
	o := memOptions(fs)
	o.VerifyOnOpen, o.TruncateCorruption = true, true
	return o
}

// Issue 21 part 9: each kind of damage a stopped replica's files can take
// (a bit flipped outside the CRC, a segment cut short, a damaged index or
// checkpoint). A log by default refuses it with ErrCorrupt, naming the
// file and position, when it opens or when a read meets it, and never cuts
// synced records: it has no other copy. With VerifyOnOpen the damage is
// found when the log opens. With TruncateCorruption too, as a replica
// opens its log (it has another copy, on its leader; Kafka has no such
// repair, its LogLoader only cuts a torn tail after the recovery point),
// the log is cut before the first bad batch and the batch before it,
// later segments dropped, and the damage reported as a *Damage until
// ClearDamage.
// damages are the kinds of damage a stopped replica's files can take, on
// damagedLog's log.
var damages = []struct {
	name string
	// damage damages the files and returns the file and position it
	// is reported at (-1: not at a batch) and the log end offset the
	// repair leaves.
	damage func(t *testing.T, fs *vfs.MemFS, bases []int64) (file string, pos, end int64)
	// foundOnOpen: a default Open refuses the log; otherwise a read
	// of the whole log does.
	foundOnOpen bool
}{{
	// A bit flipped up in the base offset of the first segment's last
	// batch makes it end past the second segment's base, and its
	// offsets those of the next epoch: after a crash, the second
	// segment would be taken for a compaction's leftover (see
	// TestUncleanOpenRemovesOnlyCoveredSegments), but the epoch cache
	// tells first.
	name: "sealed segment, last batch's base offset bit, unclean",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		name := segment.FileName(damageDir, bases[0], segment.LogSuffix)
		last := bases[1] - 5
		victim := batchPos(t, fs, bases[0], last)
		bit := bits.TrailingZeros64(^uint64(last)) // a flip that raises it
		xorByte(t, fs, name, victim+7-int64(bit/8), 1<<(bit%8))
		unclean(t, fs, damageDir)
		require.NoError(t, vfs.SyncDir(fs, damageDir))
		return name, victim, last - 5
	},
	foundOnOpen: true,
}, {
	// The record at 27 would be served as offset 29: bit 1 of batch
	// 25's base offset, outside the CRC, found when batch 30 does not
	// follow. Which of the two is damaged cannot be told: both go.
	name: "sealed segment, base offset bit",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		name := segment.FileName(damageDir, bases[0], segment.LogSuffix)
		victim, next := batchPos(t, fs, bases[0], 25), batchPos(t, fs, bases[0], 30)
		xorByte(t, fs, name, victim+7, 1<<1)
		return name, next, 25
	},
}, {
	// The 0x100000000000013d: the batch leaves the segment's
	// offset range, found at itself.
	name: "sealed segment, high base offset bit",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		name := segment.FileName(damageDir, bases[0], segment.LogSuffix)
		victim := batchPos(t, fs, bases[0], 25)
		xorByte(t, fs, name, victim, 1<<4)
		return name, victim, 20
	},
}, {
	// Batch 20, the first of epoch 1, says epoch 0: it still follows
	// epoch 0 and precedes epoch 1; only the epoch cache tells.
	name: "middle batch, leader epoch bit",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		name := segment.FileName(damageDir, bases[0], segment.LogSuffix)
		victim := batchPos(t, fs, bases[0], 20)
		xorByte(t, fs, name, victim+15, 1)
		return name, victim, 15
	},
}, {
	name: "sealed segment cut to half",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		ends := batchEnds(t, fs, damageDir, bases[0])
		half := ends[len(ends)-1] / 2
		cutSynced(t, fs, bases[0], half)
		whole := 0 // batches left whole
		for ends[whole] <= half {
			whole++
		}
		return segment.FileName(damageDir, bases[0], segment.LogSuffix), ends[whole-1], bases[0] + 5*int64(whole-1)
	},
	foundOnOpen: true,
}, {
	// The issue's "short batch at base offset 928: header needs 61
	// bytes, have 39", after a clean shutdown.
	name: "active segment cut mid-batch",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		last := bases[len(bases)-1]
		ends := batchEnds(t, fs, damageDir, last)
		n := len(ends)
		cutSynced(t, fs, last, ends[n-2]+39)
		return segment.FileName(damageDir, last, segment.LogSuffix), ends[n-2], last + 5*int64(n-2)
	},
	foundOnOpen: true,
}, {
	name: "recovery point checkpoint",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		name := filepath.Join(damageDir, recoveryPointFile)
		writeFile(t, fs, name, []byte("0\n1\nbanana\n"))
		return name, -1, damageRecords
	},
	foundOnOpen: true,
}, {
	name: "leader epoch checkpoint",
	damage: func(t *testing.T, fs *vfs.MemFS, bases []int64) (string, int64, int64) {
		name := filepath.Join(damageDir, epochCheckpointName)
		xorByte(t, fs, name, 0, 0x7f)
		return name, -1, damageRecords
	},
	foundOnOpen: true,
}}

func TestDamagedLog(t *testing.T) {
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			fs, bases, epochs := damagedLog(t)
			file, pos, end := tc.damage(t, fs, bases)
			damaged := fs.Crash(vfs.CrashOptions{}) // the same files, for each way of opening them

			// By default: refused, when it opens or when it is read.
			l, err := Open(damageDir, memOptions(fs.Crash(vfs.CrashOptions{})))
			if !tc.foundOnOpen {
				require.NoError(t, err, "the damage lies before the tail a clean Open reads")
				err = readEverything(l)
				require.NoError(t, l.Close())
			}
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, filepath.Base(file))

			// VerifyOnOpen alone: refused when it opens.
			opts := memOptions(fs.Crash(vfs.CrashOptions{}))
			opts.VerifyOnOpen = true
			_, err = Open(damageDir, opts)
			require.ErrorIs(t, err, ErrCorrupt)

			// As a replica opens it: cut, reported, and open.
			l, err = Open(damageDir, repairOptions(damaged))
			require.NoError(t, err)
			dmg := l.Damage()
			require.NotNil(t, dmg)
			require.ErrorIs(t, dmg, ErrCorrupt)
			require.Equal(t, damageDir, dmg.Dir)
			require.Equal(t, file, dmg.File)
			require.Equal(t, pos, dmg.Position)
			require.Equal(t, end, dmg.LogEndOffset)
			require.Equal(t, end, l.LogEndOffset())
			requireRecords(t, l, 0, int(end), damageValue)
			require.NoError(t, readEverything(l))
			require.Equal(t, epochsBelow(epochs, end), l.Epochs(), "the epoch cache is cut, or rebuilt from the batches")
			for _, b := range segmentBases(l) {
				require.LessOrEqual(t, b, end, "the segments after the damage are gone")
			}
			// The replica fetches the rest from its leader.
			require.NoError(t, l.SetLeaderEpoch(20))
			appendN(t, l, int(end), damageRecords-int(end), 5, damageValue)
			require.NoError(t, l.Close())

			// The damage is reported until cleared, by any Open.
			l, err = Open(damageDir, memOptions(damaged))
			require.NoError(t, err, "the repaired log opens by default too")
			require.NotNil(t, l.Damage(), "reported until cleared")
			require.Equal(t, end, l.Damage().LogEndOffset)
			requireRecords(t, l, 0, damageRecords, damageValue)
			require.NoError(t, l.ClearDamage())
			require.Nil(t, l.Damage())
			require.NoError(t, l.Close())
			l, err = Open(damageDir, repairOptions(damaged))
			require.NoError(t, err)
			require.Nil(t, l.Damage())
			require.NoError(t, l.Close())
		})
	}
}

// epochsBelow returns the entries of the epochs that start below end.
func epochsBelow(entries []EpochEntry, end int64) []EpochEntry {
	var out []EpochEntry
	for _, e := range entries {
		if e.StartOffset < end {
			out = append(out, e)
		}
	}
	return out
}

// A damaged offset index entry that passes the index's own checks points
// a read at a batch that does not end at the entry's offset: a read is
// refused with ErrCorrupt; VerifyOnOpen rebuilds the index from the log,
// which holds no damage.
func TestDamagedIndexEntry(t *testing.T) {
	fs, bases, _ := damagedLog(t)
	name := segment.FileName(damageDir, bases[0], segment.IndexSuffix)
	data := readFile(t, fs, name)
	require.Greater(t, len(data), 3*8)
	// The second entry maps the last offset of a batch to its position;
	// make it say one less, still between its neighbours' offsets.
	first, rel := binary.BigEndian.Uint32(data), binary.BigEndian.Uint32(data[8:])
	require.Greater(t, rel-1, first)
	binary.BigEndian.PutUint32(data[8:], rel-1)
	writeFile(t, fs, name, data)
	lied := bases[0] + int64(rel) - 1

	l, err := Open(damageDir, memOptions(fs.Crash(vfs.CrashOptions{})))
	require.NoError(t, err)
	_, err = l.Read(lied, math.MaxInt32, ReadLogEnd)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, fmt.Sprintf("the offset index says %d", lied))
	require.NoError(t, l.Close())

	l, err = Open(damageDir, repairOptions(fs))
	require.NoError(t, err)
	require.Nil(t, l.Damage(), "the index is rebuilt from the log, which is whole")
	requireRecords(t, l, 0, damageRecords, damageValue)
	require.NoError(t, l.Close())
}

// A Dir of replicas (DirOptions.Log with VerifyOnOpen and
// TruncateCorruption) repairs a partition's damaged log when it opens it,
// logs the damage at level Error with the partition, and reports it on
// the partition until ClearDamage; the partition goes on where the repair
// cut it.
func TestDirRepairsADamagedReplica(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.Replicated = true
	opts.Log.ExternalHighWatermark, opts.Log.VerifyOnOpen, opts.Log.TruncateCorruption = true, true, true
	var out bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&out, nil))
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 1}))
	p, err := d.Partition("t", 0)
	require.NoError(t, err)
	for i := 0; i < 100; i += 5 {
		_, err := p.Append(recordsFrom(i, 5, damageValue))
		require.NoError(t, err)
	}
	dmg, err := p.Damage()
	require.NoError(t, err)
	require.Nil(t, dmg)
	require.NoError(t, d.Close())

	cutSynced(t, fs, 0, batchPos(t, fs, 0, 50)+39) // in the first segment, sealed
	d, err = OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	p, err = d.Partition("t", 0)
	require.NoError(t, err)
	dmg, err = p.Damage()
	require.NoError(t, err)
	require.NotNil(t, dmg)
	require.EqualValues(t, 45, dmg.LogEndOffset)
	_, _, end, err := p.Offsets()
	require.NoError(t, err)
	require.EqualValues(t, 45, end)
	require.Contains(t, out.String(), "level=ERROR")
	require.Contains(t, out.String(), "partition=0")
	require.Contains(t, out.String(), "logEndOffset=45")
	require.NoError(t, p.ClearDamage())
	dmg, err = p.Damage()
	require.NoError(t, err)
	require.Nil(t, dmg)
}

// After a crash, Open takes a segment that the one before ends past for a
// compaction's leftover and removes it (the merged segment covers it;
// Kafka's LogLoader finishes such swaps too). A segment that goes on past
// the one before is no leftover: the one before has a damaged last batch
// (here a base offset bit flipped up, in a log without epochs), and
// removing the next segment would lose its records silently.
func TestUncleanOpenRemovesOnlyCoveredSegments(t *testing.T) {
	fs := newMemFS(t)
	bases := fiveSegments(t, fs, damageDir)
	name := segment.FileName(damageDir, bases[0], segment.LogSuffix)
	ends := batchEnds(t, fs, damageDir, bases[0])
	last := bases[1] - 10 // batches of 10
	bit := bits.TrailingZeros64(^uint64(last))
	xorByte(t, fs, name, ends[len(ends)-2]+7-int64(bit/8), 1<<(bit%8))
	unclean(t, fs, damageDir)
	require.NoError(t, vfs.SyncDir(fs, damageDir))

	_, err := Open(damageDir, memOptions(fs.Crash(vfs.CrashOptions{})))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "not a compaction's leftover")

	l, err := Open(damageDir, repairOptions(fs))
	require.NoError(t, err)
	defer l.Close()
	require.NotNil(t, l.Damage())
	require.Equal(t, last, l.LogEndOffset(), "the damaged batch is cut, and with it the segments after")
	requireRecords(t, l, 0, int(last), 100)
}

// A Dir verifies a partition's log (VerifyOnOpen) when it first opens it,
// not each time it reopens it after the open-file bound closed it: damage
// done while it was closed is then found when it is read.
func TestDirVerifiesAPartitionAtItsFirstOpenOnly(t *testing.T) {
	fs := newMemFS(t)
	opts := dirOptions(fs)
	opts.MaxOpenFiles = 4 // one single-segment partition: its log, two indexes and its lock
	opts.Log.VerifyOnOpen = true
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.CreateTopic("t", TopicConfig{Partitions: 2}))
	p0, err := d.Partition("t", 0)
	require.NoError(t, err)
	p1, err := d.Partition("t", 1)
	require.NoError(t, err)
	for i := 0; i < 50; i += 5 {
		_, err := p0.Append(recordsFrom(i, 5, damageValue))
		require.NoError(t, err)
	}
	_, err = p1.Append(recordsFrom(0, 5, damageValue))
	require.NoError(t, err, "p1 opens, and p0 is closed")
	d.mu.Lock()
	require.Equal(t, partClosed, int(p0.state))
	d.mu.Unlock()

	name := segment.FileName(damageDir, 0, segment.LogSuffix)
	xorByte(t, fs, name, batchPos(t, fs, 0, 10)+7, 1) // base offset 10 reads 11
	_, _, end, err := p0.Offsets()
	require.NoError(t, err, "reopened without a verification")
	require.EqualValues(t, 50, end)
	_, err = p0.Read(0, 1<<20, ReadLogEnd)
	require.ErrorIs(t, err, ErrCorrupt, "the read finds it")
	require.NoError(t, d.Close())

	d, err = OpenDir("/data", opts)
	require.NoError(t, err)
	defer d.Close()
	p0, err = d.Partition("t", 0)
	require.NoError(t, err)
	_, _, _, err = p0.Offsets()
	require.ErrorIs(t, err, ErrCorrupt, "the first open verifies")
}

// A power cut at any point of a repair leaves a log that the next Open
// repairs, or has repaired, the same way, and reports: the damage is
// recorded before the repair changes anything (vfs.MemFS's crash keeps a
// random part of what was not synced).
func TestCrashDuringRepair(t *testing.T) {
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			var end int64
			build := func(fs *vfs.MemFS) {
				bases, _ := writeEpochLog(t, fs)
				_, _, end = tc.damage(t, fs, bases)
			}
			repair := func(fs *vfs.MemFS) {
				build(fs)
				if l, err := Open(damageDir, repairOptions(fs)); err == nil {
					l.Close()
				}
			}
			from, to := countOps(t, build), countOps(t, repair)
			for stop := from; stop <= to; stop++ {
				fs := crashedAt(t, stop, 1, repair)
				msg := fmt.Sprintf("power cut at operation %d of %d", stop-from, to-from)
				l, err := Open(damageDir, repairOptions(fs))
				require.NoError(t, err, msg)
				dmg := l.Damage()
				require.NotNil(t, dmg, msg)
				require.ErrorIs(t, dmg, ErrCorrupt, msg)
				require.Equal(t, end, dmg.LogEndOffset, msg)
				require.Equal(t, end, l.LogEndOffset(), msg)
				requireRecords(t, l, 0, int(end), damageValue)
				require.NoError(t, l.Close())
			}
		})
	}
}
