package group

import "container/heap"

// timerKey names a timer the way Kafka's coordinator names them
// (GroupMetadataManager.classicGroup{Heartbeat,Join,Sync}Key): scheduling a
// key again replaces its timer, so at most one timer per key exists.
type timerKey struct {
	kind   timerKind
	group  string
	member string
}

type timerKind uint8

const (
	timerHeartbeat timerKind = iota // member session (or new-member join, or pending-member) timeout
	timerJoin                       // join phase completion (initial delay or rebalance timeout)
	timerSync                       // pending-sync expiration
	timerExpire                     // the periodic expiration of offsets and groups
	timerRebalance                  // a consumer group member's revocation deadline
)

type timer struct {
	key      timerKey
	deadline int64  // milliseconds
	seq      uint64 // scheduling order, to fire timers of one deadline in order
	fire     func()
	index    int
}

// timers is a min-heap of timers by (deadline, seq) with lookup by key.
type timers struct {
	heap  []*timer
	byKey map[timerKey]*timer
	seq   uint64
}

func (t *timers) Len() int { return len(t.heap) }
func (t *timers) Less(i, j int) bool {
	a, b := t.heap[i], t.heap[j]
	return a.deadline < b.deadline || a.deadline == b.deadline && a.seq < b.seq
}
func (t *timers) Swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].index, t.heap[j].index = i, j
}
func (t *timers) Push(x any) {
	tm := x.(*timer)
	tm.index = len(t.heap)
	t.heap = append(t.heap, tm)
}
func (t *timers) Pop() any {
	n := len(t.heap) - 1
	tm := t.heap[n]
	t.heap[n] = nil
	t.heap = t.heap[:n]
	return tm
}

func (t *timers) schedule(key timerKey, deadline int64, fire func()) {
	t.cancel(key)
	if t.byKey == nil {
		t.byKey = make(map[timerKey]*timer)
	}
	t.seq++
	tm := &timer{key: key, deadline: deadline, seq: t.seq, fire: fire}
	t.byKey[key] = tm
	heap.Push(t, tm)
}

func (t *timers) cancel(key timerKey) {
	if tm, ok := t.byKey[key]; ok {
		heap.Remove(t, tm.index)
		delete(t.byKey, key)
	}
}

// popDue removes and returns the earliest timer due at or before now.
func (t *timers) popDue(now int64) *timer {
	if len(t.heap) == 0 || t.heap[0].deadline > now {
		return nil
	}
	tm := heap.Pop(t).(*timer)
	delete(t.byKey, tm.key)
	return tm
}
