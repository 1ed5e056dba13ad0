package log

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/vfs"
)

// segmentLogs returns the bytes of every segment .log file under root, by
// path.
func segmentLogs(t *testing.T, fs vfs.FS, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	names, err := fs.List(root)
	require.NoError(t, err)
	for _, name := range names {
		path := filepath.Join(root, name)
		fi, err := fs.Stat(path)
		require.NoError(t, err)
		switch {
		case fi.IsDir():
			for k, v := range segmentLogs(t, fs, path) {
				out[k] = v
			}
		case strings.HasSuffix(name, ".log"):
			out[path] = string(readFile(t, fs, path))
		}
	}
	return out
}

// dirWithPendingTransactions leaves, after a crash, a data directory whose
// __transaction_state holds a commit decided but not marked on a-0 and b-0
// (PrepareCommit) and a transaction open on a-1 past its timeout: a Dir
// coordinating its own transactions writes COMMIT markers when it opens
// and ABORT markers at its next Maintain.
func dirWithPendingTransactions(t *testing.T) (*vfs.MemFS, *txnClock) {
	fs, clock, d := openTxnDir(t)
	hung := newTxnProducer(t, d, "hung", TransactionalOptions{TransactionTimeout: time.Second})
	require.NoError(t, hung.Begin())
	produceTxn(t, hung, "open", a1)
	tp := newTxnProducer(t, d, "t1", TransactionalOptions{})
	require.NoError(t, tp.Begin())
	produceTxn(t, tp, "x", a0, b0)
	var on atomic.Bool
	failWritesUnder(fs, &on, "/data/a-0", "/data/b-0")
	on.Store(true)
	require.NoError(t, tp.Commit(context.Background()))
	tx, err := d.Transactions()
	require.NoError(t, err)
	rec, _ := tx.Describe("t1")
	require.Equal(t, idempotence.TxnPrepareCommit, rec.State, "the markers could not be written")
	clock.advance(time.Minute) // past hung's timeout
	return fs, clock
}

// Issue 21 part 6: a cluster node's Dir holds a replica of
// __transaction_state, which the node's own transaction coordinator
// (the partition leader's, as in Kafka's TransactionStateManager) reads;
// the Dir must not coordinate those transactions itself, or it writes
// markers into replica logs around replication. With DirOptions.Replicated
// the Dir writes nothing to any partition but what its caller appends;
// without it, the Dir recovers its transactions as before (Kafka's
// coordinator resends the markers of the PrepareCommit transactions it
// loads, TransactionStateManager.loadTransactionsForTxnTopicPartition).
func TestReplicatedDirCoordinatesNothing(t *testing.T) {
	fs, clock := dirWithPendingTransactions(t)
	crashed := fs.Crash(vfs.CrashOptions{})
	before := segmentLogs(t, crashed, "/data")
	require.NotEmpty(t, before)

	opts := txnDirOptions(crashed, clock)
	opts.Replicated = true
	d, err := OpenDir("/data", opts)
	require.NoError(t, err)
	require.NoError(t, d.Maintain(), "retention and compaction run; no transaction is aborted")
	require.Equal(t, int64(1), endOffset(t, d, "a", 0), "no COMMIT marker after the record")
	require.Equal(t, before, segmentLogs(t, crashed, "/data"), "no partition log changed, __transaction_state's included")
	_, err = d.Transactions()
	require.ErrorIs(t, err, ErrReplicated)
	_, err = d.NewTransactionalProducer("t2", TransactionalOptions{})
	require.ErrorIs(t, err, ErrReplicated)
	require.NoError(t, d.Close())
	require.Equal(t, before, segmentLogs(t, crashed, "/data"))

	// The same directory opened by a Dir of its own completes the commit
	// and aborts the hung transaction.
	d2, err := OpenDir("/data", txnDirOptions(fs.Crash(vfs.CrashOptions{}), clock))
	require.NoError(t, err)
	defer d2.Close()
	for _, x := range []idempotence.TopicPartition{a0, b0} {
		require.Equal(t, []string{"x"}, values(t, d2, x.Topic, x.Partition, ReadCommitted), "%v", x)
	}
	require.NoError(t, d2.Maintain())
	tx, err := d2.Transactions()
	require.NoError(t, err)
	rec, _ := tx.Describe("hung")
	require.Equal(t, idempotence.TxnCompleteAbort, rec.State)
	require.Equal(t, int64(2), endOffset(t, d2, "a", 1), "the record and its ABORT marker")
}
