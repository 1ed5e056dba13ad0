package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/segment"
)

// txnWorkload is transactional producers, each with its own
// transactional id, running one transaction after another: a batch of
// one record to each of one or two partitions of the topic (the leader
// adds the partition to the transaction at the coordinator, transactions
// version 2), then EndTxn at the coordinator, a commit or now and then an
// abort. A produce is retried, the same bytes, until its deadline; a
// transaction a produce of which never succeeded is aborted, and the
// producer takes a new epoch (InitProducerID), as Kafka's producer does
// after an abortable error. EndTxn is retried while the coordinator is
// away or loading, as Kafka's producer retries it.
//
// The check, once every marker is written (each partition's last stable
// offset at its high watermark): every record of a transaction whose
// commit was answered is read committed, once; none of a transaction
// whose abort was answered is; a transaction whose end was not answered
// is read whole or not at all, on every partition alike (atomicity); and
// nothing read committed is of no transaction the producers ran.
type txnWorkload struct {
	topic      string
	partitions int32
	producers  int
	ps         []*simTxnProducer
}

// simTxnProducer is one transactional producer of a txnWorkload.
type simTxnProducer struct {
	txnID      string
	partitions int32
	rng        *rand.Rand
	// txns are its transactions, in order: the run goroutine's until it
	// returns.
	txns []*simTxn
}

// txnOutcome is what a producer was told of how a transaction ended.
type txnOutcome int

const (
	txnUnanswered txnOutcome = iota // no EndTxn answered: all or nothing
	txnCommitted
	txnAborted
)

// simTxn is one transaction of a simTxnProducer.
type simTxn struct {
	values  map[int32][]string // the records it produced, or tried to, by partition
	outcome txnOutcome
}

// txnProduceDeadline is how long a transaction's produce is retried
// before the producer aborts the transaction.
const txnProduceDeadline = 3 * time.Second

func (w *txnWorkload) setup(ctx context.Context, s *sim) []simPartition {
	if err := s.node(s.c.ids[0]).CreateTopic(ctx, w.topic, TopicSpec{Partitions: w.partitions, ReplicationFactor: 3}); err != nil {
		s.fatalf("creating topic %q: %v", w.topic, err)
	}
	var parts []simPartition
	for i := range w.partitions {
		parts = append(parts, simPartition{w.topic, i})
	}
	for i := range w.producers {
		w.ps = append(w.ps, &simTxnProducer{txnID: fmt.Sprintf("tx%d", i), partitions: w.partitions,
			rng: rand.New(rand.NewPCG(s.seed, 0x7478+uint64(i)))})
	}
	return parts
}

func (w *txnWorkload) run(stop, drain context.Context, s *sim) {
	var wg sync.WaitGroup
	for _, p := range w.ps {
		wg.Go(func() { p.run(stop, drain, s, w.topic) })
	}
	wg.Wait()
}

// run runs transactions until stop ends; the last one it ends within
// drain.
func (p *simTxnProducer) run(stop, drain context.Context, s *sim, topic string) {
	pe, ok := p.initProducer(drain, s)
	for ok && stop.Err() == nil {
		t := &simTxn{values: map[int32][]string{}}
		p.txns = append(p.txns, t)
		commit := p.rng.IntN(4) != 0
		seqs := map[int32]int32{}
		for k := range 1 + p.rng.IntN(2) {
			part := p.rng.Int32N(p.partitions)
			v := fmt.Sprintf("%s:%d:%d", p.txnID, len(p.txns)-1, k)
			t.values[part] = append(t.values[part], v)
			if !p.produce(drain, s, pe, seqs, topic, part, v) {
				commit = false
				break
			}
		}
		// Each transaction starts its sequences over in an epoch of its
		// own: the one EndTxn gave (transactions version 2), or a new one.
		next, fresh, ended := p.end(drain, s, pe, t, commit)
		if ok = ended; ok && (!fresh || next == pe) {
			next, ok = p.initProducer(drain, s)
		}
		pe = next
	}
}

// atCoordinator runs fn at the producer's coordinator until it answers
// other than an error Kafka's producer retries, or ctx ends.
func (p *simTxnProducer) atCoordinator(ctx context.Context, s *sim, what string, fn func(*Node) error) error {
	var err error
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			s.count(what+" retried after "+errorName(err), 1)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		var n *Node
		for _, live := range s.liveNodes() {
			if n = s.node(live.TransactionCoordinator(p.txnID)); n != nil {
				break
			}
		}
		if n == nil {
			err = errors.New("no live coordinator known")
			continue
		}
		if err = fn(n); !errorsIsAny(err, idempotence.ErrNotCoordinator, idempotence.ErrCoordinatorLoadInProgress,
			idempotence.ErrCoordinatorNotAvailable, idempotence.ErrConcurrentTransactions, ErrClosed) {
			return err
		}
	}
	return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
}

// initProducer gets the producer's id and next epoch, which aborts a
// transaction it left open; false once ctx ended.
func (p *simTxnProducer) initProducer(ctx context.Context, s *sim) (idempotence.ProducerIDAndEpoch, bool) {
	var pe idempotence.ProducerIDAndEpoch
	err := p.atCoordinator(ctx, s, "InitProducerID", func(n *Node) (err error) {
		pe, err = n.Transactions().InitProducerID(p.txnID, time.Minute)
		return err
	})
	if err != nil && ctx.Err() == nil {
		s.finding("%s: InitProducerID: %v", p.txnID, err)
	}
	return pe, err == nil
}

