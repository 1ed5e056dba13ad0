// Package idempotence keeps the producer state of a partition, as Kafka's
// ProducerStateManager does, so that a producer's retries are never
// appended twice and a zombie producer cannot write after its replacement
// started.
//
// # Producer state
//
// A State holds, for each producer id that wrote to the partition, its
// epoch, its last five batches (sequence range and offsets), the epoch of
// the last transaction coordinator that wrote a marker for it, and the first
// offset of its open transaction. Validate applies Kafka's rules to the
// batches of one append (ProducerAppendInfo and
// UnifiedLog.analyzeAndValidateProducerState):
//
//   - a producer the partition does not know (never seen, expired, or whose
//     batches were all deleted) is accepted with any sequence (KIP-360);
//   - a batch with a newer epoch must start at sequence 0; an older epoch is
//     INVALID_PRODUCER_EPOCH;
//   - within an epoch the first sequence must follow the last one, wrapping
//     from MaxInt32 to 0; a gap or a partial overlap is
//     OUT_OF_ORDER_SEQUENCE_NUMBER;
//   - a batch with exactly the sequences of one of the last five is a
//     duplicate: the append succeeds with the original offsets and writes
//     nothing;
//   - a non-transactional batch while the producer has a transaction open is
//     INVALID_TXN_STATE; a marker from an older coordinator is
//     TRANSACTION_COORDINATOR_FENCED; a control batch from a client is
//     INVALID_RECORD.
//
// Errors wrap kafkaerr codes, Kafka's, named as Kafka names them. Batches copied
// by a follower or replayed on recovery use OriginReplication and are never
// refused. Everything is deterministic: time is passed in, in milliseconds.
//
// # How a log uses it
//
// Under the lock that orders its appends, for the batches of one append
// that it has stamped with their offsets:
//
//	infos := ... InfoOf(batch) for each batch ...
//	for each info with state.NeedsVerification(info):
//	    coordinator.AddPartitions(...)           // transactions version 2
//	a, err := state.Validate(OriginClient, infos...)
//	if err != nil { return err }                 // nothing appended
//	if a.Duplicate != nil { return a.Duplicate } // answer with its offsets
//	... write the batches to the segment ...
//	completed, err := state.Commit(a)
//	... add each aborted one of completed to the segment's .txnindex ...
//
// On a roll it calls TakeSnapshot (Kafka snapshots at the new segment's
// base offset) and on Close too; when retention deletes segments it calls
// DeleteSnapshotsBefore and OnLogStartOffset. On open, and after truncating,
// it calls Load and replays its batches from State.MapEndOffset to its end
// with OriginReplication. When the high watermark moves it calls
// OnHighWatermark; a read-committed reader stops at LastStableOffset. Every
// so often (Kafka: producer.id.expiration.check.interval.ms, 10 minutes) it
// calls RemoveExpired.
//
// # Snapshots
//
// Snapshot files are Kafka's ProducerSnapshot version 1, byte for byte,
// which stores one batch per producer: after a restart a producer's window
// holds its newest batch only (plus what the log replays after the
// snapshot), as in Kafka. They are written atomically through internal/vfs.
//
// # Transactions
//
// TxnCoordinator is Kafka's transaction coordinator with transactions version
// 2 (KIP-890) semantics, as a pure state machine. Each request
// (InitProducerID, AddPartitions, EndTxn) and each Tick returns the record
// of the transition it makes; the owner persists it (MarshalTxnRecord gives
// Kafka's __transaction_state key and value), then calls Complete, and only
// then does the transition take effect and the answer hold. Complete asks
// for the COMMIT or ABORT markers to write to each partition
// (AppendMarkerBatch builds the control batch, appended with
// OriginCoordinator); MarkerWritten reports each one, and the last yields
// the record that completes the transaction. A coordinator rebuilt with
// Replay from the persisted records equals the live one, and Markers lists
// what it must send again.
//
// On a partition, Commit returns the transactions a marker completed;
// aborted ones go to the segment's .txnindex (TxnIndex, Kafka's format).
// A read-committed reader stops at LastStableOffset, collects the aborted
// transactions of what it reads with TxnIndex.Collect, segment after
// segment, and drops what NewAbortedFilter's Skip says.
//
// # Producers
//
// Sequencer is the producer's side, for an application that sends batches
// over a transport of its own: it stamps each batch with the producer id,
// epoch and the partition's next sequences, keeps at most MaxInFlight
// batches in flight per partition, and decides from each answer whether to
// retry with the same stamp (so that the partition recognises a batch it
// already holds), stamp again under a bumped epoch, or fail, by the rules
// of Kafka's producer. log.Producer does the same for records produced in
// the process.
package idempotence
