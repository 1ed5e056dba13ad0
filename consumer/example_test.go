package consumer_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strandlog/strand/consumer"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// A Consumer is a member of a consumer group: it gets partitions, reads
// them from the group's committed offsets, and commits as it goes; the
// group's lag is what it has not committed yet.
func ExampleConsumer() {
	data, _ := os.MkdirTemp("", "strand-consumer")
	defer os.RemoveAll(data)
	d, _ := log.OpenDir(data, log.DirOptions{})
	defer d.Close()
	_ = d.CreateTopic("orders", log.TopicConfig{Partitions: 1})
	p, _ := d.Partition("orders", 0)
	for _, v := range []string{"tea", "cake", "jam"} {
		_, _ = p.Append([]segment.Record{log.NewRecord(nil, []byte(v))})
	}
	s, _ := group.OpenService(d, group.ServiceOptions{Partitions: 1, Config: group.Config{InitialRebalanceDelay: -1}})
	defer s.Close()

	ctx := context.Background()
	c, err := consumer.New(s, consumer.Options{
		Group:  "kitchen",
		Topics: []string{"orders"},
		OnAssigned: func(_ context.Context, _ *consumer.Consumer, tps []consumer.TopicPartition) {
			fmt.Println("assigned", tps)
		},
		OnRevoked: func(_ context.Context, _ *consumer.Consumer, tps []consumer.TopicPartition) {
			fmt.Println("revoked", tps)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ms, _ := c.Poll(ctx)
	for _, m := range ms {
		fmt.Printf("%v offset %d: %s\n", m.TopicPartition, m.Offset, m.Value)
	}
	lag, _ := s.Lag(ctx, "kitchen", log.ReadCommitted)
	fmt.Println("lag before the commit:", lag[0].Lag)
	_ = c.CommitSync(ctx)
	lag, _ = s.Lag(ctx, "kitchen", log.ReadCommitted)
	fmt.Println("lag after:", lag[0].Lag)
	_ = c.Close(ctx)
	// Output:
	// assigned [orders-0]
	// orders-0 offset 0: tea
	// orders-0 offset 1: cake
	// orders-0 offset 2: jam
	// lag before the commit: 3
	// lag after: 0
	// revoked [orders-0]
}
