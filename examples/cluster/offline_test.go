package main

import (
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

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// mountTmpfs mounts a tmpfs of size bytes at dir, or skips t where the
// process may not mount (not root, or no mount namespace of its own).
func mountTmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("a full disk needs a small tmpfs, and mount failed: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return name
		}
	}
}

// A leader whose data directory fills up gives up its partitions: the
// node reports the failed replica offline (KIP-858's offline log
// directories), the controller elects another leader and takes it out of
// the ISR, produces go on there; once space is freed the node recreates
// the replica from its log and it rejoins the ISR. Every acknowledged
// record is there at its offset. Before, the full node kept the lead with
// ISR [3 2 1] and answered KAFKA_STORAGE_ERROR for minutes (issue 21).
func TestFullDiskMovesTheLeadAndTheReplicaRecovers(t *testing.T) {
	var logs string
	s, cl := startCluster(t, func(s *supervisor) {
		logs = filepath.Join(s.nodeDir(3), logDir)
		mountTmpfs(t, logs, 8<<20)
	})
	const topic = "full"
	createTopicT(t, cl, topicRequest{Topic: topic, Assignment: [][]replica.NodeID{{3, 1, 2}}})
	waitISR(t, s, cl, topic, 3)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	require.Equal(t, replica.NodeID(3), md.partition(topic, 0).Leader)
	p := startProducer(s, cl, topic, 0)
	defer p.halt()
	_, ok := p.firstAckAfter(time.Now(), 10*time.Second)
	require.True(t, ok, "producing to node 3")

	filler := fill(t, logs)
	full := time.Now()
	var moved time.Time
	waitFor(t, 30*time.Second, "the lead off the full node and the ISR without it", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		pv := md.partition(topic, 0)
		moved = time.Now()
		return pv.Leader != 3 && pv.Leader != replica.NoNode && !slices.Contains(pv.ISR, 3), fmt.Sprintf("%+v", pv)
	})
	at, ok := p.firstAckAfter(moved, 30*time.Second)
	require.True(t, ok, "produces go on at the new leader")
	t.Logf("disk full: the lead moved after %v; first acknowledgement after that %v later", moved.Sub(full).Round(time.Millisecond), at.Sub(moved).Round(time.Millisecond))
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	i := slices.IndexFunc(md.Brokers, func(b brokerView) bool { return b.ID == 3 })
	require.GreaterOrEqual(t, i, 0)

	require.NoError(t, os.Remove(filler))
	freed := time.Now()
	waitFor(t, 60*time.Second, "node 3 back in the ISR", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		pv := md.partition(topic, 0)
		return slices.Contains(pv.ISR, 3), fmt.Sprintf("%+v", pv)
	})
	t.Logf("space freed: node 3 rejoined the ISR after %v", time.Since(freed).Round(time.Millisecond))
	p.halt()
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	acked := p.snapshot()
	read := checkAcked(t, cl, md.partition(topic, 0).Leader, topic, 0, acked)
	t.Logf("%d acknowledged records all there (%d in the log)", len(acked), read)

	out, err := os.ReadFile(filepath.Join(s.dir, "node-3.out"))
	require.NoError(t, err)
	require.Contains(t, string(out), "level=ERROR msg=\"replica offline", "the failure is logged at ERROR")
	require.Contains(t, string(out), "offline replica recovered")
}

func TestOfflineReplicasRoundTripTheirQuery(t *testing.T) {
	tps := []controller.TopicPartition{{Topic: "a.b-c_d", Partition: 0}, {Topic: "x", Partition: 12}}
	got, err := parseTPs(formatTPs(tps))
	require.NoError(t, err)
	require.Equal(t, tps, got)
	got, err = parseTPs("")
	require.NoError(t, err)
	require.Empty(t, got)
	for _, bad := range []string{"x", "x:", ":1", "x:-1", "x:1,", "x:y"} {
		_, err := parseTPs(bad)
		require.True(t, errors.Is(err, replica.ErrInvalidRequest), "%q: %v", bad, err)
		require.True(t, strings.Contains(err.Error(), "topic:partition"), "%q: %v", bad, err)
	}
}
