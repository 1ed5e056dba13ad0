package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
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
		logs = filepath.Join(s.nodeDir(3), "log")
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

// produceAck produces v with acks=all to the partition's leader and
// returns its acknowledgement.
func produceAck(ctx context.Context, t *testing.T, cl *client, topic string, partition int32, v string) ack {
	t.Helper()
	res, err := cl.produceTo(ctx, topic, partition, "all", []byte(v))
	for errors.Is(err, replica.ErrUnknownTopicOrPartition) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond) // the metadata names the leader before it added its replica
		res, err = cl.produceTo(ctx, topic, partition, "all", []byte(v))
	}
	require.NoError(t, err)
	return ack{offset: res.BaseOffset, value: v}
}

// When every node is SIGKILLed and started again, every partition, the
// offsets topic's included, gets a leader again by itself, with unclean
// election disabled: the nodes' replicas acknowledged only what they had
// synced (FsyncAlways), so each registration claims its topics as synced
// and the controller keeps them in the ELR, where KIP-966 drops a broker
// that stopped uncleanly because Kafka acknowledges from the page cache.
// Before, no partition got a leader again (issue 21). Every acknowledged
// record is there.
func TestEveryNodeKilledComesBackWithoutUncleanElection(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic, partitions = "whole", 3
	createTopicT(t, cl, topicRequest{Topic: topic, Partitions: partitions, ReplicationFactor: 3})
	waitISR(t, s, cl, topic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acked := map[int32][]ack{}
	for p := range int32(partitions) {
		for i := range 20 {
			acked[p] = append(acked[p], produceAck(ctx, t, cl, topic, p, fmt.Sprintf("%d-%d", p, i)))
		}
	}
	// The coordinators' topics too: a replica the node had not created
	// yet when it died is claimed by nothing (the node cannot tell a
	// replica it never had from one a wiped disk lost).
	waitISR(t, s, cl, group.OffsetsTopic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)
	before, err := metadataFrom(s, cl)
	require.NoError(t, err)
	epochs := map[replica.NodeID]int64{}
	for _, b := range before.Brokers {
		epochs[b.ID] = b.Epoch
	}
	for _, id := range s.ids() {
		require.NoError(t, s.signal(id, syscall.SIGKILL))
	}
	killed := time.Now()
	for _, id := range s.ids() {
		require.NoError(t, s.startNode(id))
	}
	waitFor(t, 60*time.Second, "a leader for every partition of every topic", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		for _, b := range md.Brokers {
			if b.Epoch == epochs[b.ID] || b.Fenced {
				return false, fmt.Sprintf("node %d not registered and live again: %+v", b.ID, b)
			}
		}
		var leaderless []string
		for _, pv := range md.Partitions {
			if pv.Leader == replica.NoNode {
				leaderless = append(leaderless, fmt.Sprintf("%s-%d (ISR %v, ELR %v)", pv.Topic, pv.Partition, pv.ISR, pv.ELR))
			}
		}
		return len(md.Partitions) > partitions && len(leaderless) == 0, fmt.Sprintf("%d partitions, leaderless %v", len(md.Partitions), leaderless)
	})
	t.Logf("every partition led again %v after every node was killed", time.Since(killed).Round(time.Millisecond))
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	for _, b := range md.Brokers {
		require.False(t, b.Clean, "node %d registered unclean: a SIGKILL is no clean stop", b.ID)
	}
	// A leader knows its high watermark once its followers fetched in its
	// epoch; consumers read up to it.
	waitFor(t, 30*time.Second, "every leader's high watermark past what was acknowledged", func() (bool, string) {
		var st metadata
		if err := cl.getJSON(ctx, 1, "/status", &st); err != nil {
			return false, err.Error()
		}
		for p := range int32(partitions) {
			pv := st.partition(topic, p)
			i := slices.IndexFunc(pv.Logs, func(l replicaLog) bool { return l.Node == pv.Leader })
			if want := acked[p][len(acked[p])-1].offset + 1; i < 0 || pv.Logs[i].HighWatermark < want {
				return false, fmt.Sprintf("partition %d: %+v, want %d", p, pv, want)
			}
		}
		return true, ""
	})
	md, err = metadataFrom(s, cl)
	require.NoError(t, err)
	for p := range int32(partitions) {
		checkAcked(t, cl, md.partition(topic, p).Leader, topic, p, acked[p])
	}
}

