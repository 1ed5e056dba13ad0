// Package log is Strand's durable queue and the partition log under it,
// with Kafka's on-disk format and rules.
//
// # The queue: Dir, Producer, Partition
//
// Most programs need three types. A [Dir] is a data directory of topics,
// each split into partitions ([OpenDir], [Dir.CreateTopic], [Dir.TopicConfig],
// [Dir.AlterTopicConfig]). A [Producer], from [Dir.NewProducer], appends
// records: [Producer.Produce] waits for its record, [Producer.ProduceAsync] keeps many in flight from one
// goroutine and reports through a callback, and both gather the records
// bound for one partition into one batch, routed by Kafka's partitioners
// (murmur2 for keys, sticky for keyless records). A [Partition], from
// [Dir.Partition], is read by offset or by time (Records, Read,
// OffsetForTimestamp) and tailed (Wait). See the package example.
//
// Each partition keeps its records in offset order, and every offset is
// kept until retention removes it: a consumer resumes at its next offset,
// which a consumer.Consumer commits to its group and a reader of its own keeps
// in its own storage (a file, a database row, a compacted topic keyed by
// consumer and partition); after retention, from Partition.Offsets' start.
//
// A topic's configuration (TopicConfig) holds its partition count,
// retention, compaction, segment size and age, fsync policy, compression
// and largest batch; zero fields take the Dir's defaults, and
// AlterTopicConfig changes them while the topic is in use. The Dir applies
// retention and compaction in the background (DirOptions.MaintenanceInterval)
// and reports their failures to DirOptions.Logger. Retention deletes whole
// old segments, never at or past the high watermark; compaction rewrites
// only rolled segments, never the active one, so a topic's SegmentBytes
// and SegmentAge say how soon records become compactable.
//
// The fsync policy (FsyncAlways, the default; FsyncEvery, FsyncInterval,
// FsyncNever) says what a power failure can take away; Partition.Sync
// syncs on demand. A failed fsync fails its partition (ErrFailed) until
// the process reopens the Dir: what it wrote since the last good sync may
// or may not be on the disk, and a restart recovers whatever is (see Dir).
//
// # Transactions
//
// A [TransactionalProducer], from [Dir.NewTransactionalProducer], writes
// to several partitions at once: the records of a transaction, begun with
// Begin, become readable to ReadCommitted readers in every partition when
// Commit returns, and never if it aborts. A transactional id names the
// producer across restarts, and a new producer with it fences the old one
// (Kafka's zombie fencing). The Dir's transaction coordinator
// ([Dir.Transactions]) keeps its state in the compacted topic
// TransactionStateTopic, finishes after a crash the commits it had
// decided, and aborts transactions left open past their timeout. A
// consumer group's offsets join a transaction through a
// [TxnOffsetCommitter], for exactly-once consume-transform-produce (see
// examples/exactlyonce).
//
// # The partition log: Log
//
// A [Log] is one partition in a directory, usable on its own or under a
// replication layer: a sequence of segments (Kafka's .log, .index and
// .timeindex files), a leader epoch cache and checkpoint files. Appends
// from many goroutines are coalesced into one write and one fsync (group
// commit); reads return whole batches as file slices that can be sent with
// sendfile, or records through an iterator; Wait blocks until more is
// readable. After a crash, Open scans only what lies past the recovery
// point and cuts a torn tail there; corruption below it is an error, never
// a silent cut. Open also checks that the segments it finds follow each
// other and reach the recovery point, so that a segment deleted or cut by
// hand is an error too. The fields of a batch header that Kafka's CRC does
// not cover (base offset, length, leader epoch) are checked wherever
// headers are read, reads included: each batch follows the one before and
// carries the epoch the epoch cache gives its offsets. A Log locks its
// directory, so that one writer at a time appends.
//
// Replication uses the rest of Log's methods: leader epochs
// (SetLeaderEpoch, EndOffsetForEpoch, the EpochCache), follower appends
// (AppendReplicated), truncation (TruncateTo) and a high watermark set
// from outside (Options.ExternalHighWatermark, SetHighWatermark). A
// replica, which has another copy on its leader, may also open its log
// with Options.VerifyOnOpen and Options.TruncateCorruption, which cut a
// damaged log before its first bad batch and report it (Damage), and its
// Dir with DirOptions.Replicated, which coordinates no transactions of its
// own. A queue user needs none of them.
//
// # Offsets
//
// The offsets are Kafka's: the log start offset is the first readable
// offset, the high watermark the end of what is replicated
// (ReadUncommitted), the last stable offset the end of what read-committed
// consumers may read (ReadCommitted: the high watermark, unless a
// transaction is open), the log end offset the next offset to be written
// (ReadLogEnd, what followers replicate). All are exclusive ends or
// inclusive starts as in Kafka.
//
// A Log keeps its partition's producer state (package idempotence): a
// batch with a producer id is checked by Kafka's sequence and epoch rules
// as it is appended, a producer's retry is answered with the offsets the
// original got, transaction markers end transactions, and the aborted ones
// are indexed for read-committed readers. The state is snapshotted beside
// the segments at each roll and on Close, as Kafka does.
package log
