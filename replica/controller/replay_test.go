package controller

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strandlog/strand/kafkaerr"
	"github.com/strandlog/strand/replica"
)

var replaySeeds = flag.Int("controller.seeds", 0, "seeds of TestReplayEqualsLive (default 50, 5 under -short)")

// TestReplayEqualsLive drives a controller at random (registrations clean
// and unclean, claiming synced topics and naming offline replicas,
// reports of offline replicas, heartbeats, lost sessions, controlled shutdowns, topics,
// AlterPartitions right and wrong, preferred elections, unclean toggles,
// reassignments and their cancellation, SCRAM credentials and ACLs set
// and removed, controller failovers, some over the store compacted to
// the state's image) and checks after every step
// that the state obeys ValidControllerIsrAndElr, that replaying the
// records stored so far, encoded and decoded, gives the live state, and
// that the state's image (State.Records) replays to it.
func TestReplayEqualsLive(t *testing.T) {
	seeds := 50
	if testing.Short() {
		seeds = 5
	}
	if *replaySeeds > 0 {
		seeds = *replaySeeds
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { replayRandom(t, uint64(seed), 400) })
	}
}

func replayRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	minISR := 1 + rng.IntN(2)
	cfg := Config{Node: 100, SessionTimeoutTicks: 4, MinInsyncReplicas: minISR}
	c, err := New(cfg, NewState())
	require.NoError(t, err)
	var store []Record
	epochs := map[replica.NodeID]int64{}
	incarnations := map[replica.NodeID]uint64{}
	down := map[replica.NodeID]bool{}
	const brokers = 5
	const topics = 5 // t0 to t4, created, altered and deleted at random
	for step := range steps {
		id := replica.NodeID(rng.IntN(brokers))
		var err error
		switch op := rng.IntN(15); op {
		case 0:
			// Mostly a new start; sometimes a retry of the registration
			// registered, or one of an earlier start, arriving late.
			inc := incarnations[id] + 1
			if k := rng.IntN(6); k == 0 && inc > 1 {
				inc--
			} else if k == 1 && inc > 2 {
				inc -= 2
			}
			var e int64
			e, err = c.RegisterWith(id, inc, Registration{Clean: rng.IntN(3) > 0, Synced: randomTopics(rng, topics), Offline: randomReplicas(rng, topics)})
			switch {
			case errors.Is(err, replica.ErrStaleBrokerEpoch):
				require.Less(t, inc, incarnations[id], "only an earlier incarnation is stale")
				err = nil
			case err == nil && inc == incarnations[id]:
				require.Equal(t, epochs[id], e, "a retry gets the epoch registered back")
			case err == nil:
				epochs[id], incarnations[id], down[id] = e, inc, false
			}
		case 1:
			down[id] = true // stops heartbeating
		case 2:
			_, err = c.Heartbeat(id, epochs[id]+int64(rng.IntN(2))-1)
			if errors.Is(err, replica.ErrStaleBrokerEpoch) || errors.Is(err, replica.ErrBrokerIDNotRegistered) {
				err = nil
			}
		case 3:
			if b := c.State().Brokers[id]; b != nil {
				err = c.Shutdown(id, b.Epoch)
			}
		case 4:
			if len(c.State().Brokers) >= 3 {
				name := fmt.Sprint("t", rng.IntN(5))
				var as [][]replica.NodeID
				for range 1 + rng.IntN(3) {
					as = append(as, slices.Collect(func(yield func(replica.NodeID) bool) {
						for _, i := range rng.Perm(brokers)[:3] {
							if c.State().Brokers[replica.NodeID(i)] != nil && !yield(replica.NodeID(i)) {
								return
							}
						}
					}))
				}
				spec := TopicSpec{Unclean: rng.IntN(4) == 0, Configs: randomConfigs(rng)}
				binary.LittleEndian.PutUint64(spec.ID[:], rng.Uint64())
				err = c.CreateTopic(name, as, spec)
				if errors.Is(err, replica.ErrInvalidReplicaAssignment) || errors.Is(err, replica.ErrTopicAlreadyExists) {
					err = nil
				}
			}
		case 12:
			if rng.IntN(3) == 0 {
				err = c.DeleteTopic(fmt.Sprint("t", rng.IntN(5)))
			} else {
				var ops []ConfigOp
				for n, v := range randomConfigs(rng) {
					ops = append(ops, ConfigOp{Op: ConfigOpType(rng.IntN(2)), Name: n, Value: v})
				}
				err = c.AlterTopicConfigs(fmt.Sprint("t", rng.IntN(5)), ops, rng.IntN(8) == 0)
			}
		case 5, 6:
			err = alterRandom(c, rng)
		case 14:
			err = alterSecurityRandom(c, rng)
		case 13:
			err = c.ReportOffline(id, epochs[id]+int64(rng.IntN(4)/3), randomReplicas(rng, topics))
			if errors.Is(err, replica.ErrStaleBrokerEpoch) || errors.Is(err, replica.ErrBrokerIDNotRegistered) {
				err = nil
			}
		case 7:
			if topics > 0 {
				err = c.ElectPreferred(TopicPartition{Topic: fmt.Sprint("t", rng.IntN(topics)), Partition: 0})
				if errors.Is(err, replica.ErrElectionNotNeeded) || errors.Is(err, replica.ErrPreferredLeaderNotAvailable) {
					err = nil
				}
			}
		case 8:
			if topics > 0 {
				err = c.SetUnclean(fmt.Sprint("t", rng.IntN(topics)), rng.IntN(2) == 0)
			}
		case 10:
			if topics > 0 {
				tp := TopicPartition{Topic: fmt.Sprint("t", rng.IntN(topics)), Partition: 0}
				var target []replica.NodeID
				for _, i := range rng.Perm(brokers)[:1+rng.IntN(3)] {
					target = append(target, replica.NodeID(i))
				}
				err = c.Reassign(tp, target)
				if errors.Is(err, replica.ErrInvalidReplicaAssignment) {
					err = nil
				}
			}
		case 11:
			if topics > 0 {
				err = c.CancelReassignment(TopicPartition{Topic: fmt.Sprint("t", rng.IntN(topics)), Partition: 0})
				if errors.Is(err, replica.ErrNoReassignmentInProgress) || errors.Is(err, replica.ErrInvalidReplicaAssignment) {
					err = nil
				}
			}
		case 9:
			if rng.IntN(4) == 0 { // failover: a new controller over the stored records
				rd := c.Ready()
				store = append(store, rd.Records...)
				s, rerr := Replay(store)
				require.NoError(t, rerr)
				if rng.IntN(2) == 0 {
					store = s.Records() // the store compacted to the state's image, as a snapshot does
				}
				c, err = New(cfg, s)
			} else {
				for b, e := range epochs {
					if !down[b] {
						_, _ = c.Heartbeat(b, e)
					}
				}
				err = c.Tick()
			}
		}
		if errors.Is(err, replica.ErrUnknownTopicOrPartition) {
			err = nil // a topic never created or deleted: refused, changing nothing, which replay checks
		}
		require.NoError(t, err, "step %d", step)
		rd := c.Ready()
		for _, r := range rd.Records {
			b, err := r.MarshalBinary()
			require.NoError(t, err)
			d, err := DecodeRecord(b)
			require.NoError(t, err)
			store = append(store, d)
		}
		c.Advance(rd)
		checkState(t, c.State(), minISR)
		s, err := Replay(store)
		require.NoError(t, err)
		require.Equal(t, c.State(), s, "step %d: replay equals live", step)
		image, err := Replay(s.Records())
		require.NoError(t, err, "step %d: the image replays", step)
		require.Equal(t, s, image, "step %d: the image replays to the state", step)
	}
}

