package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// The txn suite measures what idempotence and transactions cost a
// log.Log: appends of batches that carry a producer id, epoch and
// sequence, which the log checks against its producer state, beside
// appends of the same batches without a producer; and ReadCommitted reads
// of a log where a tenth of the transactions are aborted, which stop at
// the last stable offset and drop the aborted records, beside ReadLogEnd
// reads of the same log.
func init() { suites["txn"] = txnSuite }

// txnShape sizes the txn suite.
type txnShape struct {
	reps         int // runs of each measurement; the median counts
	batches      int // batches appended per append run
	transactions int // transactions in the read log
}

// Both measurements use batches of ten 100-byte records, from eight
// producers taking turns: small batches, where a per-batch cost shows.
const (
	txnBatchRecords = 10
	txnProducers    = 8
	// Every tenth transaction of the read log is aborted.
	txnAbortEvery = 10
)

func txnShapes(quick bool) txnShape {
	if quick {
		return txnShape{reps: 1, batches: 2_000, transactions: 2_000}
	}
	return txnShape{reps: 15, batches: 50_000, transactions: 50_000}
}

func txnSuite(quick bool) error {
	shape := txnShapes(quick)
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 't', 'r', 'a', 'n', 'd', 't', 'x', 'n'}))
	value := make([]byte, smallRecordSize)
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	fmt.Printf("batches of %d records of %d bytes from %d producers, FsyncNever, %d runs each, medians; temporary directories in %s\n",
		txnBatchRecords, smallRecordSize, txnProducers, shape.reps, *logParent)
	printRateHeader()
	var cmps []comparison
	for _, step := range []func() (comparison, error){
		func() (comparison, error) { return compareIdempotentAppends(shape, value) },
		func() (comparison, error) { return compareReadCommitted(shape, value) },
	} {
		c, err := step()
		if err != nil {
			return fmt.Errorf("txn suite: %w", err)
		}
		cmps = append(cmps, c)
	}
	printComparisons(cmps)
	return nil
}

// txnBatch builds the batch of the n-th append: from producer n mod
// txnProducers, with that producer's next sequence, if idempotent, or
// without a producer; transactional if txn.
func txnBatch(n int, value []byte, idempotent, txn bool) (segment.Batch, error) {
	recs := make([]segment.Record, txnBatchRecords)
	for i := range recs {
		recs[i] = segment.Record{Key: fmt.Appendf(nil, "key-%d", n*txnBatchRecords+i), Value: value, Timestamp: time.Now().UnixMilli()}
	}
	opts := segment.BuildOptions{Transactional: txn}
	if idempotent {
		round := n / txnProducers
		opts.Producer = &segment.ProducerFields{ID: int64(1000 + n%txnProducers), BaseSequence: int32(round * txnBatchRecords)}
	}
	return segment.AppendBatch(nil, recs, opts)
}

// appendRun returns a run that appends the batches of shape, built before
// the clock starts, to a new log through Log.AppendBatch.
func appendRun(shape txnShape, value []byte, idempotent bool) func() (sample, error) {
	return func() (s sample, err error) {
		batches := make([]segment.Batch, shape.batches)
		for i := range batches {
			if batches[i], err = txnBatch(i, value, idempotent, false); err != nil {
				return s, err
			}
		}
		dir, err := tempDir()
		if err != nil {
			return s, err
		}
		defer removeAfter(dir, &err)
		l, err := log.Open(dir, log.Options{Fsync: log.FsyncNever()})
		if err != nil {
			return s, err
		}
		defer func() { err = errors.Join(err, l.Close()) }()
		runtime.GC() // the garbage of building the batches is not the run's
		start := time.Now()
		for _, b := range batches {
			res, err := l.AppendBatch(b)
			if err != nil {
				return s, err
			}
			if res.Duplicate {
				return s, fmt.Errorf("batch at %d taken for a duplicate", res.BaseOffset)
			}
		}
		return sample{records: int64(shape.batches * txnBatchRecords), elapsed: time.Since(start)}, nil
	}
}

