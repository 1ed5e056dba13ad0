// Command cluster runs a three-node Strand cluster on loopback: three OS
// processes, each a node with its own data directory, that replicate
// their partitions with package replica over net/http, and whose
// controller (package replica/controller) keeps its records in a raft log
// replicated by etcd raft. Whichever node leads the raft group is the
// active controller: it registers brokers, fences those that stop
// heartbeating, elects partition leaders and answers the partition
// leaders' ISR changes, each decision a record committed through raft
// before anyone acts on it; every node applies the committed records and
// acts on the leadership and ISR they give.
//
//	cd examples/cluster && go run . up
//
// starts the nodes, with their data under /tmp/strand-cluster (-dir), and
// stops them cleanly on Ctrl-C; in another shell, in examples/cluster:
//
//	go run . create-topic -topic orders -partitions 3
//	go run . produce -topic orders hello world
//	go run . consume -topic orders
//	go run . status
//	go run . reassign -generate -topics orders -brokers 1,2,3
//
// and the status page at http://ADDRESS/ of any node (the JSON at /status).
// With up -kafka every node also serves Kafka clients on a port of its own
// (package examples/kafka/broker, given the node as its broker.Cluster):
// Metadata names the real leaders, and clients follow them as they move.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/strandlog/strand/assign"
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/replica"
)

const usage = `usage: cluster COMMAND [flags]

commands:
  up            start three nodes on loopback (the default command; -kafka: Kafka clients too)
  create-topic  create a topic
  produce       produce records (arguments, or lines of standard input)
  consume       print a partition's records up to its high watermark
  reassign      generate, execute, verify or cancel a reassignment (kafka-reassign-partitions JSON)
  elect         preferred leader election for a partition
  status        print brokers and partitions
  node          run one node (started by up)

Run cluster COMMAND -h for a command's flags.`

