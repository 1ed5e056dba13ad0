// Package assign computes Kafka's consumer group assignments and replica
// placements as pure functions over plain data, so that they can be used by
// a group coordinator and unit-tested in isolation.
//
// The client-side assignors Range, RoundRobin, Sticky and CooperativeSticky
// and the KIP-848 server-side assignors Uniform and ServerRange implement
// Assignor. PlaceReplicas is Kafka's replica placement and
// GenerateReassignment its reassignment plan generator, reading and writing
// the JSON of kafka-reassign-partitions.
//
// # Kafka's results
//
// Every assignor gives the result of Kafka's own code (apache/kafka trunk
// d79bd502ec, August 2026), which examples/kafkaassign checks by running
// Kafka's assignors, compiled from its source, beside these on thousands of
// random groups: Range, RoundRobin, ServerRange, Uniform and the sticky
// assignors agree on every group, except where Kafka's sticky assignors are
// wrong (below).
//
// Kafka's results depend on the iteration order of Java hash maps and sets,
// which this package reproduces: members are given in JoinGroup order, which
// decides ties within a bucket of the java.util.HashMap the group leader
// (Sticky) or the coordinator (Uniform) keeps them in; Uniform orders topics
// by their ids (Topic.ID); the sticky assignors pick the partition to move
// back in java.util.HashSet<TopicPartition> order. Member ids and topic names
// are compared as Java compares strings. A member's owned partitions are
// taken as put in name order, partitions ascending.
//
// # Where Kafka is wrong
//
// On some groups with unequal subscriptions Kafka's sticky assignors
// (clients/src/main/java/org/apache/kafka/clients/consumer/internals/AbstractStickyAssignor.java)
// give an invalid plan, fail, or never return. Strand gives a valid,
// balanced plan instead (TestStickyDeviation*, TestStickyIssue16GroupEnds):
//
//   - AbstractStickyAssignor.java:149-150 (allSubscriptionsEqual): when the
//     first member in HashMap order subscribes to nothing, the next member's
//     topics become the reference, the group passes for one of equal
//     subscriptions, and the constrained builder gives partitions to members
//     whatever they subscribe to, the empty subscription included. Strand
//     takes such a group as one of unequal subscriptions.
//   - AbstractStickyAssignor.java:1411-1413 (performReassignments): a
//     partition goes back to its owner of an older generation without
//     asking whether that member still subscribes to its topic. Strand gives
//     it back only to a subscriber. (Kafka may move it on again, so even
//     where Kafka's final plan is valid, Strand's can differ.)
//   - AbstractStickyAssignor.java:1412: when that older owner takes no part
//     in the balancing (set aside at line 1356), Kafka throws a
//     NullPointerException.
//   - AbstractStickyAssignor.java:308-326 (getTheActualPartitionToBeMoved)
//     with the loop at 1394-1449: a partition that moved in this rebalance
//     makes Kafka move instead one that went the opposite way, from
//     whichever member holds it, even one no more loaded than the receiver;
//     on some groups (issue 16's) the passes never end. Strand follows Kafka
//     move for move, but only so far (see Termination).
//
// # Termination
//
// Every loop ends within a bound that is checked where it is not evident:
// the first fills deal each partition once; Uniform's heterogeneous
// balancing makes at most 16 rounds over the topics, each topic's turn
// ending within subscribers + partitions + 1 steps (checked); the sticky
// balancing moves a partition from a member to one with at least two fewer
// partitions, which lowers the sum of squares of the sizes by two at least,
// except for the moves of the last item above. Strand counts those; past as
// many as the group has partitions it restarts the balancing from its start
// with improving moves only, which ends after at most half the initial sum
// of squares moves. Both counts are checked; a broken bound is
// ErrInternal, never a hang.
//
// # Performance
//
// Measured with examples/benchmarks on a shared 2-core machine (median of
// three runs), Sticky assigns 2,000 members subscribed to 500 topics of 2,000
// partitions (one million partitions) in 0.2-0.35 s fresh and 0.6 s after a
// member left, 2 to 10 times faster than franz-go's sticky balancer with
// about 1% of its allocations; Range is 4 to 8 times faster than franz-go's.
// Figures per shape, Uniform's included, are in examples/benchmarks/ASSIGN.md.
package assign
