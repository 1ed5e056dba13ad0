package replica

import (
	"testing"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
	"github.com/stretchr/testify/require"
)

func TestConfigIsValidated(t *testing.T) {
	l, err := log.Open("/p", log.Options{FS: vfs.NewMem(), ExternalHighWatermark: true})
	require.NoError(t, err)
	defer l.Close()
	for _, tc := range []struct {
		cfg  Config
		name string
	}{
		{Config{}, "Log"},
		{Config{Log: l, MinInsyncReplicas: -1}, "MinInsyncReplicas"},
		{Config{Log: l, ReplicaLagTicks: 1}, "ReplicaLagTicks"},
		{Config{Log: l, MaxBatchBytes: 10}, "MaxBatchBytes"},
		{Config{Log: l, Topic: string(make([]byte, 300))}, "Topic"},
	} {
		_, err := New(tc.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorContains(t, err, tc.name)
	}
	require.NoError(t, l.Close())
	_, err = New(Config{Log: l})
	require.ErrorIs(t, err, log.ErrClosed, "a closed log is refused")
}

func batchOf(t testing.TB, values ...string) []byte {
	recs := make([]segment.Record, len(values))
	for i, v := range values {
		recs[i] = segment.Record{Value: []byte(v), Timestamp: 1}
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	require.NoError(t, err)
	return b
}

// Bad input to Step returns a typed error and changes nothing.
func TestStepRefusesBadInput(t *testing.T) {
	c := newCluster(t, 1, 2).start(func(cfg *Config) { cfg.MinInsyncReplicas = 3; cfg.MaxBatchBytes = 200 })
	c.elect(1)
	c.stabilize()
	h := func(from, to NodeID) Header { return Header{From: from, To: to, Topic: testTopic} }
	corrupt := batchOf(t, "x")
	corrupt[len(corrupt)-1] ^= 1
	big := batchOf(t, string(make([]byte, 300)))

	for _, tc := range []struct {
		name string
		at   NodeID
		m    Message
		want error
	}{
		{"nil", 1, nil, ErrInvalidMessage},
		{"another partition", 1, &Fetch{Header: Header{From: 2, To: 1, Topic: "other"}}, ErrUnknownTopicOrPartition},
		{"another node", 1, &Fetch{Header: h(2, 3)}, ErrInvalidMessage},
		{"a kind a partition does not take", 1, &ProduceResult{Header: h(2, 1)}, ErrInvalidMessage},
		{"produce to a follower", 2, &Produce{Header: h(client, 2), Acks: AcksLeader, Batch: batchOf(t, "x")}, ErrNotLeaderOrFollower},
		{"invalid acks", 1, &Produce{Header: h(client, 1), Acks: 2, Batch: batchOf(t, "x")}, ErrInvalidRequiredAcks},
		{"MinInsyncReplicas above the replicas", 1, &Produce{Header: h(client, 1), Acks: AcksAll, Batch: batchOf(t, "x")}, ErrNotEnoughReplicas},
		{"corrupt batch", 1, &Produce{Header: h(client, 1), Acks: AcksLeader, Batch: corrupt}, ErrCorruptMessage},
		{"garbage batch", 1, &Produce{Header: h(client, 1), Acks: AcksLeader, Batch: []byte("garbage")}, ErrCorruptMessage},
		{"batch too large", 1, &Produce{Header: h(client, 1), Acks: AcksLeader, Batch: big}, ErrMessageTooLarge},
		{"two batches", 1, &Produce{Header: h(client, 1), Acks: AcksLeader, Batch: append(batchOf(t, "x"), batchOf(t, "y")...)}, ErrCorruptMessage},
		{"negative fetch offset", 1, &Fetch{Header: h(2, 1), FetchOffset: -1}, ErrInvalidMessage},
		{"stale leader epoch", 2, &LeaderAndISR{Header: h(NoNode, 2), Leader: 1, LeaderEpoch: 0, PartitionEpoch: 9, Replicas: []NodeID{1, 2}, ISR: []NodeID{1, 2}}, ErrStale},
		{"leader not a replica", 2, &LeaderAndISR{Header: h(NoNode, 2), Leader: 3, LeaderEpoch: 9, Replicas: []NodeID{1, 2}, ISR: []NodeID{3}}, ErrInvalidMessage},
		{"leader not in the ISR", 2, &LeaderAndISR{Header: h(NoNode, 2), Leader: 1, LeaderEpoch: 9, Replicas: []NodeID{1, 2}, ISR: []NodeID{2}}, ErrInvalidMessage},
		{"repeated replica", 2, &LeaderAndISR{Header: h(NoNode, 2), Leader: 1, LeaderEpoch: 9, Replicas: []NodeID{1, 1}, ISR: []NodeID{1}}, ErrInvalidMessage},
		{"negative epoch", 2, &LeaderAndISR{Header: h(NoNode, 2), Leader: 1, LeaderEpoch: -3, Replicas: []NodeID{1}, ISR: []NodeID{1}}, ErrInvalidMessage},
		{"fetch response nobody asked for", 2, &FetchResponse{Header: h(1, 2), ID: 12345, LeaderEpoch: 1}, ErrStale},
		{"ISR answer with nothing pending", 1, &AlterPartitionResponse{Header: h(NoNode, 1)}, ErrStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.node(tc.at).p
			before, ready := p.Status(), p.HasReady()
			err := p.Step(tc.m)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, before, p.Status(), "nothing changed")
			require.Equal(t, ready, p.HasReady())
		})
	}
	err := c.stepOn(2, &Produce{Header: h(client, 2), Acks: AcksLeader, Batch: batchOf(t, "x")})
	nl, ok := err.(*NotLeaderError)
	require.True(t, ok, "%T", err)
	require.Equal(t, NodeID(1), nl.Leader, "a follower names the leader it knows")
}

