// Package kafka checks Strand's batches against Kafka clients that Strand
// did not write. It lives in its own module so that the clients never
// become dependencies of the library; its tests are the whole point.
package kafka
