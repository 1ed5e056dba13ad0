package replica

import (
	"errors"
	"fmt"
	"slices"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// never is the lastCaughtUp of a follower that never caught up.
const never = -1 << 62

// leaderState is what a leader keeps.
type leaderState struct {
	// ready is false until the leader epoch write is applied: until then
	// produces and fetches wait, since the log does not know the epoch.
	ready     bool
	leso      int64 // the leader epoch start offset
	followers []*follower
	pending   *pendingISR
	waiting   []*waitingProduce
	queued    []*Produce
	// producers is the producer state as of the leader's log end: the
	// log's, read once the leader epoch is in the log, and ahead of it by
	// the appends handed out and not yet applied. Kafka's leader checks a
	// producer's batch inside its append
	// (UnifiedLog.analyzeAndValidateProducerState); this leader hands its
	// appends out, so it checks against the state they will leave, and
	// only while it leads in its epoch: a node that does not lead answers
	// no retry, however its log looks.
	producers *idempotence.State
}

// follower is a leader's view of a follower (Kafka's Replica state).
type follower struct {
	id                 NodeID
	leo                int64 // -1 until it fetches in this epoch
	synced             int64 // what it reported synced, -1 until it fetches
	lastFetchLeaderLEO int64
	lastFetchTime      int64
	lastCaughtUp       int64
	fetchedThisEpoch   bool
	parked             *parkedFetch
	// brokerEpoch is the broker epoch of the fetches this state comes
	// from (KIP-903), NoBrokerEpoch until one names it.
	brokerEpoch int64
}

// newFollower is a follower the leader knows nothing of yet.
func newFollower(id NodeID) *follower {
	return &follower{id: id, leo: -1, synced: -1, lastCaughtUp: never, lastFetchTime: never, lastFetchLeaderLEO: -1}
}

// caughtUp is Kafka's Replica.isCaughtUp.
func (f *follower) caughtUp(leaderEnd, now int64, lag int) bool {
	return f.leo == leaderEnd || now-f.lastCaughtUp <= int64(lag)
}

// parkedFetch is a long poll: a fetch with nothing to return yet.
type parkedFetch struct {
	req      *Fetch
	deadline int64
	hw       int64 // the high watermark it would have been answered with
}

type pendingISR struct {
	isr     []NodeID
	expand  bool
	msg     *AlterPartition
	retryAt int64
}

type waitingProduce struct {
	req        *Produce
	base, last int64
	deadline   int64
	// duplicate: the batch repeats one the log has, at [base, last].
	duplicate bool
}

func (p *Partition) becomeLeader(newEpoch bool, oldISR []NodeID) {
	wasLeader := p.role == RoleLeader
	p.role = RoleLeader
	p.fl = followerState{fetchID: p.fl.fetchID}
	if !newEpoch {
		// Only the ISR or replicas changed: the committed state is the
		// controller's now, whatever was proposed.
		p.ld.pending = nil
		p.syncFollowers(false)
		p.forgetRemovedFromISR(oldISR)
		p.leaderProgress()
		return
	}
	if wasLeader {
		// Fetches parked in the old epoch are fenced now.
		for _, f := range p.ld.followers {
			if f.parked != nil {
				p.answerFetch(f.parked.req, ErrFencedLeaderEpoch)
				f.parked = nil
			}
		}
	}
	p.ld.ready = false
	p.ld.pending = nil
	p.syncFollowers(true)
	p.write(Write{Kind: WriteLeaderEpoch, Epoch: p.leaderEpoch})
	p.epochPending = p.leaderEpoch
}

// syncFollowers makes the follower list match the replicas; with reset,
// every follower's state starts over as for a new leader epoch (Kafka's
// resetReplicaState): its log end unknown, caught up now if in the ISR.
func (p *Partition) syncFollowers(reset bool) {
	var fs []*follower
	for _, id := range p.replicas {
		if id == p.cfg.ID {
			continue
		}
		i := slices.IndexFunc(p.ld.followers, func(f *follower) bool { return f.id == id })
		if i >= 0 && !reset {
			fs = append(fs, p.ld.followers[i])
			continue
		}
		f := newFollower(id)
		if slices.Contains(p.isr, id) {
			f.lastCaughtUp = p.now
		}
		if i >= 0 {
			f.parked = p.ld.followers[i].parked
		}
		fs = append(fs, f)
	}
	p.ld.followers = fs
}

// forgetRemovedFromISR starts over the state of each follower the
// controller took out of the ISR (fenced, shut down, its log offline), so
// that neither the high watermark waits for it, though it caught up
// within ReplicaLagTicks, nor a fetch it sent before proposes it for the
// ISR again: Kafka's leader does either only for a follower eligible to
// join (Partition.maybeIncrementLeaderHW and maybeExpandIsr,
// isReplicaIsrEligible), and the controller removes only ineligible ones,
// or laggards this leader proposed to remove. A parked fetch is answered
// empty, so that a live follower fetches again at once; once it is back
// at the log end it is waited for, and rejoins.
func (p *Partition) forgetRemovedFromISR(oldISR []NodeID) {
	for i, f := range p.ld.followers {
		if !slices.Contains(oldISR, f.id) || slices.Contains(p.isr, f.id) {
			continue
		}
		if f.parked != nil {
			p.answerFetch(f.parked.req, kafkaerr.None)
		}
		nf := newFollower(f.id)
		nf.brokerEpoch = f.brokerEpoch
		p.ld.followers[i] = nf
	}
}

// leaderReady runs once the leader epoch is in the log.
func (p *Partition) leaderReady() {
	if err := p.refresh(); err != nil {
		return
	}
	if err := p.loadProducers(); err != nil {
		p.Fail(err)
		return
	}
	p.ld.ready = true
	p.ld.leso = p.end
	queued := p.ld.queued
	p.ld.queued = nil
	for _, req := range queued {
		if err := p.produce(req); err != nil {
			p.refuse(req, err)
		}
	}
	for _, f := range p.ld.followers {
		if f.parked != nil {
			req := f.parked.req
			f.parked = nil
			p.serveFetch(req, f)
		}
	}
}

// loadProducers reads the log's producer state, for a leader whose
// appends are all applied.
func (p *Partition) loadProducers() error {
	entries, err := p.cfg.Log.Producers()
	if err != nil {
		return fmt.Errorf("replica: reading the producer state: %w", err)
	}
	p.ld.producers, err = idempotence.NewStateOf(p.end, entries, idempotence.Config{})
	return err
}

// resignLeadership fails what waits on this leader.
func (p *Partition) resignLeadership() {
	p.failProduces(&NotLeaderError{Leader: p.leader, LeaderEpoch: p.leaderEpoch})
	for _, f := range p.ld.followers {
		if f.parked != nil {
			p.answerFetch(f.parked.req, ErrNotLeaderOrFollower)
		}
	}
	p.ld = leaderState{}
}

func (p *Partition) failProduces(err error) {
	for _, w := range p.ld.waiting {
		p.result(w, err)
	}
	for _, req := range p.ld.queued {
		p.refuse(req, err)
	}
	p.ld.waiting, p.ld.queued = nil, nil
}

// result delivers the outcome of a produce the leader took.
func (p *Partition) result(w *waitingProduce, err error) {
	p.results = append(p.results, ProduceResult{Header: p.header(w.req.From), ID: w.req.ID, Err: err,
		BaseOffset: w.base, LastOffset: w.last, Duplicate: w.duplicate})
}

// refuse delivers the refusal of a produce queued before the leader was
// ready.
func (p *Partition) refuse(req *Produce, err error) {
	p.results = append(p.results, ProduceResult{Header: p.header(req.From), ID: req.ID, Err: err})
}

func (p *Partition) stepProduce(m *Produce) error {
	if bugsBuild && p.cfg.bugs.retriesFromLog && p.retryFromLog(m) {
		return nil
	}
	if p.role != RoleLeader {
		return p.notLeader()
	}
	if !p.ld.ready {
		if err := p.checkProduce(m); err != nil {
			return err
		}
		p.ld.queued = append(p.ld.queued, m)
		return nil
	}
	return p.produce(m)
}

// checkProduce is what a leader refuses before it appends
// (Partition.appendRecordsToLeader).
func (p *Partition) checkProduce(m *Produce) error {
	if !m.Acks.valid() {
		return fmt.Errorf("%w: acks %d, allowed 0, 1 or -1", ErrInvalidRequiredAcks, m.Acks)
	}
	if len(m.Batch) > p.cfg.MaxBatchBytes {
		return fmt.Errorf("%w: a batch of %d bytes, MaxBatchBytes is %d", ErrMessageTooLarge, len(m.Batch), p.cfg.MaxBatchBytes)
	}
	b, rest, err := segment.ParseBatch(m.Batch)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%d bytes after the batch", len(rest))
	}
	if err == nil {
		err = b.Validate()
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptMessage, err)
	}
	if m.Acks == AcksAll {
		if p.cfg.MinInsyncReplicas > len(p.replicas) {
			return fmt.Errorf("%w: MinInsyncReplicas %d is above the %d replicas", ErrNotEnoughReplicas, p.cfg.MinInsyncReplicas, len(p.replicas))
		}
		if len(p.isr) < p.effectiveMinISR() {
			return fmt.Errorf("%w: ISR %v, MinInsyncReplicas %d", ErrNotEnoughReplicas, p.isr, p.cfg.MinInsyncReplicas)
		}
	}
	return nil
}

