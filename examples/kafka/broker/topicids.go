package broker

import "sync"

// Topic ids (KIP-516) are the Cluster's: a cluster.Node's controller draws
// one at random when it creates a topic, so that a topic deleted and
// created again under its name has a new id, as in Kafka. Requests that name topics by id (Fetch v13+, Metadata v10+,
// OffsetCommit and OffsetFetch v10, DeleteTopics v6, KIP-848 consumer
// groups) are resolved through topicName or topicNames; an id no topic has
// is UNKNOWN_TOPIC_ID.

// topicIDCache maps topic ids to names for the requests that name topics by
// id, which Fetch v13+ makes hot: building the map from the Cluster takes a
// look-up per topic. An entry is checked against the Cluster before it is used (a
// topic deleted and created again under its name has another id), and the
// map is built again when an id is not in it.
type topicIDCache struct {
	mu    sync.Mutex
	names map[[16]byte]string
}

// topicName returns the name of the topic with id; ok is false if no topic
// has it.
func (b *Broker) topicName(id [16]byte) (name string, ok bool, err error) {
	b.ids.mu.Lock()
	name, ok = b.ids.names[id]
	b.ids.mu.Unlock()
	if ok {
		if cur, err := b.cluster.TopicID(name); err == nil && cur == id {
			return name, true, nil
		}
	}
	byID, err := b.topicNames()
	if err != nil {
		return "", false, err
	}
	b.ids.mu.Lock()
	b.ids.names = byID
	b.ids.mu.Unlock()
	name, ok = byID[id]
	return name, ok, nil
}

// topicID returns a topic's id, zero if there is no such topic.
func (b *Broker) topicID(name string) [16]byte {
	id, _ := b.cluster.TopicID(name)
	return id
}

// topicNames maps the ids of the data directory's topics to their names.
func (b *Broker) topicNames() (map[[16]byte]string, error) {
	names, err := b.cluster.Topics()
	if err != nil {
		return nil, err
	}
	byID := make(map[[16]byte]string, len(names))
	for _, n := range names {
		if id, err := b.cluster.TopicID(n); err == nil { // else deleted since
			byID[id] = n
		}
	}
	return byID, nil
}

// namesOf returns the names of the topics of a request that names them by
// id ("" for an id no topic has), or, for an older version (byID false),
// the names it gives.
func (b *Broker) namesOf(byID bool, n int, topic func(i int) ([16]byte, string)) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		id, name := topic(i)
		if byID {
			var err error
			if name, _, err = b.topicName(id); err != nil {
				return nil, err
			}
		}
		names[i] = name
	}
	return names, nil
}
