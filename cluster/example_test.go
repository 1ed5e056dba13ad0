package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// Three nodes in one process, over the in-memory network and metadata
// log a test would use; an application gives each node its own
// Transport (its RPC) and MetadataLog (etcd raft, say) instead.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net := cluster.NewMemoryNetwork()
	defer net.Close()
	md := cluster.NewMemoryMetadata(1, 2, 3)
	nodes := map[replica.NodeID]*cluster.Node{}
	for id := range replica.NodeID(3) {
		id++
		mdl, err := md.Open(id)
		if err != nil {
			panic(err)
		}
		defer mdl.Close()
		n, err := cluster.New(cluster.Options{
			ID: id, Dir: "/data", FS: vfs.NewMem(), Transport: net.Transport(id), Metadata: mdl,
			Logger: slog.New(slog.DiscardHandler), MinInsyncReplicas: 2,
		})
		if err != nil {
			panic(err)
		}
		defer n.Close()
		net.Attach(id, n)
		nodes[id] = n
	}

	for _, n := range nodes {
		if err := n.WaitRegistered(ctx); err != nil {
			panic(err)
		}
	}
	// Any node takes the controller's requests.
	if err := nodes[2].CreateTopic(ctx, "orders", cluster.TopicSpec{Partitions: 1, ReplicationFactor: 3}); err != nil {
		panic(err)
	}
	batch, _ := segment.AppendBatch(nil, []segment.Record{{Value: []byte("apples")}, {Value: []byte("pears")}}, segment.BuildOptions{})
	for {
		// A producer goes to the partition's leader, as the metadata
		// names it, and asks again while leadership settles.
		leader := nodes[2].Metadata().Partition("orders", 0).Leader
		if n := nodes[leader]; n != nil {
			r, err := n.Produce(ctx, "orders", 0, replica.AcksAll, batch)
			if err == nil {
				fmt.Println("acknowledged by all in-sync replicas at offsets", r.BaseOffset, "to", r.LastOffset)
				bs, err := n.Read(ctx, "orders", 0, 0, 1<<20, log.ReadCommitted)
				if err != nil {
					panic(err)
				}
				for b, err := range bs.All() {
					if err != nil {
						panic(err)
					}
					for rec, err := range b.Records() {
						if err != nil {
							panic(err)
						}
						fmt.Println(string(rec.Value))
					}
				}
				bs.Close()
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// acknowledged by all in-sync replicas at offsets 0 to 1
	// apples
	// pears
}