// produce appends m's batch in the leader's epoch at the end of the log,
// once the producer state admits it; a retry of a batch the log has is
// answered with the original's offsets, as its acks ask, and appended
// again never.
func (p *Partition) produce(m *Produce) error {
	if err := p.checkProduce(m); err != nil {
		return err
	}
	b := segment.Batch(m.Batch)
	b.SetBaseOffset(p.end)
	b.SetPartitionLeaderEpoch(p.leaderEpoch)
	dup, err := p.admitProducer(b, m.Coordinator)
	if err != nil {
		return err
	}
	w := &waitingProduce{req: m, base: b.BaseOffset(), last: b.LastOffset()}
	if dup != nil {
		w.base, w.last, w.duplicate = dup.FirstOffset(), dup.LastOffset, true
	} else {
		p.write(Write{Kind: WriteAppend, Batch: b})
		p.end = w.last + 1
	}
	timeout := int64(m.Timeout)
	if timeout <= 0 {
		timeout = int64(p.cfg.ProduceTimeoutTicks)
	}
	w.deadline = p.now + timeout
	p.ld.waiting = append(p.ld.waiting, w)
	if w.duplicate {
		p.completeProduces() // the original may be committed already
	}
	return nil
}

// admitProducer checks b, at the offsets it is about to take, against the
// leader's producer state by Kafka's rules (see package idempotence) and
// records it there; for a retry of one of the producer's last five
// batches it records nothing and returns the original. A client may not
// write a control batch; a coordinator's batch has its epochs checked,
// not its sequence.
func (p *Partition) admitProducer(b segment.Batch, coordinator bool) (*idempotence.BatchMetadata, error) {
	info, err := idempotence.InfoOf(b)
	if err != nil {
		return nil, err
	}
	origin := idempotence.OriginClient
	if coordinator {
		origin = idempotence.OriginCoordinator
	}
	a, err := p.ld.producers.Validate(origin, info)
	if err != nil {
		return nil, fmt.Errorf("replica: %s-%d: %w", p.cfg.Topic, p.cfg.Partition, err)
	}
	if a.Duplicate != nil {
		return a.Duplicate, nil
	}
	if _, err := p.ld.producers.Commit(a); err != nil {
		return nil, fmt.Errorf("replica: %s-%d: %w", p.cfg.Topic, p.cfg.Partition, err)
	}
	return nil, nil
}

