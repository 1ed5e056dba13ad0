// A stand-in for slf4j's Level: see org.slf4j.Logger.
package org.slf4j.event;

public enum Level { ERROR, WARN, INFO, DEBUG, TRACE }
