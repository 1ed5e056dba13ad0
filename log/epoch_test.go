package log

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/internal/checkpoint"
	"github.com/strandlog/strand/vfs"
)

// An epochStep changes an epoch cache.
type epochStep struct {
	desc string
	do   func(*EpochCache) error
}

func epAssign(epoch int32, start int64) epochStep {
	return epochStep{fmt.Sprintf("Assign(%d, %d)", epoch, start), func(c *EpochCache) error { return c.Assign(epoch, start) }}
}

func epTruncateFromEnd(off int64) epochStep {
	return epochStep{fmt.Sprintf("TruncateFromEnd(%d)", off), func(c *EpochCache) error { return c.TruncateFromEnd(off) }}
}

func epTruncateFromStart(off int64) epochStep {
	return epochStep{fmt.Sprintf("TruncateFromStart(%d)", off), func(c *EpochCache) error { return c.TruncateFromStart(off) }}
}

var epClear = epochStep{"Clear()", func(c *EpochCache) error { return c.Clear() }}

// epochQuery is one EndOffsetFor call and its expected answer.
type epochQuery struct {
	requested int32
	leo       int64
	epoch     int32
	end       int64
}

const (
	noEpoch  = UndefinedEpoch
	noOffset = UndefinedEpochOffset
)

func openTestEpochCache(t *testing.T) (*EpochCache, *vfs.MemFS) {
	t.Helper()
	m := vfs.NewMem()
	require.NoError(t, m.MkdirAll("/p", 0o755))
	root, err := m.OpenDir("/")
	require.NoError(t, err)
	require.NoError(t, root.Sync(), "make the partition directory durable")
	require.NoError(t, root.Close())
	c, err := OpenEpochCache(m, "/p")
	require.NoError(t, err)
	return c, m
}

