package replica

// bugs are the historical Kafka bugs a test can switch back on, to show
// that the simulator and the scenarios catch them. They take effect only
// in a build with the strandbugs tag (go test -tags strandbugs ./replica),
// as pebble's invariants do: elsewhere bugsBuild is false, and the
// compiler drops every branch that tests a switch.
type bugs struct {
	// noEpochStartGuard expands the ISR without KIP-320's rule 4.
	noEpochStartGuard bool
	// reuseEpoch lets a restarted leader lead an epoch its log holds
	// (KAFKA-10527).
	reuseEpoch bool
	// truncateToHighWatermark truncates a new follower to its high
	// watermark and fetches without epochs (before KIP-101).
	truncateToHighWatermark bool
	// pre279 ignores the epoch of a diverging answer (KIP-101 without
	// KIP-279).
	pre279 bool
	// hwBeforeTruncation applies the high watermark of a diverging answer
	// at once and truncates only on the next tick (KAFKA-14704).
	hwBeforeTruncation bool
	// preKIP380 takes the controller's messages whatever broker epoch
	// they are for, as brokers did before KIP-380.
	preKIP380 bool
	// preKIP903 sends fetches and ISR proposals without broker epochs and
	// keeps a follower's state when its epoch changes, as before KIP-903
	// (KAFKA-14139).
	preKIP903 bool
	// retriesFromLog answers a producer's retry of a batch its log holds
	// on any node, leading or not, once the node's own high watermark
	// passes the batch: the check Strand's cluster example once made
	// outside the state machine, which lost acknowledged records when a
	// deposed or restarted leader held a batch it never replicated
	// (Kafka checks duplicates inside the leader's append).
	retriesFromLog bool
}
