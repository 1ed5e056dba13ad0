//go:build linux

package jepsen

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/examples/jepsen/checker"
)

// Group is the consumer group the workload's member joins.
const Group = "jepsen"

// Workload is the clients of a run: idempotent acks=all producers, each
// sending unique values (its id and a counter) to every partition in
// turn, and one group member that commits after each poll; beside them an
// observer fetches the group's committed offsets every second. Every
// outcome goes into the history.
type Workload struct {
	topic      string
	partitions int32

	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	sends   []checker.Send
	acks    []ackTime // of acknowledged sends
	commits []checker.CommitObservation
	errs    map[string]int // produce errors by message, for the report
	pending sync.WaitGroup // promises not yet called
	clients []*kgo.Client
}

type ackTime struct {
	partition     int32
	sent, acked   time.Time
	producer, seq int
}

// StartWorkload starts producers producers of rate records a second each
// and the group member. Their clients have franz-go's defaults but for
// what the workload needs (acks=all, idempotence, the group's manual
// commits), unless fastMetadata: then they refresh metadata as often as
// every 100 ms, and follow a leader change faster than a user's client.
func StartWorkload(c *Cluster, topic string, partitions int32, producers int, rate float64, fastMetadata bool) (*Workload, error) {
	w := &Workload{topic: topic, partitions: partitions, stop: make(chan struct{}), errs: map[string]int{}}
	client := c.UserClient
	if fastMetadata {
		client = c.Client
	}
	for p := range producers {
		cl, err := client(
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.MaxBufferedRecords(1<<20),
			kgo.RecordDeliveryTimeout(30*time.Second),
		)
		if err != nil {
			w.Stop()
			return nil, err
		}
		w.clients = append(w.clients, cl)
		w.wg.Go(func() { w.produce(cl, p+1, rate) })
	}
	member, err := client(
		kgo.ConsumerGroup(Group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		w.Stop()
		return nil, err
	}
	w.clients = append(w.clients, member)
	w.wg.Go(func() { w.consume(member) })
	observer, err := c.Client()
	if err != nil {
		w.Stop()
		return nil, err
	}
	w.clients = append(w.clients, observer)
	w.wg.Go(func() { w.observe(kadm.NewClient(observer)) })
	return w, nil
}

func (w *Workload) produce(cl *kgo.Client, producer int, rate float64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		partition := int32(seq) % w.partitions
		value := fmt.Sprintf("p%d-%d", producer, seq)
		sent := time.Now()
		w.pending.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: w.topic, Partition: partition, Value: []byte(value)}, func(r *kgo.Record, err error) {
			defer w.pending.Done()
			s := checker.Send{Value: value, Producer: producer, Seq: int64(seq), Partition: partition}
			w.mu.Lock()
			defer w.mu.Unlock()
			if err == nil {
				s.Acked, s.Offset = true, r.Offset
				w.acks = append(w.acks, ackTime{partition: partition, sent: sent, acked: time.Now(), producer: producer, seq: seq})
			} else {
				w.errs[err.Error()]++
			}
			w.sends = append(w.sends, s)
		})
	}
}

func (w *Workload) consume(cl *kgo.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-w.stop
		cancel()
	}()
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		cl.PollFetches(pctx)
		pcancel()
		uncommitted := cl.UncommittedOffsets()
		if len(uncommitted) == 0 {
			continue
		}
		start := time.Now()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		cl.CommitOffsetsSync(cctx, uncommitted, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				return
			}
			end := time.Now()
			asked := map[int32]int64{}
			for _, t := range req.Topics {
				for _, p := range t.Partitions {
					asked[p.Partition] = p.Offset
				}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if o, ok := asked[p.Partition]; ok && p.ErrorCode == 0 && t.Topic == w.topic {
						w.commits = append(w.commits, checker.CommitObservation{Partition: p.Partition, Offset: o, Start: start, End: end, Source: "commit"})
					}
				}
			}
		})
		ccancel()
	}
}

func (w *Workload) observe(adm *kadm.Client) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		w.fetchCommits(adm)
	}
}

// fetchCommits asks the group's coordinator for its committed offsets
// and records what it answers.
func (w *Workload) fetchCommits(adm *kadm.Client) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, Group)
	if err != nil {
		return
	}
	end := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.Topic == w.topic && o.At >= 0 {
			w.commits = append(w.commits, checker.CommitObservation{Partition: o.Partition, Offset: o.At, Start: start, End: end, Source: "fetch"})
		}
	})
}

