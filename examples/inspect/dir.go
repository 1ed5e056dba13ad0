package main

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/internal/checkpoint"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// The files of a partition directory besides its segments, as package log
// names them (log/open.go, log/epoch.go), which are Kafka's names.
const (
	recoveryPointFile = "recovery-point-offset-checkpoint"
	logStartFile      = "log-start-offset-checkpoint"
	highWatermarkFile = "replication-offset-checkpoint"
	cleanShutdownFile = ".clean-shutdown"
	epochFile         = "leader-epoch-checkpoint"
	gapsFile          = "segment-gap-checkpoint"
	lockFile          = ".lock"
	txnIndexSuffix    = ".txnindex" // log/producerstate.go
)

// segmentSuffixes are the files of one segment, the .log first.
var segmentSuffixes = []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix}

// inspectPath inspects a data directory, a partition directory or a
// segment file. It fails only if path cannot be read or is none of those;
// what is wrong inside is recorded as findings.
func (in *inspector) inspectPath(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		name := filepath.Base(path)
		for _, suffix := range segmentSuffixes {
			if base, ok := segmentBase(name, suffix); ok {
				p := &partition{dir: filepath.Dir(path), lastOffset: -1, lastEpoch: -1}
				in.inspectSegment(p, base, math.MaxInt64, in.opts.indexes || suffix != segment.LogSuffix)
				return nil
			}
		}
		return fmt.Errorf("%s: not a segment file: want 20 digits followed by .log, .index or .timeindex", path)
	}
	names, err := list(path)
	if err != nil {
		return err
	}
	if isPartitionDir(names) {
		in.inspectPartition(path, names)
		return nil
	}
	var parts []string
	for _, name := range names {
		switch {
		case isPartitionName(name):
			if fi, err := os.Stat(filepath.Join(path, name)); err == nil && fi.IsDir() {
				parts = append(parts, name)
			}
		case deletedPartition.MatchString(name):
			in.note(filepath.Join(path, name), "a deleted partition not yet removed; opening the data directory removes it")
		}
	}
	if len(parts) == 0 {
		if isPartitionName(filepath.Base(filepath.Clean(path))) {
			in.inspectPartition(path, names) // an empty partition
			return nil
		}
		return fmt.Errorf("%s: neither a data directory (no <topic>-<partition> folders) nor a partition directory (no segments)", path)
	}
	in.printf("data directory %s: %d partition(s)\n", path, len(parts))
	for _, name := range names {
		if strings.HasSuffix(name, "-checkpoint") {
			in.printDataDirCheckpoint(filepath.Join(path, name))
		}
	}
	for _, name := range parts {
		sub := filepath.Join(path, name)
		subNames, err := list(sub)
		if err != nil {
			in.problem(sub, "%v", err)
			continue
		}
		in.inspectPartition(sub, subNames)
	}
	return nil
}

// deletedPartition matches the names log.Dir.DeleteTopic renames partition
// folders to, Kafka's <topic>-<partition>.<32 hex digits>-delete; OpenDir
// removes those and leaves any other folder.
var deletedPartition = regexp.MustCompile(`^[A-Za-z0-9._-]+-[0-9]+\.[0-9a-f]{32}-delete$`)

func list(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// segmentBase parses a segment file name: the base offset in 20 digits,
// then suffix.
func segmentBase(name, suffix string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, suffix)
	if !ok || len(digits) != 20 || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	return base, err == nil
}

// isPartitionName reports whether name is <topic>-<partition>.
func isPartitionName(name string) bool {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 || strings.Trim(name[i+1:], "0123456789") != "" {
		return false
	}
	_, err := strconv.ParseInt(name[i+1:], 10, 32)
	return err == nil
}

// isPartitionDir reports whether names hold segment files or a partition's
// checkpoints.
func isPartitionDir(names []string) bool {
	return slices.ContainsFunc(names, func(name string) bool {
		for _, suffix := range segmentSuffixes {
			if _, ok := segmentBase(name, suffix); ok {
				return true
			}
		}
		return name == epochFile || name == recoveryPointFile
	})
}

