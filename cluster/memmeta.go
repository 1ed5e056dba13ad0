package cluster

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/strandlog/strand/replica"
)

// MemoryMetadata is a metadata log in memory shared by a group of voters,
// for tests and the simulator: a consensus that never fails, whose
// entries commit the moment the leader proposes them. Its leader is the
// voter a test elects, or the lowest open voter when the leader closes.
// A voter that is closed and opened again replays the log from its
// latest snapshot, as a restarted node replays its own disk; one cut off
// (Cut) hears nothing until Heal, and then catches up, from the latest
// snapshot if the log dropped entries it lacks, as a raft follower gets
// the leader's snapshot.
type MemoryMetadata struct {
	mu       sync.Mutex
	voters   []replica.NodeID
	open     map[replica.NodeID]*MemoryMetadataLog
	term     uint64
	leader   replica.NodeID
	snapshot *MetadataSnapshot
	entries  []MetadataEntry // after snapshot
}

// NewMemoryMetadata returns the shared log of voters, none open yet.
func NewMemoryMetadata(voters ...replica.NodeID) *MemoryMetadata {
	return &MemoryMetadata{voters: slices.Clone(voters), open: map[replica.NodeID]*MemoryMetadataLog{}, leader: replica.NoNode}
}

// Open opens voter id's log: its first update replays the log, and it
// leads if it is the only voter open. A voter open already is closed
// first, as a crash of its node would leave it.
func (g *MemoryMetadata) Open(id replica.NodeID) (*MemoryMetadataLog, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Contains(g.voters, id) {
		return nil, fmt.Errorf("cluster: node %d is not a voter of the memory metadata log %v", id, g.voters)
	}
	if old := g.open[id]; old != nil {
		g.closeLocked(old)
	}
	l := &MemoryMetadataLog{group: g, id: id, feed: newMetadataFeed()}
	g.open[id] = l
	l.catchUpLocked(true)
	if g.leader == replica.NoNode {
		g.electLocked(id)
	}
	return l, nil
}

// Elect makes id the leader of a new term, as an election would; id
// must be open.
func (g *MemoryMetadata) Elect(id replica.NodeID) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[id] == nil {
		return fmt.Errorf("cluster: node %d's memory metadata log is not open", id)
	}
	g.electLocked(id)
	return nil
}

// Leader returns the leader and its term.
func (g *MemoryMetadata) Leader() (replica.NodeID, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leader, g.term
}

func (g *MemoryMetadata) electLocked(id replica.NodeID) {
	g.term++
	g.leader = id
	g.broadcastLocked(MetadataUpdate{Leader: id, Term: g.term})
}

func (g *MemoryMetadata) broadcastLocked(u MetadataUpdate) {
	for _, id := range slices.Sorted(maps.Keys(g.open)) {
		if l := g.open[id]; !l.cut {
			l.push(u)
		}
	}
}

// Cut makes voter id hear nothing of the log until Heal.
func (g *MemoryMetadata) Cut(id replica.NodeID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.open[id]; l != nil {
		l.cut = true
	}
}

// Heal lets voter id hear the log again: it gets what it missed, from the
// latest snapshot if the log no longer holds it all.
func (g *MemoryMetadata) Heal(id replica.NodeID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.open[id]; l != nil && l.cut {
		l.cut = false
		l.catchUpLocked(false)
	}
}

func (g *MemoryMetadata) closeLocked(l *MemoryMetadataLog) {
	if g.open[l.id] != l {
		return
	}
	delete(g.open, l.id)
	l.feed.close()
	if g.leader != l.id {
		return
	}
	g.leader = replica.NoNode
	for _, id := range g.voters {
		if g.open[id] != nil {
			g.electLocked(id)
			return
		}
	}
	g.term++
}

// MemoryMetadataLog is one voter's view of a MemoryMetadata.
type MemoryMetadataLog struct {
	group *MemoryMetadata
	id    replica.NodeID
	feed  *feed[MetadataUpdate]
	// Guarded by the group's lock.
	delivered uint64 // the index of the last entry pushed to the feed
	cut       bool
}

// push hands u to the feed.
func (l *MemoryMetadataLog) push(u MetadataUpdate) {
	if n := len(u.Entries); n > 0 {
		l.delivered = u.Entries[n-1].Index
	} else if u.Snapshot != nil {
		l.delivered = u.Snapshot.Index
	}
	l.feed.push(u)
}

