package broker

// Topic ids (KIP-516) are the data directory's (log.Dir.TopicID): random,
// given when a topic is created and stored with its configuration, so that
// a topic deleted and created again under its name has a new id, as in
// Kafka. Requests that name topics by id (Fetch v13+, Metadata v10+,
// OffsetCommit and OffsetFetch v10, DeleteTopics v6, KIP-848 consumer
// groups) are resolved through topicNames; an id no topic has is
// UNKNOWN_TOPIC_ID.

// topicID returns a topic's id, zero if there is no such topic.
func (b *Broker) topicID(name string) [16]byte {
	id, _ := b.dir.TopicID(name)
	return id
}

// topicNames maps the ids of the data directory's topics to their names.
func (b *Broker) topicNames() (map[[16]byte]string, error) {
	names, err := b.dir.Topics()
	if err != nil {
		return nil, err
	}
	byID := make(map[[16]byte]string, len(names))
	for _, n := range names {
		if id, err := b.dir.TopicID(n); err == nil { // else deleted since
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
	var ids map[[16]byte]string
	if byID {
		var err error
		if ids, err = b.topicNames(); err != nil {
			return nil, err
		}
	}
	for i := range names {
		id, name := topic(i)
		if byID {
			name = ids[id]
		}
		names[i] = name
	}
	return names, nil
}
