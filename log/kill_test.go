package log

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strandlog/strand/segment"
	"github.com/stretchr/testify/require"
)

// killCount sets how many children TestKillDuringAppends kills. Its short
// variant (12) runs in every `go test`; the long one is
//
//	go test ./log -run TestKillDuringAppends -args -strand.kills=200
var killCount = flag.Int("strand.kills", 0, "how many times TestKillDuringAppends kills its appending child (default 12)")

// The child is this test binary run again with these variables set:
// TestMain sees them and runs the appender instead of the tests.
const (
	killDirEnv  = "STRAND_KILL_CHILD" // the log's directory
	killGenEnv  = "STRAND_KILL_GEN"   // which child this is, stamped on its records
	killSeedEnv = "STRAND_KILL_SEED"  // the seed of its batch sizes
)

// killWriters appenders in the child go through group commit together.
const killWriters = 4

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockDirEnv); dir != "" {
		os.Exit(runLockChild(dir))
	}
	if dir := os.Getenv(killDirEnv); dir != "" {
		if err := runKillChild(dir, os.Getenv(killGenEnv), os.Getenv(killSeedEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "kill child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// killOptions make rolls and checkpoints frequent, so that kills land in
// them too.
func killOptions() Options {
	return Options{
		Fsync:              FsyncAlways(),
		SegmentBytes:       64 << 10,
		IndexIntervalBytes: 1024,
		MaxIndexBytes:      1024,
		CheckpointInterval: 5 * time.Millisecond,
	}
}

// killKey names a record by who appended it: child gen, writer w, the
// writer's seq-th record, i-th of the n in its batch.
func killKey(gen, w, seq, i, n int) string {
	return fmt.Sprintf("g%d w%d s%d %d/%d", gen, w, seq, i, n)
}

// parseKillKey is the inverse of killKey.
func parseKillKey(key string) (gen, w, seq, i, n int, err error) {
	f := strings.FieldsFunc(key, func(r rune) bool { return r == ' ' || r == '/' })
	if len(f) != 5 || f[0][0] != 'g' || f[1][0] != 'w' || f[2][0] != 's' {
		return 0, 0, 0, 0, 0, fmt.Errorf("malformed key %q", key)
	}
	var v [5]int
	for j, s := range []string{f[0][1:], f[1][1:], f[2][1:], f[3], f[4]} {
		if v[j], err = strconv.Atoi(s); err != nil {
			return 0, 0, 0, 0, 0, fmt.Errorf("malformed key %q: %w", key, err)
		}
	}
	return v[0], v[1], v[2], v[3], v[4], nil
}

// killValue is the value stored under key: 0 to 299 bytes that only that
// key produces, so that any record read back can be checked.
func killValue(key string) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	r := rand.New(rand.NewPCG(h.Sum64(), 0))
	v := make([]byte, r.IntN(300))
	for i := range v {
		v[i] = byte(r.Uint32())
	}
	return v
}

// runKillChild opens the log in dir, prints "ready <log end offset>", and
// appends from killWriters goroutines until it is killed, printing
// "ack <base offset> <writer> <seq> <records>" after each append returns.
// Each line is one write, so a kill never tears one. On SIGTERM it closes
// the log and prints "closed", so that the next child opens a cleanly shut
// down log (unless a SIGKILL lands in Close). A writer whose append fails
// prints "failed <writer> <seq> <records>" and stops; the child returns
// the errors once every writer has stopped, so that a log that goes on
// acknowledging after a failure keeps it running.
func runKillChild(dir, genStr, seedStr string) error {
	gen, err := strconv.Atoi(genStr)
	if err != nil {
		return fmt.Errorf("%s: %w", killGenEnv, err)
	}
	seed, err := strconv.ParseUint(seedStr, 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", killSeedEnv, err)
	}
	l, err := Open(dir, killOptions())
	if err != nil {
		return err
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM) // before "ready": the parent may send it then
	if _, err := fmt.Fprintf(os.Stdout, "ready %d\n", l.LogEndOffset()); err != nil {
		return err
	}
	errc := make(chan error, killWriters)
	for w := range killWriters {
		go func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for seq := 0; ; {
				n := 1 + r.IntN(4)
				recs := make([]segment.Record, n)
				for i := range recs {
					k := killKey(gen, w, seq+i, i, n)
					recs[i] = segment.Record{Key: []byte(k), Value: killValue(k)}
				}
				res, err := l.Append(recs)
				if err == nil && res.LastOffset != res.BaseOffset+int64(n-1) {
					err = fmt.Errorf("%d records appended at offsets %d to %d", n, res.BaseOffset, res.LastOffset)
				}
				if err == nil {
					_, err = fmt.Fprintf(os.Stdout, "ack %d %d %d %d\n", res.BaseOffset, w, seq, n)
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					_, perr := fmt.Fprintf(os.Stdout, "failed %d %d %d\n", w, seq, n)
					errc <- errors.Join(err, perr)
					return
				}
				seq += n
			}
		}()
	}
	var errs []error
	for len(errs) < killWriters {
		select {
		case err := <-errc:
			errs = append(errs, err)
		case <-term:
			if err := l.Close(); err != nil {
				return err
			}
			_, err := fmt.Fprintln(os.Stdout, "closed")
			return err
		}
	}
	return errors.Join(errs...)
}

// killRun is what the parent saw of one child.
type killRun struct {
	ready  bool  // the child finished opening the log
	closed bool  // the child closed the log before it was killed
	leo    int64 // the log end offset it opened at
	acked  map[int64]string
	failed []string // keys of the records of appends that failed
}

// TestKillDuringAppends deals SIGKILL at random moments to a real process
// appending with FsyncAlways from several goroutines, one child after the
// other on the same directory, so that kills land in appends, group
// commits, rolls, checkpoints, Open's recovery of the previous kill and,
// now and then, a clean Close. After each child it checks a copy of the
// log as the kill left it (checkKilledLog) and that the next child
// recovers the same log end offset.
func TestKillDuringAppends(t *testing.T) {
	kills := 12
	if *killCount > 0 {
		kills = *killCount
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d kills", seed, kills)
	rng := rand.New(rand.NewPCG(seed, 0))

	dir := filepath.Join(t.TempDir(), "kill-0")
	acked := make(map[int64]string) // every acknowledged record of every child
	var leo int64                   // the log end offset after the last kill
	startupLatency := 100 * time.Millisecond
	var beforeReady, closed, records int
	start := time.Now()
	for gen := range kills {
		run := killChild(t, dir, gen, rng, &startupLatency)
		if run.ready {
			require.Equal(t, leo, run.leo, "child %d recovered a different log end offset than the check before it", gen)
		} else {
			beforeReady++
		}
		if run.closed {
			closed++
		}
		require.Empty(t, run.failed, "child %d: appends failed", gen)
		for off, key := range run.acked {
			_, dup := acked[off]
			require.False(t, dup, "child %d: offset %d acknowledged twice", gen, off)
			acked[off] = key
		}
		leo = int64(len(checkKilledLog(t, dir, acked)))
		records += int(leo)
	}
	t.Logf("%d children (%d killed before they finished opening the log, %d closed it first) in %v: %d records acknowledged, log end offset %d, %d records checked",
		kills, beforeReady, closed, time.Since(start).Round(time.Millisecond), len(acked), leo, records)
}

// killChild starts a child appending to dir, kills it at a random moment
// and returns what it acknowledged. Most kills come after the child opened
// the log; one in four is timed from the start so that it may land in
// Open's recovery of the previous kill.
func killChild(t *testing.T, dir string, gen int, rng *rand.Rand, startupLatency *time.Duration) killRun {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		killDirEnv+"="+dir,
		killGenEnv+"="+strconv.Itoa(gen),
		killSeedEnv+"="+strconv.FormatUint(rng.Uint64(), 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, cmd.Start())

	ready := make(chan struct{})
	lines := make(chan []string, 1)
	go func() {
		var ls []string
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if len(ls) == 0 {
				close(ready)
			}
			ls = append(ls, s.Text())
		}
		if len(ls) == 0 {
			close(ready)
		}
		lines <- ls
	}()

	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.Int64N(int64(*startupLatency * 3 / 2))))
	} else {
		<-ready
		*startupLatency = time.Since(began)
		time.Sleep(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
	}
	select {
	case <-ready:
		if rng.IntN(6) == 0 {
			// A clean shutdown, or a kill in the middle of it.
			if err := cmd.Process.Signal(syscall.SIGTERM); err == nil {
				time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
			}
		}
	default: // SIGTERM would end a child that does not handle it yet
	}
	killErr := cmd.Process.Signal(syscall.SIGKILL)
	ls := <-lines
	waitErr := cmd.Wait()
	var exit *exec.ExitError
	killed := errors.As(waitErr, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	// An appender may print the ack of an append that returned just before
	// Close after "closed".
	if !killed && !(waitErr == nil && slices.Contains(ls, "closed")) {
		t.Fatalf("child %d was neither killed nor closed the log (signal: %v, wait: %v); stderr:\n%s", gen, killErr, waitErr, stderr.Bytes())
	}

	return parseKillRun(t, gen, ls)
}

// parseKillRun reads the lines a child printed.
func parseKillRun(t *testing.T, gen int, ls []string) killRun {
	t.Helper()
	run := killRun{acked: make(map[int64]string)}
	var err error
	for _, line := range ls {
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "closed":
			run.closed = true
		case len(f) == 2 && f[0] == "ready":
			run.ready = true
			run.leo, err = strconv.ParseInt(f[1], 10, 64)
		case len(f) == 5 && f[0] == "ack":
			var v [4]int64
			for j := range v {
				if v[j], err = strconv.ParseInt(f[j+1], 10, 64); err != nil {
					break
				}
			}
			base, w, seq, n := v[0], int(v[1]), int(v[2]), int(v[3])
			for i := range n {
				run.acked[base+int64(i)] = killKey(gen, w, seq+i, i, n)
			}
		case len(f) == 4 && f[0] == "failed":
			var v [3]int
			for j := range v {
				if v[j], err = strconv.Atoi(f[j+1]); err != nil {
					break
				}
			}
			w, seq, n := v[0], v[1], v[2]
			for i := range n {
				run.failed = append(run.failed, killKey(gen, w, seq+i, i, n))
			}
		default:
			err = errors.New("unexpected line")
		}
		require.NoError(t, err, "child %d: line %q", gen, line)
	}
	return run
}