// A follower refuses a fetch response whose records do not check, and
// changes nothing: its fetch is sent again when it times out.
func TestFollowerRefusesBadRecords(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	_, err := c.produce(1, AcksLeader, "a")
	require.NoError(t, err)
	var resp *FetchResponse
	c.drop = func(m Message) bool {
		if r, ok := m.(*FetchResponse); ok && len(r.Records) > 0 && resp == nil {
			resp = r
			return true
		}
		return false
	}
	c.deliverUntil(func() bool { return resp != nil })
	p := c.node(2).p
	before := p.Status()
	for name, mutate := range map[string]func(r *FetchResponse){
		"flipped byte":    func(r *FetchResponse) { r.Records[len(r.Records)-1] ^= 1 },
		"cut short":       func(r *FetchResponse) { r.Records = r.Records[:len(r.Records)-3] },
		"a later epoch":   func(r *FetchResponse) { segment.Batch(r.Records).SetPartitionLeaderEpoch(9) },
		"overlapping end": func(r *FetchResponse) { r.Records = append(r.Records, r.Records...) },
	} {
		bad := *resp
		bad.Records = append([]byte(nil), resp.Records...)
		mutate(&bad)
		require.ErrorIs(t, p.Step(&bad), ErrCorruptMessage, name)
		require.Equal(t, before, p.Status(), name)
		require.False(t, p.HasReady(), name)
	}
	require.NoError(t, p.Step(resp))
	c.drop = nil
	c.stabilize()
	require.Equal(t, []string{"a"}, c.values(2))
}

