package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// txnProducer is a kgo transactional producer that writes to the partition
// each record names.
func txnProducer(tb *testBroker, txnID string, opts ...kgo.Opt) *kgo.Client {
	return tb.client(append([]kgo.Opt{kgo.TransactionalID(txnID), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(10 * time.Second)}, opts...)...)
}

// produceTxn runs one transaction of records first..last-1, spread over
// partitions 0 and 1 of topic, ended with commit (kgo.TryCommit) or abort.
func produceTxn(t *testing.T, c *kgo.Client, topic string, first, last int, commit kgo.TransactionEndTry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.BeginTransaction())
	var recs []*kgo.Record
	for i := first; i < last; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key(i)), Value: []byte(value(i))})
	}
	require.NoError(t, c.ProduceSync(ctx, recs...).FirstErr())
	require.NoError(t, c.EndTransaction(ctx, commit))
}

// describeTxn asks the broker for a transactional id's state
// (DescribeTransactions).
func describeTxn(t *testing.T, c *kgo.Client, txnID string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txnID}
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, resp.TransactionStates, 1)
	return resp.TransactionStates[0]
}

// noMoreRecords checks that a consumer finds nothing more for a while.
func noMoreRecords(t *testing.T, c *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.Empty(t, c.PollFetches(ctx).Records())
}

// TestKgoTransactionsCommitAndAbort: franz-go's transactional producer, on
// transactions version 2 (the broker announces transaction.version=2:
// Produce v12 adds each partition to the transaction, EndTxn v5 bumps the
// epoch), commits a transaction over two partitions, aborts a second and
// commits a third; a read_committed consumer sees exactly the committed
// records, a read_uncommitted one the aborted ones too, and
// DescribeTransactions shows the last transaction completed at epoch 3:
// 0 from InitProducerId, then one bump per EndTxn.
func TestKgoTransactionsCommitAndAbort(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "payments"
	admin := tb.client()
	createTopic(t, admin, topic, 2)

	p := txnProducer(tb, "payer")
	produceTxn(t, p, topic, 0, 10, kgo.TryCommit)
	produceTxn(t, p, topic, 10, 20, kgo.TryAbort)
	produceTxn(t, p, topic, 20, 26, kgo.TryCommit)

	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := consume(t, rc, 16)
	noMoreRecords(t, rc)
	want, keys := map[string]int32{}, map[string]int32{}
	for i := range 26 {
		if i < 10 || i >= 20 {
			want[key(i)] = int32(i % 2)
		}
	}
	for _, r := range got {
		keys[string(r.Key)] = r.Partition
	}
	require.Equal(t, want, keys, "read_committed: the committed records in their partitions, none aborted")

	ru := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	recordsByKey(t, consume(t, ru, 26), 0, 26)
	noMoreRecords(t, ru)

	s := describeTxn(t, admin, "payer")
	require.NoError(t, kerr.ErrorForCode(s.ErrorCode))
	require.Equal(t, "CompleteCommit", s.State)
	require.EqualValues(t, 10_000, s.TimeoutMillis)
	require.Empty(t, s.Topics, "no transaction open")
	require.EqualValues(t, 3, s.ProducerEpoch)
	require.Equal(t, kerr.TransactionalIDNotFound.Code, describeTxn(t, admin, "nobody").ErrorCode)
}

// TestKgoTransactionalProducerFenced: a second producer with the same
// transactional id fences the first (Kafka's zombie fencing): its
// InitProducerId bumps the epoch and aborts the first's open transaction;
// the first's next produce is refused with INVALID_PRODUCER_EPOCH and its
// commit fails; read_committed consumers see only the second's records.
func TestKgoTransactionalProducerFenced(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "fenced"
	admin := tb.client()
	createTopic(t, admin, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: []byte(key(i)), Value: []byte(value(i))}
	}

	zombie := txnProducer(tb, "worker", kgo.RecordRetries(2))
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(ctx, rec(0)).FirstErr())
	open := describeTxn(t, admin, "worker")
	require.Equal(t, "Ongoing", open.State)

	successor := txnProducer(tb, "worker")
	require.NoError(t, successor.BeginTransaction())
	require.NoError(t, successor.ProduceSync(ctx, rec(1)).FirstErr())
	now := describeTxn(t, admin, "worker")
	require.Equal(t, open.ProducerID, now.ProducerID)
	require.Greater(t, now.ProducerEpoch, open.ProducerEpoch)

	err := zombie.ProduceSync(ctx, rec(2)).FirstErr()
	require.Error(t, err)
	require.True(t, isFenced(err), "zombie's produce: %v", err)
	require.Error(t, zombie.EndTransaction(ctx, kgo.TryCommit), "a fenced producer cannot commit")

	require.NoError(t, successor.EndTransaction(ctx, kgo.TryCommit))
	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := consume(t, rc, 1)
	noMoreRecords(t, rc)
	require.Equal(t, key(1), string(got[0].Key), "only the successor's record")
}

