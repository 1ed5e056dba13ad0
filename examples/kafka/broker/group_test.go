package broker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// member is a franz-go group member that records what it consumes and
// commits it after each poll.
type member struct {
	c      *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startMember(t *testing.T, tb *testBroker, groupID, topic string, seen *sync.Map, opts ...kgo.Opt) *member {
	t.Helper()
	c := tb.client(append([]kgo.Opt{kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := c.PollFetches(ctx)
			recs := fs.Records()
			for _, r := range recs {
				seen.Store(string(r.Key), r.Offset)
			}
			if len(recs) > 0 {
				// A commit refused during a rebalance leaves the
				// records to their next owner: at least once.
				_ = c.CommitRecords(ctx, recs...)
			}
		}
	}()
	return m
}

// leave stops the member; Close leaves the group.
func (m *member) leave() {
	m.cancel()
	<-m.done
	m.c.Close()
}

// TestKgoCooperativeGroupWhileMembersComeAndGo: three franz-go members with
// the cooperative-sticky balancer consume a topic while records are produced
// and members leave and join; every record is consumed, the final members
// own every partition once (DescribeGroups), and the committed offsets reach
// the end of every partition.
func TestKgoCooperativeGroupWhileMembersComeAndGo(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic, groupID, partitions, total = "events", "workers", 6, 600
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()))
	createTopic(t, c, topic, partitions)

	var seen sync.Map
	members := []*member{startMember(t, tb, groupID, topic, &seen), startMember(t, tb, groupID, topic, &seen), startMember(t, tb, groupID, topic, &seen)}
	for round := range 6 {
		produce(t, c, topic, round*total/6, (round+1)*total/6)
		switch round {
		case 1:
			members[0].leave()
			members = members[1:]
		case 2:
			members = append(members, startMember(t, tb, groupID, topic, &seen))
		case 4:
			members[0].leave()
			members = append(members[1:], startMember(t, tb, groupID, topic, &seen))
		}
		time.Sleep(300 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n == total
	}, 30*time.Second, 50*time.Millisecond, "every record consumed")
	for i := range total {
		_, ok := seen.Load(key(i))
		require.True(t, ok, key(i))
	}

	// The committed offsets reach the high watermarks.
	ends := map[int32]int64{}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for p := range int32(partitions) {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p, -1
		lt.Partitions = append(lt.Partitions, lp)
	}
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(context.Background(), c)
	require.NoError(t, err)
	for _, p := range lresp.Topics[0].Partitions {
		ends[p.Partition] = p.Offset
	}
	require.Eventually(t, func() bool {
		freq := kmsg.NewPtrOffsetFetchRequest()
		freq.Group = groupID
		freq.SetVersion(7)
		fresp, err := freq.RequestWith(context.Background(), c)
		if err != nil || fresp.ErrorCode != 0 || len(fresp.Topics) != 1 {
			return false
		}
		got := map[int32]int64{}
		for _, p := range fresp.Topics[0].Partitions {
			got[p.Partition] = p.Offset
		}
		return len(got) == partitions && func() bool {
			for p, end := range ends {
				if got[p] != end {
					return false
				}
			}
			return true
		}()
	}, 30*time.Second, 100*time.Millisecond, "committed offsets reach %v", ends)

	// The members now in the group own each partition once.
	require.Eventually(t, func() bool {
		dreq := kmsg.NewPtrDescribeGroupsRequest()
		dreq.Groups = []string{groupID}
		dresp, err := dreq.RequestWith(context.Background(), c)
		if err != nil || len(dresp.Groups) != 1 || dresp.Groups[0].ErrorCode != 0 || dresp.Groups[0].State != "Stable" ||
			len(dresp.Groups[0].Members) != len(members) {
			return false
		}
		owned := map[int32]int{}
		for _, m := range dresp.Groups[0].Members {
			var a kmsg.ConsumerMemberAssignment
			if a.ReadFrom(m.MemberAssignment) != nil {
				return false
			}
			for _, t := range a.Topics {
				for _, p := range t.Partitions {
					owned[p]++
				}
			}
		}
		for p := range int32(partitions) {
			if owned[p] != 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "a Stable group whose %d members own each partition once", len(members))

	lg := kmsg.NewPtrListGroupsRequest()
	lgr, err := lg.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(lgr.ErrorCode))
	require.Len(t, lgr.Groups, 1)
	require.Equal(t, groupID, lgr.Groups[0].Group)
	require.Equal(t, "consumer", lgr.Groups[0].ProtocolType)
	for _, m := range members {
		m.leave()
	}
}

// TestKgoConsumerGroupOfKIP848: franz-go members of a KIP-848 consumer group
// (the coordinator assigns, through ConsumerGroupHeartbeat) consume every
// record while a member joins, and their commits reach the partitions' ends.
func TestKgoConsumerGroupOfKIP848(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic, groupID, partitions, total = "jobs", "next-gen", 4, 200
	c := tb.client(kgo.ProducerBatchCompression(kgo.NoCompression()))
	createTopic(t, c, topic, partitions)
	var seen sync.Map
	nextGen := []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer())}
	first := startMember(t, tb, groupID, topic, &seen, nextGen...)
	produce(t, c, topic, 0, total/2)
	second := startMember(t, tb, groupID, topic, &seen, nextGen...)
	produce(t, c, topic, total/2, total)
	require.Eventually(t, func() bool {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n == total
	}, 30*time.Second, 50*time.Millisecond, "every record consumed")
	require.Eventually(t, func() bool {
		freq := kmsg.NewPtrOffsetFetchRequest()
		freq.Group = groupID
		freq.SetVersion(7)
		fresp, err := freq.RequestWith(context.Background(), c)
		if err != nil || fresp.ErrorCode != 0 || len(fresp.Topics) != 1 {
			return false
		}
		var committed int64
		for _, p := range fresp.Topics[0].Partitions {
			committed += max(p.Offset, 0)
		}
		return committed == total
	}, 30*time.Second, 100*time.Millisecond, "committed offsets add up to every record")
	// The members never joined a classic group: they heartbeat in a
	// consumer group, which DescribeGroups (classic) does not know.
	dreq := kmsg.NewPtrDescribeGroupsRequest()
	dreq.Groups = []string{groupID}
	dresp, err := dreq.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, "Dead", dresp.Groups[0].State)
	require.Empty(t, dresp.Groups[0].Members)

	// ConsumerGroupDescribe knows it: once the members have their
	// targets, Stable, the four partitions split between them, each
	// topic named by its id too; an id of no consumer group is
	// GROUP_ID_NOT_FOUND.
	id := topicID(t, tb, topic)
	require.Eventually(t, func() bool {
		creq := kmsg.NewPtrConsumerGroupDescribeRequest()
		creq.Groups = []string{groupID, "no-such-group"}
		cresp, err := creq.RequestWith(context.Background(), c)
		require.NoError(t, err)
		require.Len(t, cresp.Groups, 2)
		require.Equal(t, kerr.GroupIDNotFound.Code, cresp.Groups[1].ErrorCode)
		g := cresp.Groups[0]
		require.Zero(t, g.ErrorCode)
		require.Equal(t, "range", g.AssignorName)
		if g.State != "Stable" || len(g.Members) != 2 {
			return false
		}
		var owned []int32
		for _, m := range g.Members {
			require.Equal(t, []string{topic}, m.SubscribedTopics)
			require.Equal(t, g.AssignmentEpoch, m.MemberEpoch)
			require.Equal(t, m.TargetAssignment, m.Assignment)
			require.Len(t, m.Assignment.TopicPartitions, 1)
			require.Equal(t, id, m.Assignment.TopicPartitions[0].TopicID)
			require.Equal(t, topic, m.Assignment.TopicPartitions[0].Topic)
			owned = append(owned, m.Assignment.TopicPartitions[0].Partitions...)
		}
		require.ElementsMatch(t, []int32{0, 1, 2, 3}, owned)
		return true
	}, 10*time.Second, 100*time.Millisecond, "the group settles")

	// ListGroups v5 lists it as a consumer group, and its types filter
	// (compared without regard to case, as Kafka does) keeps it out of a
	// list of classic groups.
	list := func(types ...string) []kmsg.ListGroupsResponseGroup {
		lreq := kmsg.NewPtrListGroupsRequest()
		lreq.TypesFilter = types
		lresp, err := lreq.RequestWith(context.Background(), c)
		require.NoError(t, err)
		require.Zero(t, lresp.ErrorCode)
		return lresp.Groups
	}
	all := list()
	require.Len(t, all, 1)
	require.Equal(t, groupID, all[0].Group)
	require.Equal(t, "consumer", all[0].GroupType)
	require.Equal(t, "Stable", all[0].GroupState)
	require.Equal(t, all, list("Consumer"))
	require.Empty(t, list("classic"))
	first.leave()
	second.leave()
}
