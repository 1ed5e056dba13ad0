package log

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/strandlog/strand/internal/checkpoint"
)

// segmentGapsFile records the gaps between segments that the log made
// itself, so that Open can tell them from a segment that went missing.
const segmentGapsFile = "segment-gap-checkpoint"

// segmentGap is a gap the log made: a follower's batch started past the log
// end offset end, and a new segment was rolled at base for it. Open accepts
// a segment at base whose predecessor ends at end, or, for the first
// segment, a log start offset at or after end.
type segmentGap struct{ end, base int64 }

// recordGapLocked makes a gap before a new segment at base durable, before
// the segment is created: Open refuses every gap it has no record of.
// Records of segments the log no longer has are dropped.
func (l *Log) recordGapLocked(base int64) error {
	g := segmentGap{end: l.leo.Load(), base: base}
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	gaps := slices.DeleteFunc(slices.Clone(l.gaps), func(g segmentGap) bool {
		return !slices.ContainsFunc(segs, func(s *segRef) bool { return s.BaseOffset() == g.base })
	})
	return l.writeGapsLocked(append(gaps, g))
}

// dropGapsFromLocked forgets the gaps before segments at or after offset,
// which a truncation removed.
func (l *Log) dropGapsFromLocked(offset int64) error {
	gaps := slices.DeleteFunc(slices.Clone(l.gaps), func(g segmentGap) bool { return g.base >= offset })
	if len(gaps) == len(l.gaps) {
		return nil
	}
	return l.writeGapsLocked(gaps)
}

func (l *Log) writeGapsLocked(gaps []segmentGap) error {
	entries := make([]string, len(gaps))
	for i, g := range gaps {
		entries[i] = fmt.Sprintf("%d %d", g.end, g.base)
	}
	if err := checkpoint.Write(l.fs, filepath.Join(l.dir, segmentGapsFile), 0, entries); err != nil {
		return fmt.Errorf("log %s: %w", l.dir, err)
	}
	l.gaps = gaps
	return nil
}

// readGaps reads the gap records; a missing file is none.
func (l *Log) readGaps() error {
	err := l.readCheckpoint(segmentGapsFile, func(entry string) error {
		endText, baseText, ok := strings.Cut(entry, " ")
		end, err1 := strconv.ParseInt(endText, 10, 64)
		base, err2 := strconv.ParseInt(baseText, 10, 64)
		if !ok || err1 != nil || err2 != nil || end < 0 || base <= end {
			return fmt.Errorf("%q is not a gap: want \"end base\", 0 <= end < base", entry)
		}
		l.gaps = append(l.gaps, segmentGap{end: end, base: base})
		return nil
	})
	return err
}

// gapBefore returns the recorded gap before a segment at base.
func (l *Log) gapBefore(base int64) (segmentGap, bool) {
	i := slices.IndexFunc(l.gaps, func(g segmentGap) bool { return g.base == base })
	if i < 0 {
		return segmentGap{}, false
	}
	return l.gaps[i], true
}