func isFenced(err error) bool {
	for _, e := range []error{kerr.InvalidProducerEpoch, kerr.ProducerFenced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TestTransactionRequestsOverTheWire checks the coordinator's and the
// partition leader's answers one request at a time, as Kafka gives them
// (KIP-890): a transactional Produce v11 to a partition not added
// to the transaction is INVALID_TXN_STATE (KIP-890 part 1) and one v12 adds
// it (part 2); stale epochs and foreign producer ids are refused; nothing
// refused is appended.
func TestTransactionRequestsOverTheWire(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "wire"
	c := tb.client()
	v11 := kversion.Stable()
	v11.SetMaxKeyVersion(0, 11)
	c11 := tb.client(kgo.MaxVersions(v11))
	createTopic(t, c, topic, 2)
	ctx := context.Background()
	txnID := "wire-txn"

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{txnID}
	fr, err := fc.RequestWith(ctx, c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(fr.Coordinators[0].ErrorCode))
	require.EqualValues(t, 1, fr.Coordinators[0].NodeID, "this broker")

	initPID := func(id string, timeoutMs int32, current idempotence.ProducerIDAndEpoch) *kmsg.InitProducerIDResponse {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = &id, timeoutMs
		req.ProducerID, req.ProducerEpoch = current.ProducerID, current.Epoch
		resp, err := req.RequestWith(ctx, c)
		require.NoError(t, err)
		return resp
	}
	none := idempotence.ProducerIDAndEpoch{ProducerID: -1, Epoch: -1}
	require.Equal(t, kerr.InvalidRequest.Code, initPID("", 60_000, none).ErrorCode)
	require.Equal(t, kerr.InvalidTransactionTimeout.Code, initPID(txnID, 16*60_000, none).ErrorCode, "above transaction.max.timeout.ms")
	ir := initPID(txnID, 60_000, none)
	require.NoError(t, kerr.ErrorForCode(ir.ErrorCode))
	stale := idempotence.ProducerIDAndEpoch{ProducerID: ir.ProducerID, Epoch: ir.ProducerEpoch}
	require.EqualValues(t, 0, stale.Epoch)
	require.Equal(t, kerr.InvalidRequest.Code, initPID(txnID, 60_000, idempotence.ProducerIDAndEpoch{ProducerID: ir.ProducerID, Epoch: -1}).ErrorCode)

	// KIP-360: a producer that knows its id and epoch gets the next
	// epoch; once another has taken the id, it is fenced.
	ir = initPID(txnID, 60_000, stale)
	require.NoError(t, kerr.ErrorForCode(ir.ErrorCode))
	require.EqualValues(t, 1, ir.ProducerEpoch)
	ir = initPID(txnID, 60_000, none)
	require.NoError(t, kerr.ErrorForCode(ir.ErrorCode))
	pe := idempotence.ProducerIDAndEpoch{ProducerID: ir.ProducerID, Epoch: ir.ProducerEpoch}
	require.EqualValues(t, 2, pe.Epoch)
	require.Equal(t, kerr.ProducerFenced.Code, initPID(txnID, 60_000, idempotence.ProducerIDAndEpoch{ProducerID: pe.ProducerID, Epoch: 1}).ErrorCode)
	require.Equal(t, pe.Epoch, describeTxn(t, c, txnID).ProducerEpoch, "the fenced producer took nothing")

	seqs := map[int32]int32{}
	batch := func(p idempotence.ProducerIDAndEpoch, partition int32, k string) []byte {
		b, err := segment.AppendBatch(nil, []segment.Record{{Key: []byte(k), Value: []byte(k), Timestamp: 1}},
			segment.BuildOptions{Producer: &segment.ProducerFields{ID: p.ProducerID, Epoch: p.Epoch, BaseSequence: seqs[partition]}, Transactional: true})
		require.NoError(t, err)
		return b
	}
	accepted := func(r kmsg.ProduceResponseTopicPartition) {
		t.Helper()
		require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
		seqs[r.Partition]++
	}
	addPartitions := func(p idempotence.ProducerIDAndEpoch, parts map[string][]int32) map[string][]int16 {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = txnID, p.ProducerID, p.Epoch
		for _, name := range slices.Sorted(maps.Keys(parts)) {
			rt := kmsg.NewAddPartitionsToTxnRequestTopic()
			rt.Topic, rt.Partitions = name, parts[name]
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, c)
		require.NoError(t, err)
		codes := map[string][]int16{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				codes[rt.Topic] = append(codes[rt.Topic], rp.ErrorCode)
			}
		}
		return codes
	}
	ends := func() []int64 {
		var out []int64
		for i := range int32(2) {
			p, err := tb.b.Node().Log(topic, i)
			require.NoError(t, err)
			_, hw, _, err := p.Offsets()
			require.NoError(t, err)
			out = append(out, hw)
		}
		return out
	}

	// Version 1's way: the partition must be added first.
	r := produceRawTo(t, c11, &txnID, topic, 0, batch(pe, 0, "early"))
	require.Equal(t, kerr.InvalidTxnState.Code, r.ErrorCode, "v11 to a partition not in the transaction")
	require.Equal(t, []int64{0, 0}, ends(), "nothing appended")
	require.Equal(t, map[string][]int16{topic: {kerr.OperationNotAttempted.Code, kerr.UnknownTopicOrPartition.Code}, "missing": {kerr.UnknownTopicOrPartition.Code}},
		addPartitions(pe, map[string][]int32{topic: {0, 7}, "missing": {0}}), "a missing partition: the request is not attempted")
	require.Equal(t, map[string][]int16{log.TransactionStateTopic: {kerr.InvalidTopicException.Code}},
		addPartitions(pe, map[string][]int32{log.TransactionStateTopic: {0}}), "the coordinator's own topic")
	require.Equal(t, map[string][]int16{topic: {kerr.InvalidProducerIDMapping.Code}},
		addPartitions(idempotence.ProducerIDAndEpoch{ProducerID: pe.ProducerID + 1}, map[string][]int32{topic: {0}}), "another producer id")
	require.Equal(t, map[string][]int16{topic: {kerr.ProducerFenced.Code}},
		addPartitions(idempotence.ProducerIDAndEpoch{ProducerID: pe.ProducerID, Epoch: pe.Epoch - 1}, map[string][]int32{topic: {0}}), "another epoch")
	require.Equal(t, map[string][]int16{topic: {0}}, addPartitions(pe, map[string][]int32{topic: {0}}))
	accepted(produceRawTo(t, c11, &txnID, topic, 0, batch(pe, 0, "v11")))

	// Version 2's way: the produce adds its partition; a transactional
	// batch needs its transactional id.
	r = produceRawTo(t, c, nil, topic, 1, batch(pe, 1, "anonymous"))
	require.Equal(t, kerr.TransactionalIDAuthorizationFailed.Code, r.ErrorCode)
	accepted(produceRawTo(t, c, &txnID, topic, 1, batch(pe, 1, "v12")))
	require.Equal(t, []int64{1, 1}, ends())
	s := describeTxn(t, c, txnID)
	require.Equal(t, "Ongoing", s.State)
	require.Equal(t, []kmsg.DescribeTransactionsResponseTransactionStateTopic{{Topic: topic, Partitions: []int32{0, 1}}}, s.Topics)

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txnID, pe.ProducerID, pe.Epoch, true
	er, err := end.RequestWith(ctx, c)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(er.ErrorCode))
	require.Equal(t, idempotence.ProducerIDAndEpoch{ProducerID: pe.ProducerID, Epoch: pe.Epoch + 1}, idempotence.ProducerIDAndEpoch{ProducerID: er.ProducerID, Epoch: er.ProducerEpoch}, "EndTxn v5 bumps the epoch")
	require.Equal(t, []int64{2, 2}, ends(), "a COMMIT marker in each partition")

	// A late batch of the ended transaction's epoch opens nothing (T17).
	r = produceRawTo(t, c, &txnID, topic, 0, batch(pe, 0, "late"))
	require.Equal(t, kerr.InvalidProducerEpoch.Code, r.ErrorCode)
	require.Equal(t, []int64{2, 2}, ends())
	require.Equal(t, "CompleteCommit", describeTxn(t, c, txnID).State)

	// Clients may not write the coordinator's topic.
	r = produceRawTo(t, c, &txnID, log.TransactionStateTopic, 0, batch(pe, 0, "forged"))
	require.Equal(t, kerr.InvalidTopicException.Code, r.ErrorCode)
}