// Stop ends the clients: the producers flush what they buffered for up to
// flush (what is still unanswered then fails: an unknown outcome).
func (w *Workload) Stop() {
	w.StopWithin(0)
}

// StopWithin is Stop with flush to wait for the producers' buffers.
func (w *Workload) StopWithin(flush time.Duration) {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), flush)
	defer cancel()
	for _, cl := range w.clients {
		cl.Flush(ctx)
	}
	for _, cl := range w.clients {
		cl.Close()
	}
	w.pending.Wait()
}

// FinalCommits records the group's committed offsets once more, after
// the member has left.
func (w *Workload) FinalCommits(c *Cluster) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	w.fetchCommits(kadm.NewClient(cl))
	return nil
}

// Sends returns what was sent, with each outcome.
func (w *Workload) Sends() []checker.Send {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sends)
}

// Commits returns every committed offset seen.
func (w *Workload) Commits() []checker.CommitObservation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.commits)
}

// Errors returns the produce errors seen, by message, with their counts.
func (w *Workload) Errors() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.errs)
}

// FirstAcksAfter returns, for each partition, how long after t the first
// acknowledgement of a record sent at t or later came (missing for a
// partition that acknowledged none).
func (w *Workload) FirstAcksAfter(t time.Time) map[int32]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int32]time.Duration{}
	for _, a := range w.acks {
		if a.sent.Before(t) {
			continue
		}
		if d, ok := out[a.partition]; !ok || a.acked.Sub(t) < d {
			out[a.partition] = a.acked.Sub(t)
		}
	}
	return out
}

// LongestSilences returns, for each partition, the longest time between
// two acknowledgements of its records, or between the last one and until
// (a partition that never acknowledged again after a fault).
func (w *Workload) LongestSilences(until time.Time) map[int32]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	byPartition := map[int32][]time.Time{}
	for _, a := range w.acks {
		byPartition[a.partition] = append(byPartition[a.partition], a.acked)
	}
	out := map[int32]time.Duration{}
	for p, ts := range byPartition {
		slices.SortFunc(ts, time.Time.Compare)
		ts = append(ts, until)
		for i := 1; i < len(ts); i++ {
			out[p] = max(out[p], ts[i].Sub(ts[i-1]))
		}
	}
	return out
}

// ReadBack reads every partition of topic from its log start to its high
// watermark with a plain consumer. A partition whose offsets cannot be
// listed within timeout, or whose records do not all come, is unreadable,
// with why.
func ReadBack(c *Cluster, topic string, partitions int32, timeout time.Duration) (reads []checker.Read, start, end map[int32]int64, unreadable map[int32]string, err error) {
	cl, err := c.Client()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(timeout)
	start, end, unreadable = map[int32]int64{}, map[int32]int64{}, map[int32]string{}
	for p := range partitions {
		unreadable[p] = "its offsets were never listed"
	}
	for len(start) < int(partitions) || len(end) < int(partitions) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list(ctx, adm.ListStartOffsets, topic, start, unreadable)
		list(ctx, adm.ListEndOffsets, topic, end, unreadable)
		cancel()
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	from := map[int32]kgo.Offset{}
	for p := range partitions {
		s, okStart := start[p]
		e, okEnd := end[p]
		if okStart && okEnd {
			delete(unreadable, p)
			if e > s {
				from[p] = kgo.NewOffset().At(s)
			}
		} else {
			delete(start, p)
			delete(end, p)
		}
	}
	if len(from) == 0 {
		return nil, start, end, unreadable, nil
	}
	rc, err := c.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer rc.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(timeout))
	defer cancel()
	next := map[int32]int64{}
	for ctx.Err() == nil {
		done := true
		for p := range from {
			done = done && next[p] >= end[p]
		}
		if done {
			break
		}
		rc.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if r.Offset < end[r.Partition] {
				reads = append(reads, checker.Read{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			}
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
	for p := range from {
		if next[p] < end[p] {
			unreadable[p] = fmt.Sprintf("read up to offset %d of %d before the time ran out", next[p], end[p])
		}
	}
	return reads, start, end, unreadable, nil
}

// list records the offsets a ListOffsets answers for the partitions it
// answers, and why for the others.
func list(ctx context.Context, fn func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, into map[int32]int64, why map[int32]string) {
	listed, err := fn(ctx, topic)
	if err != nil {
		for p := range why {
			why[p] = "listing its offsets: " + err.Error()
		}
		return
	}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			why[o.Partition] = "listing its offsets: " + o.Err.Error()
		} else {
			into[o.Partition] = o.Offset
		}
	})
}
