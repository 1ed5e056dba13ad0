// NotGenerated stands in for the message classes Kafka generates from its
// JSON schemas at build time, which a source checkout does not hold. The
// record classes name some that the harness never uses (KRaft control
// records, principal data); those extend NotGenerated and throw if used.
package org.apache.kafka.common.message;

import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageSizeAccumulator;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;
import org.apache.kafka.common.protocol.Writable;
import org.apache.kafka.common.protocol.types.RawTaggedField;

import java.util.List;

public abstract class NotGenerated implements ApiMessage {
    static UnsupportedOperationException unused() {
        return new UnsupportedOperationException("a generated message class the harness does not provide");
    }

    NotGenerated() { }

    NotGenerated(Readable readable, short version) { throw unused(); }

    public short apiKey() { throw unused(); }
    public short lowestSupportedVersion() { throw unused(); }
    public short highestSupportedVersion() { throw unused(); }
    public void addSize(MessageSizeAccumulator size, ObjectSerializationCache cache, short version) { throw unused(); }
    public void write(Writable writable, ObjectSerializationCache cache, short version) { throw unused(); }
    public void read(Readable readable, short version) { throw unused(); }
    public List<RawTaggedField> unknownTaggedFields() { throw unused(); }
    public Message duplicate() { throw unused(); }
}
