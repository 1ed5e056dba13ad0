package group

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/idempotence"
	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/log"
	"github.com/strandlog/strand/segment"
	"github.com/strandlog/strand/vfs"
)

var serviceCrashes = flag.Int("group.service-crashes", 0, "crash points of TestServiceCrashKeepsAcknowledgedCommits (default 5, 40 without -short)")

// The values were printed by Java 21: s.hashCode(), and
// Utils.abs(hashCode) % 50 as GroupCoordinator.partitionFor computes it.
func TestPartitionForIsKafkas(t *testing.T) {
	for _, tc := range []struct {
		group string
		want  int32
	}{
		{"", 0},
		{"Aa", 12},                // hashCode 2112
		{"hello", 22},             // 99162322
		{"polygenelubricants", 0}, // Integer.MIN_VALUE, which Utils.abs maps to 0
		{"\U0001F600", 49},        // a surrogate pair: 1772899
		{"my-consumer-group", 13}, // 1513705513
		{"consumer-group-07", 48}, // 277006348
		{"\u00e9-group", 7},       // 2016868507
		{"zzzzzzzzzz", 36},        // -1580979136: a negative hash
	} {
		require.Equal(t, tc.want, PartitionFor(tc.group, 50), "%q", tc.group)
	}
}

func openMemService(t *testing.T, fs vfs.FS, partitions int32, clock func() time.Time) (*log.Dir, *Service) {
	t.Helper()
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: fs, SegmentBytes: 16 << 10, MaxIndexBytes: 1024, IndexIntervalBytes: 512}, MaintenanceInterval: -1})
	require.NoError(t, err)
	s, err := OpenService(d, ServiceOptions{
		Partitions: partitions,
		Now:        clock,
		Config:     Config{InitialRebalanceDelay: -1, Partitions: func(string) int32 { return 4 }},
	})
	require.NoError(t, err)
	return d, s
}

func newMemDataFS(t *testing.T) *vfs.MemFS {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/data", 0o755))
	require.NoError(t, vfs.SyncDir(fs, "/"))
	return fs
}

// joinAlone makes a dynamic member join a classic group and sync with an
// assignment, as a single consumer would, and returns its id and generation.
func joinAlone(ctx context.Context, s *Service, groupID, memberID, topic string) (string, int32, error) {
	req := JoinGroupRequest{
		Version: JoinVersionLatest, GroupID: groupID, MemberID: memberID, ClientID: "c", SessionTimeout: 30 * time.Second,
		ProtocolType: "consumer",
		Protocols:    []Protocol{{Name: "range", Metadata: Subscription{Topics: []string{topic}}.Encode(3)}},
	}
	r, err := s.JoinGroup(ctx, req)
	if err != nil {
		return "", 0, err
	}
	if errors.Is(r.Err, ErrMemberIDRequired) {
		req.MemberID = r.MemberID
		if r, err = s.JoinGroup(ctx, req); err != nil {
			return "", 0, err
		}
	}
	if r.Err != nil {
		return "", 0, r.Err
	}
	sr, err := s.SyncGroup(ctx, SyncGroupRequest{
		GroupID: groupID, GenerationID: r.GenerationID, MemberID: r.MemberID,
		Assignments: []SyncGroupAssignment{{MemberID: r.MemberID, Assignment: Assignment{Partitions: map[string][]int32{topic: {0, 1, 2, 3}}}.Encode(3)}},
	})
	if err != nil {
		return "", 0, err
	}
	return r.MemberID, r.GenerationID, sr.Err
}

func serviceCommit(ctx context.Context, s *Service, groupID, member string, gen int32, topic string, p int32, offset int64) error {
	r, err := s.OffsetCommit(ctx, OffsetCommitRequest{
		Version: 9, GroupID: groupID, GenerationID: gen, MemberID: member,
		Topics: []OffsetCommitTopic{{Name: topic, Partitions: []OffsetCommitPartition{{Partition: p, Offset: offset, LeaderEpoch: -1}}}},
	})
	if err != nil {
		return err
	}
	if r.Err != nil {
		return r.Err
	}
	return r.Topics[0].Partitions[0].Err
}