// produce sends one transactional record to part's leader until it is
// acknowledged, the deadline passes or ctx ends.
func (p *simTxnProducer) produce(ctx context.Context, s *sim, pe idempotence.ProducerIDAndEpoch, seqs map[int32]int32, topic string, part int32, value string) bool {
	b, err := segment.AppendBatch(nil, []segment.Record{{Value: []byte(value), Timestamp: time.Now().UnixMilli()}},
		segment.BuildOptions{Transactional: true, Producer: &segment.ProducerFields{ID: pe.ProducerID, Epoch: pe.Epoch, BaseSequence: seqs[part]}})
	if err != nil {
		panic(err) // the record is the test's own
	}
	sp := simPartition{topic, part}
	deadline := time.Now().Add(txnProduceDeadline)
	hint := replica.NoNode
	for attempt := 0; ctx.Err() == nil && time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			s.count("transactional produce retries", 1)
			time.Sleep(10 * time.Millisecond)
		}
		n := s.leaderOf(sp, hint)
		hint = replica.NoNode
		if n == nil {
			continue
		}
		call, cancel := context.WithTimeout(ctx, time.Second)
		_, err := n.ProduceTransactional(call, p.txnID, true, topic, part, replica.AcksAll, b)
		cancel()
		if err == nil {
			seqs[part]++
			s.count("transactional records acknowledged", 1)
			return true
		}
		if nl, ok := errors.AsType[*replica.NotLeaderError](err); ok {
			hint = nl.Leader
		}
		if !retriable(err) && !errorsIsAny(err, context.DeadlineExceeded, ErrClosed, idempotence.ErrConcurrentTransactions) {
			s.count("transactional produces refused: "+errorName(err), 1)
			return false
		}
	}
	s.count("transactional produces given up", 1)
	return false
}

// end ends t at the coordinator as commit asks, and returns the
// producer's next id and epoch; fresh says whether the coordinator gave
// them (false: the producer is to take a new epoch). ok is false once ctx
// ended.
func (p *simTxnProducer) end(ctx context.Context, s *sim, pe idempotence.ProducerIDAndEpoch, t *simTxn, commit bool) (next idempotence.ProducerIDAndEpoch, fresh, ok bool) {
	err := p.atCoordinator(ctx, s, "EndTxn", func(n *Node) (err error) {
		next, err = n.Transactions().EndTxn(p.txnID, pe, commit)
		return err
	})
	switch {
	case err == nil && commit:
		t.outcome = txnCommitted
		s.count("transactions committed", 1)
		return next, true, true
	case err == nil:
		t.outcome = txnAborted
		s.count("transactions aborted", 1)
		return next, true, true
	case ctx.Err() != nil:
		s.count("transactions unanswered", 1)
		return pe, false, false
	default:
		// An end the coordinator refuses (it aborted the transaction
		// itself, say) leaves the outcome to the check: all or nothing.
		s.count("transactions ended with "+errorName(err), 1)
		return pe, false, true
	}
}

// errorName is the Kafka name of err's code, or its text up to the
// first colon.
func errorName(err error) string {
	if c, ok := errors.AsType[kafkaerr.Code](err); ok {
		return c.Error()
	}
	name, _, _ := strings.Cut(err.Error(), ":")
	return name
}

func (w *txnWorkload) check(s *sim) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	read := map[string][]int32{} // the partitions each value is read committed from, once per read
	for i := range w.partitions {
		sp := simPartition{w.topic, i}
		s.waitUntil(20*time.Second, "every marker of "+sp.String(), func() string {
			n := s.leaderOf(sp, replica.NoNode)
			if n == nil {
				return "no leader"
			}
			l, err := n.leaderLog(ctx, sp.topic, sp.partition)
			if err != nil {
				return err.Error()
			}
			lso, err := l.LastStableOffset()
			if err != nil {
				return err.Error()
			}
			if _, hw, _, err := l.Offsets(); err != nil || lso != hw {
				return fmt.Sprintf("last stable offset %d, high watermark %d (%v)", lso, hw, err)
			}
			return ""
		})
		for _, v := range s.c.read(ctx, sp.topic, sp.partition, log.ReadCommitted) {
			read[v] = append(read[v], i)
		}
	}
	checked := 0
	for _, p := range w.ps {
		for i, t := range p.txns {
			checked++
			found, want := 0, 0
			for part, values := range t.values {
				for _, v := range values {
					want++
					switch got := read[v]; {
					case len(got) > 1 || len(got) == 1 && got[0] != part:
						s.finding("%s: transaction %d's record %q, produced to partition %d, is read committed from partitions %v", p.txnID, i, v, part, got)
					case len(got) == 1:
						found++
					}
					delete(read, v)
				}
			}
			switch {
			case t.outcome == txnCommitted && found != want:
				s.finding("%s: transaction %d was committed, and %d of its %d records are read committed: %v", p.txnID, i, found, want, t.values)
			case t.outcome == txnAborted && found != 0:
				s.finding("%s: transaction %d was aborted, and %d of its %d records are read committed: %v", p.txnID, i, found, want, t.values)
			case t.outcome == txnUnanswered && found != 0 && found != want:
				s.finding("%s: transaction %d's end was not answered, and %d of its %d records are read committed: not all or nothing: %v", p.txnID, i, found, want, t.values)
			}
		}
	}
	s.count("transactions checked", checked)
	if len(read) > 0 {
		s.finding("read committed from %s, records of no transaction: %s", w.topic, strings.Join(slices.Sorted(maps.Keys(read)), ", "))
	}
}
