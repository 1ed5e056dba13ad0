package coordinator

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
)

var errClosed = errors.New("closed for good")

// host is a runtime's user that records what the runtime asked of it. Its
// loads succeed unless fail holds an error, and block while gate is set.
type host struct {
	rt        *Runtime
	loads     []string // "partition@epoch", in order
	installed map[int32]int32
	unloads   []string // "partition:state"
	fail      error
	gate      chan struct{}
	loading   chan struct{} // told when a load begins, if set
}

func newHost(t *testing.T, partitions int32) *host {
	h := &host{installed: map[int32]int32{}}
	rt, err := New(Options{
		Partitions: partitions,
		Name:       func(id int32) string { return fmt.Sprintf("state-%d", id) },
		Load: func(partition, epoch int32) (func(), error) {
			h.loads = append(h.loads, fmt.Sprintf("%d@%d", partition, epoch))
			if h.loading != nil {
				h.loading <- struct{}{}
			}
			if h.gate != nil {
				<-h.gate
			}
			if h.fail != nil {
				return nil, h.fail
			}
			return func() { h.installed[partition] = epoch }, nil
		},
		Unload: func(partition int32) {
			p, _ := h.rt.Partition(partition)
			h.unloads = append(h.unloads, fmt.Sprintf("%d:%v", partition, p.State()))
			delete(h.installed, partition)
		},
		Closed: errClosed,
	})
	require.NoError(t, err)
	h.rt = rt
	return h
}

// followHeld starts Follow(partition, epoch) with its load held until
// release, and returns once the load has begun.
func (h *host) followHeld(partition, epoch int32) (release func(), done <-chan error) {
	h.gate, h.loading = make(chan struct{}), make(chan struct{})
	followed := make(chan error)
	go func() { followed <- h.rt.Follow(partition, epoch) }()
	<-h.loading
	return func() { close(h.gate) }, followed
}

// refusal is what a request for the partition is answered now.
func (h *host) refusal(id int32) error {
	p, _ := h.rt.Partition(id)
	p.Lock()
	defer p.Unlock()
	return p.Refusal()
}

// A partition is loaded when this broker becomes its leader and given up
// when it stops (Kafka's CoordinatorRuntime: scheduleLoadOperation on
// onElection, scheduleUnloadOperation on onResignation); requests for a
// partition not led here are NOT_COORDINATOR.
func TestFollowLoadsALedPartitionAndUnloadsOneNoLongerLed(t *testing.T) {
	h := newHost(t, 2)
	require.ErrorIs(t, h.refusal(0), kafkaerr.ErrNotCoordinator)

	require.NoError(t, h.rt.Follow(0, 3))
	require.NoError(t, h.refusal(0))
	epoch, ok := h.rt.Loaded(0)
	require.True(t, ok)
	require.EqualValues(t, 3, epoch)
	require.Equal(t, map[int32]int32{0: 3}, h.installed)
	_, ok = h.rt.Loaded(1)
	require.False(t, ok, "a partition not followed is not loaded")

	require.NoError(t, h.rt.Follow(0, 3), "led still, in the same epoch")
	require.Equal(t, []string{"0@3"}, h.loads, "no second load")

	require.NoError(t, h.rt.Follow(0, -1))
	require.Equal(t, []string{"0:active"}, h.unloads)
	require.ErrorIs(t, h.refusal(0), kafkaerr.ErrNotCoordinator)
	_, ok = h.rt.Loaded(0)
	require.False(t, ok)
	require.NoError(t, h.rt.Follow(0, -1), "resigning twice unloads once")
	require.Len(t, h.unloads, 1)
}

// A partition led again in a new epoch may hold what another leader wrote
// meanwhile: it is unloaded and loaded again, in the new epoch, which is
// the coordinator epoch of its markers.
func TestFollowInANewEpochLoadsAgain(t *testing.T) {
	h := newHost(t, 1)
	require.NoError(t, h.rt.Follow(0, 1))
	require.NoError(t, h.rt.Follow(0, 2))
	require.Equal(t, []string{"0@1", "0@2"}, h.loads)
	require.Equal(t, []string{"0:active"}, h.unloads)
	p, _ := h.rt.Partition(0)
	require.EqualValues(t, 2, p.Epoch())
	require.Equal(t, map[int32]int32{0: 2}, h.installed)
}