// retryFromLog takes m, under bugs.retriesFromLog, if its batch repeats
// one the log's producer state holds, whatever this node's role.
func (p *Partition) retryFromLog(m *Produce) bool {
	entries, err := p.cfg.Log.Producers()
	if err != nil {
		return false
	}
	st, err := idempotence.NewStateOf(p.written, entries, idempotence.Config{})
	if err != nil {
		return false
	}
	info, err := idempotence.InfoOf(segment.Batch(m.Batch))
	if err != nil || info.ProducerID < 0 {
		return false
	}
	a, err := st.Validate(idempotence.OriginClient, info)
	if err != nil || a.Duplicate == nil {
		return false
	}
	p.logRetries = append(p.logRetries, &waitingProduce{req: m, base: a.Duplicate.FirstOffset(), last: a.Duplicate.LastOffset, duplicate: true})
	return true
}

// answerLogRetries answers the retries retryFromLog took once the node's
// high watermark passes them.
func (p *Partition) answerLogRetries() {
	p.logRetries = slices.DeleteFunc(p.logRetries, func(w *waitingProduce) bool {
		if w.last < p.hwWritten {
			p.result(w, nil)
			return true
		}
		return false
	})
}

// completeProduces delivers the results that are due: AcksNone and
// AcksLeader once their append is applied, AcksAll once the high
// watermark passes them (DelayedProduce) and that is applied to the log.
func (p *Partition) completeProduces() {
	n := 0
	for _, w := range p.ld.waiting {
		done := w.last < p.written && (w.req.Acks != AcksAll || w.last < p.hwWritten)
		switch {
		case !done:
			p.ld.waiting[n] = w
			n++
		case w.req.Acks == AcksAll && len(p.maximalISR()) < p.effectiveMinISR():
			p.result(w, fmt.Errorf("%w: maximal ISR %v, MinInsyncReplicas %d", ErrNotEnoughReplicasAfterAppend, p.maximalISR(), p.cfg.MinInsyncReplicas))
		default:
			p.result(w, nil)
		}
	}
	clear(p.ld.waiting[n:])
	p.ld.waiting = p.ld.waiting[:n]
}

