package group_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// A Service keeps committed offsets in the data directory's
// __consumer_offsets topic: they survive a restart, and a group's lag is
// measured against the partitions' high watermarks.
func ExampleService() {
	data, _ := os.MkdirTemp("", "strand-groups")
	defer os.RemoveAll(data)
	ctx := context.Background()

	d, _ := log.OpenDir(data, log.DirOptions{})
	_ = d.CreateTopic("orders", log.TopicConfig{Partitions: 1})
	p, _ := d.Partition("orders", 0)
	for range 10 {
		_, _ = p.Append([]segment.Record{log.NewRecord(nil, []byte("order"))})
	}
	s, _ := group.OpenService(d, group.ServiceOptions{Partitions: 1})
	_, _ = s.OffsetCommit(ctx, group.OffsetCommitRequest{GroupID: "billing", GenerationID: -1,
		Topics: []group.OffsetCommitTopic{{Name: "orders", Partitions: []group.OffsetCommitPartition{{Offset: 7, LeaderEpoch: -1}}}}})
	_ = s.Close()
	_ = d.Close()

	// A restart: the Service replays the offsets topic.
	d, _ = log.OpenDir(data, log.DirOptions{})
	defer d.Close()
	s, _ = group.OpenService(d, group.ServiceOptions{})
	defer s.Close()
	lag, _ := s.Lag(ctx, "billing", log.ReadCommitted)
	for _, l := range lag {
		fmt.Printf("%s-%d committed %d, end %d, lag %d\n", l.Topic, l.Partition, l.Committed, l.End, l.Lag)
	}
	// Output:
	// orders-0 committed 7, end 10, lag 3
}

// A transactional producer commits a consumer's offsets inside its
// transaction (KIP-447): they stay pending, and a read that asks for
// stable offsets is told to wait, until the transaction's marker; COMMIT
// makes them the group's, ABORT drops them.
func ExampleService_TxnCommitOffsets() {
	data, _ := os.MkdirTemp("", "strand-groups")
	defer os.RemoveAll(data)
	ctx := context.Background()
	d, _ := log.OpenDir(data, log.DirOptions{})
	defer d.Close()
	_ = d.CreateTopic("orders", log.TopicConfig{Partitions: 1})
	s, _ := group.OpenService(d, group.ServiceOptions{Partitions: 1})
	defer s.Close()

	producer := idempotence.ProducerIDAndEpoch{ProducerID: 42, Epoch: 0}
	commit := func(offset int64) {
		_, _ = s.TxnCommitOffsets(ctx, group.TxnOffsetCommitRequest{GroupID: "billing", Producer: producer, GenerationID: -1,
			Topics: []group.OffsetCommitTopic{{Name: "orders", Partitions: []group.OffsetCommitPartition{{Offset: offset, LeaderEpoch: -1}}}}})
	}
	fetch := func() {
		r, _ := s.OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: "billing", RequireStable: true,
			Topics: []group.OffsetFetchTopic{{Name: "orders", Partitions: []int32{0}}}})
		if f := r.Topics[0].Partitions[0]; f.Err != nil {
			fmt.Println("orders-0:", kafkaerr.CodeOf(f.Err), "(retry later)")
		} else {
			fmt.Println("orders-0 committed", f.Offset)
		}
	}
	commit(7)
	fetch()
	_ = s.EndTxn(ctx, producer, true)
	fetch()
	commit(9)
	_ = s.EndTxn(ctx, producer, false)
	fetch()
	// Output:
	// orders-0: UNSTABLE_OFFSET_COMMIT (retry later)
	// orders-0 committed 7
	// orders-0 committed 7
}
