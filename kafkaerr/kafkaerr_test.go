package kafkaerr

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"
)

// Codes, names and retriability as Kafka's Errors enum and its exception
// classes give them (a retriable exception extends RetriableException).
func TestCodesAreKafkas(t *testing.T) {
	for _, c := range []struct {
		code      Code
		name      string
		retriable bool
	}{
		{ErrUnknownServerError, "UNKNOWN_SERVER_ERROR", false},
		{ErrOffsetOutOfRange, "OFFSET_OUT_OF_RANGE", false},
		{ErrUnknownTopicOrPartition, "UNKNOWN_TOPIC_OR_PARTITION", true},
		{ErrNotLeaderOrFollower, "NOT_LEADER_OR_FOLLOWER", true},
		{ErrRequestTimedOut, "REQUEST_TIMED_OUT", true},
		{ErrStaleControllerEpoch, "STALE_CONTROLLER_EPOCH", false},
		{ErrCoordinatorLoadInProgress, "COORDINATOR_LOAD_IN_PROGRESS", true},
		{ErrNotCoordinator, "NOT_COORDINATOR", true},
		{ErrNotEnoughReplicas, "NOT_ENOUGH_REPLICAS", true},
		{ErrTopicAlreadyExists, "TOPIC_ALREADY_EXISTS", false},
		{ErrInvalidProducerEpoch, "INVALID_PRODUCER_EPOCH", false},
		{ErrKafkaStorageError, "KAFKA_STORAGE_ERROR", true},
		{ErrFencedLeaderEpoch, "FENCED_LEADER_EPOCH", true},
		{ErrProducerFenced, "PRODUCER_FENCED", false},
		{ErrTransactionAbortable, "TRANSACTION_ABORTABLE", false},
	} {
		require.Equal(t, c.name, c.code.Error(), "code %d", int16(c.code))
		require.Equal(t, c.retriable, c.code.Retriable(), c.name)
	}
	require.Equal(t, Code(6), ErrNotLeaderOrFollower)
	require.Equal(t, Code(56), ErrKafkaStorageError)
	require.Equal(t, Code(120), ErrTransactionAbortable)
}

func TestCodeOf(t *testing.T) {
	require.Equal(t, None, CodeOf(nil))
	require.NoError(t, None.Err())
	require.Equal(t, ErrNotCoordinator, CodeOf(fmt.Errorf("group %q: %w", "g", ErrNotCoordinator)))
	require.Equal(t, ErrUnknownServerError, CodeOf(errors.New("no code")))
	require.Equal(t, ErrUnknownServerError, CodeOf(fmt.Errorf("wraps none: %w", None)), "None is no error's code")
	// The outermost code decides, as a coordinator's answer wraps the
	// append error it replaced.
	require.Equal(t, ErrCoordinatorNotAvailable, CodeOf(fmt.Errorf("%w: %w", ErrCoordinatorNotAvailable, ErrNotEnoughReplicas)))

	newer := Code(999)
	require.Equal(t, "error code 999", newer.Error())
	require.False(t, newer.Retriable())
	require.Equal(t, newer, CodeOf(newer.Err()))

	require.True(t, Retriable(fmt.Errorf("fetch: %w", ErrNotLeaderOrFollower)))
	require.False(t, Retriable(fmt.Errorf("produce: %w", ErrInvalidProducerEpoch)))
	require.False(t, Retriable(errors.New("no code")))
}

func TestNewIsItsOwnAndItsCodes(t *testing.T) {
	topic := New(ErrUnknownTopicOrPartition, "log: unknown topic")
	partition := New(ErrUnknownTopicOrPartition, "log: unknown partition")
	err := fmt.Errorf("topic %q: %w", "t", topic)
	require.ErrorIs(t, err, topic)
	require.ErrorIs(t, err, ErrUnknownTopicOrPartition)
	require.NotErrorIs(t, err, partition, "two sentinels of one code are not each other")
	require.Equal(t, ErrUnknownTopicOrPartition, CodeOf(err))
	require.Equal(t, "log: unknown topic", topic.Error())
}

// Every code codes.go declares has a name in its table, and every name
// belongs to one code.
func TestEveryCodeIsNamed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
	require.NoError(t, err)
	declared := map[string]bool{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					declared[n.Name] = true
				}
			}
		}
	}
	require.Len(t, names, len(declared), "codes declared and codes named")
	seen := map[string]Code{}
	for c, n := range names {
		require.NotContains(t, seen, n.name, "name %s of codes %d and %d", n.name, c, seen[n.name])
		seen[n.name] = c
	}
}
