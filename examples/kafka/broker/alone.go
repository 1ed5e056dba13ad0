package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/strandlog/strand/cluster"
	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
)

// A broker alone is a cluster of one voter, served as any cluster.Node
// is (NodeCluster): its node leads the metadata log (cluster.FileMetadata,
// which commits an entry once it is synced), is its own active
// controller, and the only replica of every partition, so that what the
// broker serves alone and what it serves in a cluster go one way.
//
// Its topics allow unclean leader election: a node that starts after a
// crash leaves the ISR of its replicas of topics not synced on every
// append (KIP-966: they may have lost acknowledged records), and the only
// replica of a partition, whatever it kept, is the only copy there is to
// lead it again, as a Kafka broker alone does.

// metadataDir is where the broker alone keeps its metadata log, in its
// data directory beside the node's own files.
const metadataDir = "metadata"

// registerTimeout bounds how long Open waits for the broker alone's node
// to register with its own controller: a few control ticks.
const registerTimeout = 30 * time.Second

// alone is the broker alone's node and its metadata log.
type alone struct {
	n  *cluster.Node
	md *cluster.FileMetadata
}

// openAlone starts the broker alone's node on cfg.DataDir; addr is the
// address the broker serves on, once it has one.
func openAlone(cfg Config, addr func() (BrokerAddr, bool)) (*alone, Cluster, error) {
	if cfg.DataDir == "" {
		return nil, nil, errors.New("broker: Config.DataDir is required without a Cluster")
	}
	id := replica.NodeID(cfg.NodeID)
	md, err := cluster.OpenFileMetadata(nil, filepath.Join(cfg.DataDir, metadataDir), id)
	if err != nil {
		return nil, nil, fmt.Errorf("broker: %w", err)
	}
	nodeCfg := cfg.Node
	nodeCfg.ID, nodeCfg.Dir, nodeCfg.Transport, nodeCfg.Metadata = id, cfg.DataDir, noPeers{}, md
	nodeCfg.TopicConfig = fsyncDefault(cfg.Fsync)
	if nodeCfg.Logger == nil {
		nodeCfg.Logger = cfg.Logger
	}
	n, err := cluster.New(nodeCfg)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("broker: %w", err), md.Close())
	}
	a := &alone{n: n, md: md}
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	if err := a.waitReady(ctx); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("broker: the node did not take up its partitions: %w", err), a.close())
	}
	nc, err := newNodeCluster(n, NodeOptions{MinInsyncReplicas: nodeCfg.MinInsyncReplicas, Partitions: cfg.Partitions, Unclean: true,
		TopicConfig: nodeCfg.TopicConfig})
	if err != nil {
		return nil, nil, errors.Join(err, a.close())
	}
	nc.addr = func(replica.NodeID) (BrokerAddr, bool) { return addr() }
	return a, nc, nil
}

// waitReady waits until the node is registered with its own controller,
// its replicas lead the partitions the metadata gives them, and its
// coordinators have loaded theirs (the controller creates their topics
// once the node is registered): then the broker serves at once what it
// served before a restart. A partition without a leader (its replica
// offline) is no reason to wait.
func (a *alone) waitReady(ctx context.Context) error {
	if err := a.n.WaitRegistered(ctx); err != nil {
		return err
	}
	for {
		if a.ready(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ready says whether the node's replicas lead in the epochs of its
// metadata and its coordinators have loaded their partitions.
func (a *alone) ready(ctx context.Context) bool {
	md := a.n.Metadata()
	offsets, txns := md.Topic(group.OffsetsTopic), md.Topic(log.TransactionStateTopic)
	if offsets == nil || txns == nil {
		return false
	}
	for _, p := range md.Partitions {
		if p.Leader != md.Node {
			continue
		}
		st, err := a.n.Status(ctx, p.Topic, p.Partition)
		if err != nil || st.Role != replica.RoleLeader || st.LeaderEpoch != p.LeaderEpoch {
			return false
		}
	}
	for p := range txns.Partitions {
		if _, ok := a.n.Transactions().Loaded(p); !ok {
			return false
		}
	}
	// The group coordinator tells a partition it has not loaded by its
	// answer to a group of it.
	for p := range offsets.Partitions {
		r, err := a.n.Groups().OffsetFetch(ctx, group.OffsetFetchRequest{GroupID: probeGroup(p, offsets.Partitions)})
		if err != nil || r.Err != nil {
			return false
		}
	}
	return true
}

// probeGroup returns a group id of offsets partition p of n.
func probeGroup(p, n int32) string {
	for i := 0; ; i++ {
		if id := "strand-ready-" + strconv.Itoa(i); group.PartitionFor(id, n) == p {
			return id
		}
	}
}

// close stops the node (after a controlled shutdown that has no one to
// hand leadership to), then its metadata log.
func (a *alone) close() error {
	return errors.Join(a.n.Close(), a.md.Close())
}

// fsyncDefault is the broker alone's cluster.Options.TopicConfig:
// LogTopicConfig with a topic's fsync policy fsync (log.FsyncAlways if
// zero) unless its flush configs set one. The coordinators' topics, whose
// base config the node makes compacted, keep the node's log.FsyncAlways:
// a group's committed offsets and a transaction's decision are
// acknowledged once on disk.
func fsyncDefault(fsync log.FsyncPolicy) func(log.TopicConfig, map[string]string) (log.TopicConfig, error) {
	return func(base log.TopicConfig, configs map[string]string) (log.TopicConfig, error) {
		if fsync != (log.FsyncPolicy{}) && base.Compact != log.Compacted {
			base.Fsync = fsync
		}
		return LogTopicConfig(base, configs)
	}
}

// noPeers is the Transport of a node of one voter, which has no other
// node to reach.
type noPeers struct{}

func (noPeers) Send(_ context.Context, to replica.NodeID, _ []byte) error {
	return fmt.Errorf("%w: node %d: the broker is alone", cluster.ErrUnreachable, to)
}

func (noPeers) Call(_ context.Context, to replica.NodeID, _ []byte) ([]byte, error) {
	return nil, fmt.Errorf("%w: node %d: the broker is alone", cluster.ErrUnreachable, to)
}
