package log

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
)

// TestProducerIDExpirationIsConfigurable: with ProducerIDExpiration set
// to an hour (producer.id.expiration.ms), a producer idle for less is
// still known, and one idle for longer is forgotten at the next check:
// its next batch, with a sequence that continues nothing the log holds, is
// taken as a new producer's (KIP-360; ProducerStateManager's checkSequence), where
// before it was an out-of-order sequence. The snapshot the log takes on
// Close keeps the shorter expiration too: a reopened log drops the
// producer at once.
func TestProducerIDExpirationIsConfigurable(t *testing.T) {
	now := time.Now()
	opts := memOptions(newMemFS(t))
	opts.Now = func() time.Time { return now }
	opts.ProducerIDExpiration = time.Hour
	l, err := Open("/data/e-0", opts)
	require.NoError(t, err)
	appendProducer(t, l, producerBatch(t, 4, 0, 0, 1, false), 0, 0)
	gap := producerBatch(t, 4, 0, 7, 1, false)

	now = now.Add(time.Hour - producerExpirationCheck - time.Minute)
	appendN(t, l, 1, 1, 1, 100) // a check runs: idle for less than an hour
	requireRefused(t, l, gap, idempotence.ErrOutOfOrderSequence)

	now = now.Add(producerExpirationCheck + 2*time.Minute)
	appendN(t, l, 2, 1, 1, 100) // idle for more: forgotten
	appendProducer(t, l, gap, 3, 3)
	require.NoError(t, l.Close())

	// Reopened an hour later, the log forgets the producer as it loads
	// its state, before any check.
	now = now.Add(time.Hour + time.Minute)
	l, err = Open("/data/e-0", opts)
	require.NoError(t, err)
	defer l.Close()
	appendProducer(t, l, producerBatch(t, 4, 0, 42, 1, false), 4, 4)

	// With the default, a day, the same idle hour forgets nothing.
	opts.ProducerIDExpiration = 0
	opts.FS = newMemFS(t)
	d, err := Open("/data/e-0", opts)
	require.NoError(t, err)
	defer d.Close()
	appendProducer(t, d, producerBatch(t, 4, 0, 0, 1, false), 0, 0)
	now = now.Add(time.Hour + producerExpirationCheck)
	appendN(t, d, 1, 1, 1, 100)
	requireRefused(t, d, gap, idempotence.ErrOutOfOrderSequence)
}

// TestProducerIDExpirationIsValidated: below a millisecond is refused, by
// name, as Kafka refuses producer.id.expiration.ms below 1, by a Log and
// by a Dir whose DirOptions.Log carry it.
func TestProducerIDExpirationIsValidated(t *testing.T) {
	for _, d := range []time.Duration{-time.Hour, time.Microsecond} {
		opts := memOptions(newMemFS(t))
		opts.ProducerIDExpiration = d
		_, err := Open("/data/e-0", opts)
		require.ErrorIs(t, err, ErrInvalidOption, "%v", d)
		require.ErrorContains(t, err, "ProducerIDExpiration")
		_, err = OpenDir("/data", DirOptions{Log: opts})
		require.ErrorIs(t, err, ErrInvalidOption, "a Dir's %v", d)
	}
}
