package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// Consumer groups live in the replicated topic __consumer_offsets, as in
// Kafka: a group's coordinator is the leader of the offsets partition its
// id hashes to (group.PartitionFor), commits are appended with acks=all
// and answered once the high watermark passes them, and a node loads a
// partition's groups from its replica when it becomes the partition's
// leader and unloads them when it stops (Kafka's onElection and
// onResignation).

// offsetsPartitions and offsetsReplicationFactor shape the offsets topic
// (offsets.topic.num.partitions, 50 in Kafka; a few here, spread over the
// three nodes; offsets.topic.replication.factor, 3 as in Kafka).
const (
	offsetsPartitions        = 6
	offsetsReplicationFactor = 3
)

// replicaTopicConfig is the configuration of a node's replicas of a
// topic: the offsets and transaction state topics are compacted and keep
// every segment (cleanup.policy=compact, as the group.Service and the
// transaction coordinator want it).
func replicaTopicConfig(name string, partitions int32) log.TopicConfig {
	cfg := log.TopicConfig{Partitions: partitions, Fsync: log.FsyncAlways()}
	if name == group.OffsetsTopic || name == log.TransactionStateTopic {
		cfg.Compact = log.Compacted
		cfg.Retention = log.Retention{Age: log.Unlimited, Bytes: log.Unlimited}
	}
	return cfg
}

// groupLoader follows the leadership of the offsets partitions and loads
// or unloads them in the node's group.Service.
type groupLoader struct {
	stop func()
	done chan struct{}
}

// OpenGroups opens the group coordinator over the node's replicas of the
// offsets topic, none loaded, and starts following the partitions'
// leaders; closeGroups stops that.
func (kc *kafkaCluster) OpenGroups(opts group.ServiceOptions) (*group.Service, error) {
	opts.Topic, opts.Partitions = group.OffsetsTopic, offsetsPartitions
	opts.Unloaded, opts.Append, opts.AppendBatch = true, kc.appendOffsets, kc.appendOffsetsBatch
	s, err := group.OpenService(kc.n.dir, opts)
	if err != nil {
		return nil, err
	}
	kc.groupService = s
	ctx, cancel := context.WithCancel(context.Background())
	kc.groups = &groupLoader{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(kc.groups.done)
		kc.followOffsetsLeaders(ctx, s)
	}()
	return s, nil
}

// closeCoordinators stops the transaction and group coordinators'
// following of their partitions' leaders, the transaction coordinator's
// first: it writes markers through the group coordinator.
func (kc *kafkaCluster) closeCoordinators() {
	kc.closeTxns()
	kc.closeGroups()
}

// closeGroups stops following the offsets partitions' leaders.
func (kc *kafkaCluster) closeGroups() {
	if kc.groups != nil {
		kc.groups.stop()
		<-kc.groups.done
	}
}

// GroupCoordinatorFor is the leader of the group's offsets partition, if
// it is live.
func (kc *kafkaCluster) GroupCoordinatorFor(groupID string) int32 {
	return kc.liveLeader(controller.TopicPartition{Topic: group.OffsetsTopic, Partition: group.PartitionFor(groupID, offsetsPartitions)})
}

// appendOffsets appends the coordinator's records to an offsets partition
// through its replica, as its leader, and returns once they are
// committed (acks=all: the ISR has them and it holds min.insync.replicas).
func (kc *kafkaCluster) appendOffsets(partition int32, recs []segment.Record) (log.AppendResult, error) {
	batch, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	if err != nil {
		return log.AppendResult{}, err
	}
	return kc.appendOffsetsBatch(partition, batch)
}