// FuzzStep steps any decodable message into a leader and a follower: no
// input panics, and one refused changes nothing.
func FuzzStep(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := m.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, toLeader bool) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		c := newCluster(t, 1, 2).start(nil)
		c.elect(1)
		c.stabilize()
		_, err = c.produce(1, AcksAll, "a")
		require.NoError(t, err)
		c.stabilize()
		at := NodeID(2)
		if toLeader {
			at = 1
		}
		h := m.Head()
		h.To, h.Topic, h.Partition = at, testTopic, 0
		p := c.node(at).p
		before, ready := p.Status(), p.HasReady()
		if err := p.Step(m); err != nil {
			require.Equal(t, before, p.Status())
			require.Equal(t, ready, p.HasReady())
		}
		c.drop = func(Message) bool { return false }
		c.tick(3)
	})
}

// A follower whose log ends below the leader's log start offset restarts
// its log there (fetchOffsetAndTruncate); if that start lies inside a
// batch, it takes the whole batch, as Kafka's follower does after an
// UnexpectedAppendOffsetException, and its log start then follows the
// leader's.
func TestFollowerBehindTheLeadersLogStartRestarts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deleteTo  int64
		wantStart int64
	}{
		{"at a batch boundary", 5, 5},
		{"inside a batch", 7, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, 2).start(nil)
			c.seed(1, 0, "1:a", "1:b", "1:c", "1:d", "1:e")
			l := c.node(1).log
			b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte("f")}, {Value: []byte("g")}, {Value: []byte("h")}},
				segment.BuildOptions{BaseOffset: 5})
			require.NoError(t, err)
			segment.Batch(b).SetPartitionLeaderEpoch(1)
			_, err = l.AppendReplicated(b)
			require.NoError(t, err)
			_, err = l.SetHighWatermark(8) // the batch holds 5 to 7

			require.NoError(t, err)
			require.NoError(t, l.DeleteRecordsBefore(tc.deleteTo))
			c.ctl.leaderEpoch = 1
			c.elect(1)
			c.stabilize()
			f := c.node(2).log
			require.Equal(t, tc.wantStart, f.LogStartOffset(), c.dumpTrace())
			require.EqualValues(t, 8, f.LogEndOffset())
			es := c.entries(2)
			require.Equal(t, c.entries(1), es)
		})
	}
}

// Records the leader deletes (DeleteRecords, retention) go on its
// followers too: a follower's log start follows the leader's, up to its
// own high watermark.
func TestFollowerLogStartFollowsTheLeaders(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	for _, v := range []string{"a", "b", "c", "d"} {
		_, err := c.produce(1, AcksAll, v)
		require.NoError(t, err)
		c.stabilize()
	}
	c.tick(10)
	require.NoError(t, c.node(1).log.DeleteRecordsBefore(3))
	_, err := c.produce(1, AcksAll, "e")
	require.NoError(t, err)
	c.tick(10)
	require.EqualValues(t, 3, c.node(2).log.LogStartOffset())
	require.Equal(t, []string{"d", "e"}, c.values(2))
}

// Fetch IDs start over when a node restarts, so the answer to a fetch of
// its previous life may match its current one. A FENCED_LEADER_EPOCH
// from a leader whose epoch is not above the follower's answers such a
// fetch (the simulator's seed 636): it is stale, and the follower goes on
// fetching instead of waiting for metadata that will not come.
func TestFollowerIgnoresAFencedAnswerFromItsOwnEpoch(t *testing.T) {
	c := newCluster(t, 1, 2).start(nil)
	c.elect(1)
	c.stabilize()
	fl := c.node(2).p.fl
	require.True(t, fl.outstanding)
	err := c.stepOn(2, &FetchResponse{
		Header: Header{From: 1, To: 2, Topic: testTopic}, ID: fl.fetchID, Err: ErrFencedLeaderEpoch,
		Leader: 1, LeaderEpoch: c.ctl.leaderEpoch, FetchOffset: 0, DivergingEpoch: -1, DivergingEndOffset: -1,
	})
	require.ErrorIs(t, err, ErrStale)
	_, err = c.produce(1, AcksAll, "after")
	require.NoError(t, err)
	c.tick(10)
	require.Equal(t, []string{"after"}, c.values(2))
}
