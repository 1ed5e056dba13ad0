package main

import (
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strandlog/strand/examples/kafka/kafkatest"
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

// The command serves SASL_SSL with the users of its -users file: a SCRAM
// client of one of them is served, and the password is kept nowhere in
// the data directory.
func TestBrokerServesSASLSSLToItsUsers(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "broker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	certs := kafkatest.NewCerts(t)
	dir := t.TempDir()
	users := filepath.Join(t.TempDir(), "users.txt")
	require.NoError(t, os.WriteFile(users, []byte("# the broker's users\nalice:wonderland-42\n"), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "-dir", dir, "-listen", "", "-sasl-ssl-listen", addr, "-tls-cert", certs.ServerCertFile, "-tls-key", certs.ServerKeyFile, "-users", users)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := func(password string) *kgo.Client {
		c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(certs.Client(false)), kgo.AllowAutoTopicCreation(),
			kgo.SASL(scram.Auth{User: "alice", Pass: password}.AsSha256Mechanism()), kgo.DefaultProduceTopic("secured"))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	require.Eventually(t, func() bool { return client("wonderland-42").Ping(ctx) == nil }, 30*time.Second, 100*time.Millisecond)
	require.NoError(t, client("wonderland-42").ProduceSync(ctx, &kgo.Record{Value: []byte("hello")}).FirstErr())
	require.ErrorIs(t, client("guess").Ping(ctx), kerr.SaslAuthenticationFailed)

	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NotContains(t, string(data), "wonderland-42", path)
		return nil
	}))
}
