package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// raftStore keeps a node's raft log and HardState in one append-only file
// and in the raft.MemoryStorage that etcd raft reads, as raft's contract
// asks: what a Ready hands out to persist is synced before its messages go
// out. A frame is a 4-byte length, a CRC-32C of the kind and payload, a
// kind byte (an entry or a HardState) and the protobuf payload. Replaying
// the frames in order rebuilds the storage: an entry at an index the
// storage already has replaces it and what follows (MemoryStorage.Append
// does that, as raft's rule for conflicting entries asks), and the last
// HardState wins. A torn last frame (a crash mid-write) is cut off; it was
// never synced, so raft never counted on it.
//
// Membership is static (the three nodes given on the command line), so
// instead of bootstrapping with configuration-change entries the storage
// starts from an empty snapshot holding the voters, as etcd raft's
// Bootstrap doc recommends. The log is never compacted: a demo's controller
// writes a few thousand records at most.
type raftStore struct {
	f  *os.File
	ms *raft.MemoryStorage
}

const (
	frameEntry     = 1
	frameHardState = 2
	frameHeader    = 9
	maxFrame       = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorruptRaftLog is a frame whose checksum holds but whose content
// does not decode: not a torn write, so not something to cut off.
var errCorruptRaftLog = errors.New("cluster: corrupt raft log")

func openRaftStore(path string, voters []uint64) (*raftStore, error) {
	ms := raft.NewMemoryStorage()
	if err := ms.ApplySnapshot(&pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: &pb.ConfState{Voters: voters}}}); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	good, err := replayFrames(data, ms)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if good < len(data) {
		if err := f.Truncate(int64(good)); err != nil {
			f.Close()
			return nil, err
		}
	}
	if _, err := f.Seek(int64(good), io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &raftStore{f: f, ms: ms}, nil
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
		payload := body[1:]
		switch body[0] {
		case frameEntry:
			e := new(pb.Entry)
			if err := proto.Unmarshal(payload, e); err != nil {
				return 0, fmt.Errorf("%w: entry at byte %d: %w", errCorruptRaftLog, off, err)
			}
			if err := ms.Append([]*pb.Entry{e}); err != nil {
				return 0, fmt.Errorf("%w: entry %d at byte %d: %w", errCorruptRaftLog, e.GetIndex(), off, err)
			}
		case frameHardState:
			hs := new(pb.HardState)
			if err := proto.Unmarshal(payload, hs); err != nil {
				return 0, fmt.Errorf("%w: hard state at byte %d: %w", errCorruptRaftLog, off, err)
			}
			if err := ms.SetHardState(hs); err != nil {
				return 0, err
			}
		default:
			return 0, fmt.Errorf("%w: frame kind %d at byte %d", errCorruptRaftLog, body[0], off)
		}
		off += frameHeader + n
	}
	return off, nil
}

// save persists a Ready's HardState and entries, synced, then hands them
// to the MemoryStorage.
func (s *raftStore) save(hs *pb.HardState, entries []*pb.Entry) error {
	var buf []byte
	var err error
	for _, e := range entries {
		if buf, err = appendFrame(buf, frameEntry, e); err != nil {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if buf, err = appendFrame(buf, frameHardState, hs); err != nil {
			return err
		}
	}
	if len(buf) == 0 {
		return nil
	}
	if _, err := s.f.Write(buf); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	if len(entries) > 0 {
		if err := s.ms.Append(entries); err != nil {
			return err
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		return s.ms.SetHardState(hs)
	}
	return nil
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

func (s *raftStore) close() error { return s.f.Close() }
