package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	strandlog "github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// start is the first record's timestamp; records are 1 ms apart.
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// buildDir appends batchesPerEpoch batches of 4 records in each of leader
// epochs 0, 2 and 3, which so start at offsets 0, 80 and 160.
const batchesPerEpoch = 20

// testLog describes the partition buildDir writes.
type testLog struct {
	data, part string // data directory and partition directory
	records    int    // offsets 0 to records-1
}

// buildDir writes a partition orders-0 under a data directory with the log
// package: small segments with several index entries each, records with
// keys, headers and a tombstone, three leader epochs, and a second session
// that compresses with lz4. Both sessions close cleanly.
func buildDir(t *testing.T) testLog {
	t.Helper()
	data := t.TempDir()
	tl := testLog{data: data, part: filepath.Join(data, "orders-0")}
	session := func(codec segment.Codec, epochs ...int32) {
		l, err := strandlog.Open(tl.part, strandlog.Options{
			SegmentBytes:       4096,
			IndexIntervalBytes: 256,
			Compression:        codec,
			Fsync:              strandlog.FsyncNever(),
			Now:                func() time.Time { return start },
		})
		require.NoError(t, err)
		for _, epoch := range epochs {
			require.NoError(t, l.SetLeaderEpoch(epoch))
			for range batchesPerEpoch {
				recs := make([]segment.Record, 4)
				for i := range recs {
					o := tl.records + i
					recs[i] = segment.Record{
						Timestamp: start.UnixMilli() + int64(o),
						Key:       fmt.Appendf(nil, "user-%d", o%7),
						Value:     fmt.Appendf(nil, `{"order":%d,"note":"%s"}`, o, strings.Repeat("x", o%40)),
						Headers:   []segment.Header{{Key: "trace", Value: fmt.Appendf(nil, "t%d", o)}},
					}
				}
				recs[3].Value = nil // a tombstone
				_, err := l.Append(recs)
				require.NoError(t, err)
				tl.records += len(recs)
			}
		}
		require.NoError(t, l.Close())
	}
	session(segment.CodecNone, 0, 2)
	session(segment.CodecLZ4, 3)
	return tl
}

// segments returns the paths of the partition's files with suffix.
func (tl testLog) segments(t *testing.T, suffix string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(tl.part, "*"+suffix))
	require.NoError(t, err)
	return names
}

// batchPositions returns the start of every batch of a .log file, parsed
// with the segment package.
func batchPositions(t *testing.T, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var pos []int64
	for at := int64(0); len(data) > 0; {
		b, rest, err := segment.ParseBatch(data)
		require.NoError(t, err)
		pos = append(pos, at)
		at += int64(len(b))
		data = rest
	}
	return pos
}

