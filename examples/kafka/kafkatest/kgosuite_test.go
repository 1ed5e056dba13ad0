package kafkatest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTestJSONCountsTopLevelTests(t *testing.T) {
	out := []byte(`{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Test":"TestA"}
{"Action":"run","Test":"TestB"}
{"Action":"run","Test":"TestB/sub"}
{"Action":"output","Test":"TestB/sub","Output":"    b_test.go:9: broker said no\n"}
{"Action":"fail","Test":"TestB/sub"}
{"Action":"fail","Test":"TestB"}
{"Action":"skip","Test":"TestC"}
{"Action":"fail","Package":"github.com/twmb/franz-go/pkg/kgo"}
`)
	s, err := parseTestJSON(out)
	require.NoError(t, err)
	require.Equal(t, []string{"TestA"}, s.Passed)
	require.Equal(t, []string{"TestB"}, s.Failed)
	require.Equal(t, []string{"TestC"}, s.Skipped)
	require.Contains(t, s.FailedOutput["TestB"], "broker said no", "a subtest's output is its test's")
	require.Equal(t, "1 passed, 1 failed [TestB], 1 skipped [TestC]", s.String())

	_, err = parseTestJSON([]byte("not json\n"))
	require.Error(t, err)
}