// partition is what the checks of one partition directory share: its
// checkpoints, and the last batch seen, carried from segment to segment.
type partition struct {
	dir string

	// known is set when the directory has a recovery point checkpoint, as
	// Strand writes one. Only then can damage be told apart from a torn
	// write that opening the log repairs; otherwise all damage is reported.
	known         bool
	clean         bool
	recoveryPoint int64
	epochs        []epochEntry

	lastOffset int64  // of the last batch seen, -1 before the first
	lastEpoch  int32  // its partition leader epoch
	cut        string // where opening the log truncates it, once found
	epochsSeen bool   // some batch carries a leader epoch
	offsets    bool   // a partition of the offsets topic: its records are decoded
}

type epochEntry struct {
	epoch int32
	start int64
}

// recoverFrom returns the offset from which damage in segment i of bases
// is a torn write that log.Open cuts off, not corruption: after an unclean
// shutdown it recovers the last segment, cutting at the first bad batch at
// or past the recovery point (log/open.go, load). Only the last segment can
// be torn: the log synced the others whole before it rolled past them. It
// returns math.MaxInt64 for a segment whose every bad batch is corruption.
func (p *partition) recoverFrom(bases []int64, i int) int64 {
	if !p.known || p.clean || i < len(bases)-1 {
		return math.MaxInt64
	}
	return max(p.recoveryPoint, bases[i])
}

// gap is a gap between segments that the log recorded making (log/gaps.go):
// a segment at base whose predecessor ends at end.
type gap struct{ end, base int64 }

// checkFollows reports a segment that does not continue the ones before:
// the first must start at or below the log start offset, each later one
// where the one before ends (prevEnd, -1 if unknown), but where the log
// recorded a gap. A Strand log refuses to open otherwise: a segment went
// missing. Only directories Strand wrote (p.known) are checked; Kafka's own
// may have such gaps after compaction.
func (in *inspector) checkFollows(p *partition, file string, base, prevEnd, logStart int64, gaps []gap, first bool) {
	if !p.known {
		return
	}
	recorded := slices.IndexFunc(gaps, func(g gap) bool { return g.base == base })
	switch {
	case first && base > logStart && (recorded < 0 || gaps[recorded].end > logStart):
		in.problem(file, "the log start offset %d is below the first segment: offsets %d to %d are missing", logStart, logStart, base-1)
	case !first && prevEnd >= 0 && base > prevEnd && (recorded < 0 || gaps[recorded].end != prevEnd):
		in.problem(file, "offsets %d to %d are missing: the segment before ends at offset %d", prevEnd, base-1, prevEnd)
	}
}

// epochFor returns the epoch the checkpoint gives offset, and false if the
// checkpoint has no entry at or below it.
func (p *partition) epochFor(offset int64) (int32, bool) {
	i, found := slices.BinarySearchFunc(p.epochs, offset, func(e epochEntry, off int64) int {
		switch {
		case e.start < off:
			return -1
		case e.start > off:
			return 1
		}
		return 0
	})
	if !found {
		i--
	}
	if i < 0 {
		return 0, false
	}
	return p.epochs[i].epoch, true
}