// catchUpLocked pushes what the voter has not had: the snapshot if the
// entries it lacks were dropped, then the entries.
func (l *MemoryMetadataLog) catchUpLocked(opening bool) {
	g := l.group
	u := MetadataUpdate{Leader: g.leader, Term: g.term, Replayed: opening}
	if g.snapshot != nil && g.snapshot.Index > l.delivered {
		s := *g.snapshot
		s.Data = slices.Clone(s.Data)
		u.Snapshot = &s
	}
	for _, e := range g.entries {
		if e.Index > l.delivered {
			u.Entries = append(u.Entries, e)
		}
	}
	l.push(u)
}

// Propose implements MetadataLog: the entry commits at once if this
// voter leads term.
func (l *MemoryMetadataLog) Propose(term uint64, data []byte) error {
	g := l.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[l.id] != l || g.leader != l.id || g.term != term {
		return fmt.Errorf("%w: node %d, term %d (the leader is node %d in term %d)", ErrNotMetadataLeader, l.id, term, g.leader, g.term)
	}
	e := MetadataEntry{Index: g.lastIndexLocked() + 1, Term: term, Data: slices.Clone(data)}
	g.entries = append(g.entries, e)
	g.broadcastLocked(MetadataUpdate{Entries: []MetadataEntry{e}, Leader: g.leader, Term: g.term})
	return nil
}

func (g *MemoryMetadata) lastIndexLocked() uint64 {
	if n := len(g.entries); n > 0 {
		return g.entries[n-1].Index
	}
	if g.snapshot != nil {
		return g.snapshot.Index
	}
	return 0
}

// Voters implements MetadataVoters.
func (l *MemoryMetadataLog) Voters() []replica.NodeID { return slices.Clone(l.group.voters) }

// Updates implements MetadataLog.
func (l *MemoryMetadataLog) Updates() <-chan MetadataUpdate { return l.feed.out }

// Snapshot implements MetadataLog: the shared log drops the entries up to
// index, so that a voter opened later starts from data.
func (l *MemoryMetadataLog) Snapshot(index uint64, data []byte) error {
	g := l.group
	g.mu.Lock()
	defer g.mu.Unlock()
	first := uint64(1)
	if g.snapshot != nil {
		first = g.snapshot.Index + 1
	}
	if index < first || index > g.lastIndexLocked() {
		return nil // older than the shared snapshot, or another voter's past
	}
	at := int(index - first)
	g.snapshot = &MetadataSnapshot{Index: index, Term: g.entries[at].Term, Data: slices.Clone(data)}
	g.entries = slices.Clone(g.entries[at+1:])
	return nil
}

// Close closes the voter's log; if it led, another open voter leads a new
// term.
func (l *MemoryMetadataLog) Close() error {
	l.group.mu.Lock()
	defer l.group.mu.Unlock()
	l.group.closeLocked(l)
	return nil
}

// feed is an unbounded queue pumped into a channel by one goroutine, so
// that pushing never waits for the reader (a Node reads its metadata
// log's updates on the goroutine that proposes).
type feed[T any] struct {
	// merge, if set, folds v into the last value still queued and
	// reports whether it did, so that a reader that lags takes fewer,
	// larger values.
	merge  func(last *T, v T) bool
	mu     sync.Mutex
	queue  []T
	closed bool
	wake   chan struct{}
	out    chan T
	done   chan struct{} // closed by close
	exited chan struct{} // closed by pump as it returns
}

func newFeed[T any]() *feed[T] {
	f := &feed[T]{wake: make(chan struct{}, 1), out: make(chan T), done: make(chan struct{}), exited: make(chan struct{})}
	go f.pump()
	return f
}

// newMetadataFeed is the feed of a metadata log: entries of the leader
// and term of the last update still queued join it.
func newMetadataFeed() *feed[MetadataUpdate] {
	f := newFeed[MetadataUpdate]()
	f.merge = func(last *MetadataUpdate, u MetadataUpdate) bool {
		if u.Snapshot != nil || u.Replayed || last.Leader != u.Leader || last.Term != u.Term {
			return false
		}
		last.Entries = append(last.Entries, u.Entries...)
		return true
	}
	return f
}

func (f *feed[T]) push(v T) {
	f.mu.Lock()
	if n := len(f.queue); !f.closed && (n == 0 || f.merge == nil || !f.merge(&f.queue[n-1], v)) {
		f.queue = append(f.queue, v)
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// close stops the pump, dropping what the reader did not take, closes
// the channel and returns once the pump has.
func (f *feed[T]) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	close(f.done)
	<-f.exited
}

func (f *feed[T]) pump() {
	defer close(f.exited)
	defer close(f.out)
	for {
		f.mu.Lock()
		q := f.queue
		f.queue = nil
		f.mu.Unlock()
		for _, v := range q {
			select {
			case f.out <- v:
			case <-f.done:
				return
			}
		}
		select {
		case <-f.wake:
		case <-f.done:
			return
		}
	}
}
