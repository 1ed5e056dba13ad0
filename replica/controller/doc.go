// Package controller is the replication controller of package replica, as
// a deterministic state machine: it registers brokers with epochs, one
// per incarnation (a retried registration gets its epoch back, a restart
// a new one), fences those whose session ends, runs controlled shutdowns,
// elects partition leaders (clean, from KIP-966's eligible leader
// replicas, unclean only when a topic allows it or an operator asks for
// one partition's, preferred) and validates the AlterPartition requests
// of partition leaders, compare-and-set on the partition epoch, refusing
// ISR members named in a broker epoch they no longer have (KIP-903). Its
// LeaderAndISR messages name the broker epoch of their addressee
// (KIP-380). Topics have the id their creator drew (KIP-516) and configs
// by Kafka's names, checked before any record and kept as KRaft keeps them
// (ConfigRecord; IncrementalAlterConfigs and the legacy AlterConfigs), of
// which the controller reads min.insync.replicas and
// unclean.leader.election.enable itself; a topic is deleted with its
// partitions and configs by one RemoveTopicRecord.
//
// It keeps a cluster's SASL/SCRAM credentials and ACLs as KRaft keeps
// them in the metadata log (UserScramCredentialRecord and
// AccessControlEntryRecord: AlterScramCredentials, AlterACLs), so that
// every broker authenticates and authorizes by the same ones; the brokers
// check Kafka's per-request rules, the controller that each credential
// and ACL it writes is well formed.
//
// A broker reports its replicas whose logs failed (ReportOffline, and
// Registration.Offline at a start; KIP-858's offline log directories,
// per replica since a Strand node has one data directory and its
// replicas fail one by one): they leave their ISRs and ELRs, lose their
// leadership, and are never elected until reported online again, when
// they rejoin the ISR through their leader's AlterPartition. A broker
// that restarts after an unclean shutdown names the topics whose
// replicas acknowledged only synced records (Registration.Synced): those
// keep their place in the ELR, which KIP-966 takes from an unclean
// broker because Kafka acknowledges from the page cache, so that a
// cluster that lost every node elects its leaders again, cleanly.
//
// All its state is a sequence of Records: State.Apply is the only way the
// state changes, and replaying the records gives the state the active
// controller lived through. An application keeps the records in any
// replicated store (a raft log, a database); whichever node leads that
// store builds a Controller over the replayed State with New, in a new
// controller epoch, which fences the records and messages of the previous
// one.
//
// It lives beside package replica rather than inside it because the two
// meet only through messages (LeaderAndISR, AlterPartition): a node runs
// replica.Partitions and never the controller's code, and the controller
// never touches a log.
package controller