// txnOffsetCommitRaw sends a TxnOffsetCommit of the given version that
// commits offset for partitions 0 and 1 of "in" in group "readers", and
// returns the code of each partition.
func txnOffsetCommitRaw(t *testing.T, c *rawConn, version int16, correlation int32, txnID string, pe idempotence.ProducerIDAndEpoch, offset int64) []int16 {
	t.Helper()
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = txnID, "readers", pe.ProducerID, pe.Epoch
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "in"
	for p := range int32(2) {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	commit.Topics = append(commit.Topics, rt)
	_, err := c.Write(frame(commit, 28, version, correlation))
	require.NoError(t, err)
	corr, body := c.response(version >= 3)
	require.Equal(t, correlation, corr)
	cr := kmsg.NewPtrTxnOffsetCommitResponse()
	cr.SetVersion(version)
	require.NoError(t, cr.ReadFrom(body))
	require.Len(t, cr.Topics, 1)
	require.Equal(t, "in", cr.Topics[0].Topic)
	var codes []int16
	for _, p := range cr.Topics[0].Partitions {
		codes = append(codes, p.ErrorCode)
	}
	return codes
}

// committedOffsets returns group "readers"' committed offsets of "in"-0
// and "in"-1, or the code that refused each.
func committedOffsets(t *testing.T, c *kgo.Client, requireStable bool) []string {
	t.Helper()
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group, of.RequireStable = "readers", requireStable
	of.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "in", Partitions: []int32{0, 1}}}
	or, err := of.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, or.Topics, 1)
	var out []string
	for _, p := range or.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			out = append(out, kerr.ErrorForCode(p.ErrorCode).Error())
			continue
		}
		out = append(out, fmt.Sprint(p.Offset))
	}
	return out
}

