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
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// waitTxnCoordinator waits until a live node leads the transactional id's
// partition of __transaction_state and returns it.
func waitTxnCoordinator(t *testing.T, s *supervisor, cl *client, txnID string) replica.NodeID {
	t.Helper()
	var leader replica.NodeID
	waitFor(t, 30*time.Second, fmt.Sprintf("a leader of %s's transaction state partition", txnID), func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		p := md.partition(log.TransactionStateTopic, txnPartitionFor(txnID))
		if p == nil {
			return false, "no transaction state partition yet"
		}
		leader = p.Leader
		return leader != replica.NoNode && s.running(leader), fmt.Sprintf("%+v", p)
	})
	return leader
}

// findTxnCoordinator asks a node's Kafka port which broker coordinates
// txnID (FindCoordinator, key type 1).
func findTxnCoordinator(t *testing.T, cl *kgo.Client, node replica.NodeID, txnID string) (int32, error) {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType, req.CoordinatorKeys = 1, []string{txnID}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	if err != nil {
		return -1, err
	}
	require.Len(t, resp.Coordinators, 1)
	c := resp.Coordinators[0]
	return c.NodeID, kerr.ErrorForCode(c.ErrorCode)
}

// readCommitted reads every partition of topic from the start as a
// read_committed consumer until each has given a record whose value is
// last, and returns the values read, by partition.
func readCommitted(t *testing.T, s *supervisor, topic string, partitions int32, last string) map[int32][]string {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	consumer := newKgo(t, s, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}), kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := map[int32][]string{}
	done := map[int32]bool{}
	for len(done) < int(partitions) {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read_committed: the records %q end every partition; read %v", last, got)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == last {
				done[r.Partition] = true
				return
			}
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		})
	}
	return got
}

// Transactions are served by the cluster as Kafka serves them
// (TransactionCoordinator, KIP-98 with KIP-890's transactions version 2):
// the transactional id's coordinator is the leader of its partition of
// the replicated __transaction_state, which FindCoordinator names from any
// node; a franz-go transactional producer writes to three partitions led
// by three different nodes, each leader adding its partition to the
// transaction at the coordinator, and commits or aborts; the coordinator
// writes the markers through each partition's leader. A read_committed
// consumer then reads exactly the committed transactions' records, each
// partition in the order produced.
func TestKafkaTransactionsAcrossLeaders(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic, txnID = "payments", "payments-tx"
	admin := newKgo(t, s)
	// Preferred leaders 1, 2 and 3.
	createKafkaTopic(t, admin, topic, -1, -1, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{3, 1, 2})
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	leaders := map[replica.NodeID]bool{}
	for p := range int32(3) {
		leaders[md.partition(topic, p).Leader] = true
	}
	require.Len(t, leaders, 3, "each partition led by another node")

	coordinator := waitTxnCoordinator(t, s, cl, txnID)
	for _, id := range s.ids() {
		var c int32
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d names %s's coordinator", id, txnID), func() (bool, string) {
			c, err = findTxnCoordinator(t, admin, id, txnID)
			return err == nil, fmt.Sprint(err)
		})
		require.Equal(t, int32(coordinator), c, "node %d: FindCoordinator names the leader of %s-%d", id, log.TransactionStateTopic, txnPartitionFor(txnID))
	}

	prod := newKgo(t, s, kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := map[int32][]string{}
	transact := func(n int, commit bool) {
		require.NoError(t, prod.BeginTransaction())
		var recs []*kgo.Record
		for p := range int32(3) {
			for j := range 3 {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "t%d-p%d-%d", n, p, j)})
			}
		}
		require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr(), "transaction %d", n)
		require.NoError(t, prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)), "transaction %d: end (commit %t)", n, commit)
		if commit {
			for _, r := range recs {
				want[r.Partition] = append(want[r.Partition], string(r.Value))
			}
		}
	}
	start := time.Now()
	const txns = 12
	for n := range txns {
		transact(n, n%3 != 1)
	}
	t.Logf("%d transactions over 3 leaders, coordinator node %d: %v each", txns, coordinator, (time.Since(start) / txns).Round(time.Millisecond))
	// The last transaction's records end every partition.
	require.NoError(t, prod.BeginTransaction())
	for p := range int32(3) {
		require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("end")}).FirstErr())
	}
	require.NoError(t, prod.EndTransaction(ctx, kgo.TryCommit))

	got := readCommitted(t, s, topic, 3, "end")
	require.Equal(t, want, got, "read_committed reads the committed transactions, whole, and nothing aborted")

	// The coordinator's state: the id's last transaction completed.
	var st kmsg.DescribeTransactionsResponseTransactionState
	waitFor(t, 10*time.Second, "the last commit completed", func() (bool, string) {
		st = describeTxn(t, admin, coordinator, txnID)
		return st.State == "CompleteCommit", st.State
	})

	// (Which node appends a marker, in which epochs, is cluster's
	// TestNodeMarkersOnlyAtTheLeaderInItsEpoch.)
	for _, id := range s.ids() {
		if id != coordinator {
			req := kmsg.NewPtrDescribeTransactionsRequest()
			req.TransactionalIDs = []string{txnID}
			desc, err := req.RequestWith(ctx, admin.Broker(int(id)))
			require.NoError(t, err)
			require.Equal(t, kerr.NotCoordinator.Code, desc.TransactionStates[0].ErrorCode, "node %d does not coordinate %s", id, txnID)
		}
	}
}

