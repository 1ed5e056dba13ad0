// Package kafkaerr is Kafka's table of protocol error codes, the one every
// package of Strand answers with, so that an error from one package
// matches another's by errors.Is and a Kafka broker passes its code on
// without a table of its own.
//
// A Code is an error, as syscall.Errno is: the packages' sentinel errors
// are Codes (group.ErrNotCoordinator and idempotence.ErrNotCoordinator
// are both ErrNotCoordinator), their errors wrap one, and CodeOf recovers
// it:
//
//	if errors.Is(err, kafkaerr.ErrNotCoordinator) { ... look the coordinator up again }
//	resp.ErrorCode = int16(kafkaerr.CodeOf(err))
//
// Errors of Strand's own whose meaning is narrower than a code (a log's
// unknown topic is UNKNOWN_TOPIC_OR_PARTITION, and so is its unknown
// partition) are made with New: each is an error of its own that matches
// its code as well.
package kafkaerr

import (
	"context"
	"errors"
	"fmt"
)

// Code is one of Kafka's protocol error codes
// (org.apache.kafka.common.protocol.Errors). Every Code but None is an
// error whose text is Kafka's name for it.
type Code int16

// Error returns Kafka's name for c, such as NOT_COORDINATOR, or "error code
// N" for a code the table does not hold (a newer Kafka's).
func (c Code) Error() string {
	if n, ok := names[c]; ok {
		return n.name
	}
	return fmt.Sprintf("error code %d", int16(c))
}

// Retriable reports whether Kafka's exception for c is retriable
// (extends RetriableException): the same request may succeed later, at
// the same broker or at the one the client looks up again.
func (c Code) Retriable() bool { return names[c].retriable }

// Err returns c as an error: nil for None. A code that comes off the wire
// becomes an error with it.
func (c Code) Err() error {
	if c == None {
		return nil
	}
	return c
}

// CodeOf returns the code err carries: None for nil, the Code it wraps,
// or ErrUnknownServerError for an error that wraps none (Kafka's answer
// to an exception it does not know).
func CodeOf(err error) Code {
	if err == nil {
		return None
	}
	if c, ok := errors.AsType[Code](err); ok && c != None {
		return c
	}
	return ErrUnknownServerError
}

// Retriable reports whether err carries a retriable code.
func Retriable(err error) bool {
	c, ok := errors.AsType[Code](err)
	return ok && c.Retriable()
}

// New returns an error whose text is text and which errors.Is matches to
// itself and to code: a sentinel narrower than its code, as a log's
// unknown topic is. Two errors New returns are never each other, even of
// one code.
func New(code Code, text string) error { return &coded{text: text, code: code} }

type coded struct {
	text string
	code Code
}

func (e *coded) Error() string { return e.text }
func (e *coded) Unwrap() error { return e.code }

// CoordinatorWriteError returns the error a coordinator, of groups or of
// transactions, answers a request with whose records it failed to write
// to its partition with err, as Kafka's both answer it
// (CoordinatorOperationExceptionHelper.handleOperationException,
// TransactionStateManager.appendTransactionToLog): the partition short of
// in-sync replicas, unknown, or slow to commit is COORDINATOR_NOT_AVAILABLE,
// which the client retries at the same coordinator; a replica that no
// longer leads, whose log failed, or whose coordinator is closing is
// NOT_COORDINATOR, which sends the client looking for the new one; records
// too large are UNKNOWN_SERVER_ERROR. An error of another code is answered
// as it is, one of no code (a local log's own failure) as
// KAFKA_STORAGE_ERROR is. The error returned wraps err.
func CoordinatorWriteError(err error) error {
	if err == nil {
		return nil
	}
	code, coded := errors.AsType[Code](err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = ErrCoordinatorNotAvailable
	case errors.Is(err, context.Canceled) || !coded:
		code = ErrNotCoordinator
	}
	switch code {
	case ErrNotEnoughReplicas, ErrNotEnoughReplicasAfterAppend, ErrRequestTimedOut, ErrUnknownTopicOrPartition:
		code = ErrCoordinatorNotAvailable
	case ErrNotLeaderOrFollower, ErrKafkaStorageError:
		code = ErrNotCoordinator
	case ErrMessageTooLarge, ErrRecordListTooLarge, ErrInvalidFetchSize:
		code = ErrUnknownServerError
	}
	if CodeOf(err) == code {
		return err
	}
	return fmt.Errorf("%w: %w", code, err)
}