// checkKilledLog opens a copy of the log in dir (the next child must find
// the files as the kill left them) and checks it: offsets contiguous from
// 0, every record's value the one its key makes, every batch whole, each
// writer's records in the order it appended them with none missing or
// repeated, and every acknowledged record present. It returns the keys of
// the records, by offset.
func checkKilledLog(t *testing.T, dir string, acked map[int64]string) []string {
	t.Helper()
	cp := dir + "-check"
	copyDir(t, dir, cp)
	defer os.RemoveAll(cp)
	l, err := Open(cp, killOptions())
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	require.Zero(t, l.LogStartOffset())
	leo := l.LogEndOffset()
	require.Equal(t, leo, l.HighWatermark())

	type writer struct{ gen, w int }
	type last struct {
		off       int64
		seq, i, n int
	}
	writers := make(map[writer]last)
	keys := make([]string, 0, leo)
	for r, err := range l.Records(0, ReadLogEnd) {
		require.NoError(t, err)
		off := int64(len(keys))
		if r.Offset != off {
			t.Fatalf("offset %d follows offset %d", r.Offset, off-1)
		}
		key := string(r.Key)
		if !bytes.Equal(r.Value, killValue(key)) {
			t.Fatalf("offset %d: the value of %q is not the one it was appended with", off, key)
		}
		gen, w, seq, i, n, err := parseKillKey(key)
		require.NoError(t, err, "offset %d", off)
		prev, seen := writers[writer{gen, w}]
		if !seen {
			prev = last{off: -1, seq: -1, i: 0, n: 1}
		}
		switch {
		case seq != prev.seq+1:
			t.Fatalf("offset %d: %q follows %d records of its writer", off, key, prev.seq+1)
		case i > 0 && prev != (last{off: off - 1, seq: seq - 1, i: i - 1, n: n}):
			t.Fatalf("offset %d: %q is not next in its batch, its writer's previous record is %+v", off, key, prev)
		case i == 0 && prev.i != prev.n-1:
			t.Fatalf("offset %d: %q starts a batch before its writer's previous one (%+v) ended", off, key, prev)
		}
		writers[writer{gen, w}] = last{off: off, seq: seq, i: i, n: n}
		keys = append(keys, key)
	}
	require.EqualValues(t, leo, len(keys), "records end before the log end offset")
	for wr, last := range writers {
		require.Equal(t, last.n-1, last.i, "child %d writer %d: batch at offset %d is cut short", wr.gen, wr.w, last.off)
	}
	for off, key := range acked {
		if off >= leo || keys[off] != key {
			t.Fatalf("acknowledged record %q at offset %d lost (log end offset %d)", key, off, leo)
		}
	}
	return keys
}

// copyDir copies the regular files of src into a new directory dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	entries, err := os.ReadDir(src)
	if errors.Is(err, os.ErrNotExist) {
		return // killed before it made the directory
	}
	require.NoError(t, err)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		out, err := os.Create(filepath.Join(dst, e.Name()))
		require.NoError(t, err)
		_, err = io.Copy(out, in)
		require.NoError(t, errors.Join(err, in.Close(), out.Close()))
	}
}