// maximalISR is the committed ISR, grown by a pending expansion (KIP-497):
// an expansion counts at once, a shrink only once committed.
func (p *Partition) maximalISR() []NodeID {
	if pd := p.ld.pending; pd != nil && pd.expand {
		return pd.isr
	}
	return p.isr
}

// leaderProgress does what a leader does after anything moved.
func (p *Partition) leaderProgress() {
	if !p.ld.ready {
		return
	}
	p.maybeIncrementHW()
	p.completeProduces()
	p.wakeParked()
}

// maybeIncrementHW moves the high watermark (Partition.maybeIncrementLeaderHW).
func (p *Partition) maybeIncrementHW() {
	if len(p.isr) < p.effectiveMinISR() {
		return // KIP-966 strict min ISR: nothing commits under it
	}
	end := p.written
	if p.cfg.SyncedAcks {
		synced, err := p.cfg.Log.SyncedEndOffset()
		if err != nil {
			p.Fail(err)
			return
		}
		end = min(end, synced)
	}
	hw := highWatermark(end, p.written, p.ld.followers, p.maximalISR(), p.now, p.cfg.ReplicaLagTicks, p.joinWindow(), p.cfg.SyncedAcks)
	if hw > p.hw {
		p.hw = hw
		p.write(Write{Kind: WriteAdvanceHighWatermark, Offset: hw})
	}
}

// joinWindow is how recently a follower outside the ISR must have
// fetched for the high watermark to wait for it: a follower that fetches
// sends its next fetch at once, held at most FetchMaxWaitTicks, or after
// RetryBackoffTicks. Kafka waits only for a follower eligible to join
// (Partition.maybeIncrementLeaderHW, isReplicaIsrEligible: its broker
// neither fenced nor shutting down), which its metadata cache tells; a
// partition here knows only the fetches, and one that stopped (a broker
// that shut down, or died, once caught up) would otherwise hold the high
// watermark back for ReplicaLagTicks. Only liveness is at stake: a
// follower joins the ISR only once it holds the high watermark.
func (p *Partition) joinWindow() int64 {
	return int64(2*p.cfg.FetchMaxWaitTicks + p.cfg.RetryBackoffTicks)
}

// highWatermark is the lowest log end among the leader (end) and the
// followers that hold it back: those in the maximal ISR, and those caught
// up to the leader's log end (leaderEnd) though not yet in it, and
// fetching within the last window ticks, so that they can ever join. With
// synced, a follower's end is what it synced.
func highWatermark(end, leaderEnd int64, fs []*follower, maximalISR []NodeID, now int64, lag int, window int64, synced bool) int64 {
	hw := end
	for _, f := range fs {
		fEnd := f.leo
		if synced {
			fEnd = f.synced
		}
		joining := f.caughtUp(leaderEnd, now, lag) && now-f.lastFetchTime <= window
		if fEnd < hw && (slices.Contains(maximalISR, f.id) || joining) {
			hw = fEnd
		}
	}
	return hw
}

