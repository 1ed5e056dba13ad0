package idempotence

import "errors"

// Error is one of Kafka's protocol errors. The package's sentinel errors are
// *Error values, and every error it returns for a rejected batch or request
// wraps one of them, so a broker can answer with the same code Kafka would:
//
//	var kerr *idempotence.Error
//	if errors.As(err, &kerr) { respond(kerr.Code) }
//
// errors.Is(err, ErrOutOfOrderSequence) matches a particular one.
type Error struct {
	// Code is Kafka's error code (org.apache.kafka.common.protocol.Errors).
	Code int16
	// Name is Kafka's name for it, such as OUT_OF_ORDER_SEQUENCE_NUMBER.
	Name string
}

func (e *Error) Error() string { return "kafka error " + e.Name }

// The Kafka errors of producer state and transactions. Codes and names are
// those of Kafka's Errors enum.
var (
	// ErrOutOfOrderSequence: a batch's first sequence is not the one after
	// the producer's last (a gap, a partial overlap with a retained batch,
	// a new epoch not starting at 0).
	ErrOutOfOrderSequence = &Error{45, "OUT_OF_ORDER_SEQUENCE_NUMBER"}
	// ErrInvalidProducerEpoch: a batch carries an epoch older than the
	// producer's current one. Since Kafka 2.7 the partition leader returns
	// it instead of PRODUCER_FENCED (ProducerAppendInfo.checkProducerEpoch).
	ErrInvalidProducerEpoch = &Error{47, "INVALID_PRODUCER_EPOCH"}
	// ErrInvalidTxnState: an operation the transaction's state forbids,
	// such as a non-transactional batch while the producer has a
	// transaction open on the partition, or EndTxn in the wrong state.
	ErrInvalidTxnState = &Error{48, "INVALID_TXN_STATE"}
	// ErrInvalidProducerIDMapping: a request's producer id is not the one
	// the coordinator holds for the transactional id.
	ErrInvalidProducerIDMapping = &Error{49, "INVALID_PRODUCER_ID_MAPPING"}
	// ErrInvalidTransactionTimeout: a transaction timeout above the
	// coordinator's maximum.
	ErrInvalidTransactionTimeout = &Error{50, "INVALID_TRANSACTION_TIMEOUT"}
	// ErrConcurrentTransactions: the transaction is completing (or a
	// transition is pending); the client retries.
	ErrConcurrentTransactions = &Error{51, "CONCURRENT_TRANSACTIONS"}
	// ErrTransactionCoordinatorFenced: a marker carries a coordinator epoch
	// older than one the partition has seen.
	ErrTransactionCoordinatorFenced = &Error{52, "TRANSACTION_COORDINATOR_FENCED"}
	// ErrInvalidRecord: a batch no client may write, such as a control
	// batch (LogValidator: "Clients are not allowed to write control
	// records"), or a marker that does not decode.
	ErrInvalidRecord = &Error{87, "INVALID_RECORD"}
	// ErrProducerFenced: a newer producer with the same transactional id
	// exists; the coordinator returns it for a stale epoch.
	ErrProducerFenced = &Error{90, "PRODUCER_FENCED"}
	// ErrDuplicateSequence: a batch repeats one the partition holds. Kafka's
	// brokers answer a duplicate with success and the original offsets
	// instead; old ones, and other servers, answer this, which a producer
	// takes as success (see Sequencer).
	ErrDuplicateSequence = &Error{46, "DUPLICATE_SEQUENCE_NUMBER"}
	// ErrUnknownProducerID: the partition has no state for the producer.
	// Kafka's brokers stopped answering it with KIP-360 (they accept any
	// sequence from an unknown producer); a producer still handles it (see
	// Sequencer).
	ErrUnknownProducerID = &Error{59, "UNKNOWN_PRODUCER_ID"}
	// ErrInvalidRequest: a malformed request, such as an empty
	// transactional id.
	ErrInvalidRequest = &Error{42, "INVALID_REQUEST"}
	// ErrNotCoordinator: a transactional id's state partition is not
	// loaded on this node (TxnRuntime).
	ErrNotCoordinator = &Error{16, "NOT_COORDINATOR"}
	// ErrCoordinatorLoadInProgress: a transactional id's state partition
	// is being loaded (TxnRuntime.Follow).
	ErrCoordinatorLoadInProgress = &Error{14, "COORDINATOR_LOAD_IN_PROGRESS"}
	// ErrUnknownServerError: what has no code of its own, as Kafka
	// answers a coordinator's record too large for its log.
	ErrUnknownServerError = &Error{-1, "UNKNOWN_SERVER_ERROR"}
	// ErrCoordinatorNotAvailable: a transactional id's coordinator could
	// not be reached, or could not write its state partition.
	ErrCoordinatorNotAvailable = &Error{15, "COORDINATOR_NOT_AVAILABLE"}
)

// ErrCorruptSnapshot means a producer-state snapshot file cannot be read:
// an unknown version, a bad CRC, or bytes that do not match the schema.
// Kafka (ProducerStateManager.loadFromSnapshot) deletes such a file and
// falls back to an older snapshot or to the log.
var ErrCorruptSnapshot = errors.New("idempotence: corrupt producer snapshot")
