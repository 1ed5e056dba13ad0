package idempotence

import (
	"errors"

	"github.com/strandlog/strand/kafkaerr"
)

// The Kafka errors of producer state and transactions, as kafkaerr
// codes: every error the package returns for a rejected batch or request
// wraps one of them, so a broker answers with the code Kafka would
// (kafkaerr.CodeOf) and errors.Is matches them across packages.
const (
	// ErrOutOfOrderSequence: a batch's first sequence is not the one after
	// the producer's last (a gap, a partial overlap with a retained batch,
	// a new epoch not starting at 0).
	ErrOutOfOrderSequence = kafkaerr.ErrOutOfOrderSequenceNumber
	// ErrInvalidProducerEpoch: a batch carries an epoch older than the
	// producer's current one. Since Kafka 2.7 the partition leader returns
	// it instead of PRODUCER_FENCED (ProducerAppendInfo.checkProducerEpoch).
	ErrInvalidProducerEpoch = kafkaerr.ErrInvalidProducerEpoch
	// ErrInvalidTxnState: an operation the transaction's state forbids,
	// such as a non-transactional batch while the producer has a
	// transaction open on the partition, or EndTxn in the wrong state.
	ErrInvalidTxnState = kafkaerr.ErrInvalidTxnState
	// ErrInvalidProducerIDMapping: a request's producer id is not the one
	// the coordinator holds for the transactional id.
	ErrInvalidProducerIDMapping = kafkaerr.ErrInvalidProducerIDMapping
	// ErrInvalidTransactionTimeout: a transaction timeout above the
	// coordinator's maximum.
	ErrInvalidTransactionTimeout = kafkaerr.ErrInvalidTransactionTimeout
	// ErrConcurrentTransactions: the transaction is completing (or a
	// transition is pending); the client retries.
	ErrConcurrentTransactions = kafkaerr.ErrConcurrentTransactions
	// ErrTransactionCoordinatorFenced: a marker carries a coordinator epoch
	// older than one the partition has seen.
	ErrTransactionCoordinatorFenced = kafkaerr.ErrTransactionCoordinatorFenced
	// ErrInvalidRecord: a batch no client may write, such as a control
	// batch (LogValidator: "Clients are not allowed to write control
	// records"), or a marker that does not decode.
	ErrInvalidRecord = kafkaerr.ErrInvalidRecord
	// ErrProducerFenced: a newer producer with the same transactional id
	// exists; the coordinator returns it for a stale epoch.
	ErrProducerFenced = kafkaerr.ErrProducerFenced
	// ErrDuplicateSequence: a batch repeats one the partition holds. Kafka's
	// brokers answer a duplicate with success and the original offsets
	// instead; old ones, and other servers, answer this, which a producer
	// takes as success (see Sequencer).
	ErrDuplicateSequence = kafkaerr.ErrDuplicateSequenceNumber
	// ErrUnknownProducerID: the partition has no state for the producer.
	// Kafka's brokers stopped answering it with KIP-360 (they accept any
	// sequence from an unknown producer); a producer still handles it (see
	// Sequencer).
	ErrUnknownProducerID = kafkaerr.ErrUnknownProducerID
	// ErrInvalidRequest: a malformed request, such as an empty
	// transactional id.
	ErrInvalidRequest = kafkaerr.ErrInvalidRequest
	// ErrNotCoordinator: a transactional id's state partition is not
	// loaded on this node (TxnRuntime).
	ErrNotCoordinator = kafkaerr.ErrNotCoordinator
	// ErrCoordinatorLoadInProgress: a transactional id's state partition
	// is being loaded (TxnRuntime.Follow).
	ErrCoordinatorLoadInProgress = kafkaerr.ErrCoordinatorLoadInProgress
	// ErrUnknownServerError: what has no code of its own, as Kafka
	// answers a coordinator's record too large for its log.
	ErrUnknownServerError = kafkaerr.ErrUnknownServerError
	// ErrCoordinatorNotAvailable: a transactional id's coordinator could
	// not be reached, or could not write its state partition.
	ErrCoordinatorNotAvailable = kafkaerr.ErrCoordinatorNotAvailable
)

// ErrCorruptSnapshot means a producer-state snapshot file cannot be read:
// an unknown version, a bad CRC, or bytes that do not match the schema.
// Kafka (ProducerStateManager.loadFromSnapshot) deletes such a file and
// falls back to an older snapshot or to the log.
var ErrCorruptSnapshot = errors.New("idempotence: corrupt producer snapshot")
