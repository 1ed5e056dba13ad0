package log

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

// At most one fsync of a log is in flight, and the next one carries every
// group written while it was (pebble's LogWriter policy): appenders that
// arrive during a sync are written at once and then share one sync.
func TestOneSyncInFlightCarriesEveryGroupWrittenDuringIt(t *testing.T) {
	fs := newMemFS(t)
	opts := memOptions(fs)
	opts.Fsync = FsyncAlways()
	l, err := Open("/data/orders-0", opts)
	require.NoError(t, err)
	defer l.Close()

	var (
		inFlight, maxInFlight, syncs atomic.Int32
		firstStarted                 = make(chan struct{})
		releaseFirst                 = make(chan struct{})
		release                      = sync.OnceFunc(func() { close(releaseFirst) })
	)
	defer release() // before Close, which waits for the sync, if a check fails
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind != vfs.OpSync || !strings.HasSuffix(op.Name, segment.LogSuffix) {
			return nil
		}
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		if syncs.Add(1) == 1 {
			close(firstStarted)
			<-releaseFirst
		}
		return nil
	})

	var wg sync.WaitGroup
	appendOne := func(i int) {
		wg.Go(func() {
			_, err := l.Append([]segment.Record{record(i, 10)})
			require.NoError(t, err)
		})
	}
	appendOne(0)
	<-firstStarted
	for i := 1; i <= 5; i++ {
		appendOne(i)
	}
	require.Eventually(t, func() bool { return l.LogEndOffset() == 6 }, 5*time.Second, time.Millisecond,
		"the appenders that came during the sync are written without waiting for it")
	require.EqualValues(t, 1, syncs.Load(), "no second sync starts while one is in flight")
	release()
	wg.Wait()

	require.EqualValues(t, 2, syncs.Load(), "one sync carries the five groups written during the first")
	require.EqualValues(t, 1, maxInFlight.Load())
	require.EqualValues(t, 6, l.HighWatermark())
}

// The coalescer waits for the appenders the last sync released only while
// some are still to come back, never for a lone appender, and backs off
// when they do not come back: appenders that append once each (a server's
// requests) must not pay a wait at every sync.
func TestCoalescerWaitsOnlyForReturningAppenders(t *testing.T) {
	var c coalescer
	c.released(1, 800*time.Microsecond)
	c.wrote(1)
	require.Zero(t, c.budget(), "a lone appender, back with its next append, syncs at once")

	c.released(8, 800*time.Microsecond)
	c.wrote(1)
	require.Equal(t, 100*time.Microsecond, c.budget(), "an eighth of the last fsync")
	c.wrote(7)
	require.Zero(t, c.budget(), "all eight are back")
	c.gathered(false)

	c.released(8, 400*time.Microsecond)
	c.wrote(2)
	require.Equal(t, 50*time.Microsecond, c.budget())

	// They do not come back: each timeout skips the wait for twice as many
	// syncs as the one before, up to 63.
	var skipped []int
	for range 8 {
		c.gathered(true)
		n := 0
		for c.released(8, time.Millisecond); c.budget() == 0; c.released(8, time.Millisecond) {
			n++
		}
		skipped = append(skipped, n)
	}
	require.Equal(t, []int{1, 3, 7, 15, 31, 63, 63, 63}, skipped)

	c.gathered(false)
	c.gathered(true)
	c.released(8, time.Millisecond)
	require.Zero(t, c.budget(), "a wait that succeeded starts the backoff again")
	c.released(8, time.Millisecond)
	require.NotZero(t, c.budget())
}
