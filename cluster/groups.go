package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// The consumer groups of a cluster live in its offsets topic
// (group.OffsetsTopic), replicated as any topic is: a group's coordinator
// is the leader of the offsets partition its id hashes to
// (group.PartitionFor), as in Kafka. The node's group.Service holds a
// coordinator for each offsets partition, loaded while the node's replica
// leads it and unloaded when it stops (NOT_COORDINATOR then), and appends
// every record through that replica with acks=all before it answers.

// followEvery is how often the node looks at which coordinator partitions
// its replicas lead.
const followEvery = 20 * time.Millisecond

// openGroups opens the node's group service over its replicas of the
// offsets topic, none loaded.
func (n *Node) openGroups() (*group.Service, error) {
	opts := n.cfg.Groups
	opts.Topic, opts.Partitions = group.OffsetsTopic, n.cfg.OffsetsPartitions
	opts.Unloaded = true
	if opts.Config.Topics == nil {
		// Subscriptions by regular expression match the cluster's topics,
		// the internal ones too, as Kafka's coordinator matches every
		// topic of its metadata image (franz-go's
		// Test848RegexBrokerResolves); a client that wants them skipped
		// excludes them itself.
		opts.Config.Topics = func() []string {
			var names []string
			for _, t := range n.Metadata().Topics {
				names = append(names, t.Name)
			}
			return names
		}
	}
	opts.Append = func(partition int32, batch segment.Batch) (log.AppendResult, error) {
		return n.appendCoordinator(context.Background(), group.OffsetsTopic, partition, batch)
	}
	return group.OpenService(n.dir, opts)
}

// appendCoordinator appends a coordinator's batch (its records, a
// transactional producer's offsets, or a transaction marker) to a
// partition this node leads, as a coordinator's batch (the leader checks
// its producer epoch but not its sequence, as Kafka's
// AppendOrigin.COORDINATOR), and returns once it is committed (acks=all),
// within the node's RequestTimeout. Both coordinators, of groups and of
// transactions, write through it, and answer its errors, which carry
// Kafka's codes, by one rule (kafkaerr.CoordinatorWriteError).
func (n *Node) appendCoordinator(ctx context.Context, topic string, partition int32, batch []byte) (log.AppendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	r, err := n.d.ProduceAsCoordinator(ctx, topic, partition, replica.AcksAll, batch)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return log.AppendResult{}, err
	}
	return log.AppendResult{BaseOffset: r.BaseOffset, LastOffset: r.LastOffset}, nil
}

// Groups returns the node's group coordinator. It answers the groups
// whose offsets partition this node leads, and NOT_COORDINATOR for the
// others: GroupCoordinator says which node to ask.
func (n *Node) Groups() *group.Service { return n.groups }

// GroupCoordinator returns the node that coordinates a group (the leader
// of its offsets partition), or NoNode if the partition has no live
// leader.
func (n *Node) GroupCoordinator(groupID string) replica.NodeID {
	return n.liveLeader(group.OffsetsTopic, group.PartitionFor(groupID, n.cfg.OffsetsPartitions))
}

// liveLeader returns a partition's leader if it is registered and not
// fenced, or NoNode.
func (n *Node) liveLeader(topic string, partition int32) replica.NodeID {
	md := n.Metadata()
	p := md.Partition(topic, partition)
	if p == nil || p.Leader == replica.NoNode {
		return replica.NoNode
	}
	if b := md.Broker(p.Leader); b == nil || b.Fenced {
		return replica.NoNode
	}
	return p.Leader
}

