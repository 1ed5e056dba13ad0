package group_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/strandlog/strand/group"
)

// A consumer joins a group, gets its assignment and commits an offset; the
// owner's loop appends each Ready's records before delivering its responses,
// and a second coordinator replays the log to find the committed offset.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, _ := group.NewCoordinator(group.Config{InitialRebalanceDelay: -1, Rand: rand.New(rand.NewPCG(1, 1))}, now)
	c.Loaded() // an empty offsets log

	var log []group.Record
	step := func() []group.Response {
		rd := c.Ready()
		log = append(log, rd.Records...) // durable before the responses go out
		return rd.Responses
	}
	join := group.JoinGroupRequest{
		Version: group.JoinVersionLatest, GroupID: "orders", ClientID: "worker",
		SessionTimeout: 45 * time.Second, ProtocolType: "consumer",
		Protocols: []group.Protocol{{Name: "range", Metadata: []byte("subscription")}},
	}
	c.JoinGroup(1, join)
	first := step()[0].(*group.JoinGroupResponse)
	fmt.Println(first.Err)

	join.MemberID = first.MemberID // KIP-394: join again with the id given
	c.JoinGroup(2, join)
	c.Tick(now) // the initial rebalance delay (none here) completes the join phase
	joined := step()[0].(*group.JoinGroupResponse)
	fmt.Println("generation", joined.GenerationID, "leader", joined.Leader == joined.MemberID)

	c.SyncGroup(3, group.SyncGroupRequest{GroupID: "orders", GenerationID: joined.GenerationID, MemberID: joined.MemberID,
		Assignments: []group.SyncGroupAssignment{{MemberID: joined.MemberID, Assignment: []byte("orders-0")}}})
	fmt.Printf("assignment %s\n", step()[0].(*group.SyncGroupResponse).Assignment)
	d, _ := c.DescribeGroup("orders")
	fmt.Println(d.State, "with", len(d.Members), "member")

	c.OffsetCommit(4, group.OffsetCommitRequest{GroupID: "orders", GenerationID: joined.GenerationID, MemberID: joined.MemberID,
		Topics: []group.OffsetCommitTopic{{Name: "orders", Partitions: []group.OffsetCommitPartition{{Partition: 0, Offset: 42, LeaderEpoch: -1}}}}})
	fmt.Println("commit", step()[0].(*group.OffsetCommitResponse).Topics[0].Partitions[0].Err)

	restarted, _ := group.NewCoordinator(group.Config{}, now.Add(time.Minute))
	for i, r := range log {
		_ = restarted.Replay(int64(i), r)
	}
	restarted.Loaded()
	restarted.OffsetFetch(1, group.OffsetFetchRequest{GroupID: "orders"})
	fetched := restarted.Ready().Responses[0].(*group.OffsetFetchResponse)
	fmt.Println("after replay: offset", fetched.Topics[0].Partitions[0].Offset, "records", len(log))
	// Output:
	// group: group "orders": rejoin with the member id given: MEMBER_ID_REQUIRED
	// generation 1 leader true
	// assignment orders-0
	// Stable with 1 member
	// commit <nil>
	// after replay: offset 42 records 3
}