var txnKills = flag.Int("txn-kills", 0, "TestKafkaTransactionsSurviveKills: how many nodes to SIGKILL, the transaction coordinator and a partition leader by turns (default 1 with -short, else 4)")

// txnOutcome is what the producer knows of one transaction's end.
type txnOutcome int

const (
	txnCommitted txnOutcome = iota // EndTransaction(commit) succeeded
	txnAborted                     // aborted, or never asked to commit
	txnUnknown                     // the commit failed: either outcome may hold
)

// Transactions outlive the nodes that serve them: a franz-go transactional
// producer commits three of every four transactions over three partitions
// led by three nodes and aborts the fourth, while the transaction
// coordinator's node, then a partition leader's, is SIGKILLed and started
// again. A transaction whose commit failed is ended by the next
// producer's InitProducerId, which aborts it unless its commit was
// decided (TransactionCoordinator.handleInitProducerId). A read_committed
// consumer then reads every acknowledged commit whole, nothing of an
// aborted transaction, and each transaction whose outcome the producer
// did not learn whole or not at all.
func TestKafkaTransactionsSurviveKills(t *testing.T) {
	kills := txnKillCount()
	s, cl := startKafkaCluster(t)
	const topic, txnID = "ledger", "ledger-tx"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, topic, -1, -1, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{3, 1, 2})
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var mu sync.Mutex
	outcomes := map[int]txnOutcome{}
	var committedAt []time.Time
	var failures []error
	newProducer := func() *kgo.Client {
		return newKgo(t, s, kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.TransactionTimeout(20*time.Second), kgo.RequestTimeoutOverhead(5*time.Second))
	}
	// transact runs transaction n; an error leaves its outcome unknown
	// if it had asked to commit, aborted otherwise.
	transact := func(prod *kgo.Client, n int) error {
		commit := n%4 != 3
		mu.Lock()
		outcomes[n] = txnAborted
		mu.Unlock()
		if err := prod.BeginTransaction(); err != nil {
			return err
		}
		var recs []*kgo.Record
		for p := range int32(3) {
			for j := range 3 {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "t%d-p%d-%d", n, p, j)})
			}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		if commit {
			mu.Lock()
			outcomes[n] = txnUnknown
			mu.Unlock()
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			return err
		}
		mu.Lock()
		if commit {
			outcomes[n] = txnCommitted
			committedAt = append(committedAt, time.Now())
		}
		mu.Unlock()
		return nil
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		prod := newProducer()
		for n := 0; ; n++ {
			select {
			case <-stop:
				prod.Close()
				return
			default:
			}
			if err := transact(prod, n); err != nil {
				mu.Lock()
				failures = append(failures, fmt.Errorf("transaction %d: %w", n, err))
				mu.Unlock()
				// A new producer's InitProducerId ends what this one
				// left open.
				prod.Close()
				prod = newProducer()
			}
		}
	}()
	waitCommits := func(since time.Time, n int, what string) {
		waitCommitsAfter(t, &mu, &committedAt, since, n, what)
	}
	waitCommits(time.Time{}, 5, "commits before the first kill")
	producerID := describeTxn(t, admin, waitTxnCoordinator(t, s, cl, txnID), txnID).ProducerID
	for k := range kills {
		victim := waitTxnCoordinator(t, s, cl, txnID)
		what := "the transaction coordinator"
		if k%2 == 1 {
			md, err := metadataFrom(s, cl)
			require.NoError(t, err)
			for p := range int32(3) {
				if l := md.partition(topic, p).Leader; l != victim && l != replica.NoNode {
					victim, what = l, fmt.Sprintf("the leader of %s-%d", topic, p)
					break
				}
			}
		}
		require.NoError(t, s.signal(victim, syscall.SIGKILL))
		killed := time.Now()
		waitCommits(killed, 3, fmt.Sprintf("kill %d: commits after node %d, %s, was killed", k, victim, what))
		mu.Lock()
		first := committedAt[len(committedAt)-3]
		mu.Unlock()
		coordinator := waitTxnCoordinator(t, s, cl, txnID)
		t.Logf("kill %d: node %d (%s) SIGKILLed; the first commit after it acknowledged within %v; node %d coordinates now",
			k, victim, what, first.Sub(killed).Round(time.Millisecond), coordinator)
		// A coordinator that had not loaded the id's records would have
		// given it a producer id of its own (its node id in the high bits).
		require.Equal(t, producerID, describeTxn(t, admin, coordinator, txnID).ProducerID, "kill %d: node %d has the id's state", k, coordinator)
		require.NoError(t, s.startNode(victim))
		waitISR(t, s, cl, topic, 3)
		waitISR(t, s, cl, log.TransactionStateTopic, 3)
		waitCommits(time.Now(), 2, fmt.Sprintf("kill %d: commits once node %d is back", k, victim))
	}
	close(stop)
	<-done

	// The last transaction's records end every partition.
	prod := newProducer()
	require.NoError(t, prod.BeginTransaction())
	for p := range int32(3) {
		require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("end")}).FirstErr())
	}
	require.NoError(t, prod.EndTransaction(ctx, kgo.TryCommit))
	got := readCommitted(t, s, topic, 3, "end")

	mu.Lock()
	defer mu.Unlock()
	read := map[int]int{} // records read of each transaction
	for p, values := range got {
		last := -1
		for _, v := range values {
			var n, vp, j int
			_, err := fmt.Sscanf(v, "t%d-p%d-%d", &n, &vp, &j)
			require.NoError(t, err, "partition %d: record %q", p, v)
			require.Equal(t, int(p), vp)
			require.Greater(t, n*3+j, last, "partition %d: records in the order produced, each once", p)
			last = n*3 + j
			read[n]++
		}
	}
	counts := map[txnOutcome]int{}
	for n, o := range outcomes {
		counts[o]++
		switch o {
		case txnCommitted:
			require.Equal(t, 9, read[n], "transaction %d was committed: read whole", n)
		case txnAborted:
			require.Zero(t, read[n], "transaction %d was aborted: nothing read", n)
		case txnUnknown:
			require.Contains(t, []int{0, 9}, read[n], "transaction %d: read whole or not at all", n)
		}
	}
	for n := range read {
		require.Contains(t, outcomes, n, "transaction %d was produced", n)
	}
	t.Logf("%d transactions: %d committed, %d aborted, %d of unknown outcome; %d failed: %v",
		len(outcomes), counts[txnCommitted], counts[txnAborted], counts[txnUnknown], len(failures), failures)
}

