// A stand-in for snappy-java's output stream: see SnappyInputStream.
package org.xerial.snappy;

import java.io.OutputStream;

public class SnappyOutputStream extends OutputStream {
    public SnappyOutputStream(OutputStream out) {
        throw new UnsupportedOperationException("snappy-java is not on the harness's classpath");
    }

    public void write(int b) { throw new UnsupportedOperationException(); }
}