// appendOffsetsBatch appends a batch the group coordinator built (its
// records, a transactional producer's offsets, or a transaction marker)
// as appendOffsets does, as a coordinator's batch: the replica's leader
// checks its producer epoch but not its sequence, as Kafka's coordinator
// append (AppendOrigin.COORDINATOR) does; the Service fences old producer
// epochs itself too. Its error carries Kafka's code as a group.Error, by
// which the Service answers the requests it failed (NOT_ENOUGH_REPLICAS:
// COORDINATOR_NOT_AVAILABLE) and keeps the partition's groups.
func (kc *kafkaCluster) appendOffsetsBatch(partition int32, batch segment.Batch) (log.AppendResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kc.produceTimeout())
	defer cancel()
	res, err := kc.produceCommitted(ctx, group.OffsetsTopic, partition, batch)
	var ke *kerr.Error
	if errors.As(err, &ke) {
		err = fmt.Errorf("%w: %w", &group.Error{Code: ke.Code, Name: ke.Message}, err)
	}
	return res, err
}

// produceCommitted appends a batch to a partition this node leads and
// returns once it is committed (acks=all), or the error as Kafka's.
func (kc *kafkaCluster) produceCommitted(ctx context.Context, topic string, partition int32, batch []byte) (log.AppendResult, error) {
	res, err := kc.n.d.ProduceAsCoordinator(ctx, topic, partition, replica.Acks(-1), batch)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return log.AppendResult{}, kafkaError(err)
	}
	return log.AppendResult{BaseOffset: res.BaseOffset, LastOffset: res.LastOffset}, nil
}

// followOffsetsLeaders creates the offsets topic through the controller
// if the metadata has none, then, every few milliseconds until ctx ends,
// loads each offsets partition this node leads (again if its leader epoch
// moved: another leader may have written meanwhile) and unloads each it no
// longer leads.
func (kc *kafkaCluster) followOffsetsLeaders(ctx context.Context, s *group.Service) {
	loaded := map[int32]int32{} // partition: the leader epoch it was loaded in
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	kc.createInternalTopic(ctx, group.OffsetsTopic, offsetsPartitions, offsetsReplicationFactor)
	for {
		v := kc.current()
		for id := range int32(offsetsPartitions) {
			tp := controller.TopicPartition{Topic: group.OffsetsTopic, Partition: id}
			p, leads := kc.leadsNow(v, tp)
			epoch, was := loaded[id]
			if was && (!leads || epoch != p.LeaderEpoch) {
				kc.logGroups(s.UnloadPartition(id), "unloaded", id, epoch)
				delete(loaded, id)
			}
			if leads {
				// Loads again, too, a partition whose reload after a
				// failed write failed.
				if err := s.LoadPartition(id); err != nil {
					kc.logGroups(err, "loading", id, p.LeaderEpoch)
					continue
				}
				if !was || epoch != p.LeaderEpoch {
					kc.logGroups(nil, "loaded", id, p.LeaderEpoch)
				}
				loaded[id] = p.LeaderEpoch
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (kc *kafkaCluster) logGroups(err error, what string, partition, epoch int32) {
	if err != nil {
		kc.n.log.Warn("kafka: offsets partition", "partition", partition, "epoch", epoch, "step", what, "err", err)
		return
	}
	kc.n.log.Info("kafka: offsets partition "+what, "partition", partition, "epoch", epoch)
}

// createInternalTopic asks the active controller for a coordinator's
// topic (the offsets or the transaction state topic), as Kafka's broker
// creates it on the first FindCoordinator, until this node's metadata has
// it (a restarted node may not have replayed it yet: the controller may
// then refuse the request for lack of live brokers) or ctx ends.
func (kc *kafkaCluster) createInternalTopic(ctx context.Context, name string, partitions, rf int) {
	req := topicRequest{Topic: name, Partitions: partitions, ReplicationFactor: min(rf, len(kc.addrs))}
	var asked time.Time
	for ctx.Err() == nil {
		if _, ok := kc.current().topics[name]; ok {
			return
		}
		if time.Since(asked) >= time.Second {
			asked = time.Now()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			err := kc.n.controllerClient().callRetry(actx, "/controller/topics", req, nil)
			cancel()
			if err != nil && !errors.Is(kafkaError(err), log.ErrTopicExists) {
				kc.n.log.Warn("kafka: creating a coordinator's topic", "err", fmt.Errorf("%s: %w", name, err))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}