func (p *Partition) leaderTick() {
	n := 0
	for _, w := range p.ld.waiting {
		if w.req.Acks == AcksAll && p.now >= w.deadline {
			p.result(w, fmt.Errorf("%w: [%d, %d] not committed in time; it may still be", ErrRequestTimedOut, w.base, w.last))
			continue
		}
		p.ld.waiting[n] = w
		n++
	}
	clear(p.ld.waiting[n:])
	p.ld.waiting = p.ld.waiting[:n]
	if !p.ld.ready {
		return
	}
	p.wakeParked()
	if pd := p.ld.pending; pd != nil && p.now >= pd.retryAt {
		pd.retryAt = p.now + int64(p.cfg.RequestTimeoutTicks)
		p.send(pd.msg)
	}
	if p.now%int64(p.cfg.ReplicaLagTicks/2) == 0 {
		p.maybeShrinkISR()
		if p.written == p.end {
			// The log forgets expired producers; so does the leader,
			// when no append of its own is outstanding.
			if err := p.loadProducers(); err != nil {
				p.Fail(err)
				return
			}
		}
	}
	if p.cfg.SyncedAcks {
		p.leaderProgress() // the log may have synced more since
	}
}

// maybeShrinkISR proposes an ISR without the followers that did not catch
// up within ReplicaLagTicks (Partition.maybeShrinkIsr).
func (p *Partition) maybeShrinkISR() {
	if p.ld.pending != nil {
		return
	}
	var out []NodeID
	for _, f := range p.ld.followers {
		if slices.Contains(p.isr, f.id) && !f.caughtUp(p.written, p.now, p.cfg.ReplicaLagTicks) {
			out = append(out, f.id)
		}
	}
	if len(out) > 0 {
		p.proposeISR(slices.DeleteFunc(slices.Clone(p.isr), func(n NodeID) bool { return slices.Contains(out, n) }), false)
	}
}

// maybeExpandISR proposes f for the ISR once it holds what the leader
// committed and what its epoch began with, having fetched in this epoch
// (Partition.maybeExpandIsr, KIP-320 rule 4).
func (p *Partition) maybeExpandISR(f *follower) {
	if p.ld.pending != nil || slices.Contains(p.isr, f.id) || !f.fetchedThisEpoch {
		return
	}
	// With SyncedAcks what counts is what the follower synced: that
	// survives its crash, while a fetch it sent before a crash that lost
	// its unsynced tail may still arrive and claim the lost records.
	// KIP-903's broker epochs fence such a fetch only once the leader has
	// heard the follower's next life, or the controller has.
	end := f.leo
	if p.cfg.SyncedAcks {
		end = f.synced
	}
	if end >= p.hw && (end >= p.ld.leso || bugsBuild && p.cfg.bugs.noEpochStartGuard) {
		p.proposeISR(append(slices.Clone(p.isr), f.id), true)
	}
}

// proposeISR sends the controller an ISR, each member with its broker
// epoch as the leader knows it (Partition.addBrokerEpochToIsr, KIP-903):
// for a follower, that of the fetches it counted; NoBrokerEpoch for one it
// has not heard in this epoch, which the controller does not check.
func (p *Partition) proposeISR(isr []NodeID, expand bool) {
	members := make([]ISRMember, len(isr))
	for i, id := range isr {
		members[i] = ISRMember{ID: id, BrokerEpoch: p.ownBrokerEpoch()}
		if j := slices.IndexFunc(p.ld.followers, func(f *follower) bool { return f.id == id }); j >= 0 {
			members[i].BrokerEpoch = p.ld.followers[j].brokerEpoch
		}
	}
	msg := &AlterPartition{Header: p.header(NoNode), BrokerEpoch: p.ownBrokerEpoch(),
		LeaderEpoch: p.leaderEpoch, PartitionEpoch: p.partitionEpoch, ISR: members}
	p.ld.pending = &pendingISR{isr: isr, expand: expand, msg: msg, retryAt: p.now + int64(p.cfg.RequestTimeoutTicks)}
	p.send(msg)
}