// TestOffsetsInTransactions: offsets committed in a transaction
// (TxnOffsetCommit) count only once it commits. The group's offsets
// partition must be in the transaction first: added by AddOffsetsToTxn
// for TxnOffsetCommit v0-v4, or else every partition is INVALID_TXN_STATE
// and nothing is staged (KIP-890 part 1's verification); added by the
// request itself from v5 on (KIP-890 part 2). Staged offsets are
// UNSTABLE_OFFSET_COMMIT to a RequireStable OffsetFetch (KIP-447), the
// old ones to others; the COMMIT marker applies them, an ABORT drops them.
func TestOffsetsInTransactions(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	admin := tb.client()
	createTopic(t, admin, "in", 2)
	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(context.Background(), admin)
	require.NoError(t, err)
	advertised := map[int16][2]int16{}
	for _, k := range av.ApiKeys {
		advertised[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	require.Equal(t, [2]int16{0, 4}, advertised[25], "AddOffsetsToTxn")
	require.Equal(t, [2]int16{0, 6}, advertised[28], "TxnOffsetCommit, v6 naming topics by id")

	c := dial(t, tb.addr)
	const txnID = "eos"
	pe := initTxnID(t, admin, txnID)
	endTxn := func(commit bool) { pe = endTxnRaw(t, admin, txnID, pe, commit) }
	invalidTxnState := kerr.InvalidTxnState.Code
	unstable := kerr.UnstableOffsetCommit.Error()

	require.Equal(t, []int16{invalidTxnState, invalidTxnState}, txnOffsetCommitRaw(t, c, 3, 1, txnID, pe, 10), "v3 without AddOffsetsToTxn")
	require.Equal(t, []string{"-1", "-1"}, committedOffsets(t, admin, true), "nothing staged")

	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.Group, add.ProducerID, add.ProducerEpoch = txnID, "readers", pe.ProducerID, pe.Epoch
	_, err = c.Write(frame(add, 25, 3, 2))
	require.NoError(t, err)
	corr, body := c.response(true)
	require.EqualValues(t, 2, corr)
	ar := kmsg.NewPtrAddOffsetsToTxnResponse()
	ar.SetVersion(3)
	require.NoError(t, ar.ReadFrom(body))
	require.Zero(t, ar.ErrorCode)
	require.Equal(t, []int16{0, 0}, txnOffsetCommitRaw(t, c, 3, 3, txnID, pe, 10))
	require.Equal(t, []string{unstable, unstable}, committedOffsets(t, admin, true))
	require.Equal(t, []string{"-1", "-1"}, committedOffsets(t, admin, false))
	endTxn(true)
	require.Equal(t, []string{"10", "10"}, committedOffsets(t, admin, true), "committed")

	require.Equal(t, []int16{0, 0}, txnOffsetCommitRaw(t, c, 5, 4, txnID, pe, 20), "v5 adds the offsets partition itself")
	require.Equal(t, []string{unstable, unstable}, committedOffsets(t, admin, true))
	endTxn(false)
	require.Equal(t, []string{"10", "10"}, committedOffsets(t, admin, true), "aborted")

	stale := pe
	stale.Epoch--
	require.Equal(t, []int16{kerr.ProducerFenced.Code, kerr.ProducerFenced.Code}, txnOffsetCommitRaw(t, c, 5, 5, txnID, stale, 30), "an ended transaction's epoch")
	require.Equal(t, []string{"10", "10"}, committedOffsets(t, admin, true))
}

// initTxnID gives a transactional id a producer (InitProducerId).
func initTxnID(t *testing.T, c *kgo.Client, txnID string) idempotence.ProducerIDAndEpoch {
	t.Helper()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr(txnID), 10000
	ir, err := init.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Zero(t, ir.ErrorCode)
	return idempotence.ProducerIDAndEpoch{ProducerID: ir.ProducerID, Epoch: ir.ProducerEpoch}
}

// endTxnRaw ends the transaction of pe (EndTxn v5) and returns the
// producer's next epoch.
func endTxnRaw(t *testing.T, c *kgo.Client, txnID string, pe idempotence.ProducerIDAndEpoch, commit bool) idempotence.ProducerIDAndEpoch {
	t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = txnID, pe.ProducerID, pe.Epoch, commit
	resp, err := req.RequestWith(context.Background(), c)
	require.NoError(t, err)
	require.Zero(t, resp.ErrorCode)
	return idempotence.ProducerIDAndEpoch{ProducerID: resp.ProducerID, Epoch: resp.ProducerEpoch}
}

// TestOffsetsInTransactionsAcrossARestart: offsets staged in a transaction
// still open when the broker stops are pending after it starts again, and
// count when the transaction commits then.
func TestOffsetsInTransactionsAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	createTopic(t, tb.client(), "in", 2)
	pe := initTxnID(t, tb.client(), "eos")
	require.Equal(t, []int16{0, 0}, txnOffsetCommitRaw(t, dial(t, tb.addr), 5, 1, "eos", pe, 42))
	tb.stop()

	tb = startBroker(t, dir)
	admin := tb.client()
	unstable := kerr.UnstableOffsetCommit.Error()
	require.Equal(t, []string{unstable, unstable}, committedOffsets(t, admin, true))
	endTxnRaw(t, admin, "eos", pe, true)
	require.Equal(t, []string{"42", "42"}, committedOffsets(t, admin, true))
}

// TestKgoGroupTransactSessionCommitsExactlyOnce: kgo's consume-transform-
// produce session (GroupTransactSession, transactions version 2: its
// TxnOffsetCommit v5 adds the offsets partition to the transaction) reads
// a group's records and produces its output in transactions that commit
// the group's offsets with it: a read_committed reader sees each output
// record once, and the group's offsets advance with each commit, so that
// a session started again after the first goes on from where it ended.
func TestKgoGroupTransactSessionCommitsExactlyOnce(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	admin := tb.client()
	createTopic(t, admin, "in", 1)
	createTopic(t, admin, "out", 1)
	produce(t, admin, "in", 0, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// transform runs one session that reads n records and commits their
	// output and offsets in one transaction.
	transform := func(n int) {
		t.Helper()
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(tb.addr),
			kgo.TransactionalID("eos"), kgo.ConsumerGroup("transformers"), kgo.ConsumeTopics("in"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.TransactionTimeout(10*time.Second))
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Begin())
		for got := 0; got < n; {
			fs := s.PollFetches(ctx)
			require.NoError(t, ctx.Err())
			fs.EachRecord(func(r *kgo.Record) {
				got++
				s.Produce(ctx, &kgo.Record{Topic: "out", Key: r.Key, Value: append([]byte("seen "), r.Value...)}, nil)
			})
		}
		require.NoError(t, s.Client().Flush(ctx))
		committed, err := s.End(ctx, kgo.TryCommit)
		require.NoError(t, err)
		require.True(t, committed)
	}
	offset := func() int64 {
		t.Helper()
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Group, of.RequireStable = "transformers", true
		of.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "in", Partitions: []int32{0}}}
		or, err := of.RequestWith(ctx, admin)
		require.NoError(t, err)
		require.Zero(t, or.Topics[0].Partitions[0].ErrorCode)
		return or.Topics[0].Partitions[0].Offset
	}

	transform(5)
	require.EqualValues(t, 5, offset(), "the group's offset advanced with the commit")
	produce(t, admin, "in", 5, 8)
	transform(3)
	require.EqualValues(t, 8, offset())

	rc := tb.client(kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var keys []string
	for _, r := range consume(t, rc, 8) {
		keys = append(keys, string(r.Key))
		require.Equal(t, "seen "+strings.TrimPrefix(string(r.Key), "key-"), strings.Replace(string(r.Value), "value-", "", 1))
	}
	var want []string
	for i := range 8 {
		want = append(want, key(i))
	}
	require.Equal(t, want, keys, "each input's output once")
	noMoreRecords(t, rc)
}

