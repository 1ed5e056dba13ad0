// Package group is Kafka's consumer group coordinator as a deterministic
// state machine: classic groups (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) and their committed offsets, with the records of Kafka's
// __consumer_offsets topic as its durable form.
//
// # The state machine
//
// A Coordinator holds the groups of one offsets log. Requests are method
// calls, each tagged with a RequestID the caller chooses; time moves only by
// Tick, and member ids come from an injected random source, so a run is
// reproducible. What the coordinator wants done is handed out by Ready: the
// records to append to the offsets log and the responses to deliver, in
// that order. No goroutine runs inside; the owner drives it from one.
//
// The rules are Kafka's (GroupMetadataManager, ClassicGroup,
// OffsetMetadataManager in Kafka's group-coordinator module), including
// member ids handed out before a first join (KIP-394), the initial
// rebalance delay, the protocol vote, static members that restart without a
// rebalance (KIP-345) and leaders told to skip the assignment (KIP-814).
// Cooperative rebalancing (KIP-429) needs nothing of the coordinator but
// cheap back-to-back rebalances. Where Kafka's choice depends on HashMap
// order (a new leader, the members listed to the leader, a tied vote), this
// package takes join order.
//
// Consumer groups of KIP-848 (ConsumerGroupHeartbeat) are served too, with
// member epochs, a target assignment computed by assign.Uniform or
// assign.ServerRange and reconciliation that hands a partition to a member
// only after its previous owner revoked it. They are written to the offsets
// log as Kafka writes them (records 3-8) and come back from it whole. A
// group converts between the two protocols online, as Kafka 3.8+ does
// under Config.MigrationPolicy: a classic group with members becomes a
// consumer group when a member joins it with ConsumerGroupHeartbeat, its
// classic members staying, served through JoinGroup, SyncGroup and
// Heartbeat; and back when the last member speaking the consumer protocol
// leaves. An empty group changes protocol whatever the policy.
//
// Errors are Kafka's: every response's Err is nil or matches one of the Err
// variables, which carry Kafka's code and name (see Code).
//
// Committed offsets follow Kafka's OffsetMetadataManager: who may commit
// (generation, member id, static member fencing), offsets of transactions
// (KIP-447) that count at their COMMIT marker, expiration after
// offsets.retention.minutes, and deletion of offsets and of Empty groups.
//
// # The offsets log
//
// Records are Kafka's bytes: OffsetCommit keys (version 1) and values
// (version 3, or 1 with an expire timestamp), GroupMetadata keys (version 2)
// and values (version 3), the six records of consumer groups (key versions
// 3-8, value version 0, with topic ids derived from names: TopicID), and
// tombstones; Decode reads every version Kafka has written. The coordinator's owner stores them in a compacted log: it
// appends each Ready's records in order, one offset each, before delivering
// that Ready's responses; a record with a Producer goes in a transactional
// batch of that producer. Transaction markers, which the transaction
// coordinator has written to the log, are reported with ReplayTxnMarker
// between two Readys. On start the owner replays the log with Replay and
// ReplayTxnMarker and calls Loaded. If an append fails, the state the coordinator moved to is not
// durable: the owner calls Unload, answers the responses it produces with
// an error clients retry, and starts over from the log, as Kafka's
// coordinator reverts to its last written offset. A replay gives the committed offsets exactly as they
// were and every group that was at rest (Stable or Empty) as it was; a
// group caught in a rebalance comes back as its last persisted generation,
// whose members rejoin, as in Kafka.
//
// # Service
//
// Service is that owner for a log.Dir: one Coordinator per partition of the
// compacted __consumer_offsets topic, a group on the partition Kafka picks
// for it (PartitionFor), all driven from one goroutine. Its methods block
// until their request is answered, after the records it made are durable;
// Lag measures a group against the Dir's high watermarks or last stable
// offsets. TxnCommitOffsets and EndTxn are what a transactional producer
// needs: offsets committed in its transaction, in a transactional batch of
// it, and the marker that commits or aborts them.
//
// Package consumer has the member that goes with a Service: a Consumer in
// the same process, reading the Service's Dir.
package group