// stepAlterPartitionResponse applies the controller's answer
// (Partition.handleAlterPartitionUpdate and its error handling).
func (p *Partition) stepAlterPartitionResponse(m *AlterPartitionResponse) error {
	pd := p.ld.pending
	if p.role != RoleLeader || pd == nil {
		return fmt.Errorf("%w: no ISR change is pending", ErrStale)
	}
	switch m.Err {
	case kafkaerr.None:
		if m.LeaderEpoch != p.leaderEpoch || m.PartitionEpoch <= p.partitionEpoch {
			return fmt.Errorf("%w: answer for epochs %d/%d, current %d/%d", ErrStale, m.LeaderEpoch, m.PartitionEpoch, p.leaderEpoch, p.partitionEpoch)
		}
		if !slices.Contains(m.ISR, p.cfg.ID) {
			return fmt.Errorf("%w: the committed ISR %v lacks its leader %d", ErrInvalidMessage, m.ISR, p.cfg.ID)
		}
		p.isr, p.partitionEpoch, p.ld.pending = slices.Clone(m.ISR), m.PartitionEpoch, nil
		p.leaderProgress()
	case ErrIneligibleReplica, ErrOperationNotAttempted:
		p.ld.pending = nil // back to the committed state
	case ErrNotController, ErrRequestTimedOut, ErrUnknownTopicOrPartition:
		pd.retryAt = p.now + int64(p.cfg.RetryBackoffTicks)
	default:
		// Kafka waits for new metadata here. An answer names no request,
		// though, and may be a late one to an earlier proposal, which the
		// metadata it asks to wait for already replaced (the simulator's
		// seed 1265 waited for good): ask again after RequestTimeoutTicks,
		// unless the metadata comes first.
		pd.retryAt = p.now + int64(p.cfg.RequestTimeoutTicks)
	}
	return nil
}

// stepFetch serves a follower (Partition.fetchRecords).
func (p *Partition) stepFetch(m *Fetch) error {
	switch {
	case m.FetchOffset < 0 || m.MaxBytes < 0 || m.MaxWait < 0:
		return fmt.Errorf("%w: fetch offset %d, max bytes %d, max wait %d", ErrInvalidMessage, m.FetchOffset, m.MaxBytes, m.MaxWait)
	case p.role != RoleLeader:
		p.answerFetch(m, ErrNotLeaderOrFollower)
	case m.CurrentLeaderEpoch < p.leaderEpoch:
		p.answerFetch(m, ErrFencedLeaderEpoch)
	case m.CurrentLeaderEpoch > p.leaderEpoch:
		p.answerFetch(m, ErrUnknownLeaderEpoch)
	default:
		i := slices.IndexFunc(p.ld.followers, func(f *follower) bool { return f.id == m.From })
		if i < 0 {
			p.answerFetch(m, ErrUnknownLeaderEpoch)
			return nil
		}
		f, err := p.fetchingFollower(i, m)
		if err != nil {
			return err
		}
		if !p.ld.ready {
			f.parked = &parkedFetch{req: m, deadline: p.now + int64(m.MaxWait), hw: p.hw}
			return nil
		}
		f.parked = nil // a newer fetch replaces a parked one
		p.serveFetch(m, f)
	}
	return nil
}

// fetchingFollower returns the state of the follower at i for its fetch m,
// by broker epoch (KIP-903): a fetch of an earlier epoch than the state's
// comes from a previous life of the follower and is refused; a fetch of a
// later one starts the state over, so that what the previous life fetched
// neither keeps the follower caught up nor lets it into the ISR.
func (p *Partition) fetchingFollower(i int, m *Fetch) (*follower, error) {
	f := p.ld.followers[i]
	switch {
	case bugsBuild && p.cfg.bugs.preKIP903 || m.BrokerEpoch == f.brokerEpoch:
	case m.BrokerEpoch < f.brokerEpoch:
		return nil, fmt.Errorf("%w: %w: fetch of node %d's broker epoch %d, it fetches in %d", ErrStale, ErrStaleBrokerEpoch, m.From, m.BrokerEpoch, f.brokerEpoch)
	case f.brokerEpoch == NoBrokerEpoch:
		f.brokerEpoch = m.BrokerEpoch
	default:
		f = newFollower(f.id)
		f.brokerEpoch = m.BrokerEpoch
		p.ld.followers[i] = f
	}
	return f, nil
}

func (p *Partition) answerFetch(m *Fetch, code Code) {
	p.send(&FetchResponse{
		Header: p.header(m.From), ID: m.ID, Err: code, Leader: p.leader, LeaderEpoch: p.leaderEpoch,
		FetchOffset: m.FetchOffset, HighWatermark: p.hw, LogStartOffset: p.logStart, LogEndOffset: p.written,
		DivergingEpoch: -1, DivergingEndOffset: -1,
	})
}

