package broker

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strandlog/strand/kafkaerr"
)

// Fetch sessions (KIP-227) spare a consumer that reads many partitions from
// sending them all in every fetch, and the broker from answering for those
// with nothing new. A full fetch of session epoch 0 asks for a session: the
// broker remembers its partitions and their fetch parameters, answers with a
// session id, and later (incremental) fetches of that id and the next epoch
// name only the partitions whose parameters changed, or that the client
// forgets. An incremental response holds only the partitions with records,
// an error, or a high watermark, last stable offset or log start offset
// other than the one last sent. The rules are Kafka's FetchSession.scala.

// Defaults of the fetch session cache, Kafka's.
const (
	// DefaultFetchSessionCacheSlots is max.incremental.fetch.session.cache.slots.
	DefaultFetchSessionCacheSlots = 1000
	// fetchSessionEvictionAge is MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS:
	// a session unused for longer can always be evicted, and one created
	// longer ago can be evicted for a larger one.
	fetchSessionEvictionAge = 2 * time.Minute
)

// FetchSessionStats describes the broker's fetch session cache, as Kafka's
// metrics NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached
// and IncrementalFetchSessionEvictionsPerSec do.
type FetchSessionStats struct {
	Sessions           int   // sessions in the cache
	Partitions         int   // partitions of those sessions
	Evictions          int64 // sessions evicted for new ones since Open
	IncrementalFetches int64 // incremental fetches served since Open
}

// FetchSessionStats returns the state of the fetch session cache.
func (b *Broker) FetchSessionStats() FetchSessionStats { return b.sessions.stats() }

// sessionKey names a partition of a session: by topic id in a session of
// Fetch v13+, by topic name in an older one.
type sessionKey struct {
	id        [16]byte
	topic     string
	partition int32
}

// sessionPartition is a partition of a session: the client's latest fetch
// parameters and what the last response said of it.
type sessionPartition struct {
	key               sessionKey
	req               kmsg.FetchRequestTopicPartition
	hw, lso, logStart int64 // -1: send the partition in the next response
}

type fetchSession struct {
	id, epoch  int32 // epoch: the one the next request must carry
	privileged bool  // a follower's
	topicIDs   bool  // Fetch v13+
	parts      []*sessionPartition
	byKey      map[sessionKey]*sessionPartition
	created    time.Time
	used       time.Time
}

// fetchSessions is the session cache, max.incremental.fetch.session.cache.slots
// sessions at most, under one lock: Kafka since KAFKA-9401 splits its cache
// into shards, each with its share of the slots and evicting among its own
// sessions, for less lock contention among many request threads.
type fetchSessions struct {
	mu          sync.Mutex
	slots       int
	now         func() time.Time
	newID       func() int32
	sessions    map[int32]*fetchSession
	evictions   int64
	incremental int64
}

func newFetchSessions(slots int) *fetchSessions {
	switch {
	case slots == 0:
		slots = DefaultFetchSessionCacheSlots
	case slots < 0:
		slots = 0
	}
	return &fetchSessions{slots: slots, now: time.Now, sessions: map[int32]*fetchSession{},
		newID: func() int32 { return rand.Int32N(math.MaxInt32) + 1 }}
}

func (c *fetchSessions) stats() FetchSessionStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := FetchSessionStats{Sessions: len(c.sessions), Evictions: c.evictions, IncrementalFetches: c.incremental}
	for _, s := range c.sessions {
		st.Partitions += len(s.parts)
	}
	return st
}

// nextEpoch is the session epoch after epoch (FetchMetadata.nextEpoch):
// it wraps to 1, never to 0, which asks for a new session.
func nextEpoch(epoch int32) int32 {
	if epoch == math.MaxInt32 {
		return 1
	}
	return epoch + 1
}

// fetchContext is a fetch's view of its session: the partitions to read and
// what to do with the response.
type fetchContext struct {
	c        *fetchSessions
	version  int16
	session  *fetchSession // an incremental fetch's
	create   bool          // a full fetch that asks for a session
	topicIDs bool
	// privileged marks a follower's fetch, whose sessions a consumer's
	// cannot evict.
	privileged bool
	parts      []*sessionPartition // a full fetch's, for the session it creates
	unknown    []sessionKey        // partitions of topic ids no topic has
}

