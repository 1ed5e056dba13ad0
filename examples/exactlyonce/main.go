// Command exactlyonce consumes a topic, transforms each record and produces
// the result to another topic, exactly once however often it is killed: the
// output records of a batch of input and the input position after it are
// written in one transaction, so a restart resumes from the position of the
// last committed transaction and what a killed run produced after it is
// aborted (the next TransactionalProducer with the same transactional id
// aborts it) and never read by a ReadCommitted consumer.
//
// The position is a record of the program's own compacted topic, written
// by the transactional producer like the output. A consumer group's
// offsets would go through TransactionalProducer.CommitOffsets instead,
// with a log.TxnOffsetCommitter such as a group coordinator.
//
//	go run . -dir /tmp/eo -records 10000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/strandlog/strand/log"
)

const (
	inputTopic     = "input"
	outputTopic    = "output"
	positionsTopic = "positions"
	transactionID  = "exactlyonce-transformer"
)

// positionKey is the key of the input position's records.
var positionKey = []byte(inputTopic + "-0")

func main() {
	dir := flag.String("dir", "", "data directory (required)")
	records := flag.Int("records", 1000, "input records to make and transform")
	batch := flag.Int("batch", 10, "input records per transaction")
	flag.Parse()
	if *dir == "" || *records < 0 || *batch < 1 {
		flag.Usage()
		os.Exit(2)
	}
	n, err := run(*dir, *records, *batch, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(1)
	}
	fmt.Printf("transformed input up to offset %d\n", n)
}

// inputValue is the value of the input record at offset o.
func inputValue(o int64) string { return fmt.Sprintf("record %d", o) }

// transform is what the output holds for an input record.
func transform(offset int64, value []byte) []byte {
	return fmt.Appendf(nil, "%s (input offset %d)", strings.ToUpper(string(value)), offset)
}

// run makes the input (up to records records; a restart appends what a
// kill left out), then transforms it from the last committed position, in
// transactions of batch input records. It returns the position reached.
// If started is not nil it is called when the transformation starts.
func run(dir string, records, batch int, started func()) (int64, error) {
	d, err := log.OpenDir(dir, log.DirOptions{})
	if err != nil {
		return 0, err
	}
	defer d.Close()
	for _, t := range []struct {
		name string
		cfg  log.TopicConfig
	}{{inputTopic, log.TopicConfig{}}, {outputTopic, log.TopicConfig{}}, {positionsTopic, log.TopicConfig{Compact: log.Compacted}}} {
		if err := d.CreateTopic(t.name, t.cfg); err != nil && !errors.Is(err, log.ErrTopicExists) {
			return 0, err
		}
	}
	in, err := d.Partition(inputTopic, 0)
	if err != nil {
		return 0, err
	}
	if err := makeInput(in, int64(records)); err != nil {
		return 0, err
	}
	// A predecessor's open transaction is aborted here.
	tp, err := d.NewTransactionalProducer(transactionID, log.TransactionalOptions{})
	if err != nil {
		return 0, err
	}
	defer tp.Close()
	pos, err := committedPosition(d)
	if err != nil {
		return 0, err
	}
	if started != nil {
		started()
	}
	ctx := context.Background()
	for pos < int64(records) {
		next, err := transformBatch(ctx, tp, in, pos, batch)
		if err != nil {
			return pos, err
		}
		pos = next
	}
	return pos, nil
}

// makeInput appends the input records from the partition's end to n. Each
// record's value names its offset.
func makeInput(in *log.Partition, n int64) error {
	_, _, end, err := in.Offsets()
	if err != nil {
		return err
	}
	for end < n {
		var recs []log.Record
		for o := end; o < min(end+100, n); o++ {
			recs = append(recs, log.NewRecord(nil, []byte(inputValue(o))))
		}
		res, err := in.Append(recs)
		if err != nil {
			return err
		}
		end = res.LastOffset + 1
	}
	return nil
}

// committedPosition returns the input offset after the last committed
// transaction.
func committedPosition(d *log.Dir) (int64, error) {
	p, err := d.Partition(positionsTopic, 0)
	if err != nil {
		return 0, err
	}
	start, _, _, err := p.Offsets()
	if err != nil {
		return 0, err
	}
	var pos int64
	for r, err := range p.Records(start, log.ReadCommitted) {
		if err != nil {
			return 0, err
		}
		if pos, err = strconv.ParseInt(string(r.Value), 10, 64); err != nil {
			return 0, fmt.Errorf("%s offset %d: %w", positionsTopic, r.Offset, err)
		}
	}
	return pos, nil
}

// transformBatch transforms up to batch input records from pos in one
// transaction with the position after them, and returns that position.
func transformBatch(ctx context.Context, tp *log.TransactionalProducer, in *log.Partition, pos int64, batch int) (int64, error) {
	if err := tp.Begin(); err != nil {
		return pos, err
	}
	next := pos
	for r, err := range in.Records(pos, log.ReadCommitted) {
		if err != nil {
			return pos, errors.Join(err, tp.Abort(ctx))
		}
		if err := tp.ProduceAsync(ctx, outputTopic, 0, log.NewRecord(nil, transform(r.Offset, r.Value)), nil); err != nil {
			return pos, errors.Join(err, tp.Abort(ctx))
		}
		next = r.Offset + 1
		if next-pos == int64(batch) {
			break
		}
	}
	value := []byte(strconv.FormatInt(next, 10))
	if _, err := tp.Produce(ctx, positionsTopic, 0, log.NewRecord(positionKey, value)); err != nil {
		return pos, errors.Join(err, tp.Abort(ctx))
	}
	// A record that failed fails the commit; the abort then leaves the
	// position where it was.
	if err := tp.Commit(ctx); err != nil {
		return pos, errors.Join(err, tp.Abort(ctx))
	}
	return next, nil
}