// serveFetch validates a fetch in the leader's epoch, reads, and updates
// the follower's state; a fetch with nothing to read parks.
func (p *Partition) serveFetch(m *Fetch, f *follower) {
	// Retention and DeleteRecords move the log start outside the state
	// machine; followers follow it.
	if start, _, _, err := p.cfg.Log.Offsets(); err == nil {
		p.logStart = max(p.logStart, start)
	}
	resp := &FetchResponse{
		Header: p.header(m.From), ID: m.ID, Leader: p.leader, LeaderEpoch: p.leaderEpoch,
		FetchOffset: m.FetchOffset, HighWatermark: p.hw, LogStartOffset: p.logStart, LogEndOffset: p.written,
		DivergingEpoch: -1, DivergingEndOffset: -1,
	}
	if m.LastFetchedEpoch >= 0 {
		epoch, end, err := p.cfg.Log.EndOffsetForEpoch(m.LastFetchedEpoch)
		switch {
		case err != nil:
			resp.Err = ErrKafkaStorageError
		case epoch == log.UndefinedEpoch || end == log.UndefinedEpochOffset, m.FetchOffset < p.logStart:
			resp.Err = ErrOffsetOutOfRange
		case epoch < m.LastFetchedEpoch || end < m.FetchOffset:
			// The follower's log diverged: it truncates, and its state
			// here stays as it was.
			resp.DivergingEpoch, resp.DivergingEndOffset = epoch, end
		}
		if resp.Err != kafkaerr.None || resp.DivergingEpoch >= 0 {
			p.send(resp)
			return
		}
	}
	maxBytes := int(m.MaxBytes)
	if maxBytes == 0 || maxBytes > p.cfg.FetchMaxBytes {
		maxBytes = p.cfg.FetchMaxBytes
	}
	records, err := p.read(m.FetchOffset, maxBytes)
	if err != nil {
		resp.Err = ErrKafkaStorageError
		if oor, ok := errors.AsType[*log.OffsetOutOfRangeError](err); ok {
			resp.Err, resp.LogStartOffset, resp.LogEndOffset = ErrOffsetOutOfRange, oor.Start, oor.End
		}
		p.send(resp)
		return
	}
	p.updateFollower(f, m)
	p.maybeExpandISR(f)
	p.leaderProgress()
	if len(records) == 0 && m.MaxWait > 0 {
		if p.hw == resp.HighWatermark {
			f.parked = &parkedFetch{req: m, deadline: p.now + int64(m.MaxWait), hw: resp.HighWatermark}
			return
		}
		// This fetch moved the high watermark: say so at once rather
		// than after the long poll.
		resp.HighWatermark = p.hw
	}
	resp.Records = records
	p.send(resp)
}

// read returns the records from offset on, whole batches up to the end
// of what this leader appended.
func (p *Partition) read(offset int64, maxBytes int) ([]byte, error) {
	bs, err := p.cfg.Log.Read(offset, maxBytes, log.ReadLogEnd)
	if err != nil {
		return nil, err
	}
	defer bs.Close()
	if bs.Len() == 0 {
		return nil, nil
	}
	data, err := bs.Bytes()
	if err != nil {
		return nil, err
	}
	// Keep whole batches below the end this leader knows of.
	n := 0
	for rest := data; len(rest) > 0; {
		b, next, err := segment.ParseBatch(rest)
		if err != nil || b.LastOffset() >= p.end {
			break
		}
		n += len(b)
		rest = next
	}
	if n == 0 {
		return nil, nil
	}
	return data[:n], nil
}

// updateFollower records an accepted fetch (Replica.updateFetchStateOrThrow).
func (p *Partition) updateFollower(f *follower, m *Fetch) {
	leaderEnd := p.written
	switch {
	case m.FetchOffset >= leaderEnd:
		f.lastCaughtUp = max(f.lastCaughtUp, p.now)
	case m.FetchOffset >= f.lastFetchLeaderLEO:
		f.lastCaughtUp = max(f.lastCaughtUp, f.lastFetchTime)
	}
	f.lastFetchLeaderLEO = max(leaderEnd, f.lastFetchLeaderLEO)
	f.lastFetchTime = p.now
	f.leo = m.FetchOffset
	f.synced = min(max(m.SyncedOffset, 0), m.FetchOffset)
	f.fetchedThisEpoch = true
}

// wakeParked answers the long polls that have something to say now: data
// past their offset, a new high watermark, or their time is up.
func (p *Partition) wakeParked() {
	for _, f := range p.ld.followers {
		pf := f.parked
		if pf == nil {
			continue
		}
		if p.written > pf.req.FetchOffset || p.hw != pf.hw || p.now >= pf.deadline {
			f.parked = nil
			req := *pf.req
			req.MaxWait = 0
			p.serveFetch(&req, f)
		}
	}
}
