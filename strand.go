// Package strand holds the names every package of Strand shares, so that
// each means one thing across them. It imports nothing: every package may
// import it.
package strand

import "fmt"

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// String returns Kafka's name of the partition, topic-partition.
func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// ProducerIDAndEpoch is an idempotent or transactional producer's
// identity, as an InitProducerId request carries it (KIP-360) and as its
// answer, a transaction's offsets and a marker name it.
type ProducerIDAndEpoch struct {
	ProducerID int64
	Epoch      int16
}
