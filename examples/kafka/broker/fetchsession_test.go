package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/segment"
)

// do sends req at version over the raw connection and returns its decoded
// response.
func (c *rawConn) do(req kmsg.Request, version int16) kmsg.Response {
	c.t.Helper()
	_, err := c.Write(frame(req, req.Key(), version, 7))
	require.NoError(c.t, err)
	corr, body := c.response(req.IsFlexible() && req.Key() != 18)
	require.EqualValues(c.t, 7, corr)
	resp := req.ResponseKind()
	resp.SetVersion(version)
	require.NoError(c.t, resp.ReadFrom(body))
	return resp
}

// topicID returns a topic's id.
func topicID(t *testing.T, tb *testBroker, topic string) [16]byte {
	t.Helper()
	tp := tb.b.Node().Metadata().Topic(topic)
	require.NotNil(t, tp, "topic %s", topic)
	return tp.ID
}

// sessionFetch is one Fetch v12 of a session: partitions of topic at their
// offsets, and partitions to forget.
type sessionFetch struct {
	id, epoch int32
	offsets   map[int32]int64
	forget    []int32
	maxWait   time.Duration
}

func (f sessionFetch) send(c *rawConn, topic string) *kmsg.FetchResponse {
	c.t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SessionID, req.SessionEpoch, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = f.id, f.epoch, int32(f.maxWait.Milliseconds()), 1, 1<<20
	if len(f.offsets) > 0 {
		t := kmsg.NewFetchRequestTopic()
		t.Topic = topic
		for p, off := range f.offsets {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
	}
	if len(f.forget) > 0 {
		req.ForgottenTopics = append(req.ForgottenTopics, kmsg.FetchRequestForgottenTopic{Topic: topic, Partitions: f.forget})
	}
	return c.do(req, 12).(*kmsg.FetchResponse)
}

// fetchedKeys returns the keys of the records each partition of a fetch
// response holds, with their offsets, and fails on a partition error.
func fetchedKeys(t *testing.T, resp *kmsg.FetchResponse) map[int32][]string {
	t.Helper()
	got := map[int32][]string{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(rp.ErrorCode), "partition %d", rp.Partition)
			got[rp.Partition] = []string{}
			for rest := rp.RecordBatches; len(rest) > 0; {
				b, r, err := segment.ParseBatch(rest)
				require.NoError(t, err)
				rest = r
				for rec, err := range b.Records() {
					require.NoError(t, err)
					got[rp.Partition] = append(got[rp.Partition], string(rec.Key))
				}
			}
		}
	}
	return got
}

func produceTo(t *testing.T, c *kgo.Client, topic string, partition int32, keys ...string) {
	t.Helper()
	for _, k := range keys {
		r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte(k), Value: []byte(k)}
		require.NoError(t, c.ProduceSync(context.Background(), r).FirstErr())
	}
}