// A consume-transform-produce loop is exactly once on the cluster
// (KIP-98, KIP-447): franz-go's GroupTransactSession consumes a topic as
// group etl, writes each record transformed to another topic and commits
// the group's offsets in the same transaction (AddOffsetsToTxn at the
// transaction coordinator, TxnOffsetCommit at the group coordinator, both
// replicated, and the coordinator's markers on the output and on the
// offsets partition), while the group's coordinator, then the transaction
// coordinator, is SIGKILLed and started again. A read_committed consumer
// of the output then reads every input record's transform exactly once.
func TestKafkaGroupTransactSessionExactlyOnce(t *testing.T) {
	kills := txnKillCount()
	s, cl := startKafkaCluster(t)
	const in, out, groupID, txnID = "raw", "clean", "etl", "etl-tx"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, in, 3, 3)
	createKafkaTopic(t, admin, out, -1, -1, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{3, 1, 2})
	for _, topic := range []string{in, out, log.TransactionStateTopic, group.OffsetsTopic} {
		waitISR(t, s, cl, topic, 3)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Each kill comes while records are being transformed: a batch more
	// before each.
	batch := 300
	if testing.Short() {
		batch = 150
	}
	records := 0
	prod := newKgo(t, s, kgo.ProducerBatchMaxBytes(1<<10), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceInput := func() {
		var inputs []*kgo.Record
		for range batch {
			inputs = append(inputs, &kgo.Record{Topic: in, Partition: int32(records % 3), Value: fmt.Appendf(nil, "r%d", records)})
			records++
		}
		require.NoError(t, prod.ProduceSync(ctx, inputs...).FirstErr())
	}
	produceInput()

	var mu sync.Mutex
	committed, failed := 0, 0 // input records whose transaction End committed, or failed to
	var committedAt []time.Time
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		newSession := func() *kgo.GroupTransactSession {
			sess, err := kgo.NewGroupTransactSession(
				kgo.SeedBrokers(seeds(s)...), kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(2*time.Second),
				kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
				kgo.TransactionalID(txnID), kgo.TransactionTimeout(20*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.FetchMaxPartitionBytes(1<<10), kgo.FetchMaxWait(200*time.Millisecond), kgo.SessionTimeout(10*time.Second))
			require.NoError(t, err)
			return sess
		}
		sess := newSession()
		defer func() { sess.Close() }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			pollCtx, cancel := context.WithTimeout(ctx, time.Second)
			fs := sess.PollRecords(pollCtx, 30)
			cancel()
			recs := fs.Records()
			if len(recs) == 0 {
				continue
			}
			if err := sess.Begin(); err != nil {
				t.Errorf("Begin: %v", err)
				return
			}
			for _, r := range recs {
				sess.Produce(ctx, &kgo.Record{Topic: out, Partition: r.Partition, Value: append([]byte("t-"), r.Value...)}, nil)
			}
			ok, err := sess.End(ctx, kgo.TryCommit)
			mu.Lock()
			if ok && err == nil {
				committed += len(recs)
				committedAt = append(committedAt, time.Now())
			} else {
				failed += len(recs)
			}
			mu.Unlock()
			if err != nil {
				// The transaction's end is unknown: a new session's
				// InitProducerId ends it, and its member resumes from
				// the group's committed offsets.
				t.Logf("End: %v", err)
				sess.Close()
				sess = newSession()
			}
		}
	}()
	waitCommits := func(since time.Time, n int, what string) {
		waitCommitsAfter(t, &mu, &committedAt, since, n, what)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What holds the session back: the id's transaction, and the
		// group's offsets (UNSTABLE_OFFSET_COMMIT while a transaction
		// commits some).
		c := waitTxnCoordinator(t, s, cl, txnID)
		t.Logf("transactional id %s at node %d: %+v", txnID, c, describeTxn(t, admin, c, txnID))
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Group, of.RequireStable = groupID, true
		resp, err := of.RequestWith(context.Background(), admin)
		t.Logf("group %s's offsets: %+v, %v", groupID, resp, err)
	})
	waitCommits(time.Time{}, 3, "transactions before the first kill")
	for k := range kills {
		produceInput()
		victim, what := waitGroupCoordinator(t, s, cl, groupID), "the group coordinator"
		if k%2 == 1 {
			victim, what = waitTxnCoordinator(t, s, cl, txnID), "the transaction coordinator"
		}
		require.NoError(t, s.signal(victim, syscall.SIGKILL))
		killed := time.Now()
		waitCommits(killed, 2, fmt.Sprintf("kill %d: transactions after node %d, %s, was killed", k, victim, what))
		t.Logf("kill %d: node %d (%s) SIGKILLed; transactions commit again after %v", k, victim, what, time.Since(killed).Round(time.Millisecond))
		require.NoError(t, s.startNode(victim))
		for _, topic := range []string{in, out, log.TransactionStateTopic, group.OffsetsTopic} {
			waitISR(t, s, cl, topic, 3)
		}
	}
	// A transaction whose End failed may have committed: the group's
	// offsets, not the session's answers, tell when every input record is
	// consumed.
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	ends := map[int32]int64{}
	for p := range int32(3) {
		ends[p], err = lastStable(admin, md.partition(in, p).Leader, in, p, true)
		require.NoError(t, err)
	}
	waitFor(t, 90*time.Second, "the group's offsets at the end of the input", func() (bool, string) {
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Group, of.RequireStable = groupID, true
		resp, err := of.RequestWith(ctx, admin)
		if err != nil {
			return false, err.Error()
		}
		at := map[int32]int64{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				if rt.Topic == in && p.ErrorCode == 0 {
					at[p.Partition] = p.Offset
				}
			}
		}
		return maps.Equal(at, ends), fmt.Sprintf("committed %v, input ends at %v", at, ends)
	})
	close(stop)
	<-done

	got := map[string]int{}
	consumer := newKgo(t, s, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	n := 0
	for n < records && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			got[string(r.Value)]++
			n++
		})
	}
	// Anything past the records expected would be a duplicate: give it time
	// to show.
	pollCtx, cancelPoll := context.WithTimeout(ctx, time.Second)
	consumer.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
	cancelPoll()
	for i := range records {
		require.Equal(t, 1, got[fmt.Sprintf("t-r%d", i)], "record r%d transformed exactly once", i)
	}
	require.Len(t, got, records, "nothing else in the output")
	mu.Lock()
	t.Logf("%d input records committed in %d transactions, %d in transactions whose End failed", committed, len(committedAt), failed)
	mu.Unlock()
}

