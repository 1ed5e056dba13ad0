package broker

import (
	"crypto/sha256"
)

// topicID is a topic's id (KIP-516), which KIP-848 consumer groups name
// topics by. Strand's data directory keeps no topic ids, so the broker
// derives one from the name: stable across restarts, but a topic deleted and
// created again keeps its id, where Kafka gives the new topic a new one (as
// before KIP-516, a client cannot tell the two apart).
func topicID(name string) [16]byte {
	sum := sha256.Sum256([]byte("strand topic id\x00" + name))
	var id [16]byte
	copy(id[:], sum[:])
	id[6] = id[6]&0x0f | 0x50 // version 5 (name-based) ...
	id[8] = id[8]&0x3f | 0x80 // ... RFC 4122 variant: never Kafka's reserved ids
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
		byID[topicID(n)] = n
	}
	return byID, nil
}
