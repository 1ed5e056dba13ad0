package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

func ptr[T any](v T) *T { return &v }

// callRequests are requests of every kind this file's calls add, their
// optional fields set and not.
func callRequests() []request {
	return []request{
		&consumerHeartbeatRequest{group.ConsumerGroupHeartbeatRequest{GroupID: "g", MemberEpoch: group.JoinMemberEpoch,
			RebalanceTimeout: time.Minute, SubscribedTopicNames: []string{"a", "b"}, Owned: &group.Assignment{Partitions: map[string][]int32{}}}},
		&consumerHeartbeatRequest{group.ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: 7,
			InstanceID: "i", RackID: "r", SubscribedTopicNames: []string{}, SubscribedTopicRegex: ptr(""), ServerAssignor: "range",
			Owned: &group.Assignment{Partitions: map[string][]int32{"a": {0, 2}, "b": {1}}, UserData: []byte{}}}},
		&consumerHeartbeatRequest{group.ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "m", MemberEpoch: group.LeaveMemberEpoch,
			SubscribedTopicRegex: ptr("a.*")}},
		&offsetCommitRequest{group.OffsetCommitRequest{Version: 9, GroupID: "g", GenerationID: 3, MemberID: "m", GroupInstanceID: "i",
			Retention: time.Hour, Topics: []group.OffsetCommitTopic{
				{Name: "a", Partitions: []group.OffsetCommitPartition{{Partition: 0, Offset: 10, LeaderEpoch: -1}, {Partition: 3, Offset: 1 << 40, LeaderEpoch: 2, Metadata: "md"}}},
				{Name: "b", Partitions: []group.OffsetCommitPartition{{Partition: 1, Offset: 0, LeaderEpoch: -1}}}}}},
		&offsetCommitRequest{group.OffsetCommitRequest{GroupID: "g", GenerationID: -1}},
		&offsetFetchRequest{group.OffsetFetchRequest{GroupID: "g"}},
		&offsetFetchRequest{group.OffsetFetchRequest{GroupID: "g", Topics: []group.OffsetFetchTopic{}}},
		&offsetFetchRequest{group.OffsetFetchRequest{GroupID: "g", RequireStable: true, MemberID: "m", MemberEpoch: 4,
			Topics: []group.OffsetFetchTopic{{Name: "a", Partitions: []int32{0, 1}}, {Name: "b"}}}},
		&fetchRequest{Topic: "t", Partition: 3, Offset: 12345, MaxBytes: 1 << 20, Isolation: log.ReadUncommitted},
		&fetchRequest{Topic: "t", Isolation: log.ReadCommitted},
		&produceRequest{Topic: "t", Partition: 2, Acks: replica.AcksAll, TxnID: "tx", Batch: []byte{1, 2, 3}},
		&produceRequest{Topic: "t", Acks: replica.AcksNone, Batch: []byte{}},
		&txnEndRequest{TxnID: "tx", Init: true, Timeout: time.Minute},
		&txnEndRequest{TxnID: "tx", ProducerID: 1 << 40, Epoch: 32767, Commit: true},
	}
}