func seeds(s *supervisor) []string {
	var out []string
	for _, id := range s.ids() {
		out = append(out, s.kafka[id])
	}
	return out
}

// describeTxn asks a node for a transactional id's state
// (DescribeTransactions) until it answers it.
func describeTxn(t *testing.T, cl *kgo.Client, node replica.NodeID, txnID string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	var st kmsg.DescribeTransactionsResponseTransactionState
	waitFor(t, 10*time.Second, fmt.Sprintf("DescribeTransactions %s from node %d", txnID, node), func() (bool, string) {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{txnID}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
		if err != nil {
			return false, err.Error()
		}
		st = resp.TransactionStates[0]
		return st.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(st.ErrorCode))
	})
	return st
}

// lastStable asks a node for a partition's last stable offset (ListOffsets
// latest, read_committed), or with uncommitted its high watermark.
func lastStable(cl *kgo.Client, node replica.NodeID, topic string, partition int32, uncommitted bool) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID, req.IsolationLevel = -1, 1
	if uncommitted {
		req.IsolationLevel = 0
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = partition, -1, -1
	rt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rp}
	req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	if err != nil {
		return 0, err
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

// A follower keeps the producer and transaction state of the batches it
// replicates (Kafka's follower appends them through the same
// ProducerStateManager), so a new leader's last stable offset holds back a
// transaction that was open when the old leader was SIGKILLed, and moves
// past it once the coordinator's COMMIT marker, written through the new
// leader, is replicated.
func TestKafkaNewLeaderHoldsBackAnOpenTransaction(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic = "audit"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, topic, -1, -1, []int32{1, 2, 3})
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)
	// A transactional id coordinated elsewhere than on the leader, which
	// is killed.
	txnID := ""
	for i := 0; txnID == ""; i++ {
		if id := fmt.Sprintf("audit-tx-%d", i); waitTxnCoordinator(t, s, cl, id) != 1 {
			txnID = id
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain := newKgo(t, s)
	require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("a")}, &kgo.Record{Topic: topic, Value: []byte("b")}).FirstErr())
	prod := newKgo(t, s, kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Minute))
	require.NoError(t, prod.BeginTransaction())
	for _, v := range []string{"c", "d", "e"} {
		require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr())
	}
	waitStable := func(node replica.NodeID, wantStable, wantHW int64, what string) {
		t.Helper()
		waitFor(t, 20*time.Second, what, func() (bool, string) {
			lso, err := lastStable(admin, node, topic, 0, false)
			if err != nil {
				return false, err.Error()
			}
			hw, err := lastStable(admin, node, topic, 0, true)
			if err != nil {
				return false, err.Error()
			}
			return lso == wantStable && hw == wantHW, fmt.Sprintf("last stable offset %d, high watermark %d", lso, hw)
		})
	}
	waitStable(1, 2, 5, "the leader holds the open transaction back")

	require.NoError(t, s.signal(1, syscall.SIGKILL))
	var next replica.NodeID
	waitFor(t, 20*time.Second, "a new leader", func() (bool, string) {
		md, err := metadataFrom(s, cl)
		if err != nil {
			return false, err.Error()
		}
		next = md.partition(topic, 0).Leader
		return next != 1 && next != replica.NoNode, fmt.Sprintf("leader %d", next)
	})
	waitStable(next, 2, 5, fmt.Sprintf("node %d, the new leader, holds the open transaction back", next))

	require.NoError(t, prod.EndTransaction(ctx, kgo.TryCommit))
	waitStable(next, 6, 6, "the COMMIT marker, written through the new leader, releases it")
	got := readCommitted(t, s, topic, 1, "e")
	require.Equal(t, map[int32][]string{0: {"a", "b", "c", "d"}}, got)
}

