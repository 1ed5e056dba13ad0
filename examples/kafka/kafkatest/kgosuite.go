package kafkatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// KgoSuite is the outcome of franz-go's own tests (package pkg/kgo of the
// franz-go module the calling module requires) run against a broker: the
// top-level tests by outcome, each list sorted, and the output of those
// that failed.
type KgoSuite struct {
	Passed, Failed, Skipped []string
	// FailedOutput is what each failed test printed.
	FailedOutput map[string]string
}

// String gives the counts and the names of the tests that did not pass.
func (s KgoSuite) String() string {
	return fmt.Sprintf("%d passed, %d failed %v, %d skipped %v", len(s.Passed), len(s.Failed), s.Failed, len(s.Skipped), s.Skipped)
}

// KgoSuiteOptions say which of franz-go's tests to run, and how.
type KgoSuiteOptions struct {
	// Seeds are the brokers' addresses (KGO_SEEDS).
	Seeds []string
	// Run is a go test -run pattern; empty runs them all.
	Run string
	// ReplicationFactor of the topics the tests create (KGO_TEST_RF);
	// default 1.
	ReplicationFactor int
	// Records each ETL test produces (KGO_TEST_RECORDS); default
	// franz-go's.
	Records int
	// Timeout of the whole run (go test -timeout); default 20 minutes.
	Timeout time.Duration
}

// RunKgoSuite runs franz-go's tests as its integration suite runs against
// any broker (KGO_SEEDS), from the module cache: the calling module must
// require github.com/twmb/franz-go, whose test dependencies go test then
// resolves. It fails t only if the tests could not be run; what they
// report is the result.
func RunKgoSuite(t testing.TB, opts KgoSuiteOptions) KgoSuite {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 20 * time.Minute
	}
	args := []string{"test", "-json", "-count=1", "-timeout", opts.Timeout.String()}
	if opts.Run != "" {
		args = append(args, "-run", opts.Run)
	}
	args = append(args, "github.com/twmb/franz-go/pkg/kgo")
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "KGO_SEEDS="+strings.Join(opts.Seeds, ","), "KGO_LOG_LEVEL=none")
	cmd.Env = append(cmd.Env, fmt.Sprintf("KGO_TEST_RF=%d", max(opts.ReplicationFactor, 1)))
	if opts.Records > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("KGO_TEST_RECORDS=%d", opts.Records))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	suite, perr := parseTestJSON(out)
	if perr != nil || len(suite.Passed)+len(suite.Failed)+len(suite.Skipped) == 0 {
		t.Fatalf("running franz-go's kgo tests: %v, %v: %s", err, perr, stderr.String())
	}
	return suite
}

// testEvent is a line of go test -json (cmd/test2json).
type testEvent struct {
	Action string
	Test   string
	Output string
}

// parseTestJSON reads go test -json output into a KgoSuite, top-level
// tests only.
func parseTestJSON(out []byte) (KgoSuite, error) {
	s := KgoSuite{FailedOutput: map[string]string{}}
	printed := map[string]*strings.Builder{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev testEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return s, fmt.Errorf("a line of go test -json: %w: %q", err, sc.Text())
		}
		name, _, sub := strings.Cut(ev.Test, "/")
		if ev.Test == "" {
			continue
		}
		switch {
		case ev.Action == "output":
			b := printed[name]
			if b == nil {
				b = &strings.Builder{}
				printed[name] = b
			}
			b.WriteString(ev.Output)
		case sub:
		case ev.Action == "pass":
			s.Passed = append(s.Passed, name)
		case ev.Action == "fail":
			s.Failed = append(s.Failed, name)
			if b := printed[name]; b != nil {
				s.FailedOutput[name] = b.String()
			}
		case ev.Action == "skip":
			s.Skipped = append(s.Skipped, name)
		}
	}
	slices.Sort(s.Passed)
	slices.Sort(s.Failed)
	slices.Sort(s.Skipped)
	return s, sc.Err()
}