// compareIdempotentAppends appends the same records with and without a
// producer id, epoch and sequence.
func compareIdempotentAppends(shape txnShape, value []byte) (comparison, error) {
	ss, err := medians(shape.reps, appendRun(shape, value, false), appendRun(shape, value, true))
	if err != nil {
		return comparison{}, err
	}
	const test = "append, no fsync"
	printRate(test, "strand plain", ss[0], smallRecordSize, "AppendBatch, no producer id")
	printRate(test, "strand idempotent", ss[1], smallRecordSize, "AppendBatch, producer id, epoch, sequence")
	return comparison{name: "idempotent-append-vs-plain", value: ss[1].perSec() / ss[0].perSec(), bound: 0.9}, nil
}

// writeTxnLog writes the read log: transactions of one batch each from
// the producers, all open at once and then ended in turn, every
// txnAbortEvery-th with an ABORT marker. It returns the records in
// committed transactions.
func writeTxnLog(l *log.Log, shape txnShape, value []byte) (committed int64, err error) {
	for n := 0; n < shape.transactions; n += txnProducers {
		round := min(txnProducers, shape.transactions-n)
		for i := range round {
			b, err := txnBatch(n+i, value, true, true)
			if err != nil {
				return 0, err
			}
			if _, err := l.AppendBatch(b); err != nil {
				return 0, err
			}
		}
		for i := range round {
			typ := idempotence.MarkerCommit
			if (n+i)%txnAbortEvery == 0 {
				typ = idempotence.MarkerAbort
			} else {
				committed += txnBatchRecords
			}
			m, err := idempotence.AppendMarkerBatch(nil, int64(1000+(n+i)%txnProducers), 0, idempotence.Marker{Type: typ}, time.Now().UnixMilli())
			if err != nil {
				return 0, err
			}
			if _, err := l.AppendMarker(m); err != nil {
				return 0, err
			}
		}
	}
	return committed, nil
}

// readRun returns a run that reads every record of l with iso, through
// Log.Records, and checks it got want of them.
func readRun(l *log.Log, iso log.Isolation, want int64) func() (sample, error) {
	return func() (sample, error) {
		runtime.GC() // the other contender's garbage is not this run's
		start := time.Now()
		var n int64
		for _, err := range l.Records(0, iso) {
			if err != nil {
				return sample{}, err
			}
			n++
		}
		elapsed := time.Since(start)
		if n != want {
			return sample{}, fmt.Errorf("read %d records with isolation %d, want %d", n, iso, want)
		}
		// The rate counts the log's records, read or dropped: both reads
		// go over the same log.
		return sample{records: l.LogEndOffset(), elapsed: elapsed}, nil
	}
}

// compareReadCommitted reads the transactions' log whole, from the page
// cache, with ReadCommitted and with ReadLogEnd.
func compareReadCommitted(shape txnShape, value []byte) (c comparison, err error) {
	dir, err := tempDir()
	if err != nil {
		return c, err
	}
	defer removeAfter(dir, &err)
	l, err := log.Open(dir, log.Options{Fsync: log.FsyncNever()})
	if err != nil {
		return c, err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	committed, err := writeTxnLog(l, shape, value)
	if err != nil {
		return c, err
	}
	all := int64(shape.transactions * txnBatchRecords)
	ss, err := medians(shape.reps, readRun(l, log.ReadLogEnd, all), readRun(l, log.ReadCommitted, committed))
	if err != nil {
		return c, err
	}
	const test = "read, 10% aborted"
	printRate(test, "strand ReadLogEnd", ss[0], smallRecordSize, "Records, every record")
	printRate(test, "strand ReadCommitted", ss[1], smallRecordSize, "Records, aborted ones dropped; rate over all")
	return comparison{name: "read-committed-vs-log-end", value: ss[1].perSec() / ss[0].perSec(), bound: 0.7}, nil
}
