package idempotence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strandlog/strand/vfs"
)

// SnapshotSuffix ends the name of a producer-state snapshot file,
// <offset>.snapshot with the offset zero-padded to 20 digits, as Kafka names
// them (LogFileUtils.producerSnapshotFile).
const SnapshotSuffix = ".snapshot"

// The snapshot format is Kafka's ProducerSnapshot version 1
// (storage/src/main/resources/message/ProducerSnapshot.json, written by
// ProducerStateManager.writeSnapshot), big-endian:
//
//	int16  version (1)
//	uint32 CRC-32C of everything after this field
//	int32  entry count, then per entry:
//	  int64 producer id, int16 epoch, int32 last sequence, int64 last offset,
//	  int32 offset delta, int64 timestamp, int32 coordinator epoch,
//	  int64 current transaction first offset (-1 if none)
//
// An entry holds only its producer's newest batch (last sequence, last
// offset and offset delta; -1, -1 and 0 when it has none), so a State
// loaded from a snapshot remembers one batch per producer, not five: a
// retry of an older one of the five in-flight batches after a restart is
// answered OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka answers it (the producer
// then learns its fate from the retry of the newest). Batches the log
// replays after the snapshot's offset refill the window. Keeping Kafka's
// bytes lets a Kafka broker read Strand's snapshots and the reverse.
const (
	snapshotVersion   = 1
	snapshotCRCOffset = 2
	snapshotEntries   = snapshotCRCOffset + 4 // the CRC covers from here
	snapshotEntrySize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotName returns the path of the snapshot at offset in dir.
func SnapshotName(dir string, offset int64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", offset, SnapshotSuffix))
}

// marshalSnapshot encodes entries, in the order given.
func marshalSnapshot(entries []Entry) []byte {
	b := make([]byte, snapshotEntries+4, snapshotEntries+4+len(entries)*snapshotEntrySize)
	be := binary.BigEndian
	be.PutUint16(b, snapshotVersion)
	be.PutUint32(b[snapshotEntries:], uint32(len(entries)))
	for i := range entries {
		e := &entries[i]
		last := BatchMetadata{LastSeq: NoSequence, LastOffset: -1}
		if n := len(e.Batches); n > 0 {
			last = e.Batches[n-1]
		}
		b = be.AppendUint64(b, uint64(e.ProducerID))
		b = be.AppendUint16(b, uint16(e.Epoch))
		b = be.AppendUint32(b, uint32(last.LastSeq))
		b = be.AppendUint64(b, uint64(last.LastOffset))
		b = be.AppendUint32(b, uint32(last.OffsetDelta))
		b = be.AppendUint64(b, uint64(e.LastTimestamp))
		b = be.AppendUint32(b, uint32(e.CoordinatorEpoch))
		b = be.AppendUint64(b, uint64(e.TxnFirstOffset))
	}
	be.PutUint32(b[snapshotCRCOffset:], crc32.Checksum(b[snapshotEntries:], castagnoli))
	return b
}

// unmarshalSnapshot decodes a snapshot (ProducerStateManager.readSnapshot).
// Errors wrap ErrCorruptSnapshot.
func unmarshalSnapshot(b []byte) ([]Entry, error) {
	be := binary.BigEndian
	if len(b) < snapshotEntries+4 {
		return nil, fmt.Errorf("%w: %d bytes, a snapshot has at least %d", ErrCorruptSnapshot, len(b), snapshotEntries+4)
	}
	if v := int16(be.Uint16(b)); v != snapshotVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorruptSnapshot, v)
	}
	if stored, computed := be.Uint32(b[snapshotCRCOffset:]), crc32.Checksum(b[snapshotEntries:], castagnoli); stored != computed {
		return nil, fmt.Errorf("%w: crc mismatch: stored %#08x, computed %#08x", ErrCorruptSnapshot, stored, computed)
	}
	n := int64(int32(be.Uint32(b[snapshotEntries:])))
	body := b[snapshotEntries+4:]
	if n < 0 || n*snapshotEntrySize != int64(len(body)) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes, an entry has %d", ErrCorruptSnapshot, n, len(body), snapshotEntrySize)
	}
	entries := make([]Entry, n)
	for i := range entries {
		p := body[i*snapshotEntrySize:]
		e := Entry{
			ProducerID:       int64(be.Uint64(p)),
			Epoch:            int16(be.Uint16(p[8:])),
			LastTimestamp:    int64(be.Uint64(p[26:])),
			CoordinatorEpoch: int32(be.Uint32(p[34:])),
			TxnFirstOffset:   int64(be.Uint64(p[38:])),
		}
		last := BatchMetadata{
			LastSeq:     int32(be.Uint32(p[10:])),
			LastOffset:  int64(be.Uint64(p[14:])),
			OffsetDelta: int32(be.Uint32(p[22:])),
			Timestamp:   e.LastTimestamp,
		}
		if last.LastOffset >= 0 {
			e.Batches = []BatchMetadata{last}
		}
		if e.TxnFirstOffset < 0 {
			e.TxnFirstOffset = -1
		}
		entries[i] = e
	}
	return entries, nil
}