// TestTransactionsAcrossARestart: the coordinator's state is durable in
// __transaction_state: after the broker restarts on the same data, a
// producer with the same transactional id gets the same producer id at the
// next epoch, and the committed records are still read_committed.
func TestTransactionsAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	const topic = "durable"
	createTopic(t, tb.client(), topic, 2)
	produceTxn(t, txnProducer(tb, "keeper"), topic, 0, 6, kgo.TryCommit)
	before := describeTxn(t, tb.client(), "keeper")
	require.EqualValues(t, 1, before.ProducerEpoch)
	tb.stop()

	tb = startBroker(t, dir)
	admin := tb.client()
	after := describeTxn(t, admin, "keeper")
	require.Equal(t, "CompleteCommit", after.State)
	require.Equal(t, before.ProducerID, after.ProducerID)
	require.Equal(t, before.ProducerEpoch, after.ProducerEpoch)

	produceTxn(t, txnProducer(tb, "keeper"), topic, 6, 10, kgo.TryCommit)
	again := describeTxn(t, admin, "keeper")
	require.Equal(t, before.ProducerID, again.ProducerID)
	require.EqualValues(t, 3, again.ProducerEpoch, "InitProducerId bumped the restored epoch, EndTxn bumped it again")

	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	recordsByKey(t, consume(t, rc, 10), 0, 10)
	noMoreRecords(t, rc)
}

