// Package replica replicates a partition's log with Kafka's ISR protocol,
// as a state machine that the application drives over its own transport.
//
// A Partition is one partition on one node, in the style of etcd-io/raft's
// RawNode: deterministic and single-threaded, with no goroutines, clock,
// randomness or network inside. Time arrives by Tick, messages by Step
// (LeaderAndISR from the controller, Produce from clients, Fetch and
// FetchResponse between replicas, AlterPartitionResponse from the
// controller), and what the application must do comes out of Ready: log
// writes, messages to send, produce results to deliver. The rules are
// Kafka's current ones, with the fixes of KIP-101, KIP-279, KIP-320,
// KIP-497 and KIP-966's strict min ISR: a follower fetches with (current
// leader epoch, fetch offset, last fetched epoch); the leader answers a
// diverging log with the epoch and end where it diverged and the follower
// truncates, iterating until the logs match; the high watermark is the
// lowest log end in the maximal ISR and does not move while the ISR is
// below MinInsyncReplicas; the ISR shrinks when a follower has not caught
// up for ReplicaLagTicks and grows when it holds the high watermark and the
// leader epoch's start offset, having fetched in this epoch; ISR changes
// go to the controller compare-and-set on the partition epoch, one at a
// time, an expansion counting at once and a shrink only once committed.
//
// Broker epochs tell a node's lives apart (SetBrokerEpoch, with the epoch
// the controller registered the node in). A partition takes the
// controller's LeaderAndISR only for its own broker epoch (KIP-380), so
// that a restarted node does not act on what was meant for its previous
// life; and a follower's fetches carry its epoch, which the leader names
// for each member of a proposed ISR, so that the controller admits no
// member on the strength of fetches of a previous life it may have lost
// (KIP-903, KAFKA-14139).
//
// # How the state machine reaches its log
//
// Reads are direct, writes are handed out. The partition reads its Log
// (an interface that *log.Log and *log.Partition satisfy) synchronously
// where an answer needs the log's content: a leader reads records and
// epoch ends to answer a fetch; a follower reads its offsets and epochs
// before it fetches and when it must find where to truncate. Reads come
// from the page cache and never wait for an fsync. Every change to the
// log, on the other hand (appends, truncations, the leader epoch, the high
// watermark), is a Write in Ready, and the partition learns it is done
// when the application calls Advance. An append under FsyncAlways returns
// only after its fsync; were the state machine to call it, one slow disk
// would stall every partition the application drives from the same loop,
// which is what etcd raft's AsyncStorageWrites and Kafka's separate
// request and fetcher threads avoid. Handed out, the writes of each
// partition can run on their own goroutine (in order), while the loop
// goes on stepping fetches and produces for this and every other
// partition; several Readies may be outstanding.
//
// To keep this sound the partition reads only what no outstanding write
// changes: a follower fetches and truncates only when all its writes are
// applied (its fetch offset is then what its log holds, which the leader
// takes as an acknowledgement: pull replication makes the fetch the ack;
// under SyncedAcks only a truncation or epoch change must be applied);
// a leader answers fetches only once its epoch write is applied, and then
// reads only what it appended itself. Messages and results in a Ready can
// be sent at once: the partition emits them only when what they report is
// done (an AcksLeader result after its append is applied, an AcksAll one
// when the high watermark passes it).
//
// The cycle, for each partition, is:
//
//	rd := p.Ready()
//	send rd.Messages, deliver rd.Results
//	apply rd.Writes in order (ApplyWrites), on any goroutine
//	p.Advance(rd)  // on the partition's goroutine, in order
//
// Durability is the log's fsync policy: a follower's fetch offset is what
// its writes applied, so under FsyncAlways everything counted towards the
// high watermark is on disk on every ISR member. Config.SyncedAcks goes
// further than Kafka under the other policies: replicas report what they
// synced, and only that counts. Since its fetch offset then acknowledges
// nothing, a follower under SyncedAcks fetches the next records while the
// last ones are still being written and synced, and fetches again as soon
// as a sync completes to report it: under FsyncAlways too, SyncedAcks lets
// a follower's fetches overlap its fsyncs.
//
// # Idempotent producers
//
// The leader checks a producer's batch by Kafka's sequence rules inside
// its own append path, as Kafka's leader does
// (UnifiedLog.analyzeAndValidateProducerState): against a producer state
// that is the log's, read when its epoch began, ahead of it by the appends
// it handed out. A retry of one of the producer's last five batches
// appends nothing and is answered with the original's offsets
// (ProduceResult.Duplicate), through the same rules as any produce:
// AcksAll once the high watermark passes the original, NOT_LEADER_OR_FOLLOWER
// if the leader is deposed first. Only the leader in its current epoch
// answers a retry: a follower, or a deposed leader, may hold a batch that
// it never replicated and that the new leader's log will replace.
//
// Every produce the leader accepts ends in exactly one ProduceResult; one
// it refuses returns the refusal from Step. Nothing is dropped silently.
package replica
