package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// idleTarget is the bound on the heap an idle partition costs.
const idleTarget = 16 << 10

// idleResult is what measureIdlePartitions saw.
type idleResult struct {
	partitions int
	elapsed    time.Duration // creating and appending to every partition
	heap       int64         // heap growth with the Dir open and its partitions idle
	peakFiles  int           // most file descriptors open beyond the baseline
	goroutines int           // goroutines beyond the baseline, partitions idle
}

// measureIdlePartitions opens one Dir bounded to maxOpenFiles, creates
// shape.partitions partitions in topics of topicPartitions, and appends
// recordsPerAppend records to each, round robin, appendsPerIdlePart
// times: the second round reopens every partition the bound closed. It
// then measures the heap the Dir holds once the partitions are idle.
func measureIdlePartitions(shape dirShape, value []byte) (comparison, error) {
	r, err := idlePartitions(shape.partitions, value)
	if err != nil {
		return comparison{}, err
	}
	perPart := float64(r.heap) / float64(r.partitions)
	appends := r.partitions * appendsPerIdlePart
	fmt.Printf("%-24s %-22s %12s %12s %12s %10s\n", "idle partitions", "partitions", "heap/part", "time/append", "peak fds", "goroutines")
	fmt.Printf("%-24s %-22d %12.0f %12s %12d %10d\n", "", r.partitions, perPart,
		(r.elapsed / time.Duration(appends)).Round(time.Microsecond), r.peakFiles, r.goroutines)
	fmt.Printf("(MaxOpenFiles %d, FsyncNever, %d rounds of Append(%d records) per partition; heap after GC, Dir open; fds and goroutines beyond the baseline)\n",
		maxOpenFiles, appendsPerIdlePart, recordsPerAppend)
	return comparison{name: "dir-heap-per-idle-partition-vs-16KiB", value: idleTarget / perPart, bound: 1}, nil
}

func idlePartitions(n int, value []byte) (r idleResult, err error) {
	dir, err := tempDir()
	if err != nil {
		return r, err
	}
	defer removeAfter(dir, &err)
	recs := make([]segment.Record, recordsPerAppend)
	for i := range recs {
		recs[i].Value = value
	}
	topics := make([]string, (n+topicPartitions-1)/topicPartitions)
	for i := range topics {
		topics[i] = fmt.Sprintf("idle-%04d", i)
	}

	baseHeap := heapAfterGC()
	baseFiles, err := openFiles()
	if err != nil {
		return r, err
	}
	baseGoroutines := runtime.NumGoroutine()
	start := time.Now()
	d, err := log.OpenDir(dir, log.DirOptions{
		MaxOpenFiles: maxOpenFiles,
		// The background maintenance would only add noise: the topics
		// have neither retention nor compaction.
		MaintenanceInterval: -1,
		// The measure is memory and open files, not durability; each
		// partition's log still syncs when the bound closes it.
		Defaults: log.TopicConfig{Fsync: log.FsyncNever()},
	})
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	for i, name := range topics {
		if err := d.CreateTopic(name, log.TopicConfig{Partitions: int32(min(topicPartitions, n-i*topicPartitions))}); err != nil {
			return r, err
		}
	}
	for round := range appendsPerIdlePart {
		for i := range n {
			p, err := d.Partition(topics[i/topicPartitions], int32(i%topicPartitions))
			if err != nil {
				return r, err
			}
			if _, err := p.Append(recs); err != nil {
				return r, fmt.Errorf("round %d: append to %s-%d: %w", round, p.Topic(), p.ID(), err)
			}
			// Counting the descriptors costs a directory read; every
			// 64th append still sees every eviction's effect, as the
			// bound holds 100 partitions.
			if i%64 == 0 {
				files, err := openFiles()
				if err != nil {
					return r, err
				}
				r.peakFiles = max(r.peakFiles, files-baseFiles)
			}
		}
	}
	r.elapsed = time.Since(start)
	r.partitions = n
	r.heap = int64(heapAfterGC()) - int64(baseHeap)
	r.goroutines = runtime.NumGoroutine() - baseGoroutines
	return r, nil
}

// heapAfterGC returns the bytes of live heap objects. The second GC frees
// what the finalizers of the first (closed files') released.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// openFiles counts the process's file descriptors (Linux's /proc), less
// the one that reads the directory.
func openFiles() (int, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("count open files: %w", err)
	}
	return len(fds) - 1, nil
}
