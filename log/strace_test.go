//go:build linux

package log

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
)

// These tests fail system calls of a whole process with strace's fault
// injection (strace -e inject), below Go and the vfs package: the kill
// test's appending child (runKillChild) runs under strace, which fails the
// when-th fdatasync or write of the first segment's log (strace counts
// per thread, and the Go runtime spreads the calls over a few). The child
// must stop with the error rather than go on acknowledging, and everything
// it acknowledged must be in the log when the parent reopens it.

// TestStraceFailedFdatasync fails one fdatasync of the active segment. The
// later ones succeed, as on Linux after a writeback error (fsyncgate): a
// log that went on would acknowledge appends whose earlier pages may be
// lost, and the child would run until the timeout.
func TestStraceFailedFdatasync(t *testing.T) {
	for _, when := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("when=%d", when), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "strace-0")
			run := straceChild(t, dir, fmt.Sprintf("fdatasync:error=EIO:when=%d", when), "log: failed", "input/output error")
			keys := checkKilledLog(t, dir, run.acked)
			// The failed append was written before its sync, so it is in
			// the page cache and the reopened log; nothing acknowledged
			// comes after it.
			first := len(keys)
			for _, key := range run.failed {
				if i := slices.Index(keys, key); i >= 0 {
					first = min(first, i)
				}
			}
			require.Less(t, first, len(keys), "the failed append was written")
			for off, key := range run.acked {
				require.Less(t, off, int64(first), "%q acknowledged at offset %d, after the append that failed at offset %d", key, off, first)
			}
		})
	}
}

// TestStraceFullDisk fails every write of the active segment's log from
// the when-th on with ENOSPC: the appends fail, none acknowledged is lost,
// and the failed ones left nothing behind.
func TestStraceFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "strace-0")
	run := straceChild(t, dir, "pwrite64:error=ENOSPC:when=20+", "no space left on device")
	keys := checkKilledLog(t, dir, run.acked)
	for _, key := range run.failed {
		require.NotContains(t, keys, key, "a failed write left its record")
	}
}

// straceChild runs the appending child on dir under strace, injecting
// inject into the system calls on the first segment's log, and waits for
// it to stop. The child must fail, report an error with each of want, and
// have acknowledged appends before the failure.
func straceChild(t *testing.T, dir, inject string, want ...string) killRun {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skipf("strace is not installed (.ci/run installs it): %v", err)
	}
	call, _, _ := strings.Cut(inject, ":")
	trace := filepath.Join(t.TempDir(), "strace.out")
	cmd := exec.Command(strace, "-f", "-qq", "-o", trace,
		"-P", segment.FileName(dir, 0, segment.LogSuffix), "-e", "trace="+call, "-e", "inject="+inject,
		os.Args[0])
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir, killGenEnv+"=0", killSeedEnv+"=1")
	// Its own process group, so that a timeout kills the traced child too:
	// a tracee whose strace is killed goes on running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		out, _ := os.ReadFile(trace)
		if !bytes.Contains(out, []byte("(INJECTED)")) {
			t.Fatalf("strace injected nothing in 20s (did the first segment roll first?); stderr:\n%s", stderr.Bytes())
		}
		t.Fatalf("the child was still appending 20s after strace injected %s; stderr:\n%s", inject, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if stdout.Len() == 0 && strings.Contains(stderr.String(), "ptrace") {
		t.Skipf("strace cannot trace here (ptrace refused): %s", strings.TrimSpace(stderr.String()))
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the child stopped with an error: wait: %v; stderr:\n%s", err, stderr.Bytes())
	require.Equal(t, 2, exit.ExitCode(), "stderr:\n%s", stderr.Bytes())
	for _, w := range want {
		require.Contains(t, stderr.String(), w)
	}
	run := parseKillRun(t, 0, lines)
	require.True(t, run.ready, "the failure came after Open")
	require.NotEmpty(t, run.acked, "appends were acknowledged before the failure")
	require.NotEmpty(t, run.failed, "the child reported the appends that failed")
	t.Logf("%s: %d records acknowledged, %d in failed appends; the child said: %s",
		inject, len(run.acked), len(run.failed), strings.TrimSpace(stderr.String()))
	return run
}
