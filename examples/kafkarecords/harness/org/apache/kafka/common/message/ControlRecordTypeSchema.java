// ControlRecordTypeSchema stands in for the class Kafka generates from
// clients/src/main/resources/common/message/ControlRecordTypeSchema.json (a
// data message, valid versions 0, no flexible versions, one field: int16
// Type), which a source checkout does not hold. It reads and writes that one
// field as a generated version-0 reader and writer do; the version prefix and
// its checks are Kafka's own (MessageUtil, ControlRecordType).
package org.apache.kafka.common.message;

import org.apache.kafka.common.protocol.MessageSizeAccumulator;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;
import org.apache.kafka.common.protocol.Writable;

public class ControlRecordTypeSchema extends VersionZeroData {
    private short type;

    public ControlRecordTypeSchema() { }

    public ControlRecordTypeSchema(Readable readable, short version) { read(readable, version); }

    @Override
    public void read(Readable readable, short version) { type = readable.readShort(); }

    @Override
    public void write(Writable writable, ObjectSerializationCache cache, short version) { writable.writeShort(type); }

    @Override
    public void addSize(MessageSizeAccumulator size, ObjectSerializationCache cache, short version) { size.addBytes(2); }

    public short type() { return type; }

    public ControlRecordTypeSchema setType(short v) {
        type = v;
        return this;
    }
}
