// Command exactlyonce consumes a topic in a consumer group, transforms each
// record and produces the result to another topic, exactly once however
// often it is killed: a consumer.TransactSession commits the output of what
// it read in one transaction with the group's offsets past it, so a
// restart resumes from the last committed offsets, and what a killed run
// produced after them is aborted (the next session of the same
// transactional id aborts it) and never read by a ReadCommitted consumer.
//
//	go run . -dir /tmp/eo -records 10000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/strandlog/strand/consumer"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
)

const inputTopic, outputTopic, groupID, transactionID = "input", "output", "transformers", "exactlyonce-transformer"

func main() {
	dir := flag.String("dir", "", "data directory (required)")
	records := flag.Int("records", 1000, "input records to make and transform")
	flag.Parse()
	if *dir == "" || *records < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dir, *records, nil); err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(1)
	}
	fmt.Printf("transformed %d input records\n", *records)
}

// inputValue is the value of the input record at offset o.
func inputValue(o int64) string { return fmt.Sprintf("record %d", o) }

// transform is what the output holds for an input record.
func transform(offset int64, value []byte) []byte {
	return fmt.Appendf(nil, "%s (input offset %d)", strings.ToUpper(string(value)), offset)
}

// run makes the input (up to records records; a restart appends what a
// kill left out), then transforms it in the group from its committed
// offsets, one transaction per Poll, until the group has committed past
// the last input record. If started is not nil it is called when the
// first records are read, or at the end if there were none to read.
func run(dir string, records int, started func()) error {
	d, err := log.OpenDir(dir, log.DirOptions{})
	if err != nil {
		return err
	}
	defer d.Close()
	for _, topic := range []string{inputTopic, outputTopic} {
		if err := d.CreateTopic(topic, log.TopicConfig{}); err != nil && !errors.Is(err, log.ErrTopicExists) {
			return err
		}
	}
	if err := makeInput(d, int64(records)); err != nil {
		return err
	}
	// One process, one member: the group need not wait for others to join
	// (group.initial.rebalance.delay.ms).
	s, err := group.OpenService(d, group.ServiceOptions{Config: group.Config{InitialRebalanceDelay: -1}})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := context.Background()
	ts, err := consumer.NewTransactSession(s, consumer.TransactOptions{TransactionalID: transactionID,
		Consumer: consumer.Options{Group: groupID, Topics: []string{inputTopic}}})
	if err != nil {
		return err
	}
	defer ts.Close(ctx)
	for pos, err := committedPosition(s); pos < int64(records); pos, err = committedPosition(s) {
		if err != nil {
			return err
		}
		ms, err := ts.Poll(ctx)
		if len(ms) > 0 && started != nil {
			started()
			started = nil
		}
		for _, m := range ms {
			if err == nil {
				_, err = ts.Produce(ctx, outputTopic, 0, log.NewRecord(nil, transform(m.Offset, m.Value)))
			}
		}
		if _, err := ts.End(ctx, err == nil); err != nil {
			return err
		}
	}
	if started != nil {
		started() // there was nothing left to read
	}
	return nil
}

// makeInput appends the input records from the partition's end to n. Each
// record's value names its offset.
func makeInput(d *log.Dir, n int64) error {
	in, err := d.Partition(inputTopic, 0)
	if err != nil {
		return err
	}
	_, _, end, err := in.Offsets()
	for ; err == nil && end < n; end++ {
		_, err = in.Append([]log.Record{log.NewRecord(nil, []byte(inputValue(end)))})
	}
	return err
}

// committedPosition returns the group's committed offset of the input, 0
// if it has none.
func committedPosition(s *group.Service) (int64, error) {
	r, err := s.OffsetFetch(context.Background(), group.OffsetFetchRequest{GroupID: groupID, RequireStable: true,
		Topics: []group.OffsetFetchTopic{{Name: inputTopic, Partitions: []int32{0}}}})
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return 0, err
	}
	return max(r.Topics[0].Partitions[0].Offset, 0), r.Topics[0].Partitions[0].Err
}