func TestGroupCallRequestsRoundTrip(t *testing.T) {
	for _, r := range callRequests() {
		got, err := decodeRequest(encodeRequest(r))
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	// A nil subscription and owned set are not sent; empty ones are.
	got, err := decodeRequest(encodeRequest(&consumerHeartbeatRequest{}))
	require.NoError(t, err)
	hb := got.(*consumerHeartbeatRequest)
	require.Nil(t, hb.SubscribedTopicNames)
	require.Nil(t, hb.SubscribedTopicRegex)
	require.Nil(t, hb.Owned)
	got, err = decodeRequest(encodeRequest(&offsetFetchRequest{group.OffsetFetchRequest{Topics: []group.OffsetFetchTopic{}}}))
	require.NoError(t, err)
	require.NotNil(t, got.(*offsetFetchRequest).Topics, "no topics, not every topic")

	for _, b := range [][]byte{
		{byte(kindOffsetFetch), 5, 'g'},                     // a string cut short
		append(encodeRequest(&fetchRequest{Topic: "t"}), 0), // a byte past the end
		{byte(kindFetch), 0, 0, 0, 0, 0x80, 0x04},           // isolation 256
		{byte(kindProduce), 0, 0, 0x80, 0x02, 0, 0},         // acks 128
	} {
		_, err := decodeRequest(b)
		require.ErrorIs(t, err, ErrBadRequest, "% x", b)
	}
}

// answerOf is the bytes Node.Serve answers a request's payload with.
func answerOf(payload []byte) []byte { return encodeAnswer(&answer{Payload: payload}, nil) }

// payloadOf is what a caller makes of an answer: its payload.
func payloadOf(t *testing.T, b []byte) []byte {
	t.Helper()
	a, err := decodeAnswer(b)
	require.NoError(t, err)
	return a.Payload
}

func TestGroupCallAnswersRoundTrip(t *testing.T) {
	hb := &consumerHeartbeatRequest{group.ConsumerGroupHeartbeatRequest{GroupID: "g"}}
	for _, resp := range []*group.ConsumerGroupHeartbeatResponse{
		{ID: 9, MemberID: "m", MemberEpoch: 4, HeartbeatInterval: 5 * time.Second,
			Assignment: &group.Assignment{Partitions: map[string][]int32{"a": {0, 1}, "b": {2}}}},
		{ID: 1, Err: group.ErrFencedMemberEpoch, MemberID: "m", MemberEpoch: 3},
		{MemberID: "m", MemberEpoch: 5, Assignment: &group.Assignment{Partitions: map[string][]int32{}, UserData: []byte("u")}},
	} {
		got, err := decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(hb, resp, nil))), hb)
		require.NoError(t, err)
		require.Equal(t, resp, got)
	}

	commit := &offsetCommitRequest{group.OffsetCommitRequest{GroupID: "g"}}
	cresp := &group.OffsetCommitResponse{ID: 3, Topics: []group.TopicResult{
		{Name: "a", Partitions: []group.PartitionResult{{Partition: 0}, {Partition: 1, Err: group.ErrOffsetMetadataTooLarge}}},
		{Name: "b", Partitions: []group.PartitionResult{{Partition: 7}}}}}
	gotCommit, err := decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(commit, cresp, nil))), commit)
	require.NoError(t, err)
	require.Equal(t, cresp, gotCommit)

	fetch := &offsetFetchRequest{group.OffsetFetchRequest{GroupID: "g"}}
	fresp := &group.OffsetFetchResponse{ID: 4, Topics: []group.OffsetFetchTopicResult{
		{Name: "a", Partitions: []group.FetchedOffset{{Partition: 0, Offset: 17, LeaderEpoch: 2, Metadata: "md"},
			{Partition: 1, Offset: -1, LeaderEpoch: -1, Err: group.ErrUnstableOffsetCommit}}}}}
	gotFetch, err := decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(fetch, fresp, nil))), fetch)
	require.NoError(t, err)
	require.Equal(t, fresp, gotFetch)
	gotFetch, err = decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(fetch, &group.OffsetFetchResponse{Err: group.ErrGroupIDNotFound}, nil))), fetch)
	require.NoError(t, err)
	require.Equal(t, error(group.ErrGroupIDNotFound), gotFetch.Err, "a bare code comes back as the code itself")

	// Errors with messages of their own keep them, and match the group
	// package's sentinel of their code.
	wrapped := fmt.Errorf("group: group %q: unknown member id %q: %w", "g", "m", group.ErrUnknownMemberID)
	got, err := decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(hb, &group.ConsumerGroupHeartbeatResponse{Err: wrapped}, nil))), hb)
	require.NoError(t, err)
	require.ErrorIs(t, got.Err, group.ErrUnknownMemberID)
	require.Equal(t, wrapped.Error(), got.Err.Error())
	require.Equal(t, group.ErrUnknownMemberID, kafkaerr.CodeOf(got.Err))

	// The Service's error for the whole call comes without a response.
	notCoordinator := fmt.Errorf("offsets log not loaded: %w", group.ErrNotCoordinator)
	none, err := decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(commit, nil, notCoordinator))), commit)
	require.Nil(t, none)
	require.ErrorIs(t, err, group.ErrNotCoordinator)
	require.Equal(t, notCoordinator.Error(), err.Error())
	// One of no Kafka code is UNKNOWN_SERVER_ERROR.
	_, err = decodeGroupAnswer(payloadOf(t, answerOf(encodeGroupAnswer(commit, nil, errors.New("disk on fire")))), commit)
	require.ErrorIs(t, err, group.ErrUnknownServerError)
	require.EqualError(t, err, "disk on fire")

	_, err = decodeGroupAnswer([]byte{0, 0, 0xff}, commit)
	require.ErrorIs(t, err, ErrBadRequest)
}

