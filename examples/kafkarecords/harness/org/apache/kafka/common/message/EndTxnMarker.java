// EndTxnMarker stands in for the class Kafka generates from
// clients/src/main/resources/common/message/EndTxnMarker.json (a data
// message, valid versions 0, no flexible versions, one field: int32
// CoordinatorEpoch), which a source checkout does not hold. It reads and
// writes that one field as a generated version-0 reader and writer do;
// the version prefix and its checks are Kafka's own (MessageUtil,
// EndTransactionMarker).
package org.apache.kafka.common.message;

import org.apache.kafka.common.protocol.MessageSizeAccumulator;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;
import org.apache.kafka.common.protocol.Writable;

public class EndTxnMarker extends VersionZeroData {
    private int coordinatorEpoch;

    public EndTxnMarker() { }

    public EndTxnMarker(Readable readable, short version) { read(readable, version); }

    @Override
    public void read(Readable readable, short version) { coordinatorEpoch = readable.readInt(); }

    @Override
    public void write(Writable writable, ObjectSerializationCache cache, short version) { writable.writeInt(coordinatorEpoch); }

    @Override
    public void addSize(MessageSizeAccumulator size, ObjectSerializationCache cache, short version) { size.addBytes(4); }

    public int coordinatorEpoch() { return coordinatorEpoch; }

    public EndTxnMarker setCoordinatorEpoch(int v) {
        coordinatorEpoch = v;
        return this;
    }
}