// Test vectors ported from apache/kafka:
// storage/src/test/java/org/apache/kafka/storage/internals/epoch/LeaderEpochFileCacheTest.java
// (each case is named after its Kafka test), plus the KIP-279 scenario.
// Every case also checks that the cache reloaded from its checkpoint file
// equals the cache, as Kafka's shouldPersistEpochsBetweenInstances and
// shouldWriteCheckpointOnTruncation do for one case each.
func TestEpochCacheKafkaVectors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []epochStep
		want    []EpochEntry
		queries []epochQuery
	}{
		{
			name:    "shouldAddEpochAndMessageOffsetToCache",
			steps:   []epochStep{epAssign(2, 10)},
			want:    []EpochEntry{{2, 10}},
			queries: []epochQuery{{2, 11, 2, 11}},
		},
		{
			name:    "shouldReturnLogEndOffsetIfLatestEpochRequested",
			steps:   []epochStep{epAssign(2, 11), epAssign(2, 12)},
			want:    []EpochEntry{{2, 11}},
			queries: []epochQuery{{2, 14, 2, 14}},
		},
		{
			name:    "shouldReturnUndefinedOffsetIfUndefinedEpochRequested",
			steps:   []epochStep{epAssign(2, 11), epAssign(3, 12)},
			want:    []EpochEntry{{2, 11}, {3, 12}},
			queries: []epochQuery{{UndefinedEpoch, 0, noEpoch, noOffset}},
		},
		{
			name:  "shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned",
			steps: []epochStep{epAssign(2, 9), epAssign(2, 10)},
			want:  []EpochEntry{{2, 9}},
		},
		{
			name:  "shouldEnforceMonotonicallyIncreasingStartOffsets",
			steps: []epochStep{epAssign(2, 9), epAssign(3, 9)},
			want:  []EpochEntry{{3, 9}},
		},
		{
			name:  "shouldNotOverwriteOffsetForALeaderEpochOnceItHasBeenAssigned",
			steps: []epochStep{epAssign(2, 6), epAssign(2, 10)},
			want:  []EpochEntry{{2, 6}},
		},
		{
			name:    "shouldReturnUnsupportedIfNoEpochRecorded",
			queries: []epochQuery{{0, 0, noEpoch, noOffset}},
		},
		{
			name:    "shouldReturnUnsupportedIfNoEpochRecordedAndUndefinedEpochRequested",
			queries: []epochQuery{{UndefinedEpoch, 73, noEpoch, noOffset}},
		},
		{
			name:    "shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch",
			steps:   []epochStep{epAssign(5, 11), epAssign(6, 12), epAssign(7, 13)},
			want:    []EpochEntry{{5, 11}, {6, 12}, {7, 13}},
			queries: []epochQuery{{4, 0, 4, 11}},
		},
		{
			name:    "shouldTruncateIfMatchingEpochButEarlierStartingOffset",
			steps:   []epochStep{epAssign(5, 11), epAssign(6, 12), epAssign(7, 13), epAssign(7, 12)},
			want:    []EpochEntry{{5, 11}, {7, 12}},
			queries: []epochQuery{{5, 0, 5, 12}, {6, 0, 5, 12}},
		},
		{
			name: "shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch",
			steps: []epochStep{
				epAssign(1, 11), epAssign(1, 12), epAssign(2, 13),
				epAssign(2, 14), epAssign(3, 15), epAssign(3, 16),
			},
			want:    []EpochEntry{{1, 11}, {2, 13}, {3, 15}},
			queries: []epochQuery{{2, 17, 2, 15}},
		},
		{
			name:    "shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested",
			steps:   []epochStep{epAssign(0, 10), epAssign(2, 13), epAssign(4, 17)},
			want:    []EpochEntry{{0, 10}, {2, 13}, {4, 17}},
			queries: []epochQuery{{1, 0, 0, 13}, {2, 0, 2, 17}, {3, 0, 2, 17}},
		},
		{
			name:  "shouldNotUpdateEpochAndStartOffsetIfItDidNotChange",
			steps: []epochStep{epAssign(2, 6), epAssign(2, 7)},
			want:  []EpochEntry{{2, 6}},
		},
		{
			name:    "shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked",
			steps:   []epochStep{epAssign(2, 100)},
			want:    []EpochEntry{{2, 100}},
			queries: []epochQuery{{3, 100, noEpoch, noOffset}},
		},
		{
			name:    "shouldSupportEpochsThatDoNotStartFromZero",
			steps:   []epochStep{epAssign(2, 6)},
			want:    []EpochEntry{{2, 6}},
			queries: []epochQuery{{2, 7, 2, 7}},
		},
		{
			name:    "shouldEnforceMonotonicallyIncreasingEpochs",
			steps:   []epochStep{epAssign(1, 5), epAssign(2, 6), epAssign(1, 7)},
			want:    []EpochEntry{{1, 7}},
			queries: []epochQuery{{1, 8, 1, 8}, {2, 8, noEpoch, noOffset}},
		},
		{
			name:  "shouldEnforceOffsetsIncreaseMonotonically",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 5)},
			want:  []EpochEntry{{3, 5}},
		},
		{
			name:    "shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes",
			steps:   []epochStep{epAssign(0, 0), epAssign(1, 0), epAssign(2, 5)},
			want:    []EpochEntry{{1, 0}, {2, 5}},
			queries: []epochQuery{{2, 10, 2, 10}, {1, 10, 1, 5}, {0, 10, 0, 0}},
		},
		{
			name: "shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages",
			steps: []epochStep{
				epAssign(0, 0), epAssign(0, 1), epAssign(0, 2),
				epAssign(1, 3), epAssign(1, 4), epAssign(1, 5),
				epAssign(2, 6), epAssign(2, 7), epAssign(2, 8),
			},
			want:    []EpochEntry{{0, 0}, {1, 3}, {2, 6}},
			queries: []epochQuery{{2, 9, 2, 9}, {0, 9, 0, 3}, {1, 9, 1, 6}},
		},
		{
			name:  "shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromEnd(8)},
			want:  []EpochEntry{{2, 6}},
		},
		{
			name:  "shouldPreserveResetOffsetOnClearEarliestIfOneExists",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(8)},
			want:  []EpochEntry{{3, 8}, {4, 11}},
		},
		{
			name:  "shouldNotClearAnythingIfOffsetTooEarly",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(1)},
			want:  []EpochEntry{{2, 6}, {3, 8}, {4, 11}},
		},
		{
			name:  "shouldNotClearAnythingIfOffsetIsFirstOffset",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(6)},
			want:  []EpochEntry{{2, 6}, {3, 8}, {4, 11}},
		},
		{
			name:  "shouldRetainLatestEpochOnClearAllEarliest",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(11)},
			want:  []EpochEntry{{4, 11}},
		},
		{
			name:  "shouldUpdateOffsetBetweenEpochBoundariesOnClearEarliest",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(9)},
			want:  []EpochEntry{{3, 9}, {4, 11}},
		},
		{
			name:  "shouldUpdateOffsetBetweenFirstTwoEpochBoundariesOnClearEarliest",
			steps: []epochStep{epAssign(0, 0), epAssign(1, 7), epAssign(2, 10), epTruncateFromStart(5)},
			want:  []EpochEntry{{0, 5}, {1, 7}, {2, 10}},
		},
		{
			name:  "shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(15)},
			want:  []EpochEntry{{4, 15}},
		},
		{
			name:  "shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromEnd(9)},
			want:  []EpochEntry{{2, 6}, {3, 8}},
		},
		{
			name:  "shouldClearAllEntries",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epClear},
		},
		{
			name:  "shouldNotResetEpochHistoryHeadIfUndefinedPassed",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromStart(UndefinedEpochOffset)},
			want:  []EpochEntry{{2, 6}, {3, 8}, {4, 11}},
		},
		{
			name:  "shouldNotResetEpochHistoryTailIfUndefinedPassed",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromEnd(UndefinedEpochOffset)},
			want:  []EpochEntry{{2, 6}, {3, 8}, {4, 11}},
		},
		{
			name:    "shouldFetchEndOffsetOfEmptyCache",
			queries: []epochQuery{{7, 0, noEpoch, noOffset}},
		},
		{
			name:  "shouldClearEarliestOnEmptyCache",
			steps: []epochStep{epTruncateFromStart(7)},
		},
		{
			name:  "shouldClearLatestOnEmptyCache",
			steps: []epochStep{epTruncateFromEnd(7)},
		},
		{
			name:  "shouldWriteCheckpointOnTruncation",
			steps: []epochStep{epAssign(2, 6), epAssign(3, 8), epAssign(4, 11), epTruncateFromEnd(11), epTruncateFromStart(8)},
			want:  []EpochEntry{{3, 8}},
		},
		{
			// replica.md TC-3 (KIP-279): leader A went from epoch 1 to 3 and
			// never had follower B's epoch 2. Asked for epoch 2, A answers
			// epoch 1 ending at 1, so that B compares with its own epoch 1
			// rather than truncating to the start of A's epoch 3.
			name:    "KIP-279 fast failover: leader never had the requested epoch",
			steps:   []epochStep{epAssign(1, 0), epAssign(3, 1)},
			want:    []EpochEntry{{1, 0}, {3, 1}},
			queries: []epochQuery{{2, 2, 1, 1}, {3, 2, 3, 2}, {4, 2, noEpoch, noOffset}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, m := openTestEpochCache(t)
			for _, s := range tc.steps {
				require.NoError(t, s.do(c), s.desc)
			}
			require.Equal(t, tc.want, epochsOrNil(c.Entries()))
			for _, q := range tc.queries {
				epoch, end := c.EndOffsetFor(q.requested, q.leo)
				require.Equal(t, [2]int64{int64(q.epoch), q.end}, [2]int64{int64(epoch), end},
					"EndOffsetFor(%d, %d)", q.requested, q.leo)
			}

			for seed := range uint64(8) {
				reopened, err := OpenEpochCache(m.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(seed, 0))}), "/p")
				require.NoError(t, err)
				require.Equal(t, tc.want, epochsOrNil(reopened.Entries()), "seed %d: the checkpoint file holds the cache after a crash", seed)
			}
		})
	}
}

