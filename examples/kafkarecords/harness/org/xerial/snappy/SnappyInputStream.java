// A stand-in for snappy-java's input stream so that Kafka's
// SnappyCompression compiles without snappy-java. Strand writes and reads no
// snappy batches; opening one throws, so Kafka reports a snappy batch as one
// it cannot decompress.
package org.xerial.snappy;

import java.io.IOException;
import java.io.InputStream;

public class SnappyInputStream extends InputStream {
    public SnappyInputStream(InputStream in) throws IOException {
        throw new IOException("snappy-java is not on the harness's classpath");
    }

    public int read() { throw new UnsupportedOperationException(); }
}
