//go:build unix

package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/replica"
)

var groupKills = flag.Int("group-kills", 0, "TestKafkaGroupCommitsSurviveCoordinatorKill: how many group coordinators to stop, every third with SIGTERM, the others with SIGKILL (default 2 with -short, else 4)")

// waitGroupCoordinator waits until a live node leads the group's partition
// of the offsets topic and returns it.
func waitGroupCoordinator(t *testing.T, s *supervisor, cl *client, groupID string) replica.NodeID {
	t.Helper()
	var leader replica.NodeID
	waitFor(t, 30*time.Second, fmt.Sprintf("a leader of group %s's offsets partition", groupID), func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		p := md.partition(group.OffsetsTopic, group.PartitionFor(groupID, offsetsPartitions))
		if p == nil {
			return false, "no offsets partition yet"
		}
		leader = p.Leader
		return leader != replica.NoNode && s.running(leader), fmt.Sprintf("%+v", p)
	})
	return leader
}

// A consumer group is coordinated by the leader of its partition of the
// replicated __consumer_offsets (three replicas, MinInsyncReplicas 2), as
// in Kafka, so commits outlive their coordinator: a franz-go member
// consumes and commits batch after batch (each commit retried until it is
// acknowledged, as its records are not consumed further before), the
// coordinator's process is SIGKILLed meanwhile, the member goes on
// committing through the partition's next leader, which loaded the
// group from its replica, and once it leaves, the committed offsets are
// each at least the last one acknowledged, and a new member of the group
// resumes exactly at them.
func TestKafkaGroupCommitsSurviveCoordinatorKill(t *testing.T) {
	kills := *groupKills
	if kills == 0 {
		kills = 4
		if testing.Short() {
			kills = 2
		}
	}
	s, cl := startKafkaCluster(t)
	const topic, groupID = "orders", "billing"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, topic, 3, 3)
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, group.OffsetsTopic, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Small batches and small fetches, so that the member consumes every
	// partition a little at a time.
	prod := newKgo(t, s, kgo.ProducerBatchMaxBytes(1<<10))
	produce := func(from, n int) {
		var batch []*kgo.Record
		for i := from; i < from+n; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%97), Value: fmt.Appendf(nil, "v%d", i)})
		}
		require.NoError(t, prod.ProduceSync(ctx, batch...).FirstErr())
	}
	const records = 10000
	produce(0, records)

	member := newKgo(t, s, kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxPartitionBytes(2<<10), kgo.SessionTimeout(10*time.Second))
	var mu sync.Mutex
	acked := map[int32]int64{}    // the last acknowledged commit of each partition
	consumed := map[int32]int64{} // the offset after the last record consumed
	commits := 0
	var failures []error
	// commitNext polls a few records and commits them, again and again
	// until the commit is acknowledged.
	commitNext := func() {
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		recs := member.PollRecords(pollCtx, 20).Records()
		cancel()
		mu.Lock()
		for _, r := range recs {
			consumed[r.Partition] = max(consumed[r.Partition], r.Offset+1)
		}
		mu.Unlock()
		for len(recs) > 0 && ctx.Err() == nil {
			err := member.CommitRecords(ctx, recs...)
			mu.Lock()
			if err == nil {
				commits++
				for _, r := range recs {
					acked[r.Partition] = max(acked[r.Partition], r.Offset+1)
				}
			} else {
				failures = append(failures, err)
			}
			mu.Unlock()
			if err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var gate sync.Mutex // held by the member for each poll and its commit
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			gate.Lock()
			commitNext()
			gate.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	commitsSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		return commits
	}
	waitCommits := func(n int, what string) {
		waitFor(t, 60*time.Second, what, func() (bool, string) {
			c := commitsSoFar()
			return c >= n, fmt.Sprintf("%d commits acknowledged", c)
		})
	}
	// committed returns the group's committed offsets from whichever node
	// coordinates it now (franz-go finds it).
	committed := func() map[int32]int64 {
		var out map[int32]int64
		waitFor(t, 30*time.Second, "OffsetFetch from the group's coordinator", func() (bool, string) {
			of := kmsg.NewPtrOffsetFetchRequest()
			of.Group = groupID
			resp, err := of.RequestWith(ctx, admin)
			if err != nil {
				return false, err.Error()
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return false, err.Error()
			}
			out = map[int32]int64{}
			for _, rt := range resp.Topics {
				for _, p := range rt.Partitions {
					if rt.Topic == topic {
						out[p.Partition] = p.Offset
					}
				}
			}
			return true, ""
		})
		return out
	}

	for k := range kills {
		waitCommits(commitsSoFar()+5, "commits acknowledged by the coordinator")
		victim := waitGroupCoordinator(t, s, cl, groupID)
		before := commitsSoFar()
		// Every other kill comes between two commits, and the next
		// coordinator is asked for the offsets before the member commits
		// again: it serves every commit acknowledged before the kill.
		// The others come while the member commits.
		paused := k%2 == 0
		var ackedAtKill map[int32]int64
		if paused {
			gate.Lock()
			mu.Lock()
			ackedAtKill = maps.Clone(acked)
			mu.Unlock()
		}
		// Every third stop is a controlled shutdown (SIGTERM): the node
		// hands its partitions over first, and unloads its groups.
		sig := syscall.SIGKILL
		if k%3 == 2 {
			sig = syscall.SIGTERM
		}
		require.NoError(t, s.signal(victim, sig))
		killed := time.Now()
		if paused {
			require.Equal(t, ackedAtKill, committed(), "kill %d: the next coordinator serves every acknowledged commit", k)
			gate.Unlock()
		}
		waitCommits(before+3, fmt.Sprintf("kill %d: commits acknowledged after node %d, the group's coordinator, was killed", k, victim))
		next := waitGroupCoordinator(t, s, cl, groupID)
		require.NotEqual(t, victim, next)
		t.Logf("kill %d (between commits: %t): node %d stopped by %v, node %d coordinates; commits acknowledged again within %v",
			k, paused, victim, sig, next, time.Since(killed).Round(time.Millisecond))
		require.NoError(t, s.startNode(victim))
		waitISR(t, s, cl, group.OffsetsTopic, 3)
	}
	close(stop)
	<-done
	member.Close() // leaves the group; nothing committed on the way out
	mu.Lock()
	t.Logf("%d commits acknowledged, %d failed and retried, last acknowledged %v, consumed up to %v", commits, len(failures), acked, consumed)
	mu.Unlock()

	final := committed()
	for p, off := range acked {
		require.GreaterOrEqual(t, final[p], off, "partition %d: the last acknowledged commit is kept", p)
		require.LessOrEqual(t, final[p], consumed[p], "partition %d: no commit past what was consumed", p)
	}

	// A new member resumes at the committed offsets (records follow
	// them in every partition, whatever the first member consumed).
	produce(records, 300)
	resumed := newKgo(t, s, kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	first := map[int32]int64{}
	for len(first) < 3 && ctx.Err() == nil {
		resumed.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
		})
	}
	require.Len(t, first, 3, "records of every partition after the committed offsets")
	for p, off := range first {
		require.Equal(t, max(final[p], 0), off, "partition %d: the new member resumes at the committed offset (the start without one)", p)
	}
}