func epochsOrNil(e []EpochEntry) []EpochEntry {
	if len(e) == 0 {
		return nil
	}
	return e
}

// Kafka's shouldFetchEpochForGivenOffset and shouldFetchLatestEpochOfEmptyCache.
func TestEpochForOffset(t *testing.T) {
	c, _ := openTestEpochCache(t)
	require.Equal(t, UndefinedEpoch, c.EpochForOffset(0), "empty cache")
	require.Equal(t, UndefinedEpoch, c.LatestEpoch(), "empty cache")
	_, ok := c.Latest()
	require.False(t, ok)

	for _, s := range []epochStep{epAssign(0, 10), epAssign(1, 20), epAssign(5, 30)} {
		require.NoError(t, s.do(c))
	}
	for _, tc := range []struct {
		offset int64
		epoch  int32
	}{
		{25, 1},
		{20, 1},
		{30, 5},
		{50, 5},
		{5, UndefinedEpoch},
		{10, 0},
		{19, 0},
	} {
		require.Equal(t, tc.epoch, c.EpochForOffset(tc.offset), "EpochForOffset(%d)", tc.offset)
	}
	require.Equal(t, int32(5), c.LatestEpoch())
	latest, ok := c.Latest()
	require.True(t, ok)
	require.Equal(t, EpochEntry{5, 30}, latest)
}

