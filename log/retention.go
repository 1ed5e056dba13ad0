package log

import (
	"time"
)

// Retention limits what a log keeps (Kafka's retention.ms and
// retention.bytes, cleanup.policy=delete). A field of zero or Unlimited
// sets no limit of its kind; unlike Kafka, whose default is 7 days,
// nothing expires unless asked. In a TopicConfig, zero takes the Dir's
// default and Unlimited turns the default off.
type Retention struct {
	// Age deletes a segment once its newest record is older than this.
	Age time.Duration `json:"age,omitempty"`
	// Bytes deletes the oldest segments while the log without them still
	// holds at least this many bytes.
	Bytes int64 `json:"bytes,omitempty"`
}

// Unlimited, as a Retention field, sets no limit, as Kafka's -1 for
// retention.ms and retention.bytes; in a TopicConfig it overrides the
// Dir's default, which zero would take.
const Unlimited = -1

// ApplyRetention deletes the oldest segments that retention r lets go, by
// Kafka's UnifiedLog.deleteOldSegments rules: whole segments only, oldest
// first, stopping at the first segment that must stay, and never a segment
// holding the high watermark or anything past it. The log start offset
// moves to the first offset kept. It returns the number of segments
// deleted. Readers holding a deleted segment go on reading it until they
// close their Batches; then its files are removed.
func (l *Log) ApplyRetention(now time.Time, r Retention) (int, error) {
	if r.Age <= 0 && r.Bytes <= 0 {
		return 0, nil
	}
	if err := l.lockWriter(true); err != nil {
		return 0, err
	}
	defer l.wmu.Unlock()
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()

	var total int64
	for _, s := range segs {
		total += s.Size()
	}
	hw, leo := l.hw.Load(), l.leo.Load()
	excess := total - r.Bytes
	n := 0
	for i, s := range segs {
		upper, lastAndEmpty := leo, s.Size() == 0
		if i+1 < len(segs) {
			upper, lastAndEmpty = segs[i+1].BaseOffset(), false
		}
		if hw < upper || lastAndEmpty {
			break
		}
		expired := r.Age > 0 && now.Sub(s.newest()) > r.Age
		oversize := r.Bytes > 0 && excess-s.Size() >= 0
		if !expired && !oversize {
			break
		}
		excess -= s.Size()
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if n == len(segs) {
		// A log always has a segment: roll an empty one to stay active.
		if _, err := l.rollLocked(leo, false); err != nil {
			return 0, err
		}
	}
	l.mu.RLock()
	next := l.segs[n].BaseOffset()
	l.mu.RUnlock()
	if err := l.advanceLogStartLocked(next); err != nil {
		return 0, err
	}
	return n, l.deleteHeadLocked(n)
}

// newest is the time of the segment's newest record, or its creation
// time if its batches carry no timestamps (Kafka uses the file's
// modification time).
func (s *segRef) newest() time.Time {
	if ts := s.MaxTimestamp(); ts >= 0 {
		return time.UnixMilli(ts)
	}
	return s.created
}