// leadsNow returns the partition's leader epoch if this node leads it in
// md and its replica has taken that leadership up in this life. A
// coordinator loads a partition only then, as Kafka's follow their
// replica's becoming leader (ReplicaManager's makeLeaders calls
// onElection), and never on metadata alone: a restarted node replays
// records that name it leader in an epoch long gone, which its replicas
// refuse (KIP-380) until it has registered, and a coordinator loaded then
// would serve what its log held when it went down, older than what the
// cluster acknowledged since, or newer and about to be truncated.
func (n *Node) leadsNow(md *Metadata, tp controller.TopicPartition) (int32, bool) {
	p := md.Partition(tp.Topic, tp.Partition)
	if p == nil || p.Leader != n.cfg.ID {
		return 0, false
	}
	n.mu.Lock()
	l := n.replicaLogs[tp]
	n.mu.Unlock()
	if l == nil {
		return 0, false
	}
	_, ok := l.leaderEpochStart(p.LeaderEpoch)
	return p.LeaderEpoch, ok
}

// coordinatorRuntime is a coordinator of an internal topic's partitions,
// group.Service for the offsets topic and idempotence.TxnRuntime for the
// transaction state topic, which loads a partition's state as this node
// becomes the partition's leader and drops it as it stops (Kafka's
// onElection and onResignation), one contract for both.
type coordinatorRuntime interface {
	// Follow loads the partition's state in leaderEpoch unless it is
	// loaded in it, or, with -1, unloads it.
	Follow(partition, leaderEpoch int32) error
	// Loaded reports the leader epoch the partition is loaded in.
	Loaded(partition int32) (leaderEpoch int32, ok bool)
}

// followLeaders creates a coordinator's topic through the controller if
// the metadata has none, then, until ctx ends, loads each of its
// partitions this node leads in this life once the high watermark has
// passed every record its replica holds (a coordinator serves only
// committed state), again if its leader epoch moved (another leader may
// have written meanwhile) or its load or reload failed, and unloads each
// it no longer leads.
func (n *Node) followLeaders(ctx context.Context, topic string, partitions int32, rt coordinatorRuntime) {
	tick := time.NewTicker(followEvery)
	defer tick.Stop()
	n.createInternalTopic(ctx, topic, partitions)
	for {
		md := n.Metadata()
		for id := range partitions {
			tp := controller.TopicPartition{Topic: topic, Partition: id}
			loaded, ok := rt.Loaded(id)
			epoch, leads := n.leadsNow(md, tp)
			switch {
			case !leads:
				if err := rt.Follow(id, -1); err != nil || ok {
					n.logCoordinator(err, "unloaded", tp, loaded)
				}
				continue
			case ok && loaded == epoch:
				continue
			}
			if st, err := n.d.Status(ctx, topic, id); err != nil || st.HighWatermark < st.LogEndOffset {
				continue
			}
			n.logCoordinator(rt.Follow(id, epoch), "loaded", tp, epoch)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) logCoordinator(err error, what string, tp controller.TopicPartition, epoch int32) {
	if err != nil {
		n.log.Warn("coordinator partition", "partition", tp, "epoch", epoch, "step", what, "err", err)
		return
	}
	n.log.Info("coordinator partition "+what, "partition", tp, "epoch", epoch)
}

// createInternalTopic asks the active controller for a coordinator's
// topic, as Kafka's broker creates it on the first FindCoordinator, until
// this node's metadata has it or ctx ends: the controller refuses it while
// fewer brokers are live than its replication factor asks.
func (n *Node) createInternalTopic(ctx context.Context, name string, partitions int32) {
	spec := TopicSpec{Partitions: partitions, ReplicationFactor: n.cfg.InternalReplicationFactor}
	for ctx.Err() == nil && n.Metadata().Topic(name) == nil {
		call, cancel := context.WithTimeout(ctx, time.Second)
		_, err := n.callController(call, &createTopicRequest{Name: name, TopicSpec: spec})
		cancel()
		if err == nil || errors.Is(err, replica.ErrTopicAlreadyExists) {
			wait, cancel := context.WithTimeout(ctx, time.Second)
			n.waitMetadata(wait, func(md *Metadata) bool { return md.Topic(name) != nil })
			cancel()
			continue
		}
		n.log.Debug("creating a coordinator's topic", "topic", name, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