func TestEpochCacheRejectsNegativeEntries(t *testing.T) {
	c, _ := openTestEpochCache(t)
	require.ErrorIs(t, c.Assign(-1, 0), ErrInvalidEpoch)
	require.ErrorIs(t, c.Assign(0, -1), ErrInvalidEpoch)
	require.Empty(t, c.Entries())
}

func TestEpochCacheFileFormat(t *testing.T) {
	c, m := openTestEpochCache(t)
	require.NoError(t, c.Assign(0, 0))
	require.NoError(t, c.Assign(4, 1200))
	got, err := readEpochFile(m, "/p/leader-epoch-checkpoint")
	require.NoError(t, err)
	require.Equal(t, "0\n2\n0 0\n4 1200\n", got, "Kafka's LeaderEpochCheckpointFile format, version 0")
}

func readEpochFile(fsys vfs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	return string(b), err
}

func TestOpenEpochCacheLoadsFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    []EpochEntry
		corrupt string // expected error text, if the file is corrupt
	}{
		{name: "Kafka's empty file", content: "", want: nil},
		{name: "entries", content: "0\n2\n0 0\n3 17\n", want: []EpochEntry{{0, 0}, {3, 17}}},
		{name: "white space as Kafka splits it", content: "0\n1\n3  \t17\n", want: []EpochEntry{{3, 17}}},
		{
			// Kafka loads a file by assigning its entries in order.
			name: "entries out of order resolved like Assign", content: "0\n3\n1 5\n2 6\n1 7\n",
			want: []EpochEntry{{1, 7}},
		},
		{name: "version 1", content: "1\n0\n", corrupt: "line 1"},
		{name: "one field", content: "0\n1\n5\n", corrupt: "line 3"},
		{name: "negative epoch", content: "0\n1\n-1 5\n", corrupt: "line 3: epoch"},
		{name: "negative start offset", content: "0\n2\n1 5\n2 -5\n", corrupt: "line 4: start offset"},
		{name: "epoch beyond int32", content: "0\n1\n2147483648 0\n", corrupt: "line 3: epoch"},
		{name: "count mismatch", content: "0\n2\n1 5\n", corrupt: "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := vfs.NewMem()
			require.NoError(t, m.MkdirAll("/p", 0o755))
			f, err := m.Create("/p/leader-epoch-checkpoint")
			require.NoError(t, err)
			_, err = f.Write([]byte(tc.content))
			require.NoError(t, err)
			require.NoError(t, f.Close())

			c, err := OpenEpochCache(m, "/p")
			if tc.corrupt != "" {
				require.ErrorIs(t, err, checkpoint.ErrCorrupt)
				require.ErrorIs(t, err, ErrCorrupt, "a user can match it")
				require.ErrorContains(t, err, "/p/leader-epoch-checkpoint: "+tc.corrupt)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, epochsOrNil(c.Entries()))
		})
	}
}

