package raftlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func entry(term, index uint64, data string) *pb.Entry {
	return &pb.Entry{Term: new(term), Index: new(index), Data: []byte(data)}
}

func storedEntries(t *testing.T, s *store) []string {
	t.Helper()
	first, err := s.ms.FirstIndex()
	require.NoError(t, err)
	last, err := s.ms.LastIndex()
	require.NoError(t, err)
	if last < first {
		return nil
	}
	ents, err := s.ms.Entries(first, last+1, 1<<30)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, string(e.GetData()))
	}
	return out
}

// Reopening the file gives what was saved: the entries, where a later
// entry at an index replaces the earlier one and everything after it
// (raft's rule for a follower whose log conflicts with its leader's), the
// latest HardState, and the voters of the fixed membership.
func TestStoreReopensWhatWasSaved(t *testing.T) {
	path := filepath.Join(t.TempDir(), storeFile)
	s, err := openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	require.NoError(t, s.save(nil, &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(2)), Commit: new(uint64(1))},
		[]*pb.Entry{entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c")}))
	require.NoError(t, s.save(nil, &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(3)), Commit: new(uint64(2))},
		[]*pb.Entry{entry(2, 2, "B")}))
	require.Equal(t, []string{"a", "B"}, storedEntries(t, s))
	require.NoError(t, s.close())

	s, err = openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	defer s.close()
	require.Equal(t, []string{"a", "B"}, storedEntries(t, s))
	hs, cs, err := s.ms.InitialState()
	require.NoError(t, err)
	require.Equal(t, [3]uint64{2, 3, 2}, [3]uint64{hs.GetTerm(), hs.GetVote(), hs.GetCommit()})
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
}

// A frame torn by a crash mid-write (never synced, so raft never counted
// on it) is cut off at every length it can have, and the store goes on
// appending after the last whole frame.
func TestStoreCutsATornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, storeFile)
	s, err := openStore(path, []uint64{1})
	require.NoError(t, err)
	require.NoError(t, s.save(nil, nil, []*pb.Entry{entry(1, 1, "a")}))
	require.NoError(t, s.close())
	whole, err := os.ReadFile(path)
	require.NoError(t, err)
	s, err = openStore(path, []uint64{1})
	require.NoError(t, err)
	require.NoError(t, s.save(nil, nil, []*pb.Entry{entry(1, 2, "b")}))
	require.NoError(t, s.close())
	both, err := os.ReadFile(path)
	require.NoError(t, err)

	for cut := len(whole); cut < len(both); cut++ {
		torn := filepath.Join(dir, "torn")
		require.NoError(t, os.WriteFile(torn, both[:cut], 0o644))
		s, err := openStore(torn, []uint64{1})
		require.NoError(t, err, "cut at %d", cut)
		require.Equal(t, []string{"a"}, storedEntries(t, s), "cut at %d", cut)
		require.NoError(t, s.save(nil, nil, []*pb.Entry{entry(1, 2, "c")}))
		require.NoError(t, s.close())
		s, err = openStore(torn, []uint64{1})
		require.NoError(t, err)
		require.Equal(t, []string{"a", "c"}, storedEntries(t, s), "cut at %d, then appended", cut)
		require.NoError(t, s.close())
	}
}

// A whole frame whose checksum holds but whose content is not a frame of
// a known kind is corruption, not a torn write: opening fails rather than
// cutting it off, and says where.
func TestStoreRefusesAWholeBadFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), storeFile)
	body := []byte{7, 1, 2, 3} // kind 7 is no kind
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)-1))
	frame = binary.BigEndian.AppendUint32(frame, crc32.Checksum(body, castagnoli))
	require.NoError(t, os.WriteFile(path, append(frame, body...), 0o644))
	_, err := openStore(path, []uint64{1})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "byte 0")
}

// storedLog reads a raft log file as a voter would open it: its snapshot
// and the indexes of the entries after it.
func storedLog(t *testing.T, path string) (snap *pb.Snapshot, first, last uint64) {
	t.Helper()
	s, err := openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	defer s.close()
	snap, err = s.ms.Snapshot()
	require.NoError(t, err)
	first, err = s.ms.FirstIndex()
	require.NoError(t, err)
	last, err = s.ms.LastIndex()
	require.NoError(t, err)
	return snap, first, last
}

// A snapshot taken at an applied index drops the entries up to it from
// the file at once and from memory but for the last few (a follower a
// little behind still gets entries); the file reopens as the snapshot,
// the entries after it and the HardState.
func TestStoreCompacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), storeFile)
	s, err := openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	var ents []*pb.Entry
	for i := range uint64(6) {
		ents = append(ents, entry(1, i+1, fmt.Sprint("e", i+1)))
	}
	require.NoError(t, s.save(nil, &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(5))}, ents))
	require.NoError(t, s.compact(4, []byte("state at 4"), 2))
	require.Equal(t, []string{"e3", "e4", "e5", "e6"}, storedEntries(t, s), "memory keeps two entries before the snapshot")
	require.NoError(t, s.save(nil, nil, []*pb.Entry{entry(2, 7, "e7")}))
	require.NoError(t, s.close())

	snap, first, last := storedLog(t, path)
	require.Equal(t, uint64(4), snap.GetMetadata().GetIndex())
	require.Equal(t, uint64(1), snap.GetMetadata().GetTerm())
	require.Equal(t, "state at 4", string(snap.GetData()))
	require.Equal(t, []uint64{1, 2, 3}, snap.GetMetadata().GetConfState().GetVoters(), "the snapshot keeps the voters")
	require.Equal(t, [2]uint64{5, 7}, [2]uint64{first, last}, "the file holds the entries after the snapshot only")
	s, err = openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	defer s.close()
	require.Equal(t, []string{"e5", "e6", "e7"}, storedEntries(t, s))
	hs, _, err := s.ms.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(5), hs.GetCommit())
	require.ErrorIs(t, s.compact(4, []byte("again"), 2), raft.ErrSnapOutOfDate, "a snapshot at the latest one's index is out of date")
}

// A snapshot a leader sends a voter too far behind replaces the voter's
// whole log, entries beyond the snapshot's index from an older term
// included (raft's restore), in memory and in the file.
func TestStoreSavesAReceivedSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), storeFile)
	s, err := openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	require.NoError(t, s.save(nil, &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(1))},
		[]*pb.Entry{entry(1, 1, "a"), entry(1, 2, "stale"), entry(1, 3, "stale"), entry(1, 4, "stale"), entry(1, 5, "stale")}))
	snap := &pb.Snapshot{Data: []byte("state at 3"), Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(3)), Term: new(uint64(2)), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	require.NoError(t, s.save(snap, &pb.HardState{Term: new(uint64(2)), Commit: new(uint64(3))}, []*pb.Entry{entry(2, 4, "d")}))
	require.Equal(t, []string{"d"}, storedEntries(t, s))
	require.NoError(t, s.close())

	got, first, last := storedLog(t, path)
	require.Equal(t, "state at 3", string(got.GetData()))
	require.Equal(t, [2]uint64{4, 4}, [2]uint64{first, last})
	s, err = openStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	defer s.close()
	require.Equal(t, []string{"d"}, storedEntries(t, s))
	hs, _, err := s.ms.InitialState()
	require.NoError(t, err)
	require.Equal(t, [3]uint64{2, 0, 3}, [3]uint64{hs.GetTerm(), hs.GetVote(), hs.GetCommit()})
}
