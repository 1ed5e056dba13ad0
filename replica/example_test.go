package replica_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// Two replicas of a partition in one process: node 1 leads, node 2
// follows. The loop is what an application runs for each partition; here
// the "network" is a slice, and the controller's decision is handed to
// both nodes directly.
func Example() {
	dir, _ := os.MkdirTemp("", "replica-example")
	defer os.RemoveAll(dir)

	nodes := map[replica.NodeID]*replica.Partition{}
	logs := map[replica.NodeID]*log.Log{}
	for _, id := range []replica.NodeID{1, 2} {
		l, err := log.Open(filepath.Join(dir, fmt.Sprint(id), "orders-0"), log.Options{ExternalHighWatermark: true})
		if err != nil {
			panic(err)
		}
		defer l.Close()
		p, err := replica.New(replica.Config{ID: id, Topic: "orders", Partition: 0, Log: l})
		if err != nil {
			panic(err)
		}
		nodes[id], logs[id] = p, l
	}

	var network []replica.Message
	process := func() { // one round of every node's Ready, then the network
		for id, p := range nodes {
			for p.HasReady() {
				rd := p.Ready()
				if err := replica.ApplyWrites(logs[id], rd.Writes); err != nil {
					p.Fail(err)
				}
				network = append(network, rd.Messages...)
				for _, r := range rd.Results {
					fmt.Printf("produce %d: offsets %d to %d, err %v\n", r.ID, r.BaseOffset, r.LastOffset, r.Err)
				}
				p.Advance(rd)
			}
		}
		msgs := network
		network = nil
		for _, m := range msgs {
			nodes[m.Head().To].Step(m)
		}
	}

	for id, p := range nodes {
		p.Step(&replica.LeaderAndISR{
			Header: replica.Header{From: replica.NoNode, To: id, Topic: "orders"},
			Leader: 1, LeaderEpoch: 1, PartitionEpoch: 1,
			Replicas: []replica.NodeID{1, 2}, ISR: []replica.NodeID{1, 2},
		})
	}
	process()

	batch, _ := segment.AppendBatch(nil, []segment.Record{{Value: []byte("hello")}, {Value: []byte("world")}}, segment.BuildOptions{})
	err := nodes[1].Step(&replica.Produce{
		Header: replica.Header{From: 99, To: 1, Topic: "orders"},
		ID:     7, Acks: replica.AcksAll, Batch: batch,
	})
	fmt.Println("accepted:", err == nil)
	for range 4 {
		process()
	}
	for _, id := range []replica.NodeID{1, 2} {
		fmt.Printf("node %d: log end %d\n", id, logs[id].LogEndOffset())
	}
	// Output:
	// accepted: true
	// produce 7: offsets 0 to 1, err <nil>
	// node 1: log end 2
	// node 2: log end 2
}