// open checks a fetch's session id and epoch and returns its context. It
// rewrites req.Topics to every partition the fetch reads, named: for an
// incremental fetch, the session's partitions, and for Fetch v13+ the names
// of the topic ids (those of no topic are left out: see respond).
func (c *fetchSessions) open(req *kmsg.FetchRequest, topicName func([16]byte) (string, bool, error)) (*fetchContext, error) {
	replica := req.ReplicaID
	if req.Version >= 15 {
		replica = req.ReplicaState.ID
	}
	fc := &fetchContext{c: c, version: req.Version, topicIDs: req.Version >= 13, privileged: replica >= 0}
	if req.Version < 7 || req.SessionEpoch == 0 || req.SessionEpoch == -1 {
		// A full fetch, which ends the session it names (KIP-227: epoch
		// -1 closes it, 0 starts another).
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				fc.parts = append(fc.parts, &sessionPartition{key: fc.key(t.TopicID, t.Topic, p.Partition), req: p})
			}
		}
		c.mu.Lock()
		delete(c.sessions, req.SessionID)
		c.mu.Unlock()
		fc.create = req.Version >= 7 && req.SessionEpoch == 0 && c.slots > 0
		var err error
		req.Topics, err = fc.request(fc.parts, topicName)
		return fc, err
	}
	c.mu.Lock()
	s, ok := c.sessions[req.SessionID]
	var err error
	switch {
	case !ok:
		err = kafkaerr.ErrFetchSessionIDNotFound
	case s.epoch != req.SessionEpoch:
		err = kafkaerr.ErrInvalidFetchSessionEpoch
	case s.topicIDs != fc.topicIDs:
		// A session started with topic ids goes on with them, and one
		// started with names with names.
		err = kafkaerr.ErrFetchSessionTopicIDError
	}
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			k := fc.key(t.TopicID, t.Topic, p.Partition)
			if sp, ok := s.byKey[k]; ok {
				sp.req = p
				continue
			}
			sp := &sessionPartition{key: k, req: p, hw: -1, lso: -1, logStart: -1}
			s.byKey[k] = sp
			s.parts = append(s.parts, sp)
		}
	}
	forget := map[sessionKey]bool{}
	for _, t := range req.ForgottenTopics {
		for _, p := range t.Partitions {
			k := fc.key(t.TopicID, t.Topic, p)
			forget[k] = true
			delete(s.byKey, k)
		}
	}
	if len(forget) > 0 {
		s.parts = slices.DeleteFunc(s.parts, func(sp *sessionPartition) bool { return forget[sp.key] })
	}
	if len(s.parts) == 0 {
		// Every partition forgotten: the session closes, and the fetch
		// is answered without one (FetchManager.newContext).
		delete(c.sessions, s.id)
		c.mu.Unlock()
		req.Topics = nil
		return fc, nil
	}
	s.epoch = nextEpoch(s.epoch)
	s.used = c.now()
	c.incremental++
	fc.session = s
	// What the fetch reads, copied: the names of topic ids are looked up
	// without holding the cache.
	parts := make([]*sessionPartition, len(s.parts))
	for i, sp := range s.parts {
		cp := *sp
		parts[i] = &cp
	}
	c.mu.Unlock()
	req.Topics, err = fc.request(parts, topicName)
	return fc, err
}

func (fc *fetchContext) key(id [16]byte, topic string, partition int32) sessionKey {
	if fc.topicIDs {
		return sessionKey{id: id, partition: partition}
	}
	return sessionKey{topic: topic, partition: partition}
}

// request returns the topics of a fetch of parts, consecutive partitions of
// a topic under one topic, as Kafka groups them. Partitions of topic ids no
// topic has are left for respond to answer.
func (fc *fetchContext) request(parts []*sessionPartition, topicName func([16]byte) (string, bool, error)) ([]kmsg.FetchRequestTopic, error) {
	var topics []kmsg.FetchRequestTopic
	fc.unknown = fc.unknown[:0]
	names := map[[16]byte]string{} // "" for an id no topic has
	for _, sp := range parts {
		name := sp.key.topic
		if fc.topicIDs {
			var known bool
			if name, known = names[sp.key.id]; !known {
				var err error
				if name, _, err = topicName(sp.key.id); err != nil {
					return nil, err
				}
				names[sp.key.id] = name
			}
			if name == "" {
				fc.unknown = append(fc.unknown, sp.key)
				continue
			}
		}
		if n := len(topics); n == 0 || topics[n-1].Topic != name || topics[n-1].TopicID != sp.key.id {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = name, sp.key.id
			topics = append(topics, t)
		}
		p := sp.req
		p.Partition = sp.key.partition
		topics[len(topics)-1].Partitions = append(topics[len(topics)-1].Partitions, p)
	}
	return topics, nil
}