// A transaction left open past its timeout is aborted by its coordinator
// (TransactionCoordinator.abortTimedOutTransactions): the ABORT markers
// reach every partition's leader, the last stable offsets pass them, and
// the producer, whose epoch the abort bumped, is fenced.
func TestKafkaTransactionTimeoutAborts(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic, txnID = "slow", "slow-tx"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, topic, -1, -1, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{3, 1, 2})
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := newKgo(t, s, kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, prod.BeginTransaction())
	for p := range int32(3) {
		require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("late")}).FirstErr())
	}
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	for p := range int32(3) {
		leader := md.partition(topic, p).Leader
		waitFor(t, 20*time.Second, fmt.Sprintf("%s-%d: the abort marker below the last stable offset", topic, p), func() (bool, string) {
			lso, err := lastStable(admin, leader, topic, p, false)
			return err == nil && lso == 2, fmt.Sprintf("last stable offset %d, %v", lso, err)
		})
	}
	// CompleteAbort follows the last marker.
	waitFor(t, 10*time.Second, "the abort completed", func() (bool, string) {
		st := describeTxn(t, admin, waitTxnCoordinator(t, s, cl, txnID), txnID).State
		return st == "CompleteAbort", st
	})
	require.Error(t, prod.EndTransaction(ctx, kgo.TryCommit), "the producer was fenced by the abort")
	got := readCommittedAfter(t, s, topic, 3)
	require.Empty(t, got, "nothing of the aborted transaction is read")
}