// randomTopics returns a few topic names, some of which may not exist.
func randomTopics(rng *rand.Rand, topics int) []string {
	var names []string
	for range rng.IntN(3) {
		names = append(names, fmt.Sprint("t", rng.IntN(topics+1)))
	}
	return names
}

// randomReplicas returns a few partitions, mostly none: some may not
// exist, or not be the broker's.
func randomReplicas(rng *rand.Rand, topics int) []TopicPartition {
	var tps []TopicPartition
	for range max(0, rng.IntN(5)-2) {
		tps = append(tps, TopicPartition{Topic: fmt.Sprint("t", rng.IntN(topics)), Partition: int32(rng.IntN(4))})
	}
	return tps
}

// randomConfigs returns a few of the configs the controller reads itself
// and one it does not.
func randomConfigs(rng *rand.Rand) map[string]string {
	configs := map[string]string{}
	if rng.IntN(2) == 0 {
		configs[minISRConfig] = fmt.Sprint(1 + rng.IntN(3))
	}
	if rng.IntN(3) == 0 {
		configs[uncleanConfig] = fmt.Sprint(rng.IntN(2) == 0)
	}
	if rng.IntN(3) == 0 {
		configs["retention.ms"] = fmt.Sprint(rng.IntN(1000))
	}
	return configs
}

