package kafkatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The flags of every test that judges a broker by franz-go's suite
// (CheckKgoSuite).
var (
	kgoSuite   = flag.Bool("kgo-suite", false, "CheckKgoSuite: run all of franz-go's kgo tests, with -kgo-records records each, instead of the short set")
	kgoRun     = flag.String("kgo-run", "", "CheckKgoSuite: run the tests of franz-go's suite this -run pattern names instead of the short set")
	kgoRecords = flag.Int("kgo-records", 20000, "CheckKgoSuite with -kgo-suite: KGO_TEST_RECORDS")
)

// kgoMayNotRun are the tests of franz-go's suite that skip against a
// broker without share groups and OAUTHBEARER, which other issues bring,
// and kgoSCRAMTests those that skip without KgoSuiteOptions.SCRAMSeeds.
var (
	kgoMayNotRun  = []string{"TestShareGroup", "TestShareGroupETL", "TestShareGroupAckOnClose", "TestShareGroupOffsetsAdmin", "TestConsumeRegexShareSkipsInternal", "TestOAuthAuth"}
	kgoSCRAMTests = []string{"TestSCRAMAuth", "TestSCRAMAuthBadCredentials"}
)

// CheckKgoSuite judges the brokers opts.Seeds names by franz-go's own
// tests, as its suite judges Kafka: every test passes, and only those of
// features Strand lacks skip. It runs opts.Run (the short set a caller
// gives CI) with opts.Records, unless -kgo-run names other tests or
// -kgo-suite asks for all of them with -kgo-records each.
func CheckKgoSuite(t *testing.T, opts KgoSuiteOptions) {
	t.Helper()
	if testing.Short() && *kgoSuite {
		t.Fatal("-kgo-suite runs the whole suite, which -short does not")
	}
	if *kgoRun != "" {
		opts.Run = *kgoRun
	}
	if *kgoSuite {
		opts.Run, opts.Records, opts.Timeout = *kgoRun, *kgoRecords, 60*time.Minute
	}
	start := time.Now()
	suite := RunKgoSuite(t, opts)
	t.Logf("franz-go's kgo tests (%q, %d records, RF %d, SCRAM %v, TLS %v) in %v: %v", opts.Run, opts.Records, max(opts.ReplicationFactor, 1),
		len(opts.SCRAMSeeds) > 0, opts.TLSCAFile != "", time.Since(start).Round(time.Second), suite)
	for _, name := range suite.Failed {
		t.Errorf("%s failed:\n%s", name, suite.FailedOutput[name])
	}
	mayNotRun := kgoMayNotRun
	if len(opts.SCRAMSeeds) == 0 {
		mayNotRun = append(slices.Clone(mayNotRun), kgoSCRAMTests...)
	}
	for _, name := range suite.Skipped {
		require.Contains(t, mayNotRun, name, "a test that skipped")
	}
	require.NotEmpty(t, suite.Passed)
}

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
	// Skip is a go test -skip pattern of tests not to run.
	Skip string
	// ReplicationFactor of the topics the tests create (KGO_TEST_RF);
	// default 1.
	ReplicationFactor int
	// Records each ETL test produces (KGO_TEST_RECORDS); default
	// franz-go's.
	Records int
	// Timeout of the whole run (go test -timeout); default 20 minutes.
	Timeout time.Duration
	// SCRAMSeeds are the addresses of a SASL listener of the brokers
	// (KGO_TEST_SCRAM_SEEDS), where SCRAMUser ("user:password",
	// KGO_TEST_SCRAM) authenticates with SCRAM-SHA-256.
	SCRAMSeeds []string
	SCRAMUser  string
	// TLSCAFile, if set, is the PEM file of the authority that signed
	// the Seeds' TLS certificates: every connection is TLS
	// (KGO_TEST_TLS).
	TLSCAFile string
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
	if opts.Skip != "" {
		args = append(args, "-skip", opts.Skip)
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
	if len(opts.SCRAMSeeds) > 0 {
		cmd.Env = append(cmd.Env, "KGO_TEST_SCRAM_SEEDS="+strings.Join(opts.SCRAMSeeds, ","), "KGO_TEST_SCRAM="+opts.SCRAMUser)
	}
	if opts.TLSCAFile != "" {
		cmd.Env = append(cmd.Env, "KGO_TEST_TLS=ca:"+opts.TLSCAFile)
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