// inspectPartition prints and checks a partition directory.
func (in *inspector) inspectPartition(dir string, names []string) {
	in.printf("partition %s (%s)\n", filepath.Base(filepath.Clean(dir)), dir)
	p := &partition{dir: dir, lastOffset: -1, lastEpoch: -1, offsets: isOffsetsPartition(dir)}
	_, err := os.Stat(filepath.Join(dir, cleanShutdownFile))
	p.clean = err == nil

	logStart, hasLogStart := in.readOffsetCheckpoint(filepath.Join(dir, logStartFile))
	p.recoveryPoint, p.known = in.readOffsetCheckpoint(filepath.Join(dir, recoveryPointFile))
	hw, hasHW := in.readOffsetCheckpoint(filepath.Join(dir, highWatermarkFile))
	in.printf("  log start offset %s, recovery point %s, high watermark %s, clean shutdown %s\n",
		optional(logStart, hasLogStart), optional(p.recoveryPoint, p.known), optional(hw, hasHW), yesNo(p.clean))
	p.epochs = in.readEpochs(filepath.Join(dir, epochFile))
	if len(p.epochs) > 0 {
		var b strings.Builder
		for _, e := range p.epochs {
			fmt.Fprintf(&b, " %d@%d", e.epoch, e.start)
		}
		in.printf("  leader epochs (epoch@start offset):%s\n", b.String())
	}

	var bases []int64
	var others []string
	for _, name := range names {
		if base, ok := segmentBase(name, segment.LogSuffix); ok {
			bases = append(bases, base)
			continue
		}
		switch {
		case name == cleanShutdownFile, name == logStartFile, name == recoveryPointFile,
			name == highWatermarkFile, name == epochFile, name == gapsFile, name == lockFile:
		case isIndexOf(name, names):
		case isProducerFile(name, names):
		default:
			others = append(others, name)
			in.noteOther(dir, name)
		}
	}
	slices.Sort(bases)
	gaps := in.readGaps(filepath.Join(dir, gapsFile))
	prevEnd := int64(-1)
	for i, base := range bases {
		file := segment.FileName(dir, base, segment.LogSuffix)
		in.checkFollows(p, file, base, prevEnd, logStart, gaps, i == 0)
		prevEnd = in.inspectSegment(p, base, p.recoverFrom(bases, i), in.opts.indexes)
	}
	if len(others) > 0 {
		in.printf("  other files: %s\n", strings.Join(others, " "))
	}

	if len(bases) == 0 {
		in.printf("  no segments\n")
		return
	}
	leo := max(bases[len(bases)-1], p.lastOffset+1)
	in.printf("  log end offset %d\n", leo)
	if in.groups.ends == nil {
		in.groups.ends = map[string]int64{}
	}
	in.groups.ends[filepath.Base(filepath.Clean(dir))] = leo
	if p.epochsSeen && len(p.epochs) == 0 {
		in.note(dir, "batches carry leader epochs but %s has no entries", epochFile)
	}
	// A clean Close leaves the checkpoints at the log end. After a crash
	// some may be ahead of it legitimately: the epoch checkpoint is written
	// before the batch, the high watermark and log start may count records
	// that were never synced. The recovery point never is: everything
	// below it was synced, and a truncation lowers it before it cuts.
	if p.known && p.recoveryPoint > leo && p.cut == "" {
		in.problem(dir, "%s is %d, past the log end offset %d: synced records are missing", recoveryPointFile, p.recoveryPoint, leo)
	}
	ahead := func(name string, off int64) {
		msg := fmt.Sprintf("%s is %d, past the log end offset %d", name, off, leo)
		if p.clean && p.cut == "" {
			in.problem(dir, "%s: records the log had when it was closed are missing", msg)
		} else {
			in.note(dir, "%s", msg)
		}
	}
	if hasHW && hw > leo {
		ahead(highWatermarkFile, hw)
	}
	if hasLogStart && logStart > leo {
		ahead(logStartFile, logStart)
	}
	if n := len(p.epochs); n > 0 && p.epochs[n-1].start > leo {
		ahead(epochFile+" start offset of epoch "+strconv.Itoa(int(p.epochs[n-1].epoch)), p.epochs[n-1].start)
	}
}

// isIndexOf reports whether name is an index file of a segment whose .log
// is in names.
func isIndexOf(name string, names []string) bool {
	for _, suffix := range segmentSuffixes[1:] {
		if base, ok := segmentBase(name, suffix); ok {
			return slices.Contains(names, filepath.Base(segment.FileName("", base, segment.LogSuffix)))
		}
	}
	return false
}

// isProducerFile reports whether name is one of the files a log keeps of
// its producers: a producer-state snapshot, or a segment's .txnindex.
func isProducerFile(name string, names []string) bool {
	if _, ok := segmentBase(name, idempotence.SnapshotSuffix); ok {
		return true
	}
	base, ok := segmentBase(name, txnIndexSuffix)
	return ok && slices.Contains(names, filepath.Base(segment.FileName("", base, segment.LogSuffix)))
}

