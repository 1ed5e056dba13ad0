package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
)

// kills sets how many times TestKillLoop kills the transformer. CI runs a
// few (-short); the long run is
//
//	go test -run TestKillLoop -args -kills=100
var kills = flag.Int("kills", 0, "how many times TestKillLoop kills the transformer (default 4 with -short, 50 without)")

// The child is this test binary run again with childDirEnv set.
const (
	childDirEnv     = "EXACTLYONCE_CHILD_DIR"
	childRecordsEnv = "EXACTLYONCE_CHILD_RECORDS"
	startedLine     = "transforming" // the child's stdout when it starts transforming
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		n, _ := strconv.Atoi(os.Getenv(childRecordsEnv))
		if err := run(dir, n, func() { fmt.Println(startedLine) }); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestKillLoop kills the transformer with SIGKILL at random moments, then
// lets a last run finish, and checks the output record by record, as a
// ReadCommitted consumer reads it: every input record transformed exactly
// once, in input order, and the committed position at the input's end.
func TestKillLoop(t *testing.T) {
	n, records := *kills, 3000
	if n == 0 {
		n = 50
		if testing.Short() {
			n, records = 4, 1000
		}
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childRecordsEnv+"="+strconv.Itoa(records))
		cmd.Stderr = os.Stderr
		return cmd
	}
	finished := 0
	for i := range n {
		cmd := child()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kills land while the child transforms: from when it says so,
		// within the time of a few dozen transactions.
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if strings.TrimSpace(line) != startedLine {
			t.Fatalf("run %d: the child said %q, then %v", i, line, <-done)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			finished++ // it finished before its kill
		case <-time.After(time.Duration(rng.IntN(200_000)) * time.Microsecond):
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			var exit *exec.ExitError
			if err := <-done; err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
		}
	}
	if err := child().Run(); err != nil {
		t.Fatalf("last run: %v", err)
	}
	t.Logf("%d kills (%d runs finished before theirs), %d records", n, finished, records)
	checkOutput(t, dir, records)
}

func checkOutput(t *testing.T, dir string, records int) {
	d, err := log.OpenDir(dir, log.DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.Partition(outputTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for r, err := range out.Records(0, log.ReadCommitted) {
		if err != nil {
			t.Fatal(err)
		}
		if w := transform(want, []byte(inputValue(want))); string(r.Value) != string(w) {
			t.Fatalf("output offset %d holds %q, want %q: a record lost or duplicated", r.Offset, r.Value, w)
		}
		want++
	}
	if want != int64(records) {
		t.Fatalf("the output has %d records, the input %d", want, records)
	}
	var written int
	for _, err := range out.Records(0, log.ReadUncommitted) {
		if err != nil {
			t.Fatal(err)
		}
		written++
	}
	t.Logf("the output log holds %d records, %d of them of aborted transactions", written, written-records)
	s, err := group.OpenService(d, group.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pos, err := committedPosition(s)
	if err != nil {
		t.Fatal(err)
	}
	if pos != int64(records) {
		t.Fatalf("committed position %d, want %d", pos, records)
	}
}
