// A stand-in for zstd-jni's BufferPool so that Kafka's ZstdCompression
// compiles without zstd-jni. Strand writes and reads no zstd batches; a zstd
// batch given to the harness fails in the stream stand-ins.
package com.github.luben.zstd;

import java.nio.ByteBuffer;

public interface BufferPool {
    ByteBuffer get(int capacity);

    void release(ByteBuffer buffer);
}