// TestServiceReopenRebuildsLiveState runs random requests from several
// goroutines (joins, commits, leaves, deletes, simple commits), closes the
// Service and opens it again over the same Dir: every partition's
// coordinator replays to the live one's committed offsets and groups.
func TestServiceReopenRebuildsLiveState(t *testing.T) {
	fs := newMemDataFS(t)
	clock := func() time.Time { return epoch }
	d, s := openMemService(t, fs, 4, clock)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			// Each worker has groups of its own, of which it is the only
			// member, so that no join waits for another member: the
			// clock stands still.
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			members, gens := map[string]string{}, map[string]int32{}
			for range 60 {
				g := fmt.Sprint("w", w, "g", rnd.IntN(3))
				switch rnd.IntN(6) {
				case 0:
					m, gen, err := joinAlone(ctx, s, g, members[g], "t")
					if err != nil {
						t.Errorf("join %s: %v", g, err)
						return
					}
					members[g], gens[g] = m, gen
				case 1:
					_, err := s.LeaveGroup(ctx, LeaveGroupRequest{GroupID: g, Members: []LeaveGroupMember{{MemberID: members[g]}}})
					require.NoError(t, err)
					delete(members, g)
				case 2:
					_, err := s.DeleteGroup(ctx, g)
					require.NoError(t, err)
				case 3:
					_ = serviceCommit(ctx, s, g, "", -1, "t", rnd.Int32N(4), rnd.Int64N(1000))
				default:
					_ = serviceCommit(ctx, s, g, members[g], gens[g], "t", rnd.Int32N(4), rnd.Int64N(1000))
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close())
	// After Close the loop is gone: its coordinators may be read here.
	live := s.parts
	records := int64(0)
	for _, sp := range live {
		records += sp.c.nextOffset
	}
	require.Positive(t, records)

	s2, err := OpenService(d, ServiceOptions{Partitions: 4, Now: clock, Config: Config{InitialRebalanceDelay: -1, Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	for i, sp := range live {
		t.Run(fmt.Sprint("partition ", i), func(t *testing.T) { compareReplayed(t, sp.c, s2.parts[i].c) })
	}
	require.NoError(t, d.Close())
}

// Each group lives on the partition PartitionFor names.
func TestServicePlacesGroupsByHash(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 50, func() time.Time { return epoch })
	ctx := context.Background()
	for _, g := range []string{"hello", "my-consumer-group", "zzzzzzzzzz"} {
		require.NoError(t, serviceCommit(ctx, s, g, "", -1, "t", 0, 5))
	}
	require.NoError(t, s.Close())
	for i, sp := range s.parts {
		for g := range sp.c.groups {
			require.Equal(t, PartitionFor(g, 50), int32(i), g)
		}
	}
	require.Len(t, s.parts[22].c.groups, 1)
	require.Len(t, s.parts[13].c.groups, 1)
	require.Len(t, s.parts[36].c.groups, 1)
	require.NoError(t, d.Close())
}

// A join parked in the coordinator (waiting for the initial rebalance delay)
// is answered NOT_COORDINATOR by Close, and a request after Close fails with
// ErrServiceClosed.
func TestServiceCloseAnswersParkedRequests(t *testing.T) {
	fs := newMemDataFS(t)
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: fs, MaxIndexBytes: 1024}, MaintenanceInterval: -1})
	require.NoError(t, err)
	s, err := OpenService(d, ServiceOptions{Partitions: 1, Config: Config{InitialRebalanceDelay: time.Hour}})
	require.NoError(t, err)
	ctx := context.Background()
	req := JoinGroupRequest{Version: 3, GroupID: "g", ClientID: "c", SessionTimeout: 30 * time.Second, ProtocolType: "consumer", Protocols: []Protocol{{Name: "range"}}}
	got := make(chan error, 1)
	go func() {
		_, err := s.JoinGroup(ctx, req)
		got <- err
	}()
	require.Eventually(t, func() bool {
		r, err := s.DeleteGroup(ctx, "g") // refused once the join is parked in the group
		return err == nil && errors.Is(r.Err, ErrNonEmptyGroup)
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-got, ErrNotCoordinator)
	_, err = s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g"})
	require.ErrorIs(t, err, ErrServiceClosed)
	require.NoError(t, d.Close())
}

// A timer armed while the clock goroutine looks for the next deadline wakes
// it: here a lone member's first join, whose rebalance is due at once, is
// armed after the clock looked at its partition and before it set its
// timer. The clock missed it and slept until the next deadline it had seen,
// an hour away, leaving the join parked (TestConsumerThroughUpgradeAndDowngrade
// failed so under load: its consumer never got a partition).
func TestServiceClockWakesForTimerArmedWhileItLooks(t *testing.T) {
	var clockCalls atomic.Int32
	looked, resume := make(chan struct{}), make(chan struct{})
	now := func() time.Time {
		// The clock goroutine reads the time once for each partition it
		// looks at, then once to set its timer: it is held there.
		if clockLooking() && clockCalls.Add(1) == 2 {
			close(looked)
			<-resume
		}
		return time.Now()
	}
	d, err := log.OpenDir("/data", log.DirOptions{Log: log.Options{FS: newMemDataFS(t), MaxIndexBytes: 1024}, MaintenanceInterval: -1})
	require.NoError(t, err)
	defer d.Close()
	s, err := OpenService(d, ServiceOptions{Partitions: 1, Now: now,
		Config: Config{InitialRebalanceDelay: -1, OffsetsRetentionCheckInterval: time.Hour, Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	defer s.Close()
	<-looked

	joined := make(chan error, 1)
	go func() {
		_, _, err := joinAlone(context.Background(), s, "g", "", "t")
		joined <- err
	}()
	sp := s.parts[0]
	require.Eventually(t, func() bool {
		sp.Lock()
		defer sp.Unlock()
		g := sp.c.groups["g"]
		return g != nil && g.is(PreparingRebalance) && len(g.members) == 1
	}, 10*time.Second, time.Millisecond, "the join parked, its rebalance due")
	close(resume)
	select {
	case err := <-joined:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the join is still parked: the clock slept through its rebalance")
	}
}

// clockLooking reports whether the caller was called by the Service's clock
// goroutine as it looks for the next deadline, not as it fires timers.
func clockLooking() bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	clock := false
	for {
		f, more := frames.Next()
		switch {
		case strings.HasSuffix(f.Function, ".(*Service).enter"):
			return false
		case strings.HasSuffix(f.Function, ".(*Service).clock"):
			clock = true
		}
		if !more {
			return clock
		}
	}
}

// TestServiceCrashKeepsAcknowledgedCommits commits offsets from several
// goroutines, each committing increasing offsets to its own partition, and
// takes a crash of the file system at a random write or sync: after a
// restart on the crashed file system, every committed offset is at least
// the last one acknowledged before the crash, and at most the last one
// sent.
func TestServiceCrashKeepsAcknowledgedCommits(t *testing.T) {
	crashes := *serviceCrashes
	if crashes == 0 {
		crashes = 40
		if testing.Short() {
			crashes = 5
		}
	}
	for seed := range uint64(crashes) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { crashServiceOnce(t, seed) })
	}
}

func crashServiceOnce(t *testing.T, seed uint64) {
	const workers, commits = 4, 30
	rnd := rand.New(rand.NewPCG(seed, 3))
	fs := newMemDataFS(t)
	clock := func() time.Time { return epoch }
	d, s := openMemService(t, fs, 2, clock)

	var mu sync.Mutex
	var acked, sent [workers]int64
	var crashed *vfs.MemFS
	ops, at := 0, 20+rnd.IntN(400)
	fs.SetHook(func(op vfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if ops++; ops == at {
			crashed = fs.Crash(vfs.CrashOptions{Rand: rand.New(rand.NewPCG(seed, 4))})
		}
		return nil
	})
	ackedAtCrash := func() [workers]int64 {
		mu.Lock()
		defer mu.Unlock()
		return acked
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range int64(commits) {
				mu.Lock()
				sent[w] = i + 1
				mu.Unlock()
				if err := serviceCommit(context.Background(), s, fmt.Sprint("g", w%2), "", -1, "t", int32(w), i+1); err != nil {
					t.Errorf("commit %d of worker %d: %v", i, w, err)
					return
				}
				mu.Lock()
				if crashed == nil {
					acked[w] = i + 1
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
	fs.SetHook(nil)
	if crashed == nil {
		crashed = fs.Crash(vfs.CrashOptions{})
	}
	want := ackedAtCrash()

	d2, s2 := openMemService(t, crashed, 2, clock)
	defer func() { require.NoError(t, d2.Close()) }()
	defer func() { require.NoError(t, s2.Close()) }()
	for w := range workers {
		r, err := s2.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: fmt.Sprint("g", w%2), Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{int32(w)}}}})
		require.NoError(t, err)
		require.NoError(t, r.Err)
		got := r.Topics[0].Partitions[0].Offset
		// -1 is no commit, right when none was acknowledged.
		require.GreaterOrEqual(t, max(got, 0), want[w], "worker %d: acknowledged commit lost (crash at op %d)", w, at)
		require.LessOrEqual(t, got, sent[w], "worker %d", w)
	}
}