// readCommittedAfter produces a committed record ending each partition and
// reads the partitions as readCommitted does.
func readCommittedAfter(t *testing.T, s *supervisor, topic string, partitions int32) map[int32][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain := newKgo(t, s, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range partitions {
		require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("end")}).FirstErr())
	}
	return readCommitted(t, s, topic, partitions, "end")
}

// Transactions are durable in __transaction_state: the three nodes are
// stopped, a transaction open, and started again; the id's new
// coordinator loads its records, a new producer of the id gets the same
// producer id at a later epoch (its InitProducerId aborts the open
// transaction first, TransactionCoordinator.handleInitProducerId), and a
// read_committed consumer reads the committed transactions and nothing
// of the open one. (The stops are controlled shutdowns: after a SIGKILL of
// all three nodes every partition is left without an eligible leader, as
// KIP-966 has it, the controller electing the last known leader only
// where the topic allows unclean elections.)
func TestKafkaTransactionsSurviveAFullRestart(t *testing.T) {
	s, cl := startKafkaCluster(t)
	const topic, txnID = "books", "books-tx"
	admin := newKgo(t, s)
	createKafkaTopic(t, admin, topic, -1, -1, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{3, 1, 2})
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newProducer := func() *kgo.Client {
		return newKgo(t, s, kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	}
	transact := func(prod *kgo.Client, value string, end bool) []*kgo.Record {
		require.NoError(t, prod.BeginTransaction())
		var recs []*kgo.Record
		for p := range int32(3) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)})
		}
		require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr())
		if end {
			require.NoError(t, prod.EndTransaction(ctx, kgo.TryCommit))
		}
		return recs
	}
	prod := newProducer()
	want := map[int32][]string{}
	for n := range 3 {
		for _, r := range transact(prod, fmt.Sprintf("c%d", n), true) {
			want[r.Partition] = append(want[r.Partition], string(r.Value))
		}
	}
	before := describeTxn(t, admin, waitTxnCoordinator(t, s, cl, txnID), txnID)
	transact(prod, "open", false)

	require.NoError(t, s.stop())
	prod.Close()
	for _, id := range s.ids() {
		require.NoError(t, s.startNode(id))
	}
	waitISR(t, s, cl, topic, 3)
	waitISR(t, s, cl, log.TransactionStateTopic, 3)
	transact(newProducer(), "after", true)
	after := describeTxn(t, admin, waitTxnCoordinator(t, s, cl, txnID), txnID)
	require.Equal(t, before.ProducerID, after.ProducerID, "the id's producer id, loaded from its records")
	require.Greater(t, after.ProducerEpoch, before.ProducerEpoch+1, "bumped by the abort of the open transaction and by the new producer")
	require.Equal(t, want, readCommitted(t, s, topic, 3, "after"), "the committed transactions, nothing of the open one")
}

