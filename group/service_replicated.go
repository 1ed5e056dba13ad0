package group

import (
	"errors"
	"fmt"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/internal/coordinator"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// AppendFunc appends a batch the Service built (its records, a
// transactional producer's offsets, or a transaction marker) to a
// partition of an offsets topic that a cluster replicates, as the
// partition's leader, and returns once it is committed: the high
// watermark has passed it with enough replicas in the ISR (Kafka's
// coordinator answers only then: CoordinatorRuntime appends with acks=1
// and holds the write's response until the high watermark passes it,
// which an acks=all append does at once). The batch's producer epoch is
// checked, its sequence not (Kafka's AppendOrigin.COORDINATOR). Its error
// carries Kafka's code (kafkaerr), such as ErrNotEnoughReplicas or
// ErrNotLeaderOrFollower: the requests whose records failed are answered
// as Kafka's coordinator answers them (kafkaerr.CoordinatorWriteError:
// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), and the partition's
// coordinator goes back to what the partition's log holds, still loaded.
// The transaction coordinator's records take the same path
// (idempotence.TxnHost), so that a node writes both alike.
type AppendFunc func(partition int32, batch segment.Batch) (log.AppendResult, error)

// A Service with ServiceOptions.Append set serves an offsets topic whose
// partitions a cluster replicates and whose leaders move: it writes
// through Append instead of into the Dir's partition, and coordinates the
// groups of a partition only while Follow says this broker leads it
// (Kafka's onElection and onResignation), which the cluster calls as this
// broker becomes and stops being the partition's leader. With
// ServiceOptions.Unloaded it opens with no partition loaded. Requests for a
// partition not loaded are answered NOT_COORDINATOR, for one being loaded
// COORDINATOR_LOAD_IN_PROGRESS. The partitions' logs hold the high watermark the cluster
// sets (log.Options.ExternalHighWatermark): a coordinator loaded from
// records above it answers COORDINATOR_LOAD_IN_PROGRESS until it passes
// them, so that nothing it serves is undone by a change of leader.

func (s *Service) notLed(sp *servicePartition) error {
	return errorf(ErrNotCoordinator, "offsets log %s-%d is not loaded on this broker", s.topic, sp.p.ID())
}

// Follow tells the Service that this broker leads an offsets partition in
// leaderEpoch, or, with -1, that it does not, as idempotence.TxnRuntime's
// Follow does for transactions (Kafka's onElection and onResignation): a
// partition loaded in another epoch is unloaded, its waiting requests
// answered NOT_COORDINATOR, and one led now and not loaded (or whose
// reload after a failed write failed) is loaded from its log, which
// Follow waits for. Requests meanwhile are answered
// COORDINATOR_LOAD_IN_PROGRESS.
func (s *Service) Follow(partition, leaderEpoch int32) error {
	return s.rt.Follow(partition, leaderEpoch)
}

// Loaded reports the leader epoch an offsets partition is loaded in.
func (s *Service) Loaded(partition int32) (int32, bool) { return s.rt.Loaded(partition) }

// loadIn loads a partition's groups from its log (the replica this broker
// leads now), aside, so that the clock and requests never see them half
// made, and returns what installs them.
func (s *Service) loadIn(partition, _ int32) (install func(), err error) {
	sp := s.parts[partition]
	loaded := &servicePartition{p: sp.p}
	if err := s.load(loaded); err != nil {
		return nil, err
	}
	return func() {
		sp.pmu.Lock()
		sp.producers = loaded.producers
		sp.pmu.Unlock()
		sp.c, sp.loadedTo = loaded.c, loaded.loadedTo
		select {
		case s.wake <- struct{}{}: // its timers
		default:
		}
	}, nil
}

// unload gives up a partition's groups once its write in flight is done:
// the requests waiting are answered NOT_COORDINATOR, and so are later ones
// until it is loaded again.
func (s *Service) unload(partition int32) {
	sp := s.parts[partition]
	defer sp.idle.Broadcast()
	for sp.writing {
		sp.idle.Wait()
	}
	if sp.State() == coordinator.Active {
		sp.c.Unload()
		deliver(sp.waiting, sp.c.Ready().Responses, s.notLed(sp))
		answerAll(sp.waiting)
	}
}

// uncommitted refuses the requests of a replicated partition whose
// coordinator holds records its high watermark has not passed: loaded
// from a replica that was leader before, or again after an append that
// reached the log but failed to commit. A new leader may not have them,
// or a power failure take them back with every copy but this one, so
// that what the coordinator served from them would be undone. Kafka's
// coordinator reads at its last committed offset (CoordinatorRuntime's
// lastCommittedOffset, which the high watermark moves); a coordinator
// that keeps one state answers COORDINATOR_LOAD_IN_PROGRESS until they
// are committed, as while it loads, and its clients retry. Called with
// mu held.
func (s *Service) uncommitted(sp *servicePartition) error {
	if sp.loadedTo == 0 {
		return nil
	}
	_, hw, _, err := sp.p.Offsets()
	switch {
	case err != nil:
		return fmt.Errorf("%w: offsets log %s-%d: %w", ErrNotCoordinator, s.topic, sp.p.ID(), err)
	case hw < sp.loadedTo:
		return errorf(ErrCoordinatorLoadInProgress, "offsets log %s-%d: loaded up to offset %d, committed up to %d",
			s.topic, sp.p.ID(), sp.loadedTo, hw)
	}
	sp.loadedTo = 0
	return nil
}

// notLoaded reports a request refused because a replicated partition is
// not coordinated here.
func (s *Service) notLoaded(err error) bool {
	return s.repl != nil && (errors.Is(err, ErrNotCoordinator) || errors.Is(err, ErrCoordinatorLoadInProgress))
}

// closeErr is what Close reports of a partition: the failure that ended
// it, but not a replicated partition's, which Follow would have loaded
// again.
func (s *Service) closeErr(sp *servicePartition) error {
	if s.repl != nil {
		return nil
	}
	return sp.Err()
}

// appendRun appends one run of records, of one producer if prod is set:
// into the Dir's partition, or through the cluster (ServiceOptions.Append).
func (s *Service) appendRun(sp *servicePartition, prod *idempotence.ProducerIDAndEpoch, recs []segment.Record) (log.AppendResult, error) {
	appendBatch := sp.p.AppendBatch
	if s.repl != nil {
		appendBatch = func(b segment.Batch) (log.AppendResult, error) { return s.repl(sp.p.ID(), b) }
	}
	switch {
	case prod != nil:
		return sp.appendTxn(*prod, recs, appendBatch)
	case s.repl == nil:
		return sp.p.Append(recs)
	}
	b, err := segment.AppendBatch(nil, recs, segment.BuildOptions{})
	if err != nil {
		return log.AppendResult{}, err
	}
	return appendBatch(b)
}