// A follower whose sealed segment was damaged while it was down (a bit
// flipped in a batch's base offset, which Kafka's CRC-32C does not cover;
// or the segment cut short) finds the damage when it opens the partition,
// cuts its log before it, says so at ERROR, registers as after a crash so
// that it is out of the ISR and the ELR, fetches the rest from the leader
// and rejoins the ISR with the leader's log. Before, the flipped bit went
// unnoticed and the replica stayed in the ISR with a wrong offset, and a
// cut segment left it unopenable for good (issue 21).
func TestDamagedFollowerRefetchesFromItsLeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, file string)
	}{
		{"a bit flipped in a batch's base offset", func(t *testing.T, file string) {
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			pos := 0
			for range 3 { // the fourth batch
				pos += 12 + int(binary.BigEndian.Uint32(b[pos+8:]))
			}
			b[pos+4] ^= 0x10 // bit 28 of the base offset
			require.NoError(t, os.WriteFile(file, b, 0o644))
		}},
		{"the segment cut to half", func(t *testing.T, file string) {
			st, err := os.Stat(file)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(file, st.Size()/2))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cl := startCluster(t)
			const topic = "damaged"
			createTopicT(t, cl, topicRequest{Topic: topic, Assignment: [][]replica.NodeID{{1, 2, 3}},
				Configs: map[string]string{"segment.bytes": "4096"}})
			waitISR(t, s, cl, topic, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var acked []ack
			for i := range 300 {
				acked = append(acked, produceAck(ctx, t, cl, topic, 0, fmt.Sprintf("r%04d", i)))
			}
			waitISR(t, s, cl, topic, 3)
			require.NoError(t, s.signal(3, syscall.SIGTERM))
			waitFor(t, 20*time.Second, "node 3 stopped", func() (bool, string) { return !s.running(3), "" })
			segs, err := filepath.Glob(filepath.Join(s.nodeDir(3), "log", topic+"-0", "*.log"))
			require.NoError(t, err)
			slices.Sort(segs)
			require.Greater(t, len(segs), 2, "sealed segments to damage")
			tc.damage(t, segs[1])
			require.NoError(t, s.startNode(3))

			waitFor(t, 60*time.Second, "node 3 back in the ISR with the leader's log", func() (bool, string) {
				var st metadata
				if err := cl.getJSON(ctx, 1, "/status", &st); err != nil {
					return false, err.Error()
				}
				pv := st.partition(topic, 0)
				if pv == nil || !slices.Contains(pv.ISR, 3) || len(pv.Logs) != 3 {
					return false, fmt.Sprintf("%+v", pv)
				}
				for _, l := range pv.Logs {
					if l.LogEnd != pv.Logs[0].LogEnd {
						return false, fmt.Sprintf("%+v", pv.Logs)
					}
				}
				return true, ""
			})
			checkAcked(t, cl, 3, topic, 0, acked[:0]) // the repaired replica reads whole
			out, err := os.ReadFile(filepath.Join(s.dir, "node-3.out"))
			require.NoError(t, err)
			require.Contains(t, string(out), "level=ERROR", "the damage is logged at ERROR")
			require.Contains(t, string(out), "repaired replica rejoined the ISR")
			md, err := metadataFrom(s, cl)
			require.NoError(t, err)
			require.NotEqual(t, replica.NodeID(3), md.partition(topic, 0).Leader, "the damaged replica did not take the lead")
			checkAcked(t, cl, md.partition(topic, 0).Leader, topic, 0, acked)
		})
	}
}
