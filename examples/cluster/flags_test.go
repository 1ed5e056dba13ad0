// The tests use cluster_test.go's helpers: Unix only.

//go:build unix

package main

import (
	"flag"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// -log-level sets the least level a node logs, and up passes it on.
func TestLogLevelFlag(t *testing.T) {
	var nf nodeFlags
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	nf.register(fs)
	require.Equal(t, slog.LevelInfo, nf.logLevel, "the default")
	require.NoError(t, fs.Parse([]string{"-log-level", "WARN"}))
	require.Equal(t, slog.LevelWarn, nf.logLevel)
	var again nodeFlags
	fs = flag.NewFlagSet("node", flag.ContinueOnError)
	again.register(fs)
	require.NoError(t, fs.Parse(nf.args()))
	require.Equal(t, nf, again, "up passes every flag on")
}
