package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica/controller"
)

// A replica whose log fails (a full disk, an I/O error) stops: its
// replica.Partition refuses everything. The node reports it offline to the
// controller with every heartbeat, as a KRaft broker reports its offline
// log directories (KIP-858), so that the controller moves its leadership
// away and keeps it out of ISRs and elections; once the data directory
// takes writes again the node recreates the replica over its log, and
// reports it online: it fetches, catches up and rejoins the ISR through
// its leader. A node has one data directory, so a replica, not a
// directory, is what goes offline (controller.Controller.ReportOffline).

// offlineReplicas is the node's set of failed replicas.
type offlineReplicas struct {
	mu  sync.Mutex
	set map[controller.TopicPartition]time.Time // when it failed
	// changed wakes the heartbeat loop, so that the controller hears of a
	// failure at once.
	changed chan struct{}
}

func newOfflineReplicas() *offlineReplicas {
	return &offlineReplicas{set: map[controller.TopicPartition]time.Time{}, changed: make(chan struct{}, 1)}
}

// add marks tp offline; it reports whether tp was online.
func (o *offlineReplicas) add(tp controller.TopicPartition) bool {
	o.mu.Lock()
	_, had := o.set[tp]
	if !had {
		o.set[tp] = time.Now()
	}
	o.mu.Unlock()
	if !had {
		o.signal()
	}
	return !had
}

func (o *offlineReplicas) remove(tp controller.TopicPartition) {
	o.mu.Lock()
	delete(o.set, tp)
	o.mu.Unlock()
	o.signal()
}

func (o *offlineReplicas) signal() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// list returns the offline replicas in order, and when each failed.
func (o *offlineReplicas) list() ([]controller.TopicPartition, map[controller.TopicPartition]time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.SortedFunc(maps.Keys(o.set), compareTP), maps.Clone(o.set)
}

// replicaFailed is a replica log's report that the replica stopped.
func (n *Node) replicaFailed(tp controller.TopicPartition) {
	if n.offline.add(tp) {
		n.log.Error("replica offline: the controller is told, and the node recovers it once its data directory takes writes again", "partition", tp)
	}
}

// recoverEvery is how often the node looks for offline replicas it can
// recover; retryFailedAfter is how long a failed replica waits before a
// try (the Options' recoverEvery and retryFailedAfter, for tests).
const (
	recoverEvery     = 2 * time.Second
	retryFailedAfter = 10 * time.Second
)

// recoverReplicas recreates the offline replicas once the data directory
// takes writes, until ctx ends.
func (n *Node) recoverReplicas(ctx context.Context) {
	t := time.NewTicker(n.cfg.recoverEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tps, since := n.offline.list()
		if len(tps) == 0 {
			continue
		}
		if err := n.probeWritable(); err != nil {
			n.log.Warn("data directory still refuses writes: replicas stay offline", "replicas", len(tps), "err", err)
			continue
		}
		for _, tp := range tps {
			if time.Since(since[tp]) < n.cfg.retryFailedAfter {
				continue
			}
			if err := n.recreateReplica(ctx, tp); err != nil {
				n.log.Error("recovering an offline replica", "partition", tp, "err", err)
				continue
			}
			n.offline.remove(tp)
			n.log.Warn("offline replica recovered from its log: it fetches from its leader and rejoins the ISR", "partition", tp)
		}
	}
}

// probeWritable writes and syncs a small file in the data directory.
func (n *Node) probeWritable() error {
	fs := n.cfg.FS
	name := filepath.Join(n.cfg.Dir, logDir, ".write-probe")
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, 64<<10))
	err = errors.Join(err, f.Sync(), f.Close())
	return errors.Join(err, fs.Remove(name))
}

