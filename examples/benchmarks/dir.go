package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// The dir suite measures log.Dir, the data directory of many partitions:
// the heap an idle partition costs, a Producer's throughput from many
// goroutines under FsyncAlways beside the file system's bound, one
// goroutine producing asynchronously beside many producing synchronously,
// and compaction's throughput beside a raw read of the same segments.
func init() { suites["dir"] = dirSuite }

// dirShape sizes the dir suite.
type dirShape struct {
	reps           int           // runs of each timed measurement; the median counts
	partitions     int           // partitions created and appended to in one Dir
	produceFor     time.Duration // how long the producers run
	compactRecords int           // keyed records in the log compacted
	compactKeys    int           // distinct keys among them
	// compactSegment is the segment size of the compacted log: an eighth
	// of it or so, so that the log has several cleanable segments besides
	// its active one, which compaction never touches.
	compactSegment int64
}

// The shapes: 10,000 partitions, 64 producers into 16 partitions,
// and a log of 1,000,000 records over 100,000 keys (10 versions a key).
const (
	producers          = 64
	producePartitions  = 16
	topicPartitions    = 100 // the idle partitions come in topics of this many
	maxOpenFiles       = 300 // three per open segment: 100 partitions open at most
	appendsPerIdlePart = 2
	recordsPerAppend   = 5
)

func dirShapes(quick bool) dirShape {
	if quick {
		return dirShape{reps: 1, partitions: 1_000, produceFor: 200 * time.Millisecond,
			compactRecords: 100_000, compactKeys: 10_000, compactSegment: 2 << 20}
	}
	return dirShape{reps: 5, partitions: 10_000, produceFor: 2 * time.Second,
		compactRecords: 1_000_000, compactKeys: 100_000, compactSegment: 16 << 20}
}

func dirSuite(quick bool) error {
	shape := dirShapes(quick)
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 't', 'r', 'a', 'n', 'd', 'd', 'i', 'r'}))
	value := make([]byte, smallRecordSize)
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	fmt.Printf("values of %d bytes, %d runs of each timed measurement, medians; temporary directories in %s\n",
		smallRecordSize, shape.reps, *logParent)
	var cmps []comparison
	steps := []func() (comparison, error){
		func() (comparison, error) { return measureIdlePartitions(shape, value) },
		func() (comparison, error) { return compareProducers(shape, value) },
		func() (comparison, error) { return compareAsyncProducer(shape, value) },
		func() (comparison, error) { return compareCompaction(shape, rng) },
	}
	for _, step := range steps {
		c, err := step()
		if err != nil {
			return fmt.Errorf("dir suite: %w", err)
		}
		cmps = append(cmps, c)
	}
	printComparisons(cmps)
	return nil
}

// printComparisons prints the comparisons as a table with their targets,
// then as "ratio NAME VALUE" lines.
func printComparisons(cmps []comparison) {
	fmt.Printf("\n%-40s %8s %8s  %s\n", "comparison", "value", "target", "")
	for _, c := range cmps {
		fmt.Printf("%-40s %8.2f %8s  %s\n", c.name, c.value, c.target(), c.met())
	}
	for _, c := range cmps {
		fmt.Printf("ratio %s %.2f\n", c.name, c.value)
	}
}