// classicMember is a classic group's member that speaks the protocol to
// one broker itself, so that a test sees each answer as it comes.
type classicMember struct {
	t      *testing.T
	broker *kgo.Broker
	group  string
	id     string
	gen    int32
}

// request sends req to the member's broker and returns its response.
func (m *classicMember) request(req kmsg.Request) kmsg.Response {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := m.broker.RetriableRequest(ctx, req)
	require.NoError(m.t, err)
	return resp
}

// join joins the group alone and syncs, taking every partition of topic:
// its member id and generation are the member's.
func (m *classicMember) join(topic string) {
	m.t.Helper()
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis, jg.ProtocolType = m.group, 60_000, 60_000, "consumer"
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	jg.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	var jr *kmsg.JoinGroupResponse
	waitFor(m.t, 10*time.Second, "the coordinator loads the group's partition", func() (bool, string) {
		jr = m.request(jg).(*kmsg.JoinGroupResponse)
		return jr.ErrorCode != kerr.NotCoordinator.Code && jr.ErrorCode != kerr.CoordinatorLoadInProgress.Code, fmt.Sprint(kerr.ErrorForCode(jr.ErrorCode))
	})
	if jr.ErrorCode == kerr.MemberIDRequired.Code {
		jg.MemberID = jr.MemberID
		jr = m.request(jg).(*kmsg.JoinGroupResponse)
	}
	require.NoError(m.t, kerr.ErrorForCode(jr.ErrorCode))
	m.id, m.gen = jr.MemberID, jr.Generation
	sg := kmsg.NewPtrSyncGroupRequest()
	sg.Group, sg.Generation, sg.MemberID = m.group, m.gen, m.id
	assignment := kmsg.NewConsumerMemberAssignment()
	assignment.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: topic, Partitions: []int32{0}}}
	sg.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: m.id, MemberAssignment: assignment.AppendTo(nil)}}
	require.NoError(m.t, kerr.ErrorForCode(m.request(sg).(*kmsg.SyncGroupResponse).ErrorCode))
}

