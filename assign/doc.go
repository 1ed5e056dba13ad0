// Package assign computes Kafka's consumer group assignments and replica
// placements as pure functions over plain data, so that they can be used by
// a group coordinator and unit-tested in isolation.
//
// The client-side assignors Range, RoundRobin, Sticky and CooperativeSticky
// and the KIP-848 server-side assignors Uniform and ServerRange implement
// Assignor. Range, RoundRobin and ServerRange give Kafka's results bit for
// bit; the sticky assignors give Kafka's results on Kafka's test vectors and
// hold Kafka's invariants everywhere (see Sticky). PlaceReplicas is Kafka's
// replica placement and GenerateReassignment its reassignment plan
// generator, reading and writing the JSON of kafka-reassign-partitions.
//
// Members are given in JoinGroup order, which decides ties where Kafka's
// result depends on the order of a java.util.HashMap. Member ids and topic
// names are compared as Java compares strings.
//
// # Performance
//
// Measured with examples/benchmarks on a shared 2-core machine (median of
// three runs), Sticky assigns 2,000 members subscribed to 500 topics of 2,000
// partitions (one million partitions) in 0.2-0.35 s fresh and 0.6 s after a
// member left, 2 to 10 times faster than franz-go's sticky balancer with
// about 1% of its allocations; Range is 4 to 8 times faster than franz-go's.
// Figures per shape are in examples/benchmarks/ASSIGN.md.
package assign