// TestFetchSessionRules follows one session through KIP-227's rules: a full
// fetch of epoch 0 creates it; an incremental fetch holds only the
// partitions with records or changed offsets; a replayed epoch is
// INVALID_FETCH_SESSION_EPOCH and an unknown id FETCH_SESSION_ID_NOT_FOUND;
// a forgotten partition is no longer read; epoch -1 closes the session.
func TestFetchSessionRules(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "sessions"
	c := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	createTopic(t, c, topic, 3)
	produceTo(t, c, topic, 0, "a0", "a1")
	conn := dial(t, tb.addr)

	resp := sessionFetch{epoch: 0, offsets: map[int32]int64{0: 0, 1: 0, 2: 0}}.send(conn, topic)
	require.Zero(t, resp.ErrorCode)
	id := resp.SessionID
	require.NotZero(t, id, "a full fetch of epoch 0 creates a session")
	require.Equal(t, map[int32][]string{0: {"a0", "a1"}, 1: {}, 2: {}}, fetchedKeys(t, resp), "a full fetch answers for every partition")
	require.Equal(t, broker.FetchSessionStats{Sessions: 1, Partitions: 3}, tb.b.FetchSessionStats())

	// Partition 0 moves on; nothing is new anywhere: an empty response
	// after the max wait.
	resp = sessionFetch{id: id, epoch: 1, offsets: map[int32]int64{0: 2}, maxWait: 100 * time.Millisecond}.send(conn, topic)
	require.Zero(t, resp.ErrorCode)
	require.Equal(t, id, resp.SessionID)
	require.Empty(t, resp.Topics, "no partition has anything new")

	// Records in partition 2: the incremental fetch names no partition
	// and gets partition 2 alone, from the offset the session keeps.
	produceTo(t, c, topic, 2, "c0")
	resp = sessionFetch{id: id, epoch: 2, maxWait: time.Second}.send(conn, topic)
	require.Equal(t, map[int32][]string{2: {"c0"}}, fetchedKeys(t, resp))
	require.EqualValues(t, 1, resp.Topics[0].Partitions[0].HighWatermark)

	replay := sessionFetch{id: id, epoch: 2}.send(conn, topic)
	require.Equal(t, kerr.InvalidFetchSessionEpoch.Code, replay.ErrorCode)
	require.Empty(t, replay.Topics)
	unknown := sessionFetch{id: id + 1, epoch: 1}.send(conn, topic)
	require.Equal(t, kerr.FetchSessionIDNotFound.Code, unknown.ErrorCode)

	// The replay did not advance the epoch. Forget partition 1 and move
	// partition 2 on; records in both: only partition 2 is read.
	resp = sessionFetch{id: id, epoch: 3, offsets: map[int32]int64{2: 1}, forget: []int32{1}, maxWait: 100 * time.Millisecond}.send(conn, topic)
	require.Empty(t, resp.Topics)
	require.Equal(t, 2, tb.b.FetchSessionStats().Partitions)
	produceTo(t, c, topic, 1, "b0")
	produceTo(t, c, topic, 2, "c1", "c2")
	resp = sessionFetch{id: id, epoch: 4, maxWait: time.Second}.send(conn, topic)
	require.Equal(t, map[int32][]string{2: {"c1", "c2"}}, fetchedKeys(t, resp), "partition 1 was forgotten")

	// A partition added to the session is answered at once, even empty;
	// one of no topic is answered with its error every time. (Partition 2
	// moves past what it was sent, else it would be sent it again.)
	resp = sessionFetch{id: id, epoch: 5, offsets: map[int32]int64{1: 1, 2: 3, 7: 0}, maxWait: 100 * time.Millisecond}.send(conn, topic)
	require.Len(t, resp.Topics, 1)
	codes := map[int32]int16{}
	for _, p := range resp.Topics[0].Partitions {
		codes[p.Partition] = p.ErrorCode
	}
	require.Equal(t, map[int32]int16{1: 0, 7: kerr.UnknownTopicOrPartition.Code}, codes)
	resp = sessionFetch{id: id, epoch: 6, maxWait: 100 * time.Millisecond}.send(conn, topic)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, resp.Topics[0].Partitions[0].ErrorCode)

	// Epoch -1 closes the session, and is answered as a sessionless fetch.
	resp = sessionFetch{id: id, epoch: -1, offsets: map[int32]int64{0: 0}}.send(conn, topic)
	require.Zero(t, resp.SessionID)
	require.Equal(t, map[int32][]string{0: {"a0", "a1"}}, fetchedKeys(t, resp))
	require.Zero(t, tb.b.FetchSessionStats().Sessions)
	require.Equal(t, kerr.FetchSessionIDNotFound.Code, sessionFetch{id: id, epoch: 7}.send(conn, topic).ErrorCode)
}

// TestFetchSessionCacheFull: with every slot taken by a session younger
// than the eviction age, a full fetch that asks for a session gets session
// id 0 (go on with full fetches) and its records all the same.
func TestFetchSessionCacheFull(t *testing.T) {
	tb := startBroker(t, t.TempDir(), func(c *broker.Config) { c.FetchSessionCacheSlots = 1 })
	const topic = "slots"
	c := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	createTopic(t, c, topic, 2)
	produceTo(t, c, topic, 0, "k0")
	first := sessionFetch{epoch: 0, offsets: map[int32]int64{0: 0, 1: 0}}.send(dial(t, tb.addr), topic)
	require.NotZero(t, first.SessionID)
	second := sessionFetch{epoch: 0, offsets: map[int32]int64{0: 0, 1: 0}}.send(dial(t, tb.addr), topic)
	require.Zero(t, second.ErrorCode)
	require.Zero(t, second.SessionID, "no slot free")
	require.Equal(t, map[int32][]string{0: {"k0"}, 1: {}}, fetchedKeys(t, second))
	require.Equal(t, broker.FetchSessionStats{Sessions: 1, Partitions: 2}, tb.b.FetchSessionStats())
}

// TestKgoConsumesThroughFetchSessions: franz-go's consumer uses fetch
// sessions by default. While a producer writes to four partitions in
// rounds, the consumer reads every record exactly once at the offset the
// produce reported, through incremental fetches of one session.
func TestKgoConsumesThroughFetchSessions(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "incremental"
	admin := tb.client()
	createTopic(t, admin, topic, 4)
	producer := tb.client(kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	consumer := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))

	produced := map[string]*kgo.Record{}
	var got []*kgo.Record
	const rounds, perRound = 6, 25
	for round := range rounds {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k, r := range produce(t, producer, topic, round*perRound, (round+1)*perRound) {
				produced[k] = r
			}
		}()
		got = append(got, consume(t, consumer, (round+1)*perRound-len(got))...)
		wg.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.Empty(t, consumer.PollFetches(ctx).Records(), "nothing more")
	for k, r := range recordsByKey(t, got, 0, rounds*perRound) {
		require.Equal(t, produced[k].Partition, r.Partition, k)
		require.Equal(t, produced[k].Offset, r.Offset, k)
	}
	st := tb.b.FetchSessionStats()
	require.Equal(t, 1, st.Sessions, "the consumer's session")
	require.Equal(t, 4, st.Partitions)
	require.Greater(t, st.IncrementalFetches, int64(rounds), "fetches went on in the session")
}

