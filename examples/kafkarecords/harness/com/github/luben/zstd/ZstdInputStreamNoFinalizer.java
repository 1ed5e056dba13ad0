// A stand-in for zstd-jni's input stream: see BufferPool. Opening one
// throws, so Kafka reports a zstd batch as one it cannot decompress.
package com.github.luben.zstd;

import java.io.IOException;
import java.io.InputStream;

public class ZstdInputStreamNoFinalizer extends InputStream {
    public ZstdInputStreamNoFinalizer(InputStream in, BufferPool pool) throws IOException {
        throw new IOException("zstd-jni is not on the harness's classpath");
    }

    public int read() { throw new UnsupportedOperationException(); }
}
