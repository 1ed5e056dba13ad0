package main

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"
)

func entry(term, index uint64, data string) *pb.Entry {
	return &pb.Entry{Term: new(term), Index: new(index), Data: []byte(data)}
}

func storedEntries(t *testing.T, s *raftStore) []string {
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
// entry at an index replaces the earlier one and everything after it (raft's
// rule for a follower whose log conflicts with its leader's), the latest
// HardState, and the voters of the static membership.
func TestRaftStoreReopensWhatWasSaved(t *testing.T) {
	path := filepath.Join(t.TempDir(), raftFile)
	s, err := openRaftStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	require.NoError(t, s.save(&pb.HardState{Term: new(uint64(1)), Vote: new(uint64(2)), Commit: new(uint64(1))},
		[]*pb.Entry{entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c")}))
	require.NoError(t, s.save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(3)), Commit: new(uint64(2))},
		[]*pb.Entry{entry(2, 2, "B")}))
	require.Equal(t, []string{"a", "B"}, storedEntries(t, s))
	require.NoError(t, s.close())

	s, err = openRaftStore(path, []uint64{1, 2, 3})
	require.NoError(t, err)
	defer s.close()
	require.Equal(t, []string{"a", "B"}, storedEntries(t, s))
	hs, cs, err := s.ms.InitialState()
	require.NoError(t, err)
	require.Equal(t, uint64(2), hs.GetTerm())
	require.Equal(t, uint64(3), hs.GetVote())
	require.Equal(t, uint64(2), hs.GetCommit())
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
}

// A frame torn by a crash mid-write (never synced, so raft never counted
// on it) is cut off at every length it can have, and the store goes on
// appending after the last whole frame.
func TestRaftStoreCutsATornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, raftFile)
	s, err := openRaftStore(path, []uint64{1})
	require.NoError(t, err)
	require.NoError(t, s.save(nil, []*pb.Entry{entry(1, 1, "a")}))
	require.NoError(t, s.close())
	whole, err := os.ReadFile(path)
	require.NoError(t, err)
	s, err = openRaftStore(path, []uint64{1})
	require.NoError(t, err)
	require.NoError(t, s.save(nil, []*pb.Entry{entry(1, 2, "b")}))
	require.NoError(t, s.close())
	both, err := os.ReadFile(path)
	require.NoError(t, err)

	for cut := len(whole); cut < len(both); cut++ {
		torn := filepath.Join(dir, "torn")
		require.NoError(t, os.WriteFile(torn, both[:cut], 0o644))
		s, err := openRaftStore(torn, []uint64{1})
		require.NoError(t, err, "cut at %d", cut)
		require.Equal(t, []string{"a"}, storedEntries(t, s), "cut at %d", cut)
		require.NoError(t, s.save(nil, []*pb.Entry{entry(1, 2, "c")}))
		require.NoError(t, s.close())
		s, err = openRaftStore(torn, []uint64{1})
		require.NoError(t, err)
		require.Equal(t, []string{"a", "c"}, storedEntries(t, s), "cut at %d, then appended", cut)
		require.NoError(t, s.close())
	}
}

// A whole frame whose checksum holds but whose content is not an entry is
// corruption, not a torn write: opening fails rather than cutting it off.
func TestRaftStoreRefusesAWholeBadFrame(t *testing.T) {
	path := filepath.Join(t.TempDir(), raftFile)
	body := []byte{7, 1, 2, 3} // kind 7 is no kind
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)-1))
	frame = binary.BigEndian.AppendUint32(frame, crc32.Checksum(body, castagnoli))
	require.NoError(t, os.WriteFile(path, append(frame, body...), 0o644))
	_, err := openRaftStore(path, []uint64{1})
	require.ErrorIs(t, err, errCorruptRaftLog)
}
