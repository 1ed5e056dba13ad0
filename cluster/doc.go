// Package cluster is one node of a replicated Strand cluster, composed
// once: the partitions' replicas (package replica, over a log.Dir), the
// controller when the node is the active one (package
// replica/controller), and the coordinators of the internal partitions it
// leads. The application supplies two things and nothing else: a
// Transport that carries the node's messages to the other nodes by id,
// and a MetadataLog, the replicated log of the controller's records.
//
// A single node needs no consensus: OpenFileMetadata is a one-voter
// MetadataLog on a local file. NewMemoryMetadata is one in memory, for
// tests; examples/raftlog implements one with etcd raft in a module of its
// own, so that this one depends on no consensus engine.
package cluster
