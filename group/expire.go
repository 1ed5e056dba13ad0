package group

import (
	"maps"
	"slices"
)

// This file is the expiration of committed offsets and of the groups left
// with none (GroupCoordinatorShard.cleanupGroupMetadata,
// OffsetMetadataManager.cleanupExpiredOffsets).

// scheduleExpiration arms the periodic cleanup
// (offsets.retention.check.interval.ms).
func (c *Coordinator) scheduleExpiration() {
	c.timers.schedule(timerKey{kind: timerExpire}, c.now+durationMs(c.cfg.OffsetsRetentionCheckInterval), c.expire)
}

// expire writes tombstones for the offsets that have expired, and for every
// Empty group left without offsets.
func (c *Coordinator) expire() {
	for _, g := range c.sortedGroups() {
		base, ok := g.expiryBase()
		if ok && c.expireOffsets(g.id, base, g.subscribes) && g.is(Empty) {
			c.removeGroup(g)
		}
	}
	// A consumer group's offsets expire from their commit, for topics no
	// member subscribes to (ConsumerGroup.offsetExpirationCondition).
	for _, id := range slices.Sorted(maps.Keys(c.consumerGroups)) {
		g := c.consumerGroups[id]
		c.resolveRegexes(g)
		subscribed := map[string]bool{}
		for _, m := range g.members {
			for _, t := range m.subscription() {
				subscribed[t] = true
			}
		}
		if c.expireOffsets(id, byCommit, func(t string) bool { return subscribed[t] }) && len(g.members) == 0 {
			delete(c.consumerGroups, id)
		}
	}
	c.scheduleExpiration()
}

func byCommit(v committed) int64 { return v.CommitTimestamp }

// expiryBase returns from when a classic group's offsets expire, if they
// may (ClassicGroup.offsetExpirationCondition):
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
func (g *classicGroup) expiryBase() (func(committed) int64, bool) {
	switch {
	case g.protocolType == "":
		return byCommit, true
	case g.is(Empty):
		return func(v committed) int64 {
			if g.stateTime >= 0 {
				return g.stateTime
			}
			return v.CommitTimestamp
		}, true
	case g.protocolType == consumerProtocolType && g.subscribedKnown && g.is(Stable):
		return byCommit, true
	}
	return nil, false
}

// expireOffsets removes a group's offsets that expired, counted from base,
// except those of subscribed topics and those an open transaction may still
// change, and reports whether none is left.
func (c *Coordinator) expireOffsets(group string, base func(committed) int64, subscribed func(string) bool) bool {
	keys := c.offsets.keys(group)
	if len(keys) == 0 {
		// Kafka answers true here even with a transaction open; a group
		// whose transaction may still commit offsets is kept instead.
		return !c.txns.open(group)
	}
	retention := durationMs(c.cfg.OffsetsRetention)
	all := true
	for _, k := range keys {
		v, _ := c.offsets.get(k)
		expired := v.ExpireTimestamp >= 0 && c.now >= v.ExpireTimestamp ||
			v.ExpireTimestamp < 0 && c.now-base(v) >= retention
		if subscribed(k.Topic) || !expired || c.txns.has(k) {
			all = false
			continue
		}
		c.deleteOffset(k)
	}
	return all && !c.txns.open(group)
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
