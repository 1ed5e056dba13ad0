// A stand-in for slf4j's Logger so that Kafka's record classes compile
// without slf4j: every message is dropped.
package org.slf4j;

public interface Logger {
    default boolean isTraceEnabled() { return false; }
    default boolean isDebugEnabled() { return false; }
    default boolean isInfoEnabled() { return false; }
    default boolean isWarnEnabled() { return false; }
    default boolean isErrorEnabled() { return false; }
    default void trace(String msg, Object... args) { }
    default void debug(String msg, Object... args) { }
    default void info(String msg, Object... args) { }
    default void warn(String msg, Object... args) { }
    default void error(String msg, Object... args) { }
}
