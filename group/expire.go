package group

import (
	"maps"
	"slices"
)

// This file is the expiration of committed offsets and of the groups left
// with none (GroupCoordinatorShard.cleanupGroupMetadata,
// OffsetMetadataManager.cleanupExpiredOffsets, research 3.5).

// scheduleExpiration arms the periodic cleanup
// (offsets.retention.check.interval.ms).
func (c *Coordinator) scheduleExpiration() {
	c.timers.schedule(timerKey{kind: timerExpire}, c.now+durationMs(c.cfg.OffsetsRetentionCheckInterval), c.expire)
}

// expire writes tombstones for the offsets that have expired, and for every
// Empty group left without offsets.
func (c *Coordinator) expire() {
	for _, g := range c.sortedGroups() {
		if c.expireOffsets(g) && g.is(Empty) {
			c.removeGroup(g)
		}
	}
	c.scheduleExpiration()
}

// expireOffsets removes a group's expired offsets and reports whether none
// is left. Which offsets may expire, and counted from when, depends on the
// group (ClassicGroup.offsetExpirationCondition):
//
//   - a group without protocol type (offsets committed outside group
//     management): all, from their commit;
//   - an Empty group: all, from when it became Empty (or from their commit
//     when that is not known);
//   - a Stable group of consumers whose subscriptions are known: those of
//     topics no member subscribes to, from their commit;
//   - any other group: none.
//
// An offset committed with its own expire timestamp expires then instead.
func (c *Coordinator) expireOffsets(g *classicGroup) bool {
	keys := c.offsets.keys(g.id)
	if len(keys) == 0 {
		// Kafka answers true here even with a transaction open; a group
		// whose transaction may still commit offsets is kept instead.
		return !c.txns.open(g.id)
	}
	var base func(committed) int64
	switch {
	case g.protocolType == "":
		base = func(v committed) int64 { return v.CommitTimestamp }
	case g.is(Empty):
		base = func(v committed) int64 {
			if g.stateTime >= 0 {
				return g.stateTime
			}
			return v.CommitTimestamp
		}
	case g.protocolType == consumerProtocolType && g.subscribedKnown && g.is(Stable):
		base = func(v committed) int64 { return v.CommitTimestamp }
	default:
		return false
	}
	retention := durationMs(c.cfg.OffsetsRetention)
	all := true
	for _, k := range keys {
		v, _ := c.offsets.get(k)
		expired := v.ExpireTimestamp >= 0 && c.now >= v.ExpireTimestamp ||
			v.ExpireTimestamp < 0 && c.now-base(v) >= retention
		// An offset an open transaction may still change is kept.
		if g.subscribes(k.Topic) || !expired || c.txns.has(k) {
			all = false
			continue
		}
		c.deleteOffset(k)
	}
	return all && !c.txns.open(g.id)
}

// deleteOffset deletes a committed offset with a tombstone.
func (c *Coordinator) deleteOffset(k OffsetCommitKey) {
	off := c.emit(EncodeOffsetTombstone(k))
	c.apply(off, Decoded{OffsetKey: &k}, nil)
}

// removeGroup deletes a group with a tombstone.
func (c *Coordinator) removeGroup(g *classicGroup) {
	gk := GroupMetadataKey{Group: g.id}
	off := c.emit(EncodeGroupTombstone(gk))
	c.apply(off, Decoded{GroupKey: &gk}, nil)
	for _, m := range slices.Sorted(maps.Keys(g.pending)) {
		c.timers.cancel(timerKey{timerHeartbeat, g.id, m})
	}
}

// subscribes reports whether a member subscribes to the topic; when the
// subscriptions are unknown, a consumer group counts as subscribed to every
// topic (ClassicGroup.isSubscribedToTopic).
func (g *classicGroup) subscribes(topic string) bool {
	if !g.subscribedKnown {
		return g.protocolType == consumerProtocolType
	}
	return g.subscribed[topic]
}

// computeSubscribed reads the topics of every member's subscription, for a
// group of consumers (ClassicGroup.computeSubscribedTopics); a subscription
// that does not parse leaves them unknown.
func (g *classicGroup) computeSubscribed() {
	g.subscribed, g.subscribedKnown = nil, false
	if g.protocolType != consumerProtocolType {
		return
	}
	topics := map[string]bool{}
	for _, m := range g.members {
		// Read as version 0, the prefix of every version, so that the
		// coordinator never depends on a version it does not know.
		r := reader{b: m.metadata(g.protocolName)}
		r.int16()
		s, err := decodeSubscription(&r, 0)
		if err != nil {
			return
		}
		for _, t := range s.Topics {
			topics[t] = true
		}
	}
	g.subscribed, g.subscribedKnown = topics, true
}