// noteOther explains a file that is not a segment's or a checkpoint.
func (in *inspector) noteOther(dir, name string) {
	path := filepath.Join(dir, name)
	switch {
	case strings.HasSuffix(name, ".deleted"), strings.HasSuffix(name, ".cleaned"):
		in.note(path, "left by an interrupted deletion or compaction; opening the log removes it")
	case strings.HasSuffix(name, ".swap"):
		in.note(path, "left by an interrupted compaction; opening the log renames it over the segment it replaces")
	case strings.HasSuffix(name, segment.IndexSuffix), strings.HasSuffix(name, segment.TimeIndexSuffix):
		in.note(path, "index without a .log file; opening the log removes it")
	}
}

// readOffsetCheckpoint reads a partition's one-offset checkpoint file.
func (in *inspector) readOffsetCheckpoint(path string) (int64, bool) {
	var off int64
	n := 0
	err := checkpoint.Read(vfs.Default, path, 0, func(entry string) error {
		n++
		v, err := strconv.ParseInt(entry, 10, 64)
		switch {
		case n > 1:
			return errors.New("more than one entry")
		case err != nil || v < 0:
			return fmt.Errorf("offset %q is not a non-negative int64", entry)
		}
		off = v
		return nil
	})
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return 0, false
	case err != nil:
		in.problem(path, "%v", err)
		return 0, false
	}
	return off, n == 1
}

// readGaps reads segment-gap-checkpoint: "end base" lines, each a gap
// before the segment at base, whose predecessor ends at end.
func (in *inspector) readGaps(path string) []gap {
	var gaps []gap
	err := checkpoint.Read(vfs.Default, path, 0, func(line string) error {
		var g gap
		if n, err := fmt.Sscanf(line, "%d %d", &g.end, &g.base); n != 2 || err != nil || g.end < 0 || g.base <= g.end {
			return fmt.Errorf("%q is not a gap: want \"end base\", 0 <= end < base", line)
		}
		gaps = append(gaps, g)
		return nil
	})
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		in.problem(path, "%v", err)
		return nil
	}
	return gaps
}

// readEpochs reads leader-epoch-checkpoint: "epoch startOffset" lines,
// strictly increasing in both, as log.EpochCache writes them.
func (in *inspector) readEpochs(path string) []epochEntry {
	var entries []epochEntry
	err := checkpoint.Read(vfs.Default, path, 0, func(line string) error {
		f := strings.Fields(line)
		if len(f) != 2 {
			return fmt.Errorf("want \"epoch startOffset\", got %q", line)
		}
		epoch, err1 := strconv.ParseInt(f[0], 10, 32)
		start, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || epoch < 0 || start < 0 {
			return fmt.Errorf("%q is not a non-negative epoch and start offset", line)
		}
		e := epochEntry{epoch: int32(epoch), start: start}
		if n := len(entries); n > 0 && (e.epoch <= entries[n-1].epoch || e.start <= entries[n-1].start) {
			return fmt.Errorf("epoch %d at %d does not follow epoch %d at %d", e.epoch, e.start, entries[n-1].epoch, entries[n-1].start)
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		in.problem(path, "%v", err)
		return nil
	}
	return entries
}

// printDataDirCheckpoint prints a data directory's checkpoint file, such
// as Kafka's recovery-point-offset-checkpoint with one "topic partition
// offset" line per partition.
func (in *inspector) printDataDirCheckpoint(path string) {
	var entries []string
	err := checkpoint.Read(vfs.Default, path, 0, func(entry string) error {
		entries = append(entries, entry)
		return nil
	})
	if err != nil {
		in.problem(path, "%v", err)
		return
	}
	in.printf("  %s: %s\n", filepath.Base(path), strings.Join(entries, ", "))
}

func optional(v int64, ok bool) string {
	if !ok {
		return "(no file)"
	}
	return strconv.FormatInt(v, 10)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