// TestOpenTransactionAbortedAfterARestart: a transaction left open when the
// broker stops is still open after the restart (its records hold back
// read_committed readers at the last stable offset) until a new producer
// with its transactional id aborts it by InitProducerId; its records are
// never read_committed, the new producer's are.
func TestOpenTransactionAbortedAfterARestart(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	const topic = "crashy"
	createTopic(t, tb.client(), topic, 2)
	zombie := txnProducer(tb, "survivor")
	require.NoError(t, zombie.BeginTransaction())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, zombie.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("lost")}).FirstErr())
	tb.stop()

	tb = startBroker(t, dir)
	admin := tb.client()
	require.Equal(t, "Ongoing", describeTxn(t, admin, "survivor").State)
	p, err := tb.b.Node().Log(topic, 0)
	require.NoError(t, err)
	lso, err := p.LastStableOffset()
	require.NoError(t, err)
	require.EqualValues(t, 0, lso, "the open transaction holds the last stable offset")

	produceTxn(t, txnProducer(tb, "survivor"), topic, 0, 4, kgo.TryCommit)
	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	recordsByKey(t, consume(t, rc, 4), 0, 4)
	noMoreRecords(t, rc)
}

// TestHungTransactionAbortedAtItsTimeout: a producer that opens a
// transaction and goes quiet holds read_committed readers at the last
// stable offset until its transaction timeout; then the coordinator's
// maintenance aborts it with the epoch bumped (KIP-890): readers go on
// past it without its records, and the quiet producer, fenced, can neither
// produce (INVALID_PRODUCER_EPOCH) nor commit.
func TestHungTransactionAbortedAtItsTimeout(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic = "stuck"
	admin := tb.client()
	createTopic(t, admin, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const timeout = 2 * time.Second
	quiet := txnProducer(tb, "sleepy", kgo.TransactionTimeout(timeout))
	require.NoError(t, quiet.BeginTransaction())
	require.NoError(t, quiet.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("hung")}).FirstErr())
	opened := time.Now()
	require.NoError(t, admin.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("after")}).FirstErr())
	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	noMoreRecords(t, rc)
	if time.Since(opened) < timeout/2 {
		require.Equal(t, "Ongoing", describeTxn(t, admin, "sleepy").State, "not yet timed out")
	}
	require.Eventually(t, func() bool { return describeTxn(t, admin, "sleepy").State == "CompleteAbort" }, 10*time.Second, 50*time.Millisecond)
	s := describeTxn(t, admin, "sleepy")
	require.EqualValues(t, 1, s.ProducerEpoch, "fenced by the abort")

	got := consume(t, rc, 1)
	require.Equal(t, "after", string(got[0].Key))
	noMoreRecords(t, rc)

	err := quiet.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("late")}).FirstErr()
	require.True(t, isFenced(err), "the quiet producer's produce: %v", err)
	require.Error(t, quiet.EndTransaction(ctx, kgo.TryCommit))
	require.Equal(t, "CompleteAbort", describeTxn(t, admin, "sleepy").State)
}

