// Package log implements one partition's durable log (log.Log) and a data
// directory of many partitions (log.Dir), with Kafka's on-disk format and
// rules: segments, leader epochs, partitioners.
package log