// While a partition loads, its requests are COORDINATOR_LOAD_IN_PROGRESS,
// which a client retries at the same broker.
func TestRequestsWhileLoadingAreLoadInProgress(t *testing.T) {
	h := newHost(t, 1)
	release, done := h.followHeld(0, 1)
	err := h.refusal(0)
	require.ErrorIs(t, err, kafkaerr.ErrCoordinatorLoadInProgress)
	require.ErrorContains(t, err, "state-0 is being loaded")
	_, ok := h.rt.Loaded(0)
	require.False(t, ok)
	release()
	require.NoError(t, <-done)
	require.NoError(t, h.refusal(0))
}

// A partition that resigns while it loads is not installed when its load
// ends, since the state it read is another leader's to serve.
func TestAResignationWhileLoadingWins(t *testing.T) {
	h := newHost(t, 1)
	release, done := h.followHeld(0, 1)
	require.NoError(t, h.rt.Follow(0, -1))
	require.Equal(t, []string{"0:loading"}, h.unloads)
	release()
	require.NoError(t, <-done, "a load a resignation overtook is no failure")
	require.Empty(t, h.installed)
	require.ErrorIs(t, h.refusal(0), kafkaerr.ErrNotCoordinator)
}

// A load that fails leaves the partition Failed (Kafka's FAILED):
// NOT_COORDINATOR with the cause, and loaded again by the next Follow in
// the same epoch.
func TestAFailedLoadIsRetriedByTheNextFollow(t *testing.T) {
	h := newHost(t, 1)
	cause := errors.New("read error at offset 7")
	h.fail = cause
	err := h.rt.Follow(0, 4)
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, "loading state-0 in leader epoch 4")
	err = h.refusal(0)
	require.ErrorIs(t, err, kafkaerr.ErrNotCoordinator)
	require.ErrorIs(t, err, cause)
	p, _ := h.rt.Partition(0)
	p.Lock()
	require.Equal(t, Failed, p.State())
	require.ErrorIs(t, p.Err(), cause)
	p.Unlock()

	h.fail = nil
	require.NoError(t, h.rt.Follow(0, 4))
	require.Equal(t, []string{"0@4", "0@4"}, h.loads)
	require.NoError(t, h.refusal(0))
}

// A user that finds its coordinator no longer what the log holds fails
// the partition; the first cause stays, and the next Follow reloads it.
func TestFailGivesUpAnActivePartitionUntilTheNextFollow(t *testing.T) {
	h := newHost(t, 1)
	require.NoError(t, h.rt.Follow(0, 1))
	p, _ := h.rt.Partition(0)
	first, second := errors.New("first"), errors.New("second")
	p.Lock()
	p.Fail(first)
	p.Fail(second)
	require.ErrorIs(t, p.Refusal(), first)
	require.NotErrorIs(t, p.Refusal(), second)
	p.Unlock()
	_, ok := h.rt.Loaded(0)
	require.False(t, ok)

	require.NoError(t, h.rt.Follow(0, 1))
	require.Equal(t, []string{"0@1", "0@1"}, h.loads)
	require.Empty(t, h.unloads, "a failed partition in the same epoch is loaded, not unloaded")

	p.Lock()
	p.Fail(kafkaerr.New(kafkaerr.ErrNotCoordinator, "moved while written"))
	require.EqualError(t, p.Refusal(), "moved while written", "a cause that is NOT_COORDINATOR already is answered as it is")
	p.Unlock()
}

// A closed partition stays closed: requests and Follow get the user's
// error, and a load in flight is not installed.
func TestAClosedPartitionStaysClosed(t *testing.T) {
	h := newHost(t, 1)
	release, done := h.followHeld(0, 1)
	p, _ := h.rt.Partition(0)
	p.Lock()
	p.Close()
	p.Unlock()
	release()
	require.ErrorIs(t, <-done, errClosed)
	require.Empty(t, h.installed)
	require.ErrorIs(t, h.refusal(0), errClosed)
	require.ErrorIs(t, h.rt.Follow(0, 2), errClosed)
	require.ErrorIs(t, h.rt.Follow(0, -1), errClosed)
	require.Empty(t, h.unloads)
}

func TestBadPartitionsAndOptionsAreRefused(t *testing.T) {
	h := newHost(t, 2)
	require.ErrorIs(t, h.rt.Follow(2, 0), kafkaerr.ErrUnknownTopicOrPartition)
	require.ErrorIs(t, h.rt.Follow(-1, 0), kafkaerr.ErrUnknownTopicOrPartition)
	_, ok := h.rt.Loaded(5)
	require.False(t, ok)
	_, err := New(Options{Partitions: 1})
	require.ErrorContains(t, err, "Options need")
	require.Equal(t, "failed", Failed.String())
	require.Equal(t, "State(9)", State(9).String())
}