// TestFetchSessionByTopicID: a session of Fetch v13+ names its partitions
// by topic id, in the request, the forgotten topics and the response; it
// goes on in versions that use ids only (FETCH_SESSION_TOPIC_ID_ERROR for a
// v12 request in it, which names topics); forgetting its last partition
// closes it.
func TestFetchSessionByTopicID(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "ids"
	c := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	createTopic(t, c, topic, 2)
	id := topicID(t, tb, topic)
	produceTo(t, c, topic, 0, "a0")
	produceTo(t, c, topic, 1, "b0")
	conn := dial(t, tb.addr)
	fetch := func(sessionID, epoch int32, offsets map[int32]int64, forget []int32) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.SessionID, req.SessionEpoch, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = sessionID, epoch, 100, 1, 1<<20
		if len(offsets) > 0 {
			ft := kmsg.NewFetchRequestTopic()
			ft.TopicID = id
			for p, off := range offsets {
				fp := kmsg.NewFetchRequestTopicPartition()
				fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, off, 1<<20
				ft.Partitions = append(ft.Partitions, fp)
			}
			req.Topics = append(req.Topics, ft)
		}
		if len(forget) > 0 {
			req.ForgottenTopics = []kmsg.FetchRequestForgottenTopic{{TopicID: id, Partitions: forget}}
		}
		return conn.do(req, 17).(*kmsg.FetchResponse)
	}
	resp := fetch(0, 0, map[int32]int64{0: 0, 1: 0}, nil)
	session := resp.SessionID
	require.NotZero(t, session)
	require.Equal(t, id, resp.Topics[0].TopicID)
	require.Equal(t, map[int32][]string{0: {"a0"}, 1: {"b0"}}, fetchedKeys(t, resp))

	resp = fetch(session, 1, map[int32]int64{0: 1, 1: 1}, []int32{1})
	require.Empty(t, resp.Topics)
	produceTo(t, c, topic, 0, "a1")
	produceTo(t, c, topic, 1, "b1")
	resp = fetch(session, 2, nil, nil)
	require.Equal(t, map[int32][]string{0: {"a1"}}, fetchedKeys(t, resp), "partition 1 was forgotten by id")
	require.Equal(t, id, resp.Topics[0].TopicID)

	byName := sessionFetch{id: session, epoch: 3}.send(conn, topic)
	require.Equal(t, kerr.FetchSessionTopicIDError.Code, byName.ErrorCode)

	// Forgetting the last partition closes the session.
	resp = fetch(session, 3, nil, []int32{0})
	require.Zero(t, resp.ErrorCode)
	require.Zero(t, resp.SessionID)
	require.Empty(t, resp.Topics)
	require.Zero(t, tb.b.FetchSessionStats().Sessions)
}

// fetchBytes counts the fetches a client sent and the bytes of them and of
// their responses.
type fetchBytes struct {
	mu                       sync.Mutex
	fetches, written, readIn int
}

func (f *fetchBytes) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.mu.Lock()
		f.fetches++
		f.written += n
		f.mu.Unlock()
	}
}

func (f *fetchBytes) OnBrokerRead(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.mu.Lock()
		f.readIn += n
		f.mu.Unlock()
	}
}

func (f *fetchBytes) perFetch() (fetches, request, response int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches, f.written / max(f.fetches, 1), f.readIn / max(f.fetches, 1)
}

// TestFetchSessionsSpareIdlePartitions: a franz-go consumer of 64
// partitions with one busy partition sends and receives the idle ones in
// every fetch without a session, and in none of its incremental fetches
// with one: its fetches are several times smaller, and it reads the same
// records.
func TestFetchSessionsSpareIdlePartitions(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const partitions, records = 64, 20
	c := tb.client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	sizes := map[bool][2]int{}
	for _, sessions := range []bool{true, false} {
		topic := fmt.Sprintf("wide-%t", sessions)
		createTopic(t, c, topic, partitions)
		var counted fetchBytes
		opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(50 * time.Millisecond), kgo.WithHooks(&counted)}
		if !sessions {
			opts = append(opts, kgo.DisableFetchSessions())
		}
		consumer := tb.client(opts...)
		var got []string
		for i := range records {
			k := fmt.Sprintf("busy-%t-%02d", sessions, i)
			produceTo(t, c, topic, 0, k)
			for _, r := range consume(t, consumer, 1) {
				got = append(got, string(r.Key))
			}
		}
		require.Len(t, got, records)
		for i, k := range got {
			require.Equal(t, fmt.Sprintf("busy-%t-%02d", sessions, i), k)
		}
		consumer.Close()
		n, req, resp := counted.perFetch()
		sizes[sessions] = [2]int{req, resp}
		t.Logf("sessions %t: %d fetches, %d request bytes and %d response bytes per fetch", sessions, n, req, resp)
	}
	require.Less(t, 3*sizes[true][0], sizes[false][0], "requests name only what changed")
	require.Less(t, 3*sizes[true][1], sizes[false][1], "responses hold only what changed")
}