// A group's lag against the Dir: a ReadUncommitted consumer lags to the high
// watermark, a ReadCommitted one to the last stable offset, which an open
// transaction holds back (KAFKA-6607).
func TestServiceLagToHighWatermarkOrLastStableOffset(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 1, func() time.Time { return epoch })
	defer func() { require.NoError(t, d.Close()) }()
	defer func() { require.NoError(t, s.Close()) }()
	require.NoError(t, d.CreateTopic("t", log.TopicConfig{Partitions: 2}))
	p0, err := d.Partition("t", 0)
	require.NoError(t, err)
	p1, err := d.Partition("t", 1)
	require.NoError(t, err)
	for range 10 {
		_, err := p0.Append([]segment.Record{log.NewRecord(nil, []byte("x"))})
		require.NoError(t, err)
	}
	for range 5 {
		_, err := p1.Append([]segment.Record{log.NewRecord(nil, []byte("x"))})
		require.NoError(t, err)
	}
	open := make([]segment.Record, 3)
	for i := range open {
		open[i] = log.NewRecord(nil, []byte("in a transaction"))
	}
	b, err := segment.AppendBatch(nil, open, segment.BuildOptions{Producer: &segment.ProducerFields{ID: 1, BaseSequence: 0}, Transactional: true})
	require.NoError(t, err)
	_, err = p1.AppendBatch(b)
	require.NoError(t, err)

	ctx := context.Background()
	require.NoError(t, serviceCommit(ctx, s, "g", "", -1, "t", 0, 4))
	require.NoError(t, serviceCommit(ctx, s, "g", "", -1, "t", 1, 2))

	lag, err := s.Lag(ctx, "g", log.ReadUncommitted)
	require.NoError(t, err)
	require.Equal(t, []PartitionLag{
		{Topic: "t", Partition: 0, Committed: 4, End: 10, Lag: 6},
		{Topic: "t", Partition: 1, Committed: 2, End: 8, Lag: 6},
	}, lag)
	lag, err = s.Lag(ctx, "g", log.ReadCommitted)
	require.NoError(t, err)
	require.Equal(t, []PartitionLag{
		{Topic: "t", Partition: 0, Committed: 4, End: 10, Lag: 6},
		{Topic: "t", Partition: 1, Committed: 2, End: 5, Lag: 3},
	}, lag)
}

