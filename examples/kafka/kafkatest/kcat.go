// Package kafkatest holds what tests of Kafka clients against Strand share
// across example modules.
package kafkatest

import (
	"os"
	"os/exec"
	"testing"
)

// KcatPath finds kcat (librdkafka's command-line client, Debian package
// kcat), or skips t, saying that what was NOT tested, if it is missing.
// .ci/run installs kcat and sets STRAND_REQUIRE_KCAT, so that in CI a
// missing kcat fails t instead of skipping it.
func KcatPath(t testing.TB, what string) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("STRAND_REQUIRE_KCAT") != "" {
			t.Fatalf("kcat is required (STRAND_REQUIRE_KCAT is set) but not found: %v", err)
		}
		t.Skipf("SKIPPING: kcat is not installed (apt-get install -y kcat); %s was NOT tested", what)
	}
	return path
}
