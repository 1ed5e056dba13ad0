package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	groupsvc "github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// The group suite measures groupsvc.Service: offset commits per second, each
// answered once its records are durable (the offsets topic is
// FsyncAlways), beside raw appends of the same records, byte for byte, to
// the same partitions of the same kind of topic, in the same run. Many
// committers at once are what lets both batch: the Service takes the
// requests that come while it hands a write to the log into its next
// write, and starts that one while the first syncs (pipelined, as the log
// does its appenders'), and the log groups concurrent appends into one
// write and one fsync.
func init() { suites["group"] = groupSuite }

// groupShape sizes the group suite.
type groupShape struct {
	reps       int           // runs of each measurement; the median counts
	runFor     time.Duration // how long the committers run
	committers int           // goroutines, each committing for a group of its own
	partitions int32         // partitions in one commit (offset records per commit)
}

func groupShapes(quick bool) groupShape {
	if quick {
		return groupShape{reps: 1, runFor: 200 * time.Millisecond, committers: 16, partitions: 8}
	}
	return groupShape{reps: 3, runFor: 2 * time.Second, committers: 16, partitions: 8}
}

// The offsets topics measured: all groups on one partition, where the
// Service's batching and the log's meet head on, and Kafka's 50
// partitions, over which the committers' groups spread.
var groupLayouts = []int32{1, groupsvc.DefaultOffsetsPartitions}

const groupTopic = "events"

// offsetRecordSize is the size of an offset record's key and value, for MB/s.
var offsetRecordSize = func() int {
	r := groupsvc.EncodeOffsetCommit(groupsvc.OffsetCommitKey{Group: groupOf(0), Topic: groupTopic},
		groupsvc.OffsetCommitValue{LeaderEpoch: -1, ExpireTimestamp: -1})
	return len(r.Key) + len(r.Value)
}()

func groupSuite(quick bool) error {
	shape := groupShapes(quick)
	fmt.Printf("%d committers, %d offsets a commit, %v a run, %d runs of each, medians; temporary directories in %s\n",
		shape.committers, shape.partitions, shape.runFor, shape.reps, *logParent)
	printRateHeader()
	var cmps []comparison
	for _, n := range groupLayouts {
		ss, err := medians(shape.reps,
			func() (sample, error) { return serviceCommitRun(shape, n) },
			func() (sample, error) { return rawOffsetAppendRun(shape, n) })
		if err != nil {
			return fmt.Errorf("group suite: %w", err)
		}
		test := fmt.Sprintf("commit, %d offsets partition(s)", n)
		note := func(s sample) string {
			return fmt.Sprintf("%.0f commits/s, %.1f commits/fsync", s.perSec()/float64(shape.partitions),
				float64(s.records)/float64(shape.partitions)/float64(max(s.fsyncs, 1)))
		}
		printRate(test, "group.Service", ss[0], offsetRecordSize, note(ss[0]))
		printRate(test, "raw Partition.Append", ss[1], offsetRecordSize, note(ss[1]))
		cmps = append(cmps, comparison{name: fmt.Sprintf("group-commit-vs-raw-append-%dp", n), value: ss[0].perSec() / ss[1].perSec(), bound: 0.8})
	}
	printComparisons(cmps)
	return nil
}

// groupOf is committer g's group.
func groupOf(g int) string { return fmt.Sprint("bench-group-", g) }

// commitRequest is what committer g sends: offsets of shape.partitions
// partitions, all at offset.
func commitRequest(shape groupShape, g int, offset int64) groupsvc.OffsetCommitRequest {
	req := groupsvc.OffsetCommitRequest{Version: 9, GroupID: groupOf(g), GenerationID: -1,
		Topics: []groupsvc.OffsetCommitTopic{{Name: groupTopic}}}
	for p := range shape.partitions {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, groupsvc.OffsetCommitPartition{Partition: p, Offset: offset, LeaderEpoch: -1})
	}
	return req
}

