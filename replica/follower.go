package replica

import (
	"fmt"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// followerState is what a follower keeps about its fetching (Kafka's
// PartitionFetchState).
type followerState struct {
	fetchID      uint64
	outstanding  bool
	sentAt       int64
	lastEpoch    int32 // the last fetched epoch the outstanding fetch named
	fenced       bool  // told FENCED_LEADER_EPOCH: wait for new metadata
	backoffUntil int64
	// reconciled is set, under the pre279 bug, once the follower truncated
	// in this epoch: the old protocol checked epochs only then.
	reconciled bool
	// truncateAt is, under the hwBeforeTruncation bug, the truncation a
	// diverging answer asked for, done on the next tick if deferred.
	truncateAt int64
	deferred   bool
	// inStep is set once a fetch in this state was answered with records
	// or nothing, without divergence: the follower's log is a prefix of
	// the leader's, and under SyncedAcks it may fetch ahead of its writes.
	inStep bool
	// reported is the synced offset the outstanding fetch reported.
	reported int64
}

// becomeFollower starts following p.leader. With reset (a new leader
// epoch, or a leader stepping down) the fetch state starts over, so that
// the next fetch names the log's last epoch and the leader checks it for
// divergence: truncation on every epoch change (KAFKA-7164).
func (p *Partition) becomeFollower(reset bool) {
	p.role = RoleFollower
	if reset {
		p.fl = followerState{fetchID: p.fl.fetchID}
		if bugsBuild && p.cfg.bugs.truncateToHighWatermark {
			p.truncate(p.hw)
		}
	}
	p.maybeFetch()
}

func (p *Partition) followerTick() {
	if p.fl.deferred {
		p.truncate(p.fl.truncateAt)
		p.fl.deferred = false
	}
	if p.fl.outstanding && p.now-p.fl.sentAt >= int64(p.cfg.RequestTimeoutTicks+p.cfg.FetchMaxWaitTicks) {
		p.fl.outstanding = false // lost: ask again
	}
	p.maybeFetch()
}

// maybeFetch sends the next fetch, if the follower may: it has a leader
// that did not fence it, no fetch is outstanding, and its writes are
// applied, so that the fetch offset is what its log holds (the leader
// takes it as an acknowledgement). Under SyncedAcks the leader counts only
// what a follower reports synced, so a follower in step with its leader
// (fl.inStep) fetches the next records while the last ones are still
// being written and synced, from the end it handed out and in the epoch
// of its last batch, as Kafka's fetcher does from its fetch state; only a
// pending truncation or epoch change holds it back.
func (p *Partition) maybeFetch() {
	if p.role != RoleFollower || p.leader == NoNode || p.fl.fenced || p.fl.outstanding ||
		p.now < p.fl.backoffUntil || p.fl.deferred {
		return
	}
	latest := p.fl.lastEpoch
	if ahead := p.cfg.SyncedAcks && p.fl.inStep && !p.reshapingWritesPending(); !ahead {
		if p.writesPending() || p.refresh() != nil {
			return
		}
		var err error
		if latest, err = p.cfg.Log.LatestEpoch(); err != nil {
			p.Fail(err)
			return
		}
	}
	synced, err := p.cfg.Log.SyncedEndOffset()
	if err != nil {
		p.Fail(err)
		return
	}
	if bugsBuild && p.cfg.bugs.truncateToHighWatermark || p.fl.reconciled {
		latest = log.UndefinedEpoch // the old fetch named no epoch
	}
	p.fl.fetchID++
	p.fl.outstanding, p.fl.sentAt, p.fl.lastEpoch, p.fl.reported = true, p.now, latest, synced
	p.send(&Fetch{
		Header: p.header(p.leader), ID: p.fl.fetchID, CurrentLeaderEpoch: p.leaderEpoch,
		FetchOffset: p.end, LastFetchedEpoch: latest, LogStartOffset: p.logStart, SyncedOffset: synced,
		MaxBytes: int32(min(p.cfg.FetchMaxBytes, 1<<31-1)), MaxWait: int32(min(p.cfg.FetchMaxWaitTicks, 1<<31-1)),
		BrokerEpoch: p.ownBrokerEpoch(),
	})
}

// followerSynced tells the leader at once what a follower fetching ahead
// has synced since its outstanding fetch: the leader, holding that fetch
// until it has records, would not learn it before, and an AcksAll produce
// may wait on it. The new fetch replaces the held one on the leader; an
// answer to the old one is stale.
func (p *Partition) followerSynced() {
	if p.cfg.SyncedAcks && p.fl.outstanding && p.fl.inStep {
		synced, err := p.cfg.Log.SyncedEndOffset()
		if err != nil {
			p.Fail(err)
			return
		}
		if synced > p.fl.reported {
			p.fl.outstanding = false
		}
	}
	p.maybeFetch()
}

// stepFetchResponse handles the leader's answer (AbstractFetcherThread's
// processFetchRequest). A response that is not to the outstanding fetch is
// stale; one whose records do not check changes nothing, and the fetch is
// sent again when it times out.
func (p *Partition) stepFetchResponse(m *FetchResponse) error {
	// The fetch offset must match too: IDs start over when a node
	// restarts, and a response to its previous life may come late.
	// The leader's epoch must be the follower's, except in the answers
	// that say they differ: a FENCED_LEADER_EPOCH from a leader in an
	// epoch no later than the follower's answers a fetch of a previous
	// life, and would stop it fetching for good.
	epochOK := m.LeaderEpoch == p.leaderEpoch
	switch m.Err {
	case ErrFencedLeaderEpoch:
		epochOK = m.LeaderEpoch > p.leaderEpoch
	case ErrUnknownLeaderEpoch, ErrNotLeaderOrFollower:
		epochOK = true
	}
	if p.role != RoleFollower || !p.fl.outstanding || m.ID != p.fl.fetchID || m.From != p.leader ||
		m.FetchOffset != p.end || !epochOK {
		return fmt.Errorf("%w: fetch response %d from node %d", ErrStale, m.ID, m.From)
	}
	var batches []segment.Batch
	if m.Err == kafkaerr.None && m.DivergingEpoch < 0 {
		var err error
		if batches, err = p.checkRecords(m.Records); err != nil {
			return err
		}
	}
	p.fl.outstanding = false
	switch m.Err {
	case kafkaerr.None:
	case ErrFencedLeaderEpoch:
		p.fl.fenced = true
		return nil
	case ErrOffsetOutOfRange:
		p.outOfRange(m)
		return nil
	default:
		p.fl.backoffUntil = p.now + int64(p.cfg.RetryBackoffTicks)
		return nil
	}
	if m.DivergingEpoch >= 0 {
		// Truncate, and apply neither records nor the high watermark of
		// this response (KAFKA-14704).
		off, err := p.truncationOffset(m.DivergingEpoch, m.DivergingEndOffset)
		if err != nil {
			p.Fail(err)
			return nil
		}
		if bugsBuild && p.cfg.bugs.hwBeforeTruncation {
			p.fl.truncateAt, p.fl.deferred = off, true
			p.setFollowerHW(m.HighWatermark)
			return nil
		}
		p.truncate(off)
		p.fl.reconciled = bugsBuild && p.cfg.bugs.pre279
		return nil
	}
	p.fl.inStep = true
	for _, b := range batches {
		p.fl.lastEpoch = b.PartitionLeaderEpoch()
		if b.BaseOffset() < p.end {
			// The leader's log start lies inside this batch and ours
			// was restarted there: restart at the batch.
			p.write(Write{Kind: WriteRestart, Offset: b.BaseOffset()})
			p.logStart, p.hw = b.BaseOffset(), b.BaseOffset()
		}
		p.write(Write{Kind: WriteAppend, Batch: b})
		p.end = b.LastOffset() + 1
	}
	p.setFollowerHW(m.HighWatermark)
	// Records the leader deleted go here too, up to the high watermark
	// (Kafka's follower maybeIncrementLogStartOffset).
	if start := min(m.LogStartOffset, p.hw); start > p.logStart {
		p.logStart = start
		p.write(Write{Kind: WriteLogStart, Offset: start})
	}
	p.maybeFetch()
	return nil
}

// setFollowerHW takes the leader's high watermark, within the log.
func (p *Partition) setFollowerHW(leaderHW int64) {
	if hw := min(max(leaderHW, p.logStart), p.end); hw != p.hw {
		p.hw = hw
		p.write(Write{Kind: WriteHighWatermark, Offset: hw})
	}
}

// checkRecords parses a response's records: valid batches, in increasing
// offsets from the fetch offset on, in epochs from the follower's last
// one up to the leader's. A batch wholly below the fetch offset is
// dropped; one that straddles it is kept only by a log that is empty
// since it restarted.
func (p *Partition) checkRecords(records []byte) ([]segment.Batch, error) {
	var out []segment.Batch
	next, epoch := p.end, max(p.fl.lastEpoch, 0)
	for rest := records; len(rest) > 0; {
		b, r, err := segment.ParseBatch(rest)
		if err == nil {
			err = b.Validate()
		}
		if err != nil {
			return nil, fmt.Errorf("%w: fetch response at offset %d: %w", ErrCorruptMessage, next, err)
		}
		rest = r
		e := b.PartitionLeaderEpoch()
		switch {
		case e < epoch || e > p.leaderEpoch:
			return nil, fmt.Errorf("%w: batch [%d, %d] of epoch %d, expected %d to %d", ErrCorruptMessage, b.BaseOffset(), b.LastOffset(), e, epoch, p.leaderEpoch)
		case b.LastOffset() < next && len(out) == 0:
			continue
		case b.BaseOffset() < next && (len(out) > 0 || p.end != p.logStart):
			return nil, fmt.Errorf("%w: batch [%d, %d] overlaps the log end %d", ErrCorruptMessage, b.BaseOffset(), b.LastOffset(), next)
		}
		out = append(out, b)
		next, epoch = b.LastOffset()+1, e
	}
	return out, nil
}

// truncationOffset is where a follower truncates when the leader's epoch
// leaderEpoch ends at leaderEnd (AbstractFetcherThread.getOffsetTruncationState,
// KIP-279): compare with its own end of that epoch. If it lacks the epoch,
// it truncates to the end of its own largest epoch below, and the next
// fetch, naming that epoch, asks again.
func (p *Partition) truncationOffset(leaderEpoch int32, leaderEnd int64) (int64, error) {
	if bugsBuild && p.cfg.bugs.pre279 {
		leaderEpoch = log.UndefinedEpoch // KIP-101 answered with an offset only
	}
	if leaderEpoch == log.UndefinedEpoch {
		return min(leaderEnd, p.end), nil
	}
	epoch, end, err := p.cfg.Log.EndOffsetForEpoch(leaderEpoch)
	switch {
	case err != nil:
		return 0, err
	case epoch == log.UndefinedEpoch:
		return min(leaderEnd, p.end), nil
	case epoch != leaderEpoch:
		return min(end, p.end), nil
	default:
		return min(leaderEnd, end, p.end), nil
	}
}

func (p *Partition) truncate(off int64) {
	p.fl.inStep = false
	p.write(Write{Kind: WriteTruncate, Offset: off})
	p.end = min(p.end, off)
	p.hw = min(p.hw, p.end)
}

// outOfRange handles OFFSET_OUT_OF_RANGE (fetchOffsetAndTruncate): a
// follower past the leader's end (after an unclean election) truncates to
// it; one below the leader's log start restarts its log there.
func (p *Partition) outOfRange(m *FetchResponse) {
	switch {
	case m.LogEndOffset < p.end:
		p.truncate(m.LogEndOffset)
	case p.end < m.LogStartOffset:
		p.fl.inStep = false
		p.write(Write{Kind: WriteRestart, Offset: m.LogStartOffset})
		p.logStart, p.end, p.hw = m.LogStartOffset, m.LogStartOffset, m.LogStartOffset
	default:
		p.fl.backoffUntil = p.now + int64(p.cfg.RetryBackoffTicks)
	}
}
