// A stand-in for Kafka's Utils, whose real class pulls in most of the client
// (configs, security, records). These are the few helpers the assignors and
// the protocol types they use call.
package org.apache.kafka.common.utils;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;

public final class Utils {
    private Utils() { }

    public static <T extends Comparable<? super T>> List<T> sorted(Collection<T> collection) {
        List<T> list = new ArrayList<>(collection);
        Collections.sort(list);
        return Collections.unmodifiableList(list);
    }

    /** Reads length bytes at the buffer's position, leaving the position where it is. */
    public static String utf8(ByteBuffer buffer, int length) {
        byte[] bytes = new byte[length];
        buffer.duplicate().get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    public static byte[] utf8(String string) {
        return string.getBytes(StandardCharsets.UTF_8);
    }

    public static int utf8Length(CharSequence s) {
        return s.toString().getBytes(StandardCharsets.UTF_8).length;
    }

    public static <T> T newInstance(Class<T> c) {
        try {
            return c.getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    public static <T> Class<? extends T> loadClass(String klass, Class<T> base) throws ClassNotFoundException {
        return Class.forName(klass).asSubclass(base);
    }
}
