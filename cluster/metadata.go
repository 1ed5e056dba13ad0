package cluster

import (
	"errors"

	"github.com/strandlog/strand/replica"
)

// MetadataLog is the replicated, ordered log of the controller's records,
// which the application supplies: KRaft's metadata log. Every node of the
// cluster has one; together they agree on one sequence of entries, and one
// of them at a time leads and takes proposals. The library stays free of a
// consensus engine: examples/raftlog implements MetadataLog with etcd raft,
// NewMemoryMetadata one in memory for tests, and OpenFileMetadata one on a
// local file for a single node, which needs no consensus at all.
//
// A Node is the only user of its MetadataLog: it reads Updates from one
// goroutine and calls Propose and Snapshot from that goroutine too.
type MetadataLog interface {
	// Propose asks that data be appended to the log as an entry of term,
	// which this node must lead as the log last reported it; it returns
	// ErrNotMetadataLeader otherwise. It returns once the entry is on its
	// way: whether it commits is learnt from Updates, and an entry of a
	// leader deposed before it committed may never appear.
	Propose(term uint64, data []byte) error

	// Updates is the feed of the log's committed entries and its
	// leadership, in order. The first update after the log opens carries
	// its latest snapshot, if it has one, and the entries it had committed
	// since. A later update carries a snapshot only when the leader sent
	// one in place of entries this node lacks: the node then replaces its
	// state with it. The channel is closed when the log is closed.
	Updates() <-chan MetadataUpdate

	// Snapshot tells the log that data is the state once the entries up
	// to index are applied: it may drop them, and send data to a node
	// that lacks them. The Node calls it every Options.SnapshotEntries
	// applied entries.
	Snapshot(index uint64, data []byte) error
}

// MetadataLeaderTransferer is a MetadataLog that can hand its leadership
// to another voter, as a Node does when it shuts down, so that the
// controller moves without an election timeout.
type MetadataLeaderTransferer interface {
	TransferLeadership()
}

// MetadataVoters is a MetadataLog that tells its voters: a Node sizes
// its internal topics' replication factor by them.
type MetadataVoters interface {
	Voters() []replica.NodeID
}

// MetadataUpdate is one step of a MetadataLog's feed.
type MetadataUpdate struct {
	// Snapshot, if not nil, replaces the state: the entries up to its
	// index are in it. Entries follow it.
	Snapshot *MetadataSnapshot
	// Entries are committed entries, in the log's order, each once.
	Entries []MetadataEntry
	// Leader is the node that leads Term, or replica.NoNode when none is
	// known. A MetadataLog reports this node itself as the leader of a
	// term only once every entry committed before that term is in the
	// feed, so that the node's state is the whole log when it becomes the
	// active controller (raft commits an earlier term's entries only with
	// one of the current term: a new leader reports itself once its first
	// entry of the term is committed).
	Leader replica.NodeID
	Term   uint64
	// Replayed says that every entry the log had committed when it opened
	// is in the feed, this update included (set once, on the update that
	// completes them: at once for a log that had none).
	Replayed bool
}

// MetadataEntry is one committed entry of a MetadataLog.
type MetadataEntry struct {
	Index, Term uint64
	Data        []byte
}

// MetadataSnapshot is the state once the entries up to Index are applied.
type MetadataSnapshot struct {
	Index, Term uint64
	Data        []byte
}

// ErrNotMetadataLeader answers a proposal to a MetadataLog that does not
// lead the proposal's term.
var ErrNotMetadataLeader = errors.New("cluster: not the metadata log's leader")
