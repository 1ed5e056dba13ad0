package replica

import (
	"fmt"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
)

// Log is the partition's log as the state machine sees it. *log.Log and
// *log.Partition (a partition of a log.Dir) satisfy it; open either with
// Options.ExternalHighWatermark, since the state machine owns the high
// watermark.
//
// The state machine calls only the reading methods (Offsets,
// SyncedEndOffset, LatestEpoch, EndOffsetForEpoch, Read, Producers), and
// only while no write it handed out is pending or, on a leader, for
// records below what it appended; the writing methods are for Write.Apply
// and the application.
type Log interface {
	Offsets() (start, highWatermark, end int64, err error)
	SyncedEndOffset() (int64, error)
	LatestEpoch() (int32, error)
	EndOffsetForEpoch(epoch int32) (int32, int64, error)
	Read(offset int64, maxBytes int, iso log.Isolation) (*log.Batches, error)
	// Producers is the log's producer state, which a leader checks
	// producers' batches against (see Partition.Step).
	Producers() ([]idempotence.Entry, error)

	AppendReplicated(b segment.Batch) (log.AppendResult, error)
	TruncateTo(offset int64) error
	TruncateFullyAndStartAt(offset int64) error
	SetHighWatermark(offset int64) (int64, error)
	AdvanceHighWatermark(offset int64) (int64, error)
	SetLeaderEpoch(epoch int32) error
	DeleteRecordsBefore(offset int64) error
	// Sync makes what was written durable; the Driver calls it under
	// DriverOptions.SyncWrites.
	Sync() error
}

var (
	_ Log = (*log.Log)(nil)
	_ Log = (*log.Partition)(nil)
)

// WriteKind is what a Write does to the log.
type WriteKind uint8

// The writes a partition hands out.
const (
	// WriteAppend appends Batch with its offsets and epoch as they are
	// (Log.AppendReplicated): the leader stamped them, or the follower
	// received them so.
	WriteAppend WriteKind = iota + 1
	// WriteTruncate removes the records at and after Offset.
	WriteTruncate
	// WriteRestart empties the log and restarts it at Offset
	// (Log.TruncateFullyAndStartAt).
	WriteRestart
	// WriteLeaderEpoch makes Epoch the log's leader epoch, starting at its
	// end (Log.SetLeaderEpoch).
	WriteLeaderEpoch
	// WriteHighWatermark sets a follower's high watermark to Offset; it
	// may move back.
	WriteHighWatermark
	// WriteAdvanceHighWatermark moves a leader's high watermark forward to
	// Offset.
	WriteAdvanceHighWatermark
	// WriteLogStart moves a follower's log start offset forward to Offset,
	// after the leader's (Log.DeleteRecordsBefore): records the leader
	// deleted go on the followers too.
	WriteLogStart
)

var writeNames = [...]string{"?", "append", "truncate", "restart", "leader-epoch", "high-watermark", "advance-high-watermark", "log-start"}

func (k WriteKind) String() string {
	if int(k) < len(writeNames) {
		return writeNames[k]
	}
	return writeNames[0]
}

// Write is one change to the partition's log, handed out in a Ready.
type Write struct {
	Kind   WriteKind
	Offset int64
	Epoch  int32
	Batch  segment.Batch
}

func (w Write) String() string {
	switch w.Kind {
	case WriteAppend:
		return fmt.Sprintf("append [%d, %d] epoch %d", w.Batch.BaseOffset(), w.Batch.LastOffset(), w.Batch.PartitionLeaderEpoch())
	case WriteLeaderEpoch:
		return fmt.Sprintf("leader-epoch %d", w.Epoch)
	}
	return fmt.Sprintf("%s %d", w.Kind, w.Offset)
}

// reshapes reports whether w removes records or sets an epoch: what a
// follower reads from its log before it fetches.
func (w Write) reshapes() bool {
	return w.Kind == WriteTruncate || w.Kind == WriteRestart || w.Kind == WriteLeaderEpoch
}

// Apply performs the write on l.
func (w Write) Apply(l Log) error {
	var err error
	switch w.Kind {
	case WriteAppend:
		_, err = l.AppendReplicated(w.Batch)
	case WriteTruncate:
		err = l.TruncateTo(w.Offset)
	case WriteRestart:
		err = l.TruncateFullyAndStartAt(w.Offset)
	case WriteLeaderEpoch:
		err = l.SetLeaderEpoch(w.Epoch)
	case WriteHighWatermark:
		_, err = l.SetHighWatermark(w.Offset)
	case WriteAdvanceHighWatermark:
		_, err = l.AdvanceHighWatermark(w.Offset)
	case WriteLogStart:
		err = l.DeleteRecordsBefore(w.Offset)
	default:
		err = fmt.Errorf("%w: unknown write kind %d", ErrInvalidRequest, w.Kind)
	}
	if err != nil {
		return fmt.Errorf("replica: %s: %w", w, err)
	}
	return nil
}

// ApplyWrites performs the writes of a Ready in order and stops at the
// first that fails.
func ApplyWrites(l Log, ws []Write) error {
	for _, w := range ws {
		if err := w.Apply(l); err != nil {
			return err
		}
	}
	return nil
}