// recreateReplica replaces a failed replica by a new one over its log,
// which it tells the partition's latest state.
func (n *Node) recreateReplica(ctx context.Context, tp controller.TopicPartition) error {
	plog := n.partition(tp)
	if plog == nil {
		return nil // the topic was deleted meanwhile
	}
	if _, err := n.d.RemovePartition(ctx, tp.Topic, tp.Partition); err != nil {
		return err
	}
	rlog, err := n.addReplica(ctx, tp, plog)
	if err != nil {
		return err
	}
	// The latest state, read once the new replica is in the driver: a
	// state delivered while the driver had none reached no replica.
	n.mu.Lock()
	n.replicaLogs[tp] = rlog
	state := n.states[tp]
	n.mu.Unlock()
	if state == nil {
		return nil
	}
	return n.d.Receive(ctx, state)
}

// startupDamage opens every replica the data directory holds (a Dir of
// replicas checks each batch at its first open and repairs damage by
// truncation, log.Options.TruncateCorruption) and returns those it found
// damaged: such a replica must not claim its records survived, nor lead
// until it has fetched what it lost from its leader and rejoined the ISR.
func startupDamage(dir *log.Dir) (map[controller.TopicPartition]*log.Damage, error) {
	topics, err := dir.Topics()
	if err != nil {
		return nil, err
	}
	damaged := map[controller.TopicPartition]*log.Damage{}
	for _, name := range topics {
		cfg, err := dir.TopicConfig(name)
		if err != nil {
			return nil, err
		}
		for id := range cfg.Partitions {
			p, err := dir.Partition(name, id)
			if err != nil {
				return nil, err
			}
			d, err := p.Damage()
			if err != nil {
				return nil, fmt.Errorf("opening %s-%d: %w", name, id, err)
			}
			if d != nil {
				damaged[controller.TopicPartition{Topic: name, Partition: id}] = d
			}
		}
	}
	return damaged, nil
}

// syncedTopics returns the topics whose replicas on this node acknowledged
// only what they had synced (FsyncAlways, the cluster's default): an
// unclean stop of the node lost nothing of theirs, and the controller may
// keep them in the ELR (controller.Registration.Synced). A topic with a
// damaged replica is left out.
func syncedTopics(dir *log.Dir, damaged map[controller.TopicPartition]*log.Damage) ([]string, error) {
	topics, err := dir.Topics()
	if err != nil {
		return nil, err
	}
	hurt := map[string]bool{}
	for tp := range damaged {
		hurt[tp.Topic] = true
	}
	var out []string
	for _, name := range topics {
		cfg, err := dir.TopicConfig(name)
		if err != nil {
			return nil, err
		}
		if !hurt[name] && (cfg.Fsync == log.FsyncAlways() || cfg.Fsync == log.FsyncPolicy{}) {
			out = append(out, name)
		}
	}
	return out, nil
}

// heldTopics returns the topics dir holds, by id.
func heldTopics(dir *log.Dir) (map[string][16]byte, error) {
	topics, err := dir.Topics()
	if err != nil {
		return nil, err
	}
	held := map[string][16]byte{}
	for _, name := range topics {
		if held[name], err = dir.TopicID(name); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// registerClaims returns the topics whose replicas on this node lost
// nothing acknowledged, for the registration (controller.Registration.
// Synced): the synced topics, and, if the node runs on the data directory
// it ran on before, the topics of the metadata it applied whose replicas
// the directory did not hold at the start. A replica acknowledges nothing
// before its log exists, and the Dir makes a log's directory durable as
// it creates it, so one that never existed here lost nothing. Without
// them a power cut of every node just after a topic's creation, before
// any node created its replica, left the partition with no replica
// eligible to lead, for good (found by TestSimulateNodes: the transaction
// state topic, created as the nodes died).
func (n *Node) registerClaims() []string {
	if n.held == nil {
		return n.synced
	}
	claims := slices.Clone(n.synced)
	for _, t := range n.Metadata().Topics {
		if id, ok := n.held[t.Name]; !ok || id != t.ID {
			claims = append(claims, t.Name)
		}
	}
	return claims
}
