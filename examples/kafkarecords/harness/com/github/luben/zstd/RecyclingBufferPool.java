// A stand-in for zstd-jni's RecyclingBufferPool: see BufferPool.
package com.github.luben.zstd;

import java.nio.ByteBuffer;

public final class RecyclingBufferPool implements BufferPool {
    public static final BufferPool INSTANCE = new RecyclingBufferPool();

    private RecyclingBufferPool() { }

    public ByteBuffer get(int capacity) { throw new UnsupportedOperationException("zstd-jni is not on the harness's classpath"); }

    public void release(ByteBuffer buffer) { }
}
