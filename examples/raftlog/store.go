package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// store keeps a voter's raft log, HardState and latest snapshot in one
// file and in the raft.MemoryStorage that etcd raft reads, as raft's
// contract asks: what a Ready hands out to persist is synced before its
// messages go out. A frame is a 4-byte payload length, a CRC-32C of the
// kind and payload, a kind byte (an entry, a HardState or a snapshot) and
// the protobuf payload. Replaying the frames in order rebuilds the
// storage: an entry at an index the storage already has replaces it and
// what follows (MemoryStorage.Append does that, as raft's rule for
// conflicting entries asks), the last HardState wins, and a snapshot
// replaces everything before it. A torn last frame (a crash mid-write) is
// cut off; it was never synced, so raft never counted on it.
//
// A snapshot, whether this voter took it (compact) or its leader sent it
// (save), starts a new file: the snapshot, the HardState and the entries
// after it, written aside, synced and renamed over the old file, so that a
// crash leaves one or the other whole. The file so holds what the raft log
// holds, not its history.
//
// Membership is fixed, so instead of bootstrapping with
// configuration-change entries the storage starts from an empty snapshot
// holding the voters, as etcd raft's Bootstrap doc recommends; every
// later snapshot keeps them.
type store struct {
	path string
	f    *os.File
	ms   *raft.MemoryStorage
}

const (
	storeFile      = "raft.log"
	frameEntry     = 1
	frameHardState = 2
	frameSnapshot  = 3
	frameHeader    = 9
	maxFrame       = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is a raft log file with a frame whose checksum holds but
// whose content does not decode or apply: not a torn write, so not
// something to cut off.
var ErrCorrupt = errors.New("raftlog: corrupt raft log")

// openStore opens the raft log file at path, creating it if need be, for
// a raft group of voters (raft ids).
func openStore(path string, voters []uint64) (*store, error) {
	ms := raft.NewMemoryStorage()
	if err := ms.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: &pb.ConfState{Voters: voters}}}); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	s := &store{path: path, f: f, ms: ms}
	if err := s.replay(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// replay applies the file's whole frames to the storage, cuts off a torn
// tail and leaves the file positioned after the last whole frame.
func (s *store) replay() error {
	data, err := io.ReadAll(s.f)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.path, err)
	}
	good, err := replayFrames(data, s.ms)
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	if good < len(data) {
		if err := s.f.Truncate(int64(good)); err != nil {
			return fmt.Errorf("cutting the torn tail of %s at byte %d: %w", s.path, good, err)
		}
	}
	if _, err := s.f.Seek(int64(good), io.SeekStart); err != nil {
		return fmt.Errorf("seeking %s to byte %d: %w", s.path, good, err)
	}
	return nil
}

// replayFrames applies every whole frame of data to ms and returns where
// the whole frames end.
func replayFrames(data []byte, ms *raft.MemoryStorage) (int, error) {
	off := 0
	for len(data)-off >= frameHeader {
		n := int(binary.BigEndian.Uint32(data[off:]))
		sum := binary.BigEndian.Uint32(data[off+4:])
		if n > maxFrame || len(data)-off-frameHeader < n {
			break
		}
		body := data[off+8 : off+frameHeader+n]
		if crc32.Checksum(body, castagnoli) != sum {
			break
		}
		if err := applyFrame(body[0], body[1:], ms); err != nil {
			return 0, fmt.Errorf("%w: frame at byte %d: %w", ErrCorrupt, off, err)
		}
		off += frameHeader + n
	}
	return off, nil
}

func applyFrame(kind byte, payload []byte, ms *raft.MemoryStorage) error {
	switch kind {
	case frameEntry:
		e := new(pb.Entry)
		if err := proto.Unmarshal(payload, e); err != nil {
			return fmt.Errorf("entry: %w", err)
		}
		if err := ms.Append([]*pb.Entry{e}); err != nil {
			return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
		}
	case frameHardState:
		hs := new(pb.HardState)
		if err := proto.Unmarshal(payload, hs); err != nil {
			return fmt.Errorf("hard state: %w", err)
		}
		return ms.SetHardState(hs)
	case frameSnapshot:
		snap := new(pb.Snapshot)
		if err := proto.Unmarshal(payload, snap); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if err := ms.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("snapshot %d: %w", snap.GetMetadata().GetIndex(), err)
		}
	default:
		return fmt.Errorf("kind %d is no frame kind", kind)
	}
	return nil
}