func TestEpochCacheUnchangedWhenCheckpointFails(t *testing.T) {
	c, m := openTestEpochCache(t)
	require.NoError(t, c.Assign(1, 0))
	require.NoError(t, c.Assign(2, 10))
	m.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpSync {
			return syscall.EIO
		}
		return nil
	})
	for _, s := range []epochStep{epAssign(3, 20), epTruncateFromEnd(5), epTruncateFromStart(12), epClear} {
		err := s.do(c)
		require.ErrorIs(t, err, syscall.EIO, s.desc)
		require.Equal(t, []EpochEntry{{1, 0}, {2, 10}}, c.Entries(), "%s failed, so the cache is unchanged", s.desc)
	}
	m.SetHook(nil)
	require.NoError(t, c.Assign(3, 20), "the cache works again once the file system does")
	require.Equal(t, []EpochEntry{{1, 0}, {2, 10}, {3, 20}}, c.Entries())
}

func TestEpochCacheWritesOnlyOnChange(t *testing.T) {
	c, m := openTestEpochCache(t)
	require.NoError(t, c.Assign(1, 0))
	writes := 0
	m.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpCreate {
			writes++
		}
		return nil
	})
	for _, s := range []epochStep{epAssign(1, 5), epAssign(1, 9), epTruncateFromEnd(3), epTruncateFromStart(0)} {
		require.NoError(t, s.do(c), s.desc)
	}
	require.Zero(t, writes, "appends in the current epoch and no-op truncations write nothing")
	require.NoError(t, c.Assign(2, 9))
	require.Equal(t, 1, writes)
}

func TestEpochCacheConcurrentUse(t *testing.T) {
	c, m := openTestEpochCache(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readerErr error
	var errOnce sync.Once
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				entries := c.Entries()
				for i := 1; i < len(entries); i++ {
					if entries[i].Epoch <= entries[i-1].Epoch || entries[i].StartOffset <= entries[i-1].StartOffset {
						errOnce.Do(func() { readerErr = fmt.Errorf("entries not increasing: %v", entries) })
					}
				}
				c.EndOffsetFor(c.LatestEpoch(), 1000)
				c.EpochForOffset(50)
			}
		}()
	}
	for epoch := range int32(200) {
		require.NoError(t, c.Assign(epoch, int64(epoch)*10))
		if epoch%10 == 9 {
			require.NoError(t, c.TruncateFromEnd(int64(epoch)*10-5))
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, readerErr)

	reopened, err := OpenEpochCache(m, "/p")
	require.NoError(t, err)
	require.Equal(t, c.Entries(), reopened.Entries())
}

func ExampleEpochCache_EndOffsetFor() {
	fsys := vfs.NewMem()
	cache, err := OpenEpochCache(fsys, "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	// Epoch 1 wrote offsets 0-9, epoch 3 wrote from 10; the log ends at 15.
	for _, e := range []EpochEntry{{1, 0}, {3, 10}} {
		if err := cache.Assign(e.Epoch, e.StartOffset); err != nil {
			fmt.Println(err)
			return
		}
	}
	// A follower whose last record is from epoch 2, which this log never
	// had, learns that epoch 1 ended at 10 (KIP-279).
	fmt.Println(cache.EndOffsetFor(2, 15))
	fmt.Println(cache.EndOffsetFor(3, 15))
	// Output:
	// 1 10
	// 3 15
}
