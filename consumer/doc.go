// Package consumer is Kafka's consumer client in process: a Consumer is a
// member of a classic consumer group that a group.Service coordinates, and
// reads the partitions assigned to it from the Service's log.Dir, as
// Kafka's KafkaConsumer reads from brokers. It joins on its first Poll,
// heartbeats from a goroutine of its own, rebalances eagerly, or
// cooperatively (KIP-429) with assign.CooperativeSticky, commits
// automatically or when told, can be a static member (KIP-345), and
// leaves on Close. Reading committed (the default), it skips aborted
// transactions and transaction markers, as log.Batches.Records does.
//
// A TransactSession is a Consumer and a transactional producer whose
// output commits with the group's offsets in one transaction
// (consume-transform-produce, KIP-98 and KIP-447), in the manner of
// franz-go's GroupTransactSession.
//
// A Consumer is not safe for concurrent use: Poll, the commits and the
// callbacks run on the caller's goroutine; its own goroutines end with
// Close.
package consumer