// waitCommitsAfter waits until at least n of the times in *committedAt,
// which mu guards, are after since.
func waitCommitsAfter(t *testing.T, mu *sync.Mutex, committedAt *[]time.Time, since time.Time, n int, what string) {
	t.Helper()
	waitFor(t, 90*time.Second, what, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for _, at := range *committedAt {
			if at.After(since) {
				c++
			}
		}
		return c >= n, fmt.Sprintf("%d transactions committed", c)
	})
}

// txnKillCount is how many kills a transaction kill test makes: -txn-kills,
// else 4, or 1 with -short.
func txnKillCount() int {
	switch {
	case *txnKills != 0:
		return *txnKills
	case testing.Short():
		return 1
	}
	return 4
}

// pause sends SIGSTOP or SIGCONT to a node's process, which goes on
// running as far as the supervisor knows.
func pause(t *testing.T, s *supervisor, id replica.NodeID, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	cmd := s.procs[id]
	s.mu.Unlock()
	require.NotNil(t, cmd, "node %d runs", id)
	require.NoError(t, cmd.Process.Signal(sig))
}

// txnRequest sends a request of the transaction protocol to a node.
func txnRequest[R kmsg.Response](t *testing.T, cl *kgo.Client, node replica.NodeID, req kmsg.Request) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Broker(int(node)).RetriableRequest(ctx, req)
	require.NoError(t, err)
	return resp.(R)
}

