// Package log implements a partition's durable log and a data directory of
// many partitions, with Kafka's on-disk format and rules.
//
// A Log is one partition in a directory: a sequence of segments (Kafka's
// .log, .index and .timeindex files), a leader epoch cache and checkpoint
// files. Appends from many goroutines are coalesced into one write and one
// fsync (group commit); reads return whole batches as file slices that can
// be sent with sendfile, or records through an iterator; Wait blocks until
// more is readable. The fsync policy (FsyncAlways, FsyncEvery,
// FsyncInterval, FsyncNever) says what a power failure can take away.
// After a crash, Open scans only what lies past the recovery point and cuts
// a torn tail there; corruption below it is an error, never a silent cut.
// Open also checks that the segments it finds follow each other and reach
// the recovery point, so that a segment deleted or cut by hand is an error
// too. A Log locks its directory, so that one writer at a time appends.
// A failed fsync fails the log (ErrFailed) until the process reopens it:
// what it wrote since the last good sync may or may not be on the disk,
// and a restart recovers whatever is (see Dir for what that means).
//
// A Dir is a data directory of topics, each split into partitions that are
// Logs in folders named <topic>-<partition>. Partitions open when first
// used and close when too many files are open. A Producer gathers records
// from many goroutines into one batch per partition, routed by Kafka's
// partitioners (murmur2 for keys, sticky for keyless records). Retention
// deletes whole old segments, never at or past the high watermark.
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
