package idempotence

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// batch describes a batch a test appends: a producer's data batch with
// sequences first..last, or a marker. Offsets are the partition's next ones
// unless at is set.
type batch struct {
	origin      Origin
	pid         int64
	epoch       int16
	first, last int32
	txn         bool
	marker      *Marker
	at          int64 // base offset; 0 means the partition's end
	ts          int64 // max timestamp; 0 means the partition's clock
}

const pid = 1

// data is a client's data batch of producer 1 with sequences first..last.
func data(epoch int16, first, last int32) batch {
	return batch{origin: OriginClient, pid: pid, epoch: epoch, first: first, last: last}
}

// commit and abort are the coordinator's markers for producer 1.
func commit(epoch int16, coordinatorEpoch int32) batch {
	return batch{origin: OriginCoordinator, pid: pid, epoch: epoch, first: NoSequence, last: NoSequence,
		marker: &Marker{Type: MarkerCommit, CoordinatorEpoch: coordinatorEpoch}}
}

func abort(epoch int16, coordinatorEpoch int32) batch {
	b := commit(epoch, coordinatorEpoch)
	b.marker = &Marker{Type: MarkerAbort, CoordinatorEpoch: coordinatorEpoch}
	return b
}

func (b batch) of(producerID int64) batch { b.pid = producerID; return b }
func (b batch) from(o Origin) batch       { b.origin = o; return b }
func (b batch) transactional() batch      { b.txn = true; return b }
func (b batch) atOffset(off int64) batch  { b.at = off; return b }
func (b batch) stamped(ms int64) batch    { b.ts = ms; return b }

// records returns how many records the batch holds: its sequences count
// with wrap-around past MaxInt32.
func (b batch) records() int64 {
	if b.marker != nil {
		return 1
	}
	n := int64(b.last) - int64(b.first)
	if n < 0 {
		n += math.MaxInt32 + 1
	}
	return n + 1
}

// partition drives a State as a log would: it assigns offsets, validates
// and commits.
type partition struct {
	t   *testing.T
	s   *State
	leo int64
	now int64
	log []BatchInfo // the batches appended, as a log would hold them
}

func newPartition(t *testing.T) *partition {
	s, err := NewState(0, Config{})
	require.NoError(t, err)
	return &partition{t: t, s: s, now: 1_000_000}
}

func (p *partition) info(b batch, base int64) BatchInfo {
	ts := b.ts
	if ts == 0 {
		ts = p.now
	}
	return BatchInfo{
		ProducerID: b.pid, ProducerEpoch: b.epoch, BaseSequence: b.first,
		BaseOffset: base, LastOffset: base + b.records() - 1, MaxTimestamp: ts,
		Transactional: b.txn || b.marker != nil, Control: b.marker != nil, Marker: b.marker,
	}
}

// infos returns the batches of one append of bs at the partition's next
// offsets, and the offset after them.
func (p *partition) infos(bs ...batch) ([]BatchInfo, int64) {
	infos := make([]BatchInfo, len(bs))
	next := p.leo
	for i, b := range bs {
		if b.at != 0 {
			next = b.at
		}
		infos[i] = p.info(b, next)
		next = infos[i].LastOffset + 1
	}
	return infos, next
}

// try validates one append of bs (all with the first batch's origin) and
// commits it unless it is a duplicate or fails.
func (p *partition) try(bs ...batch) (Append, []CompletedTxn, error) {
	infos, next := p.infos(bs...)
	a, err := p.s.Validate(bs[0].origin, infos...)
	if err != nil || a.Duplicate != nil {
		return a, nil, err
	}
	done, err := p.s.Commit(a)
	require.NoError(p.t, err)
	p.leo = max(p.leo, next)
	p.log = append(p.log, infos...)
	return a, done, nil
}

// append appends bs and fails the test unless they are appended.
func (p *partition) append(bs ...batch) []CompletedTxn {
	p.t.Helper()
	a, done, err := p.try(bs...)
	require.NoError(p.t, err)
	require.Nil(p.t, a.Duplicate, "appended as a duplicate")
	return done
}

// entry returns producer id's state, which must exist.
func (p *partition) entry(id int64) Entry {
	p.t.Helper()
	e, ok := p.s.Producer(id)
	require.True(p.t, ok, "no state for producer %d", id)
	return e
}

// summary writes a producer's state as TestSequenceRules's table does,
// "epoch:[lastSeq,...]".
func summary(e Entry) string {
	seqs := make([]string, len(e.Batches))
	for i, b := range e.Batches {
		seqs[i] = fmt.Sprint(b.LastSeq)
	}
	return fmt.Sprintf("%d:[%s]", e.Epoch, strings.Join(seqs, ","))
}
