// A stand-in for zstd-jni's output stream: see BufferPool.
package com.github.luben.zstd;

import java.io.IOException;
import java.io.OutputStream;

public class ZstdOutputStreamNoFinalizer extends OutputStream {
    public ZstdOutputStreamNoFinalizer(OutputStream out, BufferPool pool, int level) throws IOException {
        throw new IOException("zstd-jni is not on the harness's classpath");
    }

    public void write(int b) { throw new UnsupportedOperationException(); }
}