func alterRandom(c *Controller, rng *rand.Rand) error {
	var tps []TopicPartition
	for tp := range c.State().Partitions {
		tps = append(tps, tp)
	}
	if len(tps) == 0 {
		return nil
	}
	slices.SortFunc(tps, compareTP)
	tp := tps[rng.IntN(len(tps))]
	p := c.State().Partitions[tp]
	if p.Leader == replica.NoNode {
		return nil
	}
	// Each member in its registered broker epoch, an earlier one (KIP-903
	// refuses it) or none.
	epoch := func(n replica.NodeID) int64 {
		switch rng.IntN(8) {
		case 0:
			return replica.NoBrokerEpoch
		case 1:
			return c.State().Brokers[n].Epoch - 1
		}
		return c.State().Brokers[n].Epoch
	}
	isr := []replica.ISRMember{{ID: p.Leader, BrokerEpoch: epoch(p.Leader)}}
	for _, n := range p.Replicas {
		if n != p.Leader && rng.IntN(2) == 0 {
			isr = append(isr, replica.ISRMember{ID: n, BrokerEpoch: epoch(n)})
		}
	}
	err := c.AlterPartition(&replica.AlterPartition{
		Header:      replica.Header{From: p.Leader, Topic: tp.Topic, Partition: tp.Partition},
		BrokerEpoch: epoch(p.Leader), LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch - int32(rng.IntN(2)), ISR: isr,
	})
	if _, coded := errors.AsType[replica.Code](err); coded {
		return nil // refusals are expected; they must change nothing, which replay checks
	}
	return err
}

// alterSecurityRandom sets or removes a credential or an ACL of a few
// users. The removal of a credential not there is refused, changing
// nothing, which replay checks.
func alterSecurityRandom(c *Controller, rng *rand.Rand) error {
	user, mechanism := fmt.Sprint("u", rng.IntN(3)), scramMechanisms[rng.IntN(len(scramMechanisms))]
	acl := ACL{ResourceType: aclTopic, ResourceName: fmt.Sprint("t", rng.IntN(3)), PatternType: aclLiteral,
		Principal: "User:" + user, Host: "*", Operation: int8(2 + rng.IntN(13)), Permission: aclAllow}
	switch rng.IntN(4) {
	case 0:
		return c.AlterScramCredentials([]ScramCredential{{User: user, Mechanism: mechanism,
			Salt: []byte{byte(rng.IntN(4))}, StoredKey: []byte{1}, ServerKey: []byte{2}, Iterations: 4096}}, nil)
	case 1:
		err := c.AlterScramCredentials(nil, []ScramCredentialKey{{User: user, Mechanism: mechanism}})
		if errors.Is(err, kafkaerr.ErrResourceNotFound) {
			return nil
		}
		return err
	case 2:
		return c.AlterACLs([]ACL{acl}, nil)
	}
	return c.AlterACLs(nil, []ACL{acl})
}

// checkState asserts Vanlightly's ValidControllerState and
// ValidControllerIsrAndElr: fenced brokers are in no ISR, an ISR at
// MinInsyncReplicas has no ELR, a leader is a live ISR member; and no
// offline replica is in an ISR or ELR (so none leads).
func checkState(t *testing.T, s *State, minISR int) {
	t.Helper()
	for tp, p := range s.Partitions {
		require.NoError(t, p.check(), "%v", tp)
		for _, n := range p.ISR {
			b := s.Brokers[n]
			require.True(t, b != nil && !b.Fenced && !b.ShuttingDown, "%v: ISR member %d is not live (%+v)", tp, n, b)
		}
		for _, n := range slices.Concat(p.ISR, p.ELR) {
			require.False(t, s.Brokers[n].offline(tp), "%v: ISR %v or ELR %v holds %d, whose replica is offline", tp, p.ISR, p.ELR, n)
		}
		topicMinISR := minISR
		if v, ok := s.Topics[tp.Topic].Configs[minISRConfig]; ok {
			topicMinISR, _ = strconv.Atoi(v)
		}
		if len(p.ISR) >= topicMinISR {
			require.Empty(t, p.ELR, "%v: ISR %v at min ISR %d keeps no ELR", tp, p.ISR, topicMinISR)
		}
	}
}