func TestFetchAnswersRoundTrip(t *testing.T) {
	res := FetchResult{Records: []byte("batches"), HighWatermark: 40, LastStableOffset: 30, LogStartOffset: 5,
		Aborted: []idempotence.AbortedTxn{{ProducerID: 7, FirstOffset: 10, LastOffset: 12, LastStableOffset: 13}, {ProducerID: 8, FirstOffset: 20, LastOffset: 25, LastStableOffset: 26}}}
	got, err := decodeFetchAnswer(payloadOf(t, answerOf(encodeFetchAnswer(res, nil))))
	require.NoError(t, err)
	require.Equal(t, res, got)

	// Out of range, with the offsets to reset to.
	res = FetchResult{Records: []byte{}, HighWatermark: 40, LastStableOffset: 40, LogStartOffset: 5}
	got, err = decodeFetchAnswer(payloadOf(t, answerOf(encodeFetchAnswer(res,
		fmt.Errorf("%w: %w", replica.ErrOffsetOutOfRange, &log.OffsetOutOfRangeError{Offset: 2, Start: 5, End: 40})))))
	require.ErrorIs(t, err, replica.ErrOffsetOutOfRange)
	var re *RemoteError
	require.ErrorAs(t, err, &re)
	require.Equal(t, res, got)

	_, err = decodeFetchAnswer(payloadOf(t, answerOf(encodeFetchAnswer(FetchResult{}, &replica.NotLeaderError{Leader: 2}))))
	require.ErrorIs(t, err, replica.ErrNotLeaderOrFollower)
	_, err = decodeFetchAnswer([]byte{0})
	require.ErrorIs(t, err, ErrBadRequest)
}

// FuzzDecodeRequest checks that no bytes make the decoders of requests
// and answers panic, and that a request that decodes encodes to bytes
// that decode to it again.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range callRequests() {
		f.Add(encodeRequest(r))
	}
	f.Add(encodeRequest(&createTopicRequest{Name: "x", TopicSpec: TopicSpec{Partitions: 3, Configs: map[string]string{"a": "b"}}}))
	f.Add(answerOf(encodeFetchAnswer(FetchResult{Records: []byte("r"), Aborted: []idempotence.AbortedTxn{{ProducerID: 1}}}, nil)))
	hb := &consumerHeartbeatRequest{}
	f.Add(encodeGroupAnswer(hb, &group.ConsumerGroupHeartbeatResponse{MemberID: "m",
		Assignment: &group.Assignment{Partitions: map[string][]int32{"a": {1}}}}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeRequest(b); err == nil {
			again, err := decodeRequest(encodeRequest(r))
			require.NoError(t, err)
			require.Equal(t, r, again)
		}
		decodeAnswer(b)
		decodeFetchAnswer(b)
		decodeGroupAnswer(b, hb)
		decodeGroupAnswer(b, &offsetCommitRequest{})
		decodeGroupAnswer(b, &offsetFetchRequest{})
	})
}

