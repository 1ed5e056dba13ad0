package main

import (
	"github.com/strandlog/strand/examples/kafka/broker"
	"github.com/strandlog/strand/replica/controller"
)

var _ broker.LeaderEpochStarts = (*kafkaCluster)(nil)

// LeaderEpochStartOffset is where this node's replica took up its
// leadership in leaderEpoch, in this life of the node: the log end when
// it wrote the epoch (loggedLog.SetLeaderEpoch), where the replica's
// Status().LeaderEpochStartOffset is. The broker answers ListOffsets
// OFFSET_NOT_AVAILABLE until the high watermark reaches it (KIP-207): a
// restarted leader's high watermark is the one it last checkpointed,
// which may be far below what the cluster acknowledged, and the epoch
// cache of its log, which survives restarts, cannot tell an epoch this
// life took up from one its previous life did.
func (kc *kafkaCluster) LeaderEpochStartOffset(topic string, partition, leaderEpoch int32) (int64, bool) {
	kc.n.mu.Lock()
	l := kc.n.replicaLogs[controller.TopicPartition{Topic: topic, Partition: partition}]
	kc.n.mu.Unlock()
	if l == nil {
		return 0, false
	}
	return l.leaderEpochStart(leaderEpoch)
}

// leadsNow returns the partition's state in v if this node leads it
// there and its replica has taken that leadership up in this life. The
// group and transaction coordinators load a partition only then, as
// Kafka's follow their replica's becoming leader (ReplicaManager's
// makeLeaders calls onElection), and never on metadata alone: a
// restarted node replays records that name it leader in an epoch long
// gone, which its replicas refuse (KIP-380) until it has registered, and
// a coordinator loaded then would serve what its log held when it went
// down, older than what the cluster acknowledged since, or newer and
// about to be truncated.
func (kc *kafkaCluster) leadsNow(v *kafkaView, tp controller.TopicPartition) (*partitionView, bool) {
	p := v.partitions[tp]
	if p == nil || p.Leader != kc.n.cfg.id {
		return nil, false
	}
	_, ok := kc.LeaderEpochStartOffset(tp.Topic, tp.Partition, p.LeaderEpoch)
	return p, ok
}