// A coordinator that still leads its partition keeps what it coordinates
// while the partition is short of in-sync replicas, as Kafka's do. With
// min.insync.replicas 3 and a follower stopped (neither the coordinators'
// node nor the controller), the ISR of the offsets and transaction state
// partitions shrinks to two and their appends are refused
// NOT_ENOUGH_REPLICAS. The group's commit is answered
// COORDINATOR_NOT_AVAILABLE (CoordinatorOperationExceptionHelper.
// handleOperationException), its member keeps heartbeating in its
// generation and its committed offset stays; the transaction's EndTxn is
// answered COORDINATOR_NOT_AVAILABLE too, its pending transition reverted
// and its state kept (TransactionStateManager.appendTransactionToLog).
// Once the follower is back in the ISR, the same member commits in the
// same generation, and the same producer commits its transaction.
func TestKafkaCoordinatorsKeepTheirStateWithoutEnoughReplicas(t *testing.T) {
	s, cl := startCluster(t, func(s *supervisor) {
		s.withKafka = true
		// A replica lag time of half a second: the stopped follower
		// leaves the ISRs soon.
		s.args = append(s.args, "-min-isr", "3", "-tick", "10ms", "-replica-lag", "500ms")
	})
	const topic, groupID = "orders", "billing"
	// OffsetCommit and OffsetFetch up to v9, which name their topics
	// (v10 gives their ids).
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(kmsg.OffsetCommit.Int16(), 9)
	versions.SetMaxKeyVersion(kmsg.OffsetFetch.Int16(), 9)
	admin := newKgo(t, s, kgo.MaxVersions(versions))
	createKafkaTopic(t, admin, topic, 1, 3)
	for _, name := range []string{topic, group.OffsetsTopic, log.TransactionStateTopic} {
		waitISR(t, s, cl, name, 3)
	}
	coord := waitGroupCoordinator(t, s, cl, groupID)
	md, err := metadataFrom(s, cl)
	require.NoError(t, err)
	txnID := ""
	for i := 0; txnID == ""; i++ {
		require.Less(t, i, 100, "a transactional id coordinated by node %d", coord)
		if id := fmt.Sprintf("txn-%d", i); md.partition(log.TransactionStateTopic, txnPartitionFor(id)).Leader == coord {
			txnID = id
		}
	}
	victim := replica.NoNode
	for _, id := range s.ids() {
		if id != coord && id != md.RaftLeader {
			victim = id
		}
	}
	t.Logf("node %d coordinates group %s and transactional id %s, node %d is the controller, node %d stops", coord, groupID, txnID, md.RaftLeader, victim)

	m := &classicMember{t: t, broker: admin.Broker(int(coord)), group: groupID}
	m.join(topic)
	require.Zero(t, m.commit(topic, 1))
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &txnID, 60_000
	var ir *kmsg.InitProducerIDResponse
	waitFor(t, 10*time.Second, "the coordinator loads the transactional id's partition", func() (bool, string) {
		ir = txnRequest[*kmsg.InitProducerIDResponse](t, admin, coord, init)
		return ir.ErrorCode != kerr.NotCoordinator.Code && ir.ErrorCode != kerr.CoordinatorLoadInProgress.Code, fmt.Sprint(kerr.ErrorForCode(ir.ErrorCode))
	})
	require.NoError(t, kerr.ErrorForCode(ir.ErrorCode))
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = txnID, ir.ProducerID, ir.ProducerEpoch
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: topic, Partitions: []int32{0}}}
	ar := txnRequest[*kmsg.AddPartitionsToTxnResponse](t, admin, coord, add)
	require.NoError(t, kerr.ErrorForCode(ar.Topics[0].Partitions[0].ErrorCode))
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txnID, ir.ProducerID, ir.ProducerEpoch, true

	pause(t, s, victim, syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			pause(t, s, victim, syscall.SIGCONT)
		}
	}
	defer resume()
	offsetsPartition := group.PartitionFor(groupID, offsetsPartitions)
	others := maps.Clone(cl.peers)
	delete(others, victim)
	waitFor(t, 30*time.Second, fmt.Sprintf("node %d out of the coordinators' ISRs", victim), func() (bool, string) {
		md, err := cl.of(others).metadata(context.Background(), replica.NoNode)
		if err != nil {
			return false, err.Error()
		}
		o, x := md.partition(group.OffsetsTopic, offsetsPartition), md.partition(log.TransactionStateTopic, txnPartitionFor(txnID))
		return len(o.ISR) == 2 && len(x.ISR) == 2, fmt.Sprintf("%+v %+v", o, x)
	})

	require.Equal(t, kerr.CoordinatorNotAvailable.Code, m.commit(topic, 2), "a commit the ISR is too small for")
	require.Zero(t, m.heartbeat(), "the member is still in its generation")
	state, members := m.members()
	require.Equal(t, "Stable", state)
	require.Equal(t, []string{m.id}, members)
	require.EqualValues(t, 1, m.committed(topic), "the last commit acknowledged")
	er := txnRequest[*kmsg.EndTxnResponse](t, admin, coord, end)
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, er.ErrorCode, "an EndTxn the ISR is too small for")
	st := describeTxn(t, admin, coord, txnID)
	require.Equal(t, "Ongoing", st.State, "the PrepareCommit that failed is reverted")
	require.Equal(t, []any{ir.ProducerID, ir.ProducerEpoch}, []any{st.ProducerID, st.ProducerEpoch})
	require.Equal(t, []kmsg.DescribeTransactionsResponseTransactionStateTopic{{Topic: topic, Partitions: []int32{0}}}, st.Topics)

	resume()
	for _, name := range []string{topic, group.OffsetsTopic, log.TransactionStateTopic} {
		waitISR(t, s, cl, name, 3)
	}
	require.Equal(t, coord, waitGroupCoordinator(t, s, cl, groupID), "the coordinator kept its partitions")
	// The leaders learn their ISR from the controller a little after the
	// metadata shows it: COORDINATOR_NOT_AVAILABLE meanwhile, and nothing
	// that would make the member rejoin or the producer start again.
	retry := func(what string, code func() int16) {
		t.Helper()
		var last int16
		waitFor(t, 10*time.Second, what, func() (bool, string) {
			last = code()
			return last != kerr.CoordinatorNotAvailable.Code, fmt.Sprint(kerr.ErrorForCode(last))
		})
		require.Zero(t, last, "%s: %v", what, kerr.ErrorForCode(last))
	}
	retry("the same member's commit in the same generation", func() int16 { return m.commit(topic, 2) })
	require.EqualValues(t, 2, m.committed(topic))
	require.Zero(t, m.heartbeat())
	retry("the same producer's EndTxn", func() int16 { return txnRequest[*kmsg.EndTxnResponse](t, admin, coord, end).ErrorCode })
	waitFor(t, 10*time.Second, "the transaction committed", func() (bool, string) {
		st := describeTxn(t, admin, coord, txnID)
		return st.State == "CompleteCommit" && st.ProducerID == ir.ProducerID, fmt.Sprintf("%+v", st)
	})
}
