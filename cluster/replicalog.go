package cluster

import (
	"errors"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/replica"
	"github.com/strandlog/strand/replica/controller"
	"github.com/strandlog/strand/segment"
)

// replicaLog is a replica's log that reports the errors it gives the
// replica state machine: each one makes the partition fail (a write the
// writer applied, or a read the partition needed to fetch or lead), and
// the partition then refuses everything, which the replica package
// reports to nobody. The node logs it and takes the replica offline.
//
// It also keeps where the replica's leadership in its latest leader epoch
// began in this life of the node: a coordinator loads a partition only
// once its replica has taken up the epoch the metadata names.
type replicaLog struct {
	replica.Log
	tp     controller.TopicPartition
	log    *slog.Logger
	onFail func(controller.TopicPartition)

	mu          sync.Mutex
	leaderEpoch int32 // the latest epoch the replica took up as leader, -1 if none
	epochStart  int64 // the log end when it did
}

func newReplicaLog(l replica.Log, tp controller.TopicPartition, logger *slog.Logger, onFail func(controller.TopicPartition)) *replicaLog {
	return &replicaLog{Log: l, tp: tp, log: logger, onFail: onFail, leaderEpoch: -1}
}

// leaderEpochStart returns where the replica's leadership in epoch began,
// if it took epoch up as leader in this life of the node and none later.
func (l *replicaLog) leaderEpochStart(epoch int32) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochStart, l.leaderEpoch == epoch
}

func (l *replicaLog) check(op string, err error) error {
	if err != nil {
		l.log.Error("replica log failed: the partition stops", "partition", l.tp, "op", op, "err", err)
		l.onFail(l.tp)
	}
	return err
}

func (l *replicaLog) SyncedEndOffset() (int64, error) {
	off, err := l.Log.SyncedEndOffset()
	return off, l.check("synced end offset", err)
}

func (l *replicaLog) LatestEpoch() (int32, error) {
	e, err := l.Log.LatestEpoch()
	return e, l.check("latest epoch", err)
}

func (l *replicaLog) AppendReplicated(b segment.Batch) (log.AppendResult, error) {
	res, err := l.Log.AppendReplicated(b)
	return res, l.check("append", err)
}

func (l *replicaLog) TruncateTo(offset int64) error {
	return l.check("truncate", l.Log.TruncateTo(offset))
}

func (l *replicaLog) TruncateFullyAndStartAt(offset int64) error {
	return l.check("restart", l.Log.TruncateFullyAndStartAt(offset))
}

func (l *replicaLog) SetHighWatermark(offset int64) (int64, error) {
	hw, err := l.Log.SetHighWatermark(offset)
	return hw, l.check("high watermark", err)
}

func (l *replicaLog) AdvanceHighWatermark(offset int64) (int64, error) {
	hw, err := l.Log.AdvanceHighWatermark(offset)
	return hw, l.check("high watermark", err)
}

// SetLeaderEpoch is the write of a replica taking up a leader epoch
// (replica.WriteLeaderEpoch), at its log end: there its leader epoch
// starts, and the writes that follow are its own appends.
func (l *replicaLog) SetLeaderEpoch(epoch int32) error {
	if err := l.check("leader epoch", l.Log.SetLeaderEpoch(epoch)); err != nil {
		return err
	}
	_, _, end, err := l.Log.Offsets()
	if err != nil {
		return l.check("offsets", err)
	}
	l.mu.Lock()
	l.leaderEpoch, l.epochStart = epoch, end
	l.mu.Unlock()
	return nil
}

func (l *replicaLog) DeleteRecordsBefore(offset int64) error {
	return l.check("log start", l.Log.DeleteRecordsBefore(offset))
}

func (l *replicaLog) Sync() error {
	return l.check("sync", l.Log.Sync())
}

// expectedStepErrors are what stepping a received message answers in the
// protocol's normal course: a message that no longer matters, for a
// partition the node does not have (yet, or any longer), or of another
// epoch than the partition's or the node's (KIP-320, KIP-380, KIP-903);
// or, after a restart, a committed state that names the node leader in an
// epoch its log holds, until the controller moves the epoch on
// (KAFKA-10527).
var expectedStepErrors = []error{
	replica.ErrStale, replica.ErrUnknownTopicOrPartition, replica.ErrNotLeaderOrFollower,
	replica.ErrFencedLeaderEpoch, replica.ErrUnknownLeaderEpoch, replica.ErrStaleBrokerEpoch,
	replica.ErrStaleControllerEpoch, replica.ErrLeaderEpochReused,
}

// stepErrors logs what stepping received messages answered (the Driver's
// OnError): the expected errors at DEBUG, the others at WARN; a failed
// partition, which answers ErrFailed to every message, at ERROR once per
// failure and then at most every failedEvery.
func (n *Node) stepErrors(err error) {
	if n.cfg.stepErrors != nil {
		n.cfg.stepErrors(err)
	}
	for _, err := range leaves(err) {
		switch {
		case errors.Is(err, replica.ErrFailed):
			if n.failures.due(err.Error()) {
				n.log.Error("replica failed: it refuses every message until the node recovers it", "err", err)
			}
		case errorsIsAny(err, expectedStepErrors...):
			n.log.Debug("replica", "err", err)
		default:
			n.log.Warn("replica refused a message", "err", err)
		}
	}
}

// joinedType is the type of errors.Join's errors, as Node.Step returns
// them for a Batch. (An error of fmt.Errorf with several %w unwraps to
// several errors too, but is one.)
var joinedType = reflect.TypeOf(errors.Join(errors.New("a"), errors.New("b")))

// leaves returns the errors a joined error (a Batch's) holds.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && reflect.TypeOf(err) == joinedType {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// failedEvery is how often a failed partition's refusals are logged again.
const failedEvery = time.Minute

// rateLimit says when a message is due to be logged again.
type rateLimit struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (r *rateLimit) due(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	if t, ok := r.last[msg]; ok && time.Since(t) < failedEvery {
		return false
	}
	r.last[msg] = time.Now()
	return true
}