// respond finishes a fetch's response: it adds the partitions of unknown
// topic ids (UNKNOWN_TOPIC_ID), creates the session a full fetch asked for,
// and leaves out of an incremental fetch's response the partitions with
// nothing new (FetchSession.CachedPartition.maybeUpdateResponseData). A
// partition with records moves to the end of its session, so that the
// others are read first next time: no partition starves when MaxBytes runs
// out.
func (fc *fetchContext) respond(resp *kmsg.FetchResponse) {
	for _, k := range fc.unknown {
		rt := kmsg.NewFetchResponseTopic()
		rt.TopicID = k.id
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.ErrorCode, rp.RecordBatches = k.partition, int16(kafkaerr.ErrUnknownTopicID), []byte{}
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
	}
	switch {
	case fc.session != nil:
		fc.c.mu.Lock()
		defer fc.c.mu.Unlock()
		s := fc.session
		resp.SessionID = s.id
		moved := map[*sessionPartition]bool{}
		topics := resp.Topics[:0]
		for _, rt := range resp.Topics {
			parts := rt.Partitions[:0]
			for _, rp := range rt.Partitions {
				sp, ok := s.byKey[fc.key(rt.TopicID, rt.Topic, rp.Partition)]
				if !ok || sp.update(&rp) {
					parts = append(parts, rp)
				}
				if ok && len(rp.RecordBatches) > 0 {
					moved[sp] = true
				}
			}
			if len(parts) > 0 {
				rt.Partitions = parts
				topics = append(topics, rt)
			}
		}
		resp.Topics = topics
		if len(moved) > 0 {
			s.parts = slices.DeleteFunc(s.parts, func(sp *sessionPartition) bool { return moved[sp] })
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if sp := s.byKey[fc.key(rt.TopicID, rt.Topic, rp.Partition)]; moved[sp] {
						s.parts = append(s.parts, sp)
					}
				}
			}
		}
	case fc.create:
		byKey := make(map[sessionKey]*sessionPartition, len(fc.parts))
		for _, sp := range fc.parts {
			byKey[sp.key] = sp
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if sp, ok := byKey[fc.key(rt.TopicID, rt.Topic, rp.Partition)]; ok {
					sp.update(&rp)
				}
			}
		}
		resp.SessionID = fc.c.create(fc.privileged, fc.topicIDs, fc.parts)
	}
}

// update records what a response says of the partition and reports whether
// the response must hold it: it has records or an error, or offsets that
// changed since the last response. After an error, the partition is sent
// again until it has none. Kafka's rule watches the high watermark and the
// log start offset; the last stable offset is watched too, since it is a
// read_committed consumer's end (it moves with the high watermark on one
// broker, so this sends nothing more there).
func (sp *sessionPartition) update(rp *kmsg.FetchResponseTopicPartition) bool {
	must := len(rp.RecordBatches) > 0 || rp.ErrorCode != 0 ||
		rp.HighWatermark != sp.hw || rp.LastStableOffset != sp.lso || rp.LogStartOffset != sp.logStart
	sp.hw, sp.lso, sp.logStart = rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset
	if rp.ErrorCode != 0 {
		sp.hw = -1
	}
	return must
}

// create adds a session of parts if there is a free slot, or one it may
// evict, and returns its id; else 0, which tells the client to go on with
// full fetches (FetchSessionCache.maybeCreateSession).
func (c *fetchSessions) create(privileged, topicIDs bool, parts []*sessionPartition) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.sessions) >= c.slots && !c.evict(privileged, len(parts), now) {
		return 0
	}
	s := &fetchSession{epoch: nextEpoch(0), privileged: privileged, topicIDs: topicIDs, parts: parts,
		byKey: make(map[sessionKey]*sessionPartition, len(parts)), created: now, used: now}
	for _, sp := range parts {
		s.byKey[sp.key] = sp
	}
	for {
		if s.id = c.newID(); s.id > 0 && c.sessions[s.id] == nil {
			break
		}
	}
	c.sessions[s.id] = s
	return s.id
}

// evict makes room for a new session of size partitions
// (FetchSessionCache.tryEvict): it evicts the least recently used session
// if it is unused for longer than fetchSessionEvictionAge; else the least
// valuable of the sessions that may be evicted, if the new one is worth
// more. A session may be evicted by a follower's session if it is a
// consumer's, and by any once it is older than fetchSessionEvictionAge.
func (c *fetchSessions) evict(privileged bool, size int, now time.Time) bool {
	var lru, least *fetchSession
	for _, s := range c.sessions {
		if lru == nil || s.used.Before(lru.used) || s.used.Equal(lru.used) && s.id < lru.id {
			lru = s
		}
		old := now.Sub(s.created) > fetchSessionEvictionAge
		if !old && (!privileged || s.privileged) {
			continue
		}
		if least == nil || s.worth().compare(least.worth()) < 0 {
			least = s
		}
	}
	switch {
	case lru != nil && now.Sub(lru.used) > fetchSessionEvictionAge:
		least = lru
	case least == nil || (evictKey{privileged, size, 0}).compare(least.worth()) < 0:
		return false
	}
	delete(c.sessions, least.id)
	c.evictions++
	return true
}

// evictKey orders sessions by worth, as Kafka's EvictableKey: a follower's
// over a consumer's, then the larger, then the higher id.
type evictKey struct {
	privileged bool
	size       int
	id         int32
}

func (s *fetchSession) worth() evictKey { return evictKey{s.privileged, len(s.parts), s.id} }

func (k evictKey) compare(o evictKey) int {
	if k.privileged != o.privileged {
		if k.privileged {
			return 1
		}
		return -1
	}
	return cmp.Or(cmp.Compare(k.size, o.size), cmp.Compare(k.id, o.id))
}