// An append that fails answers its requests NOT_COORDINATOR, and the
// coordinator starts over from the log: the commit that was not written is
// not served, though the coordinator had applied it.
func TestServiceFailedAppendIsNotServed(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 1, func() time.Time { return epoch })
	defer func() { _ = d.Close() }() // the failed partition makes Close report it
	defer func() { require.NoError(t, s.Close()) }()
	ctx := context.Background()
	require.NoError(t, serviceCommit(ctx, s, "g", "", -1, "t", 0, 5))

	fail := errors.New("injected write failure")
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite {
			return fail
		}
		return nil
	})
	err := serviceCommit(ctx, s, "g", "", -1, "t", 0, 9)
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.ErrorIs(t, err, fail)
	fs.SetHook(nil)

	r, err := s.OffsetFetch(ctx, OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{0}}}})
	require.NoError(t, err)
	require.Equal(t, int64(5), r.Topics[0].Partitions[0].Offset, "the commit that failed to append")
}

// Compaction leaves the latest record of each key, with gaps in the offsets:
// a Service opened over the compacted topic serves the same committed
// offsets and places its next record after the log end.
func TestServiceReplaysACompactedLog(t *testing.T) {
	fs := newMemDataFS(t)
	clock := func() time.Time { return epoch }
	d, s := openMemService(t, fs, 1, clock)
	ctx := context.Background()
	for i := range int64(400) {
		require.NoError(t, serviceCommit(ctx, s, fmt.Sprint("g", i%3), "", -1, "t", int32(i%4), i))
	}
	require.NoError(t, s.Close())
	p, err := d.Partition(OffsetsTopic, 0)
	require.NoError(t, err)
	before, err := p.Stats()
	require.NoError(t, err)
	require.NoError(t, d.Maintain())
	n := 0
	for _, err := range p.Records(0, log.ReadLogEnd) {
		require.NoError(t, err)
		n++
	}
	require.Less(t, n, 200, "compaction removed the older commits (segments before: %d)", before.Segments)

	s2, err := OpenService(d, ServiceOptions{Now: clock, Config: Config{Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	require.NoError(t, serviceCommit(ctx, s2, "g0", "", -1, "t", 0, 1000)) // appends after the log end
	require.NoError(t, s2.Close())
	live := s.parts[0].c
	got := s2.parts[0].c
	require.Equal(t, live.nextOffset+1, got.nextOffset)
	k := OffsetCommitKey{Group: "g0", Topic: "t", Partition: 0}
	v, _ := got.offsets.get(k)
	require.Equal(t, int64(1000), v.Offset)
	got.offsets.remove(k)
	live.offsets.remove(k)
	for _, g := range []string{"g0", "g1", "g2"} {
		require.Equal(t, live.offsets.keys(g), got.offsets.keys(g))
		for _, k := range live.offsets.keys(g) {
			lv, _ := live.offsets.get(k)
			gv, _ := got.offsets.get(k)
			require.Equal(t, lv, gv, "%v: the value and the offset of its record", k)
		}
	}
	require.NoError(t, d.Close())
}

// ListGroups gathers the groups of every offsets partition, and DescribeGroup
// finds a group on its own partition, as Kafka's ListGroups and
// DescribeGroups do across a broker's coordinators.
func TestServiceListsAndDescribesGroups(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 8, func() time.Time { return epoch })
	ctx := context.Background()
	member, gen, err := joinAlone(ctx, s, "joined", "", "t")
	require.NoError(t, err)
	require.NoError(t, serviceCommit(ctx, s, "simple", "", -1, "t", 0, 5))
	require.NotEqual(t, PartitionFor("joined", 8), PartitionFor("simple", 8), "the test wants two partitions")
	cg, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "next", MemberID: "m", RebalanceTimeout: time.Minute,
		SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}})
	require.NoError(t, err)
	require.NoError(t, cg.Err)

	groups, err := s.ListGroups(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []GroupListing{
		{GroupID: "joined", ProtocolType: "consumer", Type: "classic", State: "Stable"},
		{GroupID: "simple", Type: "classic", State: "Empty"},
		// A first member has nothing to revoke: it is given its target at
		// once, and the group is Stable.
		{GroupID: "next", ProtocolType: "consumer", Type: "consumer", State: "Stable"},
	}, groups)

	desc, ok, err := s.DescribeGroup(ctx, "joined")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Stable, desc.State)
	require.Equal(t, gen, desc.Generation)
	require.Equal(t, member, desc.Leader)
	require.Len(t, desc.Members, 1)
	require.Equal(t, member, desc.Members[0].MemberID)

	_, ok, err = s.DescribeGroup(ctx, "absent")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// A KIP-848 group survives a restart of its Service (the records of types