func main() {
	args := os.Args[1:]
	cmd := "up"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	commands := map[string]func([]string) error{
		"up": up, "node": nodeCmd, "create-topic": createTopic, "produce": produceCmd,
		"consume": consumeCmd, "reassign": reassign, "elect": elect, "status": statusCmd,
	}
	run, ok := commands[cmd]
	if !ok {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := run(args); err != nil {
		fmt.Fprintf(os.Stderr, "cluster %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

// nodeFlags are the tuning flags of a node, which up passes on. The
// replicas' defaults are Kafka's, which hold on a loaded machine: a fetch
// or an acks=all produce waits request.timeout.ms, and a follower stays
// in the ISR for replica.lag.time.max.ms, 30 s, without catching up. A
// follower that dies does not stall acks=all that long: the controller
// fences it after a session and takes it out of the ISR, and the leader
// then stops waiting for it (replica.Partition, as Kafka's
// isReplicaIsrEligible).
type nodeFlags struct {
	tick, controlTick, heartbeat time.Duration
	replicaLag, requestTimeout   time.Duration
	session, minISR, rebalance   int
	snapshotEntries              int
	logLevel                     slog.Level
	tls                          tlsFiles
	// The Kafka brokers' security (with -kafka).
	kafkaUsers, kafkaSuperUsers string
	kafkaAuthorize              bool
}

func (f *nodeFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.tick, "tick", 100*time.Millisecond, "how often replicas tick")
	fs.DurationVar(&f.replicaLag, "replica-lag", 30*time.Second, "how long a follower may go without catching up before it leaves the ISR (replica.lag.time.max.ms)")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 30*time.Second, "how long a follower's fetch or a leader's ISR change goes unanswered before it is sent again, and an acks=all produce waits (replica.socket.timeout.ms, request.timeout.ms)")
	fs.DurationVar(&f.controlTick, "control-tick", 100*time.Millisecond, "how often raft and the controller tick (raft's election timeout is 10 to 20 ticks)")
	fs.IntVar(&f.session, "session", 30, "broker session timeout, in control ticks")
	fs.DurationVar(&f.heartbeat, "heartbeat", 500*time.Millisecond, "how often brokers heartbeat")
	fs.IntVar(&f.minISR, "min-isr", 2, "min.insync.replicas of every partition")
	fs.IntVar(&f.rebalance, "rebalance", 0, "automatic preferred-leader rebalance every this many control ticks (0: never)")
	fs.IntVar(&f.snapshotEntries, "snapshot-entries", 1000, "snapshot the controller's state and compact the raft log every this many applied entries (0: never)")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "the least level a node logs: DEBUG, INFO, WARN or ERROR")
	fs.StringVar(&f.kafkaUsers, "kafka-users", "", "file of NAME:PASSWORD lines: Kafka users whose SCRAM credentials the brokers set if the cluster has none for them")
	fs.BoolVar(&f.kafkaAuthorize, "kafka-authorize", false, "check every Kafka request against the cluster's ACLs, which CreateAcls and DeleteAcls manage")
	fs.StringVar(&f.kafkaSuperUsers, "kafka-super-users", "", "comma-separated principals the ACLs allow everything, such as User:admin (super.users)")
	f.tls.register(fs)
}

func (f *nodeFlags) args() []string {
	return append([]string{"-tick", f.tick.String(), "-replica-lag", f.replicaLag.String(), "-request-timeout", f.requestTimeout.String(),
		"-control-tick", f.controlTick.String(), "-session", fmt.Sprint(f.session), "-heartbeat", f.heartbeat.String(),
		"-min-isr", fmt.Sprint(f.minISR), "-rebalance", fmt.Sprint(f.rebalance), "-snapshot-entries", fmt.Sprint(f.snapshotEntries),
		"-log-level", f.logLevel.String(), "-kafka-users", f.kafkaUsers, fmt.Sprintf("-kafka-authorize=%t", f.kafkaAuthorize),
		"-kafka-super-users", f.kafkaSuperUsers}, f.tls.args()...)
}

// kafkaSecurity is what the Kafka flags of nodeFlags read.
type kafkaSecurity struct {
	users      map[string]string
	superUsers []string
}

func (f *nodeFlags) kafkaSecurity() (kafkaSecurity, error) {
	var sec kafkaSecurity
	if f.kafkaUsers != "" {
		var err error
		if sec.users, err = broker.ReadUsers(f.kafkaUsers); err != nil {
			return sec, fmt.Errorf("-kafka-users: %w", err)
		}
	}
	if f.kafkaSuperUsers != "" {
		sec.superUsers = strings.Split(f.kafkaSuperUsers, ",")
	}
	return sec, nil
}

func nodeCmd(args []string) error {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	id := fs.Int("id", 0, "this node's id (1, 2 or 3)")
	dir := fs.String("dir", "", "this node's data directory")
	peers := fs.String("peers", "", "every node's host:port, comma-separated, node 1 first")
	kafka := fs.String("kafka", "", "every node's Kafka host:port, comma-separated, node 1 first: this node serves Kafka clients at its own (default: no Kafka)")
	kafkaSASL := fs.String("kafka-sasl", "", "every node's SASL/SCRAM Kafka host:port (listener SASL_PLAINTEXT), comma-separated, node 1 first; needs -kafka")
	var nf nodeFlags
	nf.register(fs)
	fs.Parse(args)
	pm, err := parsePeers(*peers)
	if err != nil {
		return err
	}
	if _, ok := pm[replica.NodeID(*id)]; !ok || *dir == "" {
		return fmt.Errorf("-id %d is not one of the %d peers, or no -dir", *id, len(pm))
	}
	var km map[replica.NodeID]string
	if *kafka != "" {
		if km, err = parsePeers(*kafka); err != nil {
			return fmt.Errorf("-kafka: %w", err)
		}
		if len(km) != len(pm) {
			return fmt.Errorf("-kafka names %d addresses for %d peers", len(km), len(pm))
		}
	}
	var sm map[replica.NodeID]string
	if *kafkaSASL != "" {
		if sm, err = parsePeers(*kafkaSASL); err != nil {
			return fmt.Errorf("-kafka-sasl: %w", err)
		}
		if len(sm) != len(pm) || km == nil {
			return fmt.Errorf("-kafka-sasl names %d addresses for %d peers, or no -kafka", len(sm), len(pm))
		}
	}
	sec, err := nf.kafkaSecurity()
	if err != nil {
		return err
	}
	if nf.tick <= 0 {
		return fmt.Errorf("-tick %v, must be positive", nf.tick)
	}
	tls, err := nf.tls.load()
	if err != nil {
		return err
	}
	return runNode(nodeConfig{
		id: replica.NodeID(*id), dir: *dir, peers: pm, kafka: km, kafkaSASL: sm,
		kafkaUsers: sec.users, kafkaAuthorize: nf.kafkaAuthorize, kafkaSuperUsers: sec.superUsers,
		tick: nf.tick, lag: nf.replicaLag, requestTimeout: nf.requestTimeout,
		controlTick: nf.controlTick, session: nf.session, heartbeat: nf.heartbeat,
		minISR: nf.minISR, rebalance: nf.rebalance, snapshotEntries: nf.snapshotEntries, logLevel: nf.logLevel, tls: tls,
	})
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "/tmp/strand-cluster", "data directory; node N uses DIR/node-N")
	kafka := fs.Bool("kafka", false, "each node serves Kafka clients too, on a port of its own")
	kafkaSASL := fs.Bool("kafka-sasl", false, "with -kafka, each node serves SASL/SCRAM Kafka clients too (listener SASL_PLAINTEXT), on another port of its own")
	var nf nodeFlags
	nf.register(fs)
	fs.Parse(args)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	tls, err := nf.tls.load()
	if err != nil {
		return err
	}
	if _, err := nf.kafkaSecurity(); err != nil {
		return err
	}
	s := &supervisor{exe: exe, dir: *dir, args: nf.args(), stdout: os.Stderr, withKafka: *kafka, withSASL: *kafka && *kafkaSASL, tls: tls}
	if prev, err := readPeers(*dir); err == nil {
		s.peers = prev // a restarted cluster keeps its addresses: the raft log names them
	}
	if prev, err := readAddrs(*dir, kafkaFile); err == nil && *kafka {
		s.kafka = prev // and its clients' bootstrap addresses
	}
	if prev, err := readAddrs(*dir, saslFile); err == nil && s.withSASL {
		s.sasl = prev
	}
	if err := s.start(3); err != nil {
		s.kill()
		return err
	}
	for _, id := range s.ids() {
		fmt.Printf("node %d: %s (data in %s)\n", id, tls.url(s.peers[id], "/"), s.nodeDir(id))
		if *kafka {
			fmt.Printf("node %d: Kafka at %s\n", id, s.kafka[id])
		}
		if s.withSASL {
			fmt.Printf("node %d: Kafka SASL/SCRAM at %s\n", id, s.sasl[id])
		}
	}
	if *kafka {
		fmt.Printf("Kafka clients bootstrap from %s\n", formatPeers(s.kafka))
	}
	fmt.Printf("in another shell, in examples/cluster: go run . create-topic -dir %s -topic orders -partitions 3\n", *dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Println("stopping the nodes (controlled shutdown)")
	return s.stop()
}

// clientCmd is a subcommand that talks to the cluster: its flags find the
// cluster, by its data directory (where up wrote the addresses) or by the
// addresses themselves, beside the subcommand's own.
type clientCmd struct {
	fs         *flag.FlagSet
	dir, peers *string
	tls        tlsFiles
}

func newClientCmd(name string) *clientCmd {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	c := &clientCmd{
		fs:    fs,
		dir:   fs.String("dir", "/tmp/strand-cluster", "the cluster's data directory (up writes the node addresses there)"),
		peers: fs.String("peers", "", "the nodes' host:port, comma-separated, node 1 first (instead of -dir)"),
	}
	c.tls.register(fs)
	return c
}

// partitionFlags adds -topic and -partition.
func (c *clientCmd) partitionFlags() (topic *string, partition *int) {
	return c.fs.String("topic", "", "topic"), c.fs.Int("partition", 0, "partition")
}

// run parses args, finds the cluster and calls fn with 30 seconds to do its
// work.
func (c *clientCmd) run(args []string, fn func(ctx context.Context, cl *client) error) error {
	c.fs.Parse(args)
	var pm map[replica.NodeID]string
	var err error
	if *c.peers != "" {
		pm, err = parsePeers(*c.peers)
	} else {
		pm, err = readPeers(*c.dir)
	}
	if err != nil {
		return err
	}
	tls, err := c.tls.load()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return fn(ctx, newClient(pm, tls))
}

func createTopic(args []string) error {
	c := newClientCmd("create-topic")
	var req topicRequest
	c.fs.StringVar(&req.Topic, "topic", "", "topic name")
	c.fs.IntVar(&req.Partitions, "partitions", 1, "partitions")
	c.fs.IntVar(&req.ReplicationFactor, "replication-factor", 3, "replicas per partition")
	c.fs.BoolVar(&req.Unclean, "unclean", false, "allow unclean leader election (may lose acknowledged records)")
	return c.run(args, func(ctx context.Context, cl *client) error {
		if err := cl.callRetry(ctx, "/controller/topics", req, nil); err != nil {
			return err
		}
		fmt.Printf("created topic %s with %d partitions, replication factor %d\n", req.Topic, req.Partitions, req.ReplicationFactor)
		return nil
	})
}

// produceTo produces one batch to a partition's leader, following
// leadership changes until ctx ends.
func (c *client) produceTo(ctx context.Context, topic string, partition int32, acks string, values ...[]byte) (produced, error) {
	for {
		leader, err := c.leaderOf(ctx, topic, partition)
		if err == nil {
			var p produced
			// A leader named before it added its replica answers
			// UNKNOWN_TOPIC_OR_PARTITION, which Kafka's clients retry too.
			p, err = c.produce(ctx, leader, topic, partition, acks, values...)
			if err == nil || !retriable(err) && !errors.Is(err, replica.ErrUnknownTopicOrPartition) {
				return p, err
			}
		}
		select {
		case <-ctx.Done():
			return produced{}, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func produceCmd(args []string) error {
	c := newClientCmd("produce")
	topic, partition := c.partitionFlags()
	acks := c.fs.String("acks", "all", "acks: all, 1 or 0")
	return c.run(args, func(ctx context.Context, cl *client) error {
		values := c.fs.Args()
		if len(values) == 0 {
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() {
				values = append(values, sc.Text())
			}
		}
		for _, v := range values {
			p, err := cl.produceTo(ctx, *topic, int32(*partition), *acks, []byte(v))
			if err != nil {
				return err
			}
			fmt.Printf("%s-%d@%d\n", *topic, *partition, p.BaseOffset)
		}
		return nil
	})
}

func consumeCmd(args []string) error {
	c := newClientCmd("consume")
	topic, partition := c.partitionFlags()
	return c.run(args, func(ctx context.Context, cl *client) error {
		leader, err := cl.leaderOf(ctx, *topic, int32(*partition))
		if err != nil {
			return err
		}
		recs, err := cl.consumeAll(ctx, leader, *topic, int32(*partition))
		if err != nil {
			return err
		}
		for _, r := range recs {
			fmt.Printf("%d\t%s\n", r.Offset, r.Value)
		}
		return nil
	})
}

func reassign(args []string) error {
	c := newClientCmd("reassign")
	generate := c.fs.Bool("generate", false, "print the current assignment of -topics and a proposed one over -brokers")
	execute := c.fs.Bool("execute", false, "start the reassignment of -reassignment-json-file")
	verify := c.fs.Bool("verify", false, "report where each partition of -reassignment-json-file stands")
	cancelRa := c.fs.Bool("cancel", false, "cancel the reassignments of -reassignment-json-file's partitions")
	file := c.fs.String("reassignment-json-file", "", "kafka-reassign-partitions JSON ('-' for standard input)")
	topics := c.fs.String("topics", "", "generate: the topics to move, comma-separated")
	brokers := c.fs.String("brokers", "1,2,3", "generate: the brokers to move them to, comma-separated")
	return c.run(args, func(ctx context.Context, cl *client) error {
		if *generate {
			return generateReassignment(ctx, cl, *topics, *brokers)
		}
		var body json.RawMessage
		var err error
		if *file == "-" {
			body, err = io.ReadAll(os.Stdin)
		} else {
			body, err = os.ReadFile(*file)
		}
		if err != nil {
			return err
		}
		var rep reply
		switch {
		case *execute:
			if err := cl.callRetry(ctx, "/controller/reassign", body, nil); err != nil {
				return err
			}
			fmt.Println("Successfully started partition reassignments")
		case *verify:
			if err := cl.callRetry(ctx, "/controller/verify", body, &rep); err != nil {
				return err
			}
			for _, l := range rep.Verify {
				fmt.Printf("Status of partition reassignment for %s-%d: %s\n", l.Topic, l.Partition, l.Status)
			}
		case *cancelRa:
			if err := cl.callRetry(ctx, "/controller/cancel", body, nil); err != nil {
				return err
			}
			fmt.Println("Successfully cancelled partition reassignments")
		default:
			return errors.New("one of -generate, -execute, -verify or -cancel")
		}
		return nil
	})
}

func generateReassignment(ctx context.Context, cl *client, topics, brokers string) error {
	var move assign.TopicsToMove
	move.Version = 1
	var query []string
	for t := range strings.SplitSeq(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			move.Topics = append(move.Topics, assign.TopicName{Topic: t})
			query = append(query, "topic="+t)
		}
	}
	var bs []assign.Broker
	for b := range strings.SplitSeq(brokers, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil {
			return fmt.Errorf("-brokers: %w", err)
		}
		bs = append(bs, assign.Broker{ID: int32(id)})
	}
	var rep reply
	if err := cl.callRetry(ctx, "/controller/assignment?"+strings.Join(query, "&"), nil, &rep); err != nil {
		return err
	}
	proposed, err := assign.GenerateReassignment(*rep.Assignment, move, bs, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	if err != nil {
		return err
	}
	cur, _ := json.Marshal(rep.Assignment)
	prop, _ := json.Marshal(proposed)
	fmt.Printf("Current partition replica assignment\n%s\n\nProposed partition reassignment configuration\n%s\n", cur, prop)
	return nil
}

func elect(args []string) error {
	c := newClientCmd("elect")
	topic, partition := c.partitionFlags()
	return c.run(args, func(ctx context.Context, cl *client) error {
		return cl.callRetry(ctx, fmt.Sprintf("/controller/elect?topic=%s&partition=%d", *topic, *partition), nil, nil)
	})
}

func statusCmd(args []string) error {
	c := newClientCmd("status")
	asJSON := c.fs.Bool("json", false, "print the status as JSON")
	return c.run(args, func(ctx context.Context, cl *client) error {
		var errs []error
		for _, id := range []replica.NodeID{1, 2, 3} {
			var md metadata
			if err := cl.getJSON(ctx, id, "/status", &md); err != nil {
				errs = append(errs, err)
				continue
			}
			if *asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(md)
			}
			printStatus(os.Stdout, &md)
			return nil
		}
		return errors.Join(errs...)
	})
}

func printStatus(w io.Writer, md *metadata) {
	fmt.Fprintf(w, "controller: node %d (raft term %d), controller epoch %d; seen from node %d\n\n",
		md.RaftLeader, md.RaftTerm, md.ControllerEpoch, md.Node)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BROKER\tEPOCH\tSTATE\tKAFKA")
	for _, b := range md.Brokers {
		state := "live"
		switch {
		case b.Fenced:
			state = "fenced"
		case b.ShuttingDown:
			state = "shutting down"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", b.ID, b.Epoch, state, b.Kafka)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tLOGS (node:end/hw)")
	for _, p := range md.Partitions {
		var logs []string
		for _, l := range p.Logs {
			if l.Error != "" {
				logs = append(logs, fmt.Sprintf("%d:?", l.Node))
			} else {
				logs = append(logs, fmt.Sprintf("%d:%d/%d", l.Node, l.LogEnd, l.HighWatermark))
			}
		}
		fmt.Fprintf(tw, "%s-%d\t%d\t%d\t%v\t%v\t%s\n", p.Topic, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, strings.Join(logs, " "))
	}
	tw.Flush()
}
