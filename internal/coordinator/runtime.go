// Package coordinator runs the coordinators of an internal topic's
// partitions by leadership, as Kafka's CoordinatorRuntime runs its group
// and transaction coordinators: a partition's coordinator is loaded from
// the partition's log when this broker becomes its leader
// (onElection), dropped when it stops (onResignation), and a request
// meanwhile is refused with the code its client retries on. group.Service
// and idempotence.TxnRuntime are its users, each with its own coordinator
// and its own way of writing records, so that the life of a coordinator
// partition is written once, for a Dir's partitions (led by the Dir for
// good, in epoch 0) and a cluster's alike.
package coordinator

import (
	"errors"
	"fmt"
	"sync"

	"github.com/strandlog/strand/kafkaerr"
)

// State is where a partition's coordinator is in its life (Kafka's
// CoordinatorRuntime.CoordinatorState).
type State int8

const (
	// Unloaded is a partition this broker does not lead (INITIAL, and
	// CLOSED once it resigned): NOT_COORDINATOR.
	Unloaded State = iota
	// Loading is one being read from its log: COORDINATOR_LOAD_IN_PROGRESS.
	Loading
	// Active is one whose coordinator serves requests.
	Active
	// Failed is one whose load, or reload, failed, or that its user gave
	// up (Partition.Fail): NOT_COORDINATOR with the cause. Follow loads it
	// again.
	Failed
	// Closed is one the runtime's user closed (Partition.Close), for good.
	Closed
)