// TestKgoTransactionOverManyPartitionsOfOneBroker: franz-go's transactional
// producer writes each transaction to eight partitions of one broker, one
// Produce v12 request naming them all, which adds every partition to the
// transaction in one transition at the coordinator (Kafka's ReplicaManager
// verifies a produce's partitions together): the transaction shows all
// eight, no partition is refused, and read_committed reads every
// committed record.
func TestKgoTransactionOverManyPartitionsOfOneBroker(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	const topic, partitions, txns = "wide", 8, 10
	admin := tb.client()
	createTopic(t, admin, topic, partitions)
	p := txnProducer(tb, "wide-tx", kgo.ProducerLinger(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for n := range txns {
		require.NoError(t, p.BeginTransaction())
		var recs []*kgo.Record
		for part := range int32(partitions) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Value: fmt.Appendf(nil, "t%d-p%d", n, part)})
		}
		require.NoError(t, p.ProduceSync(ctx, recs...).FirstErr(), "transaction %d", n)
		if n == 0 {
			s := describeTxn(t, admin, "wide-tx")
			require.Equal(t, "Ongoing", s.State)
			require.Len(t, s.Topics, 1)
			require.Len(t, s.Topics[0].Partitions, partitions, "every partition joined the transaction")
		}
		require.NoError(t, p.EndTransaction(ctx, kgo.TryCommit), "transaction %d", n)
	}
	rc := tb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.Len(t, consume(t, rc, txns*partitions), txns*partitions)
	noMoreRecords(t, rc)
}