// 3-8): its members, epochs and assignments come back, a member goes on
// heartbeating at its epoch, and no partition is handed to a new member
// while the old owner still holds it.
func TestServiceConsumerGroupSurvivesRestart(t *testing.T) {
	fs := newMemDataFS(t)
	clock := func() time.Time { return epoch }
	d, s := openMemService(t, fs, 4, clock)
	ctx := context.Background()
	join := func(s *Service, id string) *ConsumerGroupHeartbeatResponse {
		r, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "cg", MemberID: id, RebalanceTimeout: time.Minute,
			SubscribedTopicNames: []string{"t"}, ServerAssignor: "range", Owned: &Assignment{}})
		require.NoError(t, err)
		require.NoError(t, r.Err)
		return r
	}
	a := join(s, "a")
	assert.Equal(t, map[string][]int32{"t": {0, 1, 2, 3}}, a.Assignment.Partitions)
	b := join(s, "b") // a must give up two partitions first
	assert.Empty(t, b.Assignment.Partitions)
	require.NoError(t, s.Close())

	s, err := OpenService(d, ServiceOptions{Partitions: 4, Now: clock, Config: Config{InitialRebalanceDelay: -1, Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	// a, reloaded, still owns what it must revoke: b still waits.
	r, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "cg", MemberID: "b", MemberEpoch: b.MemberEpoch, Owned: &Assignment{}})
	require.NoError(t, err)
	require.NoError(t, r.Err)
	assert.Nil(t, r.Assignment, "nothing new for b while a has not revoked")
	r, err = s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "cg", MemberID: "a", MemberEpoch: a.MemberEpoch,
		Owned: &Assignment{Partitions: map[string][]int32{"t": {0, 1}}}})
	require.NoError(t, err)
	require.NoError(t, r.Err, "a's epoch is known after the restart")
	assert.Equal(t, map[string][]int32{"t": {0, 1}}, r.Assignment.Partitions)
	r, err = s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "cg", MemberID: "b", MemberEpoch: b.MemberEpoch, Owned: &Assignment{}})
	require.NoError(t, err)
	require.NoError(t, r.Err)
	assert.Equal(t, map[string][]int32{"t": {2, 3}}, r.Assignment.Partitions, "b gets what a released")
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// Bad input through a Service: each request gets a typed error with
// Kafka's code, and the offsets log does not change by a byte.
func TestServiceBadInputLeavesTheLogAlone(t *testing.T) {
	fs := newMemDataFS(t)
	d, s := openMemService(t, fs, 1, func() time.Time { return epoch })
	ctx := context.Background()
	member, gen, err := joinAlone(ctx, s, "classic", "", "t")
	require.NoError(t, err)
	require.NoError(t, serviceCommit(ctx, s, "classic", member, gen, "t", 0, 10))
	cg, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "cg", MemberID: "m", RebalanceTimeout: time.Minute,
		SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}})
	require.NoError(t, err)
	require.NoError(t, cg.Err)
	long := strings.Repeat("g", maxStringLen+1)
	commit := func(group, member string, gen int32) error {
		return serviceCommit(ctx, s, group, member, gen, "t", 0, 99)
	}
	join := func(mod func(*JoinGroupRequest)) error {
		req := JoinGroupRequest{Version: JoinVersionLatest, GroupID: "classic", ClientID: "c", SessionTimeout: 30 * time.Second,
			ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: Subscription{Topics: []string{"t"}}.Encode(3)}}}
		mod(&req)
		r, err := s.JoinGroup(ctx, req)
		require.NoError(t, err)
		return r.Err
	}
	cases := []struct {
		name string
		send func() error
		want error
	}{
		{"commit from a stale generation", func() error { return commit("classic", member, gen-1) }, ErrIllegalGeneration},
		{"commit from an unknown member", func() error { return commit("classic", "stranger", gen) }, ErrUnknownMemberID},
		{"commit without member to a group with members", func() error { return commit("classic", "", -1) }, ErrUnknownMemberID},
		{"commit with an empty group id", func() error { return commit("", "", -1) }, ErrInvalidGroupID},
		{"commit with a group id too long", func() error { return commit(long, "", -1) }, ErrInvalidGroupID},
		{"commit from a stale member epoch", func() error { return commit("cg", "m", cg.MemberEpoch-1) }, ErrStaleMemberEpoch},
		{"commit from an unknown consumer group member", func() error { return commit("cg", "x", cg.MemberEpoch) }, ErrUnknownMemberID},
		{"commit to a topic that does not exist", func() error { return serviceCommit(ctx, s, "classic", member, gen, "t", 9, 1) }, ErrUnknownTopicOrPartition},
		{"transactional commit from a stale generation", func() error {
			r, err := s.TxnCommitOffsets(ctx, TxnOffsetCommitRequest{GroupID: "classic", Producer: idempotence.ProducerIDAndEpoch{ProducerID: 1}, GenerationID: gen + 1, MemberID: member,
				Topics: []OffsetCommitTopic{{Name: "t", Partitions: []OffsetCommitPartition{{Offset: 1}}}}})
			require.NoError(t, err)
			return r.Err
		}, ErrIllegalGeneration},
		{"join with an empty group id", func() error { return join(func(r *JoinGroupRequest) { r.GroupID = "" }) }, ErrInvalidGroupID},
		{"join with a group id too long", func() error { return join(func(r *JoinGroupRequest) { r.GroupID = long }) }, ErrInvalidGroupID},
		{"join with another protocol type", func() error { return join(func(r *JoinGroupRequest) { r.ProtocolType = "connect" }) }, ErrInconsistentGroupProtocol},
		{"join with no protocol type", func() error { return join(func(r *JoinGroupRequest) { r.ProtocolType = "" }) }, ErrInconsistentGroupProtocol},
		{"join with a new group and no protocol type", func() error {
			return join(func(r *JoinGroupRequest) { r.GroupID, r.ProtocolType = "new", "" })
		}, ErrInconsistentGroupProtocol},
		{"join with no protocol", func() error { return join(func(r *JoinGroupRequest) { r.Protocols = nil }) }, ErrInconsistentGroupProtocol},
		{"join with no protocol the group supports", func() error {
			return join(func(r *JoinGroupRequest) { r.Protocols = []Protocol{{Name: "roundrobin"}} })
		}, ErrInconsistentGroupProtocol},
		{"join with a session timeout below group.min.session.timeout.ms", func() error {
			return join(func(r *JoinGroupRequest) { r.SessionTimeout = 5 * time.Second })
		}, ErrInvalidSessionTimeout},
		{"join with a session timeout above group.max.session.timeout.ms", func() error {
			return join(func(r *JoinGroupRequest) { r.SessionTimeout = 31 * time.Minute })
		}, ErrInvalidSessionTimeout},
		{"join of a member of another protocol type to a consumer group with members", func() error {
			return join(func(r *JoinGroupRequest) { r.GroupID, r.ProtocolType = "cg", "connect" })
		}, ErrInconsistentGroupProtocol},
		{"consumer heartbeat with an unsupported assignor", func() error {
			r, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "cg", MemberID: "n", RebalanceTimeout: time.Minute,
				SubscribedTopicNames: []string{"t"}, ServerAssignor: "sticky", Owned: &Assignment{}})
			require.NoError(t, err)
			return r.Err
		}, ErrUnsupportedAssignor},
		{"consumer heartbeat, not a join, to a classic group with members", func() error {
			r, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{GroupID: "classic", MemberID: "n", MemberEpoch: 3, RebalanceTimeout: time.Minute,
				SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}})
			require.NoError(t, err)
			return r.Err
		}, ErrGroupIDNotFound},
		{"consumer heartbeat with an empty group id", func() error {
			r, err := s.ConsumerGroupHeartbeat(ctx, ConsumerGroupHeartbeatRequest{MemberID: "n", RebalanceTimeout: time.Minute,
				SubscribedTopicNames: []string{"t"}, Owned: &Assignment{}})
			require.NoError(t, err)
			return r.Err
		}, ErrInvalidGroupID},
	}
	part, err := d.Partition(OffsetsTopic, 0)
	require.NoError(t, err)
	logBytes := func() []segment.Record {
		var out []segment.Record
		for r, err := range part.Records(0, log.ReadLogEnd) {
			require.NoError(t, err)
			out = append(out, r)
		}
		return out
	}
	before := logBytes()
	for _, c := range cases {
		err := c.send()
		require.ErrorIs(t, err, c.want, c.name)
		assert.Equal(t, kafkaerr.CodeOf(c.want), kafkaerr.CodeOf(err), c.name)
		assert.Equal(t, before, logBytes(), "%s: the offsets log changed", c.name)
	}
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// Commits from many goroutines while writes fail for a while: each
// failed commit is NOT_COORDINATOR, the Service recovers by itself once
// writes pass again, and every commit it acknowledged is served, and
// stays after a restart.
func TestServiceWriteFailuresUnderLoad(t *testing.T) {
	fs := newMemDataFS(t)
	clock := func() time.Time { return epoch }
	d, s := openMemService(t, fs, 1, clock)
	fail := errors.New("injected write failure")
	var failing atomic.Bool
	fs.SetHook(func(op vfs.Op) error {
		if op.Kind == vfs.OpWrite && failing.Load() {
			return fail
		}
		return nil
	})
	const workers, commits = 8, 60
	var acked [workers]atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range int64(commits) {
				if w == 0 {
					failing.Store(i >= 20 && i < 30)
				}
				err := serviceCommit(context.Background(), s, "g", "", -1, "t", int32(w%4), int64(w)<<20|(i+1))
				switch {
				case err == nil:
					acked[w].Store(i + 1)
				case errors.Is(err, ErrNotCoordinator):
					failed.Add(1)
				default:
					t.Errorf("worker %d commit %d: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	failing.Store(false)
	t.Logf("%d commits failed", failed.Load())
	require.NoError(t, serviceCommit(context.Background(), s, "g", "", -1, "t", 3, 1<<40), "writes pass again")
	check := func(s *Service) {
		for p := range int32(4) {
			r, err := s.OffsetFetch(context.Background(), OffsetFetchRequest{GroupID: "g", Topics: []OffsetFetchTopic{{Name: "t", Partitions: []int32{p}}}})
			require.NoError(t, err)
			got := r.Topics[0].Partitions[0].Offset
			if p == 3 {
				require.Equal(t, int64(1<<40), got)
				continue
			}
			// Workers p and p+4 share partition p: the later commit counts.
			require.Contains(t, []int64{int64(p)<<20 | acked[p].Load(), int64(p+4)<<20 | acked[p+4].Load()}, got, "partition %d", p)
		}
	}
	check(s)
	require.NoError(t, s.Close())
	s, err := OpenService(d, ServiceOptions{Partitions: 1, Now: clock, Config: Config{Partitions: func(string) int32 { return 4 }}})
	require.NoError(t, err)
	check(s)
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}

// The offsets topic keeps every segment whatever the Dir's default
// retention: a group that stopped committing a week ago still has its
// offsets. An offsets topic that took the default gets Unlimited on open.
func TestOffsetsTopicHasNoRetention(t *testing.T) {
	fs := newMemDataFS(t)
	opts := log.DirOptions{Log: log.Options{FS: fs}, MaintenanceInterval: -1,
		Defaults: log.TopicConfig{Retention: log.Retention{Age: time.Hour, Bytes: 1 << 20}}}
	d, err := log.OpenDir("/data", opts)
	require.NoError(t, err)
	unlimited := log.Retention{Age: log.Unlimited, Bytes: log.Unlimited}

	s, err := OpenService(d, ServiceOptions{Partitions: 1})
	require.NoError(t, err)
	tc, err := d.TopicConfig(OffsetsTopic)
	require.NoError(t, err)
	require.Equal(t, unlimited, tc.Retention)
	require.NoError(t, s.Close())

	_, err = d.AlterTopicConfig(OffsetsTopic, func(c *log.TopicConfig) { c.Retention = log.Retention{} }) // as made before the rule
	require.NoError(t, err)
	s, err = OpenService(d, ServiceOptions{Partitions: 1})
	require.NoError(t, err)
	tc, err = d.TopicConfig(OffsetsTopic)
	require.NoError(t, err)
	require.Equal(t, unlimited, tc.Retention)
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())
}
