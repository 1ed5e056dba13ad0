// Command replicate runs three replicas of a partition as three OS
// processes on loopback, replicating with package replica over net/http,
// and shows Kafka's ISR at work:
//
//	go run ./examples/replicate -dir /tmp/strand-replicate
//
// starts itself three times (-node 1, 2, 3; each with its own data
// directory under -dir), produces with acks=all and MinInsyncReplicas 2,
// SIGKILLs follower 3 (the ISR shrinks to [1 2] and produces go on),
// gives its log records no other replica has, in an epoch the leader
// skipped, restarts it (it truncates them, catches up and rejoins the
// ISR), times produces with acks=1 and acks=all, stops the nodes and
// checks that every acknowledged record is in the log of every ISR member.
// Node 1 leads and plays the controller; electing leaders is a later
// issue.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/strandlog/strand/replica"
)

func main() {
	node := flag.Int("node", 0, "run as this node (started by the supervisor); 0 runs the supervisor")
	nodes := flag.Int("nodes", 3, "how many replicas")
	dir := flag.String("dir", "/tmp/strand-replicate", "data directory; node N uses DIR/node-N")
	peers := flag.String("peers", "", "node: every node's host:port, comma-separated, node 1 first")
	tick := flag.Duration("tick", 10*time.Millisecond, "how often nodes tick")
	lag := flag.Int("lag", 50, "replica.Config.ReplicaLagTicks")
	batches := flag.Int("batches", 300, "supervisor: acks=all batches to produce")
	latencies := flag.Int("latencies", 200, "supervisor: produces to time with acks=1 and with acks=all")
	flag.Parse()

	var err error
	if *node != 0 {
		err = runNode(nodeConfig{id: replica.NodeID(*node), dir: *dir, peers: parsePeers(*peers), tick: *tick, lag: *lag})
	} else {
		var self string
		if self, err = os.Executable(); err == nil {
			err = demo(cluster{exe: self, nodes: *nodes, dir: *dir, tick: *tick, lag: *lag}, *batches, *latencies, func(format string, args ...any) {
				fmt.Printf(format+"\n", args...)
			})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicate:", err)
		os.Exit(1)
	}
}

func parsePeers(s string) map[replica.NodeID]string {
	peers := map[replica.NodeID]string{}
	for i, addr := range strings.Split(s, ",") {
		peers[replica.NodeID(i+1)] = addr
	}
	return peers
}

// demo is the scenario the command shows and its test checks.
func demo(c cluster, batches, latencies int, logf func(string, ...any)) error {
	if err := c.start(); err != nil {
		return err
	}
	defer c.kill()
	rep, err := scenario(&c, batches, latencies, logf)
	if err != nil {
		return err
	}
	logf("acknowledged %d records (%d while node 3 was down); ISR after the kill %v, after the restart %v",
		len(rep.acked), rep.ackedWhileDown, rep.isrAfterKill, rep.isrAfterRestart)
	return nil
}
