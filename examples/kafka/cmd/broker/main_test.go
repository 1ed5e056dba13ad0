package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerStartsAgainAfterKill: the broker, killed (SIGKILL) with
// -fsync never, starts again on its data directory and serves the topic it
// had, whose only replica may have lost what the page cache held: it
// leads it again (an unclean election of the only copy), takes produces,
// and serves what it kept.
func TestBrokerStartsAgainAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	bin := filepath.Join(t.TempDir(), "broker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-listen", addr, "-dir", dir, "-fsync", "never")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produce := func(values ...string) {
		c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("crashy"))
		require.NoError(t, err)
		defer c.Close()
		for _, v := range values {
			require.NoError(t, c.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr())
		}
	}

	cmd := start()
	produce("a", "b")
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	start()
	produce("c")

	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("crashy"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer c.Close()
	var got []string
	for !slices.Contains(got, "c") {
		fs := c.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %v", got)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Subset(t, []string{"a", "b", "c"}, got, "nothing but what was produced")
}
