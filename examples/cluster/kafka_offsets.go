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