// serviceCommitRun has the committers commit through a Service over a
// fresh Dir whose offsets topic has n partitions, and counts offset
// records committed.
func serviceCommitRun(shape groupShape, n int32) (s sample, err error) {
	return withDir(func(d *log.Dir) (sample, error) {
		svc, err := groupsvc.OpenService(d, groupsvc.ServiceOptions{Partitions: n,
			Config: groupsvc.Config{Partitions: func(string) int32 { return shape.partitions }}})
		if err != nil {
			return sample{}, err
		}
		defer func() { err = errors.Join(err, svc.Close()) }()
		return runCommitters(shape, func(g int, i int64) error {
			r, err := svc.OffsetCommit(context.Background(), commitRequest(shape, g, i))
			if err != nil {
				return err
			}
			if r.Err != nil {
				return r.Err
			}
			for _, p := range r.Topics[0].Partitions {
				if p.Err != nil {
					return p.Err
				}
			}
			return nil
		})
	})
}

// rawOffsetAppendRun has the committers append the records a Service
// writes for their commits, with Partition.Append, to the partitions the
// Service would write them to, in a compacted FsyncAlways topic of n
// partitions: what the Service's own appends cost, without the Service.
func rawOffsetAppendRun(shape groupShape, n int32) (sample, error) {
	return withDir(func(d *log.Dir) (sample, error) {
		err := d.CreateTopic(groupsvc.OffsetsTopic, log.TopicConfig{Partitions: n, Compact: log.Compacted, Fsync: log.FsyncAlways()})
		if err != nil {
			return sample{}, err
		}
		parts := make([]*log.Partition, shape.committers)
		for g := range parts {
			if parts[g], err = d.Partition(groupsvc.OffsetsTopic, groupsvc.PartitionFor(groupOf(g), n)); err != nil {
				return sample{}, err
			}
		}
		return runCommitters(shape, func(g int, i int64) error {
			req := commitRequest(shape, g, i)
			now := time.Now().UnixMilli()
			recs := make([]segment.Record, 0, shape.partitions)
			for _, p := range req.Topics[0].Partitions {
				r := groupsvc.EncodeOffsetCommit(groupsvc.OffsetCommitKey{Group: req.GroupID, Topic: groupTopic, Partition: p.Partition},
					groupsvc.OffsetCommitValue{Offset: p.Offset, LeaderEpoch: -1, CommitTimestamp: now, ExpireTimestamp: -1})
				recs = append(recs, segment.Record{Timestamp: now, Key: r.Key, Value: r.Value})
			}
			_, err := parts[g].Append(recs)
			return err
		})
	})
}

// withDir runs f over a Dir in a fresh temporary directory.
func withDir(f func(d *log.Dir) (sample, error)) (s sample, err error) {
	dir, err := tempDir()
	if err != nil {
		return s, err
	}
	defer removeAfter(dir, &err)
	d, err := log.OpenDir(dir, log.DirOptions{MaintenanceInterval: -1})
	if err != nil {
		return s, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	if s, err = f(d); err != nil {
		return s, err
	}
	n, err := d.TopicConfig(groupsvc.OffsetsTopic)
	if err != nil {
		return s, err
	}
	for i := range n.Partitions {
		p, err := d.Partition(groupsvc.OffsetsTopic, i)
		if err != nil {
			return s, err
		}
		st, err := p.Stats()
		if err != nil {
			return s, err
		}
		s.fsyncs += st.Fsyncs
	}
	return s, nil
}

// runCommitters runs commit(g, i) in a loop on every committer for
// shape.runFor and counts the offset records committed.
func runCommitters(shape groupShape, commit func(g int, i int64) error) (sample, error) {
	var (
		wg      sync.WaitGroup
		commits atomic.Int64
		errs    = make([]error, shape.committers)
	)
	start := time.Now()
	for g := range shape.committers {
		wg.Go(func() {
			for i := int64(0); time.Since(start) < shape.runFor; i++ {
				if errs[g] = commit(g, i); errs[g] != nil {
					return
				}
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	return sample{records: commits.Load() * int64(shape.partitions), elapsed: time.Since(start)}, errors.Join(errs...)
}