// save persists a Ready's snapshot, HardState and entries, synced, then
// hands them to the MemoryStorage. A snapshot (sent by the leader to a
// voter too far behind) replaces the whole log.
func (s *store) save(snap *pb.Snapshot, hs *pb.HardState, entries []*pb.Entry) error {
	if raft.IsEmptyHardState(hs) {
		hs = nil
	}
	if !raft.IsEmptySnap(snap) {
		if hs == nil {
			hs, _, _ = s.ms.InitialState()
		}
		if err := s.rewrite(snap, hs, entries); err != nil {
			return err
		}
		if err := s.ms.ApplySnapshot(snap); err != nil {
			return err
		}
	} else if err := s.append(hs, entries); err != nil {
		return err
	}
	if err := s.ms.Append(entries); err != nil {
		return err
	}
	if hs != nil {
		return s.ms.SetHardState(hs)
	}
	return nil
}

// append writes the frames of entries and hs at the file's end, synced.
func (s *store) append(hs *pb.HardState, entries []*pb.Entry) error {
	buf, err := appendFrames(nil, hs, entries)
	if err != nil || len(buf) == 0 {
		return err
	}
	if _, err := s.f.Write(buf); err != nil {
		return fmt.Errorf("appending to %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", s.path, err)
	}
	return nil
}

// compact takes a snapshot at index, an applied entry, holding data (the
// state the entries up to index give), and drops the entries up to it:
// from the file at once, from memory but for the last keep of them, which
// a follower a little behind still fetches as entries rather than as a
// snapshot. It returns raft.ErrSnapOutOfDate if the storage already has a
// snapshot at index or beyond.
func (s *store) compact(index uint64, data []byte, keep uint64) error {
	snap, err := s.ms.CreateSnapshot(index, nil, data)
	if err != nil {
		return err
	}
	hs, _, err := s.ms.InitialState()
	if err != nil {
		return err
	}
	last, err := s.ms.LastIndex()
	if err != nil {
		return err
	}
	var tail []*pb.Entry
	if last > index {
		if tail, err = s.ms.Entries(index+1, last+1, math.MaxUint64); err != nil {
			return err
		}
	}
	if err := s.rewrite(snap, hs, tail); err != nil {
		return err
	}
	if index > keep {
		if err := s.ms.Compact(index - keep); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	return nil
}

// rewrite replaces the file by one holding snap, hs and entries: written
// aside, synced, renamed over the old one, the rename synced. Once the
// rename is done the store appends to the new file, even if syncing the
// directory fails.
func (s *store) rewrite(snap *pb.Snapshot, hs *pb.HardState, entries []*pb.Entry) error {
	buf, err := appendFrame(nil, frameSnapshot, snap)
	if err != nil {
		return err
	}
	if buf, err = appendFrames(buf, hs, entries); err != nil {
		return err
	}
	tmp := s.path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("rewriting %s after a snapshot: %w", s.path, err)
	}
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("rewriting %s after a snapshot: %w", s.path, err)
	}
	s.f.Close()
	s.f = f
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("syncing the directory of %s after a snapshot: %w", s.path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// appendFrames appends the frames of entries, then of hs if not nil.
func appendFrames(buf []byte, hs *pb.HardState, entries []*pb.Entry) ([]byte, error) {
	var err error
	for _, e := range entries {
		if buf, err = appendFrame(buf, frameEntry, e); err != nil {
			return nil, err
		}
	}
	if hs != nil {
		return appendFrame(buf, frameHardState, hs)
	}
	return buf, nil
}

func appendFrame(buf []byte, kind byte, m proto.Message) ([]byte, error) {
	payload, err := proto.Marshal(m)
	if err != nil {
		return buf, err
	}
	body := append([]byte{kind}, payload...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(payload)))
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(body, castagnoli))
	return append(buf, body...), nil
}

func (s *store) close() error { return s.f.Close() }

// Stored is what a raft log directory holds: the index of its latest
// snapshot (0 if none), and the first and last index of its entries.
type Stored struct {
	SnapshotIndex, FirstIndex, LastIndex uint64
}

// Inspect reports what the raft log in dir holds, up to its last whole
// frame; it only reads the file, which a running Log may be appending to.
func Inspect(dir string) (Stored, error) {
	data, err := os.ReadFile(filepath.Join(dir, storeFile))
	if err != nil {
		return Stored{}, err
	}
	ms := raft.NewMemoryStorage()
	if _, err := replayFrames(data, ms); err != nil {
		return Stored{}, err
	}
	snap, err := ms.Snapshot()
	if err != nil {
		return Stored{}, err
	}
	st := Stored{SnapshotIndex: snap.GetMetadata().GetIndex()}
	if st.FirstIndex, err = ms.FirstIndex(); err == nil {
		st.LastIndex, err = ms.LastIndex()
	}
	return st, err
}
