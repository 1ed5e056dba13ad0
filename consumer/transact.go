package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/strandlog/strand/group"
	"github.com/strandlog/strand/log"
)

// TransactOptions configure a TransactSession.
type TransactOptions struct {
	// Consumer configures the session's consumer. Its commits are the
	// session's: DisableAutoCommit is set, and Isolation is
	// log.ReadCommitted, so that a transform never reads what an aborted
	// transaction wrote.
	Consumer Options
	// TransactionalID names the session's producer across restarts: the
	// next session of the same id aborts what a killed one left open.
	// Required.
	TransactionalID string
	// Producer configures the transactional producer.
	Producer log.TransactionalOptions
}

// TransactSession is Kafka's consume-transform-produce loop (KIP-98,
// KIP-447; the Java producer's sendOffsetsToTransaction, franz-go's
// GroupTransactSession): a member of a group whose records a transform
// reads, and a transactional producer whose output commits in one
// transaction with the group's offsets past what was read. A record is
// therefore processed once: its output and the offset after it commit
// together, or neither does and the session reads it again.
//
// Poll begins a transaction, Produce writes in it, and End commits or
// aborts it. An abort, a failed commit, or a rebalance that took a
// partition away during the transaction rewinds the session to where the
// transaction began. The group's coordinator refuses the offsets of a
// member no longer in the generation it read in (KIP-447), so that a
// zombie's transaction cannot commit.
//
// Its methods are called from one goroutine, as a Consumer's are.
type TransactSession struct {
	s    *group.Service
	c    *Consumer
	tp   *log.TransactionalProducer
	open bool // a transaction is begun
	// begun is where the open transaction began reading each partition it
	// read, to rewind to.
	begun map[TopicPartition]int64
	// revoked is set when a partition the open transaction read was
	// taken away: the transaction can only abort.
	revoked bool
}

// NewTransactSession returns a session over s and its Dir.
// The consumer joins on the first Poll. Its producer, started now, aborts
// any transaction a previous session of the same TransactionalID left
// open.
func NewTransactSession(s *group.Service, opts TransactOptions) (*TransactSession, error) {
	if opts.TransactionalID == "" {
		return nil, fmt.Errorf("%w: consumer.TransactOptions.TransactionalID is required", group.ErrInvalidConfig)
	}
	ts := &TransactSession{s: s, begun: map[TopicPartition]int64{}}
	copts := opts.Consumer
	copts.DisableAutoCommit, copts.Isolation = true, log.ReadCommitted
	onRevoked, onLost := copts.OnRevoked, copts.OnLost
	copts.OnRevoked = func(ctx context.Context, c *Consumer, tps []TopicPartition) {
		ts.taken(tps)
		if onRevoked != nil {
			onRevoked(ctx, c, tps)
		}
	}
	copts.OnLost = func(ctx context.Context, c *Consumer, tps []TopicPartition) {
		ts.taken(tps)
		switch {
		case onLost != nil:
			onLost(ctx, c, tps)
		case onRevoked != nil:
			onRevoked(ctx, c, tps)
		}
	}
	var err error
	if ts.c, err = New(s, copts); err != nil {
		return nil, err
	}
	if ts.tp, err = s.Dir().NewTransactionalProducer(opts.TransactionalID, opts.Producer); err != nil {
		return nil, errors.Join(err, ts.c.Close(context.Background()))
	}
	return ts, nil
}

// taken notes partitions given up in the middle of a transaction.
func (ts *TransactSession) taken(tps []TopicPartition) {
	for _, tp := range tps {
		if _, read := ts.begun[tp]; read && ts.open {
			ts.revoked = true
		}
		delete(ts.begun, tp)
	}
}

// Consumer returns the session's consumer, for its assignment, pauses and
// generation; its commits are the session's.
func (ts *TransactSession) Consumer() *Consumer { return ts.c }

// Poll begins a transaction if none is open, and returns the next records
// of the partitions the session owns, as Consumer.Poll does.
func (ts *TransactSession) Poll(ctx context.Context) ([]Message, error) {
	if !ts.open {
		if err := ts.tp.Begin(); err != nil {
			return nil, err
		}
		ts.open, ts.revoked = true, false
		clear(ts.begun)
	}
	before := map[TopicPartition]int64{}
	for _, tp := range ts.c.Assigned() {
		if _, read := ts.begun[tp]; !read {
			before[tp], _ = ts.c.Position(tp)
		}
	}
	ms, err := ts.c.Poll(ctx)
	for _, m := range ms {
		if _, read := ts.begun[m.TopicPartition]; read {
			continue
		}
		// A partition assigned in this Poll starts at its first record.
		at, ok := before[m.TopicPartition]
		if !ok {
			at = m.Offset
		}
		ts.begun[m.TopicPartition] = at
	}
	return ms, err
}

// Produce produces rec in the open transaction, as
// log.TransactionalProducer.Produce does.
func (ts *TransactSession) Produce(ctx context.Context, topic string, partition int32, rec log.Record) (log.Produced, error) {
	return ts.tp.Produce(ctx, topic, partition, rec)
}

// End ends the open transaction. With commit, the group's offsets past
// every record the transaction read commit with its output, and End
// reports true once they have. Otherwise, or if a partition it read was
// taken away, or the commit failed (the error says why), it aborts, and
// the session reads again from where the transaction began.
func (ts *TransactSession) End(ctx context.Context, commit bool) (committed bool, err error) {
	if !ts.open {
		return false, nil
	}
	if commit && !ts.revoked {
		if err = ts.commit(ctx); err == nil {
			ts.open = false
			return true, nil
		}
	}
	if aerr := ts.tp.Abort(ctx); aerr != nil {
		return false, errors.Join(err, aerr) // still open: End again
	}
	ts.open = false
	for tp, at := range ts.begun {
		if serr := ts.c.Seek(tp, at); serr != nil && !errors.Is(serr, ErrNotAssigned) {
			err = errors.Join(err, serr)
		}
	}
	return false, err
}

func (ts *TransactSession) commit(ctx context.Context) error {
	if len(ts.begun) > 0 {
		memberID, generation := ts.c.Generation()
		req := log.TxnOffsetCommit{Group: ts.c.opts.Group, MemberID: memberID, GenerationID: generation,
			GroupInstanceID: ts.c.opts.InstanceID}
		for tp := range ts.begun {
			pos, err := ts.c.Position(tp)
			if err != nil {
				return err
			}
			req.Offsets = append(req.Offsets, log.TxnOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: pos, LeaderEpoch: -1})
		}
		if err := ts.tp.CommitOffsets(ctx, ts.s.TxnCommitter(), req); err != nil {
			return err
		}
	}
	return ts.tp.Commit(ctx)
}

// Close aborts the open transaction and closes the consumer and the
// producer.
func (ts *TransactSession) Close(ctx context.Context) error {
	var err error
	if ts.open {
		_, err = ts.End(ctx, false)
	}
	return errors.Join(err, ts.c.Close(ctx), ts.tp.Close())
}
