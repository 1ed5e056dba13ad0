// A stand-in for Kafka's BaseRecords, which the protocol type RECORDS names:
// the assignors never read or write records.
package org.apache.kafka.common.record.internal;

public interface BaseRecords {
    int sizeInBytes();
}
