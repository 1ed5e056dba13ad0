package controller_test

import (
	"fmt"

	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
)

// The application's loop around a controller: decisions come out of Ready
// as records, which the application stores (here a slice standing for a
// replicated store) before it sends the messages. A broker that stops
// heartbeating is fenced and its partitions elect new leaders; a new
// controller over the stored records carries on in a higher epoch.
func Example() {
	var store []controller.Record
	flush := func(c *controller.Controller) {
		rd := c.Ready()
		store = append(store, rd.Records...)
		for _, m := range rd.Messages {
			_ = m // send to m.Head().To
		}
		c.Advance(rd)
	}
	c, _ := controller.New(controller.Config{Node: 0, SessionTimeoutTicks: 3, MinInsyncReplicas: 2}, controller.NewState())
	epochs := map[replica.NodeID]int64{}
	for _, b := range []replica.NodeID{1, 2, 3} {
		epochs[b], _ = c.Register(b, 1, true) // each broker's first start
		_, _ = c.Heartbeat(b, epochs[b])
	}
	_ = c.PlaceTopic("orders", 1, 3, 0, controller.TopicSpec{})
	flush(c)
	p := c.State().Partitions[controller.TopicPartition{Topic: "orders", Partition: 0}]
	fmt.Println("replicas", p.Replicas, "leader", p.Leader, "epoch", p.LeaderEpoch)

	for range 3 { // broker 1 stops heartbeating
		_, _ = c.Heartbeat(2, epochs[2])
		_, _ = c.Heartbeat(3, epochs[3])
		_ = c.Tick()
	}
	flush(c)
	p = c.State().Partitions[controller.TopicPartition{Topic: "orders", Partition: 0}]
	fmt.Println("leader", p.Leader, "epoch", p.LeaderEpoch, "isr", p.ISR)

	s, _ := controller.Replay(store)
	next, _ := controller.New(controller.Config{Node: 2, SessionTimeoutTicks: 3, MinInsyncReplicas: 2}, s)
	fmt.Println("controller epoch", next.State().Epoch)
	// Output:
	// replicas [1 2 3] leader 1 epoch 0
	// leader 2 epoch 1 isr [2 3]
	// controller epoch 1
}