// inspect runs the command and returns its exit status and output.
func inspect(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCleanDirListsEverySegmentAndExitsZero(t *testing.T) {
	tl := buildDir(t)
	logs := tl.segments(t, segment.LogSuffix)
	require.Greater(t, len(logs), 3, "the test needs several segments")

	code, out, errOut := inspect(tl.data)
	require.Equal(t, exitClean, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Empty(t, errOut)
	require.Contains(t, out, "partition orders-0")
	for _, name := range logs {
		require.Contains(t, out, "segment "+name+":")
	}
	require.Contains(t, out, fmt.Sprintf("log end offset %d\n", tl.records))
	require.Contains(t, out, fmt.Sprintf("recovery point %d, high watermark %d, clean shutdown yes", tl.records, tl.records))
	require.Contains(t, out, "leader epochs (epoch@start offset): 0@0 2@80 3@160")
	require.Contains(t, out, "no problems found")

	// Every record is counted once across the segment summaries.
	total := 0
	for _, m := range regexp.MustCompile(`(\d+) batches, (\d+) records`).FindAllStringSubmatch(out, -1) {
		var n int
		fmt.Sscan(m[2], &n)
		total += n
	}
	require.Equal(t, tl.records, total)
}

func TestRecordsPrintsEveryOffsetOnce(t *testing.T) {
	tl := buildDir(t)
	code, out, errOut := inspect("-records", tl.part)
	require.Equal(t, exitClean, code, errOut)
	for o := range tl.records {
		require.Equal(t, 1, strings.Count(out, fmt.Sprintf("| offset: %d timestamp: %d ", o, start.UnixMilli()+int64(o))),
			"offset %d", o)
	}
	require.Contains(t, out, `headers: ["trace"="t5"] key: "user-5" value: "{\"order\":5,\"note\":\"xxxxx\"}"`)
	require.Contains(t, out, `valueSize: -1 headers: ["trace"="t3"] key: "user-3" value: null`)
	require.Regexp(t, `count: 4 .* codec: lz4 .* partitionLeaderEpoch: 3 `, out)
	require.Regexp(t, `count: 4 .* codec: none .* partitionLeaderEpoch: 2 `, out)

	_, out, _ = inspect("-records", "-max-bytes", "4", tl.segments(t, segment.LogSuffix)[0])
	require.Contains(t, out, `headers: ["trace"="t5"] key: "user"... value: "{\"or"...`)
}

func TestBatchesOfOneSegmentFile(t *testing.T) {
	tl := buildDir(t)
	file := tl.segments(t, segment.LogSuffix)[1]
	positions := batchPositions(t, file)

	code, out, errOut := inspect("-batches", file)
	require.Equal(t, exitClean, code, errOut)
	require.Equal(t, len(positions), strings.Count(out, "baseOffset: "))
	for _, pos := range positions {
		require.Contains(t, out, fmt.Sprintf(" position: %d size: ", pos))
	}
	require.Contains(t, out, "valid: true")
	require.NotContains(t, out, "| offset:")
}

func TestIndexFileArgumentPrintsItsEntries(t *testing.T) {
	tl := buildDir(t)
	idx := tl.segments(t, segment.IndexSuffix)[0]
	code, out, errOut := inspect(idx)
	require.Equal(t, exitClean, code, errOut)
	raw, err := os.ReadFile(idx)
	require.NoError(t, err)
	require.NotEmpty(t, raw)
	require.Equal(t, len(raw)/8, strings.Count(out, "      offset: "))
	rel, pos := binary.BigEndian.Uint32(raw), binary.BigEndian.Uint32(raw[4:])
	require.Contains(t, out, fmt.Sprintf("offset: %d position: %d\n", rel, pos))
}

// corruption damages a file of a freshly built partition and returns the
// text stderr must hold: file names and positions.
type corruption struct {
	name   string
	damage func(t *testing.T, tl testLog) (want []string)
}

var corruptions = []corruption{
	{"flipped byte in a batch", func(t *testing.T, tl testLog) []string {
		file := tl.segments(t, segment.LogSuffix)[1]
		pos := batchPositions(t, file)[2]
		flipByte(t, file, pos+segment.HeaderSize+3)
		return []string{fmt.Sprintf("%s: position %d: ", file, pos), "crc mismatch"}
	}},
	{"file cut inside a batch", func(t *testing.T, tl testLog) []string {
		file := tl.segments(t, segment.LogSuffix)[2]
		positions := batchPositions(t, file)
		pos := positions[len(positions)-1]
		require.NoError(t, os.Truncate(file, pos+30))
		return []string{fmt.Sprintf("%s: position %d: ", file, pos), "short batch"}
	}},
	{"last segment cut at a batch boundary", func(t *testing.T, tl testLog) []string {
		logs := tl.segments(t, segment.LogSuffix)
		file := logs[len(logs)-1]
		positions := batchPositions(t, file)
		require.NoError(t, os.Truncate(file, positions[len(positions)-1]))
		return []string{tl.part + ": recovery-point-offset-checkpoint is", "past the log end offset"}
	}},
	{"base offset rewritten backwards", func(t *testing.T, tl testLog) []string {
		file := tl.segments(t, segment.LogSuffix)[1]
		pos := batchPositions(t, file)[1]
		f, err := os.OpenFile(file, os.O_RDWR, 0)
		require.NoError(t, err)
		defer f.Close()
		var b [8]byte
		_, err = f.ReadAt(b[:], pos)
		require.NoError(t, err)
		binary.BigEndian.PutUint64(b[:], binary.BigEndian.Uint64(b[:])-4) // outside the CRC
		_, err = f.WriteAt(b[:], pos)
		require.NoError(t, err)
		return []string{fmt.Sprintf("%s: position %d: base offset", file, pos), "does not follow offset"}
	}},
	{"index entry pointing inside a batch", func(t *testing.T, tl testLog) []string {
		file := tl.segments(t, segment.IndexSuffix)[1]
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(raw), 16, "the test needs two index entries")
		pos := binary.BigEndian.Uint32(raw[12:])
		binary.BigEndian.PutUint32(raw[12:], pos+1)
		require.NoError(t, os.WriteFile(file, raw, 0o644))
		return []string{file + ": entry 1 (byte 8)", fmt.Sprintf("at position %d: no batch starts there", pos+1)}
	}},
	{"time index entry with a wrong timestamp", func(t *testing.T, tl testLog) []string {
		file := tl.segments(t, segment.TimeIndexSuffix)[1]
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		ts := binary.BigEndian.Uint64(raw)
		binary.BigEndian.PutUint64(raw, ts-1)
		require.NoError(t, os.WriteFile(file, raw, 0o644))
		return []string{file + ": entry 0 (byte 0): timestamp " + fmt.Sprint(ts-1), fmt.Sprintf("has max timestamp %d", ts)}
	}},
	{"index entries out of order", func(t *testing.T, tl testLog) []string {
		file := tl.segments(t, segment.IndexSuffix)[0]
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		copy(raw[8:16], raw[0:8])
		require.NoError(t, os.WriteFile(file, raw, 0o644))
		return []string{file + ": entry 1 (byte 8): offset", "is not above offset"}
	}},
	{"leader epoch checkpoint disagreeing with the batches", func(t *testing.T, tl testLog) []string {
		file := filepath.Join(tl.part, "leader-epoch-checkpoint")
		require.NoError(t, os.WriteFile(file, []byte("0\n3\n0 0\n2 84\n3 160\n"), 0o644))
		return []string{"batch at base offset 80 has leader epoch 2, but leader-epoch-checkpoint gives that offset to epoch 0"}
	}},
}

// removeSegment removes the files of the segment whose .log is file.
func removeSegment(t *testing.T, file string) {
	t.Helper()
	stem := strings.TrimSuffix(file, segment.LogSuffix)
	for _, suffix := range []string{segment.LogSuffix, segment.IndexSuffix, segment.TimeIndexSuffix} {
		require.NoError(t, os.Remove(stem+suffix))
	}
}

// baseOf is the base offset in a segment file's name.
func baseOf(t *testing.T, file string) int64 {
	t.Helper()
	base, ok := segmentBase(filepath.Base(file), segment.LogSuffix)
	require.True(t, ok, file)
	return base
}

// Damage that log.Open refuses (issue 8 item 12): segments missing, junk
// in a segment's name, a FIFO in a segment's place.
var missing = []corruption{
	{"sealed segment deleted", func(t *testing.T, tl testLog) []string {
		logs := tl.segments(t, segment.LogSuffix)
		removeSegment(t, logs[2])
		return []string{fmt.Sprintf("%s: offsets %d to %d are missing", logs[3], baseOf(t, logs[2]), baseOf(t, logs[3])-1)}
	}},
	{"first segment deleted", func(t *testing.T, tl testLog) []string {
		logs := tl.segments(t, segment.LogSuffix)
		removeSegment(t, logs[0])
		return []string{fmt.Sprintf("%s: the log start offset 0 is below the first segment: offsets 0 to %d are missing", logs[1], baseOf(t, logs[1])-1)}
	}},
	{"junk segment with the largest base offset", func(t *testing.T, tl testLog) []string {
		file := filepath.Join(tl.part, "09223372036854775807.log")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		return []string{file + ": base offset 9223372036854775807 leaves no room", file + ": offsets"}
	}},
	{"FIFO in place of a segment", func(t *testing.T, tl testLog) []string {
		logs := tl.segments(t, segment.LogSuffix)
		removeSegment(t, logs[1])
		require.NoError(t, syscall.Mkfifo(logs[1], 0o644))
		return []string{logs[1] + ": not a regular file"}
	}},
}

// TestMissingSegmentsAreProblems: each damage makes log.Open fail, so the
// inspector must not say "no problems found".
func TestMissingSegmentsAreProblems(t *testing.T) {
	for _, c := range missing {
		t.Run(c.name, func(t *testing.T) {
			tl := buildDir(t)
			want := c.damage(t, tl)
			done := make(chan struct{})
			var code int
			var out, errOut string
			go func() {
				defer close(done)
				code, out, errOut = inspect(tl.data)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("inspect blocked")
			}
			require.Equal(t, exitCorrupt, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, w := range want {
				require.Contains(t, errOut, w)
			}
			_, err := strandlog.Open(tl.part, strandlog.Options{})
			require.ErrorIs(t, err, strandlog.ErrCorrupt, "log.Open agrees")
		})
	}
}

// TestAFollowersRecordedGapIsNoProblem: a gap the log made and recorded is
// not a missing segment.
func TestAFollowersRecordedGapIsNoProblem(t *testing.T) {
	part := filepath.Join(t.TempDir(), "f-0")
	l, err := strandlog.Open(part, strandlog.Options{SegmentBytes: 4096, Fsync: strandlog.FsyncNever()})
	require.NoError(t, err)
	for _, base := range []int64{1000, 1001, 1002, 1003, 5000, 5001} {
		b, err := segment.AppendBatch(nil, []segment.Record{{Value: bytes.Repeat([]byte("v"), 1500), Timestamp: 1}},
			segment.BuildOptions{BaseOffset: base})
		require.NoError(t, err)
		_, err = l.AppendReplicated(b)
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	code, out, errOut := inspect(part)
	require.Equal(t, exitClean, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.NotContains(t, out, "other files")
}

func TestCorruptionExitsNonZeroNamingFileAndPosition(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			tl := buildDir(t)
			want := c.damage(t, tl)
			code, out, errOut := inspect(tl.data)
			require.Equal(t, exitCorrupt, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			t.Logf("stderr:\n%s", errOut)
			for _, w := range want {
				require.Contains(t, errOut, w)
			}
			require.Contains(t, errOut, "problem(s) found")
		})
	}
}

// A torn write past the recovery point after an unclean shutdown is what
// opening the log repairs: the inspector notes it and exits 0, and
// log.Open indeed truncates it and opens.
func TestTornWriteAfterUncleanShutdownIsANote(t *testing.T) {
	tl := buildDir(t)
	logs := tl.segments(t, segment.LogSuffix)
	last := logs[len(logs)-1]
	positions := batchPositions(t, last)
	cut := positions[len(positions)-1] + 30
	require.NoError(t, os.Truncate(last, cut))
	require.NoError(t, os.Remove(filepath.Join(tl.part, ".clean-shutdown")))
	base := strings.TrimSuffix(filepath.Base(last), segment.LogSuffix)
	require.NoError(t, os.WriteFile(filepath.Join(tl.part, "recovery-point-offset-checkpoint"),
		[]byte("0\n1\n"+strings.TrimLeft(base, "0")+"\n"), 0o644))

	code, out, errOut := inspect(tl.part)
	require.Equal(t, exitClean, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, fmt.Sprintf("note: %s: position %d: ", last, positions[len(positions)-1]))
	require.Contains(t, out, "a torn write, which opening the log truncates here")

	l, err := strandlog.Open(tl.part, strandlog.Options{SegmentBytes: 4096, IndexIntervalBytes: 256})
	require.NoError(t, err)
	require.Less(t, l.LogEndOffset(), int64(tl.records))
	require.NoError(t, l.Close())
	code, _, errOut = inspect(tl.part)
	require.Equal(t, exitClean, code, errOut)
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notSegment := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notSegment, []byte("hi"), 0o644))
	for _, args := range [][]string{
		{},
		{"-no-such-flag", dir},
		{filepath.Join(dir, "missing")},
		{notSegment},
		{dir}, // empty: neither a data directory nor a partition
	} {
		code, _, errOut := inspect(args...)
		require.Equal(t, exitUsage, code, "args %q", args)
		require.NotEmpty(t, errOut)
	}
}

func flipByte(t *testing.T, file string, at int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], at)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b[:], at)
	require.NoError(t, err)
}