// ReadSnapshot reads the snapshot file name. A file that is not a valid
// snapshot gives an error wrapping ErrCorruptSnapshot that names it.
func ReadSnapshot(fsys vfs.FS, name string) ([]Entry, error) {
	b, err := vfs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	entries, err := unmarshalSnapshot(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return entries, nil
}

// ListSnapshots returns the offsets of the snapshot files in dir, ascending.
// Names that end in SnapshotSuffix but do not start with an offset are not
// snapshots and are left alone.
func ListSnapshots(fsys vfs.FS, dir string) ([]int64, error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, err
	}
	var offsets []int64
	for _, name := range names {
		if off, ok := snapshotOffset(name); ok {
			offsets = append(offsets, off)
		}
	}
	slices.Sort(offsets)
	return offsets, nil
}

func snapshotOffset(name string) (int64, bool) {
	base, ok := strings.CutSuffix(name, SnapshotSuffix)
	if !ok {
		return 0, false
	}
	off, err := strconv.ParseInt(base, 10, 64)
	return off, err == nil && off >= 0
}

// TakeSnapshot writes the state to the snapshot file at its map end offset
// in dir, if the state moved since the last snapshot
// (ProducerStateManager.takeSnapshot), and reports whether it wrote one. The
// log takes one when it rolls a segment (at the new segment's base offset)
// and when it closes. The file is replaced atomically: a crash leaves the
// old snapshot (or none) or the new one, never a torn one.
func (s *State) TakeSnapshot(fsys vfs.FS, dir string) (bool, error) {
	if s.mapEnd <= s.lastSnap {
		return false, nil
	}
	if err := vfs.WriteFileAtomic(fsys, SnapshotName(dir, s.mapEnd), marshalSnapshot(s.Producers())); err != nil {
		return false, fmt.Errorf("idempotence: writing snapshot %s: %w", SnapshotName(dir, s.mapEnd), err)
	}
	s.lastSnap = s.mapEnd
	return true, nil
}

// Load rebuilds the producer state of the log in dir that holds offsets
// logStartOffset to logEndOffset, from its newest usable snapshot
// (ProducerStateManager.truncateAndReload and loadFromSnapshot):
//
//   - snapshots outside (logStartOffset, logEndOffset] are deleted, as
//     are temporary files a crash left behind;
//   - the newest remaining snapshot is read; a corrupt one is deleted and
//     the next older one tried;
//   - producers expired at now are dropped.
//
// The state's MapEndOffset is then the snapshot's offset, or
// logStartOffset if none was usable: the log replays its batches from
// there to its end with Validate and Commit and OriginReplication.
func Load(fsys vfs.FS, dir string, logStartOffset, logEndOffset int64, now time.Time, opts Config) (*State, error) {
	nowMs := now.UnixMilli()
	s, err := NewState(logStartOffset, opts)
	if err != nil {
		return nil, err
	}
	names, err := fsys.List(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if base, ok := strings.CutSuffix(name, vfs.TempSuffix); ok && strings.HasSuffix(base, SnapshotSuffix) {
			if err := removeFile(fsys, filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	offsets, err := ListSnapshots(fsys, dir)
	if err != nil {
		return nil, err
	}
	var keep []int64
	for _, off := range offsets {
		if off > logEndOffset || off <= logStartOffset {
			if err := removeFile(fsys, SnapshotName(dir, off)); err != nil {
				return nil, err
			}
			continue
		}
		keep = append(keep, off)
	}
	for i := len(keep) - 1; i >= 0; i-- {
		name := SnapshotName(dir, keep[i])
		entries, err := ReadSnapshot(fsys, name)
		if errors.Is(err, ErrCorruptSnapshot) {
			if err := removeFile(fsys, name); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !s.expired(&e, nowMs) {
				s.load(e)
			}
		}
		s.mapEnd, s.lastSnap = keep[i], keep[i]
		break
	}
	return s, nil
}

// DeleteSnapshotsBefore deletes the snapshots in dir below offset, as the
// log does when retention moves its start past their segments
// (ProducerStateManager.deleteSnapshotsBefore).
func DeleteSnapshotsBefore(fsys vfs.FS, dir string, offset int64) error {
	offsets, err := ListSnapshots(fsys, dir)
	if err != nil {
		return err
	}
	for _, off := range offsets {
		if off >= offset {
			break
		}
		if err := removeFile(fsys, SnapshotName(dir, off)); err != nil {
			return err
		}
	}
	return nil
}

// RemoveStraySnapshots deletes the snapshots in dir that match no segment
// base offset (ProducerStateManager.removeStraySnapshots), except the newest
// stray one if it is above every segment's base offset: that is the
// snapshot a clean shutdown wrote at the log's end. The log calls it when it
// opens, with the base offsets of its segments.
func RemoveStraySnapshots(fsys vfs.FS, dir string, segmentBaseOffsets []int64) error {
	offsets, err := ListSnapshots(fsys, dir)
	if err != nil {
		return err
	}
	var strays []int64
	for _, off := range offsets {
		if !slices.Contains(segmentBaseOffsets, off) {
			strays = append(strays, off)
		}
	}
	if n := len(strays); n > 0 && (len(segmentBaseOffsets) == 0 || strays[n-1] > slices.Max(segmentBaseOffsets)) {
		strays = strays[:n-1]
	}
	for _, off := range strays {
		if err := removeFile(fsys, SnapshotName(dir, off)); err != nil {
			return err
		}
	}
	return nil
}

// removeFile removes name; one already gone is not an error. The removal
// need not be durable: a snapshot that comes back after a crash is removed
// again by the next Load, or is simply older than the one Load reads.
func removeFile(fsys vfs.FS, name string) error {
	if err := fsys.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("idempotence: removing %s: %w", name, err)
	}
	return nil
}