// commit commits an offset of topic's partition 0 in the member's
// generation and returns the partition's error code.
func (m *classicMember) commit(topic string, offset int64) int16 {
	m.t.Helper()
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation, oc.MemberID = m.group, m.gen, m.id
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}
	return m.request(oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// heartbeat returns the error code of the member's heartbeat.
func (m *classicMember) heartbeat() int16 {
	m.t.Helper()
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.Generation, hb.MemberID = m.group, m.gen, m.id
	return m.request(hb).(*kmsg.HeartbeatResponse).ErrorCode
}

// committed returns the group's committed offset of topic's partition 0.
func (m *classicMember) committed(topic string) int64 {
	m.t.Helper()
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Groups = []kmsg.OffsetFetchRequestGroup{{Group: m.group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{0}}}}}
	resp := m.request(of).(*kmsg.OffsetFetchResponse)
	require.Len(m.t, resp.Groups, 1)
	g := resp.Groups[0]
	require.NoError(m.t, kerr.ErrorForCode(g.ErrorCode))
	require.Len(m.t, g.Topics, 1)
	require.NoError(m.t, kerr.ErrorForCode(g.Topics[0].Partitions[0].ErrorCode))
	return g.Topics[0].Partitions[0].Offset
}

// members returns the group's state and its members' ids.
func (m *classicMember) members() (string, []string) {
	m.t.Helper()
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{m.group}
	g := m.request(dg).(*kmsg.DescribeGroupsResponse).Groups[0]
	require.NoError(m.t, kerr.ErrorForCode(g.ErrorCode))
	var ids []string
	for _, gm := range g.Members {
		ids = append(ids, gm.MemberID)
	}
	return g.State, ids
}

// A group's coordinator is the leader of its offsets partition in this
// life of the node, never one its metadata remembers: every node is
// killed and the coordinator's node alone restarts. Its raft log still
// names it the partition's leader, but with no quorum it cannot register,
// so its replica takes up no leadership (KIP-380) and it must coordinate
// nothing: a coordinator loaded from its log would serve a commit the
// cluster may have moved past (Kafka's coordinator loads on its replica's
// election, GroupCoordinator.onElection). Once the others are back, the
// commit is served again.
func TestKafkaRestartedNodeCoordinatesOnlyWhatItsReplicaLeads(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic, groupID = "orders", "billing"
	versions := kversion.Stable() // OffsetCommit and OffsetFetch that name their topics
	versions.SetMaxKeyVersion(kmsg.OffsetCommit.Int16(), 9)
	versions.SetMaxKeyVersion(kmsg.OffsetFetch.Int16(), 9)
	admin := newKgo(t, s, kgo.MaxVersions(versions))
	createKafkaTopic(t, admin, topic, 1, 3)
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, group.OffsetsTopic, 3)
	coord := waitGroupCoordinator(t, s, cl, groupID)
	m := &classicMember{t: t, broker: admin.Broker(int(coord)), group: groupID}
	m.join(topic)
	require.Zero(t, m.commit(topic, 1))

	for _, id := range s.ids() {
		require.NoError(t, s.signal(id, syscall.SIGKILL))
	}
	require.NoError(t, s.startNode(coord))
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: groupID, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{0}}}}}
	answered := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := m.broker.Request(ctx, fetch)
		cancel()
		if err != nil {
			continue // not listening yet
		}
		answered++
		g := resp.(*kmsg.OffsetFetchResponse).Groups[0]
		require.NotZero(t, g.ErrorCode, "node %d, restarted alone, served group %s: %+v", coord, groupID, g)
		require.Contains(t, []int16{kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code}, g.ErrorCode,
			"%v", kerr.ErrorForCode(g.ErrorCode))
	}
	require.NotZero(t, answered, "node %d answered OffsetFetch while alone", coord)

	for _, id := range s.ids() {
		if id != coord {
			require.NoError(t, s.startNode(id))
		}
	}
	waitISR(t, s, cl, group.OffsetsTopic, 3)
	var g kmsg.OffsetFetchResponseGroup
	waitFor(t, 30*time.Second, "the group's coordinator once the cluster is back", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// The partition's leader may move as the nodes register.
		resp, err := admin.Broker(int(waitGroupCoordinator(t, s, cl, groupID))).Request(ctx, fetch)
		if err != nil {
			return false, err.Error()
		}
		g = resp.(*kmsg.OffsetFetchResponse).Groups[0]
		return g.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(g.ErrorCode))
	})
	require.EqualValues(t, 1, g.Topics[0].Partitions[0].Offset, "the acknowledged commit")
}