// A group's requests reach its coordinator from any node: commits and
// fetches of its offsets through the two nodes that do not coordinate it,
// with the errors of the coordinator's responses carried back as the
// group package's.
func TestNodeGroupCallsRouteToTheCoordinator(t *testing.T) {
	c := newTestCluster(t, 3)
	c.startAll()
	c.waitRegistered()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.any().CreateTopic(ctx, "t", TopicSpec{Partitions: 2, ReplicationFactor: 3}))
	var coordinator replica.NodeID
	waitFor(t, 10*time.Second, "the group's coordinator", func() bool {
		coordinator = c.any().GroupCoordinator("g")
		return coordinator != replica.NoNode
	})
	var others []*Node
	for _, id := range c.ids {
		if id != coordinator {
			others = append(others, c.nodes[id])
		}
	}
	waitFor(t, 10*time.Second, "the topic on every node", func() bool {
		for _, n := range c.nodes {
			if n.Metadata().Topic("t") == nil {
				return false
			}
		}
		return true
	})
	resp, err := others[0].OffsetCommit(ctx, group.OffsetCommitRequest{Version: 9, GroupID: "g", GenerationID: -1,
		Topics: []group.OffsetCommitTopic{{Name: "t", Partitions: []group.OffsetCommitPartition{
			{Partition: 0, Offset: 42, LeaderEpoch: -1}, {Partition: 9, Offset: 1, LeaderEpoch: -1}}}}})
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	require.NoError(t, resp.Topics[0].Partitions[0].Err)
	require.ErrorIs(t, resp.Topics[0].Partitions[1].Err, group.ErrUnknownTopicOrPartition, "a partition the topic lacks")

	fetched, err := others[1].OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: "g"})
	require.NoError(t, err)
	require.NoError(t, fetched.Err)
	require.Equal(t, []group.OffsetFetchTopicResult{{Name: "t", Partitions: []group.FetchedOffset{
		{Partition: 0, Offset: 42, LeaderEpoch: -1}}}}, fetched.Topics)

	// A heartbeat the coordinator refuses: of a member, to a group of no
	// members (the commit made a classic one).
	hb, err := others[1].ConsumerGroupHeartbeat(ctx, group.ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "nobody", MemberEpoch: 3})
	require.NoError(t, err)
	require.ErrorIs(t, hb.Err, group.ErrGroupIDNotFound)
	// And the same at the coordinator itself, without encoding.
	hb, err = c.nodes[coordinator].ConsumerGroupHeartbeat(ctx, group.ConsumerGroupHeartbeatRequest{GroupID: "g", MemberID: "nobody", MemberEpoch: 3})
	require.NoError(t, err)
	require.ErrorIs(t, hb.Err, group.ErrGroupIDNotFound)

	// The coordinator's kill sends the calls to the next one, once it
	// has loaded the group.
	c.kill(coordinator)
	fetched, err = others[0].OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: "g"})
	require.NoError(t, err)
	require.Equal(t, int64(42), fetched.Topics[0].Partitions[0].Offset, "after the coordinator's kill")
}

// A group whose coordinator is not there (one node of three up: the
// offsets topic is not created with fewer brokers than its replicas) is
// retried until ctx ends, and the last coordinator error returned.
func TestNodeGroupCallsRetryUntilCtxEnds(t *testing.T) {
	c := newTestCluster(t, 3)
	n := c.start(1)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := n.OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: "g"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, group.ErrCoordinatorNotAvailable)
	_, err = n.Fetch(ctx, "t", 0, 0, 1, log.ReadCommitted)
	require.ErrorIs(t, err, replica.ErrUnknownTopicOrPartition, "a topic the metadata does not have is not waited for")
}

// A group call still retrying when its node closes ends with ErrClosed,
// not at the caller's deadline: a Consumer's heartbeat goroutine commits
// the partitions it gives up under a context that ends only with the
// Consumer, and its Close would wait for it forever.
func TestNodeGroupCallsEndWhenTheNodeCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCluster(t, 3)
		n := c.start(1)
		errc := make(chan error, 1)
		go func() {
			_, err := n.OffsetFetch(context.Background(), group.OffsetFetchRequest{GroupID: "g"})
			errc <- err
		}()
		synctest.Wait() // the call tried, found no coordinator, and waits to retry
		c.stop(1)
		select {
		case err := <-errc:
			require.ErrorIs(t, err, ErrClosed)
			require.ErrorIs(t, err, group.ErrCoordinatorNotAvailable, "the last coordinator error")
		case <-time.After(10 * time.Second):
			t.Fatal("the call still retries 10 s after its node closed")
		}
	})
}