var stateNames = [...]string{Unloaded: "unloaded", Loading: "loading", Active: "active", Failed: "failed", Closed: "closed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// Options are what a Runtime's user does that the runtime cannot.
type Options struct {
	// Partitions is the internal topic's partition count.
	Partitions int32
	// Name names a partition in errors, such as "offsets log
	// __consumer_offsets-3".
	Name func(partition int32) string
	// Load reads a partition's coordinator from its log, as its leader
	// in leaderEpoch, without the partition's lock, and returns what
	// installs it: Follow calls install with the lock held, unless the
	// partition resigned or closed meanwhile.
	Load func(partition, leaderEpoch int32) (install func(), err error)
	// Unload gives up the coordinator of a partition that is resigning,
	// with its lock held and its State still what it was (Active,
	// Loading or Failed): the requests it holds are answered
	// NOT_COORDINATOR. It may wait on a sync.Cond over the partition,
	// for a write in flight to end.
	Unload func(partition int32)
	// Closed is the error of a request to a Closed partition.
	Closed error
}

// Runtime is the life of every partition of an internal topic. Follow and
// Loaded are safe for concurrent use; a Partition's other methods are
// called with its lock held.
type Runtime struct {
	opts  Options
	parts []*Partition
}

// Partition is one partition of the internal topic: its lock, which
// guards its coordinator too, its State and the leader epoch it is led in.
type Partition struct {
	sync.Mutex
	id   int32
	name string
	// state, epoch and err are guarded by the embedded Mutex.
	state State
	epoch int32 // the leader epoch it is loaded, or being loaded, in; -1 if neither
	err   error // why it Failed
	// closed is Options.Closed.
	closed error
}

// New returns a runtime whose partitions are all Unloaded.
func New(opts Options) (*Runtime, error) {
	if opts.Partitions < 0 || opts.Name == nil || opts.Load == nil || opts.Unload == nil || opts.Closed == nil {
		return nil, errors.New("coordinator: Options need Partitions >= 0, Name, Load, Unload and Closed")
	}
	r := &Runtime{opts: opts, parts: make([]*Partition, opts.Partitions)}
	for i := range r.parts {
		r.parts[i] = &Partition{id: int32(i), name: opts.Name(int32(i)), epoch: -1, closed: opts.Closed}
	}
	return r, nil
}

// Partitions returns every partition, by id.
func (r *Runtime) Partitions() []*Partition { return r.parts }

// Partition returns partition id.
func (r *Runtime) Partition(id int32) (*Partition, error) {
	if id < 0 || int(id) >= len(r.parts) {
		return nil, fmt.Errorf("%w: coordinator partition %d of %d", kafkaerr.ErrUnknownTopicOrPartition, id, len(r.parts))
	}
	return r.parts[id], nil
}

// Follow tells the runtime that this broker leads a partition in
// leaderEpoch, or, with -1, that it does not: a partition loaded, being
// loaded or failed in another epoch resigns (Options.Unload), and one led
// now and not loaded, or failed, is loaded (Options.Load), which Follow
// waits for. Requests meanwhile are refused COORDINATOR_LOAD_IN_PROGRESS.
// A Dir's own partitions are followed once, in epoch 0.
func (r *Runtime) Follow(partition, leaderEpoch int32) error {
	p, err := r.Partition(partition)
	if err != nil {
		return err
	}
	p.Lock()
	if p.state != Unloaded && p.state != Closed && p.epoch != leaderEpoch {
		r.opts.Unload(partition)
		if p.state != Closed {
			p.state, p.epoch, p.err = Unloaded, -1, nil
		}
	}
	switch {
	case p.state == Closed:
		p.Unlock()
		return r.opts.Closed
	case leaderEpoch < 0 || p.state == Active || p.state == Loading:
		p.Unlock()
		return nil
	}
	p.state, p.epoch, p.err = Loading, leaderEpoch, nil
	p.Unlock()

	// Loaded aside, so that no request sees it half made.
	install, err := r.opts.Load(partition, leaderEpoch)

	p.Lock()
	defer p.Unlock()
	switch {
	case p.state == Closed:
		return r.opts.Closed
	case p.state != Loading || p.epoch != leaderEpoch:
		return nil // resigned while it loaded
	case err != nil:
		p.state, p.err = Failed, err
		return fmt.Errorf("coordinator: loading %s in leader epoch %d: %w", p.name, leaderEpoch, err)
	}
	install()
	p.state = Active
	return nil
}

// Loaded reports the leader epoch a partition is loaded in, if it is
// Active.
func (r *Runtime) Loaded(partition int32) (leaderEpoch int32, ok bool) {
	p, err := r.Partition(partition)
	if err != nil {
		return -1, false
	}
	p.Lock()
	defer p.Unlock()
	return p.epoch, p.state == Active
}

// ID is the partition's id.
func (p *Partition) ID() int32 { return p.id }

// State is where the partition is.
func (p *Partition) State() State { return p.state }

// Epoch is the leader epoch the partition is loaded, or being loaded, in
// (the coordinator epoch of a transaction coordinator's markers); -1 if
// neither.
func (p *Partition) Epoch() int32 { return p.epoch }

// Refusal is nil for an Active partition, and otherwise what a request for
// it is answered: NOT_COORDINATOR for one not led here or failed (with the
// cause), COORDINATOR_LOAD_IN_PROGRESS for one loading, Options.Closed for
// one closed.
func (p *Partition) Refusal() error {
	switch p.state {
	case Active:
		return nil
	case Loading:
		return fmt.Errorf("%w: %s is being loaded", kafkaerr.ErrCoordinatorLoadInProgress, p.name)
	case Failed:
		if kafkaerr.CodeOf(p.err) == kafkaerr.ErrNotCoordinator {
			return p.err
		}
		return fmt.Errorf("%w: %s: %w", kafkaerr.ErrNotCoordinator, p.name, p.err)
	case Closed:
		return p.closed
	}
	return fmt.Errorf("%w: %s is not loaded on this broker", kafkaerr.ErrNotCoordinator, p.name)
}

// Fail gives up an Active or Loading partition's coordinator for err,
// such as a reload after a failed write that failed too, or a record
// written after a reload that may have missed it: requests are refused
// NOT_COORDINATOR until Follow loads it again. The first cause stays.
func (p *Partition) Fail(err error) {
	if p.state == Active || p.state == Loading {
		p.state, p.err = Failed, err
	}
}

// Err is why a Failed partition failed; nil in any other State.
func (p *Partition) Err() error {
	if p.state != Failed {
		return nil
	}
	return p.err
}

// Close ends the partition for good: Follow and requests are refused
// Options.Closed.
func (p *Partition) Close() { p.state = Closed }
