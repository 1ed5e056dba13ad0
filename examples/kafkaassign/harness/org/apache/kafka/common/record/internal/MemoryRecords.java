// A stand-in for Kafka's MemoryRecords: see BaseRecords.
package org.apache.kafka.common.record.internal;

import java.nio.ByteBuffer;

public final class MemoryRecords implements BaseRecords {
    private final ByteBuffer buffer;

    private MemoryRecords(ByteBuffer buffer) {
        this.buffer = buffer;
    }

    public static MemoryRecords readableRecords(ByteBuffer buffer) {
        return new MemoryRecords(buffer);
    }

    public ByteBuffer buffer() {
        return buffer.duplicate();
    }

    @Override
    public int sizeInBytes() {
        return buffer.limit();
    }
}
